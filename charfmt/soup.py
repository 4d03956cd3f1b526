"""Lenient body reading: turn whatever a model wrote in a body into segments, and say what was repaired.

Used only when strict parsing failed. It reads tag soup (any case, spaces, long names,
attributes, self-closing and dot-notation tags, ``</>`` closers, unclosed and mismatched
elements, full-width brackets) and, outside tags, bracket tags (``[joy]``,
``[action:sigh]``, ``【疑惑】``) and role-play prose (``*jumps*``, quoted speech).
Offsets in the results are into the decoded body string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.entities import html5
from typing import Final

from charfmt import dialects
from charfmt._grammar.lexical import ENTITY as _ENTITY
from charfmt._grammar.lexical import decode_entities as decode_entities  # noqa: PLC0414 (re-exported: recover reads it here)
from charfmt.dialects import FRONT_MATTER, Sample
from charfmt.models import Vocabulary
from charfmt.tags import DEFAULT_TAGS, TagSpec, TagTable

_ANY_AMP: Final = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31};|#[0-9]{1,7};|#[xX][0-9a-fA-F]{1,6};)?")


def ampersands(text: str) -> list[tuple[int, int, str]]:
    """Each ``&`` in ``text`` that strict parsing would reject, with what lenient reading does."""
    found = []
    for m in _ANY_AMP.finditer(text):
        if _ENTITY.fullmatch(m.group()) and decode_entities(m.group()) != m.group():
            continue
        if m.group()[1:] in html5 and len(m.group()) > 1:
            found.append((m.start(), m.end(), f"HTML entity {m.group()} decoded"))
        else:
            found.append((m.start(), m.end(), f"{m.group() or '&'!r} is not an entity: kept as text"))
    return found


@dataclass(slots=True)
class Piece:
    """A segment being read: its tag, text, optional intensity, and where it came from."""

    tag: str
    text: str
    start: int
    end: int
    intensity: float | None = None
    implicit: bool = False  # opened by charfmt (speech wrapped by an emotion tag, a split message)
    attribute: Attribute | None = None  # <sfx type="thunder"></sfx>: a value written as an attribute


@dataclass(frozen=True, slots=True)
class Attribute:
    """A value written as an attribute of a tag (``type=``, ``name=``, ``value=``) and where the tag stands."""

    value: str
    written: str
    """The opening tag as written, for the repair's message."""
    start: int
    end: int


@dataclass(slots=True)
class Repair:
    """One repair, with offsets into the string that was read."""

    code: str
    message: str
    start: int
    end: int


@dataclass(slots=True)
class Result:
    """What a body turned into."""

    pieces: list[Piece] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    dialects: list[str] = field(default_factory=list)
    """Every entry of the dialect table met while reading (``dialects.winner`` picks the reply's)."""

    def note(self, code: str, message: str, start: int, end: int) -> None:
        self.repairs.append(Repair(code, message, start, end))

    def dialect(self, name: str) -> None:
        if name not in self.dialects:
            self.dialects.append(name)


# --- tags -------------------------------------------------------------------------------

INLINE_MARKUP: Final[frozenset[str]] = frozenset(
    {
        "a", "abbr", "b", "bdi", "bdo", "big", "br", "cite", "code", "del", "dfn", "em", "font", "i", "ins",
        "kbd", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u",
        "var", "wbr",
    }
)  # fmt: skip
"""HTML's inline (phrasing) elements: markup models put inside text. Removed, their text kept."""

LINE_BREAKS: Final[frozenset[str]] = frozenset({"br"})
"""Inline markup that stands for a line break: removed, a newline kept in its place."""

# Possessive quantifiers, and no two adjacent ones that could share characters: a regex
# that may split a run of spaces several ways takes seconds on a few hundred of them.
_TAG: Final = re.compile(
    r"""[<＜](?P<lead>\s*+)(?:(?P<slash>[/／])\s*+)?(?P<name>(?:[^\W\d][\w.\-:]*+)?)
        (?P<attrs>[^<>＜＞]*+)[>＞]""",
    re.X,
)
_ATTR: Final = re.compile(r"""([\w\-:]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>/]+))""")
_ESCAPED_NEWLINE: Final = re.compile(r"(?:</[^<>]{0,30}>|/>|＜／[^＜＞]{0,30}＞)((?:\\\\|\\)n)(?=\s*[<＜])")
"""A literal ``\\n`` right after a closing tag and before the next tag: a separator escaped twice."""


def note_literals(chunk: str, offset: int, out: Result) -> None:
    """Note each '<' and '&' in text that strict parsing would reject (kept as text, or decoded)."""
    if "<" in chunk or "＜" in chunk:
        at = offset + min(i for i in (chunk.find("<"), chunk.find("＜")) if i >= 0)
        out.note("CF707", "a '<' that starts no tag is kept as text", at, at + 1)
    if "&" in chunk:
        for a, b, message in ampersands(chunk):
            out.note("CF707", message, offset + a, offset + b)


@dataclass(frozen=True, slots=True)
class _Tag:
    closing: bool
    canon: str | None  # emo / act / msg / thought, an unknown tag's own name, or None for "</>"
    key: str | None  # emotion key or action id carried by the tag (dot, type="...", emotion-named)
    intensity: float | None
    self_closing: bool
    wraps_speech: bool  # <emotion type="joy">わあ</emotion>: the content is speech
    exact: bool  # written exactly as the strict format writes it
    known: bool


