"""Why a body is invalid: the error of Lark's parser, run on a body the driver rejected, as a specific ``CF2xx``.

Offsets are into the body string as decoded from JSON; the caller maps them to the raw input.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from charfmt._grammar import lexical
from charfmt._grammar.lexical import NOT_KEY
from charfmt.tags import ROLE_TABLE, TAGGED_TYPES, TagTable

if TYPE_CHECKING:  # Lark loads only where a body needs explaining
    from lark.exceptions import UnexpectedInput


class BodyError(Exception):
    """Why a body failed, with offsets into the decoded body string.

    (A plain class: a dataclass costs half a millisecond to define at every start, and mypyc
    compiles no slotted dataclass of an exception.)
    """

    def __init__(self, code: str, message: str, start: int, end: int) -> None:
        super().__init__(message)
        self.code: Final = code
        """The diagnostic code (``CF2xx``)."""
        self.message: Final = message
        self.start: Final = start
        """Offset of the first character in the decoded body string."""
        self.end: Final = end
        """Offset past the last character (``start`` for a point)."""

    def __repr__(self) -> str:
        return f"BodyError(code={self.code!r}, message={self.message!r}, start={self.start}, end={self.end})"


_NOT_KEY_CHAR: Final = f"[{NOT_KEY}]"
"""A character no key holds (compiled on first use: the error path only)."""
_TAG_AT: Final = r"<(/?)\s*([^\s<>/]*)([^<>]*?)(/?)>"
"""A tag as written, well or badly. (This module's patterns are compiled where used, by ``re``'s cache:
the error path only, and every start would pay for them.)"""


def _closing_for(expected: set[str]) -> str | None:
    for name in expected:
        if name.endswith("_CLOSE"):
            return name[: -len("_CLOSE")].lower()
    return None


def _describe(token_type: str, tags: TagTable) -> str:
    if token_type.endswith(("_OPEN", "_CLOSE")):
        stem, _, side = token_type.rpartition("_")
        tag = tags.get(stem.lower())
        if tag:
            return tag.open if side == "OPEN" else tag.close
    return {"_NL": "a newline", "$END": "the end of the body", "TEXT": "text", "KEY": "a key"}.get(
        token_type, token_type
    )


def _expected(expected: set[str], tags: TagTable) -> str:
    names = sorted(_describe(e, tags) for e in expected if not e.startswith(("_C_MARK", "_TEXT_MARK")))
    return ", ".join(names) if names else "nothing more"


def diagnose(e: UnexpectedInput, kind: str, body: str, tags: TagTable) -> BodyError:
    """Turn a Lark error into a :class:`BodyError` with a specific code."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedToken  # noqa: PLC0415 (Lark loads only to explain a rejected body)

    expected = set(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())
    inside = _closing_for(expected)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        pos = len(body) if tok.type == "$END" else (tok.start_pos or 0)
        end = pos + len(tok)
        if tok.type == "$END":
            if inside:
                return BodyError("CF202", f"<{inside}> is not closed before the end of the body", pos, pos)
            if pos == 0:
                what = "a C body holds at least one element" if kind in TAGGED_TYPES else "an I or E body holds text"
                return BodyError("CF210", f"empty body: {what}", 0, 0)
            if body.endswith("\n"):
                return BodyError("CF206", "newline after the last element", pos - 1, pos)
            return BodyError("CF201", f"unexpected end of body; expected {_expected(expected, tags)}", pos, pos)
        if tok.type.endswith("_CLOSE") and inside:
            return BodyError("CF205", f"{tok} closes <{inside}>; expected </{inside}>", pos, end)
        if tok.type.endswith("_OPEN"):
            if inside:
                return BodyError("CF211", f"{tok} inside <{inside}>: elements do not nest", pos, end)
            if "_NL" in expected:
                return BodyError("CF206", f"{tok} must start on a new line (one newline between elements)", pos, end)
        if tok.type == "_NL":
            return BodyError("CF206", "blank line: exactly one newline between elements", pos, end)
        if "KEY" in expected or (inside and _is_key(tags, inside) and tok.type in ("TEXT", "KEY")):
            return _bad_key(body, pos, tags)
        if tok.type in ("TEXT", "KEY") and not inside:
            return _text_outside(body, pos, tags)
        return BodyError(
            "CF201", f"unexpected {_describe(tok.type, tags)}; expected {_expected(expected, tags)}", pos, end
        )
    assert isinstance(e, UnexpectedCharacters)
    pos = e.pos_in_stream or 0
    ch = body[pos]
    in_key = "KEY" in expected or bool(inside and _is_key(tags, inside))
    if in_key and not body.startswith("</", pos):
        return _bad_key(body, pos, tags)
    if ch == "<":
        return _diagnose_angle(body, pos, tags, text_context=bool(inside) or kind not in TAGGED_TYPES)
    if ch == "&":
        m = re.compile(r"&[#\w]*;?").match(body, pos)
        got = m.group() if m else "&"
        return BodyError("CF207", f"{got!r} is not an entity charfmt decodes: write '&' as &amp;", pos, pos + len(got))
    if lexical.NOT_TEXT_CHAR.match(ch):
        return BodyError("CF209", f"character U+{ord(ch):04X} is not allowed in text", pos, pos + 1)
    if "_NL" in expected:
        if ch in "\r\n":
            return BodyError("CF206", "elements are separated by exactly one '\\n'", pos, pos + 1)
        speech = tags.speech
        return BodyError(
            "CF203",
            f"text after an element: put it inside {speech.open}…{speech.close} on its own line",
            pos,
            _line_end(body, pos),
        )
    if kind in TAGGED_TYPES and not inside:
        return _text_outside(body, pos, tags)
    return BodyError("CF201", f"unexpected {ch!r}; expected {_expected(expected, tags)}", pos, pos + 1)


