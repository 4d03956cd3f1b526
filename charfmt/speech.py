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
- A sentence of punctuation alone (a lone ``…`` before ``寂しかった。``) is never spoken on
  its own: it begins the next sentence (``…寂しかった。`` is one sentence).
- With ``max_length`` set (for TTS that should start early), a ``、`` or ``,`` outside
  quotes also ends a sentence once it is longer than ``max_length`` characters (a ``,``
  between digits, ``3,000``, never does): the aituber-kit and ChatdollKit behaviour.

Speech cut at a length bound (``bound``: a constrained reply's speech reached the most characters
its grammar allows, and the grammar closed it there) ends mid-sentence: that unfinished sentence is
never spoken (nor sent as a ``speak`` cue); ``cut_text`` ends such text at its last whole word,
``trim_cut_speech`` a whole reply's (``CF150``).

A sentence whose end cannot be decided yet (a run of end punctuation, closing brackets
or the spaces after an ellipsis at the end of the text so far) waits for the next delta
or the end of the segment. Each sentence keeps the emotion that was active when it was
spoken. Every character is looked at once and pending text is never copied again, so the
work is linear in the text however it is chunked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from charfmt._strict.envelope import Locator
from charfmt.diagnostics import Diagnostic, in_body
from charfmt.events import Action, ChatStart, Emotion, Event, Reset, SegmentEnd, TextDelta
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.diagnostics import Diagnostic
    from charfmt.models import Chat, Reply

_CJK_END: Final = frozenset("。！？…‼⁇⁈⁉")
_WESTERN_END: Final = frozenset(".!?")
_END: Final = _CJK_END | _WESTERN_END
_ELLIPSIS: Final = frozenset(".…")
_OPENERS: Final = {"「": "」", "『": "』", "“": "”", "（": "）", "(": ")"}
_CLOSERS: Final = frozenset("」』”）)'")
"""Closing brackets that belong to the end punctuation before them ('"' toggles instead)."""
_PAUSES: Final = frozenset("、,，")
"""Where a sentence longer than ``max_length`` may also end (a pause, not an end)."""
_RULE_CHARS: Final = "".join(sorted(_END | set(_OPENERS) | _CLOSERS | {'"', "\n"}))
_RULE_CHAR: Final = re.compile("[" + re.escape(_RULE_CHARS) + "]")
"""A character the rule looks at outside a pending decision; everything else is skipped."""
_RULE_CHAR_OR_PAUSE: Final = re.compile("[" + re.escape(_RULE_CHARS + "".join(sorted(_PAUSES))) + "]")
"""The same, with the pauses (``max_length`` set)."""
_NOT_SPOKEN: Final = frozenset(_END | set(_OPENERS) | _CLOSERS | _PAUSES | {'"', "・", "ー", "～", "~", "-", "—"})
"""Characters a sentence made only of (and whitespace) is not spoken alone."""

ABBREVIATIONS: Final = frozenset(
    {"mr", "mrs", "ms", "mx", "dr", "prof", "st", "sr", "jr", "mt", "vs", "etc", "e.g", "i.e", "cf", "approx"}
)
"""Words (lower case, without the final ``.``) whose ``.`` never ends a sentence: ``Dr. Smith``."""
_LOOKBACK: Final = 8
"""How many characters before a ``.`` are kept to recognise an abbreviation (longer than any)."""

