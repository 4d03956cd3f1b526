"""What the stream reader remembers between chunks, and the steps every part of it shares.

``State`` holds it all: where the reader is in the input (its state, the start of a token a
chunk boundary cut, offset, line), the chats it has begun, the text it keeps for rereads
and ``close()``, the events not yet returned; and the steps the envelope, the body, the
rereads and the end share: wait for the next chunk (``_stall``), leave the format
(``_hold``), go on through damage the batch reader repairs (``_repair``), emit.
"""

from __future__ import annotations

import codecs
import sys
from typing import Any, Final

from charfmt import events
from charfmt._arguments import check_flag, check_reading
from charfmt.diagnostics import CODES, Diagnostic, ParseError
from charfmt.models import Reply, Vocabulary
from charfmt.parser import DEFAULT_MAX_SIZE, prompt_texts, turn_lines
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TEXT_TAG, TagTable

from . import kept as kept_text
from .chats import NO_CHAT, OpenChat, Orders
from .collector import Collector
from .language import NO_CLOSER, Matcher, language

# The reader's states: where it is in the reply, which says what token comes next (the
# table, reader._TABLE, gives each its method). Final ints: mypyc compiles them in.
TOP: Final = 0
"""Before ``{"chats": [``: text before the reply is skipped, and kept (bounded) for the
reasoning it may hold; damage there (prose, a fence) is repaired, and reread."""
LIST: Final = 1
"""Where a chat may start: its header, read whole up to the body's opening quote, or ``]``."""
CHAT_END: Final = 2
"""After a body's closing quote: the chat's ``}``."""
SEP: Final = 3
"""After a chat: ``,`` or ``]``."""
END: Final = 4
"""After the list's ``]``: the reply's ``}``."""
DONE: Final = 5
"""After the reply: only white space is expected (text is damage ``close()`` decides)."""
OPEN: Final = 6
"""At the start of a body: its first element's opening tag."""
KEY: Final = 7
"""In an emotion's key: nothing is shown until it is complete (``<``), then the segment
and the ``Emotion`` at once (checked against the vocabulary)."""
CLOSE: Final = 8
"""After an emotion's key: its closing tag."""
TEXT: Final = 9
"""In the text of an element, or of an I/E body: plain runs, escapes, entities, until
the closing tag (the body's closing quote for I/E). Speech streams as deltas; an action or
a cue is shown whole at its closing tag."""
AFTER: Final = 10
"""After an element: the separator (``\\n``, JSON-escaped) and the next opening tag, or the body's end."""
HELD: Final = 11
"""The input left the format: the rest is read by the batch reader (rereads, ``close()``)."""

SPECULATE_LIMIT_SHIFT: Final = 5
"""A repaired or held stream is reread (shown early) only while it is shorter than ``max_size >> 5``."""

# mypyc reads the Final names of the modules it compiles from C statics, but names imported
# from other modules from a dict on every use: the event classes the reader builds, as Final
# names (the very classes of charfmt.events).
TextDelta: Final = events.TextDelta
SegmentStart: Final = events.SegmentStart
SegmentEnd: Final = events.SegmentEnd
ChatStart: Final = events.ChatStart
ChatEnd: Final = events.ChatEnd
Emotion: Final = events.Emotion
Action: Final = events.Action
Cue: Final = events.Cue


class Held(Exception):
    """The input left the format: hold the rest for the batch reader."""


