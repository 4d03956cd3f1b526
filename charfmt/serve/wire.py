"""What every door of ``charfmt serve`` answers with: OpenAI-shaped errors, server-sent events, a client gone.

Every failure of a request or a turn is ``{"error": {"message", "type", "param", "code"}}``
with the right status (:func:`failure` says which), never a traceback, never a secret (a key
an upstream quoted is ``***``: :func:`error_body`); a stream that already
began says it in its own shape instead (an error chunk, an ``error`` event).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from starlette.responses import JSONResponse, Response

from charfmt._redact import redact
from charfmt.diagnostics import CharfmtError
from charfmt.serve.prompt import BadTurn
from charfmt.serve.upstreams.base import UpstreamFailure

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import Receive, Scope, Send

_T = TypeVar("_T")

NO_BUFFER: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""Headers of an event stream: no proxy or browser holds its events back."""

STOPPING: Final = "the server is stopping: try again when it is back"
"""The error of an answer the server's stop cut short."""

SERVER_SEND: Final = "charfmt.server_send"
"""The scope key of the ASGI server's own ``send``, past every middleware (``create_app``'s app sets it)."""

_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "upstream_error",
    504: "upstream_timeout",
}


class HTTPFailure(CharfmtError):
    """A request the server refuses: the status, the message, and the request field it is about."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """The OpenAI error object: ``{"error": {"message", "type", "param", "code"}}``, its message's secrets
    written ``***`` (every error a client is sent is made here: HTTP bodies, SSE error chunks, ``/v1/turn``
    events, WebSocket messages)."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": redact(message), "type": kind, "param": param, "code": status}}


def failure(e: BaseException) -> tuple[int, str, str | None, dict[str, str]]:
    """Status, message, param and headers for any failure of a request or a turn."""
    if isinstance(e, HTTPFailure):
        return e.status, str(e), e.param, {}
    if isinstance(e, UpstreamFailure):
        headers = {"Retry-After": str(e.retry_after)} if e.retry_after is not None else {}
        return e.status, str(e), None, headers
    if isinstance(e, BadTurn):
        return 400, str(e), "messages", {}
    if isinstance(e, CharfmtError):
        return 502, f"upstream: {e}", None, {}
    return 500, f"internal error ({type(e).__name__}); see the server log", None, {}


def error_response(
    status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The OpenAI-shaped error answer."""
    return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)


def failure_response(e: BaseException) -> JSONResponse:
    """The OpenAI-shaped error answer for any failure (:func:`failure`)."""
    status, message, param, headers = failure(e)
    return error_response(status, message, param, headers)


_JSON: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""Strict, compact JSON (made once: a stream encodes an event per chunk)."""


def compact_json(obj: Any) -> str:
    """``obj`` as strict, compact JSON, non-ASCII as it is."""
    return _JSON.encode(obj)


def sse(obj: dict[str, Any]) -> bytes:
    """One server-sent event holding ``obj`` as strict JSON."""
    return b"data: " + _JSON.encode(obj).encode() + b"\n\n"


class EventStream(Response):
    """A ``text/event-stream`` answer, its events sent as they come; cancelled when the client goes away.

    Starlette's ``StreamingResponse`` in what a stream of many small events needs: the start goes
    through the middleware (CORS adds its headers there); each event then goes to the server's own
    ``send`` (``SERVER_SEND``: no middleware reads a body), and one task watches for the client's
    leaving, where ``StreamingResponse`` runs a task group of two per answer. When the client goes
    away, the events stop (their generator closed: the upstream request with them), and the
    answer ends quietly, as ``StreamingResponse``'s does. When the server stops (its grace
    period over, it cancels what is left), the events stop too, ``stopped`` is the last event
    sent, and the answer ends as quietly: no traceback in the server's log.
    """

    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[bytes, None], stopped: bytes) -> None:
        self.events = events
        self.stopped = stopped
        self.status_code = 200
        self.background = None
        self.init_headers(NO_BUFFER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server_send: Send = scope.get(SERVER_SEND, send)
        task = asyncio.current_task()
        assert task is not None
        streaming = True

        async def watch() -> bool:
            while (await receive())["type"] != "http.disconnect":
                pass
            if streaming:
                task.cancel()
            return True

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for event in self.events:
                await server_send({"type": "http.response.body", "body": event, "more_body": True})
            await server_send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            task.uncancel()  # the answer ends here: the client went away, or the server stops
            streaming = False
            if not (watcher.done() and not watcher.cancelled()):  # the server stops: say so, if it can be heard
                with contextlib.suppress(Exception):
                    await server_send({"type": "http.response.body", "body": self.stopped, "more_body": False})
        finally:
            streaming = False
            watcher.cancel()
            await self.events.aclose()


async def watch_disconnect(request: Request, work: Awaitable[_T]) -> _T:
    """``work``'s result, or cancel it (and the upstream request) when the client goes away first."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this request's own task cancelled (the server stops): the work with it
        task.cancel()
        await asyncio.wait({task})
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise HTTPFailure(499, "the client went away")
    return task.result()