# Phases of a pending decision: none; in a run of end punctuation; in the closing brackets
# after it; in the spaces after an ellipsis; in the closing brackets after a closed quote;
# after a ',' that would end a long sentence unless a digit follows.
_NONE, _RUN, _RUN_CLOSERS, _ELLIPSIS_SPACE, _QUOTE_CLOSERS, _COMMA = range(6)
# What one character does to a pending decision: nothing yet (look at the next one); it
# changed the phase (look at it again); it decided: the sentence ends before it, or goes on.
_NEXT, _AGAIN, _CUT, _KEEP = range(4)


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence to speak."""

    text: str
    """What to say (stripped; never punctuation alone)."""
    emotion: str | None
    """The emotion active when it was spoken (the chat's latest ``<emo>``), or ``None``."""
    chat: int
    """The chat's index in the reply."""
    segment: int
    """The segment's index in its chat."""
    intensity: float | None = None
    """The emotion's intensity, where the reply gave one (``[joy:0.6]``)."""
    action: str | None = None
    """The action active when it was spoken (the chat's latest ``<act>``), or ``None``."""
    speaker: str | None = None
    """Who says it, where the chat names a speaker (a scene); ``None`` for the character."""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict; ``intensity``, ``action`` and ``speaker`` only where set."""
        out: dict[str, object] = {
            "text": self.text,
            "emotion": self.emotion,
            "chat": self.chat,
            "segment": self.segment,
        }
        for key in ("intensity", "action", "speaker"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


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
    length: int = 0
    """Characters of the sentence held in ``parts``."""
    spoken: bool = False
    """Whether ``parts`` hold anything but punctuation and whitespace."""
    total: int = 0
    """Characters of the segment so far (a segment that reaches ``bound`` was cut)."""
    steps: int = 0
    """Characters looked at one by one (a measure of the work, for tests)."""


class SentenceSplitter:
    """Feed it events; it returns sentences as soon as each one is complete."""

    def __init__(
        self, *, tags: Iterable[str] | TagTable | None = None, max_length: int | None = None, bound: int | None = None
    ) -> None:
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be at least 1; got {max_length}")
        if bound is not None and bound < 1:
            raise ValueError(f"bound must be at least 1; got {bound}")
        self.bound = bound
        """The most characters a speech segment may hold (a grammar's ``Bounds.max_chars``): one that
        reaches it was cut there, and its unfinished last sentence is not spoken (``None``: no bound)."""
        self._cut_off = False
        self.tags = _speech_tags(tags)
        """The tags whose text is split: the table's speech tags by default."""
        self.max_length = max_length
        """A sentence longer than this also ends at a ``、`` or ``,`` (``None``: only at end punctuation)."""
        self._rule_char = _RULE_CHAR if max_length is None else _RULE_CHAR_OR_PAUSE
        self._emotion: dict[int, str | None] = {}
        self._intensity: dict[int, float | None] = {}
        self._action: dict[int, str | None] = {}
        self._speaker: dict[int, str | None] = {}
        self._buffers: dict[tuple[int, int], _Buffer] = {}
        self.steps = 0
        """Characters looked at one by one so far (grows linearly with the text)."""

    def feed(self, event: Event) -> list[Sentence]:
        """The sentences ``event`` completes."""
        if not isinstance(event, Event):  # a str would otherwise be dropped as an unknown event
            got = type(event).__name__
            raise TypeError(f"SentenceSplitter.feed takes events (from StreamParser.feed or Reply.events()), not {got}")
        if isinstance(event, ChatStart):
            self._emotion[event.chat] = None
            self._intensity[event.chat] = None
            self._action[event.chat] = None
            self._speaker[event.chat] = event.speaker
        elif isinstance(event, Emotion):
            self._emotion[event.chat] = event.text
            self._intensity[event.chat] = event.intensity
        elif isinstance(event, Action):
            if event.text.strip():  # (an empty action means nothing: the last one stays, as the stage's motion)
                self._action[event.chat] = event.text
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
            self._cut_off = False
            self._emotion.clear()
            self._intensity.clear()
            self._action.clear()
            self._speaker.clear()
            self._buffers.clear()
        return []

    def cut_off(self) -> None:
        """The stream was cut (its token budget ran out): the unfinished sentences of the segments still
        open are fragments, not spoken when the stream's last events end them."""
        self._cut_off = True

    def close(self) -> list[Sentence]:
        """Whatever is left (a stream that ended mid-sentence)."""
        out: list[Sentence] = []
        for (chat, segment), buf in sorted(self._buffers.items()):
            out += self._finish(chat, segment, buf)
        self._buffers.clear()
        return out

    def _finish(self, chat: int, segment: int, buf: _Buffer) -> list[Sentence]:
        """The end of the segment decides whatever waited: the rest is one sentence, unless the segment was
        cut (at ``bound``, or by ``cut_off``) before that sentence ended: a fragment is never spoken."""
        out: list[Sentence] = []
        cut = self._cut_off or (self.bound is not None and buf.total >= self.bound)
        if cut and buf.phase in (_NONE, _COMMA):  # (a pending run of end punctuation: the sentence did end)
            return out
        self._emit(out, buf, chat, segment, final=True)
        return out

    def _scan(self, chat: int, segment: int, buf: _Buffer, text: str) -> list[Sentence]:
        """Read one delta; emit the sentences it completes."""
        out: list[Sentence] = []
        start = 0  # where the part of the sentence in this delta begins
        i, n = 0, len(text)
        steps = 0
        while i < n:
            if buf.phase != _NONE:
                # A pending decision: look at characters one by one until one decides it.
                steps += 1
                step = _pending_step(buf, text[i])
                if step == _NEXT:
                    i += 1
                    continue
                if step == _AGAIN:
                    continue
                if step == _CUT:
                    self._append(buf, text[start:i])
                    self._emit(out, buf, chat, segment)
                    start = i
                # the deciding character is read again below, as any character outside a decision
            m = self._rule_char.search(text, i)
            if m is None:
                break
            i = m.start()
            steps += 1
            end = _rule_char_step(buf, text, i, start, self.max_length)
            if end >= 0:
                self._append(buf, text[start:end])
                self._emit(out, buf, chat, segment)
                start = i + 1
            i += 1
        if start < n:
            self._append(buf, text[start:])
        buf.total += n
        buf.tail = (buf.tail + text[-_LOOKBACK:])[-_LOOKBACK:]
        buf.steps += steps
        self.steps += steps
        return out

    @staticmethod
    def _append(buf: _Buffer, part: str) -> None:
        """Add text to the sentence (each character is looked at once: for ``spoken``)."""
        buf.parts.append(part)
        buf.length += len(part)
        if not buf.spoken:
            buf.spoken = any(not ch.isspace() and ch not in _NOT_SPOKEN for ch in part)

    def _emit(self, out: list[Sentence], buf: _Buffer, chat: int, segment: int, *, final: bool = False) -> None:
        if not buf.spoken and not final:
            return  # punctuation alone (a lone '…'): it begins the next sentence
        text = "".join(buf.parts).strip()
        buf.parts.clear()
        buf.length = 0
        buf.spoken = False
        if text:
            out.append(
                Sentence(
                    text,
                    self._emotion.get(chat),
                    chat,
                    segment,
                    self._intensity.get(chat),
                    self._action.get(chat),
                    self._speaker.get(chat),
                )
            )


def _rule_char_step(buf: _Buffer, text: str, i: int, start: int, max_length: int | None) -> int:
    """Read ``text[i]``, a character the rule looks at outside a decision (the sentence began at ``start``).

    Where it ends the sentence, the end of the sentence's text (the next one begins after
    ``text[i]``); ``-1`` otherwise.
    """
    c = text[i]
    if c in _OPENERS:
        buf.quotes.append(_OPENERS[c])
    elif (buf.quotes and c == buf.quotes[-1]) or (c == '"' and buf.ascii_quote):
        if c == '"':
            buf.ascii_quote = False
        else:
            buf.quotes.pop()
        if not buf.quotes and not buf.ascii_quote and _before(buf, text, i, 1) in _END:
            buf.phase = _QUOTE_CLOSERS  # 「聞いて！」 ends a sentence only if nothing continues it
    elif c == '"':
        buf.ascii_quote = True
    elif c == "\n":
        buf.quotes.clear()  # a quote left open on its line closes with it
        buf.ascii_quote = False
        return i
    elif c in _PAUSES:
        # a pause ends a sentence longer than max_length, with this delta's characters up to it
        if (
            not buf.quotes
            and not buf.ascii_quote
            and max_length is not None
            and buf.length + i - start + 1 > max_length
        ):
            if c == ",":
                buf.phase = _COMMA  # 3,000 is a number: the next character decides
            else:
                return i + 1
    elif c in _END and not buf.quotes and not buf.ascii_quote:
        # a run of end punctuation begins: the characters after it decide
        buf.phase = _RUN
        buf.run_length = 1
        buf.run_cjk = c in _CJK_END
        buf.run_ellipsis = c in _ELLIPSIS
        buf.run_closers = 0
        before = _before(buf, text, i, _LOOKBACK)
        buf.run_digit = c == "." and before[-1:].isdigit()
        buf.run_abbreviation = c == "." and _word_at_end(before) in ABBREVIATIONS
    return -1


def _before(buf: _Buffer, text: str, i: int, count: int) -> str:
    """The ``count`` characters of the segment before ``text[i]`` (fewer at its start)."""
    if i >= count:
        return text[i - count : i]
    return (buf.tail + text[:i])[-count:]


def _pending_step(buf: _Buffer, c: str) -> int:
    """Look at ``c`` in a pending decision: ``_NEXT``, ``_AGAIN``, or the decision (``_CUT``, ``_KEEP``)."""
    phase = buf.phase
    if phase == _RUN:
        if c in _END:
            buf.run_length += 1
            buf.run_cjk = buf.run_cjk or c in _CJK_END
            buf.run_ellipsis = buf.run_ellipsis and c in _ELLIPSIS
            return _NEXT
        if c in _CLOSERS:
            buf.phase = _RUN_CLOSERS
            buf.run_closers += 1
            return _NEXT
        cut = _run_ends(buf, c)
    elif phase == _RUN_CLOSERS:
        if c in _CLOSERS:
            buf.run_closers += 1
            return _NEXT
        if c in _END:  # 「わあ！）？」: the run goes on after a stray closer
            buf.phase = _RUN
            return _AGAIN
        cut = _run_ends(buf, c)
    elif phase == _ELLIPSIS_SPACE:
        if c.isspace() and c != "\n":
            return _NEXT
        cut = not c.islower()
    elif phase == _COMMA:
        cut = not c.isdigit()
    else:  # _QUOTE_CLOSERS
        if c in _CLOSERS:
            return _NEXT
        cut = c.isspace() or c in _OPENERS or c == '"'
    if buf.phase == _ELLIPSIS_SPACE and phase != _ELLIPSIS_SPACE:
        return _NEXT  # _run_ends deferred: c is a space after an ellipsis
    buf.phase = _NONE
    return _CUT if cut else _KEEP


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


def sentences(
    events: Iterable[Event] | Reply,
    *,
    tags: Iterable[str] | TagTable | None = None,
    max_length: int | None = None,
    bound: int | None = None,
) -> Iterator[Sentence]:
    """Complete sentences of the speech text in ``events`` (or a whole ``Reply``), each with its active emotion.

    ``tags``: the tags to read, as names, or a tag table whose ``speech`` tags are read
    (``None``: the speech tags of ``DEFAULT_TAGS``, i.e. ``msg``). A table also gives a
    ``Reply``'s events their roles. ``max_length``, ``bound``: see ``SentenceSplitter``.
    """
    splitter = SentenceSplitter(tags=tags, max_length=max_length, bound=bound)
    from charfmt.models import Reply  # noqa: PLC0415 (the splitter itself needs no models)

    # A Reply is iterable too (pydantic yields its fields): read its events, not its fields.
    table = tags if isinstance(tags, TagTable) else None
    stream: Iterable[Event] = events.events(table) if isinstance(events, Reply) else events
    for event in stream:
        yield from splitter.feed(event)
    yield from splitter.close()


# --- speech cut at a bound ---------------------------------------------------------------------

_CUT_MARK: Final = "…"
"""What ends speech cut mid-sentence: the character trails off."""

CUT_PAUSES: Final = "、,，-—:;"
"""Pauses dropped before the ``…`` that ends speech cut mid-sentence."""


def ends_a_sentence(ch: str) -> bool:
    """Whether text ending with ``ch`` may end a sentence (end punctuation, or a closing bracket after it)."""
    return ch in _END or ch in _CLOSERS or ch == '"'


_UNSPACED: Final = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xFF66, 0xFF9F))
"""Scripts written without spaces between words (kana, CJK ideographs): a cut between two of their
characters is a word boundary; in any other script it is one only at whitespace."""


