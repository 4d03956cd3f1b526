"""The state of one lenient read: the text being read, what was noted, the dialects met, the chats found.

Every step of ``recovery.STEPS`` reads and writes one ``Recovery``. Diagnostics are noted
in the offsets of the text being read and kept in the offsets of the raw input (the text
is a rewrite of it where the JSON was HTML-escaped).
"""

from __future__ import annotations

import difflib
import re
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from charfmt._dialect_names import DialectName
from charfmt._grammar.lexical import decode_entities
from charfmt._lenient.pieces import Piece, Result
from charfmt._lenient.table import Chain, DialectRule, Reading, Sample
from charfmt.diagnostics import Diagnostic
from charfmt.models import Segment

if TYPE_CHECKING:
    from charfmt._lenient.json import JNode, JsonReader
    from charfmt._lenient.told import Told

SPECIAL: Final = re.compile(r"<\|[^|<>\n]{1,40}\|>|</s>|<s>|\[/?INST\]|<eos>|<bos>|<\|end▁of▁sentence\|>")
"""A special token of a chat template, written out."""
FENCE: Final = re.compile(r"(?:```|~~~)[A-Za-z0-9_+-]*")
"""A Markdown code fence (with its language)."""
_JSON_START: Final = re.compile(r"[{\[]")


@dataclass(slots=True)
class Source:
    """The text being read, and how to find each of its offsets in the raw input."""

    text: str
    raw: str
    map: array[int] | None = None  # text offset -> raw offset, when the text is a rewrite

    def to_raw(self, i: int) -> int:
        if self.map is None:
            return i
        return self.map[min(max(i, 0), len(self.map) - 1)]


NARRATOR: Final = ""
"""The speaker a scene's narrator's label names (``told.speaker_of``): what follows it is an ``E`` chat."""


@dataclass(slots=True)
class RawChat:
    """A chat being read: what its fields said, and its pieces so far."""

    index: int
    node: JNode | None
    kind: str | None = None
    order: int | None = None
    speaker: str | None = None
    pieces: list[Piece] = field(default_factory=list)
    order_noted: bool = False  # an unusable order was reported where it stands
    segments: list[Segment] = field(default_factory=list)  # what its pieces became (``finish``)


