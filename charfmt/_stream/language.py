"""What the stream reader knows of the language: the token patterns of the envelope and the body.

The envelope's tokens (``{"chats": [``, a chat header up to its body's opening quote) and the
body's (a run of plain text, a JSON escape, an entity, the end of a body) are the same for
every tag table; ``Language`` holds those of one table (its opening and closing tags, the
elements announced whole), built once per table by ``language``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from charfmt._grammar.lexical import JSON_ESCAPES, MARKUP, NAMED_ENTITIES, NOT_KEY, NOT_TEXT, text_class
from charfmt._grammar.static import terminal_regex
from charfmt.events import WHOLE_EVENTS, Announce
from charfmt.tags import CHAT_TYPES, REASONING_TAGS, TYPE_ALIASES, TagSpec, TagTable

TOKEN_MAX: Final = 48
"""The longest body token a chunk boundary may cut (an escaped surrogate pair is 12,
a numeric entity with leading zeros up to 40): a longer tail that matches nothing is damage."""
ENVELOPE_MAX: Final = 4096
"""The same for a chat header (it may hold JSON whitespace)."""
STAND_IN_REPLY: Final = '{"chats":[{"type":"E","order":1,"body":"-"}]}'
"""Put after the text skipped before a reply to reread it as a preamble (its reasoning): a reply of one
chat (after words that announce none, a reply holding no chat leaves the words the reply)."""

# -- the envelope ------------------------------------------------------------------------------
_JWS: Final = "[ \t\n\r]*"
_TYPES: Final = (
    "|".join(CHAT_TYPES) + "|(?i:" + "|".join(map(re.escape, sorted(TYPE_ALIASES, key=len, reverse=True))) + ")"
)
"""A chat type as written: ``C``, or a spelling the batch reader takes for it (``c``, ``chat``: CF613)."""
_ORDER: Final = "[1-9][0-9]*"
ORDER_DIGITS_MAX: Final = 640
"""A longer order is read by the batch reader at ``close()``: ``int()`` refuses longer digit
strings where a process lowers CPython's limit (4,300 by default) to its minimum, 640."""
TOP_RE: Final = re.compile(rf'\{{{_JWS}"chats"{_JWS}:{_JWS}\[')
TOP_CUT: Final = re.compile(rf'\{{{_JWS}(?:"(?:c(?:h(?:a(?:t(?:s(?:"{_JWS}(?::{_JWS})?)?)?)?)?)?)?)?\Z')
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


SPEAKER_CUT: Final = re.compile(
    rf'\{{{_JWS}(?:"type"{_JWS}:{_JWS}"(?:{_TYPES})"{_JWS},{_JWS}"order"{_JWS}:{_JWS}{_ORDER}'
    rf'|"order"{_JWS}:{_JWS}{_ORDER}{_JWS},{_JWS}"type"{_JWS}:{_JWS}"(?:{_TYPES})"){_JWS},{_JWS}'
    + _prefixes(
        [*'"speaker"', _JWS, ":", _JWS, '"', r'[^"\\\x00-\x1f]*', '"', _JWS, ",", _JWS, *'"body"', _JWS, ":", _JWS]
    )
)
"""A header with a ``"speaker"`` cut by the end of the text so far: wait for the rest of it."""
BODY_KEY: Final = re.compile(rf'"body"{_JWS}:{_JWS}"')
"""The body of a chat begins (a canonical header writes it last)."""
HEADER_QUOTES: Final = 9
"""How many '"' a header holds: fewer in the tail, and it cannot be complete yet."""

# -- the body (its lexical facts: charfmt._grammar.lexical) -----------------------------------------
_BODY_END: Final = re.compile(r'"[ \t\n\r]*')
"""A '"' in a body, and the whitespace after it: the body ends there only if a '}' follows
(an unescaped quote inside the text is damage, read without contradicting what was shown)."""
_IN_STRING: Final = r'"\\\x00-\x1f'
"""What a JSON string holds only escaped (a class body): the quote, the backslash, C0 controls."""
_PLAIN: Final = re.compile(text_class(_IN_STRING) + "+")
"""A run of plain text in a body as written in the JSON string: no markup, escape, entity or quote."""
_KEY_RUN: Final = re.compile(f"[^{_IN_STRING}{NOT_KEY}]+")
"""A run of an emotion's key as written in the JSON string."""
ESCAPE: Final = re.compile(
    rf"\\(?:([{re.escape(''.join(JSON_ESCAPES))}])"
    r"|u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|u([0-9a-fA-F]{4}))"
)
"""A JSON escape: one letter (group 1), a surrogate pair (groups 2 and 3) or one ``\\u`` code unit (group 4)."""
ESCAPE_STARTS: Final = frozenset(JSON_ESCAPES) | {"u"}
HIGH_SURROGATES: Final = ("d8", "d9", "da", "db")
"""``\\uD800``-``\\uDBFF``: the first half of a pair, whose second half may be in the next chunk."""
_ENTITY: Final = re.compile(r"&[#0-9A-Za-z]{1,38};")
XML_ENTITIES: Final = {f"&{name};": ch for name, ch in NAMED_ENTITIES.items()}
"""The named entities as written, decoded without a lookup in the grammar (``decode_text`` does the rest)."""
TEXT_BAD: Final = re.compile(f"[{MARKUP}{NOT_TEXT}]")
"""A decoded character that text does not allow literally ('<' and '&' would be markup)."""
KEY_BAD: Final = re.compile(f"[{NOT_KEY}]")
"""A decoded character that a key does not allow."""

Matcher = Callable[[str, int], "re.Match[str] | None"]
"""A compiled pattern's bound ``match``: called without looking the method up by name."""

