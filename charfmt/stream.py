"""Streaming: events as model output arrives, never a partial tag, identical to the batch result.

``StreamParser`` reads the reply incrementally while it is in charfmt's format (any JSON
whitespace and escapes, keys in any order as long as ``type`` and ``order`` come before
``body``). Each event is emitted as soon as it is certain: an emotion when its key is
complete, text deltas as soon as their characters are decided — never a fragment of a
tag, an entity, a JSON escape or a UTF-8 character.

The moment the input leaves the format, the stream keeps what it has shown and holds the
rest; ``close()`` reads the whole text with ``charfmt.parse(lenient=True)`` (the same
recovery rules) and emits only what is missing, so the events always rebuild exactly
the batch result. Damaged input streams up to the damage and completes at the end.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from charfmt.body import decode_text, terminal_regex
from charfmt.diagnostics import CODES, Diagnostic
from charfmt.events import (
    Action,
    ChatEnd,
    ChatStart,
    DiagnosticEvent,
    Emotion,
    Event,
    Reset,
    SegmentEnd,
    SegmentStart,
    TextDelta,
    reply_events,
)
from charfmt.models import Chat, Reply, Segment, Vocabulary, construct_trusted
from charfmt.parser import DEFAULT_MAX_SIZE, parse
from charfmt.tags import CHAT_TYPES, TAG_BY_NAME, TAGGED_TYPES, TEXT_TAG
from charfmt.vocabulary import apply_vocabulary

# Envelope states.
(_START, _TOP_KEY, _TOP_KEY_STR, _TOP_COLON, _TOP_VALUE, _CHATS, _CHATS_SEP, _CHAT_KEY, _CHAT_KEY_STR,
 _CHAT_COLON, _CHAT_VALUE, _TYPE_STR, _ORDER_NUM, _BODY, _CHAT_SEP, _TOP_END, _DONE, _HELD) = range(18)  # fmt: skip
_MOVES: Final = {
    (_START, "{"): _TOP_KEY,
    (_TOP_KEY, '"'): _TOP_KEY_STR,
    (_TOP_COLON, ":"): _TOP_VALUE,
    (_CHATS_SEP, ","): _CHATS,
    (_CHAT_KEY, '"'): _CHAT_KEY_STR,
    (_CHAT_COLON, ":"): _CHAT_VALUE,
    (_CHAT_SEP, ","): _CHAT_KEY,
    (_TOP_END, "}"): _DONE,
}
"""Envelope moves that only change the state (the others go through ``_structure``)."""
# Body states.
_B_OPEN, _B_KEY, _B_TEXT, _B_CLOSE, _B_ENTITY, _B_AFTER = range(6)

_WS: Final = " \t\n\r"
_PLAIN: Final = re.compile(r'[^"\\\x00-\x1f<&\x7f\ud800-\udfff]+')
_DIGITS: Final = re.compile(r"[0-9]*")
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PLAIN_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "r": "\r", "t": "\t"}
_TEXT_BAD: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_OPENS: Final = tuple(t.open for t in TAG_BY_NAME.values())
_STREAMED: Final = frozenset(
    {TEXT_TAG, *(t.name for t in TAG_BY_NAME.values() if t.content == "text" and t.name != "act")}
)
"""Segments whose text goes out as deltas (an action goes out whole, like an emotion)."""
_CLOSERS: Final[dict[str | None, str]] = {
    **{t.name: t.close for t in TAG_BY_NAME.values()},
    TEXT_TAG: "\x00",  # never in a body: an I/E text has no closer
    None: "\x00",
}


class _Held(Exception):
    """The input left the format: hold the rest for the batch reader."""


@dataclass(slots=True)
class _Chat:
    index: int
    kind: str | None = None
    order: int | None = None
    body_seen: bool = False
    segment: int = -1
    closed_segments: int = 0
    tag: str | None = None
    had_text: bool = False
    started: bool = False
    key_start: int = 0


class Collector:
    """Rebuilds a ``Reply`` from events: what ``collect`` and ``StreamParser.reply`` use."""

    def __init__(self) -> None:
        self.chats: dict[int, dict[str, Any]] = {}
        self.diagnostics: list[Diagnostic] = []

    def add(self, event: Event) -> None:
        """Apply one event."""
        if isinstance(event, ChatStart):
            self.chats[event.chat] = {"type": event.type, "order": event.order, "segments": []}
        elif isinstance(event, SegmentStart):
            self.chats[event.chat]["segments"].append([event.tag, [], None])
        elif isinstance(event, (Emotion, Action, TextDelta)):
            segment = self.chats[event.chat]["segments"][event.segment]
            segment[1].append(event.text)
            if isinstance(event, Emotion):
                segment[2] = event.intensity
        elif isinstance(event, DiagnosticEvent):
            self.diagnostics.append(event.diagnostic)
        elif isinstance(event, Reset):
            self.chats.clear()
            self.diagnostics.clear()

    def reply(self) -> Reply:
        """The reply so far, chats sorted by order (stable: equal orders keep arrival order)."""
        chats = []
        for _index, c in sorted(self.chats.items()):
            segments = [
                construct_trusted(Segment, {"tag": tag, "text": "".join(parts), "intensity": intensity})
                for tag, parts, intensity in c["segments"]
            ]
            chats.append(construct_trusted(Chat, {"type": c["type"], "order": c["order"], "segments": segments}))
        chats.sort(key=lambda c: c.order)
        diagnostics = sorted(self.diagnostics, key=lambda d: (d.offset, d.end))
        return construct_trusted(Reply, {"chats": chats, "diagnostics": diagnostics, "dialect": None})


def collect(events: Iterable[Event]) -> Reply:
    """The ``Reply`` a sequence of events describes (chats sorted by order)."""
    collector = Collector()
    for event in events:
        collector.add(event)
    return collector.reply()


class StreamParser:
    """Feed it chunks of model output (``str`` or ``bytes``); get events as soon as they are certain.

    ``max_size`` bounds the text kept for repairs: past it, memory stays flat, and damage
    after that point can no longer be repaired (``CF801``). ``keep_reply=False`` keeps no
    ``reply`` either (for unbounded streams); a damaged stream then ends with ``Reset``
    and the whole batch result.
    """

    def __init__(
        self,
        *,
        lenient: bool = True,
        vocabulary: Vocabulary | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
        keep_reply: bool = True,
    ) -> None:
        self.lenient = lenient
        self.vocabulary = vocabulary
        self.max_size = max_size
        self._collector: Collector | None = Collector() if keep_reply else None
        self._unfolded: list[Event] = []  # events not yet folded into the collector
        self._decoder: codecs.IncrementalDecoder | None = None
        self._kept: list[str | bytes] | None = []
        self._kept_size = 0
        self._bytes = False
        self._state = _START
        self._offset = 0  # characters before the current chunk
        self._line = 1  # line at the start of the current chunk
        self._line_start = 0  # offset where that line starts
        self._chunk = ""
        self._pos = 0  # index in the current chunk of the character being handled
        self._token: list[str] = []
        self._key = ""
        self._chat: _Chat | None = None
        # Only chats still open are kept: memory grows with the number of chats (their
        # orders, for duplicates and gaps), never with their text.
        self._chats: dict[int, _Chat] = {}
        self._count = 0
        self._unsorted = False
        self._last_order = 0
        self._orders: set[int] = set()
        self._chats_at: tuple[int, int, int] = (0, 1, 1)
        self._chats_end = 0
        self._b = _B_OPEN
        self._buf: list[str] = []
        self._text: list[str] = []
        self._in_escape = False
        self._escape = ""
        self._high = ""
        self._out: list[Event] = []
        self._closed = False
        self._held_at = -1

    # -- public ---------------------------------------------------------------------------
    @property
    def reply(self) -> Reply:
        """The reply the events so far describe."""
        return self._folded().reply()

    def _folded(self) -> Collector:
        if self._collector is None:
            raise ValueError("StreamParser(keep_reply=False) keeps no reply")
        for event in self._unfolded:
            self._collector.add(event)
        self._unfolded = []
        return self._collector

    def feed(self, chunk: str | bytes) -> list[Event]:
        """Consume one chunk; returns the events it made certain."""
        if self._closed:
            raise ValueError("feed() after close()")
        chat = self._chat
        if (
            type(chunk) is str
            and self._b == _B_TEXT
            and self._state == _BODY
            and chat is not None
            and chat.started
            and not (self._in_escape or self._high or self._text)
            and chat.tag in _STREAMED
            and self._kept is not None
            and _PLAIN.fullmatch(chunk)
        ):
            # The common case, inside a message: the whole chunk is decided text.
            self._kept.append(chunk)
            self._kept_size += len(chunk)
            self._offset += len(chunk)
            event = TextDelta(chat.index, chat.segment, chat.tag, chunk)
            if self._collector is not None:
                self._unfolded.append(event)
            if self._kept_size > self.max_size:
                self._kept = None
            return [event]
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            data = bytes(chunk)
            self._keep(data)
            if self._decoder is None:
                self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
            try:
                text = self._decoder.decode(data)
            except UnicodeDecodeError:
                self._hold()
                return self._flush()
        else:
            kept = self._kept
            if kept is not None:
                self._kept_size += len(chunk)
                if self._kept_size > self.max_size and self._state != _HELD:
                    self._kept = None
                else:
                    kept.append(chunk)
            text = chunk
        if text and self._state != _HELD:
            self._chunk = text
            try:
                self._consume(text)
            except _Held:
                self._hold()
        self._offset += len(text)
        if "\n" in text:
            self._line += text.count("\n")
            self._line_start = self._offset - (len(text) - text.rfind("\n") - 1)
        out, self._out = self._out, []
        if self._collector is not None and out:
            self._unfolded.extend(out)
        return out

    def close(self) -> list[Event]:
        """End of input: the remaining events (damaged or cut-off input is completed in batch)."""
        if self._closed:
            return []
        self._closed = True
        if self._decoder is not None and self._state != _HELD:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._hold()
        if self._state == _DONE:
            self._order_warnings()
            return self._flush()
        self._pos = len(self._chunk)
        self._emit_text()
        early = self._flush()  # what was decided before the end, now in the collector too
        self._complete()
        return early + self._flush()

    # -- bookkeeping ------------------------------------------------------------------------
    def _keep(self, chunk: str | bytes) -> None:
        if self._kept is None:
            return
        self._kept_size += len(chunk)
        if isinstance(chunk, bytes):
            self._bytes = True
        if self._kept_size > self.max_size and self._state != _HELD:
            self._kept = None  # memory stays flat from here on
            return
        self._kept.append(chunk)

    def _hold(self) -> None:
        if self._state != _HELD:
            self._held_at = self._offset + self._pos
        self._state = _HELD

    def _flush(self) -> list[Event]:
        out, self._out = self._out, []
        if self._collector is not None:
            self._unfolded.extend(out)
        return out

    def _here(self, ahead: int = 0) -> tuple[int, int, int]:
        """Raw offset, line and column of the current character (plus ``ahead``)."""
        i = self._pos + ahead
        chunk = self._chunk
        newlines = chunk.count("\n", 0, i)
        if newlines:
            return self._offset + i, self._line + newlines, i - chunk.rfind("\n", 0, i)
        return self._offset + i, self._line, self._offset + i - self._line_start + 1

    def _diagnostic(self, code: str, message: str, at: tuple[int, int, int], end: int, chat: int | None) -> None:
        offset, line, column = at
        d = Diagnostic(
            code=code, message=message, severity=CODES[code][0], line=line, column=column,
            offset=offset, end=max(end, offset), chat=chat,
        )  # fmt: skip
        self._out.append(DiagnosticEvent(chat, d))

    # -- the envelope ------------------------------------------------------------------------
    def _consume(self, text: str) -> None:
        i, n = 0, len(text)
        if self._state == _BODY:  # most chunks fall inside a body: go straight there
            i = self._body(text, 0)
        while i < n:
            self._pos = i
            state = self._state
            if state == _BODY:
                i = self._body(text, i)
                continue
            if state in (_TOP_KEY_STR, _CHAT_KEY_STR, _TYPE_STR):
                end = text.find('"', i)
                piece = text[i:] if end == -1 else text[i:end]
                if "\\" in piece or _TEXT_BAD.search(piece) or "\n" in piece:
                    raise _Held  # escapes in keys: rare enough for the batch reader
                self._token.append(piece)
                if end == -1:
                    return
                i = end + 1
                value, self._token = "".join(self._token), []
                self._string_done(value)
                continue
            if state == _ORDER_NUM:
                m = _DIGITS.match(text, i)
                end = m.end() if m else i
                self._token.append(text[i:end])
                if end >= n:
                    return
                i = end
                digits, self._token = "".join(self._token), []
                self._order_done(digits, text[i])
                continue
            ch = text[i]
            i += 1
            if ch in _WS:
                continue
            nxt = _MOVES.get((state, ch))
            if nxt is not None:  # a plain move between states: no bookkeeping
                self._state = nxt
            else:
                self._structure(ch)

    def _structure(self, ch: str) -> None:
        state = self._state
        if state == _START and ch == "{":
            self._state = _TOP_KEY
        elif state == _TOP_KEY and ch == '"':
            self._state = _TOP_KEY_STR
        elif state == _TOP_COLON and ch == ":":
            self._state = _TOP_VALUE
        elif state == _TOP_VALUE and ch == "[":
            self._chats_at = self._here()
            self._state = _CHATS
        elif state == _CHATS and ch == "{":
            self._chat = _Chat(self._count)
            self._chats[self._count] = self._chat
            self._count += 1
            self._state = _CHAT_KEY
        elif ((state == _CHATS and not self._count) or state == _CHATS_SEP) and ch == "]":
            self._chats_end = self._here()[0] + 1
            self._state = _TOP_END
        elif state == _CHATS_SEP and ch == ",":
            self._state = _CHATS
        elif state == _CHAT_KEY and ch == '"':
            self._state = _CHAT_KEY_STR
        elif state == _CHAT_COLON and ch == ":":
            self._state = _CHAT_VALUE
        elif state == _CHAT_VALUE:
            self._value(ch)
        elif state == _CHAT_SEP and ch == ",":
            self._state = _CHAT_KEY
        elif state == _CHAT_SEP and ch == "}":
            self._chat_done()
        elif state == _TOP_END and ch == "}":
            self._state = _DONE
        else:
            raise _Held

    def _string_done(self, value: str) -> None:
        state, chat = self._state, self._chat
        if state == _TOP_KEY_STR:
            if value != "chats":
                raise _Held
            self._state = _TOP_COLON
        elif state == _CHAT_KEY_STR:
            assert chat is not None
            seen = {"type": chat.kind is not None, "order": chat.order is not None, "body": chat.body_seen}
            if seen.get(value, True):
                raise _Held  # an unknown or repeated key
            self._key = value
            self._state = _CHAT_COLON
        else:
            assert chat is not None
            if value not in CHAT_TYPES:
                raise _Held
            chat.kind = value
            self._state = _CHAT_SEP

    def _order_done(self, digits: str, after: str) -> None:
        chat = self._chat
        assert chat is not None
        if not digits or digits[0] == "0" or after not in _WS + ",}":
            raise _Held  # 0, 1.0, 1e3, -1 ...
        order = int(digits)
        if order in self._orders:
            raise _Held  # a repeated order: the batch reader renumbers it
        chat.order = order
        self._state = _CHAT_SEP

    def _value(self, ch: str) -> None:
        chat, key = self._chat, self._key
        assert chat is not None
        self._key = ""
        if key == "type" and ch == '"':
            self._state = _TYPE_STR
        elif key == "order" and ch in "123456789":
            self._token = [ch]
            self._state = _ORDER_NUM
        elif key == "body" and ch == '"' and chat.kind is not None and chat.order is not None:
            chat.body_seen = True
            self._orders.add(chat.order)
            self._unsorted = self._unsorted or chat.order < self._last_order
            self._last_order = chat.order
            if chat.kind in TAGGED_TYPES:
                self._b = _B_OPEN
            else:
                chat.segment, chat.tag, self._b = 0, TEXT_TAG, _B_TEXT
            self._state = _BODY
        else:
            raise _Held  # another value, or a body before its type and order

    def _start(self, chat: _Chat) -> None:
        """Announce the chat with its first content: a chat cut off before any has no events."""
        if chat.started:
            return
        chat.started = True
        assert chat.kind is not None and chat.order is not None
        self._out.append(ChatStart(chat.index, chat.kind, chat.order))
        if chat.kind not in TAGGED_TYPES:
            self._out.append(SegmentStart(chat.index, 0, TEXT_TAG))

    def _chat_done(self) -> None:
        chat = self._chat
        assert chat is not None
        if not chat.body_seen:
            raise _Held
        del self._chats[chat.index]
        self._out.append(ChatEnd(chat.index))
        self._chat = None
        self._state = _CHATS_SEP

    # -- the body, inside its JSON string ------------------------------------------------------------
    def _body(self, text: str, i: int) -> int:
        n = len(text)
        while i < n:
            self._pos = i
            if self._in_escape:
                i = self._json_escape(text, i)
                continue
            b = self._b
            if b == _B_TEXT and self._high == "":
                m = _PLAIN.match(text, i)
                if m is not None:
                    self._text.append(m.group())
                    i = m.end()
                    continue
                if text[i] == "\\":
                    # Fast path: a whole escape that decodes to plain text (\u3042, \", \n).
                    nxt = text[i + 1 : i + 2]
                    if nxt == "u" and _HEX4.fullmatch(text, i + 2, i + 6):
                        code = int(text[i + 2 : i + 6], 16)
                        if code >= 0x20 and code not in (0x26, 0x3C, 0x7F) and not 0xD800 <= code < 0xE000:
                            self._text.append(chr(code))
                            i += 6
                            continue
                    elif nxt in _PLAIN_ESCAPES:
                        self._text.append(_PLAIN_ESCAPES[nxt])
                        i += 2
                        continue
                # Fast path: a whole closing tag in this chunk (tags need no JSON escaping).
                chat = self._chat
                if text[i] == "<" and chat is not None and text.startswith(closer := _CLOSERS[chat.tag], i):
                    self._segment_end()
                    i += len(closer)
                    continue
            elif b == _B_OPEN and text[i] != "\\":
                # A whole or partial opening tag, several characters at a time.
                got = "".join(self._buf)
                for opener in _OPENS:
                    if opener.startswith(got):
                        rest = opener[len(got) :]
                        take = text[i : i + len(rest)]
                        if rest.startswith(take):
                            break
                else:
                    raise _Held  # no tag starts like this (an escaped letter is not worth a fast path)
                i += len(take)
                if take == rest:
                    self._buf = []
                    self._segment_start(opener[1:-1])
                else:
                    self._buf = [got + take]
                continue
            elif b == _B_CLOSE and self._chat is not None and text[i] != "\\":
                want, got = _CLOSERS[self._chat.tag], "".join(self._buf)
                rest = want[len(got) :]
                take = text[i : i + len(rest)]
                cut = take.find("\\")
                take = take if cut == -1 else take[:cut]  # an escape inside: the character path decodes it
                if not rest.startswith(take):
                    raise _Held
                i += len(take)
                if take == rest:
                    self._buf = []
                    self._segment_end()
                else:
                    self._buf = [got + take]
                continue
            elif b == _B_AFTER and text.startswith("\\n", i):
                self._b = _B_OPEN
                i += 2
                continue
            elif b == _B_KEY:
                end = text.find("<", i)
                run = text[i:] if end == -1 else text[i:end]
                if run and "\\" not in run and '"' not in run and not _TEXT_BAD.search(run):
                    self._text.append(run)
                    i += len(run)
                    continue
            ch = text[i]
            if self._high and ch != "\\":
                raise _Held  # a lone high surrogate
            if ch == '"':
                self._body_end()
                return i + 1
            if ch == "\\":
                self._in_escape = True
                i += 1
                continue
            if ch < " ":
                raise _Held  # a raw control character: not JSON
            self._decoded(ch)
            i += 1
        self._emit_text()
        return i

    def _json_escape(self, text: str, i: int) -> int:
        """One JSON escape; its backslash is read. It may continue in the next chunk."""
        need = self._escape + text[i : i + 5]
        c = need[0]
        if c != "u":
            if c not in _ESCAPES or self._high:
                raise _Held
            self._in_escape = False
            self._decoded(_ESCAPES[c])
            return i + 1
        if len(need) < 5:
            self._escape = need
            return len(text)
        if not _HEX4.fullmatch(need, 1, 5):
            raise _Held
        consumed = 5 - len(self._escape)
        self._escape, self._in_escape = "", False
        code = int(need[1:5], 16)
        if self._high:
            high, self._high = self._high, ""
            if not 0xDC00 <= code < 0xE000:
                raise _Held
            self._decoded(chr(0x10000 + ((ord(high) - 0xD800) << 10) + (code - 0xDC00)))
        elif 0xD800 <= code < 0xDC00:
            self._high = chr(code)
        else:
            self._decoded(chr(code))
        return i + consumed

    def _decoded(self, ch: str) -> None:
        """One decoded body character that is not part of a plain run."""
        b = self._b
        if b == _B_TEXT:
            if ch == "<":
                self._emit_text()
                self._buf = ["<"]
                self._b = _B_CLOSE
            elif ch == "&":
                self._buf = ["&"]
                self._b = _B_ENTITY
            elif _TEXT_BAD.match(ch):
                raise _Held
            else:
                self._text.append(ch)
        elif b == _B_ENTITY:
            self._buf.append(ch)
            if ch == ";":
                self._entity("".join(self._buf)[1:-1])
            elif len(self._buf) > 40 or not (ch.isascii() and (ch.isalnum() or ch == "#")):
                raise _Held
        elif b == _B_CLOSE:
            self._buf.append(ch)
            chat = self._chat
            assert chat is not None
            want, got = f"</{chat.tag}>", "".join(self._buf)
            if not want.startswith(got):
                raise _Held
            if got == want:
                self._buf = []
                self._segment_end()
        elif b == _B_OPEN:
            self._buf.append(ch)
            got = "".join(self._buf)
            if got in _OPENS:
                self._buf = []
                self._segment_start(got[1:-1])
            elif not any(o.startswith(got) for o in _OPENS):
                raise _Held
        elif b == _B_KEY:
            if ch == "<":
                self._key_done()
                self._buf = ["<"]
                self._b = _B_CLOSE
            else:
                self._text.append(ch)
        elif ch == "\n":  # _B_AFTER
            self._b = _B_OPEN
        else:
            raise _Held

    def _entity(self, name: str) -> None:
        entity = f"&{name};"
        if not terminal_regex("TEXT").fullmatch(entity):
            raise _Held  # the grammar decides which entities are text, as in strict parsing
        self._text.append(decode_text(entity))
        self._buf = []
        self._b = _B_TEXT

    def _segment_start(self, tag: str) -> None:
        chat = self._chat
        assert chat is not None
        chat.segment += 1
        chat.tag = tag
        if TAG_BY_NAME[tag].content == "key":
            # Announced whole, once the key is complete: a key cut off shows nothing early.
            chat.key_start = self._here(1)[0]
            self._b = _B_KEY
        else:
            self._start(chat)
            self._out.append(SegmentStart(chat.index, chat.segment, tag))
            self._b = _B_TEXT

    def _key_done(self) -> None:
        chat = self._chat
        assert chat is not None
        key, self._text = "".join(self._text), []
        if not terminal_regex("KEY").fullmatch(key):
            raise _Held
        decision = apply_vocabulary(key, self.vocabulary)
        if decision.code == "CF301":
            raise _Held  # an error: the batch reader decides what becomes of it
        if decision.code is not None:
            # A key holds no raw newline (JSON strings cannot), so it starts on the current line.
            offset, line, column = self._here()
            start = (chat.key_start, line, column - (offset - chat.key_start))
            message = f"chat {chat.index} body: {decision.message}"
            self._diagnostic(decision.code, message, start, offset, chat.index)
        self._start(chat)
        self._out.append(SegmentStart(chat.index, chat.segment, chat.tag or "emo"))
        self._out.append(Emotion(chat.index, chat.segment, decision.key or key))

    def _segment_end(self) -> None:
        chat = self._chat
        assert chat is not None and chat.tag is not None
        if chat.tag == "act":
            self._out.append(Action(chat.index, chat.segment, "".join(self._text)))
            self._text = []
        else:
            self._emit_text()
        self._out.append(SegmentEnd(chat.index, chat.segment, chat.tag))
        chat.closed_segments = chat.segment + 1
        self._b = _B_AFTER

    def _emit_text(self) -> None:
        chat = self._chat
        if not self._text or chat is None or chat.tag in ("act", "emo") or self._b == _B_KEY:
            return
        self._start(chat)
        chat.had_text = True
        self._out.append(TextDelta(chat.index, chat.segment, chat.tag or TEXT_TAG, "".join(self._text)))
        self._text = []

    def _body_end(self) -> None:
        chat = self._chat
        assert chat is not None
        if chat.kind in TAGGED_TYPES:
            if self._b != _B_AFTER:
                raise _Held  # an empty body, or inside an element
        else:
            if self._b != _B_TEXT:
                raise _Held
            self._emit_text()
            if not chat.had_text:
                raise _Held  # an empty I/E body
            self._out.append(SegmentEnd(chat.index, 0, TEXT_TAG))
            chat.closed_segments = 1
        self._state = _CHAT_SEP

    # -- the end -------------------------------------------------------------------------------------
    def _order_warnings(self) -> None:
        """What strict parsing says about orders (CF112, CF113), now that all are known."""
        orders = self._orders
        if not orders:
            return
        at, end = self._chats_at, self._chats_end
        top = max(orders)
        if top != len(orders):
            missing: list[int] = []
            k = 1
            while len(missing) < 10 and k < top:
                if k not in self._orders:
                    missing.append(k)
                k += 1
            shown = ", ".join(map(str, missing)) + (" …" if len(missing) == 10 else "")
            self._diagnostic("CF112", f"orders are not 1..{len(orders)}: {shown} missing", at, end, None)
        if self._unsorted:
            message = "chats are not listed in order; they are presented sorted by order"
            self._diagnostic("CF113", message, at, end, None)

    def _complete(self) -> None:
        """Damaged or cut-off input: read it all in batch, emit only what is missing."""
        if self._kept is None:
            at = max(self._held_at, 0)
            message = f"the stream is longer than max_size ({self.max_size:,}) and left the format: the rest is dropped"
            self._out.append(DiagnosticEvent(None, Diagnostic(
                code="CF801", message=message, severity="error", line=self._line, column=1, offset=at, end=self._offset,
            )))  # fmt: skip
            return
        raw: str | bytes
        if self._bytes:
            raw = b"".join(c if isinstance(c, bytes) else c.encode("utf-8", "surrogatepass") for c in self._kept)
        else:
            raw = "".join(c for c in self._kept if isinstance(c, str))
        size = max(self.max_size, len(raw))
        batch = parse(raw, lenient=self.lenient, vocabulary=self.vocabulary, max_size=size)  # strict: raises
        self._reconcile(batch)

    def _reconcile(self, batch: Reply) -> None:
        """Emit what ``batch`` holds beyond what was streamed, or ``Reset`` and all of it."""
        if self._collector is None:
            self._out = [Reset(), *reply_events(batch)]
            return
        streamed = self._folded()
        out: list[Event] = []
        shown = {(d.code, d.offset) for d in streamed.diagnostics}
        out.extend(DiagnosticEvent(d.chat, d) for d in batch.diagnostics if (d.code, d.offset) not in shown)
        by_order = {c["order"]: (index, c) for index, c in streamed.chats.items()}
        next_index = self._count
        unannounced = {c.order: c.index for c in self._chats.values() if not c.started and c.order is not None}
        consistent = len(shown) <= len(batch.diagnostics)
        for chat in batch.chats:
            if chat.order in by_order:
                index, have = by_order.pop(chat.order)
                events = self._finish_chat(index, have, chat)
                if events is None:
                    consistent = False
                    break
                out.extend(events)
            elif chat.order in unannounced:
                out.extend(_chat_events(unannounced.pop(chat.order), chat))
            else:
                out.extend(_chat_events(next_index, chat))
                next_index += 1
        if by_order or not consistent:
            out = [Reset(), *reply_events(batch)]  # the batch reader contradicts what was shown
        self._out = out

    def _finish_chat(self, index: int, have: dict[str, Any], chat: Chat) -> list[Event] | None:
        """The events that complete streamed chat ``index`` into ``chat``; ``None`` if it contradicts."""
        state = self._chats.get(index)  # None: the chat ended in the stream
        closed = state.closed_segments if state is not None else len(have["segments"])
        segments = have["segments"]
        if have["type"] != chat.type or len(segments) > len(chat.segments):
            return None
        out: list[Event] = []
        for n, seg in enumerate(chat.segments):
            if n >= len(segments):
                out.extend(_segment_events(index, n, seg))
                continue
            tag, parts, intensity = segments[n]
            text = "".join(parts)
            if tag != seg.tag or not seg.text.startswith(text) or intensity != seg.intensity:
                return None
            if n < closed:
                if text != seg.text:
                    return None
                continue
            if seg.tag in ("emo", "act"):
                if text and text != seg.text:
                    return None  # an emotion or action is shown whole, once
                if not text:
                    out.append(
                        Emotion(index, n, seg.text, seg.intensity) if seg.tag == "emo" else Action(index, n, seg.text)
                    )
            elif len(seg.text) > len(text):
                out.append(TextDelta(index, n, seg.tag, seg.text[len(text) :]))
            out.append(SegmentEnd(index, n, seg.tag))
        if state is not None:  # still open in the stream (ended chats leave the table)
            out.append(ChatEnd(index))
        return out


def _segment_events(chat: int, n: int, seg: Segment) -> list[Event]:
    out: list[Event] = [SegmentStart(chat, n, seg.tag)]
    if seg.tag == "emo":
        out.append(Emotion(chat, n, seg.text, seg.intensity))
    elif seg.tag == "act":
        out.append(Action(chat, n, seg.text))
    elif seg.text:
        out.append(TextDelta(chat, n, seg.tag, seg.text))
    out.append(SegmentEnd(chat, n, seg.tag))
    return out


def _chat_events(index: int, chat: Chat) -> list[Event]:
    out: list[Event] = [ChatStart(index, chat.type, chat.order)]
    for n, seg in enumerate(chat.segments):
        out.extend(_segment_events(index, n, seg))
    out.append(ChatEnd(index))
    return out


def iter_events(
    chunks: Iterable[str | bytes], *, lenient: bool = True, vocabulary: Vocabulary | None = None
) -> Iterator[Event]:
    """Events from an iterable of chunks, yielded as each chunk arrives."""
    parser = StreamParser(lenient=lenient, vocabulary=vocabulary)
    for chunk in chunks:
        yield from parser.feed(chunk)
    yield from parser.close()


async def aiter_events(
    chunks: AsyncIterable[str | bytes], *, lenient: bool = True, vocabulary: Vocabulary | None = None
) -> AsyncIterator[Event]:
    """Events from an async iterable of chunks (an SDK stream), yielded as each chunk arrives."""
    parser = StreamParser(lenient=lenient, vocabulary=vocabulary)
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.close():
        yield event
