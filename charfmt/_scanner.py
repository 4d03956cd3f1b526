"""The incremental reader behind ``charfmt.stream``: events as model output arrives, never a partial tag.

This module is compiled with mypyc where the package is built with a C compiler (see
``hatch_build.py``); ``charfmt.stream`` uses the compiled twin only while it was built from
this very source, and this module otherwise. Keep it mypyc-compatible: no async generators,
no monkeypatching of its classes.

``StreamParser`` reads the reply incrementally with the tables the batch reader uses (the
tag table's names, synonyms and roles: ``tags=``; the chat types and their spellings).
Each event is emitted as soon as it is certain: an emotion, action or cue when its value is
complete, text deltas as soon as their characters are decided, never a fragment of a
tag, an entity, a JSON escape or a UTF-8 character.

The reader works token by token: a regular expression per state (the chat header, a whole
element, an opening tag, a run of text, an escape, an entity, a closing tag) matched where
the last token ended. A token cut by a chunk boundary waits, at most ``_TOKEN_MAX``
characters (``_ENVELOPE_MAX`` for a chat header), for the next chunk, and is tried again
only when a chunk brings the character it ends with; the cost of a chunk is the work on
its own characters plus that short tail, so total work is linear in the input. A chunk of
plain text inside a message is one delta without entering the reader at all.

Damage the batch reader repairs in a known way is read the same way, still streaming
(prose, fences and reasoning before the JSON, text after it, tag synonyms and case,
missing newlines, chat type spellings, a trailing comma, unescaped quotes, mismatched or
missing closing tags, invalid escapes); ``close()`` then reads the whole text with
``charfmt.parse(lenient=True)`` and adds its diagnostics. Any other shape (bare tags,
brackets, other dialects) is reread with the batch reader as it grows (``_speculate``),
and what a reread settles is emitted (``_advance``). At ``close()`` the stream reconciles
with the batch result and emits only what is missing; ``Reset`` and the whole result only
where it contradicts what was shown (docs/LENIENT.md lists the cases). A repaired reply's
``Dialect`` is its last event, as in ``Reply.events()``. Markup written as JSON escapes
(``\\u003c`` for ``<``) is valid but rare: it is read at ``close()``.
"""

from __future__ import annotations

import codecs
import gc
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, final

from charfmt._tables import NAMED_ENTITIES
from charfmt.body import decode_text, terminal_regex
from charfmt.diagnostics import CODES, Diagnostic, ParseError, in_body, too_long
from charfmt.events import (
    Action,
    ChatEnd,
    ChatStart,
    Cue,
    DiagnosticEvent,
    Dialect,
    Emotion,
    Event,
    Reasoning,
    Reset,
    SegmentEnd,
    SegmentStart,
    TextDelta,
    reply_events,
    segment_events,
)
from charfmt.models import Chat, Reply, Segment, Vocabulary, construct_trusted
from charfmt.parser import DEFAULT_MAX_SIZE, parse, turn_lines
from charfmt.tags import (
    CHAT_TYPES,
    DEFAULT_TAGS,
    REASONING_TAGS,
    TAGGED_TYPES,
    TEXT_TAG,
    TYPE_ALIASES,
    TagSpec,
    TagTable,
)
from charfmt.vocabulary import apply_vocabulary

# States. Envelope: before '{"chats": [' (_TOP); where a chat may start (_LIST); after a
# body's closing quote (_CHAT_END); after a chat's '}' (_SEP); after ']' (_END); done.
# Body: an opening tag (_OPEN), an emotion key (_KEY), the closing tag after a key
# (_CLOSE), text (_TEXT), after a closing tag (_AFTER). _HELD: the input left the format.
_TOP, _LIST, _CHAT_END, _SEP, _END, _DONE, _OPEN, _KEY, _CLOSE, _TEXT, _AFTER, _HELD = range(12)

_TOKEN_MAX: Final = 48
"""The longest body token a chunk boundary may cut (an escaped surrogate pair is 12,
a numeric entity with leading zeros up to 40): a longer tail that matches nothing is damage."""
_ENVELOPE_MAX: Final = 4096
_EMPTY_REPLY: Final = '{"chats":[]}'
"""Put after the text skipped before a reply to reread it as a preamble (its reasoning)."""
"""The same for a chat header (it may hold JSON whitespace)."""

_JWS: Final = "[ \t\n\r]*"
_TYPES: Final = (
    "|".join(CHAT_TYPES) + "|(?i:" + "|".join(map(re.escape, sorted(TYPE_ALIASES, key=len, reverse=True))) + ")"
)
"""A chat type as written: ``C``, or a spelling the batch reader takes for it (``c``, ``chat``: CF613)."""
_ORDER: Final = "[1-9][0-9]*"
_ORDER_DIGITS_MAX: Final = 640
"""A longer order is read by the batch reader at ``close()``: ``int()`` refuses longer digit
strings where a process lowers CPython's limit (4,300 by default) to its minimum, 640."""
_TOP_RE: Final = re.compile(rf'\{{{_JWS}"chats"{_JWS}:{_JWS}\[')
_TOP_CUT: Final = re.compile(rf'\{{{_JWS}(?:"(?:c(?:h(?:a(?:t(?:s(?:"{_JWS}(?::{_JWS})?)?)?)?)?)?)?)?\Z')
"""The start of ``{"chats": [`` cut by the end of the text so far."""
_NAME: Final = r'[^"\\\x00-\x1f]+'
"""A speaker's name as written in a header (checked against the ``KEY`` rule when it is read)."""
_HEADER: Final = re.compile(
    rf'\{{{_JWS}(?:"type"{_JWS}:{_JWS}"({_TYPES})"{_JWS},{_JWS}"order"{_JWS}:{_JWS}({_ORDER})'
    rf'|"order"{_JWS}:{_JWS}({_ORDER}){_JWS},{_JWS}"type"{_JWS}:{_JWS}"({_TYPES})")'
    rf'{_JWS},{_JWS}(?:"speaker"{_JWS}:{_JWS}"(?P<speaker>{_NAME})"{_JWS},{_JWS})?"body"{_JWS}:{_JWS}"'
)
"""A chat up to its body's opening quote (duplicate keys, other keys: the batch reader's)."""
_HEADER_WRITTEN: Final = re.compile(
    rf'\{{"type": ?"({"|".join(CHAT_TYPES)})", ?"order": ?({_ORDER}), ?'
    rf'(?:"speaker": ?"(?P<speaker>{_NAME})", ?)?"body": ?"'
)
"""The header as serializers write it (``json.dumps``, compact or not): ``_HEADER``'s groups 1 and 2, sooner.

Both take an optional ``"speaker"`` (a scene's chat) between the order and the body."""


def _prefixes(tokens: list[str]) -> str:
    """A pattern matching any prefix of the sequence ``tokens`` (each a pattern), to the end of the text."""
    pattern = ""
    for token in reversed(tokens):
        pattern = f"(?:{token}{pattern})?"
    return pattern + r"\Z"


