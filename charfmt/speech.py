"""Sentences for text-to-speech: complete sentences from message deltas, as early as possible.

The rule, read left to right over one segment's decoded text (only decoded text reaches
it: no markup); the result depends on the text only, never on how it was chunked:

- A **newline** always ends a sentence (and closes any quote left open on its line).
- Inside quotes (「…」, 『…』, “…”, "…", （…）, (…)) nothing else ends a sentence.
- Outside quotes, a **run** of end punctuation (``。！？…‼⁇⁈⁉.!?``, any mix) and the
  closing brackets right after it end a sentence together: ``えっ！？``, ``やったー！！！``
  and ``本当…。`` are one sentence each, and speech never gets a lone ``？``. Then:

  - a run holding CJK punctuation ends the sentence whatever follows (``わあ！本当``);
  - a run of ``.!?`` only ends it when whitespace or the end follows (not ``3.5``,
    ``a.b`` or ``?!x``);
  - a single ``.`` after an abbreviation of ``ABBREVIATIONS`` (``Dr. Smith``,
    ``e.g. this``) never ends it;
  - an ellipsis (``...``, ``…``) followed, after optional spaces, by a lower-case letter
    does not end it (``Really... that's great`` is one sentence; ``Wait... What?`` is two).

- A closing quote right after end punctuation ends the sentence when whitespace, an
  opening quote or the end follows (``「ねえ！」「なに？」`` is two sentences;
  ``「ねえ！」と言った。`` is one).

A sentence whose end cannot be decided yet (a run of end punctuation, closing brackets
or the spaces after an ellipsis at the end of the text so far) waits for the next delta
or the end of the segment. Each sentence keeps the emotion that was active when it was
spoken. Every character is looked at once and pending text is never copied again, so the
work is linear in the text however it is chunked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from charfmt.events import ChatStart, Emotion, Event, Reset, SegmentEnd, TextDelta
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.models import Reply

_CJK_END: Final = frozenset("。！？…‼⁇⁈⁉")
_WESTERN_END: Final = frozenset(".!?")
_END: Final = _CJK_END | _WESTERN_END
_ELLIPSIS: Final = frozenset(".…")
_OPENERS: Final = {"「": "」", "『": "』", "“": "”", "（": "）", "(": ")"}
_CLOSERS: Final = frozenset("」』”）)'")
"""Closing brackets that belong to the end punctuation before them ('"' toggles instead)."""
_SPECIAL: Final = re.compile("[" + re.escape("".join(sorted(_END | set(_OPENERS) | _CLOSERS | {'"', "\n"}))) + "]")
"""A character the rule looks at outside a pending decision; everything else is skipped."""

ABBREVIATIONS: Final = frozenset(
    {"mr", "mrs", "ms", "mx", "dr", "prof", "st", "sr", "jr", "mt", "vs", "etc", "e.g", "i.e", "cf", "approx"}
)
"""Words (lower case, without the final ``.``) whose ``.`` never ends a sentence: ``Dr. Smith``."""
_LOOKBACK: Final = 8
"""How many characters before a ``.`` are kept to recognise an abbreviation (longer than any)."""

# Phases of a pending decision: none; in a run of end punctuation; in the closing brackets
# after it; in the spaces after an ellipsis; in the closing brackets after a closed quote.
_NONE, _RUN, _RUN_CLOSERS, _ELLIPSIS_SPACE, _QUOTE_CLOSERS = range(5)


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence to speak."""

    text: str
    emotion: str | None
    chat: int
    segment: int

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {"text": self.text, "emotion": self.emotion, "chat": self.chat, "segment": self.segment}


@dataclass(slots=True)
class _Buffer:
    """One segment's state: the text of the sentence so far, and the rule's state at its end."""

    parts: list[str] = field(default_factory=list)
    """The sentence so far, as the deltas brought it (joined once, when it is emitted)."""
    tail: str = ""
    """The last ``_LOOKBACK`` characters of the segment (for ``3.5`` and abbreviations)."""
    quotes: list[str] = field(default_factory=list)
    ascii_quote: bool = False
    phase: int = _NONE
    run_cjk: bool = False  # the run holds CJK punctuation
    run_ellipsis: bool = False  # the run is only '.' and '…'
    run_length: int = 0
    run_digit: bool = False  # the run is a '.' after a digit (maybe "3.5")
    run_abbreviation: bool = False  # the run is a '.' after an abbreviation
    run_closers: int = 0
    steps: int = 0
    """Characters looked at one by one (a measure of the work, for tests)."""