def _is_key(tags: TagTable, name: str) -> bool:
    spec = tags.get(name)
    return spec is not None and spec.content == "key"


_OPENER_BEFORE: Final = r"<([a-z][a-z0-9_]*)>\Z"


def _key_name(tags: TagTable, before: str) -> str:
    """What the key after ``before`` is called in messages: ``the emotion key``, ``the sfx value``."""
    m = re.search(_OPENER_BEFORE, before)
    spec = tags.get(m.group(1)) if m else None
    if spec is None or ROLE_TABLE[spec.role].vocabulary:
        return "the emotion key"
    return f"the {spec.name} value"


def _diagnose_angle(body: str, pos: int, tags: TagTable, *, text_context: bool) -> BodyError:
    """A '<' the lexer could not use: a raw '<' in text, a tag with attributes, or an unknown tag."""
    m = re.compile(_TAG_AT).match(body, pos)
    if m:
        slash, name, attrs, _self_closing = m.groups()
        if name.lower() in tags:
            if attrs.strip():
                return BodyError(
                    "CF212", f"{m.group()}: tags take no attributes; write <{slash}{name.lower()}>", pos, m.end()
                )
            return BodyError(
                "CF204",
                f"{m.group()}: tag names are lower case with no spaces; write <{slash}{name.lower()}>",
                pos,
                m.end(),
            )
    if text_context:
        return BodyError("CF207", "raw '<' in text: write it as &lt;", pos, pos + 1)
    names = ", ".join(t.open for t in tags)
    if m:
        return BodyError("CF204", f"unknown tag {m.group()}; the tags are {names}", pos, m.end())
    return BodyError("CF204", f"'<' does not start a tag; the tags are {names}", pos, pos + 1)


def _line_end(body: str, pos: int) -> int:
    stop = body.find("\n", pos)
    return len(body) if stop == -1 else stop


def _bad_key(body: str, pos: int, tags: TagTable) -> BodyError:
    """CF208 for the key around ``pos``, saying what is wrong with it (not the rule it breaks)."""
    start = body.rfind(">", 0, pos) + 1
    what = _key_name(tags, body[max(0, start - 40) : start])
    stop = body.find("</", pos)
    stop = len(body) if stop < 0 else stop
    key = body[start:stop]
    if not key:
        return BodyError("CF208", f"{what} is empty", start, start)
    if key != key.strip():
        at = start if key[0].isspace() else start + len(key.rstrip())
        return BodyError("CF208", f"{what} {key!r} starts or ends with whitespace", at, at + 1)
    for n, ch in enumerate(key):
        if re.match(_NOT_KEY_CHAR, ch):
            shown = repr(ch) if ch in "<>&" else f"U+{ord(ch):04X}"
            return BodyError(
                "CF208",
                f"{what} {key!r} holds {shown}: a key has no markup, entities or control characters",
                start + n,
                start + n + 1,
            )
    return BodyError("CF208", f"{what} {key!r} is not a key", start, stop)


def _text_outside(body: str, pos: int, tags: TagTable) -> BodyError:
    if body[pos] in " \t\r\n":
        return BodyError("CF206", "whitespace between elements: exactly one '\\n' and nothing else", pos, pos + 1)
    return BodyError(
        "CF203",
        f"text outside an element: a C body holds only {', '.join(t.open for t in tags)} lines",
        pos,
        _line_end(body, pos),
    )