_SPEAKER_CUT: Final = re.compile(
    rf'\{{{_JWS}(?:"type"{_JWS}:{_JWS}"(?:{_TYPES})"{_JWS},{_JWS}"order"{_JWS}:{_JWS}{_ORDER}'
    rf'|"order"{_JWS}:{_JWS}{_ORDER}{_JWS},{_JWS}"type"{_JWS}:{_JWS}"(?:{_TYPES})"){_JWS},{_JWS}'
    + _prefixes(
        [*'"speaker"', _JWS, ":", _JWS, '"', r'[^"\\\x00-\x1f]*', '"', _JWS, ",", _JWS, *'"body"', _JWS, ":", _JWS]
    )
)
"""A header with a ``"speaker"`` cut by the end of the text so far: wait for the rest of it."""
_BODY_KEY: Final = re.compile(rf'"body"{_JWS}:{_JWS}"')
"""The body of a chat begins (a canonical header writes it last)."""
_HEADER_QUOTES: Final = 9
"""How many '"' a header holds: fewer in the tail, and it cannot be complete yet."""
_BODY_END: Final = re.compile(r'"[ \t\n\r]*')
"""A '"' in a body, and the whitespace after it: the body ends there only if a '}' follows
(an unescaped quote inside the text is damage, read without contradicting what was shown)."""
_PLAIN: Final = re.compile(r'[^"\\\x00-\x1f<&\x7f\ud800-\udfff]+')
_KEY_RUN: Final = re.compile(r'[^"\\\x00-\x1f<>&\x7f\ud800-\udfff]+')
_ESCAPE: Final = re.compile(
    r'\\(?:(["\\/bfnrt])|u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|u([0-9a-fA-F]{4}))'
)
_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_STARTS: Final = frozenset('"\\/bfnrtu')
_HIGH_SURROGATES: Final = ("d8", "d9", "da", "db")
"""``\\uD800``-``\\uDBFF``: the first half of a pair, whose second half may be in the next chunk."""
_ENTITY: Final = re.compile(r"&[#0-9A-Za-z]{1,38};")
_XML_ENTITIES: Final = {f"&{name};": ch for name, ch in NAMED_ENTITIES.items()}
"""The named entities as written, decoded without a lookup in the grammar (``decode_text`` does the rest)."""
_TEXT_BAD: Final = re.compile(r"[<&\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
"""A decoded character that text does not allow literally ('<' and '&' would be markup)."""
_KEY_BAD: Final = re.compile(r"[<>&\x00-\x1f\x7f\ud800-\udfff]")


_Matcher = Callable[[str, int], "re.Match[str] | None"]
"""A compiled pattern's bound ``match``: called without looking the method up by name."""


@dataclass(frozen=True, slots=True)
class _Language:
    """What the reader needs of one tag table, built once per table."""

    def __copy__(self) -> _Language:
        return self  # (immutable and shared: a copied parser shares it)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Language:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_language, (self.table,))  # (unpickled: the shared one of its table)

    open: re.Pattern[str]
    """An opening tag of the table as the batch reader takes it (any case, a synonym: CF704),
    the name in group 1; then the plain text after it in group 2."""
    sep_open: re.Pattern[str]
    """The element separator (JSON-escaped; missing: CF701) in group 1 and an opening tag in
    group 2; then the plain text after it in group 3."""
    names: dict[str, str]
    """A tag name as written (lower-cased) mapped to the tag of the table."""
    first_whole: re.Pattern[str]
    """A whole element (emotion, action, cue) as the table writes it, first in a body: tag and value in groups 1, 2."""
    sep_whole: re.Pattern[str]
    """The same after the element separator."""
    any_close: re.Pattern[str]
    """Any closing tag of the table (any spelling), or ``</>``; group 1 never matches (it is damage)."""
    element: dict[str, tuple[_Matcher, str, bool, bool]]
    """Per tag: its closing tag as a pattern's bound ``match`` (raw in the JSON string: '</msg>', or '<\\/msg>' from
    serializers that escape '/') and as written, whether it holds a key (announced whole,
    checked against the vocabulary: the emotion role), whether its text streams (speech and
    hidden roles; an action or a cue goes out whole)."""
    whole: dict[str, str]
    """Tags announced whole, mapped to their role (emotion, action, cue)."""
    hidden: frozenset[str]
    """Tags of the hidden role: only ever read from a tag, never from prose (a quote in one pairs with none later)."""
    reasoning: re.Pattern[str]
    """A reasoning tag (``<think>``) that is no tag of the table: before the reply, the text
    is shown only once the batch reader says it is reasoning (``Reply.reasoning``)."""
    whole_prefixes: frozenset[str]
    """The starts of tag names (lower-cased, synonyms included) that only tags announced whole
    begin with."""
    whole_first: frozenset[str]
    """The first letters of the tags announced whole, as the table writes them (where
    ``first_whole`` and ``sep_whole`` may match)."""
    closed: dict[str, frozenset[str]]
    """Tags whose values form a closed list (cues), mapped to it."""
    key: re.Pattern[str]
    """The grammar's ``KEY`` terminal (an emotion key)."""
    text: re.Pattern[str]
    """The grammar's ``TEXT`` terminal (what an entity must be to be text)."""
    table: TagTable
    """The tag table all this was built from."""


@cache
def _language(tags: TagTable) -> _Language:
    # The names as the table writes them first: the common case matches without backtracking.
    words = sorted(tags.synonyms, key=len, reverse=True)
    names = "|".join(re.escape(t.name) for t in tags) + "|(?i:" + "|".join(map(re.escape, words)) + ")"

    def closer(t: TagSpec) -> re.Pattern[str]:
        spelt = sorted((w for w, name in tags.synonyms.items() if name == t.name), key=len, reverse=True)
        return re.compile(rf"<\\?/(?:({re.escape(t.name)})|(?i:{'|'.join(map(re.escape, spelt))}))>")

    element: dict[str, tuple[_Matcher, str, bool, bool]] = {
        t.name: (closer(t).match, t.close, t.role == "emotion", t.streamed) for t in tags
    }
    whole = {t.name: str(t.role) for t in tags if not t.streamed}
    wholes = "|".join(re.escape(t.name) for t in tags if not t.streamed)
    run = r'[^"\\\x00-\x1f<>&\x7f\ud800-\udfff]*'
    first_whole = re.compile(rf"<({wholes})>({run})</\1>")
    sep_whole = re.compile(rf"\\n<({wholes})>({run})</\1>")
    written = {t.name.lower(): t.name for t in tags} | {w.lower(): name for w, name in tags.synonyms.items()}
    starts: dict[str, set[bool]] = {}
    for word, name in written.items():
        for k in range(1, len(word) + 1):
            starts.setdefault(word[:k], set()).add(name in whole)
    run_text = _PLAIN.pattern.removesuffix("+") + "*"  # the text after an opening tag (its last group)
    thinking = "|".join(sorted(REASONING_TAGS - set(tags.names)))
    reasoning = re.compile(rf"<\s*/?\s*(?:{thinking})\s*>", re.IGNORECASE)  # opened, or closed (the opener stripped)
    return _Language(
        re.compile(f"<({names})>({run_text})"),
        re.compile(rf"(\\n)?<({names})>({run_text})"),
        dict(tags.synonyms),
        first_whole,
        sep_whole,
        re.compile(rf"<\\?/(?:((?!)))?(?:{names})?>"),
        element,
        whole,
        frozenset(t.name for t in tags.with_role("hidden")),
        reasoning,
        frozenset(start for start, kinds in starts.items() if kinds == {True}),
        frozenset(t.name[0] for t in tags if not t.streamed),
        {t.name: frozenset(t.values) for t in tags if t.values is not None},
        terminal_regex("KEY"),
        terminal_regex("TEXT"),
        tags,
    )


_KEPT_RUN: Final = 256
"""The chunks kept for ``close()`` are joined every this many (``_compact``)..."""
_KEPT_SMALL: Final = 64
"""... when the first and the last are at most this long on average (a join costs their size for a moment)."""
_SPECULATE_MIN: Final = 8
"""A held stream is read again (``_speculate``) once it has grown by this many characters..."""
_SPECULATE_SHIFT: Final = 3
"""... and by an eighth (``>> 3``) of what was read last time: the rereads cost a bounded
multiple of the input, so a damaged stream stays linear."""
_SPECULATE_BUDGET: Final = 16
"""... or sooner, on a character that may complete something, while all rereads together have
read at most this many times the text so far."""
_DECISIVE: Final = re.compile(r"[\]>*\")}\n]")
_SPECULATE_SMALL: Final = 64
"""... or on any chunk while the text is this short (a short reply shows its end before ``close()``)."""
_SPECULATE_LIMIT_SHIFT: Final = 5
"""A held stream is reread only while it is shorter than ``max_size >> 5``."""
_UNSURE: Final = re.compile(r"[<&\\*\[`\"(){}#|\ufffd]")
"""Characters that may begin markup a later character completes (a tag, an entity, an escape,
an action in asterisks, a bracket value, a quoted line, a UTF-8 character cut in two); the
open segment's text is shown only up to the first one near its end."""
_PAIRED: Final = re.compile(r"[\\*\[`\"(){}#|\ufffd]")
"""The same less '<' and '&': in a segment another one follows, those were read already (an
entity decoded, a '<' that began no tag); the others may pair with a later character."""
_UNSURE_SPAN: Final = 48
_UNSETTLED: Final = frozenset({"plain-text", "prose"})
"""Dialects of a reread that show nothing early before a JSON envelope: untagged text may be
prose before the reply (inside a body, it is the body's text)."""
_FRONT_MATTER_START: Final = re.compile(r"[ \t]*-")
"""A body held where front matter may begin (a cut ``---``): its text is not settled before the closing ``---``."""
_ECHOED: Final = "user-chats"
_ECHOED_CHAT: Final = re.compile(r"[<＜]\s*chat\b[^<>＜＞]*[>＞]", re.IGNORECASE)
"""The echoed request form shows nothing early before its first ``<chat>``: until then the
batch reader takes the text around ``<user_chats>`` for one chat, and drops it as prose
once a ``<chat>`` comes."""


_CUT_TAG: Final = re.compile(r"<[A-Za-z/][^<>]*\Z")
"""A tag cut before its '>' at the end of a segment's text."""
_FRONT_MATTER_OPEN: Final = re.compile(r"\s*-(?![\s\S]*\n[ \t]*---)")
"""Text that begins like front matter (``---``) whose closing ``---`` line has not come yet."""


_SENTENCE_DONE: Final = re.compile(r"[.!?…]++[\"')]*+(?:\s|\Z)|[。！？]++[」』）]*+")
_PREAMBLE_HINT: Final = re.compile(
    r"(?i)json|```|[{\[]|\bhere(?:'s| is| are| you go)\b|\b(?:reply|response|answer|output)\b"
    r"|\bthe (?:user|player)\b|:[ \t]*+(?:\n|\Z)|以下"
)
"""Words of a preamble to a reply (``Sure! Here is the reply:``) or of reasoning about it
(``The user is angry.``, before an orphan ``</think>``), not of the reply itself."""
_ENDS_SENTENCE: Final = re.compile(r"[!?！？][\"')」』）]*+\Z")
"""The text so far ends with an exclamation or a question: speech, where a plain sentence may
yet narrate a quotation that follows (``She smiled. "Hi"``), and ``Okay.`` on a line of its
own stand before a JSON reply."""
_PROSE_DECIDED_MIN: Final = 8
_PROSE_DECIDED_AFTER: Final = 12


def _prose_decided(batch: Reply, text: str) -> bool:
    """Whether a reread reads the text so far as prose that is the reply, not a preamble to a JSON one.

    Nothing in it announces a reply to come (``Sure! Here is the JSON:``), it has at least
    ``_PROSE_DECIDED_MIN`` characters, and two sentences are complete; or one, and it ends the
    text so far (not at a line break, where ``Okay.`` may stand before a JSON reply), or
    ``_PROSE_DECIDED_AFTER`` characters follow it (enough to hold a preamble's words). More
    text may still bring JSON (then ``close()`` takes back what was shown), but a reply that
    ignores the format speaks as it is written.
    """
    spoken = " ".join(s.text for c in batch.chats for s in c.segments)
    if len(spoken) < _PROSE_DECIDED_MIN or _PREAMBLE_HINT.search(spoken) is not None:
        return False
    ends = [m.end() for m in _SENTENCE_DONE.finditer(spoken)]
    if len(ends) != 1:
        return len(ends) > 1
    after = len(spoken[ends[0] :].strip())
    return after >= _PROSE_DECIDED_AFTER or (after == 0 and _ENDS_SENTENCE.search(text) is not None)


def _markup_ahead(text: str) -> bool:
    """Whether the text of a segment read from a prefix may still turn into markup as the reply grows."""
    return _CUT_TAG.search(text) is not None or _FRONT_MATTER_OPEN.match(text) is not None


def _settled(text: str, *, whole_text: bool = False) -> str:
    """The part of the open segment's ``text`` (read from a cut-off prefix) that more text cannot change.

    Up to the first character near the end that may begin markup, less trailing white
    space (the batch reader strips it where a segment ends).
    """
    m = _UNSURE.search(text, 0 if whole_text else max(0, len(text) - _UNSURE_SPAN))
    return (text if m is None else text[: m.start()]).rstrip()


# The patterns' bound match methods, as Final names: called without a method lookup by name.
_PLAIN_MATCH: Final = _PLAIN.match
_KEY_RUN_MATCH: Final = _KEY_RUN.match
_ENTITY_MATCH: Final = _ENTITY.match
_BODY_END_MATCH: Final = _BODY_END.match
_HEADER_WRITTEN_MATCH: Final = _HEADER_WRITTEN.match
_KEY_FULLMATCH: Final = terminal_regex("KEY").fullmatch
_HEADER_MATCH: Final = _HEADER.match
# mypyc reads a module's Final names from C statics but imported names from the module's dict
# on every use: the event classes the reader builds, as Final names (the same classes).
_TextDelta: Final = TextDelta
_SegmentStart: Final = SegmentStart
_SegmentEnd: Final = SegmentEnd
_ChatStart: Final = ChatStart
_ChatEnd: Final = ChatEnd
_Emotion: Final = Emotion
_Action: Final = Action
_Cue: Final = Cue


class _Held(Exception):
    """The input left the format: hold the rest for the batch reader."""


@dataclass(slots=True)
class _Chat:
    index: int
    kind: str
    order: int
    speaker: str | None = None
    segment: int = -1
    closed_segments: int = 0
    tag: str = ""
    had_text: bool = False
    started: bool = False
    key_start: int = 0


class _Orders:
    """The chat orders seen: ``1..run`` as one number, the others in a set.

    A long stream numbers its chats 1, 2, 3...: its memory stays flat however many chats it
    has (a set of every order grew by about 75 bytes a chat). Orders are at least 1.
    """

    __slots__ = ("count", "rest", "run", "top")

    def __init__(self) -> None:
        self.run = 0  # 1..run were all seen
        self.rest: set[int] = set()  # the others seen
        self.count = 0  # how many distinct orders
        self.top = 0  # the largest

    def __contains__(self, order: int) -> bool:
        return 1 <= order <= self.run or order in self.rest

    def __len__(self) -> int:
        return self.count

    def add(self, order: int) -> None:
        if order in self:
            return
        self.count += 1
        self.top = max(self.top, order)
        if order != self.run + 1:
            self.rest.add(order)
            return
        self.run = order
        while self.run + 1 in self.rest:
            self.run += 1
            self.rest.discard(self.run)


_NO_CHAT: Final = _Chat(-1, "", 0)
"""Stands for "no chat" between chats (never read there: the states say where a chat is open)."""


def _no_separator(s: str, i: int) -> bool:
    """Whether ``s[i:]`` begins with what neither the element separator (``\\n``, JSON-escaped)
    nor an opening tag can begin with (a cut ``\\`` or ``\\n`` may still be one)."""
    c = s[i]
    if c == "<":
        return False
    if c != "\\":
        return True
    if i + 1 < len(s) and s[i + 1] != "n":
        return True
    return i + 2 < len(s) and s[i + 2] != "<"


_NO_CLOSER: Final[_Matcher] = re.compile(r"(?!)").match
"""An I/E body has no closing tag: '<' in it is damage."""


def _plain_end(chunk: str) -> int:
    """Where the plain text (no markup, escape, entity or quote) at the start of ``chunk`` ends."""
    # (The common cases without the pattern, plain text up to the end or up to a '<' (a
    # closing tag): printable means no control character and no surrogate, and three
    # characters may not occur. Either way the answer is _PLAIN's.)
    lt = chunk.find("<")
    head = chunk if lt < 0 else chunk[:lt]
    if head.isprintable() and '"' not in head and "\\" not in head and "&" not in head:
        return len(head)
    m = _PLAIN_MATCH(chunk)
    return 0 if m is None else m.end()


def _joined(chunks: list[str | bytes]) -> str | bytes:
    """Chunks of one type joined (``TypeError`` if both types are there)."""
    return "".join(chunks) if isinstance(chunks[0], str) else b"".join(chunks)  # type: ignore[arg-type]


def _escape(s: str, i: int, buf: list[str], bad: re.Pattern[str]) -> int:
    """Decode the JSON escape at ``s[i]`` into ``buf``; where it ends, or -1 if it is cut
    off by the chunk boundary or decodes to a character ``bad`` matches."""
    m = _ESCAPE.match(s, i)
    if m is None:
        return -1
    simple, high, low, code = m.groups()
    if simple is not None:
        ch = _ESCAPES[simple]
    elif high is not None:
        ch = chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00))
    else:
        ch = chr(int(code, 16))
    if bad.match(ch):
        return -1
    buf.append(ch)
    return m.end()