class SentenceSplitter:
    """Feed it events; it returns sentences as soon as each one is complete."""

    def __init__(self, *, tags: Iterable[str] | TagTable | None = None) -> None:
        self.tags = _speech_tags(tags)
        """The tags whose text is split: the table's speech tags by default."""
        self._emotion: dict[int, str | None] = {}
        self._buffers: dict[tuple[int, int], _Buffer] = {}
        self.steps = 0
        """Characters looked at one by one so far (grows linearly with the text)."""

    def feed(self, event: Event) -> list[Sentence]:
        """The sentences ``event`` completes."""
        if isinstance(event, ChatStart):
            self._emotion[event.chat] = None
        elif isinstance(event, Emotion):
            self._emotion[event.chat] = event.text
        elif isinstance(event, TextDelta) and event.tag in self.tags:
            key = (event.chat, event.segment)
            buf = self._buffers.get(key)
            if buf is None:
                buf = self._buffers[key] = _Buffer()
            return self._scan(event.chat, event.segment, buf, event.text)
        elif isinstance(event, SegmentEnd):
            ended = self._buffers.pop((event.chat, event.segment), None)
            if ended is not None:
                return self._finish(event.chat, event.segment, ended)
        elif isinstance(event, Reset):
            self._emotion.clear()
            self._buffers.clear()
        return []

    def close(self) -> list[Sentence]:
        """Whatever is left (a stream that ended mid-sentence)."""
        out: list[Sentence] = []
        for (chat, segment), buf in sorted(self._buffers.items()):
            out += self._finish(chat, segment, buf)
        self._buffers.clear()
        return out

    def _finish(self, chat: int, segment: int, buf: _Buffer) -> list[Sentence]:
        """The end of the segment decides whatever waited: the rest is one sentence."""
        out: list[Sentence] = []
        self._emit(out, buf, chat, segment)
        return out

    def _scan(self, chat: int, segment: int, buf: _Buffer, text: str) -> list[Sentence]:
        """Read one delta; emit the sentences it completes."""
        out: list[Sentence] = []
        start = 0  # where the part of the sentence in this delta begins
        i, n = 0, len(text)
        steps = 0
        while i < n:
            phase = buf.phase
            if phase != _NONE:
                # A pending decision: look at characters one by one until one decides it.
                c = text[i]
                steps += 1
                cut = False
                if phase == _RUN:
                    if c in _END:
                        buf.run_length += 1
                        buf.run_cjk = buf.run_cjk or c in _CJK_END
                        buf.run_ellipsis = buf.run_ellipsis and c in _ELLIPSIS
                        i += 1
                        continue
                    if c in _CLOSERS:
                        buf.phase = _RUN_CLOSERS
                        buf.run_closers += 1
                        i += 1
                        continue
                    cut = self._run_ends(buf, c)
                elif phase == _RUN_CLOSERS:
                    if c in _CLOSERS:
                        buf.run_closers += 1
                        i += 1
                        continue
                    if c in _END:  # 「わあ！）？」: the run goes on after a stray closer
                        buf.phase = _RUN
                        continue
                    cut = self._run_ends(buf, c)
                elif phase == _ELLIPSIS_SPACE:
                    if c.isspace() and c != "\n":
                        i += 1
                        continue
                    cut = not c.islower()
                else:  # _QUOTE_CLOSERS
                    if c in _CLOSERS:
                        i += 1
                        continue
                    cut = c.isspace() or c in _OPENERS or c == '"'
                if buf.phase == _ELLIPSIS_SPACE and phase != _ELLIPSIS_SPACE:
                    i += 1  # _run_ends deferred: c is a space after an ellipsis
                    continue
                buf.phase = _NONE
                if cut:
                    buf.parts.append(text[start:i])
                    self._emit(out, buf, chat, segment)
                    start = i
                # c is read again below, as any character outside a decision
            m = _SPECIAL.search(text, i)
            if m is None:
                break
            i = m.start()
            c = text[i]
            steps += 1
            if c in _OPENERS:
                buf.quotes.append(_OPENERS[c])
            elif (buf.quotes and c == buf.quotes[-1]) or (c == '"' and buf.ascii_quote):
                if c == '"':
                    buf.ascii_quote = False
                else:
                    buf.quotes.pop()
                if not buf.quotes and not buf.ascii_quote and self._before(buf, text, i, 1) in _END:
                    buf.phase = _QUOTE_CLOSERS  # 「聞いて！」 ends a sentence only if nothing continues it
            elif c == '"':
                buf.ascii_quote = True
            elif c == "\n":
                buf.parts.append(text[start:i])
                self._emit(out, buf, chat, segment)
                start = i + 1
                buf.quotes.clear()  # a quote left open on its line closes with it
                buf.ascii_quote = False
            elif c in _END and not buf.quotes and not buf.ascii_quote:
                buf.phase = _RUN
                buf.run_length = 1
                buf.run_cjk = c in _CJK_END
                buf.run_ellipsis = c in _ELLIPSIS
                buf.run_closers = 0
                before = self._before(buf, text, i, _LOOKBACK)
                buf.run_digit = c == "." and before[-1:].isdigit()
                buf.run_abbreviation = c == "." and _word_at_end(before) in ABBREVIATIONS
            i += 1
        if start < n:
            buf.parts.append(text[start:])
        buf.tail = (buf.tail + text[-_LOOKBACK:])[-_LOOKBACK:]
        buf.steps += steps
        self.steps += steps
        return out

    @staticmethod
    def _before(buf: _Buffer, text: str, i: int, count: int) -> str:
        """The ``count`` characters of the segment before ``text[i]`` (fewer at its start)."""
        if i >= count:
            return text[i - count : i]
        return (buf.tail + text[:i])[-count:]

    @staticmethod
    def _run_ends(buf: _Buffer, c: str) -> bool:
        """Whether the run of end punctuation (and closers) ends the sentence, ``c`` following it."""
        single_dot = buf.run_length == 1 and not buf.run_cjk and buf.run_ellipsis
        if single_dot and buf.run_abbreviation:
            return False
        if single_dot and buf.run_digit and not buf.run_closers and c.isdigit():
            return False  # 3.5
        if buf.run_ellipsis and (buf.run_length > 1 or buf.run_cjk):
            if c.isspace() and c != "\n":
                buf.phase = _ELLIPSIS_SPACE  # the first letter after the spaces decides
                return False
            if c.islower():
                return False
        return buf.run_cjk or c.isspace()

    def _emit(self, out: list[Sentence], buf: _Buffer, chat: int, segment: int) -> None:
        text = "".join(buf.parts).strip()
        buf.parts.clear()
        if text:
            out.append(Sentence(text, self._emotion.get(chat), chat, segment))


