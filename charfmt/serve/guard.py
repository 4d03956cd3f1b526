"""The transport guard: what a client's connection may send, and for how long, whichever HTTP parser uvicorn runs.

uvicorn bounds a request's head only with its h11 parser (``h11_max_incomplete_event_size``;
httptools, its default, takes a header line of any size) and has no deadline for a head or a
body: its keep-alive timer is reset by every byte, so a client trickling a byte a second
holds a connection for ever. The guard is an ``asyncio.Protocol`` in front of uvicorn's own
(``protocol_class(inner, limits)``, given to ``uvicorn.Config(http=...)``): it sees every
byte first, reads the framing (:mod:`charfmt.serve.framing`, never more than a line kept),
and passes the bytes on unchanged, or answers itself and closes:

- a request line longer than its limit: 414; a header line, too many header lines or headers
  too large: 431 (before any of it reaches the parser, so memory stays flat);
- a head not whole ``header_seconds`` after its first byte, a body not whole ``body_seconds``
  after its head: 408;
- a connection beyond ``max_connections``: 503 (``Retry-After``);
- ambiguous framing (``Content-Length`` beside ``Transfer-Encoding``...): 400;
- no request ``idle_seconds`` after an answer ended: the connection closed (keep-alive);
- a client that reads nothing of an answer for ``send_seconds``: the connection dropped.

Its answers are OpenAI-shaped JSON, as every other error of the server, and the connection
closes after them (gently: what the client still sends is read and dropped for a moment, so
that it reads the answer before the close). An HTTP/1.0 client's streamed answer loses the
chunked framing uvicorn's httptools protocol gives it, and ends with the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, cast

from charfmt.serve.framing import (
    BODY_PHASES,
    HeadLimits,
    Phase,
    Refusal,
    RequestHead,
    RequestReader,
    ResponseReader,
)

LINGER_SECONDS: Final = 1.0
"""Seconds a refused client's bytes are still read (and dropped) after the guard's answer, before the close."""

CONSOLE: Final = logging.getLogger("charfmt.serve")


@dataclass(frozen=True)
class Limits:
    """Every bound the guard keeps: the head's sizes, the deadlines, the connections."""

    head: HeadLimits = field(default_factory=HeadLimits)
    header_seconds: float = 10.0
    """Seconds from a request's first byte to its head's end (408)."""
    body_seconds: float = 15.0
    """Seconds from a request's head to its body's end (408)."""
    idle_seconds: float = 5.0
    """Seconds a connection may wait for its next request once an answer ended (then closed)."""
    send_seconds: float = 30.0
    """Seconds a client may leave an answer unread while the server has more for it (then dropped)."""
    max_connections: int = 1000
    """Connections open at once (each beyond: 503)."""


@dataclass
class _Open:
    """The connections open, shared by every guard of one server."""

    count: int = 0