class Collector:
    """Rebuilds a ``Reply`` from events: what ``collect`` and ``StreamParser.reply`` use."""

    def __init__(self) -> None:
        self.chats: dict[int, dict[str, Any]] = {}
        self.diagnostics: list[Diagnostic] = []
        self.dialect: str | None = None
        self.reasoning: list[str] = []

    def add(self, event: Event) -> None:
        """Apply one event."""
        if isinstance(event, ChatStart):
            self.chats[event.chat] = {
                "type": event.type,
                "order": event.order,
                "segments": [],
                "speaker": event.speaker,
            }
        elif isinstance(event, SegmentStart):
            self.chats[event.chat]["segments"].append([event.tag, [], None])
        elif isinstance(event, (Emotion, Action, Cue, TextDelta)):
            segment = self.chats[event.chat]["segments"][event.segment]
            segment[1].append(event.text)
            if isinstance(event, Emotion):
                segment[2] = event.intensity
        elif isinstance(event, DiagnosticEvent):
            self.diagnostics.append(event.diagnostic)
        elif isinstance(event, Dialect):
            self.dialect = event.name
        elif isinstance(event, Reasoning):
            self.reasoning.append(event.text)
        elif isinstance(event, Reset):
            self.chats.clear()
            self.diagnostics.clear()
            self.dialect = None
            self.reasoning.clear()

    def reply(self) -> Reply:
        """The reply so far, chats sorted by order (stable: equal orders keep arrival order)."""
        chats = []
        for _index, c in sorted(self.chats.items()):
            segments = [
                construct_trusted(Segment, {"tag": tag, "text": "".join(parts), "intensity": intensity})
                for tag, parts, intensity in c["segments"]
            ]
            fields = {"type": c["type"], "order": c["order"], "segments": segments, "speaker": c["speaker"]}
            chats.append(construct_trusted(Chat, fields))
        chats.sort(key=lambda c: c.order)
        diagnostics = sorted(self.diagnostics, key=lambda d: (d.offset, d.end))
        return construct_trusted(
            Reply,
            {
                "chats": chats,
                "diagnostics": diagnostics,
                "reasoning": "".join(self.reasoning) or None,
                "dialect": self.dialect,
            },
        )


def collect(events: Iterable[Event]) -> Reply:
    """The ``Reply`` a sequence of events describes (chats sorted by order)."""
    collector = Collector()
    for event in events:
        collector.add(event)
    return collector.reply()