def _intensity(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not 0 <= number <= 100:  # nan, inf, negative: no intensity
        return None
    return number / 100 if number > 1 else number


def _resolve(m: re.Match[str], vocabulary: Vocabulary | None, tags: TagTable) -> _Tag | None:
    """What a tag-like match means, or ``None`` when it is plain text (``a < b > c``)."""
    name = m.group("name")
    closing = bool(m.group("slash"))
    attrs_text = m.group("attrs").strip()
    self_closing = attrs_text.endswith(("/", "／"))
    if self_closing:
        attrs_text = attrs_text[:-1].rstrip()
    if attrs_text and not m.group("attrs")[:1].isspace():
        return None  # "<a:b>x" is not a tag with attributes; attributes follow a space
    attrs = {a.lower(): v1 or v2 or v3 for a, v1, v2, v3 in _ATTR.findall(attrs_text)}
    if attrs_text and not attrs:
        return None  # "< b and c >": not a tag
    if not name:
        return _Tag(True, None, None, None, False, False, False, True) if closing and not attrs_text else None
    lower = name.lower()
    base, _, sub = lower.partition(".")
    key = sub or attrs.get("type") or attrs.get("name") or attrs.get("value") or None
    if key is not None and "&" in key:
        key = decode_entities(key)  # an attribute value, read as XML reads it
    intensity = _intensity(attrs.get("intensity") or attrs.get("level"))
    canon = tags.synonyms.get(base)
    exact = name in tags and not attrs_text and not m.group("lead") and m.group(0)[0] == "<"
    emotion = tags.emotion.name
    if canon is not None:
        wraps = canon == emotion and key is not None
        return _Tag(closing, canon, key, intensity, self_closing, wraps, exact, True)
    if vocabulary is not None and vocabulary.resolve(name) is not None and not sub:
        return _Tag(closing, emotion, vocabulary.resolve(name), intensity, self_closing, True, False, True)
    if m.group("lead") or not re.fullmatch(r"[A-Za-z_][\w\-]*", name):
        return None
    return _Tag(closing, lower, None, intensity, self_closing, False, False, False)


_CUT_TAG: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?[\w.\-:]*+$")
_LITERAL_NEWLINES: Final = frozenset({"\\n", "\\\\n", "\\r\\n", "\\n\\n"})


def read_body(
    body: str, vocabulary: Vocabulary | None = None, *, cut_off: bool = False, tags: TagTable = DEFAULT_TAGS
) -> Result:
    """Read a ``C`` body leniently into pieces, with every repair noted.

    ``cut_off``: the body ends where the input was cut; a tag begun at its very end
    (``<emo>joy</em``) is markup cut in half, dropped rather than kept as text.
    ``tags``: the tag table; a tag's role, not its name, says how it is read.
    """
    out = Result()
    if cut_off and (at := cut_scaffolding(body)) is not None:
        out.note("CF702", f"a chat-template marker cut off at the end is dropped: {body[at:]!r}", at, len(body))
        body = body[:at]
    if cut_off and (m := _CUT_TAG.search(body)) is not None:
        out.note("CF702", f"a tag cut off at the end is dropped: {m.group()!r}", m.start(), len(body))
        body = body[: m.start()]
    if cut_off:
        body = drop_cut_entity(body, out)
    if "<" in body or "[" in body or "＜" in body:
        marks = scaffolding(body, turns=False)
        for a, b, message in marks:
            out.note("CF622", message, a, b)
        body = blank(body, marks)
    if _ESCAPED_NEWLINE.search(body) and "\n" not in body:
        # "<emo>joy</emo>\\n<msg>…" decoded once too few: the separators are literal "\n".
        parts, pos = [], 0
        for m in _ESCAPED_NEWLINE.finditer(body):
            out.note("CF711", "a double-escaped newline (\\\\n) read as a newline", m.start(1), m.end(1))
            parts += [body[pos : m.start(1)], "\n" + " " * (m.end(1) - m.start(1) - 1)]
            pos = m.end(1)
        body_view = "".join(parts) + body[pos:]
    else:
        body_view = body
    state = _Reader(out, vocabulary, body, tags, cut_off=cut_off)
    pos = 0
    for entry in dialects.chain("body"):  # what may stand before the elements (front matter)
        if entry.detect is not None and entry.detect(Sample(body_view[pos:]), tags):
            out.dialect(entry.name)
            pos += _BODY_START_READERS[entry.name](body_view[pos:], pos, out, tags)
    holes: list[tuple[int, int, str]] = []  # inline markup in the text since pos: (start, end, replacement)
    removed: set[str] = set()  # inline markup names removed so far (their closers go too)
    for m in _TAG.finditer(body_view, pos):
        tag = _resolve(m, vocabulary, tags)
        if tag is None:
            continue
        # Inside an element or in running prose, HTML's inline markup is formatting; standing
        # between elements it is an unknown element, kept under its own name (``dumps`` writes
        # a segment ``a`` as <a>…</a>).
        closes_open = tag.closing and state.open is not None and state.open.tag == tag.canon
        inline = state.open is not None or tag.canon in removed or bool(body_view[pos : m.start()].strip())
        if not tag.known and tag.canon in INLINE_MARKUP and inline and not closes_open:
            removed.add(tag.canon)
            keep = "\n" if tag.canon in LINE_BREAKS else ""
            what = "a line break" if keep else "its text kept"
            out.note("CF715", f"inline markup {m.group()} removed: {what}", m.start(), m.end())
            holes.append((m.start(), m.end(), keep))
            continue
        state.text(pos, m.start(), body_view, holes)
        holes = []
        state.tag(tag, m)
        pos = m.end()
    state.text(pos, len(body_view), body_view, holes)
    state.finish(len(body))
    return out


def read_front_matter(text: str, offset: int, out: Result, tags: TagTable = DEFAULT_TAGS) -> int:
    """Pattern C at the start of ``text``: ``---\\nemotion: joy\\naction: jump\\n---``; how many characters it took.

    Each key the tag table knows (``tags.synonyms``) gives a piece of its tag; any other
    key, or one with no value, is reported dropped (``CF615``).
    """
    fm = FRONT_MATTER.match(text)
    if fm is None:
        return 0
    block = offset + fm.start(1)
    for m in _FRONT_MATTER_LINE.finditer(fm.group(1)):
        tag = tags.synonyms.get(m.group(1).lower())
        if tag is None or not m.group(2):
            out.note("CF615", f"front matter key {m.group(1)!r} dropped", block + m.start(), block + m.end())
            continue
        out.note("CF713", f"front matter {m.group(1)!r} read as <{tag}>", block + m.start(), block + m.end())
        out.pieces.append(Piece(tag, decode_entities(m.group(2)), block + m.start(2), block + m.end(2)))
    return fm.end()


_SCAFFOLD_HINTS: Final = ("<<", ">>", "<|", "INST]", "SYSTEM_PROMPT]", "_of_turn>", "SYS]", "USER]", "SYSTEM]")
_PLACEHOLDER_START: Final = re.compile(r"[<＜\[][/／]?[A-Z][A-Z0-9]*+[-_]")


def _may_hold_scaffolding(text: str) -> bool:
    """A cheap test before the scan: most bodies hold none of the markers' characters."""
    return any(hint in text for hint in _SCAFFOLD_HINTS) or _PLACEHOLDER_START.search(text) is not None


def scaffolding(text: str, *, turns: bool = True) -> list[tuple[int, int, str]]:
    """The chat-template scaffolding in ``text`` (``dialects.SCAFFOLDING``): ``(start, end, message)`` spans to drop.

    Each marker is one span. With ``turns``, so is the text of a turn of the prompt echoed
    (a system prompt, a user turn: ``dialects.SCAFFOLD_PROMPT_ROLES``) — from its opening
    marker to its closing one, the next turn's opening one, or the end of ``text`` — and the
    value of a placeholder element on one line (``<USER-CHAT-ID>12</USER-CHAT-ID>``).
    """
    if not _may_hold_scaffolding(text):
        return []
    spans: list[tuple[int, int, str]] = []
    roles: list[tuple[str, int]] = []  # the open turns: role, where its text starts
    for m in dialects.SCAFFOLDING.finditer(text):
        kind = m.lastgroup
        role = None
        if kind in ("chatml", "gemma", "llama3", "phi"):
            role = (m.group(kind) or "").strip().lower() or "assistant"
        elif m.group("sys_open"):
            role = "system"
        elif m.group("inst_open"):
            role = "user"
        closes = bool(m.group("sys_close") or m.group("inst_close") or m.group("end"))
        # A closer ends the open turn; a turn's opener ends the turn before it (not a system block).
        ends = closes or (role is not None and role != "system" and bool(roles) and roles[-1][0] != "system")
        if turns and ends and roles:
            was, at = roles.pop()
            if was in dialects.SCAFFOLD_PROMPT_ROLES and text[at : m.start()].strip():
                spans.append((at, m.start(), f"the prompt's {was} turn echoed: its text is dropped"))
        spans.append((m.start(), m.end(), f"chat-template marker {m.group().strip()!r} is scaffolding: dropped"))
        if role is not None:
            roles.append((role, m.end()))
    if turns:
        for was, at in roles:  # a turn of the prompt the reply ends inside
            if was in dialects.SCAFFOLD_PROMPT_ROLES and text[at:].strip():
                spans.append((at, len(text), f"the prompt's {was} turn echoed: its text is dropped"))
        for m in _PLACEHOLDER_VALUE.finditer(text):
            if m.group(2).strip():
                spans.append((m.start(2), m.end(2), "the value of a placeholder element is scaffolding: dropped"))
    spans.sort()
    merged: list[tuple[int, int, str]] = []
    for a, b, message in spans:
        if merged and a < merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b, merged[-1][2])
            continue
        merged.append((a, b, message))
    return merged