def in_a_word(ch: str) -> bool:
    """Whether a cut after ``ch`` may fall inside a word (a letter or digit of a script with spaces)."""
    code = ord(ch)
    return ch.isalnum() and not any(lo <= code <= hi for lo, hi in _UNSPACED) and code < 0x20000


def cut_text(text: str) -> str:
    """``text`` cut at a bound, ended at its last whole word and marked with ``…`` (``""``: no whole word).

    A word cut in two is dropped (``The weather is a`` → ``The weather is…``: the ``a`` may have
    been ``about``); text in a script without spaces ends where it was cut; the spaces, pauses
    (``、``, ``,``) and dashes before the cut are dropped; text that ends a sentence where it was cut
    is kept as it is (less trailing spaces).
    """
    if not text.strip():
        return ""
    if ends_a_sentence(text.rstrip()[-1]):
        return text.rstrip()
    text = text[: _kept_until(text)]
    return "" if not text else text if ends_a_sentence(text[-1]) else text + _CUT_MARK


def _kept_until(text: str) -> int:
    """Where text cut mid-word ends: before the word the cut fell in, and the spaces and pauses before it."""
    k = len(text)
    while k and in_a_word(text[k - 1]):
        k -= 1
    while k and (text[k - 1].isspace() or text[k - 1] in CUT_PAUSES):
        k -= 1
    return k