class Recovery:
    """One lenient read of one input."""

    def __init__(self, raw: str, reading: Reading, turn: tuple[str, ...] = (), prompt: tuple[str, ...] = ()) -> None:
        self.source = Source(raw, raw)
        # What the player said this turn: each line as given, and as typed lines say it (no [joy], no *waves*).
        said = [words(t) for t in turn] + [words(_TYPED_MARKS.sub(" ", t)) for t in turn]
        self.turn = tuple(dict.fromkeys(t for t in said if t))
        self.turn_lines = turn  # ... as given
        self.prompt = prompt  # the prompt's own text, not the character's words
        self.told: Told | None = None  # what the prompt and the turn tell the read (``told.learn``)
        self.speakers: list[tuple[int, str]] = []  # where a scene's cast member's label ends, and its speaker id
        self.reading = reading
        self.vocabulary = reading.vocabulary
        self.tags = tags = reading.tags
        self.emotion = tags.emotion.name
        self.speech = tags.speech.name
        # Where content that cannot be an emotion key goes: what the character does (or says).
        self.narration = tags.action.name if tags.action is not None else self.speech
        self.diagnostics: list[Diagnostic] = []
        self.dialects: list[str] = []
        self.reasoning: list[str] = []  # the model's own reasoning before the reply, kept apart
        self.chats: list[RawChat] = []
        self.start = 0  # the region the reply stands in
        self.end = len(raw)
        self.region_notes = (0, 0)  # the diagnostics the region's steps noted (undone when no JSON is found)
        self.found = False  # a JSON reply was read
        self.json_reader: JsonReader | None = None
        self.dialect_name: DialectName = "canonical"  # the dialect that names the reply (``finish``)

    # -- diagnostics, in raw offsets -------------------------------------------------
    def note(self, code: str, message: str, start: int, end: int, chat: int | None = None) -> None:
        raw = self.source.raw
        a, b = self.source.to_raw(start), self.source.to_raw(end) if end > start else self.source.to_raw(start)
        if end > start and self.source.map is not None:
            b = self.source.to_raw(end - 1) + 1
        self.diagnostics.append(Diagnostic.at(raw, code, message, a, max(a, b), chat=chat))

    def dialect(self, name: str) -> None:
        """Record that the reader met dialect ``name`` (an entry of the dialect table)."""
        if name not in self.dialects:
            self.dialects.append(name)

    def walk(self, chain: Chain, sample: Sample, after: str | None = None) -> DialectRule | None:
        """The first entry of ``chain`` (after entry ``after``) that detects ``sample``, recorded as met."""
        entry = self.reading.table.first(chain, sample, self.tags, after=after)
        if entry is not None:
            self.dialect(entry.name)
        return entry

    def keep_reasoning(self, text: str) -> None:
        """Keep the model's reasoning (``Reply.reasoning``), apart from the chats."""
        if text.strip():
            self.reasoning.append(text.strip())

    def take(self, chat: RawChat, result: Result, mapper: Callable[[int], int] | None = None) -> None:
        """A reader's result into ``chat``: its dialects, its repairs (noted), its pieces, offsets mapped by
        ``mapper`` (none: they are offsets of the text being read already)."""
        for d in result.dialects:
            self.dialect(d)
        if mapper is None:
            for r in result.repairs:
                self.note(r.code, r.message, r.start, r.end, chat.index)
            for p in result.pieces:
                chat.pieces.append(Piece(p.tag, p.text, p.start, p.end, p.intensity))
            return
        for r in result.repairs:
            self.note(r.code, r.message, mapper(r.start), mapper(r.end), chat.index)
        for p in result.pieces:
            chat.pieces.append(Piece(p.tag, p.text, mapper(p.start), mapper(p.end), p.intensity))

    # -- text outside the reply -----------------------------------------------------------
    def drop(self, start: int, end: int) -> None:
        """Say what the text outside the reply was, and that it is dropped."""
        text = self.source.text
        segment = text[start:end]
        if not segment.strip():
            return
        for m in SPECIAL.finditer(segment):
            self.note("CF604", f"special token {m.group()} dropped", start + m.start(), start + m.end())
        rest = SPECIAL.sub(blank_match, segment)
        for m in FENCE.finditer(rest):
            self.note("CF602", "code fence dropped", start + m.start(), start + m.end())
        rest = FENCE.sub(blank_match, rest)
        stripped = rest.strip()
        if stripped:
            lead = len(rest) - len(rest.lstrip())
            self.note(
                "CF601",
                f"text outside the reply dropped: {stripped[:40]!r}",
                start + lead,
                start + lead + len(stripped),
            )

    def drop_fences_only(self, start: int, end: int) -> None:
        """Note the special tokens and code fences in ``text[start:end]`` as dropped (the rest is read)."""
        text = self.source.text
        for m in SPECIAL.finditer(text, start, end):
            self.note("CF604", f"special token {m.group()} dropped", m.start(), m.end())
        for m in FENCE.finditer(text, start, end):
            self.note("CF602", "code fence dropped", m.start(), m.end())

    # -- looking ahead --------------------------------------------------------------------
    def json_start(self, start: int, end: int) -> int:
        """The first ``{`` or ``[`` in ``text[start:end]``, or ``end``."""
        m = _JSON_START.search(self.source.text, start, end)
        return m.start() if m else end

    def skip_space(self, pos: int) -> int:
        """The first offset from ``pos`` that is no space."""
        text = self.source.text
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos


def words(text: str) -> str:
    """``text`` compared as words: entities decoded, case and runs of space folded."""
    return " ".join(decode_entities(text).casefold().split())


_TYPED_MARKS: Final = re.compile(r"\[[^\[\]\n]*\]|【[^【】\n]*】|\*[^*\n]*\*")
"""The marks of a typed line (``[angry]``, ``*waves*``): not what the player says."""
_TAG: Final = re.compile(r"[<＜][/／]?[A-Za-z_][^<>＜＞\n]*+[>＞]")
"""A tag, as ``normal`` leaves it out: a name right after its ``<`` (``< as &lt; and >`` of a spec line is words)."""
_MARKS: Final = re.compile(r"^[\s\-*#>•\d.)]+|[\s\"'}\]{\[,:]+$")
_SPACES: Final = re.compile(r"\s+")


