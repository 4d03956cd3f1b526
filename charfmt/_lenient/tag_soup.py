"""Tag soup: the elements of a ``C`` body as a model wrote them, read into pieces, every repair noted.

Used only where strict parsing failed. It reads tags in any case, with spaces, long names,
attributes, self-closing and dot-notation tags, ``</>`` closers, unclosed and mismatched
elements, full-width brackets; text between the elements is read as prose (``prose``).
Offsets in the results are into the decoded body string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from charfmt._grammar.lexical import decode_entities
from charfmt._lenient.literals import drop_cut_entity, note_literals
from charfmt._lenient.marks import FORM_ELEMENT
from charfmt._lenient.pieces import Attribute, Piece, Result
from charfmt._lenient.prose import CUT_OBJECT, DEBRIS_AFTER, read_prose
from charfmt._lenient.scaffolding import blank, cut_scaffolding, scaffolding
from charfmt._lenient.table import Reading, Sample, Span, reader
from charfmt._lenient.words import LETTER, is_sentence, key_alone
from charfmt._strict.elements import fast_reader
from charfmt.models import Vocabulary
from charfmt.tags import CHAT_TYPES, TagSpec, TagTable

# --- tags -------------------------------------------------------------------------------

INLINE_MARKUP: Final[frozenset[str]] = frozenset(
    {
        "a", "abbr", "b", "bdi", "bdo", "big", "br", "cite", "code", "del", "dfn", "em", "font", "i", "ins",
        "kbd", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u",
        "var", "wbr",
    }
)  # fmt: skip
"""HTML's inline (phrasing) elements: markup models put inside text. Removed, their text kept."""

