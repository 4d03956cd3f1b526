"""The strict body reader: a chat body in the grammar of a tag table, as ``(tag, decoded text)`` elements.

Three ways through one grammar (``charfmt._grammar``): a regular expression that reads a
valid body (:func:`fast_reader`), the LALR driver that reads every body of a reply in one
call (:func:`parse_batch`, :mod:`charfmt._strict.lalr`), and Lark's own parser, run again
on a body that failed, whose error becomes a specific diagnostic (:func:`parse_body`,
:mod:`charfmt._strict.diagnosis`). Documented as ``charfmt.body``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache

from charfmt._grammar.lexical import (
    NUMERIC_REFERENCE,
    NUMREF,
    BadEntity,
    decode_text,
    fast_key,
    fast_newline,
    fast_text,
)
from charfmt._grammar.rules import C_MARK, TEXT_MARK, content_terminal, lark_parser
from charfmt._grammar.static import static_terminals
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TEXT_TAG, TagTable

Element = tuple[str, str]
"""A parsed element: ``(tag, decoded text)``."""

FastReader = Callable[[str, str], "list[Element] | None"]
"""``read(chat type, body)``: the body's elements, or ``None`` when the body is not valid."""


@cache
def fast_reader(tags: TagTable = DEFAULT_TAGS) -> FastReader:
    """A reader of valid bodies by regular expression, derived from the grammar and the tag table.

    The body language is regular: a ``C`` body is ``element (_NL element)*``, each element
    one rule generated from the tag table (``<name>KEY</name>`` or ``<name>TEXT?</name>``),
    an ``I``/``E`` body is ``TEXT``. One ``fullmatch`` validates a body against patterns
    built from the grammar's own ``TEXT``, ``KEY`` and ``_NL``; a second scan lifts the
    elements out (valid content holds no raw ``<``), and entities are decoded only where a
    ``&`` stands. It says nothing about invalid bodies: the LALR parser (:func:`parse_batch`,
    :func:`parse_body`) is the one that explains them.

    What a cold start's first parse pays is mostly compiling these patterns (issue 41), so
    they are written to compile fast: ``TEXT`` and ``KEY`` with one character class each
    (``lexical.fast_text``, ``lexical.fast_key``; the grammar's hold three each), and a numeric
    reference read as any number (the decoder refuses one that names no character text holds,
    exactly where the grammar's ranges would). Each tag keeps its own alternative: the tags of
    one content kind in one (``<(?:act|msg|thought)>TEXT?</(?:act|msg|thought)>``, a closing
    tag then checked by the scan) compile 0.3 ms faster but read a typical reply 2 % slower.
    """
    text, key, newline = fast_text(NUMERIC_REFERENCE), fast_key(), fast_newline()
    if text is None or key is None or newline is None:  # an edited body.lark: its own terminals
        terminals = static_terminals()  # (the generated tables' copy, or Lark's)
        text, key, newline = text or _widened(terminals["TEXT"]), key or terminals["KEY"], newline or terminals["_NL"]
    contents = {"TEXT": text, "KEY": key}
    element = "|".join(
        f"{re.escape(t.open)}(?:{contents[content_terminal(t.content)[0]]}){content_terminal(t.content)[1]}"
        f"{re.escape(t.close)}"
        for t in tags
    )
    # ``element (_NL element)*``, written with one copy of ``element``. Atomic and possessive:
    # each element matches in one way only, so a body that fails is given up after one linear
    # pass. (No capturing group inside: CPython 3.11 mishandles one in a possessive repeat.)
    c_body = re.compile(f"(?:(?>{element})(?:{newline}(?!\\Z)|\\Z))++").fullmatch
    text_body = re.compile(f"(?:{contents['TEXT']})").fullmatch
    pieces = re.compile("<(" + "|".join(re.escape(t.name) for t in tags) + ")>([^<]*)<").findall
    tagged = TAGGED_TYPES

    def read(kind: str, body: str) -> list[Element] | None:
        if kind in tagged:
            if not c_body(body):
                return None
            elements: list[Element] = pieces(body)
            if "&" in body:
                try:
                    elements = [(tag, decode_text(raw)) for tag, raw in elements]
                except BadEntity:  # TEXT admits no such entity; should it ever, the parser decides
                    return None
            return elements
        if text_body(body) is None:
            return None
        try:
            return [(TEXT_TAG, decode_text(body))]
        except BadEntity:
            return None

    return read


def _widened(pattern: str) -> str:
    """A terminal's pattern with the grammar's numeric reference (``_NUMREF``) read as any number.

    Only for a reader that decodes what it matched with ``decode_text``, which raises
    ``BadEntity`` for a reference to no text character. A pattern without the grammar's
    ``_NUMREF`` as written (an edited grammar) is returned as it is: exact, only slower to compile.
    (Where ``body.lark`` writes ``TEXT`` as shipped, ``lexical.fast_text`` is used instead.)
    """
    return pattern.replace(NUMREF, f"(?:{NUMERIC_REFERENCE})")


def parse_batch(bodies: Sequence[tuple[str, str]], tags: TagTable = DEFAULT_TAGS) -> list[list[Element]] | None:
    """Parse every ``(chat type, body)`` of a reply in one LALR call.

    Returns one element list per body, or ``None`` when any body is invalid (then
    call :func:`parse_body` per body to learn what and where).
    """
    from .lalr import Reject, driver  # noqa: PLC0415 (import cost: the fast path, a valid reply's, never needs it)

    if len(bodies) == 1:
        # One body (most replies): parse it where it is; the joined copy would double the
        # memory a long message takes.
        kind, body = bodies[0]
        try:
            return [driver(tags).parse(body, "c_body" if kind in TAGGED_TYPES else "text_body")]
        except (Reject, BadEntity):
            return None
    doc = "".join((C_MARK if kind in TAGGED_TYPES else TEXT_MARK) + body for kind, body in bodies)
    try:
        result: list[list[Element]] = driver(tags).parse(doc, "bodies")
    except (Reject, BadEntity):
        return None
    return result if len(result) == len(bodies) else None


def parse_body(kind: str, body: str, tags: TagTable = DEFAULT_TAGS) -> list[Element]:
    """Parse one body of chat type ``kind`` in the language of ``tags``; raises :class:`BodyError`."""
    from .diagnosis import BodyError, diagnose  # noqa: PLC0415 (import cost: a valid reply's fast path never needs it)
    from .lalr import Reject, driver  # noqa: PLC0415 (import cost: as in parse_batch)

    start = "c_body" if kind in TAGGED_TYPES else "text_body"
    try:
        result: list[Element] = driver(tags).parse(body, start)
    except Reject:
        from lark.exceptions import UnexpectedInput  # noqa: PLC0415 (Lark loads only for a body the LALR driver rejected)

        try:
            lark_parser(tags).parse(body, start=start)
        except UnexpectedInput as e:
            raise diagnose(e, kind, body, tags) from None
        raise BodyError("CF201", "body rejected", 0, len(body)) from None  # the two parsers disagree: a bug
    except BadEntity as e:
        at = body.find(e.entity)
        raise BodyError(
            "CF207", f"entity {e.entity} is not a character allowed in text", at, at + len(e.entity)
        ) from None
    return result