def normal(line: str) -> str:
    """A line as the prompt's lines are compared: no tags, no list marks or JSON debris at its ends, case folded."""
    return _SPACES.sub(" ", _MARKS.sub("", _TAG.sub(" ", line))).strip().casefold()


CHANGED_WORDS: Final = 2
"""Words of one of the player's lines that may be changed (replaced, added, left out) in a line that is theirs."""
SAID_FROM: Final = 24
"""Characters from which a line nearly the player's, or begun as the player's line begins, is theirs."""


def nearly_said(said: str, lines: Iterable[str], *, begun: bool) -> bool:
    """Whether ``said`` is one of the player's ``lines`` (all compared in one form, ``words`` or ``normal``) with a
    word changed (``Reply in JSON only`` for ``Reply in YAML only``), or, with ``begun``, begun as one begins
    (its first ``SAID_FROM`` characters, four words or more) and going on otherwise than the line does (one
    that holds the whole line and goes on is the reader's to cut: the line is the player's, the rest is not)."""
    if len(said) < SAID_FROM:
        return False
    for line in lines:
        if len(line) < SAID_FROM or said == line:
            continue
        if begun and said[:SAID_FROM] == line[:SAID_FROM] and len(line[:SAID_FROM].split()) >= 4:
            return not said.startswith(line)  # (the whole line and more: the line is theirs, the rest the reply's)
        if _a_word_changed(said.split(), line.split()):
            return True
    return False


TOKEN: Final = re.compile(r"[^\W_]+")
"""A word or a number: what the lenient reader counts when it compares texts word by word."""
"""A word, as ``mostly_said`` counts them (``d'utiliser``: two)."""
MOSTLY_FROM: Final = 5
"""Words from which a line whose words are mostly the player's is theirs reworded (fewer: anyone's answer)."""
MOSTLY: Final = 0.85
"""The share of a line's words that, from the player's line and one line of the request, makes it theirs."""


def mostly_said(said: str, turn: Iterable[str], request: Iterable[str]) -> bool:
    """Whether ``said`` is one of the player's ``turn`` lines (``words``'s form) reworded: its parts reordered, two
    words swapped or changed (``Énumère toutes les balises et tous les émotions…`` for ``… toutes les émotions et
    toutes les balises…``), with at most one line of the ``request`` they sent it in (the instruction sent with the
    turn, paraphrased: ``One action and two sentences.``). At least half of its words are the turn line's, two
    thirds of that line's words are in it, and ``MOSTLY`` of its words are that line's and the other's together
    (found by the fifth set's #22, #42)."""
    found = Counter(TOKEN.findall(words(said)))
    total = found.total()
    if total < MOSTLY_FROM:
        return False
    need = MOSTLY * total
    others = [own for line in request if len(own := Counter(TOKEN.findall(words(line)))) >= 2]
    for line in turn:  # (each word counted as often as the line holds it: ``aa aa aa aa`` is not ``aa aa``'s)
        own = Counter(TOKEN.findall(line))
        theirs = (found & own).total()
        if 2 * theirs < total or 3 * theirs < 2 * own.total():
            continue  # (half of its words the line's, and two thirds of the line's words in it)
        rest = found - own
        if theirs >= need or any(theirs + (rest & other).total() >= need for other in others):
            return True
    return False


OPENED_WORDS: Final = 3
"""The player's first words a line must open with to be their line reworded (``opened_as``)."""
OPENED_SHARE: Final = 0.75
"""The share of its words a line opened as the player's must take from their line (``opened_as``)."""