def protocol_class(inner: Any, limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class ``inner`` behind a guard of ``limits`` (for ``uvicorn.Config(http=...)``)."""
    return type("GuardedHTTP", (Guard,), {"inner_class": inner, "limits": limits, "open": _Open()})


def answer(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The guard's own answer: the status, OpenAI-shaped JSON, ``Connection: close``."""
    from charfmt.serve.wire import error_body  # noqa: PLC0415 (import cost: starlette, pydantic load on first use)

    body = json.dumps(error_body(status, message), ensure_ascii=False).encode()
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: close", *(f"{k}: {v}" for k, v in headers)]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Guard(asyncio.Protocol):
    """One connection: the bytes read before uvicorn's protocol (``inner``) gets them; its answers read too."""

    inner_class: ClassVar[Any]
    limits: ClassVar[Limits]
    open: ClassVar[_Open]

    def __init__(
        self, config: Any, server_state: Any, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.inner: asyncio.BaseProtocol = self.inner_class(
            config=config, server_state=server_state, app_state=app_state, _loop=_loop
        )
        self._loop = _loop or asyncio.get_event_loop()
        heads: deque[RequestHead] = deque()
        self.requests = RequestReader(self.limits.head, heads)
        self.responses = ResponseReader(heads)
        self.refused = False
        """The guard answered (or dropped the connection): nothing more is passed on either way."""
        self._transport: asyncio.Transport | None = None
        self._counted = False
        self._deadline: asyncio.TimerHandle | None = None
        self._due: tuple[float, str] | None = None
        """When the deadline of the request under way falls (loop time), and of which part (head, body, answer)."""
        self._stage: tuple[int, Phase] = (0, Phase.IDLE)
        self._paused_at: float | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._stalled: asyncio.TimerHandle | None = None
        self._peer = ""

    # --- the transport's calls -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # (uvloop's is one in all but its class)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""
        limit = self.limits.max_connections
        if self.open.count >= limit:
            why = f"the server has {limit:,} connections open, its most (--max-connections): try again shortly"
            self._refuse(503, why, answered=True, headers=(("retry-after", "1"),))
            return
        self.open.count += 1
        self._counted = True
        self.inner.connection_made(_Transport(transport, self))
        self._arm_deadline()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # (read and dropped: the answer is on its way, the close follows)
        reader = self.requests
        if reader.phase is Phase.PASS:
            self._inner_data(data)
            return
        try:
            reader.feed(data)
        except Refusal as r:
            self._refuse(r.status, r.message, answered=self._may_answer(reader))
            return
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if _stage(reader) != self._stage:
            self._arm_deadline()
        if reader.phase is Phase.IDLE and not self.responses.heads and self.responses.between:
            # (a body read whole after its answer ended: the connection is idle from here)
            self._idle = self._loop.call_later(self.limits.idle_seconds, self._close_idle)
        self._inner_data(data)

    def eof_received(self) -> bool | None:
        if self.refused:
            return None
        eof = getattr(self.inner, "eof_received", None)
        return eof() if eof is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._deadline, self._idle, self._stalled):
            if timer is not None:
                timer.cancel()
        if self._counted:
            self.open.count -= 1
            self._counted = False
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()
        if self._stalled is None and not self.refused:
            self._stalled = self._loop.call_later(self.limits.send_seconds, self._drop)

    def resume_writing(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        self.inner.resume_writing()

    # --- what the inner protocol's transport tells the guard -------------------------------------------------

    def paused(self, paused: bool) -> None:
        """The inner protocol stopped (or resumed) reading: the deadline waits while the client cannot send."""
        now = self._loop.time()
        if paused and self._paused_at is None:
            self._paused_at = now
            self._schedule()
        elif not paused and self._paused_at is not None:
            if self._due is not None:
                self._due = (self._due[0] + now - self._paused_at, self._due[1])
            self._paused_at = None
            self._schedule()

    def answered(self) -> None:
        """An answer was written whole (or the connection switched protocols)."""
        responses = self.responses
        if responses.upgraded:
            self._due = None
            self._cancel_deadline()
            return
        if responses.answered_upgrade and self._transport is not None:  # a refused handshake: nothing follows
            self._transport.close()
            return
        if self.requests.phase is Phase.IDLE and not responses.heads and self._idle is None:
            self._idle = self._loop.call_later(self.limits.idle_seconds, self._close_idle)

    # --- inside ----------------------------------------------------------------------------------------

    def _inner_data(self, data: bytes) -> None:
        cast("asyncio.Protocol", self.inner).data_received(data)  # (uvicorn's HTTP and WebSocket protocols)

    def _arm_deadline(self) -> None:
        """The deadline of where the request stands: its head's, its body's, a handshake's answer's, or none."""
        reader, limits = self.requests, self.limits
        self._stage = _stage(reader)
        phase, now = reader.phase, self._loop.time()
        if phase is Phase.HEAD or (phase is Phase.IDLE and not reader.requests):
            self._due = (now + limits.header_seconds, "head")
        elif phase in BODY_PHASES:
            self._due = (now + limits.body_seconds, "body")
        elif phase is Phase.PASS and not self.responses.upgraded:  # a handshake: its answer is due as a head is
            self._due = (now + limits.header_seconds, "answer")
        else:
            self._due = None
        self._schedule()

    def _schedule(self) -> None:
        """The timer set for ``_due`` (none while the inner protocol does not read, or the guard answered)."""
        self._cancel_deadline()
        if self._due is not None and self._paused_at is None and not self.refused:
            self._deadline = self._loop.call_at(self._due[0], self._late, self._due[1])

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self, part: str) -> None:
        self._deadline = self._due = None
        reader = self.requests
        if part == "head" and reader.phase is Phase.IDLE:  # a connection that never sent a byte: closed quietly
            self._refuse(408, "", answered=False)
            return
        seconds = self.limits.header_seconds if part != "body" else self.limits.body_seconds
        why = f"the request's {part} did not arrive within {seconds:g} s"
        self._refuse(408, why, answered=part != "answer" and self._may_answer(reader))

    def _may_answer(self, reader: RequestReader) -> bool:
        """Whether an answer of the guard's would be the answer to the request under way (none is being written,
        and every earlier request has its own)."""
        waiting = 1 if reader.phase in BODY_PHASES else 0  # (its head read: it waits for its answer)
        return self.responses.between and len(self.responses.heads) == waiting

    def _refuse(self, status: int, message: str, *, answered: bool, headers: tuple[tuple[str, str], ...] = ()) -> None:
        """Stop passing anything on; answer ``status`` where ``answered``; close once the client had time to read it."""
        transport = self._transport
        self.refused = True
        self._cancel_deadline()
        if transport is None or transport.is_closing():
            return
        if message:
            CONSOLE.warning("%s - refused %d: %s", self._peer or "-", status, message)
        if answered:
            transport.write(answer(status, message, headers))
        if transport.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                transport.write_eof()
        self._loop.call_later(LINGER_SECONDS, transport.close)

    def _close_idle(self) -> None:
        self._idle = None
        if self._transport is not None and self.requests.phase is Phase.IDLE and self.responses.between:
            self._transport.close()

    def _drop(self) -> None:
        """The client read nothing for ``send_seconds`` while an answer waited for it: the connection dropped."""
        self._stalled = None
        CONSOLE.warning("%s - dropped: the client read nothing for %g s", self._peer or "-", self.limits.send_seconds)
        self.refused = True
        if self._transport is not None:
            self._transport.abort()


def _stage(reader: RequestReader) -> tuple[int, Phase]:
    """Where the request under way stands, as far as its deadline goes: which request, and which part of it."""
    phase = reader.phase
    return reader.requests, Phase.BODY if phase in BODY_PHASES else phase


class _Transport(asyncio.Transport):
    """The transport the inner protocol writes to: the real one, its answers read on their way
    (:class:`ResponseReader`), its protocol switch (a WebSocket) taken by the guard."""

    def __init__(self, real: asyncio.Transport, guard: Guard) -> None:
        super().__init__()
        self._real = real
        self._guard = guard

    def write(self, data: bytes | bytearray | memoryview) -> None:
        guard = self._guard
        if guard.refused:
            return  # (the guard answered: nothing of the inner protocol's may follow)
        responses = guard.responses
        answered, upgraded = responses.answered, responses.upgraded
        out = responses.feed(bytes(data))
        if out:
            self._real.write(out)
        if responses.answered != answered or responses.upgraded != upgraded:
            guard.answered()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def pause_reading(self) -> None:
        self._real.pause_reading()
        self._guard.paused(True)

    def resume_reading(self) -> None:
        self._real.resume_reading()
        self._guard.paused(False)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._guard.inner = protocol  # (the guard stays the real transport's protocol: it still counts the close)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._guard.inner

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._real.get_extra_info(name, default)

    def is_reading(self) -> bool:
        return self._real.is_reading()

    def is_closing(self) -> bool:
        return self._real.is_closing()

    def close(self) -> None:
        self._real.close()

    def abort(self) -> None:
        self._real.abort()

    def can_write_eof(self) -> bool:
        return self._real.can_write_eof()

    def write_eof(self) -> None:
        self._real.write_eof()

    def get_write_buffer_size(self) -> int:
        return self._real.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._real.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._real.set_write_buffer_limits(high, low)
