"""What an OpenAI-compatible server answers, read without I/O, each part through a limit.

Everything a server sends is read through a limit: the status line and headers (at most
``MAX_HEADERS`` headers of at most ``MAX_HEADER_LINE`` bytes), each SSE line and event, a whole
body, an error body, the depth of any JSON value, and the whole stream (the tokens the request
asked for, counted as they arrive, whatever the server does). Every failure of the server is one
:class:`UpstreamError` whose message is one line.

:class:`ReplyReader` reads the headers, an error body, a whole completion and each chunk;
:class:`EventStreamReader` reads an event stream fed as its bytes arrive; :class:`ReplyBody`
reads a body of either shape, as its first bytes say. The sync client
(``charfmt.llm._http_client.Client``, over httpx) and ``charfmt serve``'s async upstream feed
them the bytes they receive, so both read every answer by the same rules.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from charfmt.diagnostics import CharfmtError

if TYPE_CHECKING:
    from charfmt.llm._sdk_chunks import ChunkParts

MAX_LINE: Final = 4 << 20
"""Bytes in one line of an event stream (a longer one, or a body without newlines, is an error)."""

MAX_EVENT: Final = 4 << 20
"""Bytes of ``data:`` in one server-sent event."""

MAX_BODY: Final = 16 << 20
"""Bytes of a whole (non-streamed) ``chat.completion`` body."""

MAX_ERROR_BODY: Final = 64 << 10
"""Bytes of an error body read for its message (the rest is not read)."""

MAX_STREAM: Final = 256 << 20
"""Bytes of one streamed reply in all, whatever it holds."""

MAX_DEPTH: Final = 64
"""Nesting of a JSON value from the server (an OpenAI chunk nests 5 deep)."""

MAX_HEADERS: Final = 100
"""Response headers (as ``http.client`` allows)."""

MAX_HEADER_LINE: Final = 8 << 10
"""Bytes of one response header line (nginx's default buffer)."""

CHARS_PER_TOKEN: Final = 32
"""Characters of text a token may carry, at most: ``max_tokens`` × this bounds a reply's text."""

LINES_PER_TOKEN: Final = 8
"""Event-stream lines per token (a ``data:`` line, a blank line, comments), beyond ``EXTRA_LINES``."""

EXTRA_LINES: Final = 1024
"""Event-stream lines allowed beyond the tokens' (role chunks, usage, keep-alive comments)."""


_SSE_FIELDS: Final = (b"data:", b":", b"event:", b"id:", b"retry:")
_HIGH_FIRST: Final = 0xD800
_HIGH_LAST: Final = 0xDBFF
"""The high (first) halves of UTF-16 surrogate pairs, by number."""


class UpstreamError(CharfmtError):
    """The server could not be reached, broke the protocol, or sent what is not a chat completion."""


def redact_url(url: str) -> str:
    """``url`` as it may be shown: a password in it (``user:secret@``) and key-like query values hidden."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//***@", url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = re.sub(r"(?i)((?:^|&)[^=&]*(?:key|token|secret|password|sig)[^=&]*=)[^&]*", r"\1***", parts.query)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def endpoint_url(url: str) -> str:
    """The chat-completions URL for ``url``: a base URL + ``/chat/completions`` (as the OpenAI
    SDK's ``base_url``), a full ``…/chat/completions`` URL as is, a bare ``http://host:port`` + ``/v1/…``.

    Raises ``CharfmtError`` unless ``url`` is an ``http``/``https`` URL with a host.
    """
    shown = redact_url(url)[:80]
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # a port outside 0-65535 or not a number raises ValueError here
    except ValueError as e:
        raise CharfmtError(f"--endpoint {shown!r} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CharfmtError(f"--endpoint {shown!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080/v1)")
    if port == 0:
        raise CharfmtError(f"--endpoint {shown!r}: port 0 is not a server's port")
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1/chat/completions"  # a bare http://host:port: the usual /v1 base
    elif not path.endswith("/chat/completions"):  # a full URL is used as is
        path += "/chat/completions"  # a base URL, as the OpenAI SDK's base_url: any path kept
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def exception_text(e: BaseException) -> str:
    """What a transport exception says, on at most 200 characters (its cause's words where it has none)."""
    return (str(e) or str(e.__cause__ or e.__context__ or "") or type(e).__name__)[:200]


def shown_bytes(data: bytes) -> str:
    """The first 80 bytes a server sent, as an error message quotes them."""
    return repr(data[:80].decode("utf-8", "replace"))


# --- JSON with a depth limit -----------------------------------------------------------------------

_STRING_OR_BRACKET: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


class JSONDepthError(ValueError):
    """A JSON value nested deeper than allowed."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
"""``json.loads(text, parse_constant=...)``'s decoder, made once (a stream decodes one per chunk)."""


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Raise ``JSONDepthError`` where ``text`` nests arrays and objects deeper than ``max_depth``.

    A linear scan (strings skipped whole), so ``json.loads`` never recurses past the limit.
    """
    if text.count("[") + text.count("{") <= max_depth:  # too few openers to nest deeper: nothing to scan
        return
    depth = 0
    for m in _STRING_OR_BRACKET.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                raise JSONDepthError(f"JSON nested deeper than {max_depth} levels (at character {m.start()})")
        elif token in "]}":
            depth -= 1


def load_json(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` with a depth limit and no ``NaN``/``Infinity``; every failure a ``ValueError``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    check_depth(text, max_depth)
    if text.startswith("\ufeff"):  # as json.loads says it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    try:
        return _DECODER.decode(text)
    except RecursionError:  # cannot happen after check_depth; kept as the last guard
        raise JSONDepthError("JSON nested too deep") from None


# --- bounded readers -------------------------------------------------------------------------------


class LineSplitter:
    """The lines of a byte stream fed a chunk at a time (``\\n``, ``\\r\\n`` or ``\\r`` ended), each at most
    ``max_line`` bytes: ``bytes.splitlines`` of the whole stream, decided as the chunks arrive."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = bytearray()

    @property
    def idle(self) -> bool:
        """No part of a line is waiting for its end."""
        return not self._buf

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines that ``chunk`` completes."""
        buf = self._buf
        seen = max(len(buf) - 1, 0)  # a '\r' left at the end may be half of '\r\n'
        buf += chunk
        out: list[bytes] = []
        start = 0
        while True:
            end = _line_end(buf, max(start, seen))
            if end < 0:
                break
            if end - start > self.max_line:
                raise UpstreamError(f"a line of the stream is longer than {self.max_line:,} bytes")
            if buf[end] == 13 and end + 1 == len(buf):  # a '\r' that may be half of '\r\n'
                break
            out.append(bytes(buf[start:end]))
            start = end + (2 if buf[end : end + 2] == b"\r\n" else 1)
        del buf[:start]
        if len(buf) > self.max_line:
            raise UpstreamError(f"a line of the stream is longer than {self.max_line:,} bytes (no line end)")
        return out

    def end(self) -> list[bytes]:
        """The last line, where the stream does not end with a line end (a lone ``\\r`` ends an empty one)."""
        if not self._buf:
            return []
        rest = bytes(self._buf.rstrip(b"\r"))
        self._buf.clear()
        return [rest]


def lines(chunks: Iterator[bytes], max_line: int = MAX_LINE) -> Iterator[bytes]:
    """The lines of a byte stream (``\\n``, ``\\r\\n`` or ``\\r`` ended), each at most ``max_line`` bytes."""
    splitter = LineSplitter(max_line)
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.end()


def _line_end(buf: bytearray, start: int) -> int:
    # '\r' is looked for only before the next '\n': a stream of short lines costs linear time, not a scan
    # of the whole rest of the chunk for each line
    n = buf.find(b"\n", start)
    r = buf.find(b"\r", start, n if n >= 0 else len(buf))
    return n if r < 0 else r


# --- one chat completion ------------------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    """One piece of a streamed reply: its text (may be empty) and the finish reason, where sent."""

    text: str
    reason: str | None = None
    piece: ChunkParts | None = None
    """The chunk as ``charfmt.llm._sdk_chunks`` reads it (reasoning, refusal, tool calls, stop notes)."""


@dataclass(frozen=True)
class Budget:
    """What one streamed reply may hold, counted as it arrives: tokens, characters, lines, bytes."""

    tokens: int
    """Content deltas (servers send one token per delta, never more deltas than tokens)."""
    chars: int
    """Characters of reply text."""
    lines: int
    """Event-stream lines, comments and blank lines included."""
    bytes: int = MAX_STREAM

    @classmethod
    def for_tokens(cls, max_tokens: int) -> Budget:
        """The budget of a request for ``max_tokens`` tokens."""
        return cls(
            tokens=max_tokens,
            chars=max_tokens * CHARS_PER_TOKEN,
            lines=max_tokens * LINES_PER_TOKEN + EXTRA_LINES,
            bytes=min(MAX_STREAM, max(MAX_BODY, max_tokens * 64 << 10)),
        )


class ReplyReader:
    """What a server answers, read through the limits above without I/O: headers, an error body, a whole
    ``chat.completion``, the chunks of a stream. Every failure is ``fail(message)``, the caller's one error."""

    def __init__(self, fail: Callable[[str], UpstreamError]) -> None:
        from charfmt.llm._sdk_chunks import read_chat_chunk  # noqa: PLC0415 (``chat`` imports this module at start)

        self.fail = fail
        self._read_chat_chunk = read_chat_chunk

    def check_headers(self, raw: list[tuple[bytes, bytes]]) -> None:
        """Refuse more than ``MAX_HEADERS`` headers or a header line over ``MAX_HEADER_LINE`` bytes."""
        if len(raw) > MAX_HEADERS:
            raise self.fail(f"the server sent {len(raw)} headers (at most {MAX_HEADERS})")
        for name, value in raw:
            if len(name) + len(value) + 2 > MAX_HEADER_LINE:
                raise self.fail(
                    f"the server sent a header line of {len(name) + len(value) + 2:,} bytes"
                    f" (at most {MAX_HEADER_LINE:,}): {name[:40].decode('latin-1')!r}"
                )

    def body_kind(self, headers: Any) -> str:
        """The content type of a successful answer (``headers``: httpx's), its encoding checked to be none."""
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise self.fail(f"the server sent a {encoding[:40]!r}-encoded body, which was not asked for")
        kind: str = headers.get("content-type", "").split(";")[0].strip().lower()
        return kind or "no content type"

    def is_completion(self, first: bytes, kind: str) -> bool:
        """Whether the answer whose first bytes are ``first`` is one ``chat.completion`` (else an event stream).

        ``first``: the bytes read until one is not white space or there are more than ``MAX_LINE``.
        """
        if not first.strip() and len(first) <= MAX_LINE:
            raise self.fail("the server's answer was empty (no event, no completion)")
        return first.lstrip().startswith(b"{") and kind != "text/event-stream"

    def gather(self, body: bytearray, chunk: bytes) -> None:
        """Add ``chunk`` to a whole completion's ``body``, within ``MAX_BODY``."""
        body += chunk
        if len(body) > MAX_BODY:
            raise self.fail(f"the completion is longer than {MAX_BODY:,} bytes; stopped reading")

    def gather_error(self, data: bytearray, chunk: bytes) -> bool:
        """Add ``chunk`` to an error answer's body ``data``, kept to its first ``MAX_ERROR_BODY`` bytes: whether it
        holds them all now (read no further: the message is in them, and an error body is not read to its end)."""
        data += chunk
        if len(data) < MAX_ERROR_BODY:
            return False
        del data[MAX_ERROR_BODY:]
        return True

    def error_detail(self, data: bytes, reason_phrase: str) -> str:
        """The message of an error answer's body (its first ``MAX_ERROR_BODY`` bytes), on one line."""
        text = data.decode("utf-8", "replace").strip()
        try:
            value = load_json(text)
        except ValueError:
            value = None
        if isinstance(value, dict) and "error" in value:
            error = value["error"]
            message = error.get("message") if isinstance(error, dict) else error
            text = message if isinstance(message, str) else json.dumps(message)[:200]
        return " ".join(text.split())[:300] or reason_phrase or "(no message)"

    def completion(self, body: bytes) -> Delta:
        """The content and finish reason of one (non-streamed) ``chat.completion`` object."""
        text = body.decode("utf-8", "replace")
        try:
            data = load_json(text)
        except ValueError as e:
            raise self.fail(f"not an OpenAI chat completion ({e}): {text[:80]!r}") from None
        self._refuse_error(data, "the server answered with an error")
        choice = _first_choice(data)
        message = choice.get("message") if choice is not None else None
        if choice is None or not isinstance(message, dict):
            raise self.fail(f"not an OpenAI chat completion: {text[:80]!r}")
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise self.fail(f"the completion's content is not text: {json.dumps(content)[:80]}")
        return self._delta(data, choice, body)

    def chunk(self, event: bytes, *, last: bool = False) -> Delta:
        """The text and finish reason of one ``chat.completion.chunk`` (``last``: the stream ended inside it)."""
        plain = plain_chunk(event)
        if plain is not None:  # the common chunk, read in one pass
            return Delta(plain)
        try:
            data = load_json(event)
        except ValueError as e:
            if last and not isinstance(e, JSONDepthError):  # no blank line, no [DONE], and half a JSON value
                raise self.fail(
                    f"the stream was cut off inside an event (no [DONE]): {shown_bytes(event[-80:])}"
                ) from None
            raise self.fail(f"not an OpenAI chat completion stream ({e}): {shown_bytes(event)}") from None
        self._refuse_error(data, "the server sent an error in the stream")
        choice = _first_choice(data)
        if choice is None:
            if isinstance(data, dict) and data.get("choices") == []:  # a usage chunk: no choice
                return Delta("")
            raise self.fail(f"not an OpenAI chat completion stream: {shown_bytes(event)}")
        delta = choice.get("delta", {})
        if delta is None:
            delta = {}
        if not isinstance(delta, dict):
            raise self.fail(f"the chunk's delta is not an object: {shown_bytes(event)}")
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            raise self.fail(f"the chunk's content is not text: {shown_bytes(event)}")
        return self._delta(data, choice, event)

    def _delta(self, data: dict[str, Any], choice: dict[str, Any], raw: bytes) -> Delta:
        """A checked chunk or completion, read by the same rule as ``iter_events`` reads an OpenAI chunk."""
        plain = _plain_text(data, choice)
        if plain is not None and (raw.isascii() or _is_utf8(raw)):  # the common chunk: as the rule reads it
            return Delta(plain)
        return self.rule_delta(data, choice, raw)

    def rule_delta(self, data: dict[str, Any], choice: dict[str, Any], raw: bytes) -> Delta:
        """``_delta`` without its shortcut for a plain chunk: the ``openai-chat`` rule reads every chunk."""
        piece = self._read_chat_chunk(data)
        text = piece.text if isinstance(piece.text, str) else ""
        piece.text = ""
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:  # load_json read each bad byte as U+FFFD: say so, never silently
            where = f"byte {e.start} of {'the completion' if 'message' in choice else 'a chunk'}"
            piece.notes.append(("CF961", f"the server sent invalid UTF-8 ({where}: {raw[e.start : e.start + 4]!r}):"
                                         " each bad byte read as U+FFFD"))  # fmt: skip
        return Delta(text, _reason_of(choice), piece if piece.reasoning or piece.refusal or piece.notes else None)

    def _refuse_error(self, data: Any, what: str) -> None:
        if isinstance(data, dict) and "error" in data:
            error = data["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise self.fail(f"{what}: {str(message)[:200]}")


class EventStreamReader:
    """The deltas of an OpenAI event stream, fed its bytes as they arrive, within a :class:`Budget`.

    ``feed`` each chunk of the body, then ``end`` once it is over; ``done`` turns true at
    ``[DONE]`` (read no further). Lines, events, tokens, characters are counted as they come. A
    stream that ends with neither ``[DONE]`` nor a finish reason fails at ``end``: it was cut
    short (a connection closed, a proxy's chunked end), and its half reply is no answer.
    """

    def __init__(self, reader: ReplyReader, kind: str, budget: Budget) -> None:
        self.reader = reader
        self.kind = kind
        self.budget = budget
        self.done = False
        """``[DONE]`` was read."""
        self.finished = False
        """A finish reason was read (a stream that ends with neither it nor ``[DONE]`` was cut short)."""
        self._held = ""  # a high surrogate that ended a delta's text: the next delta's may open with its pair
        self._lines = LineSplitter(MAX_LINE)
        self._data: list[bytes] = []
        self._size = self._count = self._events = self._tokens = self._chars = 0

    @property
    def partial(self) -> bool:
        """Part of an event was read and waits for the rest (not a comment, not a blank line)."""
        return bool(self._data) or not self._lines.idle

    def feed(self, chunk: bytes) -> Iterator[Delta]:
        """The deltas of the events ``chunk`` completes."""
        if not self._data and self._lines.idle and chunk.endswith(b"\n\n") and len(chunk) <= MAX_LINE:
            # The common packet: whole ``data: …`` events and nothing else, read without splitting lines
            # one by one (what ``_line`` does with each of its lines, in the same order, the same checks).
            fields = chunk.split(b"\n\n")
            fields.pop()  # (empty: the packet ends with its last event's blank line)
            if b"\r" not in chunk and all(f.startswith(b"data:") and b"\n" not in f for f in fields):
                for field in fields:
                    self._counted()  # the data line
                    part = field[5:].removeprefix(b" ")
                    if len(part) > MAX_EVENT:
                        raise self.reader.fail(f"an event of the stream is longer than {MAX_EVENT:,} bytes")
                    self._counted()  # the blank line after it
                    delta = self._event(part.strip())
                    if delta is None:  # [DONE]
                        yield from self._flush()
                        return
                    yield delta
                return
        yield from self._read_lines(self._lines.feed(chunk))

    def end(self) -> Iterator[Delta]:
        """The deltas of what the stream's end completes (the last event may lack its blank line)."""
        yield from self._read_lines(self._lines.end())
        if self.done:
            return
        if self._data:  # the last event, without the blank line that should end it
            event = b"\n".join(self._data).strip()
            if event == b"[DONE]":
                yield from self._flush()
                return
            last = self._paired(self.reader.chunk(event, last=True))
            self.finished = self.finished or last.reason is not None
            yield last
            yield from self._flush()
        elif self._events == 0:
            raise self.reader.fail("the stream ended before its first event")
        if not self.finished:  # neither [DONE] nor a finish reason: the reply was cut short, not ended
            raise self.reader.fail(
                "the stream ended before the reply did (no finish_reason, no [DONE]): the connection closed early"
            )
        yield from self._flush()

    def _read_lines(self, lines: Iterable[bytes]) -> Iterator[Delta]:
        """The deltas of whole ``lines``, up to ``[DONE]`` (then ``done``, what is held flushed, the rest unread)."""
        for line in lines:
            delta = self._line(line)
            if self.done:
                yield from self._flush()
                return
            if delta is not None:
                yield delta

    def _line(self, line: bytes) -> Delta | None:
        fail = self.reader.fail
        self._counted()
        data = self._data
        if line.strip() and not data and not line.startswith(_SSE_FIELDS):
            raise fail(f"not an OpenAI-compatible chat completion ({self.kind}): {shown_bytes(line)}")
        if line.startswith(b"data:"):
            part = line[5:].removeprefix(b" ")
            self._size += len(part)
            if self._size > MAX_EVENT:
                raise fail(f"an event of the stream is longer than {MAX_EVENT:,} bytes")
            data.append(part)
            return None
        if line.strip() or not data:  # another field, a comment, or a blank line between events
            return None
        event = b"\n".join(data).strip()
        self._data, self._size = [], 0
        return self._event(event)

    def _paired(self, delta: Delta) -> Delta:
        """``delta`` with a UTF-16 surrogate pair split across two deltas made whole again: a server may send
        an emoji as ``"\\ud83d"`` then ``"\\ude00"``, each half no character alone. A high half that ends a
        delta's text is held for the next one; one never completed comes at the end (``_flush``) as it
        was sent, for the reader of the text to say (a lone surrogate is ``CF714``)."""
        text = delta.text
        if self._held:  # the pair joined: one character (a high half and anything else stay two)
            head = (self._held + text[:1]).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
            text, self._held = head + text[1:], ""
        if text and _HIGH_FIRST <= ord(text[-1]) <= _HIGH_LAST:
            text, self._held = text[:-1], text[-1]
        return dataclasses.replace(delta, text=text)

    def _flush(self) -> Iterator[Delta]:
        """The high half still held at the stream's end, alone."""
        if self._held:
            yield Delta(self._held)
            self._held = ""

    def _counted(self) -> None:
        """Count a line of the stream, within the budget's lines."""
        self._count += 1
        if self._count > self.budget.lines:
            raise self.reader.fail(
                f"the stream went on past {self.budget.lines:,} lines without ending; stopped reading"
            )

    def _event(self, event: bytes) -> Delta | None:
        """The delta of one event's data (``[DONE]``: None, and ``done`` set), within the budget's tokens."""
        self._events += 1
        if event == b"[DONE]":
            self.done = True
            return None
        delta = self.reader.chunk(event)
        text = delta.text
        if self._held or (text and _HIGH_FIRST <= ord(text[-1]) <= _HIGH_LAST):
            delta = self._paired(delta)
        if delta.reason is not None:
            self.finished = True
        if delta.text:
            self._tokens += 1
            self._chars += len(delta.text)
            if self._tokens > self.budget.tokens or self._chars > self.budget.chars:
                raise self.reader.fail(
                    f"the server sent more than the {self.budget.tokens} tokens asked for (max_tokens); stopped reading"
                )
        return delta


def silence(seconds: float, partial: bool) -> str:
    """What an upstream that sent bytes but no event for ``seconds`` did (``partial``: part of an event)."""
    if partial:
        return f"the server sent no whole event for {seconds:g} s (part of one, then too little or nothing)"
    return f"the server sent no event for {seconds:g} s (only comments)"


_PLAIN_CHOICE: Final = frozenset({"index", "delta", "finish_reason", "logprobs"})
_PLAIN_DELTA: Final = frozenset({"content", "role"})


def plain_chunk(event: bytes) -> str | None:
    """The text of an event that ``ReplyReader.chunk`` reads as a plain chunk (only text: valid UTF-8,
    nested little, one choice, no reason, reasoning, refusal, tool call or error), in one pass; else None
    (the general reading then says what it is, or what is wrong with it)."""
    try:
        text = event.decode()
    except UnicodeDecodeError:
        return None
    if text.count("[") + text.count("{") > MAX_DEPTH or text.startswith("\ufeff"):
        return None
    try:
        data = _DECODER.decode(text)
    except ValueError:
        return None
    if type(data) is not dict or "error" in data:
        return None
    choices = data.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict:
        return None
    delta = choice.get("delta")
    if (
        type(delta) is not dict
        or choice.get("finish_reason") is not None
        or choice.get("index") not in (None, 0)
        or not choice.keys() <= _PLAIN_CHOICE
        or not delta.keys() <= _PLAIN_DELTA
    ):
        return None
    content = delta.get("content")
    if content is None:
        return ""
    return content if type(content) is str else None


def _plain_text(data: dict[str, Any], choice: dict[str, Any]) -> str | None:
    """The text of a chunk that is only text (one first choice, no reason, no reasoning, refusal or
    tool call), whose reading by the ``openai-chat`` rule is that text and nothing else; else None."""
    delta = choice.get("delta")
    if (
        type(delta) is not dict
        or choice.get("finish_reason") is not None
        or choice.get("index") not in (None, 0)
        or len(data["choices"]) != 1
        or not choice.keys() <= _PLAIN_CHOICE
        or not delta.keys() <= _PLAIN_DELTA
    ):
        return None
    text = delta.get("content")
    return text if isinstance(text, str) else ""


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _first_choice(data: Any) -> dict[str, Any] | None:
    choices = data.get("choices") if isinstance(data, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _reason_of(choice: dict[str, Any] | None) -> str | None:
    reason = choice.get("finish_reason") if choice is not None else None
    return reason[:40] if isinstance(reason, str) else None


class ReplyBody:
    """An answer's body (its head accepted) read into deltas as its bytes arrive, whatever its shape.

    Its first bytes say which of the two it is (``ReplyReader.is_completion``): one whole
    ``chat.completion``, gathered within ``MAX_BODY`` and read at ``end``, or an event stream read
    as it comes (``stream``, an :class:`EventStreamReader`). ``feed`` each chunk, then ``end`` once
    the body is over, unless ``done`` turned true (``[DONE]``: read no further). The sync client and
    ``charfmt serve``'s async upstream both read every body through this one reader.
    """

    def __init__(self, reader: ReplyReader, kind: str, budget: Budget) -> None:
        self.reader = reader
        self.kind = kind
        self.budget = budget
        self.stream: EventStreamReader | None = None
        """The event stream, once the first bytes said it is one."""
        self.whole: bytearray | None = None
        """The whole completion gathered so far, once the first bytes said it is one."""
        self._first = b""

    @property
    def done(self) -> bool:
        """The stream's ``[DONE]`` was read: the rest of the body is no part of the reply."""
        return self.stream is not None and self.stream.done

    @property
    def partial(self) -> bool:
        """Part of an event was read and waits for the rest (what a silence then cut)."""
        return self.stream is not None and self.stream.partial

    def silence(self, seconds: float) -> str:
        """What a server that sent bytes but no event for ``seconds`` did, as far as the body was read."""
        return silence(seconds, self.partial)

    def feed(self, chunk: bytes) -> Iterator[Delta]:
        """The deltas ``chunk`` completes (none while a whole completion is gathered)."""
        if self.stream is not None:
            yield from self.stream.feed(chunk)
        elif self.whole is not None:
            self.reader.gather(self.whole, chunk)
        else:
            self._first += chunk
            if self._first.strip() or len(self._first) > MAX_LINE:  # the first bytes say which shape it is
                yield from self._decide()

    def end(self) -> Iterator[Delta]:
        """The deltas of what the body's end completes: the whole completion, or the stream's last events."""
        if self.stream is None and self.whole is None:  # (a body too short to say before it ended)
            yield from self._decide()
        if self.whole is not None:
            yield self.reader.completion(bytes(self.whole))
        elif self.stream is not None:
            yield from self.stream.end()

    def _decide(self) -> Iterator[Delta]:
        first, self._first = self._first, b""
        if self.reader.is_completion(first, self.kind):
            self.whole = bytearray(first)
        else:
            self.stream = EventStreamReader(self.reader, self.kind, self.budget)
            yield from self.stream.feed(first)
