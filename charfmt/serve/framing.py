"""HTTP/1.x framing as the transport guard reads it: where each request's head and body end, and each response's.

Sans-I/O, and bounded: :class:`RequestReader` keeps at most one line of what a client sends
(a request line, a header line, a chunk's size) and refuses (:class:`Refusal`) a line, a
count of lines or a head larger than its :class:`HeadLimits`, and a framing two parsers could
read two ways (``Content-Length`` beside ``Transfer-Encoding``, two lengths, a folded line):
the guard then answers, and no byte of it reaches uvicorn's parser. It never changes what it
passes on. :class:`ResponseReader` reads what the server writes back, to know when each
answer ends (the connection is idle, or an error may still be written) and, for an HTTP/1.0
client, takes off the chunked framing its parser would add (such a client reads the body to
the connection's close).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Final

MAX_CHUNK_LINE: Final = 4096
"""Bytes of a chunk-size line (the size in hex and its extensions)."""

MAX_RESPONSE_HEAD: Final = 1 << 20
"""Bytes of a response head the server's own output may take before the reader stops reading it (a tunnel)."""

_NO_BODY: Final = frozenset({204, 304})

NO_HOST: Final = "the request has no Host header (HTTP/1.1 requires one)"
TWO_HOSTS: Final = "the request has more than one Host header"


@dataclass(frozen=True)
class HeadLimits:
    """What a request's head may hold: each limit is refused with the status a client expects."""

    request_line: int = 64 << 10
    """Bytes of the request line (414): httptools reads no URL longer than 65,535 bytes (``GET /v1/turn?say=…``
    carries 7,000 kana, percent-encoded; a longer URL goes by ``POST``)."""
    header_line: int = 32 << 10
    """Bytes of one header line (431)."""
    headers: int = 100
    """Header lines (431), trailers of a chunked body counted too."""
    head_bytes: int = 64 << 10
    """Bytes of all the header lines together (431), the request line apart."""