_PLACEHOLDER_VALUE: Final = re.compile(
    r"[<＜]([A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]++)++)[>＞]([^<>＜＞\n]{0,80}?)[<＜][/／]\1[>＞]"
)


_MARKERS: Final = (
    "<<SYS>>", "<</SYS>>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "<start_of_turn>",
    "<end_of_turn>", "<|start_header_id|>", "<|end_header_id|>",
)  # fmt: skip
_MARKER_PREFIXES: Final = frozenset(m[:k] for m in _MARKERS for k in range(2, len(m)))
_CUT_SPECIAL: Final = re.compile(r"<\|[^|<>\n]{0,40}\|?\Z")
_HEADER_OPEN: Final = "<|start_header_id|>"
_CUT_PLACEHOLDER: Final = re.compile(
    r"[<＜](?:[/／][A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]*+)*+"
    r"|[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]*+)*+"
    r"|[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]*+)++[>＞][^<>＜＞\n]{0,80}+(?:[<＜][/／]?[A-Z0-9_\-]*+)?)\Z"
)
"""An upper-case tag the input ends inside (``<USER-``), or a placeholder's one-line value (``<USER-ID>12``)."""


def cut_scaffolding(text: str) -> int | None:
    """Where a chat-template marker the input ends inside begins (``<<SY``, ``[IN``, ``<|im_st``), or ``None``."""
    tail = text[-20:]
    for k in range(len(tail), 1, -1):
        if tail[-k:] in _MARKER_PREFIXES:
            return len(text) - k
    if (m := _CUT_SPECIAL.search(text, max(0, len(text) - 44))) is not None:
        return m.start()
    if (m := _CUT_PLACEHOLDER.search(text, max(0, len(text) - 160))) is not None:
        return m.start()
    header = text.rfind(_HEADER_OPEN, max(0, len(text) - 80))
    if header >= 0:  # <|start_header_id|>assist, <|start_header_id|>assistant<|end_hea: the role not read yet
        rest = text[header + len(_HEADER_OPEN) :]
        name = len(rest) - len(rest.lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_ \t"))
        cut = not rest[name:] or rest[name:] in _MARKER_PREFIXES or "<|end_header_id|>".startswith(rest[name:])
        if cut and "\n" not in rest:
            return header
    return None


def blank(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with each span replaced by as many spaces: offsets after it stay put."""
    if not spans:
        return text
    parts, pos = [], 0
    for a, b, _message in spans:
        parts += [text[pos:a], " " * (b - a)]
        pos = b
    parts.append(text[pos:])
    return "".join(parts)


_FRONT_MATTER_LINE: Final = re.compile(r"^[ \t]*([\w-]+)[ \t]*:[ \t]*(.*?)[ \t]*$", re.M)
_BODY_START_READERS: Final = {"front-matter": read_front_matter}
"""The reader of each ``body`` entry of the dialect table: it returns how many characters it took."""

_CUT_ENTITY: Final = re.compile(r"&(?:#[0-9]{0,7}|#[xX][0-9a-fA-F]{0,6}|[A-Za-z][A-Za-z0-9]{0,31})?\Z")


def drop_cut_entity(text: str, out: Result, offset: int = 0) -> str:
    """``text`` without an entity cut off at its very end (``&am``), noted: half an entity is not text."""
    m = _CUT_ENTITY.search(text, max(0, len(text) - 40))
    if m is None:
        return text
    name = m.group()[1:]
    if name[:1].isalpha() and not any(known.startswith(name) for known in html5):
        return text  # "&xyz" at the end can never become an entity: it is text
    out.note("CF716", f"an entity cut off at the end is dropped: {m.group()!r}", offset + m.start(), offset + len(text))
    return text[: m.start()]


def _span(where: list[int], start: int, end: int) -> tuple[int, int]:
    """A span of a text with holes, in the offsets of the text around it."""
    return where[start], (where[end - 1] + 1 if end > start else where[start])


def _without(view: str, start: int, end: int, holes: list[tuple[int, int, str]]) -> tuple[str, list[int]]:
    """``view[start:end]`` with the holes replaced, and the view offset of each of its characters (and its end)."""
    parts: list[str] = []
    where: list[int] = []
    pos = start
    for a, b, keep in holes:
        parts += [view[pos:a], keep]
        where += [*range(pos, a), *([a] * len(keep))]
        pos = b
    parts.append(view[pos:end])
    where += [*range(pos, end), end]
    return "".join(parts), where


_REQUEST_FORM: Final = re.compile(r"user_chats?(?:_type)?|chat(?:_type)?")
"""The request form's elements (``<user_chats>``, ``<chat type="C">``): markup when echoed inside a body."""


class _Reader:
    """The element state machine of ``read_body``."""

    def __init__(
        self, out: Result, vocabulary: Vocabulary | None, raw: str, tags: TagTable, *, cut_off: bool = False
    ) -> None:
        self.out = out
        self.cut_off = cut_off  # the body ends where the input was cut
        self.vocabulary = vocabulary
        self.raw = raw
        self.tags = tags
        self.emotion = tags.emotion.name
        self.speech = tags.speech.name
        # What an emotion written inside them splits in two (their text continues after it).
        self.splittable = frozenset(s.name for s in tags.with_role("speech", "hidden", "action"))
        self.open: Piece | None = None
        self.open_tag: _Tag | None = None
        self.resume: str | None = None  # a message split by a nested emotion continues after it
        self.last_end = 0  # where the last element ended, to see missing newlines

    def text(self, start: int, end: int, view: str, holes: list[tuple[int, int, str]]) -> None:
        """The text between two tags, less the inline markup in it (``holes``)."""
        if start >= end:
            return
        if not holes:
            self._text(view[start:end], start, end, view, self.out)
            return
        chunk, where = _without(view, start, end, holes)
        found = Result()
        self._text(chunk, 0, end, view, found)
        for r in found.repairs:
            self.out.note(r.code, r.message, *_span(where, r.start, r.end))
        for p in found.pieces:
            p.start, p.end = _span(where, p.start, p.end)
            self.out.pieces.append(p)
        for d in found.dialects:
            self.out.dialect(d)

    def _text(self, chunk: str, offset: int, end: int, view: str, out: Result) -> None:
        note_literals(chunk, offset, out)
        if self.open is not None:
            self.open.text += chunk
            self.open.end = end
            return
        if chunk.strip() in _LITERAL_NEWLINES:
            # "</emo>\\n<act>": a separator written as an escape in a body that has real newlines too.
            at = offset + chunk.index("\\")
            out.note("CF711", "a literal \\n between elements read as a newline", at, at + len(chunk.strip()))
            return
        if not chunk.strip():
            if (chunk != "\n" or end == len(view)) and self.out.pieces:
                out.note("CF701", "whitespace between elements is layout, not content", offset, offset + len(chunk))
            return
        entry = dialects.first("stray", Sample(chunk), self.tags)
        if entry is not None:
            out.dialect(entry.name)
        read_prose(chunk, self.vocabulary, out, offset=offset, tags=self.tags)

    def tag(self, tag: _Tag, m: re.Match[str]) -> None:
        start, end = m.start(), m.end()
        if not tag.known and tag.canon is not None and _REQUEST_FORM.fullmatch(tag.canon):
            # <user_chats>, <chat type="C">: the request form echoed inside a body, never a segment.
            self.out.note("CF630", f"the request form's {m.group()} inside a body is markup: dropped", start, end)
            if self.open is not None and not tag.closing:
                self.out.note("CF702", f"<{self.open.tag}> is not closed; the next tag closes it", start, start)
                self._emit()
            self.last_end = end
            return
        if not tag.exact and tag.canon is not None:
            self._explain(tag, m)
        if tag.closing:
            self._close(tag, start, end)
            return
        if self.open is not None:
            if tag.canon == self.emotion and self.open.tag in self.splittable and not tag.wraps_speech:
                self.out.note(
                    "CF709",
                    f"<{m.group('name')}> inside <{self.open.tag}>: the {self.open.tag} is split around it",
                    start,
                    end,
                )
                self.resume = self.open.tag
                if self.open.text.strip():
                    self._emit()
                else:
                    self.open = self.open_tag = None
            else:
                self.out.note("CF702", f"<{self.open.tag}> is not closed; the next tag closes it", start, start)
                self._emit()
        elif self.out.pieces and start > 0 and self.raw[start - 1 : start] not in ("\n",) and self.last_end == start:
            self.out.note("CF701", "elements must be separated by a newline", start, start)
        canon = tag.canon
        assert canon is not None
        if not tag.known:
            self.out.note("CF708", f"unknown tag <{canon}> kept as a segment of its own", start, end)
        if tag.wraps_speech or (canon == self.emotion and tag.key is not None):
            key = (tag.key or "").strip()
            if key:
                self.out.pieces.append(Piece(self.emotion, key, start, end, tag.intensity))
            if tag.self_closing:
                self.last_end = end
                return
            self.open = Piece(self.speech, "", end, end, implicit=True)
            self.open_tag = tag
            return
        attribute = None if tag.key is None else Attribute(tag.key, m.group(0), start, end)
        if tag.self_closing:
            if tag.key:  # <sfx type="thunder"/>: read as <sfx>thunder</sfx>, its value checked as any other
                self.open = Piece(canon, "", start, end, tag.intensity, attribute=attribute)
                self._emit()
            self.last_end = end
            return
        self.open = Piece(canon, "", end, end, tag.intensity, attribute=attribute)
        self.open_tag = tag

    def _explain(self, tag: _Tag, m: re.Match[str]) -> None:
        name = m.group("name")
        form = dialects.first("tag", Sample(m.group(0)), self.tags)
        if form is not None and form.name == "dot-notation" and not (tag.wraps_speech and tag.key is not None):
            form = dialects.first("tag", Sample(m.group(0)), self.tags, after=form.name)  # <msg.x>: no emotion in it
        if form is not None:
            self.out.dialect(form.name)
        if form is not None and tag.closing:  # </emotion.joy>: its opening tag's CF705 says what the element is
            self.out.note("CF704", f"{m.group(0)} read as </{tag.canon}>", m.start(), m.end())
            return
        if form is not None and form.name == "dot-notation":
            self.out.note(
                "CF705", f"dot notation <{name}> read as an emotion and the speech it wraps", m.start(), m.end()
            )
        elif form is not None and form.name == "attribute-xml":
            if tag.wraps_speech:
                message = f"attribute form {m.group(0)} read as an emotion and the speech it wraps"
            elif tag.key is not None:
                return  # the value is in the attribute, or in the text: said when the element ends (_emit)
            else:
                message = f"attribute form {m.group(0)} read as <{tag.canon}>: its attributes dropped"
            self.out.note("CF705", message, m.start(), m.end())
        elif tag.known and tag.canon == self.emotion and tag.wraps_speech:
            self.out.note(
                "CF710", f"<{name}> names an emotion: read as an emotion and the speech it wraps", m.start(), m.end()
            )
        elif tag.canon is not None and tag.known:
            self.out.note(
                "CF704", f"{m.group(0)} read as {'</' if tag.closing else '<'}{tag.canon}>", m.start(), m.end()
            )

    def _close(self, tag: _Tag, start: int, end: int) -> None:
        if self.open is None:
            self.out.note("CF712", "a closing tag with no open element is dropped", start, end)
            return
        opened = self.open_tag
        matches = (
            tag.canon is None
            or tag.canon == self.open.tag
            or (
                opened is not None
                and (tag.canon == opened.canon or (opened.wraps_speech and tag.canon == self.emotion))
            )
        )
        if not matches:
            self.out.note("CF703", f"</{tag.canon}> closes <{self.open.tag}>", start, end)
        elif tag.canon is None:
            self.out.note("CF703", f"</> closes <{self.open.tag}>", start, end)
        self.open.end = start
        self._emit()
        self.last_end = end
        if self.resume is not None and self.open is None and tag.canon == self.emotion:
            self.open = Piece(self.resume, "", end, end, implicit=True)
            self.open_tag = None
            self.resume = None

    def _emit(self, *, cut: bool = False) -> None:
        """Add the open element as a piece; ``cut``: its text ends where the input was cut."""
        piece, self.open, self.open_tag = self.open, None, None
        if piece is None:
            return
        piece.text = decode_entities(piece.text)
        attribute = piece.attribute
        if attribute is not None:
            written, at = attribute.written, (attribute.start, attribute.end)
            if piece.text.strip():
                message = (
                    f"attribute form {written} read as <{piece.tag}>: its text is the value, the attribute dropped"
                )
            else:
                piece.text = attribute.value  # decoded as an attribute value already
                message = f"attribute form {written} read as <{piece.tag}>{attribute.value}</{piece.tag}>"
            self.out.note("CF705", message, *at)
        spec = self.tags.get(piece.tag)
        if spec is not None and spec.content == "key":
            what = "an emotion" if spec.role == "emotion" else f"a <{spec.name}> value"
            key = piece.text.strip()
            if key != piece.text:
                self.out.note("CF704", f"spaces around {what} removed", piece.start, piece.end)
            if not key:
                self.out.note(
                    "CF702",
                    f"{'an empty emotion' if spec.role == 'emotion' else f'an empty <{spec.name}>'} is dropped",
                    piece.start,
                    piece.end,
                )
                return
            if spec.values is not None:
                value = self._value(spec, key, piece, cut=cut)
                if value is None:
                    return
                key = value
            piece.text = key
        elif piece.implicit and not piece.text.strip():
            return  # a wrapper with nothing inside, or a split message with nothing after the emotion
        self.out.pieces.append(piece)

    def _value(self, spec: TagSpec, key: str, piece: Piece, *, cut: bool = False) -> str | None:
        """A value of a tag with a closed list (``spec.values``): the listed one it names, else kept as written.

        ``cut``: the value ends where the input was cut; one that is not in the list is
        most likely the start of one (``anv`` of ``anvil``): dropped (``None``), not kept.
        """
        values = spec.values or ()
        if key in values:
            return key
        same = next((v for v in values if v.casefold() == key.casefold()), None)
        if same is not None:
            self.out.note("CF704", f"<{spec.name}> value {key!r} read as {same!r}", piece.start, piece.end)
            return same
        allowed = ", ".join(values)
        if cut:
            message = f"<{spec.name}> value {key!r} is cut off at the end and is not one of {allowed}: dropped"
            self.out.note("CF133", message, piece.start, piece.end)
            return None
        self.out.note(
            "CF132", f"<{spec.name}> value {key!r} is not one of {allowed}; kept as written", piece.start, piece.end
        )
        return key

    def finish(self, end: int) -> None:
        if self.open is not None:
            if not (
                self.resume is None
                and self.open.tag == self.speech
                and not self.open.text.strip()
                and self.open_tag is None
            ):
                self.out.note("CF702", f"<{self.open.tag}> is not closed before the end of the body", end, end)
            self.open.end = end
            self._emit(cut=self.cut_off)


# --- brackets and prose --------------------------------------------------------------

_QUOTED: Final = r""""(?P<dq>[^"\n]+)"|「(?P<jq>[^「」]+)」|“(?P<cq>[^“”]+)”"""
"""Quoted speech: no dialect of its own (plain text quotes too), tried after the dialects' patterns."""
_PROSE: Final = re.compile(
    "|".join([*(f"(?:{entry.pattern})" for entry in dialects.chain("prose") if entry.pattern), _QUOTED]), re.X
)
"""The ``prose`` entries of the dialect table, in table order, then quoted speech: one regex."""
_QUOTES: Final = frozenset('"「“')
_GROUP_DIALECT: Final[dict[str, str]] = {
    group: entry.name
    for entry in dialects.chain("prose")
    if entry.pattern
    for group in re.compile(entry.pattern, re.X).groupindex
}
"""Each named group of ``_PROSE`` and the dialect entry whose pattern holds it."""


_MARKUP_CHARS: Final = re.compile(r"[<>&]")
"""Characters an emotion key cannot hold."""


def _bracket(
    word: str, val: str | None, vocabulary: Vocabulary | None, tags: TagTable
) -> tuple[str, str, float | None] | None:
    """A bracket tag's meaning: ``(tag, text, intensity)``, or ``None`` to keep it as text."""
    number = _bracket_intensity(val)
    lower = word.strip().lower()
    emotion = tags.emotion.name
    if val is not None and number is None and not _NUMBER.fullmatch(val):
        canon = tags.prefixes.get(lower) or tags.synonyms.get(lower)  # a prefix means what shorthand reads
        if canon is None:
            return None
        value = decode_entities(val.strip())
        if canon == emotion and vocabulary is not None:
            value = vocabulary.resolve(value) or value
        if canon == emotion and _MARKUP_CHARS.search(value):
            return None  # [emotion:a<b] names no emotion: it stays text
        return (canon, value, None)
    if vocabulary is not None:
        key = vocabulary.resolve(word)
        if key is not None:
            return (emotion, key, number)
    if re.fullmatch(r"[^\s<>&]+", word.strip()):
        return (emotion, word.strip(), number)
    return None


def _bracket_intensity(val: str | None) -> float | None:
    """A bracket tag's intensity (documented 0–1): above 1 clamped to 1, below 0 dropped (see ``_out_of_range``)."""
    if val is None or not _NUMBER.fullmatch(val):
        return None
    try:
        number = float(val)
    except ValueError:
        return None
    return None if number < 0 else min(number, 1.0)


_NUMBER: Final = re.compile(r"\s*[-+]?[0-9.]+\s*")


def _out_of_range(val: str | None) -> str | None:
    """What became of a bracket intensity outside 0–1 (``CF930``), or ``None`` where it is in range."""
    if val is None or not _NUMBER.fullmatch(val):
        return None
    try:
        number = float(val)
    except ValueError:
        return None
    if number > 1:
        return f"intensity {val.strip()} is outside 0–1: clamped to 1"
    if number < 0:
        return f"intensity {val.strip()} is outside 0–1: dropped, the emotion kept"
    return None


_OPEN_AT_END: Final = (
    (re.compile(r"\*\*\((?P<v>[^)\n]+)\Z"), ")**"),
    (re.compile(r"\*(?P<v>[^*\s][^*\n]*)\Z"), "*"),
    (re.compile(r'"(?P<v>[^"\n]+)\Z'), '"'),
    (re.compile(r"「(?P<v>[^「」]+)\Z"), "」"),
    (re.compile(r"“(?P<v>[^“”]+)\Z"), "”"),
    (re.compile(r"\((?P<v>[^()\n]+)\Z"), ")"),
    (re.compile(r"（(?P<v>[^（）\n]+)\Z"), "）"),
)
"""A role-play mark or a quotation the input ends inside (``*wav``, ``"Hel``), and its closer, not come yet."""
_CUT_MARK: Final = re.compile(
    r"""(?:\[\[?[^\[\]\n]{0,40}|【[^【】\n]{0,40}|(?:^|(?<=\s))(?:\*\*\(?|[*"“(])|[「（])\Z"""
)
"""A bracket tag the input ends inside (``[jo``, ``【疑``: half a key), or a lone opening mark: never text."""


def _cut_prose(text: str, out: Result, offset: int) -> tuple[str, str]:
    """``text`` ending where the input was cut: a bracket tag cut in half dropped, and the closer of a
    role-play mark or quotation left open at the very end (read as if it had come), each noted ``CF720``."""
    end = len(text.rstrip())
    if (m := _CUT_MARK.search(text, 0, end)) is not None:
        out.note("CF720", f"markup cut off at the end is dropped: {m.group()!r}", offset + m.start(), offset + end)
        return text[: m.start()], ""
    found = [(m, closer) for pattern, closer in _OPEN_AT_END if (m := pattern.search(text, 0, end)) is not None]
    for m, closer in sorted(found, key=lambda f: -f[0].start()):  # the mark opened last is the one left open
        scan = text[:end] + closer
        last = None
        for mark in _PROSE.finditer(scan):  # read from the start: a closing quote opens nothing
            last = mark
        if last is not None and last.start() == m.start() and last.end() == len(scan):
            message = f"{m.group()[:1]!r} left open at the end of the input: read as closed"
            out.note("CF720", message, offset + m.start(), offset + end)
            return text[:end], closer
    return text, ""


def read_prose(
    text: str,
    vocabulary: Vocabulary | None,
    out: Result,
    offset: int = 0,
    *,
    tags: TagTable = DEFAULT_TAGS,
    cut_off: bool = False,
) -> None:
    """Read untagged text: bracket tags, starred or parenthesised actions, quoted speech, the rest speech.

    The marks are the ``prose`` entries of the dialect table, in its order. Once quoted
    speech has appeared, unquoted narration after it is read as action (the table's action
    tag; speech when the table has none), and so is a whole sentence right before the first
    quote (``She smiles. "Hi!"``). Other text before the first quote stays speech: it is
    read from what came before it and what touches it, as a stream reads it, so a quote
    later in the reply never turns text already shown as speech into an action.
    """
    emotion, speech = tags.emotion.name, tags.speech.name
    narration = tags.action.name if tags.action is not None else speech
    marks: list[tuple[int, int, str, str, float | None]] = []
    quoted = False
    closer = ""
    if cut_off:
        text = drop_cut_entity(text, out, offset)
        text, closer = _cut_prose(text, out, offset)
    scan = text + closer if closer else text
    for m in _PROSE.finditer(scan):
        kind = m.lastgroup
        if kind in ("word", "val"):
            meaning = _bracket(m.group("word"), m.group("val"), vocabulary, tags)
            if meaning is None:
                continue
            if meaning[0] == emotion and (clamped := _out_of_range(m.group("val"))) is not None:
                out.note("CF930", clamped, offset + m.start(), offset + m.end())
            marks.append((m.start(), m.end(), meaning[0], meaning[1], meaning[2]))
        elif kind == "full":
            value = decode_entities(m.group("full").strip())
            canon = (vocabulary.resolve(value) if vocabulary else None) or value
            if _MARKUP_CHARS.search(canon):
                continue  # 【露娜>w<】 names no emotion: it stays text
            marks.append((m.start(), m.end(), emotion, canon, None))
        elif kind in ("direction", "star", "paren", "half"):
            marks.append((m.start(), m.end(), narration, m.group(kind or 0).strip(), None))
        else:
            if _in_sentence(scan, m, m.group(kind or 0)) or _json_string(scan, m):
                continue  # 'The word "hello" means hi.': a quotation inside a sentence is the sentence's
            quoted = True
            marks.append((m.start(), m.end(), speech, decode_entities(m.group(kind or 0)), None))
            continue
        out.dialect(_GROUP_DIALECT[kind or ""])
    pos = 0
    seen = False  # a quoted line came before: plain text from here on is narration
    for start, stop, tag, value, intensity in marks:
        quote = quoted and tag == speech and text[start] in _QUOTES
        # A sentence ended just before the first quote narrates it; "He said "hi"" is one sentence.
        lead = seen or (quote and re.search(r"[.!?。！？…]\s*\Z", text[pos:start]) is not None)
        _plain(text[pos:start], offset + pos, narration if lead else speech, out, speech)
        end = min(stop, len(text))  # a closer read as if it had come (cut_off) is not in the text
        out.pieces.append(Piece(tag, value, offset + start, offset + end, intensity))
        if quote:
            seen = True
        else:
            out.note("CF713", f"{text[start:end]!r} read as <{tag}>", offset + start, offset + end)
        pos = end
    _plain(text[pos:], offset + pos, narration if seen else speech, out, speech)


_SPOKEN_END: Final = re.compile(r"[.,!?…。、！？~〜—\-]\s*\Z")
_BOUNDARY_BEFORE: Final = re.compile(r"(?:\A|[.!?…。！？:：*）)」”\n])\s*\Z")
_BOUNDARY_AFTER: Final = re.compile(r"\s*(?:[*（(「“\n]|[A-Z]|[^\x00-\x7f])")


def _in_sentence(text: str, m: re.Match[str], quoted: str) -> bool:
    """A quotation inside a sentence (``The word "hello" means hi.``), not a line of dialogue.

    Dialogue ends in punctuation (``"Hello there," she said.``) or touches a boundary: it
    follows the start, a sentence's end, a colon or a mark, or it comes before the end, a
    mark or a new sentence (``He said "hi" *waves*``). Words on both sides: inside a sentence.
    The end of the text is no boundary after it: a stream cut there reads it as the whole does.
    """
    if _SPOKEN_END.search(quoted):
        return False
    before = _BOUNDARY_BEFORE.search(text, max(0, m.start() - 8), m.start()) is not None
    after = _BOUNDARY_AFTER.match(text, m.end()) is not None
    return not (before or after)


_JSON_DEBRIS: Final = re.compile(r"[\s\"',:]*[{}\[\]][\s{}\[\]\"',:]*")
"""Nothing but JSON punctuation with a bracket in it (``"}]}`` after an element): the end of a
JSON reply the model wrote around bare elements, never words anyone says."""


_JSON_KEY_BEFORE: Final = re.compile(r"\"[ \t]*:[ \t]*\Z")
_JSON_COLON_AFTER: Final = re.compile(r"[ \t]*:")


def _json_string(text: str, m: re.Match[str]) -> bool:
    """A JSON key or value written in prose (``- "type": "C", "body": "..."``, a format spec echoed), not dialogue.

    A key is followed by a colon; a value follows a quoted key and its colon. The text
    stays text (kept whole, read as the text around it), never speech and narration cut apart.
    """
    if m.group()[:1] != '"':
        return False
    return (
        _JSON_KEY_BEFORE.search(text, max(0, m.start() - 8), m.start()) is not None
        or _JSON_COLON_AFTER.match(text, m.end()) is not None
    )


def _plain(chunk: str, offset: int, tag: str, out: Result, speech: str) -> None:
    stripped = chunk.strip()
    if not stripped:
        return
    lead = len(chunk) - len(chunk.lstrip())
    start, end = offset + lead, offset + lead + len(stripped)
    if _JSON_DEBRIS.fullmatch(stripped):
        out.note("CF627", f"JSON punctuation outside an element dropped: {stripped!r}", start, end)
        return
    out.pieces.append(Piece(tag, decode_entities(stripped), start, end))
    reason = (
        "text outside an element read as speech" if tag == speech else "narration around quoted speech read as action"
    )
    out.note("CF706", reason, start, end)