def _word_at_end(text: str) -> str:
    """The word (letters and inner dots) ``text`` ends with, in lower case: ``e.g`` in ``see e.g``."""
    k = len(text)
    while k > 0 and (text[k - 1].isalpha() or text[k - 1] == "."):
        k -= 1
    return text[k:].lower()


def _speech_tags(tags: Iterable[str] | TagTable | None) -> frozenset[str]:
    """Tag names to split: given names, or the speech tags of a table (``None``: ``DEFAULT_TAGS``)."""
    if tags is None or isinstance(tags, TagTable):
        table = DEFAULT_TAGS if tags is None else tags
        return frozenset(t.name for t in table.with_role("speech"))
    return frozenset(tags)


def sentences(events: Iterable[Event] | Reply, *, tags: Iterable[str] | TagTable | None = None) -> Iterator[Sentence]:
    """Complete sentences of the speech text in ``events`` (or a whole ``Reply``), each with its active emotion.

    ``tags``: the tags to read, as names, or a tag table whose ``speech`` tags are read
    (``None``: the speech tags of ``DEFAULT_TAGS``, i.e. ``msg``). A table also gives a
    ``Reply``'s events their roles.
    """
    splitter = SentenceSplitter(tags=tags)
    from charfmt.models import Reply  # noqa: PLC0415 (the splitter itself needs no models)

    # A Reply is iterable too (pydantic yields its fields): read its events, not its fields.
    table = tags if isinstance(tags, TagTable) else None
    stream: Iterable[Event] = events.events(table) if isinstance(events, Reply) else events
    for event in stream:
        yield from splitter.feed(event)
    yield from splitter.close()