class State:
    """Everything the reader remembers between chunks (each class above it adds the steps of one job)."""

    # Slots: the hot path reads a dozen attributes per chunk (about 8% faster than a __dict__).
    __slots__ = (
        "_base",
        "_bytes",
        "_chat",
        "_chats",
        "_chats_at",
        "_chats_end",
        "_close_tag",
        "_closed",
        "_closer",
        "_collector",
        "_count",
        "_damaged",
        "_decoder",
        "_echo_line",
        "_held_at",
        "_held_back",
        "_kept",
        "_kept_mark",
        "_lang",
        "_last_order",
        "_limit",
        "_line",
        "_line_start",
        "_live",
        "_need",
        "_open_clean",
        "_open_other",
        "_open_tag",
        "_orders",
        "_out",
        "_oversize",
        "_pend",
        "_preamble",
        "_preamble_size",
        "_probe",
        "_probe_raw",
        "_prompt",
        "_reasoning",
        "_room",
        "_sentences",
        "_spec_at",
        "_spec_last",
        "_spec_on",
        "_spec_work",
        "_state",
        "_streams",
        "_text",
        "_turn",
        "_twice",
        "_unfolded",
        "_unsorted",
        "lenient",
        "max_size",
        "tags",
        "vocabulary",
    )

    def __init__(
        self,
        *,
        lenient: bool = True,
        vocabulary: Vocabulary | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
        keep_reply: bool = True,
        tags: TagTable | None = None,
        turn: Any = None,
        prompt: Any = None,
    ) -> None:
        # The compiled reader checks these types at the call too; both check them as ``parse`` does.
        check_reading(lenient, vocabulary, tags, max_size)
        check_flag(keep_reply, "keep_reply")
        self.lenient = lenient
        self._turn = turn_lines(turn)  # what the player said: an echo of it is not the character's (CF625)
        self._prompt = prompt_texts(prompt)  # the prompt's own text: an echo of it is not the character's (CF631)
        self.vocabulary = vocabulary
        self.max_size = max_size
        self.tags = DEFAULT_TAGS if tags is None else tags
        self._lang = language(self.tags)
        self._reasoning = ""  # the model's reasoning shown so far (Reasoning events)
        self._preamble: list[str] | None = []  # text skipped before the reply (reasoning, prose, a fence)
        self._preamble_size = 0  # ... its length
        self._damaged = False  # read through damage the batch reader repairs the same way (close() completes it)
        self._spec_at = 0  # how much of a held stream the last reread read (see Rereads)
        self._spec_work = 0  # how much all rereads read
        self._spec_last: tuple[int, int, str, str] | None = None  # its last segment: order, index, tag, text
        self._open_tag = ""  # the tag of a bare-tags element the last reread ended inside (see Rereads)
        self._open_clean = False  # ... and whether its raw text so far is all settled
        self._open_other = False  # the last reread ended inside an element other than speech, in any dialect
        self._held_back = False  # the last reread held back a sentence the next characters settle (Rereads)
        self._echo_line = 0  # how many last lines of the last reread may still be an echo or open a transcript
        self._probe_raw: str | bytes = ""  # the text of the last reread, for its probe (see Rereads._keeps)
        self._probe: Reply | None = None  # ... and the probe's reading, once read
        self._spec_on = lenient and keep_reply  # rereads go on until one contradicts what was shown
        self._collector: Collector | None = Collector() if keep_reply else None
        self._unfolded: list[events.Event] = []  # events not yet folded into the collector
        self._decoder: codecs.IncrementalDecoder | None = None
        self._kept: list[str | bytes] | None = []
        self._kept_mark = 0  # kept[:mark] are joined runs of chunks (see kept.compact)
        self._room = max_size  # max_size less the bytes fed (bytes input)
        self._limit = max_size  # past this offset (characters), nothing more is kept
        self._oversize = False  # left the format within max_size, then grew past it (see _over_size)
        self._bytes = False
        self._state = TOP
        self._pend = ""  # the start of a token cut by the chunk boundary
        self._need = ""  # a character that token needs (see _stall)
        self._twice = False  # ... twice (see _stall)
        self._base = 0  # raw offset (characters) of the first character not yet consumed
        self._line = 1  # its line
        self._line_start = 0  # the offset where that line starts
        self._chat = NO_CHAT  # the chat being read
        # Only chats still open are kept, and the orders seen (for duplicates and gaps) as a
        # run 1..n plus the others: memory grows with neither the chats nor their text.
        self._chats: dict[int, OpenChat] = {}
        self._count = 0
        self._unsorted = False
        self._last_order = 0
        self._orders = Orders()
        self._chats_at: tuple[int, int, int] = (0, 1, 1)
        self._chats_end = 0
        self._closer: Matcher = NO_CLOSER  # the closing tag of the open element
        self._close_tag = ""  # ... as written in canonical output
        self._text: list[str] = []  # decoded text of the open segment not yet emitted
        self._streams = False  # the open segment's text goes out as deltas
        self._live = False  # ... and its chat is announced: a plain chunk is one delta
        self._sentences = False  # ... an element other than speech: its text after a sentence's end waits
        self._out: list[events.Event] = []
        self._closed = False
        self._held_at = (0, 1, 1)  # where the input left the format

    # -- events ---------------------------------------------------------------------------------
    def _flush(self) -> list[events.Event]:
        out, self._out = self._out, []
        if self._collector is not None and out:
            self._unfolded.extend(out)
        return out

    def _folded(self) -> Collector:
        if self._collector is None:
            raise ValueError("StreamParser(keep_reply=False) keeps no reply")
        for event in self._unfolded:
            self._collector.add(event)
        self._unfolded = []
        return self._collector

    def _start(self, chat: OpenChat) -> None:
        """Announce the chat with its first content: a chat cut off before any has no events."""
        chat.started = True
        self._out.append(ChatStart(chat.index, chat.kind, chat.order, chat.speaker))
        if chat.kind not in TAGGED_TYPES:
            self._out.append(SegmentStart(chat.index, 0, TEXT_TAG))

    def _emit_text(self) -> None:
        """Emit the decided text of the open (streamed) segment as one delta."""
        chat = self._chat
        if not chat.started:
            self._start(chat)
        chat.had_text = True
        self._out.append(TextDelta(chat.index, chat.segment, chat.tag, "".join(self._text)))
        self._text.clear()
        self._live = not self._pend

    def _here(self, s: str, i: int) -> tuple[int, int, int]:
        """Raw offset, line and column of ``s[i]`` (``s`` starts at the first unconsumed character)."""
        newlines = s.count("\n", 0, i)
        if newlines:
            return self._base + i, self._line + newlines, i - s.rfind("\n", 0, i)
        return self._base + i, self._line, self._base + i - self._line_start + 1

    def _diagnostic(self, code: str, message: str, at: tuple[int, int, int], end: int, chat: int | None) -> None:
        offset, line, column = at
        d = Diagnostic(
            code=code, message=message, severity=CODES[code][0], line=line, column=column,
            offset=offset, end=max(end, offset), chat=chat,
        )  # fmt: skip
        self._out.append(events.DiagnosticEvent(chat, d))

    def _fail(self, diagnostic: Diagnostic) -> None:
        """A strict stream raises where ``parse`` would; a lenient one reports ``diagnostic``."""
        if not self.lenient:
            raise ParseError([diagnostic])

    def _batch_kwargs(self) -> dict[str, Any]:
        """What a batch reread of this stream passes to ``parse`` besides the text (the default table is implied)."""
        kwargs: dict[str, Any] = {} if self.tags is DEFAULT_TAGS else {"tags": self.tags}
        if self._turn:
            kwargs["turn"] = self._turn
        if self._prompt:
            kwargs["prompt"] = self._prompt
        return kwargs

    # -- tokens that wait, input that leaves the format -----------------------------------------
    def _hold(self, s: str, i: int) -> int:
        """The input left the format at ``s[i]``: emit the text decided before it, hold the rest."""
        if self._state != HELD:
            if self._text and self._streams:
                self._emit_text()
            self._held_at = self._here(s, i)
            self._state = HELD
            self._live = self._streams = self._sentences = False
        self._pend = ""
        return len(s)

    def _stall(self, s: str, i: int, limit: int, need: str = "") -> int:
        """No token matches at ``s[i]``: wait for the next chunk, unless the tail is too long.

        Returns ``~j``: reading stops at ``s[j]`` (``i``, or the end once the rest is held).
        ``need``: a character the token ends with, if there is one ('>' for a tag, '"' for a
        chat header): until a chunk brings it, there is nothing to try again.
        """
        if len(s) - i >= limit:
            return ~self._hold(s, i)
        pend = self._pend = s[i:]
        self._need = need
        # An opening tag cut in a name only tags announced whole begin with: read once their
        # closing tag's '>' came too (before that, it would only be cut again).
        self._twice = need == ">" and pend[pend.rfind("<") + 1 :].lower() in self._lang.whole_prefixes
        self._live = False  # until the token is read, a chunk is not plain text
        return ~i

    def _repair(self) -> None:
        """The reader goes on through damage the batch reader repairs the same way (``close()`` completes it).

        Past ``max_size`` nothing is kept to complete it with: there, damage is damage (CF801).
        A strict stream shows nothing from the first damage on: ``close()`` raises where
        ``parse`` would.
        """
        if self._kept is None or not self.lenient:
            raise Held
        self._damaged = True
        self._limit = min(self._limit, self.max_size >> SPECULATE_LIMIT_SHIFT)

    # -- what is kept, and how much ---------------------------------------------------------------
    def _keep(self, chunk: bytes) -> None:
        self._room -= len(chunk)  # checked once the chunk is read (_over_size)
        if (kept := self._kept) is not None:
            kept.append(chunk)
            if len(kept) - self._kept_mark >= kept_text.KEPT_RUN:
                self._kept_mark = kept_text.compact(kept, self._kept_mark)

    def _raw(self) -> str | bytes:
        """The text kept so far, as fed: ``str``, or ``bytes`` once any chunk was bytes."""
        assert self._kept is not None
        return kept_text.raw(self._kept, self._bytes)

    def _past_limit(self) -> None:
        """The stream grew past ``_limit``: a repaired one stops showing, a long one stops keeping."""
        if self._damaged and self._limit < self.max_size:
            # What is shown is kept (the reply) besides the raw text kept for close(): past
            # 1/32 of max_size, a repaired stream waits for close() (memory within max_size).
            if self._state != HELD:
                self._base += len(self._pend)
                self._pend = ""
                self._hold("", 0)
            self._limit = self.max_size
        if self._base > self._limit or self._room < 0:
            self._over_size()

    def _over_size(self) -> None:
        """More than ``max_size`` was fed: nothing more is kept, memory stays flat from here on.

        The stream reads its first ``max_size`` characters (bytes for ``bytes`` input) like
        ``parse`` does. Still in the format there, it is a long stream: it goes on streaming,
        and damage after that point is reported as ``CF801`` (see ``Reconcile``). Out of the
        format before that point, it is read like ``parse`` reads input over ``max_size``: at
        ``close()``, ``CF002`` and no chats.
        """
        if self._kept is None:
            return
        if self._damaged or (self._state == HELD and self._held_offset() < self.max_size):
            self._oversize = True  # (a repair is only ever made while the text is kept: within max_size)
        self._kept = None
        self._limit = sys.maxsize

    def _held_offset(self) -> int:
        """Where the input left the format, in the unit of ``max_size`` (bytes for ``bytes`` input)."""
        offset = self._held_at[0]
        if not self._bytes or self._kept is None:
            return offset
        return kept_text.byte_offset(self._kept, offset)