class CutSpeech:
    """Events whose speech a bound cut end at its last whole word, as ``trim_cut_speech`` ends the reply's.

    Each speech segment's last word (and the spaces and pauses before it) is held back until more text
    shows it whole; at the segment's end it follows, or, where the segment reached ``bound`` characters
    (or ``cut_off`` said the budget ran out), it is dropped and the text trails off with ``…``. Feed it
    the stream's events; show what it returns. (Feed the same events, unfiltered, to a
    ``SentenceSplitter(bound=)`` or ``StageReader(bound=)``: they leave the unfinished sentence unspoken.)
    """

    def __init__(self, bound: int | None, *, tags: Iterable[str] | TagTable | None = None) -> None:
        self.bound = bound
        self.tags = _speech_tags(tags)
        self._held: dict[tuple[int, int], str] = {}
        self._length: dict[tuple[int, int], int] = {}
        self._last: dict[tuple[int, int], str] = {}
        self._tag: dict[tuple[int, int], str] = {}
        self._cut_off = False

    def cut_off(self) -> None:
        """The stream was cut (its token budget ran out): the speech segments still open are cut."""
        self._cut_off = True

    def flush(self) -> list[Event]:
        """What is still held back (a stream that ended without ending its segments), as it came."""
        out: list[Event] = []
        for (chat, segment), held in sorted(self._held.items()):
            if held:
                out.append(TextDelta(chat, segment, self._tag.get((chat, segment), ""), held))
        self._held.clear()
        self._length.clear()
        self._last.clear()
        return out

    def feed(self, event: Event) -> list[Event]:
        """What to show of ``event``: itself, or (speech with a bound) its text less the word held back."""
        if isinstance(event, Reset):
            self._held.clear()
            self._length.clear()
            self._last.clear()
            self._cut_off = False
            return [event]
        if self.bound is None:
            return [event]
        if isinstance(event, TextDelta) and event.tag in self.tags:
            key = (event.chat, event.segment)
            self._tag[key] = event.tag
            self._length[key] = self._length.get(key, 0) + len(event.text)
            whole = self._held.get(key, "") + event.text
            k = _kept_until(whole)
            self._held[key] = whole[k:]
            if not k:
                return []
            self._last[key] = whole[k - 1]
            return [TextDelta(event.chat, event.segment, event.tag, whole[:k])]
        if isinstance(event, SegmentEnd) and (event.chat, event.segment) in self._length:
            key = (event.chat, event.segment)
            held, last = self._held.pop(key, ""), self._last.pop(key, "")
            length = self._length.pop(key)
            cut = self._cut_off or (self.bound is not None and length >= self.bound)
            ending = _CUT_MARK if last and not ends_a_sentence(last) else ""  # (a cut word dropped)
            text = ending if cut else held
            shown: list[Event] = [TextDelta(event.chat, event.segment, event.tag, text)] if text else []
            return [*shown, event]
        return [event]