VOID_ELEMENTS: Final[frozenset[str]] = frozenset(
    {"area", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track"}
)  # fmt: skip
"""HTML's void elements, which hold no text: removed wherever they stand, never a segment wrapping what follows."""

BLOCK_MARKUP: Final[frozenset[str]] = frozenset(
    {
        "h1", "h2", "h3", "h4", "h5", "h6", "p", "div", "section", "article", "header", "footer", "aside", "nav",
        "main", "blockquote", "pre", "ul", "ol", "li", "dl", "dt", "dd", "table", "thead", "tbody", "tr", "td", "th",
        "center", "figure", "figcaption",
    }
)  # fmt: skip
"""HTML's block elements (a heading, a paragraph, a list): layout, not an element of the format, wherever they
stand. Removed, their text read as the text around them (``<h2>La Garza</h2>`` is no segment ``h2``)."""

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


@dataclass(frozen=True, slots=True)
class Tag:
    """What a tag as written means."""

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


def _resolve(m: re.Match[str], vocabulary: Vocabulary | None, tags: TagTable) -> Tag | None:
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
        return Tag(True, None, None, None, False, False, False, True) if closing and not attrs_text else None
    prefix, colon, value = name.partition(":")
    if colon and value and not attrs_text and (named := tags.synonyms.get(prefix.lower())) is not None:
        # <act:nod>, <emo:joy>: a tag and its value in one, as a bracket tag writes them ([act:nod])
        return Tag(closing, named, value, None, True, False, False, True)
    lower = name.lower()
    base, _, sub = lower.partition(".")
    key = sub or attrs.get("type") or attrs.get("name") or attrs.get("value") or None
    if key is not None and "&" in key:
        key = decode_entities(key)  # an attribute value, read as XML reads it
    intensity = _intensity(attrs.get("intensity") or attrs.get("level"))
    canon = tags.synonyms.get(base)
    exact = name in tags and not attrs_text and not m.group("lead") and m.group(0)[0] == "<"
    emotion = tags.emotion.name
    if key is not None and not sub and key.upper() in CHAT_TYPES and attrs.get("type") == key and canon != emotion:
        key = None  # '<message type="C">': the request form's <chat type="C"> mangled, no value of the element
    if canon is not None:
        wraps = canon == emotion and key is not None
        return Tag(closing, canon, key, intensity, self_closing, wraps, exact, True)
    if vocabulary is not None and vocabulary.resolve(name) is not None and not sub:
        return Tag(closing, emotion, vocabulary.resolve(name), intensity, self_closing, True, False, True)
    if m.group("lead") or not re.fullmatch(r"[A-Za-z_][\w\-]*", name):
        return None
    return Tag(closing, lower, None, intensity, self_closing, False, False, False)


def _resolve_once(m: re.Match[str], reading: Reading) -> Tag | None:
    """``_resolve``, once for each way a tag is written in one reading (``Reading.tags_read``): the meaning of a
    ``_TAG`` match is a function of its text (the pattern looks at nothing around it), the tag table and the
    vocabulary."""
    written = m.group()
    known = reading.tags_read
    if written not in known:
        known[written] = _resolve(m, reading.vocabulary, reading.tags)
    return known[written]


_CUT_TAG: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?[\w.\-:]*+$")
_LITERAL_BREAK: Final = re.compile(r"(?<=[.!?。！？…\"”)\]])\\n|\\n(?=[A-Z\s]|\Z)")
"""A literal ``\\n`` inside text that stands for a line break: after a sentence, or before one."""
_LITERAL_NEWLINES: Final = frozenset({"\\n", "\\\\n", "\\r\\n", "\\n\\n"})


def _breaks_lines(piece: Piece) -> bool:
    """Whether ``piece`` holds a literal ``\\n`` that may stand for a line break: not an element of that alone (no
    sentence for it to break: kept as written), though between elements (a message resumed) it is the JSON's break."""
    return "\\n" in piece.text and (piece.implicit or bool(piece.text.replace("\\n", "").strip()))


def read_elements(
    body: str, reading: Reading, *, cut_off: bool = False, truncated: bool = False, in_json: bool = False
) -> Result:
    """Read a ``C`` body leniently into pieces, with every repair noted.

    ``cut_off``: the body ends where the input was cut; a tag begun at its very end
    (``<emo>joy</em``) is markup cut in half, dropped rather than kept as text.
    ``truncated``: it certainly was (a JSON string never closed): the element open at its
    end was cut, not left open, and keeps all its lines.
    ``reading.tags``: the tag table; a tag's role, not its name, says how it is read.
    ``in_json``: the body is a JSON string's text (its escapes decoded already: a ``\\"`` left is text).
    """
    out = Result()
    tags = reading.tags
    written = body
    body, view = _prepare(body, out, tags, cut_off=cut_off)
    if not in_json and "{" in view and "<" in view:
        body, view = _without_json_markup(body, out), _without_json_markup(view, None)
    elements = _Elements(out, reading, body, cut_off=cut_off)
    elements.written = written
    elements.truncated = truncated
    elements.in_json = in_json
    pos = 0
    for entry in reading.table.chain("body"):  # what may stand before the elements (front matter)
        if entry.detect is not None and entry.detect(Sample(view[pos:]), tags):
            out.dialect(entry.name)
            pos += reader(entry, "body")(Span(view[pos:], pos, out, reading))
    holes: list[tuple[int, int, str]] = []  # inline markup in the text since pos: (start, end, replacement)
    removed: set[str] = set()  # inline markup names removed so far (their closers go too)
    skip = 0  # the end of markup holding code: the tags inside it are its own
    for m in _TAG.finditer(view, pos):
        if m.start() < skip:
            continue
        tag = _resolve_once(m, reading)
        if tag is None:
            continue
        if not tag.known and not tag.closing and (skip := _code_end(view, m)) > m.start():
            # '<event onkeyup={() => {…}} style={…}>': markup with code in its attributes, through its own '>'
            out.note("CF715", f"markup with code in its attributes removed: {view[m.start() : skip][:40]!r}",
                     m.start(), skip)  # fmt: skip
            holes.append((m.start(), skip, ""))
            continue
        # Inside an element or in running prose, HTML's inline markup is formatting; standing
        # between elements it is an unknown element, kept under its own name (``dumps`` writes
        # a segment ``a`` as <a>…</a>).
        closes_open = tag.closing and elements.open is not None and elements.open.tag == tag.canon
        inline = elements.open is not None or tag.canon in removed or bool(view[pos : m.start()].strip())
        void = tag.canon in VOID_ELEMENTS
        block = tag.canon in BLOCK_MARKUP
        if (
            tag.canon is not None
            and not tag.known
            and (void or block or (tag.canon in INLINE_MARKUP and inline and not closes_open))
        ):
            removed.add(tag.canon)
            keep = "\n" if tag.canon in LINE_BREAKS else ""
            what = "a line break" if keep else "it holds no text" if void else "its text kept"
            out.note(
                "CF715",
                f"{'an HTML element' if void or block else 'inline markup'} {m.group()} removed: {what}",
                m.start(),
                m.end(),
            )
            holes.append((m.start(), m.end(), keep))
            continue
        elements.text(pos, m.start(), view, holes)
        holes = []
        elements.tag(tag, m)
        pos = m.end()
    elements.text(pos, len(view), view, holes)
    elements.finish(len(body))
    return out


_JSON_MARKUP_LINE: Final = re.compile(r"^[ \t]*+\{[^\n<]*[\"'][^\n]*<[^\n]*\}[ \t]*+$", re.M)
"""A line written as a JSON object (``{"`` … ``}``) with tags in it, among text (no reply was found in it)."""


def _without_json_markup(text: str, out: Result | None) -> str:
    """``text`` with each ``_JSON_MARKUP_LINE`` whose elements hold no words blanked (offsets stay put), each dropped
    (``CF627``, noted when ``out`` is given): broken JSON markup (``{"chat type="C" "&lt;/msg…"></msg…><act>" }``,
    the tenth set's #7), no words of anyone's, as a JSON object line without tags is (``prose.JSON_LINE``). A line
    whose tags wrap words (``{"body": "<msg>Hello.</msg>"}``) is read as before."""
    found = [m for m in _JSON_MARKUP_LINE.finditer(text) if not _wraps_words(m.group())]
    for m in found:
        if out is not None:
            lead = len(m.group()) - len(m.group().lstrip())
            message = f"a JSON object of markup among the text dropped: {m.group().strip()[:40]!r}"
            out.note("CF627", message, m.start() + lead, m.end())
        text = text[: m.start()] + " " * len(m.group()) + text[m.end() :]
    return text


def _wraps_words(line: str) -> bool:
    """Whether a tag opened on ``line`` is followed by a word before the next tag (or the line's end)."""
    tags = list(_TAG.finditer(line))
    for k, m in enumerate(tags):
        if m.group("slash") or not m.group("name"):
            continue
        after = line[m.end() : tags[k + 1].start() if k + 1 < len(tags) else len(line)]
        if any(c.isalnum() for c in after):
            return True
    return False


_CODE_ATTRIBUTE: Final = re.compile(r"=[ \t]*+\{|=>")
"""An attribute whose value is code (``onkeyup={() => …}``, ``style={…}``): never a tag the format writes."""


def _code_end(view: str, m: re.Match[str]) -> int:
    """Where markup that opens at ``m`` with code in its attributes ends: the ``>`` after its braces close, on its
    line (its line's end where they never do); ``m.start()`` where its attributes hold no code (found by the
    fourth set's #7: ``onkeyup={() => { … }}``, whose ``=>`` ends the tag as the pattern reads it)."""
    if _CODE_ATTRIBUTE.search(view, m.start(), m.end()) is None:
        return m.start()
    line_end = view.find("\n", m.start())
    line_end = len(view) if line_end < 0 else line_end
    depth, seen = 0, False
    for i in range(m.start(), line_end):
        ch = view[i]
        if ch == "{":
            depth, seen = depth + 1, True
        elif ch == "}":
            depth = max(0, depth - 1)
        elif ch == ">" and depth == 0 and seen and view[i - 1] != "=":
            return i + 1
    return line_end


def _prepare(body: str, out: Result, tags: TagTable, *, cut_off: bool) -> tuple[str, str]:
    """The body with what the input ends inside cut and scaffolding blanked, and the view its elements are read
    in (separators escaped twice read as newlines), each repair noted."""
    if cut_off and (at := cut_scaffolding(body)) is not None:
        out.note("CF702", f"a chat-template marker cut off at the end is dropped: {body[at:]!r}", at, len(body))
        body = body[:at]
    if cut_off and (m := _CUT_TAG.search(body)) is not None:
        out.note("CF702", f"a tag cut off at the end is dropped: {m.group()!r}", m.start(), len(body))
        body = body[: m.start()]
    if cut_off and (m := CUT_OBJECT.search(body, 0, len(body.rstrip()))) is not None:
        out.note("CF720", f"markup cut off at the end is dropped: {m.group()!r}", m.start(), len(body))
        body = body[: m.start()]
    if cut_off:
        body = drop_cut_entity(body, out)
    if "<" in body or "[" in body or "＜" in body:
        marks = scaffolding(body, turns=False)
        if marks and _well_formed(body, tags):
            marks = []  # a valid body is read as the strict parser reads it: its text is the model's
        for a, b, message in marks:
            out.note("CF622", message, a, b)
        body = blank(body, marks)
    if not (_ESCAPED_NEWLINE.search(body) and "\n" not in body):
        return body, body
    # "<emo>joy</emo>\\n<msg>…" decoded once too few: the separators are literal "\n".
    parts, pos = [], 0
    for m in _ESCAPED_NEWLINE.finditer(body):
        out.note("CF711", "a double-escaped newline (\\\\n) read as a newline", m.start(1), m.end(1))
        parts += [body[pos : m.start(1)], "\n" + " " * (m.end(1) - m.start(1) - 1)]
        pos = m.end(1)
    return body, "".join(parts) + body[pos:]


_WRITTEN_NAME: Final = re.compile(r"[a-z_][a-z0-9_\-]*+")
"""A tag name a segment may hold outside the table (``models.Segment``: lower case), as ``dumps`` writes it."""
_WRITTEN_INTENSITY: Final = re.compile(r' intensity="[^"<>]*+"')
"""The attribute ``dumps`` writes for an emotion's intensity (``writer``)."""


def _well_formed(body: str, tags: TagTable) -> bool:
    """Whether ``body`` is a valid body but for unknown tags and intensities, as ``dumps`` writes them: each read as
    a known tag of the table (found by a random run of the writer's round trip: ``<act>[A_0]</act>\n<_></_>``, a
    bracketed word in a well-formed body, was blanked as a chat template's placeholder)."""
    read = fast_reader(tags)
    if read("C", body) is not None:
        return True

    def as_known(m: re.Match[str]) -> str:
        slash, name, attrs = "/" if m.group("slash") else "", m.group("name"), m.group("attrs")
        if m.group() != f"<{slash}{name}{attrs}>" or (attrs and (slash or not _WRITTEN_INTENSITY.fullmatch(attrs))):
            return m.group()  # written otherwise than dumps writes: the body stays invalid
        if tags.get(name) is None and _WRITTEN_NAME.fullmatch(name) is not None:
            name = tags.speech.name
        return f"<{slash}{name}>"

    return read("C", _TAG.sub(as_known, body)) is not None


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


_CONTINUES: Final = frozenset(",;:)]}、，。」』）…")
"""Characters a line that goes on with the line before it may begin with (besides a lower-case letter)."""


def _line_end(text: str) -> int | None:
    """Where the first line of an element left open ends, when more lines follow that can start an element of
    their own; ``None`` where it is one line, or the next line goes on with it (lower case, a comma)."""
    lead = len(text) - len(text.lstrip())
    nl = text.find("\n", lead)
    if nl < 0:
        return None
    rest = text[nl:].lstrip()
    if not rest or rest[0].islower() or rest[0] in _CONTINUES:
        return None
    return nl


_SENTENCE_END: Final = re.compile(r"(?:[.!?…](?=[\"'”’)）」』】]*+\s)|[。！？])[\"'”’)）」』】]*+\s*+(?=\S)")
"""The end of a sentence with another after it (``nods. Welcome``, ``うなずく。ようこそ``)."""


def _sentence_end(text: str) -> int | None:
    """Where the first sentence of ``text`` ends when another follows it (its spaces go to the next), else ``None``."""
    m = _SENTENCE_END.search(text.strip())
    if m is None:
        return None
    lead = len(text) - len(text.lstrip())
    return lead + m.end() - (len(m.group()) - len(m.group().rstrip()))


_TAG_AS_TEXT: Final = re.compile(r"\s*+(?:<[ \t]*+/?[ \t]*+[A-Za-z_][\w.-]*+[^\s\w<>]?[ \t]*+/?>\s*+)+")
"""Text that is nothing but tags once its entities are decoded (``&lt;/answer&gt;``, ``<thought?>``): a name and
at most one mark, no space in it (``<sighs deeply>`` on its own line is an action)."""


_TAG_FRAGMENT: Final = re.compile(r"\s*+(<[ \t]*+/?[A-Za-z_][\w.-]*+(?:[\"':;](?:[\w.-]*+[\]>]|[\"'>]?)|[^\s\w<>]>))")
"""A tag's opener mangled at the start of text between elements: a name, then a mark where its ``>`` is due
(``<msg:``, ``<ing">``, ``<thought:wenda13]``); never a tag read (those have their ``>``), never words."""


_CLOSER_AT: Final = re.compile(r"<[ \t]*+/[ \t]*+(?P<name>[A-Za-z_][\w-]*+)[ \t]*+>")
"""A plain closing tag where text between elements ends."""
_STRAY_BEFORE_GT: Final = re.compile(r"<[ \t]*+(?P<name>[A-Za-z_][\w-]*+)[ \t]*+[^\w\s<>/=]{1,2}[ \t]*+>")
"""A whole opener with a stray mark or two before its ``>`` (``<act">``): the element its name names, opened."""


_ATTRIBUTES: Final = r"""(?:[ \t]++[\w:-]++[ \t]*+=[ \t]*+(?:"[^"\n<>]*+"?|'[^'\n<>]*+'?|[^\s<>"']++))"""
_MARKUP_LEFT: Final = re.compile(
    rf"<[ \t]*+/?[ \t]*+[A-Za-z_][\w.-]*+:[A-Za-z_][A-Za-z0-9_.-]*+(?=[\s/>]){_ATTRIBUTES}*+[ \t]*+/?>?"
    rf"|<[ \t]*+[A-Za-z_][\w.-]*+{_ATTRIBUTES}++[ \t]*+(?=<|\n|\Z)"
    r"""|<[ \t]*+[A-Za-z_][\w.-]*+[ \t]*+=[ \t]*+(?:"[^"\n<>]*+"?|'[^'\n<>]*+'?)"""
    rf"{_ATTRIBUTES}*+[ \t]*+/?>?"
)
"""Markup the tag reader cannot read: a namespaced tag (``<erp:message id="957">``, ``</erp:message>``, its ``>``
lost or not), a tag with attributes that lost its ``>`` (``<note id="104" msg="…"`` then the next tag), a name given a
value (``<event="add_to_post">``)."""
_OPENER_CUT: Final = re.compile(
    r"\s*+(<[ \t]*+(?P<name>[A-Za-z_][\w-]*+))(?=[ \t]++[^\s=<>][^<>\n]*+(?:\n|\Z)|[ \t]*+(?:\n|\Z))"
)
"""A tag's opener that lost its ``>`` at the start of text between elements: its name, then words to its line's
end with no ``>`` or ``<`` (``<thought "…"``), or nothing (``<thought``)."""
_QUOTED_LINE: Final = re.compile(r"""[ \t]*+["“]([^"“”\n]*+)["”]?[ \t]*+(?=\n|\Z)""")


_REQUEST_FORM: Final = re.compile(FORM_ELEMENT)
"""The request form's elements (``<user_chats>``, ``<chat type="C">``): markup when echoed inside a body."""


def _markup_left(out: Result, chunk: str, offset: int, first: re.Match[str]) -> str:
    """``chunk`` with markup the tag reader could not read blanked (``CF638``): a namespaced tag
    (``<erp:message id="957">``, its closer) or a tag with attributes that lost its ``>``
    (``<erp:message id="104" msg="…"``): never speech, never an action (found by the fifth set's #37)."""
    found = [first, *_MARKUP_LEFT.finditer(chunk, first.end())]
    for m in found:
        at, to = offset + m.start(), offset + m.end()
        out.note("CF638", f"{m.group()[:40]!r}: markup the reader cannot read, dropped", at, to)
    out.repairs = [
        r
        for r in out.repairs
        if not (r.code == "CF707" and any(offset + m.start() <= r.start < offset + m.end() for m in found))
    ]
    for m in found:
        chunk = chunk[: m.start()] + " " * (m.end() - m.start()) + chunk[m.end() :]
    return chunk


class _Elements:
    """The element state machine of ``read_elements``."""

    def __init__(self, out: Result, reading: Reading, raw: str, *, cut_off: bool = False) -> None:
        self.out = out
        self.cut_off = cut_off  # the body ends where the input was cut
        self.reading = reading
        self.raw = raw
        self.tags = tags = reading.tags
        self.emotion = tags.emotion.name
        self.speech = tags.speech.name
        # What an emotion written inside them splits in two (their text continues after it).
        self.splittable = frozenset(s.name for s in tags if s.row.prose)
        self.open: Piece | None = None
        self.open_tag: Tag | None = None
        self.resume: str | None = None  # a message split by a nested emotion continues after it
        self.truncated = False  # the body certainly ends where the input was cut (see read_elements)
        self.in_json = False  # the body is a JSON string's decoded text (see read_elements)
        self.last_end = 0  # where the last element ended, to see missing newlines
        self.written = raw  # the body before its scaffolding was blanked (see read_elements)

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
        opener = _OPENER_CUT.match(chunk)
        if opener is not None and (canon := self.tags.synonyms.get(opener["name"].lower())) is not None:
            _opened_without_gt(self, chunk, offset, end, opener, canon=canon)
            return
        if (left := _MARKUP_LEFT.search(chunk)) is not None:
            chunk = _markup_left(self.out, chunk, offset, left)
            if not chunk.strip():
                return
        if _TAG_AS_TEXT.fullmatch(decode_entities(chunk)):
            # (&lt;/answer&gt;, <thought?&gt;: a tag written with entities or mangled, between elements: markup;
            # found by the third set's corpus test, third-smollm2-default-harbour_rain-8 and seoyeon-3)
            lead = len(chunk) - len(chunk.lstrip())
            message = f"{chunk.strip()[:40]!r}, a tag written as text, between elements is markup: dropped"
            out.repairs = [r for r in out.repairs if not (r.code == "CF707" and offset <= r.start < end)]
            out.note("CF651", message, offset + lead, offset + len(chunk.rstrip()))
            return
        fragment = _TAG_FRAGMENT.match(chunk)
        if fragment is not None and _opened_with_stray(self, chunk, offset, end, fragment, out=out):
            return
        if fragment is not None:
            # ('<ing">Ich kann…', '<msg:&quill is…': a tag's opener mangled, its '>' lost or doubled; the fourth set's
            # #27 and #47): markup, dropped; the text after it is read as text between elements is
            at, to = offset + fragment.start(1), offset + fragment.end(1)
            out.note("CF651", f"{fragment.group(1)!r}, a tag written as text, between elements is markup: dropped",
                     at, to)  # fmt: skip
            chunk = chunk[: fragment.start(1)] + " " * len(fragment.group(1)) + chunk[fragment.end(1) :]
            if not chunk.strip():
                return
        if _opener_lost(self, chunk, offset, end, view, out=out):
            return
        span = Span(chunk, offset, out, self.reading)
        entry = self.reading.table.first("stray", Sample(chunk), self.tags)
        if entry is None:
            read_prose(span)
            return
        out.dialect(entry.name)
        reader(entry, "stray")(span)

    def tag(self, tag: Tag, m: re.Match[str]) -> None:
        start, end = m.start(), m.end()
        if not tag.known and tag.canon is not None and _REQUEST_FORM.fullmatch(tag.canon):
            # <user_chats>, <chat type="C">: the request form echoed inside a body, never a segment.
            self.out.note("CF630", f"the request form's {m.group()} inside a body is markup: dropped", start, end)
            if self.open is not None and not tag.closing:
                self.out.note("CF702", f"<{self.open.tag}> is not closed; the next tag closes it", start, start)
                self._end_open()
            self.last_end = end
            return
        if not tag.exact and tag.canon is not None:
            self._explain(tag, m)
        if tag.closing:
            self._close(tag, start, end)
            return
        if self.open is not None:
            nested = self.open.tag == self.speech or _line_end(self.open.text) is None  # (else: left open lines ago)
            if tag.canon == self.emotion and self.open.tag in self.splittable and not tag.wraps_speech and nested:
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
                if self.open.text.strip():
                    self._end_open()
                else:  # '<message type="C">\n<msg>…': nothing but layout before the next tag, no segment
                    self.open = self.open_tag = None
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

    def _end_open(self, closer: str | None = None, *, cut: bool = False) -> None:
        """End the element left open: at its first line where more lines follow that can stand alone (``CF721``).

        One line per element: ``<act>waves\nHello there.`` is an action and a line of its own,
        not an action that swallows the speech after it. The lines after the first are read as
        text between elements (``closer``: the tag of a mismatched closing tag that ends them,
        whose element they are). A next line that cannot start an element (it goes on in
        lower case, or with a comma) continues the element; so does speech, whose next lines
        would be speech anyway.
        """
        piece = self.open
        assert piece is not None
        # Speech left open stays whole: its next lines would be read as speech all the same.
        split = None if piece.tag == self.speech and closer in (None, self.speech) else _line_end(piece.text)
        by_sentence = False
        if split is None and closer == self.speech and piece.tag != self.speech:
            # (an action closed by </msg>: its first sentence the action, the sentences after it what the closer
            # says, found by the third set's #42)
            split = _sentence_end(piece.text)
            by_sentence = True
            if split is not None and LETTER.search(piece.text, split) is None:
                split = None  # ('…使用字母异体。123456.': no word after it, nothing said; the fourth set's #2)
        if split is None:
            self._emit(cut=cut)
            return
        rest, at = piece.text[split:], min(piece.start + split, piece.end)
        piece.text, piece.end = piece.text[:split], at
        lead = len(rest) - len(rest.lstrip())
        message = (
            f"<{piece.tag}> closed by </{closer}> ends at its first sentence: the sentences after it are <{closer}>"
            if by_sentence
            else f"<{piece.tag}> left open ends at its line: the next line is read on its own"
        )
        self.out.note("CF721", message, at, at)
        self._emit()
        if closer is not None:
            self.open = Piece(closer, rest[lead:], at + lead, at + len(rest))
            self._emit(cut=cut)
        else:
            self._text(rest, at, at + len(rest), self.raw, self.out)

    def _explain(self, tag: Tag, m: re.Match[str]) -> None:
        """Say how a tag not written as the format writes it was read: as the ``tag`` chain's entry it is written
        in explains it, else as what its name is a synonym of."""
        sample, after = Sample(m.group(0)), None
        while (form := self.reading.table.first("tag", sample, self.tags, after=after)) is not None:
            if reader(form, "tag")(tag, m, self.out):
                self.out.dialect(form.name)
                return
            after = form.name
        name = m.group("name")
        if tag.known and tag.canon == self.emotion and tag.wraps_speech:
            self.out.note(
                "CF710", f"<{name}> names an emotion: read as an emotion and the speech it wraps", m.start(), m.end()
            )
        elif tag.canon is not None and tag.known:
            self.out.note(
                "CF704", f"{m.group(0)} read as {'</' if tag.closing else '<'}{tag.canon}>", m.start(), m.end()
            )

    def _close(self, tag: Tag, start: int, end: int) -> None:
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
        if not matches and self._key_in_speech(tag):
            self._close_as_emotion(start, end)
            return
        if not matches:
            self.out.note("CF703", f"</{tag.canon}> closes <{self.open.tag}>", start, end)
        elif tag.canon is None:
            self.out.note("CF703", f"</> closes <{self.open.tag}>", start, end)
        self.open.end = start
        if matches:
            self._emit()
        else:  # the element was left open: the lines after its first are the closer's, or text
            self._end_open(tag.canon if tag.known and tag.canon not in (None, self.emotion) else None)
        self.last_end = end
        if self.resume is not None and self.open is None and tag.canon == self.emotion:
            self.open = Piece(self.resume, "", end, end, implicit=True)
            self.open_tag = None
            self.resume = None

    def _key_in_speech(self, tag: Tag) -> bool:
        """Whether the open element is speech holding nothing but a vocabulary key and ``tag`` closes the emotion
        (``<msg>感伤</emo>``): the emotion written in the wrong opener, never words to say (the fourth set's #2)."""
        return (
            tag.canon == self.emotion
            and self.open is not None
            and self.open.tag == self.speech
            and self.open_tag is not None
            and key_alone(self.open.text, self.reading.vocabulary) is not None
        )

    def _close_as_emotion(self, start: int, end: int) -> None:
        """Close the open speech as the emotion its closer names (see ``_key_in_speech``), noted (``CF703``)."""
        assert self.open is not None
        message = f"</{self.emotion}> closes <{self.open.tag}> holding an emotion key: read as <{self.emotion}>"
        self.out.note("CF703", message, start, end)
        self.open.tag, self.open.end = self.emotion, start
        self._emit()
        self.last_end = end

    def _emit(self, *, cut: bool = False) -> None:
        """Add the open element as a piece; ``cut``: its text ends where the input was cut."""
        piece, self.open, self.open_tag = self.open, None, None
        if piece is None:
            return
        piece.text = decode_entities(piece.text)
        if piece.implicit:
            piece.text = piece.text.lstrip("\n")  # a message resumed after an emotion on the line before
        if (debris := DEBRIS_AFTER.search(piece.text)) is not None and piece.text[: debris.start()].strip():
            self.out.note(
                "CF627",
                f"JSON punctuation at the end of <{piece.tag}> dropped: {debris.group()!r}",
                piece.start,
                piece.end,
            )
            piece.text = piece.text[: debris.start()]
        if _breaks_lines(piece) and (spec := self.tags.get(piece.tag)) is not None and spec.content != "key":
            escaped = _LITERAL_BREAK.sub("\n", piece.text)
            if escaped != piece.text:  # "forge for us?\\nThis is...": a line break written as JSON writes it
                self.out.note("CF711", "a literal \\n inside an element read as a newline", piece.start, piece.end)
                piece.text = escaped
        if (
            not self.in_json
            and '\\"' in piece.text
            and (spec := self.tags.get(piece.tag)) is not None
            and spec.content != "key"
        ):
            # 'lost.\\"': a quote escaped as JSON escapes it, in elements the reply wrote without JSON around them
            self.out.note("CF711", 'a literal \\" inside an element read as a quote', piece.start, piece.end)
            piece.text = piece.text.replace('\\"', '"')
        if piece.text.isspace() and self.written[piece.start : piece.end] != self.raw[piece.start : piece.end]:
            piece.text = ""  # the spaces of scaffolding blanked, and nothing else: no text of the model's
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
            noun = spec.row.value_noun
            what = f"a <{spec.name}> value" if noun is None else f"{_article(noun)} {noun}"
            key = piece.text.strip()
            if key != piece.text:
                self.out.note("CF704", f"spaces around {what} removed", piece.start, piece.end)
            if not key:
                self.out.note(
                    "CF702",
                    f"an empty {f'<{spec.name}>' if noun is None else noun} is dropped",
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
        if is_sentence(key):  # '<sfx>a wave crashes through the window.</sfx>': narration, never a cue
            tags = self.tags
            piece.tag = tags.action.name if tags.action is not None else self.speech
            message = f"<{spec.name}> value {key!r} is a sentence, not one of {allowed}: read as <{piece.tag}>"
            self.out.note("CF722", message, piece.start, piece.end)
            return key
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
            if (
                not self.open.text.strip()
                and self.open.tag != self.speech
                and self.open_tag is not None
                and not (self.truncated or self.cut_off)  # (cut inside it: what arrived is kept, as a stream shows it)
            ):
                # '…<thought>\n' at the end: an element opened and never written, no segment (the fourth set's #12)
                self.out.note("CF702", f"<{self.open.tag}> left open holds nothing: dropped", end, end)
                self.open, self.open_tag = None, None
                return
            self.open.end = end
            if self.truncated:
                self._emit(cut=True)  # cut, not left open: its lines are its own
            else:
                self._end_open(cut=self.cut_off)


# --- the tag chain's readers: how a tag written in a dialect is explained ---------------------


def _opened_without_gt(
    elements: _Elements, chunk: str, offset: int, end: int, opener: re.Match[str], *, canon: str
) -> None:
    """A known tag's opener that lost its ``>`` at the start of text between elements (``<thought "…"``,
    ``<thought`` at its line's end): the element opened, its text what follows on the line (quotes around it
    dropped), never the opener spoken as words (found by the fifth set's corpus test, sayo-4)."""
    at, to = offset + opener.start(1), offset + opener.end(1)
    elements.out.note("CF638", f"{opener.group(1)!r}, an opener without its '>', opens <{canon}>", at, to)
    elements.out.repairs = [r for r in elements.out.repairs if not (r.code == "CF707" and at <= r.start < to)]
    rest = chunk[opener.end() :]
    lead = len(rest) - len(rest.lstrip(" \t"))
    if (quoted := _QUOTED_LINE.match(rest)) is not None:
        rest, lead = quoted.group(1) + rest[quoted.end() :], quoted.start(1)
    elements.open = Piece(canon, "", to, to)
    elements.open_tag = None
    rest = rest.lstrip(" \t") if quoted is None else rest
    elements._text(rest, offset + opener.end() + lead, end, elements.raw, elements.out)
    if not elements.open.text.strip():  # (an opener alone: no element, markup only)
        elements.open = None


def _opener_lost(elements: _Elements, chunk: str, offset: int, end: int, view: str, *, out: Result) -> bool:
    """A line of text glued to a closer of a known element other than speech, nothing open (``</act>bardağa çay
    doldurur</act>``): the element's text, its opener lost (``CF703``), never speech with the closer dropped (the
    eleventh set's #40: the character's listed action spoken). Whether it was read so (only where the chunk's
    offsets are the element's: no inline markup was cut out of it)."""
    closer = _CLOSER_AT.match(view, end) if out is elements.out else None
    line = chunk.strip()
    if closer is None or not line or "\n" in line or "\n" in chunk[len(chunk.rstrip()) :]:
        return False
    canon = elements.tags.synonyms.get(closer["name"].lower())
    spec = elements.tags.get(canon) if canon is not None else None
    if spec is None or spec.name == elements.speech or not _its_text(elements, spec, line):
        return False
    lead = len(chunk) - len(chunk.lstrip())
    at = offset + lead
    elements.out.note("CF703", f"</{canon}> closes the line before it, no element open: read as <{canon}>", at,
                  at + len(line))  # fmt: skip
    elements.open = Piece(spec.name, line, at, at + len(line))
    elements.open_tag = None
    return True


def _its_text(elements: _Elements, spec: TagSpec, line: str) -> bool:
    """Whether ``line`` can be the text of ``spec``'s element whose opener was lost: any line for prose (an
    action, a thought), only one of its values for an element that has them (a cue: ``honk</sfx>``) and only a
    vocabulary key for the emotion, never a sentence."""
    if spec.name in elements.splittable:
        return True
    if spec.name == elements.emotion:
        return key_alone(line, elements.reading.vocabulary) is not None
    return line.casefold() in {value.casefold() for value in spec.values or ()}


def _opened_with_stray(
    elements: _Elements, chunk: str, offset: int, end: int, fragment: re.Match[str], *, out: Result
) -> bool:
    """A known tag's opener with a stray mark before its ``>`` (``<act">``, ``<msg'>``) and text after it: the
    element it names opened (``CF638``), its text what follows, never markup dropped and its text spoken (the
    eleventh set's #42: ``<act">bardağa çay doldurur</act>``, the character's listed action). Whether it was."""
    stray = _STRAY_BEFORE_GT.fullmatch(fragment.group(1))
    rest = chunk[fragment.end() :]
    if out is not elements.out or stray is None or not rest.strip():
        return False
    if (canon := elements.tags.synonyms.get(stray["name"].lower())) is None:
        return False
    at, to = offset + fragment.start(1), offset + fragment.end(1)
    elements.out.note("CF638", f"{fragment.group(1)!r}, an opener with a stray mark before its '>', opens <{canon}>",
                  at, to)  # fmt: skip
    elements.out.repairs = [r for r in elements.out.repairs if not (r.code == "CF707" and at <= r.start < to)]
    lead = len(rest) - len(rest.lstrip(" \t"))
    elements.open = Piece(canon, "", to, to)
    elements.open_tag = None
    elements._text(rest[lead:], to + lead, end, elements.raw, elements.out)
    return True


def read_dot_notation(tag: Tag, m: re.Match[str], out: Result) -> bool:
    """``<emotion.surprise>``: an emotion and the speech it wraps (``<msg.x>`` is none: ``False``)."""
    if not (tag.wraps_speech and tag.key is not None):
        return False
    if not _closing(tag, m, out):
        message = f"dot notation <{m.group('name')}> read as an emotion and the speech it wraps"
        out.note("CF705", message, m.start(), m.end())
    return True


def read_attribute_form(tag: Tag, m: re.Match[str], out: Result) -> bool:
    """``<emotion type="joy">``: an emotion and the speech it wraps, a tag's value, or attributes dropped."""
    if _closing(tag, m, out):
        return True
    if tag.wraps_speech:
        message = f"attribute form {m.group(0)} read as an emotion and the speech it wraps"
    elif tag.key is not None:
        return True  # the value is in the attribute, or in the text: said when the element ends (_emit)
    else:
        message = f"attribute form {m.group(0)} read as <{tag.canon}>: its attributes dropped"
    out.note("CF705", message, m.start(), m.end())
    return True


def _closing(tag: Tag, m: re.Match[str], out: Result) -> bool:
    """A closer written in a dialect (``</emotion.joy>``): its opening tag's CF705 says what the element is."""
    if tag.closing:
        out.note("CF704", f"{m.group(0)} read as </{tag.canon}>", m.start(), m.end())
    return tag.closing


def _article(noun: str) -> str:
    """``a`` or ``an`` before ``noun`` (``an emotion``)."""
    return "an" if noun[:1] in ("a", "e", "i", "o", "u") else "a"