class Refusal(Exception):
    """What the guard answers instead of passing the request on: its status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class RequestHead:
    """What the response side needs of a request whose head was read."""

    method: bytes
    version: bytes
    """``1.0``, ``1.1`` (the request line's ``HTTP/…``)."""
    upgrade: bool
    """It asks to switch protocols (a WebSocket handshake)."""


class Phase(enum.Enum):
    """Where a reader stands."""

    IDLE = "idle"
    """Between messages: nothing of the next one has come."""
    HEAD = "head"
    BODY = "body"
    """A body of a known length (``Content-Length``)."""
    CHUNK_SIZE = "chunk size"
    CHUNK_DATA = "chunk data"
    CHUNK_END = "chunk end"
    """The line break after a chunk's data."""
    TRAILER = "trailer"
    UNTIL_CLOSE = "until close"
    """A response body that ends with the connection."""
    PASS = "pass"
    """No longer read: the connection switched protocols (or asked to)."""


BODY_PHASES: Final = frozenset({Phase.BODY, Phase.CHUNK_SIZE, Phase.CHUNK_DATA, Phase.CHUNK_END, Phase.TRAILER})


@dataclass
class _Fields:
    """The framing headers of the head being read."""

    lengths: list[bytes] = field(default_factory=list)
    codings: list[bytes] = field(default_factory=list)
    connection: list[bytes] = field(default_factory=list)
    upgrade: bool = False
    hosts: int = 0


def _tokens(values: list[bytes]) -> list[bytes]:
    return [t.strip().lower() for v in values for t in v.split(b",") if t.strip()]


class RequestReader:
    """Reads what a client sends, never holding more than a line of it, refusing what passes a limit."""

    def __init__(self, limits: HeadLimits, heads: deque[RequestHead]) -> None:
        self.limits = limits
        self.heads = heads
        """Requests whose heads were read and whose answers have not ended (the response side pops them)."""
        self.phase = Phase.IDLE
        self.requests = 0
        """Request heads read so far."""
        self._line = bytearray()
        self._lines = 0
        self._head_bytes = 0
        self._request_line: bytes | None = None
        self._fields = _Fields()
        self._left = 0

    def feed(self, data: bytes) -> None:
        """Read ``data``; raises :class:`Refusal` at the first limit passed or ambiguous framing."""
        at, end = 0, len(data)
        while at < end:
            phase = self.phase
            if phase is Phase.PASS:
                return
            if phase is Phase.BODY or phase is Phase.CHUNK_DATA:
                take = min(self._left, end - at)
                self._left -= take
                at += take
                if not self._left:
                    self._body_part_read()
                continue
            if phase is Phase.IDLE:
                self.phase = Phase.HEAD
            newline = data.find(b"\n", at)
            stop = end if newline < 0 else newline + 1
            self._grow(data, at, stop)
            at = stop
            if newline >= 0:
                line = bytes(self._line[:-2] if self._line.endswith(b"\r\n") else self._line[:-1])
                self._line.clear()
                self._on_line(line)

    def _grow(self, data: bytes, start: int, stop: int) -> None:
        """The current line grown by ``data[start:stop]``, within its limit."""
        size = len(self._line) + stop - start
        phase, limits = self.phase, self.limits
        if phase is Phase.HEAD and self._request_line is None:
            if size > limits.request_line:
                why = f"the request line is longer than {limits.request_line:,} bytes (a longer turn: POST /v1/turn)"
                raise Refusal(414, why)
        elif phase is Phase.HEAD or phase is Phase.TRAILER:
            if size > limits.header_line:
                raise Refusal(431, f"a header line is longer than {limits.header_line:,} bytes")
            self._head_bytes += stop - start
            if self._head_bytes > limits.head_bytes:
                raise Refusal(431, f"the request's headers are larger than {limits.head_bytes:,} bytes")
        elif size > MAX_CHUNK_LINE:
            raise Refusal(400, f"a chunk-size line is longer than {MAX_CHUNK_LINE:,} bytes")
        self._line += data[start:stop]

    def _on_line(self, line: bytes) -> None:
        phase = self.phase
        if phase is Phase.HEAD:
            if self._request_line is None:
                self._count_line()
                if line:
                    self._request_line = line
            elif line:
                self._header(line)
            else:
                self._head_read()
        elif phase is Phase.CHUNK_SIZE:
            size = line.partition(b";")[0].strip()
            if not size or len(size) > 15 or size.strip(b"0123456789abcdefABCDEF"):
                raise Refusal(400, "a chunk's size is not a hexadecimal number")
            self._left = int(size, 16)
            self.phase = Phase.CHUNK_DATA if self._left else Phase.TRAILER
        elif phase is Phase.CHUNK_END:
            if line:
                raise Refusal(400, "a chunk's data is longer than its size says")
            self.phase = Phase.CHUNK_SIZE
        elif phase is Phase.TRAILER:
            if line:
                self._count_line()
            else:
                self._done()

    def _count_line(self) -> None:
        self._lines += 1
        if self._lines > self.limits.headers:
            raise Refusal(431, f"the request has more than {self.limits.headers} header lines")

    def _header(self, line: bytes) -> None:
        self._count_line()
        if line[:1] in (b" ", b"\t"):
            raise Refusal(400, "a header line is folded onto the next (obsolete line folding is refused)")
        name, colon, value = line.partition(b":")
        if not colon:
            raise Refusal(400, "a header line has no ':'")
        name = name.strip().lower()
        fields = self._fields
        if name == b"content-length":
            fields.lengths.append(value.strip())
        elif name == b"transfer-encoding":
            fields.codings.append(value)
        elif name == b"connection":
            fields.connection.append(value)
        elif name == b"upgrade":
            fields.upgrade = True
        elif name == b"host":
            fields.hosts += 1

    def _head_read(self) -> None:
        """The head's end: its framing decided (or refused), the request noted for the response side."""
        fields, parts = self._fields, (self._request_line or b"").split()
        version = parts[-1][5:] if len(parts) == 3 and parts[-1].startswith(b"HTTP/") else b"1.1"
        upgrade = fields.upgrade and b"upgrade" in _tokens(fields.connection)
        if fields.hosts > 1 or (not fields.hosts and version != b"1.0"):  # (the parsers differ: one rule for both)
            raise Refusal(400, TWO_HOSTS if fields.hosts else NO_HOST)
        if fields.codings:
            if fields.lengths:
                raise Refusal(400, "a request with both Transfer-Encoding and Content-Length is ambiguous")
            codings = _tokens(fields.codings)
            if not codings or codings[-1] != b"chunked":
                raise Refusal(400, "a request's Transfer-Encoding must end with chunked")
            self.phase = Phase.CHUNK_SIZE
        elif fields.lengths:
            length = fields.lengths[0]
            if any(v != length for v in fields.lengths) or not length.isdigit() or len(length) > 18:
                raise Refusal(400, "a request's Content-Length is not one whole number")
            self._left = int(length)
            self.phase = Phase.BODY if self._left else Phase.IDLE
        else:
            self.phase = Phase.IDLE
        self.heads.append(RequestHead(parts[0] if parts else b"", version, upgrade))
        self.requests += 1
        if upgrade:
            self.phase = Phase.PASS  # what follows is the new protocol's, or nothing (the answer closes)
        elif self.phase is Phase.IDLE:
            self._done()

    def _body_part_read(self) -> None:
        if self.phase is Phase.BODY:
            self._done()
        else:
            self.phase = Phase.CHUNK_END

    def _done(self) -> None:
        """A request read whole: ready for the next."""
        self.phase = Phase.IDLE
        self._lines = self._head_bytes = 0
        self._request_line = None
        self._fields = _Fields()


class ResponseReader:
    """Reads what the server writes: where each answer ends; for HTTP/1.0, its chunked framing taken off."""

    def __init__(self, heads: deque[RequestHead]) -> None:
        self.heads = heads
        self.phase = Phase.IDLE
        self.answered = 0
        """Answers (final responses) written whole."""
        self.upgraded = False
        """A ``101 Switching Protocols`` was written: what follows is the new protocol's."""
        self.answered_upgrade = False
        """The last answer ended was to a request asking to switch protocols, and did not switch."""
        self._head = bytearray()
        self._left = 0
        self._line = bytearray()
        self._unchunk = False
        self._upgrade_asked = False
        self._rewrote = False

    @property
    def between(self) -> bool:
        """No answer is being written (the guard's own answer would not cut into one)."""
        return self.phase is Phase.IDLE

    def feed(self, data: bytes) -> bytes:
        """What to send of ``data`` (the same bytes, but for an HTTP/1.0 client's chunked framing)."""
        if self.passing:
            return data
        end = len(data)
        at = self._whole_chunks(data) if self.phase is Phase.CHUNK_SIZE and not self._unchunk else 0
        if at == end:  # (the usual case: a stream's chunk, written whole)
            return data
        out: list[bytes] = [data[:at]] if at else []
        self._rewrote = False
        while at < end and not self.passing:
            at = self._step(data, at, end, out)
        if not self._rewrote:  # (the usual case: the bytes as the server wrote them)
            return data
        if self.passing:
            out.append(data[at:])
        return b"".join(out)

    def _whole_chunks(self, data: bytes) -> int:
        """Where the chunks written whole at the start of ``data`` end (their size line, data and line break;
        the last, empty chunk apart): uvicorn writes each chunk of a stream so, and they need no line kept."""
        at, end = 0, len(data)
        if self._line:  # (a size line begun in an earlier write)
            return 0
        while True:
            newline = data.find(b"\r\n", at, at + 18)
            if newline <= at:
                return at
            try:
                size = int(data[at:newline], 16)
            except ValueError:
                return at
            stop = newline + 2 + size
            if not size or stop + 2 > end or data[stop : stop + 2] != b"\r\n":
                return at
            at = stop + 2
            if at == end:
                return at

    @property
    def passing(self) -> bool:
        """Nothing more is read: the connection switched protocols (or its output is no HTTP the reader knows)."""
        return self.phase is Phase.PASS

    def _step(self, data: bytes, at: int, end: int, out: list[bytes]) -> int:
        """One step of reading ``data`` from ``at``: the bytes to send appended to ``out``; where it stopped."""
        phase = self.phase
        if phase is Phase.UNTIL_CLOSE:
            out.append(data[at:] if at else data)
            return end
        if phase is Phase.BODY or phase is Phase.CHUNK_DATA:
            take = min(self._left, end - at)
            out.append(data[at : at + take])
            self._left -= take
            if not self._left:
                if phase is Phase.BODY:
                    self._answer_ended()
                else:
                    self.phase = Phase.CHUNK_END
            return at + take
        if phase is Phase.IDLE or phase is Phase.HEAD:
            return self._read_head(data, at, end, out)
        newline = data.find(b"\n", at)  # the chunked framing's lines
        stop = end if newline < 0 else newline + 1
        if self._unchunk:
            self._rewrote = True  # (the framing line left out)
        else:
            out.append(data[at:stop])
        self._line += data[at:stop]
        if newline >= 0:
            line = bytes(self._line).strip()
            self._line.clear()
            self._chunk_line(line)
        return stop

    def _chunk_line(self, line: bytes) -> None:
        phase = self.phase
        if phase is Phase.CHUNK_SIZE:
            try:
                self._left = int(line.partition(b";")[0], 16)
            except ValueError:  # (the server's own output: not expected; read no further)
                self.phase = Phase.PASS
                return
            self.phase = Phase.CHUNK_DATA if self._left else Phase.TRAILER
        elif phase is Phase.CHUNK_END:
            self.phase = Phase.CHUNK_SIZE
        elif phase is Phase.TRAILER and not line:
            self._answer_ended()

    def _read_head(self, data: bytes, at: int, end: int, out: list[bytes]) -> int:
        """A response head: sent as written where it comes in one write; else held back until it is whole."""
        self.phase = Phase.HEAD
        held = len(self._head)
        if not held:
            close = data.find(b"\r\n\r\n", at)
            if close >= 0:
                out.append(self._head_read(data[at : close + 4]))
                return close + 4
        self._head += data[at:end]
        self._rewrote = True
        close = self._head.find(b"\r\n\r\n", max(0, held - 3))
        if close < 0:
            if len(self._head) > MAX_RESPONSE_HEAD:  # (not an HTTP head: read no further)
                out.append(bytes(self._head))
                self._head.clear()
                self.phase = Phase.PASS
            return end
        head = bytes(self._head[: close + 4])
        self._head.clear()
        out.append(self._head_read(head))
        return at + close + 4 - held

    def _head_read(self, head: bytes) -> bytes:
        """A response head: what follows it decided; the head to send (for HTTP/1.0, without chunked)."""
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(None, 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 200
        if status < 200 and status != 101:  # an interim answer (100 Continue): the final one follows
            self.phase = Phase.IDLE
            return head
        request = self.heads.popleft() if self.heads else RequestHead(b"GET", b"1.1", upgrade=False)
        self._upgrade_asked = request.upgrade
        if status == 101:
            self.upgraded = True
            self.phase = Phase.PASS
            return head
        lengths, chunked = [], False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                lengths.append(value.strip())
            elif name == b"transfer-encoding":
                chunked = _tokens([value])[-1:] == [b"chunked"]
        if request.method == b"HEAD" or status in _NO_BODY:
            self._answer_ended()
        elif chunked:
            self.phase = Phase.CHUNK_SIZE
            self._unchunk = request.version == b"1.0"
            if self._unchunk:
                self._rewrote = True
                return _without_chunked(lines)
        elif lengths and lengths[0].isdigit():
            self._left = int(lengths[0])
            self.phase = Phase.BODY if self._left else Phase.IDLE
            if not self._left:
                self._answer_ended()
        else:
            self.phase = Phase.UNTIL_CLOSE
        return head

    def _answer_ended(self) -> None:
        self.phase = Phase.IDLE
        self.answered += 1
        self.answered_upgrade = self._upgrade_asked
        self._unchunk = False


def _without_chunked(lines: list[bytes]) -> bytes:
    """A response head for an HTTP/1.0 client: no ``Transfer-Encoding: chunked`` (its body ends with the connection)."""
    kept = [line for line in lines if line.partition(b":")[0].strip().lower() != b"transfer-encoding"]
    if not any(line.partition(b":")[0].strip().lower() == b"connection" for line in kept[1:]):
        kept.append(b"connection: close")
    return b"\r\n".join(kept) + b"\r\n\r\n"
