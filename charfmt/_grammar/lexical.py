"""The body language's lexical facts, each written once: the text class, the entity decoder, the JSON-escape table.

Every reader of bodies (the strict parser, the stream reader, the lenient readers) and the
writer use these, so an entity or escape fix is made in one place:

- **Text.** A character text holds literally: :func:`text_class`; one that text never holds,
  not even escaped: :data:`NOT_TEXT` (compiled: :data:`NOT_TEXT_CHAR`); the two markup
  characters text writes only as entities: :data:`MARKUP`. Read from the grammar's ``_PLAIN``
  terminal (and what a key never holds, :data:`NOT_KEY`, from ``KEY``).
- **Entities.** Which references text decodes (the names read from the grammar's ``_ENTITY``
  terminal, numeric references to a character text holds): :func:`entity_char`, the one
  decoder of a reference. :func:`decode_text` decodes strict text (a reference to no text
  character raises :class:`BadEntity`); :func:`decode_entities` is the lenient reading
  (HTML's named entities too, anything else kept as written). :data:`TEXT_ESCAPES` writes text.
- **JSON escapes.** :data:`JSON_ESCAPES`: the character each one-letter escape of a JSON
  string stands for (RFC 8259, section 7); not the grammar's to say.

The derivations run once, at import, from the grammar's static part (no tag table).
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from charfmt._grammar.static import static_text


def _definition(name: str) -> str:
    """What stands after ``name:`` on its line of ``body.lark``."""
    text = "\n" + static_text()
    at = text.find(f"\n{name}:")
    if at < 0:
        raise RuntimeError(f"grammars/body.lark defines no {name}, which charfmt reads")
    end = text.find("\n", at + 1)
    return text[at + len(name) + 2 : end if end >= 0 else len(text)].strip()


def _between(name: str, before: str, after: str) -> str:
    """The part of ``name``'s definition between ``before`` and ``after`` (the whole rest of it)."""
    definition = _definition(name)
    if not (definition.startswith(before) and definition.endswith(after)):
        raise RuntimeError(f"grammars/body.lark: charfmt reads {name} as {before}...{after}, and it is not so written")
    return definition[len(before) : len(definition) - len(after)]


# --- text ------------------------------------------------------------------------------------

_PLAIN_CLASS: Final = _between("_PLAIN", "/[^", "]+/")
"""The body of the class the grammar's ``_PLAIN`` (a run of literal text) negates."""

MARKUP: Final = "<&"
"""What text writes only as entities: ``<`` starts a tag and ``&`` an entity."""

if not all(ch in _PLAIN_CLASS for ch in MARKUP):
    raise RuntimeError("grammars/body.lark: _PLAIN must exclude '<' and '&' (markup)")

NOT_TEXT: Final = "".join(ch for ch in _PLAIN_CLASS if ch not in MARKUP)
"""The body of a regex class of the characters text never holds, not even escaped: C0 controls
other than tab, newline and carriage return, DEL, lone surrogates (as ``body.lark`` writes them)."""


@cache
def _not_text_char() -> re.Pattern[str]:
    return re.compile(f"[{NOT_TEXT}]")


if TYPE_CHECKING:
    NOT_TEXT_CHAR: re.Pattern[str]
    """One character text never holds, not even escaped. (Compiled on first use: a class with the
    surrogate range takes a third of a millisecond to compile, and a valid reply's parse never needs
    it; :func:`text_class` and :data:`NOT_KEY` are sources, compiled where they are used.)"""
else:

    def __getattr__(name: str) -> Any:
        """``NOT_TEXT_CHAR``, compiled on first use, then kept."""
        if name != "NOT_TEXT_CHAR":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = globals()[name] = _not_text_char()
        return value


_KEY_EDGE: Final = _between("KEY", "/[^\\s", "])?/").partition("]")[0]
_KEY_INNER: Final = _between("KEY", f"/[^\\s{_KEY_EDGE}](?:[^", f"]*[^\\s{_KEY_EDGE}])?/")
"""The grammar's ``KEY`` as classes: its first and last characters are no whitespace and none of
``_KEY_EDGE``; the ones between none of ``_KEY_INNER``."""

NOT_KEY: Final = _KEY_INNER
"""The body of a regex class of the characters a key never holds (markup, ``>``, control characters,
lone surrogates), read from the grammar's ``KEY``; a key also neither starts nor ends with whitespace."""


def text_class(excluding: str = "") -> str:
    """The source of a regex class: a character text holds literally and none of ``excluding`` (a class body).

    The stream reader's run of plain text inside a JSON string is ``text_class('"\\\\\\x00-\\x1f')``.
    """
    return f"[^{excluding}{MARKUP}{NOT_TEXT}]"


# --- patterns that compile fast (the strict reader's fast path) ------------------------------
# Each class holding the lone-surrogate range costs re a fifth of a millisecond to compile, and
# the grammar's TEXT and KEY hold three each: the fast path's first parse, at every start, was
# mostly compiling them (issue 41). These sources match the same text with one class each.

_TEXT_SHAPE: Final = "_PLAIN (_ENTITY _PLAIN?)* | (_ENTITY _PLAIN?)+"
"""How ``body.lark`` writes ``TEXT``: runs of ``_PLAIN`` and ``_ENTITY``, at least one of either."""