@final
class StreamParser:
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
    of it is never shown as the character's speech.

    ``keep_reply=False`` keeps no ``reply`` either (for unbounded streams); a damaged
    stream then ends with ``Reset`` and the whole batch result. A lenient stream never
    raises (a bug in the batch reader becomes a ``CF999`` diagnostic, as in ``parse``).
    """

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
        "_held_at",
        "_kept",
        "_kept_mark",
        "_lang",
        "_last_order",
        "_limit",
        "_line",
        "_line_start",
        "_live",
        "_need",
        "_orders",
        "_out",
        "_oversize",
        "_pend",
        "_preamble",
        "_preamble_size",
        "_reasoning",
        "_room",
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
    ) -> None:
        # The compiled reader checks these types at the call; the pure one checks the same.
        if not isinstance(lenient, bool) or not isinstance(keep_reply, bool):
            raise TypeError("lenient and keep_reply must be bool")
        if not isinstance(max_size, int):
            raise TypeError(f"max_size must be an int, not {type(max_size).__name__}")
        if not isinstance(tags, TagTable | None) or not isinstance(vocabulary, Vocabulary | None):
            raise TypeError("tags must be a TagTable and vocabulary a Vocabulary (or None)")
        self.lenient = lenient
        self._turn = turn_lines(turn)  # what the player said: an echo of it is not the character's (CF625)
        self.vocabulary = vocabulary
        self.max_size = max_size
        self.tags = DEFAULT_TAGS if tags is None else tags
        self._lang = _language(self.tags)
        self._reasoning = ""  # the model's reasoning shown so far (Reasoning events)
        self._preamble: list[str] | None = []  # text skipped before the reply (reasoning, prose, a fence)
        self._preamble_size = 0  # ... its length
        self._damaged = False  # read through damage the batch reader repairs the same way (close() completes it)
        self._spec_at = 0  # how much of a held stream the last reread read (see _speculate)
        self._spec_work = 0  # how much all rereads read
        self._spec_last: tuple[int, int, str, str] | None = None  # its last segment: order, index, tag, text
        self._spec_on = lenient and keep_reply  # rereads go on until one contradicts what was shown
        self._collector: Collector | None = Collector() if keep_reply else None
        self._unfolded: list[Event] = []  # events not yet folded into the collector
        self._decoder: codecs.IncrementalDecoder | None = None
        self._kept: list[str | bytes] | None = []
        self._kept_mark = 0  # kept[:mark] are joined runs of chunks (see _compact)
        self._room = max_size  # max_size less the bytes fed (bytes input)
        self._limit = max_size  # past this offset (characters), nothing more is kept
        self._oversize = False  # left the format within max_size, then grew past it (see _over_size)
        self._bytes = False
        self._state = _TOP
        self._pend = ""  # the start of a token cut by the chunk boundary
        self._need = ""  # a character that token needs (see _stall)
        self._twice = False  # ... twice (see _stall)
        self._base = 0  # raw offset (characters) of the first character not yet consumed
        self._line = 1  # its line
        self._line_start = 0  # the offset where that line starts
        self._chat = _NO_CHAT  # the chat being read
        # Only chats still open are kept, and the orders seen (for duplicates and gaps) as a
        # run 1..n plus the others: memory grows with neither the chats nor their text.
        self._chats: dict[int, _Chat] = {}
        self._count = 0
        self._unsorted = False
        self._last_order = 0
        self._orders = _Orders()
        self._chats_at: tuple[int, int, int] = (0, 1, 1)
        self._chats_end = 0
        self._closer: _Matcher = _NO_CLOSER  # the closing tag of the open element
        self._close_tag = ""  # ... as written in canonical output
        self._text: list[str] = []  # decoded text of the open segment not yet emitted
        self._streams = False  # the open segment's text goes out as deltas
        self._live = False  # ... and its chat is announced: a plain chunk is one delta
        self._out: list[Event] = []
        self._closed = False
        self._held_at = (0, 1, 1)  # where the input left the format

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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The compiled reader cannot be subclassed; the pure one refuses it too, so that code
        # written against one runs against the other. Wrap a parser instead.
        raise TypeError("StreamParser cannot be subclassed: wrap an instance instead")

    def feed(self, chunk: str | bytes | bytearray | memoryview) -> list[Event]:
        """Consume one chunk; returns the events it made certain."""
        if isinstance(chunk, str):
            if (kept := self._kept) is not None:
                kept.append(chunk)  # its size is checked where _base moves (_over_size)
                if len(kept) - self._kept_mark >= _KEPT_RUN:
                    self._compact(kept)
            # The common cases, inside a message: the chunk is decided text, or decided text
            # and the start of the closing tag.
            if self._live and self._plain_or_cut(chunk):
                if pend := self._pend:
                    chunk = chunk[: -len(pend)]
                    if not chunk:
                        return []
                self._base += len(chunk)
                if self._base > self._limit:
                    self._past_limit()
                chat = self._chat
                event = _TextDelta(chat.index, chat.segment, chat.tag, chunk)
                if self._collector is not None:
                    self._unfolded.append(event)
                return [event]
            if self._closed:
                raise ValueError("feed() after close()")
            text = chunk
        else:
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
                text = self._decoder.decode(data)
            except UnicodeDecodeError:
                self._hold(self._pend, len(self._pend))
                if self._room < 0:
                    self._over_size()
                return self._flush()
        if pend := self._pend:
            # A token cut by the last boundary: no work while this chunk cannot complete it.
            s = pend + text
            need = self._need
            if (
                (need not in text and len(s) < _TOKEN_MAX)
                or (need == '"' and s.count('"') < _HEADER_QUOTES and len(s) < _ENVELOPE_MAX and '"body"' not in s)
                or (self._twice and len(s) < _TOKEN_MAX and text.count(need) == 1)
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
        elif self._state == _HELD:
            self._base += len(text)
            if self._base > self._limit or self._room < 0:
                self._past_limit()
            if self._spec_on and self._kept is not None:
                return self._speculate(text)
            return []
        else:
            s = text
        # Read tokens from s: one pattern per state, matched where the last token ended. A
        # token the chunk boundary cuts waits in _pend (_stall); damage holds the rest (_hold).
        i, n = 0, len(s)
        buf = self._text
        try:
            while i < n:
                state = self._state
                if state == _TEXT:
                    c = s[i]
                    if c not in '<"\\&':  # (where markup, an escape or an entity begins, no text does)
                        m = _PLAIN_MATCH(s, i)
                        if m is not None:
                            buf.append(m.group())
                            i = m.end()
                            continue
                    if c == "<":
                        if self._closer is _NO_CLOSER:
                            raise _Held  # markup in an I/E body
                        if (j := self._close_element(s, i)) < 0:
                            i = self._stall(s, i, _TOKEN_MAX, ">")
                            break
                        i = j
                    elif c == "\\":
                        if (j := _escape(s, i, buf, _TEXT_BAD)) < 0 and (j := self._bad_escape(s, i, buf)) < 0:
                            i = self._stall(s, i, _TOKEN_MAX)
                            break
                        i = j
                    elif c == "&":
                        m = _ENTITY_MATCH(s, i)
                        if m is None:
                            i = self._stall(s, i, _TOKEN_MAX, ";")
                            break
                        entity = m.group()
                        decoded = _XML_ENTITIES.get(entity)
                        if decoded is None:
                            if not self._lang.text.fullmatch(entity):
                                i = self._stall(s, i, _TOKEN_MAX, ";")
                                break
                            decoded = decode_text(entity)
                        buf.append(decoded)
                        i = m.end()
                    elif c == '"':
                        m = _BODY_END_MATCH(s, i)
                        assert m is not None
                        if m.end() == n:
                            i = self._stall(s, i, _ENVELOPE_MAX)
                            break
                        if s[m.end()] in ",]:":
                            raise _Held  # the batch reader may end the string here: it decides
                        if s[m.end()] != "}":
                            # An unescaped quote inside the text: the batch reader keeps it as text
                            # (CF607), and so does the stream; close() adds the diagnostic.
                            buf.append('"')
                            self._repair()
                            i += 1
                            continue
                        self._body_end()
                        i += 1
                    else:
                        raise _Held  # a raw control character or a lone surrogate: not JSON text
                elif state == _AFTER:
                    if s[i] == '"':
                        self._body_end()
                        i += 1
                        continue
                    if s.find(">", i) < 0:  # no tag is complete yet (every pattern below needs its '>')
                        if _no_separator(s, i):
                            raise _Held  # no separator and tag can begin here
                        i = self._stall(s, i, _TOKEN_MAX, ">")
                        break
                    if s[i + 3 : i + 4] in self._lang.whole_first and s.startswith("\\n<", i):
                        m = self._lang.sep_whole.match(s, i)
                        if m is not None and self._whole(m):
                            i = m.end()
                            continue
                    m = self._lang.sep_open.match(s, i)
                    if m is None:
                        if _no_separator(s, i) or s.find(">", i) >= 0:
                            raise _Held  # no separator and tag can begin here, or a tag of no table
                        i = self._stall(s, i, _TOKEN_MAX, ">")
                        break
                    written, after = m.group(2), m.start(3)
                    if self._whole_cut(s, i, written, after):
                        i = self._stall(s, i, _TOKEN_MAX, ">")
                        break
                    if m.group(1) is None:
                        self._repair()  # no newline between elements (CF701)
                    self._segment_start(written, after)
                    i = self._text_after_tag(m, 3, buf)
                elif state == _KEY:
                    m = _KEY_RUN_MATCH(s, i)
                    if m is not None:
                        buf.append(m.group())
                        i = m.end()
                        continue
                    c = s[i]
                    if c == "<":
                        self._key_done(s, i)
                    elif c == "\\":
                        if (j := _escape(s, i, buf, _KEY_BAD)) < 0:
                            m = _ESCAPE.match(s, i)
                            if (m is not None and not (m.group(4) or "").lower().startswith(_HIGH_SURROGATES)) or (
                                i + 1 < n and s[i + 1] not in _ESCAPE_STARTS
                            ):
                                raise _Held  # a newline, markup or a bad escape in a key: the rereads read it
                            i = self._stall(s, i, _TOKEN_MAX)
                            break
                        i = j
                    elif c == '"' and self._lenient_end(s, i):
                        self._repair()
                        self._key_done(s, i)  # a key cut by the end of the body (CF702)
                        self._segment_end()
                        self._body_end()
                        i += 1
                    elif c == '"' and len(s) - i < _ENVELOPE_MAX and not s[i + 1 :].strip():
                        i = self._stall(s, i, _ENVELOPE_MAX)
                        break
                    else:
                        raise _Held
                elif state == _CLOSE:
                    if (j := self._close_element(s, i)) < 0:
                        i = self._stall(s, i, _TOKEN_MAX, ">")
                        break
                    i = j
                elif state == _OPEN:
                    if s[i] == "<" and s.find(">", i) < 0:  # an opening tag, not complete yet
                        i = self._stall(s, i, _TOKEN_MAX, ">")
                        break
                    if s[i + 1 : i + 2] in self._lang.whole_first:
                        m = self._lang.first_whole.match(s, i)
                        if m is not None and self._whole(m):
                            i = m.end()
                            continue
                    m = self._lang.open.match(s, i)
                    if m is None:
                        if s[i] != "<" or s.find(">", i) >= 0:
                            raise _Held  # no tag can begin here, or a tag of no table: the rereads read it
                        i = self._stall(s, i, _TOKEN_MAX, ">")
                        break
                    written, after = m.group(1), m.start(2)
                    if self._whole_cut(s, i, written, after):
                        i = self._stall(s, i, _TOKEN_MAX, ">")
                        break
                    self._segment_start(written, after)
                    i = self._text_after_tag(m, 2, buf)
                else:  # the envelope, between bodies
                    c = s[i]
                    if c in " \t\n\r":
                        j = i + 1
                        while j < n and s[j] in " \t\n\r":  # (JSON whitespace: a run is short)
                            j += 1
                        if state == _TOP:
                            self._skip(s[i:j])
                        i = j
                    elif state == _CHAT_END and c == "}":
                        self._chat_done()
                        i += 1
                    elif state == _SEP and c == ",":
                        self._state = _LIST
                        i += 1
                    elif (state in (_SEP, _LIST)) and c == "]":
                        if state == _LIST and self._count:
                            self._repair()  # a trailing comma
                        self._chats_end = self._base + i + 1
                        self._state = _END
                        i += 1
                    elif state == _LIST and c == "{":
                        if s.count('"', i) < _HEADER_QUOTES:
                            if s.find('"body"', i) >= 0 and _BODY_KEY.search(s, i) is not None:
                                # The body began before "type" and "order" were both written (one is
                                # missing): no header; the rereads show what they settle.
                                raise _Held
                            i = self._stall(s, i, _ENVELOPE_MAX, '"')
                            break
                        m = _HEADER_WRITTEN_MATCH(s, i) or _HEADER_MATCH(s, i)
                        if m is None and _SPEAKER_CUT.match(s, i) is not None:
                            i = self._stall(s, i, _ENVELOPE_MAX, '"')  # a scene's header, cut in its speaker
                            break
                        if m is None:
                            # All the quotes a header holds are here: more text cannot make it one.
                            # Other keys, another order (a dialect): the rereads show what they settle.
                            raise _Held
                        self._chat_begins(m)
                        i = m.end()
                    elif state == _TOP:
                        m = _TOP_RE.search(s, i)
                        if m is None:
                            # Prose, a fence, reasoning before the reply: skipped (the batch
                            # reader reports it), unless the reread shows a reply in it.
                            j = s.rfind("{", i)
                            cut = j >= 0 and _TOP_CUT.match(s, j) is not None
                            if (cut and j > i) or not cut:
                                self._repair()
                            self._skip(s[i : j if cut else n])
                            i = self._stall(s, j, _ENVELOPE_MAX) if cut else n
                            break
                        if self._inside_reasoning(s[i : m.start()]):
                            # An envelope written inside the model's reasoning (<think>…{"chats": […) is
                            # part of the reasoning: skipped, as the batch reader skips it.
                            self._repair()
                            self._skip(s[i : m.end()])
                            i = m.end()
                            continue
                        if m.start() > i:
                            self._repair()
                            self._skip(s[i : m.start()])
                        self._preamble_reasoning()
                        self._chats_at = self._here(s, m.end() - 1)
                        self._state = _LIST
                        i = m.end()
                    elif state == _END and c == "}":
                        self._state = _DONE
                        i += 1
                    elif state == _DONE:
                        self._repair()  # text after the reply: the batch reader decides at close()
                        i = n
                    else:
                        raise _Held
        except _Held:
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
        if buf and self._streams:
            self._emit_text()
        state = self._state
        if (state == _HELD or (state == _TOP and self._damaged)) and self._spec_on and self._kept is not None:
            return self._speculate(text)
        out = self._out
        if not out:
            return []
        self._out = []
        if self._collector is not None:
            self._unfolded.extend(out)
        return out

    def close(self) -> list[Event]:
        """End of input: the remaining events (damaged or cut-off input is completed in batch)."""
        if self._closed:
            return []
        self._closed = True
        self._live = False
        if self._decoder is not None and self._state != _HELD:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._hold(self._pend, len(self._pend))
        if self._state == _DONE and not self._pend and not self._damaged:
            self._order_warnings()
            return self._flush()
        early = self._flush()  # what was decided before the end, now in the collector too
        self._complete()
        return early + self._flush()

    # -- a held stream: reread what came so far, show what more text cannot change ------------
    def _skip(self, text: str) -> None:
        """Keep text skipped before the reply (bounded): it may hold the model's reasoning."""
        if self._preamble is not None and text:
            self._preamble.append(text)
            self._preamble_size += len(text)  # (a running sum: summing the list each time is quadratic)
            if self._preamble_size > _ENVELOPE_MAX * 64:
                self._preamble = None  # too long to reread here: close() reports the reasoning

    def _inside_reasoning(self, tail: str) -> bool:
        """Whether the text skipped so far, then ``tail``, ends inside an open reasoning block."""
        if self._preamble is None:
            return False
        tags = [m.group() for m in self._lang.reasoning.finditer("".join(self._preamble) + tail)]
        return bool(tags) and "/" not in tags[-1]

    def _preamble_reasoning(self) -> None:
        """The reply begins: the reasoning written before it is settled, so it streams now, before the chats."""
        preamble, self._preamble = self._preamble, None
        if not preamble:
            return
        text = "".join(preamble)
        if not text.strip():
            return
        # Read as what it is, text before a reply: alone, <think> would read as a bare-tag reply.
        reasoning = parse(
            text + _EMPTY_REPLY, lenient=True, vocabulary=self.vocabulary, **self._batch_kwargs()
        ).reasoning
        shown = self._reasoning  # what a reread already showed of it
        if reasoning and len(reasoning) > len(shown) and reasoning.startswith(shown):
            self._out.append(Reasoning(reasoning[len(shown) :]))
            self._reasoning = reasoning

    def _batch_kwargs(self) -> dict[str, Any]:
        # The default table is what parse() reads without being told.
        kwargs: dict[str, Any] = {} if self.tags is DEFAULT_TAGS else {"tags": self.tags}
        if self._turn:
            kwargs["turn"] = self._turn
        return kwargs

    def _speculate(self, chunk: str) -> list[Event]:
        """Reread the held stream with the lenient batch reader; emit what it settles.

        Run when the text has grown by an eighth since the last reread, or when ``chunk``
        brings a character that may complete something (a ']', a '>', an asterisk, a quote)
        while the rereads have read less than ``_SPECULATE_BUDGET`` times the text: either
        way, the rereads cost a bounded multiple of the input. What a reread of a prefix says is taken only where
        more text cannot change it (``_advance``); the first reread that contradicts what was
        shown stops the rereads, and ``close()`` decides (``Reset`` only if the whole reply
        still contradicts it).
        """
        early = self._flush()
        size = self._base + len(self._pend)
        grown = size - self._spec_at
        budget = grown > 0 and self._spec_work + size <= _SPECULATE_BUDGET * size
        often = grown >= max(_SPECULATE_MIN, self._spec_at >> _SPECULATE_SHIFT) or (
            budget and _DECISIVE.search(chunk) is not None
        )
        if not often and not (budget and size <= _SPECULATE_SMALL):
            return early
        self._spec_work += size
        if size > self.max_size >> _SPECULATE_LIMIT_SHIFT:
            # What is shown is kept (the reply), and a reread needs memory of its own: past
            # 1/32 of max_size, a damaged stream waits for close() (memory within max_size).
            self._spec_on = False
            return early
        self._spec_at = size
        raw = self._raw()
        pause = gc.isenabled()
        if pause:
            gc.disable()
        try:
            batch = parse(raw, lenient=True, vocabulary=self.vocabulary, max_size=self.max_size, **self._batch_kwargs())
        except Exception:  # close() reads it again and reports what went wrong
            self._spec_on = False
            return early
        finally:
            if pause:
                gc.enable()
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if (
            (
                batch.dialect in _UNSETTLED
                and (
                    (not self._chats_at[0] and not _prose_decided(batch, text))
                    or _FRONT_MATTER_START.match(text, self._held_at[0]) is not None
                )
            )
            or (batch.dialect == _ECHOED and not _ECHOED_CHAT.search(text))
            or (batch.reasoning is None and self._state == _TOP and self._lang.reasoning.search(text))
        ):
            return early  # the text so far may yet turn out to be a preamble to the reply
        if not self._advance(batch, self._folded(), often):
            self._spec_on = False
            self._out = []  # not even the part before the contradiction: the reread is unsure
        if self._state == _TOP and any(isinstance(e, ChatStart) for e in self._out):
            # What came before any JSON reads as a reply (bare tags, brackets): from here on
            # the rereads show it, and a JSON envelope after it is no longer looked for.
            self._base += len(self._pend)
            self._pend = ""
            self._hold("", 0)
        return early + self._flush()

    def _advance(self, batch: Reply, shown: Collector, steady_test: bool = True) -> bool:
        """Emit what ``batch`` (a reread of the text so far) settles beyond ``shown``; ``False`` if it contradicts it.

        Settled: the reasoning once the reply has begun, every chat but the last one as it
        is, and in the last chat every segment but the last one; the last segment's text up
        to ``_settled`` (a whole value waits for its segment to close).
        """
        out = self._out
        whole = self._lang.whole
        reasoning = batch.reasoning or ""
        if not reasoning.startswith(self._reasoning):
            return False
        settled = reasoning if batch.chats else _settled(reasoning)
        if len(settled) > len(self._reasoning) and settled.startswith(self._reasoning):
            out.append(Reasoning(settled[len(self._reasoning) :]))
            self._reasoning = settled
        arrival = sorted(shown.chats)
        chats = batch.chats
        if [c.order for c in chats[: len(arrival)]] != [shown.chats[i]["order"] for i in arrival]:
            return False  # chats the reread sorts before one shown: close() decides
        unannounced = {c.order: c for c in self._chats.values() if not c.started}
        last = len(chats) - 1
        # The last segment read the same by two rereads, the text having grown in between,
        # is complete (what came in between is markup after it): shown whole, left open.
        tail = chats[-1].segments[-1] if chats and chats[-1].segments else None
        now = None if tail is None else (chats[-1].order, len(chats[-1].segments) - 1, tail.tag, tail.text)
        # (Not between the rereads of every chunk of a short text: a few characters may add
        # nothing the reader shows, a cut entity or a space, and still be the start of markup.)
        steady = steady_test and now is not None and now == self._spec_last
        if steady_test:
            self._spec_last = now
        for k, chat in enumerate(chats):
            segments: list[list[Any]]
            if k < len(arrival):
                index = arrival[k]
                have = shown.chats[index]
                if have["type"] != chat.type or have["speaker"] != chat.speaker:
                    return False
                found = self._chats.get(index)
                if found is None:
                    continue  # ended in the stream; close() checks it against the whole reply
                state = found
                segments = have["segments"]
            else:
                if k == last and not chat.segments:
                    break
                state = (
                    unannounced.pop(chat.order)
                    if chat.order in unannounced
                    else _Chat(self._count, chat.type, chat.order)
                )
                if state.kind != chat.type:
                    return False
                if state.index == self._count:
                    self._count += 1
                    self._chats[state.index] = state
                    self._orders.add(chat.order)
                state.started = True
                index = state.index
                out.append(_ChatStart(index, chat.type, chat.order, chat.speaker))
                segments = []
            count = len(chat.segments)
            for n, seg in enumerate(chat.segments):
                still_open = k == last and n == count - 1
                # Text followed only by a segment still unsure may yet lose trailing space or
                # turn into markup: it stays open until what follows it is settled.
                # So does text of the last chat holding a character that may begin markup (an
                # asterisk a later one closes may make it an action).
                if k == last and not still_open and seg.tag not in whole:
                    after = chat.segments[-1]
                    paired = seg.tag not in self._lang.hidden and _PAIRED.search(seg.text) is not None
                    still_open = paired or (n == count - 2 and (after.tag in whole or not _settled(after.text)))
                # Text of the last chat that is a tag cut before its '>' (read as text only because
                # it is not complete yet) or front matter not closed yet may turn into markup.
                markup = k == last and seg.tag not in whole and _markup_ahead(seg.text)
                still_open = still_open or markup
                if n < len(segments):
                    tag, parts, intensity = segments[n]
                    text = "".join(parts)
                    if tag != seg.tag or intensity != seg.intensity:
                        return False
                    if n < state.closed_segments:
                        if text != seg.text:
                            return False
                        continue
                else:
                    steady_last = n == count - 1 and steady
                    unsure = markup or (not seg.text if steady_last else seg.tag in whole or not _settled(seg.text))
                    if still_open and unsure:
                        break  # a whole value waits for its segment to close; a tag, for its first text
                    out.append(_SegmentStart(index, n, seg.tag))
                    text = ""
                if seg.tag in whole:
                    if text and text != seg.text:
                        return False
                    if not text:
                        out.extend(segment_events(index, n, seg, self.tags)[1:-1])
                else:
                    if not seg.text.startswith(text):
                        return False
                    if markup:
                        more = text  # (nothing more until it is settled)
                    elif not still_open or (steady and n == count - 1):
                        more = seg.text
                    else:
                        more = _settled(seg.text, whole_text=n < count - 1)
                    if len(more) > len(text) and more.startswith(text):
                        out.append(_TextDelta(index, n, seg.tag, more[len(text) :]))
                if still_open:
                    break
                out.append(_SegmentEnd(index, n, seg.tag))
                state.closed_segments = n + 1
            else:
                if k < last:
                    out.append(_ChatEnd(index))
                    del self._chats[index]
        return True

    # -- bookkeeping ------------------------------------------------------------------------
    def _compact(self, kept: list[str | bytes]) -> None:
        """Join the chunks kept since the last run into one (each type on its own: str and bytes may mix).

        A list of model tokens costs about 15 bytes a character (an object each); joined, the
        kept text costs about what it weighs, and each character is copied once more.
        """
        mark = self._kept_mark
        if len(kept[mark]) + len(kept[-1]) > 2 * _KEPT_SMALL:  # long chunks: their objects cost little
            self._kept_mark = len(kept)
            return
        tail = kept[mark:]
        del kept[mark:]
        try:
            kept.append(_joined(tail))
        except TypeError:  # str and bytes chunks both: one run of each type at a time
            start = 0
            for k in range(1, len(tail) + 1):
                if k == len(tail) or type(tail[k]) is not type(tail[start]):
                    kept.append(_joined(tail[start:k]))
                    start = k
        self._kept_mark = len(kept)

    def _keep(self, chunk: bytes) -> None:
        self._room -= len(chunk)  # checked once the chunk is read (_over_size)
        if (kept := self._kept) is not None:
            kept.append(chunk)
            if len(kept) - self._kept_mark >= _KEPT_RUN:
                self._compact(kept)

    def _plain_or_cut(self, chunk: str) -> bool:
        """Whether ``chunk`` is decided text, or decided text and then the start of the closing tag."""
        cut = _plain_end(chunk)
        if cut == len(chunk):
            return cut > 0
        return self._cut_closer(chunk, cut)

    def _cut_closer(self, chunk: str, cut: int) -> bool:
        """Whether ``chunk`` is decided text up to ``cut``, then the start of the closing tag (which then waits)."""
        tag = self._close_tag
        if cut == len(chunk) or chunk[cut] != "<" or len(chunk) - cut >= len(tag) or not tag.startswith(chunk[cut:]):
            return False
        self._pend, self._need, self._twice, self._live = chunk[cut:], ">", False, False
        return True

    def _over_size(self) -> None:
        """More than ``max_size`` was fed: nothing more is kept, memory stays flat from here on.

        The stream reads its first ``max_size`` characters (bytes for ``bytes`` input) like
        ``parse`` does. Still in the format there, it is a long stream: it goes on streaming,
        and damage after that point is reported as ``CF801`` (see ``_complete``). Out of the
        format before that point, it is read like ``parse`` reads input over ``max_size``: at
        ``close()``, ``CF002`` and no chats.
        """
        if self._kept is None:
            return
        if self._damaged or (self._state == _HELD and self._held_offset() < self.max_size):
            self._oversize = True  # (a repair is only ever made while the text is kept: within max_size)
        self._kept = None
        self._limit = sys.maxsize

    def _held_offset(self) -> int:
        """Where the input left the format, in the unit of ``max_size`` (bytes for ``bytes`` input)."""
        offset = self._held_at[0]
        if not self._bytes or self._kept is None:
            return offset
        # Count the bytes of the first ``offset`` characters chunk by chunk (no copy of the whole).
        decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        chars = size = 0
        for chunk in self._kept:
            text = decoder.decode(chunk if isinstance(chunk, bytes) else chunk.encode("utf-8", "surrogatepass"))
            if chars + len(text) >= offset:
                return size + len(text[: offset - chars].encode("utf-8", "surrogateescape"))
            chars += len(text)
            size += len(text.encode("utf-8", "surrogateescape"))
        return size

    def _raw(self) -> str | bytes:
        """The text kept so far, as fed: ``str``, or ``bytes`` once any chunk was bytes."""
        kept = self._kept
        assert kept is not None
        if not self._bytes:
            return "".join(c for c in kept if isinstance(c, str))
        return b"".join(c if isinstance(c, bytes) else c.encode("utf-8", "surrogatepass") for c in kept)

    def _hold(self, s: str, i: int) -> int:
        """The input left the format at ``s[i]``: emit the text decided before it, hold the rest."""
        if self._state != _HELD:
            if self._text and self._streams:
                self._emit_text()
            self._held_at = self._here(s, i)
            self._state = _HELD
            self._live = self._streams = False
        self._pend = ""
        return len(s)

    def _stall(self, s: str, i: int, limit: int, need: str = "") -> int:
        """No token matches at ``s[i]``: wait for the next chunk, unless the tail is too long.

        ``need``: a character the token ends with, if there is one ('>' for a tag, '"' for a
        chat header): until a chunk brings it, there is nothing to try again.
        """
        if len(s) - i >= limit:
            return self._hold(s, i)
        pend = self._pend = s[i:]
        self._need = need
        # An opening tag cut in a name only tags announced whole begin with: read once their
        # closing tag's '>' came too (before that, it would only be cut again).
        self._twice = need == ">" and pend[pend.rfind("<") + 1 :].lower() in self._lang.whole_prefixes
        self._live = False  # until the token is read, a chunk is not plain text
        return i

    def _close_element(self, s: str, i: int) -> int:
        """The closing tag at ``s[i]`` ends the open element: where it ends, or -1 if none is complete there."""
        m = self._closer(s, i) or self._other_closer(s, i)
        if m is None:
            return -1
        if m.group(1) is None:
            self._repair()  # another element's closing tag (CF703)
        self._segment_end()
        return m.end()

    def _other_closer(self, s: str, i: int) -> re.Match[str] | None:
        """A closing tag of another element (or ``</>``): the batch reader lets it close the open one (CF703)."""
        return self._lang.any_close.match(s, i)

    def _lenient_end(self, s: str, i: int) -> bool:
        """Whether the '"' at ``s[i]`` ends the body (a '}' follows); raises nothing, decides only when it can."""
        m = _BODY_END_MATCH(s, i)
        return m is not None and m.end() < len(s) and s[m.end()] == "}" and self._kept is not None

    def _bad_escape(self, s: str, i: int, buf: list[str]) -> int:
        """A backslash before a character no JSON escape starts with: the batch reader reads the character (CF608)."""
        if i + 1 >= len(s):
            return -1
        ch = s[i + 1]
        if ch in _ESCAPE_STARTS or _TEXT_BAD.match(ch) or ch in '\r\n\t"':
            return -1
        self._repair()
        buf.append(ch)
        return i + 2

    def _repair(self) -> None:
        """The reader goes on through damage the batch reader repairs the same way (``close()`` completes it).

        Past ``max_size`` nothing is kept to complete it with: there, damage is damage (CF801).
        A strict stream shows nothing from the first damage on: ``close()`` raises where
        ``parse`` would.
        """
        if self._kept is None or not self.lenient:
            raise _Held
        self._damaged = True
        self._limit = min(self._limit, self.max_size >> _SPECULATE_LIMIT_SHIFT)

    def _past_limit(self) -> None:
        """The stream grew past ``_limit``: a repaired one stops showing, a long one stops keeping."""
        if self._damaged and self._limit < self.max_size:
            # What is shown is kept (the reply) besides the raw text kept for close(): past
            # 1/32 of max_size, a repaired stream waits for close() (memory within max_size).
            if self._state != _HELD:
                self._base += len(self._pend)
                self._pend = ""
                self._hold("", 0)
            self._limit = self.max_size
        if self._base > self._limit or self._room < 0:
            self._over_size()

    def _flush(self) -> list[Event]:
        out, self._out = self._out, []
        if self._collector is not None and out:
            self._unfolded.extend(out)
        return out

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
        self._out.append(DiagnosticEvent(chat, d))

    # -- the reader: what a token means ------------------------------------------------------
    def _chat_begins(self, m: re.Match[str]) -> None:
        kind, order_text = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(4), m.group(3))
        if kind not in CHAT_TYPES:
            kind = TYPE_ALIASES[kind.lower()]
            self._repair()  # a chat type the batch reader reads as C, I or E (CF613)
        if len(order_text) > _ORDER_DIGITS_MAX:
            raise _Held
        order = int(order_text)
        if order in self._orders:
            raise _Held  # a repeated order: the batch reader renumbers it
        speaker: str | None = m.group("speaker")
        if speaker is not None and _KEY_FULLMATCH(speaker) is None:
            raise _Held  # not a name (spaces around it, markup): the batch reader reports it
        chat = self._chat = self._chats[self._count] = _Chat(self._count, kind, order, speaker=speaker)
        self._count += 1
        self._orders.add(order)
        self._unsorted = self._unsorted or order < self._last_order
        self._last_order = order
        if kind in TAGGED_TYPES:
            self._state = _OPEN
        else:
            chat.segment, chat.tag, self._closer = 0, TEXT_TAG, _NO_CLOSER
            self._state, self._streams = _TEXT, True

    def _start(self, chat: _Chat) -> None:
        """Announce the chat with its first content: a chat cut off before any has no events."""
        chat.started = True
        self._out.append(_ChatStart(chat.index, chat.kind, chat.order, chat.speaker))
        if chat.kind not in TAGGED_TYPES:
            self._out.append(_SegmentStart(chat.index, 0, TEXT_TAG))

    def _chat_done(self) -> None:
        chat = self._chat
        del self._chats[chat.index]
        self._out.append(_ChatEnd(chat.index))
        self._chat = _NO_CHAT
        self._state = _SEP

    def _segment_start(self, written: str, after: int) -> None:
        """The opening tag ``written`` (a name of the table in any case, or a synonym) ends just before ``s[after]``."""
        tag = written
        if tag not in self._lang.element:
            tag = self._lang.names[written.lower()]
            self._repair()  # read as the tag it means (CF704)
        chat = self._chat
        chat.segment += 1
        chat.tag = tag
        self._closer, self._close_tag, is_key, streams = self._lang.element[tag]
        if is_key:
            # Announced whole, once the key is complete: a key cut off shows nothing early.
            chat.key_start = self._base + after
            self._state = _KEY
        else:
            if not chat.started:
                self._start(chat)
            self._out.append(_SegmentStart(chat.index, chat.segment, tag))
            self._state = _TEXT
            self._streams = self._live = streams

    def _whole(self, m: re.Match[str]) -> bool:
        """A whole element as the table writes it (``<emo>joy</emo>``) in one match; ``False``: token by token."""
        tag, value = m.group(1, 2)
        role = self._lang.whole[tag]
        if role == "emotion" and (self.vocabulary is not None or not self._lang.key.fullmatch(value)):
            return False  # the token reader decides (vocabulary diagnostics, damage)
        if self._off_list(tag, value):
            return False
        chat = self._chat
        n = chat.segment = chat.segment + 1
        chat.tag = tag
        if not chat.started:
            self._start(chat)
        index = chat.index
        out = self._out
        out.append(_SegmentStart(index, n, tag))
        if role == "emotion":
            out.append(_Emotion(index, n, value))
        elif role == "action":
            out.append(_Action(index, n, value))
        else:
            out.append(_Cue(index, n, tag, value))
        out.append(_SegmentEnd(index, n, tag))
        chat.closed_segments = n + 1
        self._state = _AFTER
        return True

    def _off_list(self, tag: str, value: str) -> bool:
        """Whether ``value`` is not one of the closed list of values of cue ``tag`` (the batch reader reports it)."""
        values = self._lang.closed.get(tag)
        return values is not None and value not in values

    def _text_after_tag(self, m: re.Match[str], run: int, buf: list[str]) -> int:
        """After an opening tag ``m`` matched with the plain text that follows it (group
        ``run``): that text, where the element holds text; where the reader goes on."""
        if self._state == _TEXT and m.end(run) > m.start(run):
            buf.append(m.group(run))
            return m.end()
        return m.start(run)

    def _whole_cut(self, s: str, i: int, written: str, after: int) -> bool:
        """Whether ``s[i:]`` is the start of a whole element cut by the chunk boundary (it waits, to be read whole)."""
        if written not in self._lang.whole or len(s) - i >= _TOKEN_MAX:
            return False
        m = _KEY_RUN_MATCH(s, after)
        rest = s[m.end() if m is not None else after :]
        return not rest or self._lang.element[written][1].startswith(rest)

    def _key_done(self, s: str, i: int) -> None:
        """The key ends at ``s[i]`` (a '<'): announce the segment and the emotion."""
        chat = self._chat
        key = "".join(self._text)
        if not self._lang.key.fullmatch(key):
            raise _Held
        if self.vocabulary is not None:
            decision = apply_vocabulary(key, self.vocabulary)
            if decision.code == "CF301":
                raise _Held  # an error: the batch reader decides what becomes of it
            if decision.code is not None:
                # A key holds no raw newline (JSON strings cannot), so it starts on the current line.
                offset, line, column = self._here(s, i)
                start = (chat.key_start, line, column - (offset - chat.key_start))
                message = in_body(chat.index, decision.message)
                self._diagnostic(decision.code, message, start, offset, chat.index)
            key = decision.key or key
        self._text.clear()
        if not chat.started:
            self._start(chat)
        self._out.append(_SegmentStart(chat.index, chat.segment, chat.tag))
        self._out.append(_Emotion(chat.index, chat.segment, key))
        self._state = _CLOSE

    def _segment_end(self) -> None:
        chat = self._chat
        if (role := self._lang.whole.get(chat.tag)) is not None and role != "emotion":  # (shown at _key_done)
            text = "".join(self._text)
            if self._off_list(chat.tag, text):
                raise _Held  # a value its tag does not allow: the batch reader decides (CF131/CF132)
            self._text.clear()
            if role == "action":
                self._out.append(_Action(chat.index, chat.segment, text))
            else:
                self._out.append(_Cue(chat.index, chat.segment, chat.tag, text))
        elif self._text:
            self._emit_text()
        self._out.append(_SegmentEnd(chat.index, chat.segment, chat.tag))
        chat.closed_segments = chat.segment + 1
        self._state = _AFTER
        self._streams = self._live = False

    def _emit_text(self) -> None:
        """Emit the decided text of the open (streamed) segment as one delta."""
        chat = self._chat
        if not chat.started:
            self._start(chat)
        chat.had_text = True
        self._out.append(_TextDelta(chat.index, chat.segment, chat.tag, "".join(self._text)))
        self._text.clear()
        self._live = not self._pend

    def _body_end(self) -> None:
        chat = self._chat
        if chat.kind in TAGGED_TYPES:
            if self._state == _TEXT:
                self._repair()  # an element not closed before the end of the body (CF702)
                self._segment_end()
            if self._state != _AFTER:
                raise _Held  # an empty body
        else:
            if self._text:
                self._emit_text()
            if not chat.had_text:
                raise _Held  # an empty I/E body
            self._out.append(_SegmentEnd(chat.index, 0, TEXT_TAG))
            chat.closed_segments = 1
            self._streams = self._live = False
        self._state = _CHAT_END

    # -- the end -------------------------------------------------------------------------------------
    def _order_warnings(self) -> None:
        """What strict parsing says about orders (CF112, CF113), now that all are known."""
        orders = self._orders
        if not len(orders):
            return
        at, end = self._chats_at, self._chats_end
        top = orders.top
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
        raw: str | bytes | None = None
        if self._kept is not None:
            raw = self._raw()
            # Over max_size only by a token that never completed: it began before the bound.
            self._oversize = self._oversize or len(raw) > self.max_size
        if self._oversize:
            # What parse(text, lenient=True) says of the same input (and all it says).
            if raw is not None:
                size = len(raw)
            else:
                size = self.max_size - self._room if self._bytes else self._base + len(self._pend)
            cf002 = Diagnostic.at("", "CF002", too_long(size, self.max_size, in_bytes=self._bytes), 0)
            self._fail(cf002)
            shown = self._collector is None or bool(
                self._folded().chats or self._collector.diagnostics or self._collector.reasoning
            )
            self._out = [Reset()] if shown else []
            self._out.append(DiagnosticEvent(None, cf002))
            return
        if raw is None:
            end = self._base + len(self._pend)
            self._hold(self._pend, 0)  # where the reader stopped (a token that never completed)
            offset, line, column = self._held_at
            message = f"the stream is longer than max_size ({self.max_size:,}) and left the format: the rest is dropped"
            cf801 = Diagnostic(
                code="CF801", message=message, severity="error", line=line, column=column, offset=offset, end=end,
            )  # fmt: skip
            self._fail(cf801)
            self._out.append(DiagnosticEvent(None, cf801))
            return
        # The batch result of a long damaged reply can hold hundreds of thousands of
        # diagnostics, each becoming an event: acyclic objects the collector would rescan
        # again and again (the parser pauses it for the same reason).
        pause = gc.isenabled()
        if pause:
            gc.disable()
        try:
            try:
                batch = parse(
                    raw,
                    lenient=self.lenient,
                    vocabulary=self.vocabulary,
                    max_size=self.max_size,
                    **self._batch_kwargs(),
                )
            except Exception as e:
                if not self.lenient or isinstance(e, ParseError):
                    raise
                # A lenient stream never raises: a bug in the batch reader is reported, not thrown.
                message = f"internal error while recovering ({type(e).__name__}: {e}); please report it"
                self._out = [DiagnosticEvent(None, Diagnostic.at("", "CF999", message, 0))]
                return
            self._reconcile(batch)
        finally:
            if pause:
                gc.enable()

    def _fail(self, diagnostic: Diagnostic) -> None:
        """A strict stream raises where ``parse`` would; a lenient one reports ``diagnostic``."""
        if not self.lenient:
            raise ParseError([diagnostic])

    def _reconcile(self, batch: Reply) -> None:
        """Emit what ``batch`` holds beyond what was streamed, or ``Reset`` and all of it."""
        if self._collector is None:
            self._out = [Reset(), *reply_events(batch, self.tags)]
            return
        streamed = self._folded()
        out: list[Event] = []
        shown = {(d.code, d.offset) for d in streamed.diagnostics}
        out.extend(DiagnosticEvent(d.chat, d) for d in batch.diagnostics if (d.code, d.offset) not in shown)
        by_order = {c["order"]: (index, c) for index, c in streamed.chats.items()}
        next_index = self._count
        unannounced = {c.order: c.index for c in self._chats.values() if not c.started and c.order is not None}
        consistent = len(shown) <= len(batch.diagnostics)
        reasoning = batch.reasoning or ""
        if not reasoning.startswith(self._reasoning):
            consistent = False
        elif len(reasoning) > len(self._reasoning):
            out.insert(0, Reasoning(reasoning[len(self._reasoning) :]))
        for chat in batch.chats:
            if chat.order in by_order:
                index, have = by_order.pop(chat.order)
                events = self._finish_chat(index, have, chat)
                if events is None:
                    consistent = False
                    break
                out.extend(events)
            elif chat.order in unannounced:
                out.extend(_chat_events(unannounced.pop(chat.order), chat, self.tags))
            else:
                out.extend(_chat_events(next_index, chat, self.tags))
                next_index += 1
        if by_order or not consistent:
            out = [Reset(), *reply_events(batch, self.tags)]  # the batch reader contradicts what was shown
        elif (dialect := batch.dialect) is not None:
            out.append(Dialect(dialect))  # last, as in Reply.events()
        self._out = out

    def _finish_chat(self, index: int, have: dict[str, Any], chat: Chat) -> list[Event] | None:
        """The events that complete streamed chat ``index`` into ``chat``; ``None`` if it contradicts."""
        state = self._chats.get(index)  # None: the chat ended in the stream
        closed = state.closed_segments if state is not None else len(have["segments"])
        segments = have["segments"]
        if have["type"] != chat.type or have["speaker"] != chat.speaker or len(segments) > len(chat.segments):
            return None
        out: list[Event] = []
        for n, seg in enumerate(chat.segments):
            if n >= len(segments):
                out.extend(segment_events(index, n, seg, self.tags))
                continue
            tag, parts, intensity = segments[n]
            text = "".join(parts)
            if tag != seg.tag or not seg.text.startswith(text) or intensity != seg.intensity:
                return None
            if n < closed:
                if text != seg.text:
                    return None
                continue
            if seg.tag in self._lang.whole:
                if text and text != seg.text:
                    return None  # an emotion, action or cue is shown whole, once
                if not text:
                    out.extend(segment_events(index, n, seg, self.tags)[1:-1])
            elif len(seg.text) > len(text):
                out.append(_TextDelta(index, n, seg.tag, seg.text[len(text) :]))
            out.append(_SegmentEnd(index, n, seg.tag))
        if state is not None:  # still open in the stream (ended chats leave the table)
            out.append(_ChatEnd(index))
        return out


def _chat_events(index: int, chat: Chat, tags: TagTable) -> list[Event]:
    out: list[Event] = [_ChatStart(index, chat.type, chat.order, chat.speaker)]
    for n, seg in enumerate(chat.segments):
        out.extend(segment_events(index, n, seg, tags))
    out.append(_ChatEnd(index))
    return out