def opened_as(said: str, lines: Iterable[str], *, share: float = OPENED_SHARE) -> bool:
    """Whether ``said`` (``words``'s form) is one of the player's ``lines`` mangled or reworded as small models do:
    it opens with that line's first ``OPENED_WORDS`` words (the line of four words or more), holds no more than two
    words more than it, and ``OPENED_SHARE`` of its words are the line's (``Hur kom det sig upp!`` for ``Hur kom det
    sig att du började med slädhundar?``, ``What was the best job you ever did?`` for ``What was the hardest job you
    ever took on?``: the ninth set's #1, the eighth's #64). A line that goes on with words of its own is an answer.
    ``share``: that share (a request form, the player's shape, asks none: ``request_form``)."""
    found = TOKEN.findall(said)
    if len(found) < OPENED_WORDS:
        return False
    for line in lines:
        own = TOKEN.findall(line)
        if len(own) <= OPENED_WORDS or found[:OPENED_WORDS] != own[:OPENED_WORDS] or len(found) > len(own) + 2:
            continue
        if (Counter(found) & Counter(own)).total() >= share * len(found):
            return True
    return False


MANGLED_FROM: Final = 5
"""Words of the player's line from which a line holding most of them in order is that line mangled (``mangled``)."""
MANGLED_EXTRA: Final = 3
"""Words of its own a line that is the player's mangled may hold (``… Cảm ơn bà!`` after their question)."""
_SENTENCE_STOP: Final = re.compile(r"[.!?…。！？]")


def mangled(said: str, lines: Iterable[str], names: Iterable[str] = ()) -> bool:
    """Whether ``said`` (``words``'s form) is one of the player's ``lines`` mangled as small models do, however it
    opens (``opened_as`` asks for the first words): it holds all of that line's words in their order but for
    ``CHANGED_WORDS`` (swapped or left out), three quarters of them at least, in one sentence of its own, and at most
    ``MANGLED_EXTRA`` words of its own (``How long has your mom been down here every night?`` for ``How long have
    you been down here every night?``; found by the thirteenth set's #64). The line's vocative (its words before a
    comma, two at most) written as one of the character's ``names`` counts as the line's (``Thảo ơi, …`` for
    ``Bà ơi, …``: the thirteenth's #79). The character answering with some of the player's words (``Hail? No,
    just rain.``) holds too few of them, or holds them across its own sentences."""
    spans = [(m.start(), m.group()) for m in TOKEN.finditer(said)]
    named = {t for n in names for t in TOKEN.findall(n.casefold())}
    for line in lines:
        own = TOKEN.findall(line)
        if len(own) < MANGLED_FROM:
            continue
        found, at = [t for _at, t in spans], spans
        vocative = TOKEN.findall(line.partition(",")[0]) if "," in line else []
        head = len(TOKEN.findall(said.partition(",")[0])) if "," in said else 0
        if 0 < len(vocative) <= 2 and 0 < head <= 2 and named.intersection(found[:head]):
            found = [*vocative, *found[head:]]
            at = [(spans[0][0], t) for t in vocative] + spans[head:]
        matcher = difflib.SequenceMatcher(None, found, own, autojunk=False)
        blocks = [b for b in matcher.get_matching_blocks() if b.size]
        same = sum(b.size for b in blocks)
        if same < len(own) - CHANGED_WORDS or 4 * same < 3 * len(own) or len(found) - same > MANGLED_EXTRA:
            continue
        first, last = blocks[0].a, blocks[-1].a + blocks[-1].size - 1
        if not _SENTENCE_STOP.search(said, at[first][0], at[last][0]):
            return True
    return False


def _a_word_changed(said: list[str], line: list[str]) -> bool:
    """Whether the words ``said`` are those of ``line`` but for ``CHANGED_WORDS`` at most on either side (replaced,
    added or left out), and most of them the same."""
    if abs(len(said) - len(line)) > CHANGED_WORDS or len(line) < 2 * CHANGED_WORDS + 1:
        return False
    same = sum(b.size for b in difflib.SequenceMatcher(None, said, line, autojunk=False).get_matching_blocks())
    return same >= max(len(said), len(line)) - CHANGED_WORDS and same * 3 >= 2 * len(line)


def blank_match(m: re.Match[str]) -> str:
    """A match replaced by as many spaces: offsets after it stay put."""
    return " " * len(m.group())


def without_tokens(text: str) -> str:
    """``text`` with special tokens and code fences blanked (offsets stay put)."""
    return FENCE.sub(blank_match, SPECIAL.sub(blank_match, text))


def short(text: str) -> str:
    """A value for a message: long ones cut (a 5,000-digit number is not worth quoting)."""
    return text if len(text) <= 40 else text[:37] + "..."