# The patterns' bound match methods, as Final names: called without a method lookup by name.
PLAIN_MATCH: Final = _PLAIN.match
KEY_RUN_MATCH: Final = _KEY_RUN.match
ENTITY_MATCH: Final = _ENTITY.match
BODY_END_MATCH: Final = _BODY_END.match
HEADER_WRITTEN_MATCH: Final = _HEADER_WRITTEN.match
KEY_FULLMATCH: Final = terminal_regex("KEY").fullmatch
HEADER_MATCH: Final = _HEADER.match
NO_CLOSER: Final[Matcher] = re.compile(r"(?!)").match
"""An I/E body has no closing tag: '<' in it is damage."""


SENTENCE_MARK: Final = re.compile(r"[.!?…。！？]")
"""Where a sentence may end: in an element other than speech, what follows waits for the element's closing tag
(the batch reader ends one closed by the speech's closing tag at its first sentence: ``tag_soup._sentence_end``)."""
SENTENCE_MARK_SEARCH: Final[Callable[[str], re.Match[str] | None]] = SENTENCE_MARK.search


DEBRIS_RUN_MATCH: Final[Matcher] = re.compile(r"(?:[ }\],']|\\\"|\\n)+").match
"""JSON punctuation as a body's raw text writes it after a quote (``}]}``, spaces, escaped quotes and line
breaks): the batch reader drops it, quote and all, at the end of an element's text (``prose.DEBRIS_AFTER``)."""


def plain_end(chunk: str) -> int:
    """Where the plain text (no markup, escape, entity or quote) at the start of ``chunk`` ends."""
    # (The common cases without the pattern, plain text up to the end or up to a '<' (a
    # closing tag): printable means no control character and no surrogate, and three
    # characters may not occur. Either way the answer is _PLAIN's.)
    lt = chunk.find("<")
    head = chunk if lt < 0 else chunk[:lt]
    if head.isprintable() and '"' not in head and "\\" not in head and "&" not in head:
        return len(head)
    m = PLAIN_MATCH(chunk)
    return 0 if m is None else m.end()


def no_separator(s: str, i: int) -> bool:
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


def unescape(s: str, i: int, buf: list[str], bad: re.Pattern[str]) -> int:
    """Decode the JSON escape at ``s[i]`` into ``buf``; where it ends, or -1 if it is cut
    off by the chunk boundary or decodes to a character ``bad`` matches."""
    m = ESCAPE.match(s, i)
    if m is None:
        return -1
    simple, high, low, code = m.groups()
    if simple is not None:
        ch = JSON_ESCAPES[simple]
    elif high is not None:
        ch = chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00))
    else:
        ch = chr(int(code, 16))
    if bad.match(ch):
        return -1
    buf.append(ch)
    return m.end()


# -- one tag table -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Language:
    """What the reader needs of one tag table, built once per table."""

    def __copy__(self) -> Language:
        return self  # (immutable and shared: a copied parser shares it)

    def __deepcopy__(self, memo: dict[int, Any]) -> Language:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (language, (self.table,))  # (unpickled: the shared one of its table)

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
    element: dict[str, tuple[Matcher, str, bool, bool]]
    """Per tag: its closing tag as a pattern's bound ``match`` (raw in the JSON string: '</msg>', or '<\\/msg>' from
    serializers that escape '/') and as written, whether it holds a vocabulary key (announced
    whole, checked against the vocabulary: the row's ``vocabulary``), whether its text streams
    (the row's ``streamed``; an action or a cue goes out whole)."""
    whole: dict[str, tuple[bool, Announce]]
    """Tags announced whole (emotion, action, cue), mapped to whether they hold a vocabulary key
    and to how the event announcing their value is built (the row's ``event``)."""
    hidden: frozenset[str]
    """Tags not shown to the player (hidden): only ever read from a tag, never from prose (a quote
    in one pairs with none later)."""
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
def language(tags: TagTable) -> Language:
    """The ``Language`` of ``tags`` (one per table)."""
    # The names as the table writes them first: the common case matches without backtracking.
    words = sorted(tags.synonyms, key=len, reverse=True)
    names = "|".join(re.escape(t.name) for t in tags) + "|(?i:" + "|".join(map(re.escape, words)) + ")"

    def closer(t: TagSpec) -> re.Pattern[str]:
        spelt = sorted((w for w, name in tags.synonyms.items() if name == t.name), key=len, reverse=True)
        return re.compile(rf"<\\?/(?:({re.escape(t.name)})|(?i:{'|'.join(map(re.escape, spelt))}))>")

    element: dict[str, tuple[Matcher, str, bool, bool]] = {
        t.name: (closer(t).match, t.close, t.row.vocabulary, t.streamed) for t in tags
    }
    whole = {t.name: (t.row.vocabulary, WHOLE_EVENTS[t.row.event]) for t in tags if t.row.event is not None}
    wholes = "|".join(re.escape(t.name) for t in tags if not t.streamed)
    run = _KEY_RUN.pattern.removesuffix("+") + "*"  # a whole element's value
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
    return Language(
        re.compile(f"<({names})>({run_text})"),
        re.compile(rf"(\\n)?<({names})>({run_text})"),
        dict(tags.synonyms),
        first_whole,
        sep_whole,
        re.compile(rf"<\\?/(?:((?!)))?(?:{names})?>"),
        element,
        whole,
        frozenset(t.name for t in tags if not t.shown),
        reasoning,
        frozenset(start for start, kinds in starts.items() if kinds == {True}),
        frozenset(t.name[0] for t in tags if not t.streamed),
        {t.name: frozenset(t.values) for t in tags if t.values is not None},
        terminal_regex("KEY"),
        terminal_regex("TEXT"),
        tags,
    )
