"""``StreamParser``: the stream reader's ``feed`` and ``close``, and its table from state to method.

``feed`` keeps each chunk (for the rereads and ``close()``), passes a chunk of plain text
inside a message straight out as one delta, and reads the rest token by token (``_read``): in
a loop, the method of the reader's state (``_TABLE``, like a lexer's rules per state: the JSON
envelope's states in ``envelope``, the body's in ``body``) reads one token where the last one
ended and says where the next begins; a token a chunk boundary cuts waits for the next chunk.
The states are ints and the table a tuple indexed by them (measured: as fast as the single
loop it replaced, see ``benchmarks/bench_stream.py``).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any, Final, final

from charfmt.events import Event
from charfmt.models import Reply

from .kept import KEPT_RUN, compact
from .language import ENVELOPE_MAX, HEADER_QUOTES, SENTENCE_MARK_SEARCH, TOKEN_MAX, plain_end
from .reconcile import Reconcile
from .state import DONE, HELD, TOP, Held, TextDelta


@final
class StreamParser(Reconcile):
    """Feed it chunks of model output (``str`` or ``bytes``); get events as soon as they are certain.

    ``max_size`` (characters of ``str`` input, bytes of ``bytes`` input, as in ``parse``)
    bounds the text kept for repairs, and at that bound the stream agrees with
    ``parse(text, lenient=True, max_size=...)``:

    - a stream of at most ``max_size`` is repaired exactly like the batch;
    - a stream that left the format before ``max_size`` and goes on past it ends like the
      batch, with ``CF002`` and no chats (after a ``Reset`` that takes back what it showed);
      nothing past the bound is kept, so memory stays flat;
    - a stream still in the format at ``max_size`` is a long stream, which the batch would
      refuse whole: it goes on streaming with flat memory, and damage after that point is
      reported as ``CF801`` where it begins, not repaired.

    ``turn``: the player's turn the reply answers, as ``parse(turn=...)`` takes it; an echo
    of it is never shown as the character's speech. ``prompt``: the prompt it answers, as
    ``parse(prompt=...)`` takes it; the prompt's own text echoed is never shown either.

    ``keep_reply=False`` keeps no ``reply`` either (for unbounded streams); a damaged
    stream then ends with ``Reset`` and the whole batch result. A lenient stream never
    raises (a bug in the batch reader becomes a ``CF999`` diagnostic, as in ``parse``).
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The compiled reader cannot be subclassed; the pure one refuses it too, so that code
        # written against one runs against the other. Wrap a parser instead.
        raise TypeError("StreamParser cannot be subclassed: wrap an instance instead")

    @property
    def reply(self) -> Reply:
        """The reply the events so far describe."""
        return self._folded().reply()

    def feed(self, chunk: str | bytes | bytearray | memoryview) -> list[Event]:
        """Consume one chunk; returns the events it made certain."""
        if isinstance(chunk, str):
            if (kept := self._kept) is not None:
                kept.append(chunk)  # its size is checked where _base moves (_over_size)
                if len(kept) - self._kept_mark >= KEPT_RUN:
                    self._kept_mark = compact(kept, self._kept_mark)
            # The common cases, inside a message: the chunk is decided text, or decided text
            # and the start of the closing tag.
            # (in an element other than speech, a sentence's end may end what shows: read it token by token)
            if (
                self._live
                and (not self._sentences or SENTENCE_MARK_SEARCH(chunk) is None)
                and self._plain_or_cut(chunk)
            ):
                if pend := self._pend:
                    chunk = chunk[: -len(pend)]
                    if not chunk:
                        return []
                self._base += len(chunk)
                if self._base > self._limit:
                    self._past_limit()
                chat = self._chat
                event = TextDelta(chat.index, chat.segment, chat.tag, chunk)
                if self._collector is not None:
                    self._unfolded.append(event)
                return [event]
            if self._closed:
                raise ValueError("feed() after close()")
            text = chunk
        else:
            decoded = self._decode(chunk)
            if decoded is None:
                return self._flush()
            text = decoded
        if pend := self._pend:
            # A token cut by the last boundary: no work while this chunk cannot complete it.
            s = pend + text
            need = self._need
            if (
                (need not in text and len(s) < TOKEN_MAX)
                or (need == '"' and s.count('"') < HEADER_QUOTES and len(s) < ENVELOPE_MAX and '"body"' not in s)
                or (self._twice and len(s) < TOKEN_MAX and text.count(need) == 1)
            ):
                if self._twice and need in text:
                    self._twice = False  # the opening tag is complete: its closing tag's '>' is next
                self._pend = s
                if self._room < 0:  # bytes: the next chunk is not kept either
                    self._over_size()
                return []
            self._pend = ""
        elif not text:
            return []
        elif self._state == HELD:
            return self._held(text)
        else:
            s = text
        return self._read(s, text)

    def close(self) -> list[Event]:
        """End of input: the remaining events (damaged or cut-off input is completed in batch)."""
        if self._closed:
            return []
        self._closed = True
        self._live = False
        if self._decoder is not None and self._state != HELD:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._hold(self._pend, len(self._pend))
        if self._state == DONE and not self._pend and not self._damaged:
            self._order_warnings()
            return self._flush()
        early = self._flush()  # what was decided before the end, now in the collector too
        self._complete()
        return early + self._flush()

    def _read(self, s: str, text: str) -> list[Event]:
        """Read the tokens of ``s`` (chunk ``text`` after what the last boundary cut); the events they made certain.

        The method of the reader's state (``_TABLE``) reads one token at ``s[i]`` and says where
        the next begins, or ``~j`` where reading stops (``_stall``: a token the chunk boundary
        cut waits from ``s[j]`` on); ``Held``, raised by any, holds the rest (``_hold``).
        """
        i, n = 0, len(s)
        try:
            while i < n:
                i = _TABLE[self._state](self, s, i)
                if i < 0:
                    i = ~i
                    break
        except Held:
            i = self._hold(s, i)
        base = self._base
        if i:
            if "\n" in s:
                newlines = s.count("\n", 0, i)
                if newlines:
                    self._line += newlines
                    self._line_start = base + s.rfind("\n", 0, i) + 1
            base = self._base = base + i
        if base > self._limit or self._room < 0:
            self._past_limit()
        if self._text and self._streams:
            self._emit_text()
        state = self._state
        if (state == HELD or (state == TOP and self._damaged)) and self._spec_on and self._kept is not None:
            return self._speculate(text)
        out = self._out
        if not out:
            return []
        self._out = []
        if self._collector is not None:
            self._unfolded.extend(out)
        return out

    def _decode(self, chunk: bytes | bytearray | memoryview) -> str | None:
        """A chunk of bytes, kept and decoded; ``None`` where it is no UTF-8 (the rest is held)."""
        if not isinstance(chunk, (bytes, bytearray, memoryview)):  # (as the compiled reader checks at the call)
            raise TypeError(f"feed() takes str or bytes, not {type(chunk).__name__}")
        if self._closed:
            raise ValueError("feed() after close()")
        data = bytes(chunk)
        self._bytes = True
        self._keep(data)
        if self._decoder is None:
            self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        try:
            return self._decoder.decode(data)
        except UnicodeDecodeError:
            self._hold(self._pend, len(self._pend))
            if self._room < 0:
                self._over_size()
            return None

    def _held(self, text: str) -> list[Event]:
        """A chunk of a held stream: counted, and reread now and then (``_speculate``)."""
        self._base += len(text)
        if self._base > self._limit or self._room < 0:
            self._past_limit()
        if self._spec_on and self._kept is not None:
            return self._speculate(text)
        return []

    def _left(self, s: str, i: int) -> int:
        """``HELD``: the input left the format; no token is read in it (a held chunk never comes here)."""
        raise Held

    def _plain_or_cut(self, chunk: str) -> bool:
        """Whether ``chunk`` is decided text, or decided text and then the start of the closing tag."""
        cut = plain_end(chunk)
        if cut == len(chunk):
            return cut > 0
        tag = self._close_tag
        if chunk[cut] != "<" or len(chunk) - cut >= len(tag) or not tag.startswith(chunk[cut:]):
            return False
        self._pend, self._need, self._twice, self._live = chunk[cut:], ">", False, False
        return True


_TABLE: Final[tuple[Callable[[StreamParser, str, int], int], ...]] = (
    StreamParser._top,  # TOP
    StreamParser._list,  # LIST
    StreamParser._brace,  # CHAT_END
    StreamParser._sep,  # SEP
    StreamParser._brace,  # END
    StreamParser._done,  # DONE
    StreamParser._open,  # OPEN
    StreamParser._key,  # KEY
    StreamParser._close,  # CLOSE
    StreamParser._in_text,  # TEXT
    StreamParser._after,  # AFTER
    StreamParser._left,  # HELD
)
"""The reader's table: the method that reads a token in each state (numbered 0 to 11 in ``state.py``, in this order)."""