def fast_text(reference: str) -> str | None:
    """A regex source of the grammar's ``TEXT`` with one class: plain runs and entities, at least one.

    ``reference``: what stands for a numeric reference (after ``&``, before ``;``): the grammar's
    :data:`NUMREF`, or :data:`NUMERIC_REFERENCE` (any number) for a reader that decodes what it
    matched with :func:`decode_text`. Possessive: it backtracks into nothing, and no way through it
    is ambiguous. ``None`` when ``body.lark`` writes ``TEXT`` another way (then use its terminal).
    """
    if _definition("TEXT") != _TEXT_SHAPE:
        return None
    return f"(?:{text_class()}++|&(?:{'|'.join(NAMED_ENTITIES)}|{reference});)++"


def fast_key() -> str | None:
    """A regex source of the grammar's ``KEY`` with one class, where a whole key stands (markup or the end after it).

    A run of characters a key holds, neither its first nor its last one whitespace (a lookahead and
    a lookbehind, not two more classes). ``None`` when ``body.lark`` lets a key's edges hold what
    its inside does not (then use its terminal).
    """
    if _KEY_EDGE != _KEY_INNER:
        return None
    return f"(?!\\s)[^{NOT_KEY}]++(?<!\\s)"


def fast_newline() -> str | None:
    """The grammar's ``_NL`` (what stands between two elements) as a regex source, read here: the
    generated tables (``charfmt._grammar._lalr``) need not load for it. ``None`` when ``body.lark``
    writes it otherwise than as ``"\\n"``."""
    return "\\n" if _definition("_NL") == '"\\n"' else None


# --- entities --------------------------------------------------------------------------------

_XML_ENTITIES: Final = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
"""XML's five predefined entities (XML 1.0, section 4.6), from which the grammar picks."""

NAMED_ENTITIES: Final = {
    name: _XML_ENTITIES[name] for name in _between("_ENTITY", '"&" (/', '/ | _NUMREF) ";"').split("|")
}
"""The named entities the grammar's ``TEXT`` terminal allows, and what each stands for."""

NUMREF: Final = _between("_NUMREF", "/", "/")
"""The grammar's ``_NUMREF`` as written: a numeric reference (after ``&``, before ``;``) to a character text holds."""

NUMERIC_REFERENCE: Final = "#[0-9]+|#[xX][0-9a-fA-F]+"
"""A numeric reference's shape, whatever character it names (:func:`entity_char` decides which it may):
compiles in a hundredth of the time :data:`NUMREF`'s ranges take."""

ENTITY: Final = re.compile("&(" + "|".join(NAMED_ENTITIES) + f"|{NUMERIC_REFERENCE});")
"""An entity text may hold, as written: the reference between ``&`` and ``;`` in group 1."""

_ANY_ENTITY: Final = r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});"
"""Anything shaped like an entity (lenient reading): an HTML name, or a number of at most 7 digits."""

TEXT_ESCAPES: Final = str.maketrans({NAMED_ENTITIES[name]: f"&{name};" for name in ("amp", "lt", "gt")})
"""How the writer escapes text: the markup, and ``>`` (text may hold it raw; escaped, nobody reads a tag)."""


class BadEntity(Exception):
    """A numeric reference in strict text to a character text does not hold (``&#0;``)."""

    def __init__(self, entity: str) -> None:
        super().__init__(entity)
        self.entity = entity
        """The entity as written."""


_MAX_DIGITS: Final = len(str(0x10FFFF))
"""The most significant digits a numeric reference to a character has (seven decimal, six hexadecimal)."""


def entity_char(reference: str) -> str | None:
    """The character the reference ``reference`` (between ``&`` and ``;``: ``amp``, ``#233``, ``#xE9``) stands for.

    ``None`` when it is no entity the grammar names, or a number that names no character
    text holds. The one decoder of a reference: every reader calls it.
    """
    named = NAMED_ENTITIES.get(reference)
    if named is not None:
        return named
    if reference[:1] != "#":
        return None
    hexadecimal = reference[1:2] in ("x", "X")
    digits = reference[1 + hexadecimal :].lstrip("0") or "0"  # the grammar allows any number of leading zeros
    if len(digits) > _MAX_DIGITS:  # no code point has more (and int() refuses 4,300 decimal digits)
        return None
    code = int(digits, 16 if hexadecimal else 10)
    if code > 0x10FFFF:
        return None
    ch = chr(code)
    return None if _not_text_char().match(ch) else ch


def _strict(m: re.Match[str]) -> str:
    reference = m.group(1)
    ch = _NAMED(reference)  # most references are named: no call of entity_char for them (the hot path)
    if ch is None:
        ch = entity_char(reference)
        if ch is None:
            raise BadEntity(m.group())
    return ch


_NAMED: Final = NAMED_ENTITIES.get


def decode_text(raw: str) -> str:
    """Decode the entities of one ``TEXT`` token; raises :class:`BadEntity` for a reference to no text character."""
    return ENTITY.sub(_strict, raw) if "&" in raw else str(raw)


def _lenient(m: re.Match[str]) -> str:
    whole = m.group()
    inner = whole[1:-1]
    ch = entity_char(inner)
    if ch is not None:
        return ch
    if inner.startswith("#"):
        return whole
    from html.entities import html5  # noqa: PLC0415 (a large table: only for a name the grammar lacks)

    return html5.get(inner + ";", whole)


def decode_entities(text: str) -> str:
    """Decode what strict text decodes, and HTML's named entities; leave any other ``&`` as written.

    One pass, so ``&amp;lt;`` is ``&lt;``, never ``<``. (Lenient reading.)
    """
    return re.sub(_ANY_ENTITY, _lenient, text) if "&" in text else text  # (compiled once, by re's cache)


# --- JSON escapes ----------------------------------------------------------------------------

JSON_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
"""What each one-letter escape of a JSON string stands for: ``\\n`` a newline (RFC 8259, section 7).
The other escape, ``\\u`` with four hex digits, names a UTF-16 code unit."""