def whole_sentences(text: str) -> tuple[str, str]:
    """``(head, tail)``: ``text`` up to the end of its last complete sentence (the rule above), and the rest."""
    splitter = SentenceSplitter(tags=["s"])
    splitter.feed(TextDelta(0, 0, "s", text))
    buf = splitter._buffers.get((0, 0))
    pending = "".join(buf.parts) if buf is not None and buf.phase in (_NONE, _COMMA) else ""
    return text[: len(text) - len(pending)], pending


def trim_cut_speech(
    reply: Reply,
    *,
    bound: int | None = None,
    cut_off: bool = False,
    tags: TagTable | None = None,
    source: str = "",
) -> Reply:
    """``reply`` with its cut speech ended at a word or sentence boundary, each cut noted (``CF150``).

    Speech is cut where a segment of a speech tag holds ``bound`` characters or more (the grammar's
    ``Bounds.max_chars`` closed it there), or, with ``cut_off`` (the token budget ran out), where the
    reply's last segment is speech. Its unfinished last sentence ends at its last whole word
    (``cut_text``), as ``SentenceSplitter(bound=...)`` leaves it unspoken. ``source``: the raw reply,
    where the diagnostics point.
    """
    table = DEFAULT_TAGS if tags is None else tags
    spoken = {spec.name for spec in table if spec.row.spoken}
    last = (len(reply.chats) - 1, len(reply.chats[-1].segments) - 1) if reply.chats else None
    chats: list[Chat] = []
    notes = []
    for i, chat in enumerate(reply.chats):
        segments = list(chat.segments)
        for k, seg in enumerate(segments):
            if seg.tag not in spoken:
                continue
            at_bound = bound is not None and len(seg.text) >= bound
            if not (at_bound or (cut_off and (i, k) == last)):
                continue
            kept = cut_text(seg.text)
            if kept == seg.text.rstrip():  # it ended a sentence at the cut (maybe before a space): all spoken
                segments[k] = seg.model_copy(update={"text": kept}) if kept != seg.text else seg
                continue
            head, _tail = whole_sentences(seg.text)
            segments[k] = seg.model_copy(update={"text": kept})
            why = f"the speech reached its bound of {bound} characters" if at_bound else "the reply was cut off"
            notes.append(_cut_note(source, i, seg.text, len(head), why))
        chats.append(chat.model_copy(update={"segments": segments}) if segments != chat.segments else chat)
    if chats == list(reply.chats):
        return reply
    return reply.model_copy(update={"chats": chats, "diagnostics": [*reply.diagnostics, *notes]})


def _cut_note(source: str, index: int, text: str, at: int, why: str) -> Diagnostic:
    """``CF150`` for the cut speech ``text`` of chat ``index``, pointing at its unfinished sentence in ``source``."""

    message = in_body(index, f"{why} mid-sentence: it ends at its last whole word, and that sentence is not spoken")
    start = end = len(source)
    try:
        locator = Locator(source)
        path = ("chats", index, "body")
        body_start, body_end = locator.value(path)
        body = json.loads(source[body_start:body_end])
        found = body.find(text) if isinstance(body, str) else -1
        if found >= 0:
            start, end = locator.string_offsets(path, [found + at, found + len(text)])
    except (ValueError, IndexError, KeyError):
        pass  # not JSON (a lenient read): the end of the reply
    return Diagnostic.at(source, "CF150", message, start, end, chat=index)
