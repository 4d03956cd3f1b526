"""The strict body reader: parse chat bodies in the grammar of a tag table, and say why one is invalid.

Three ways through one grammar (``charfmt._grammar``): a regular expression that reads a
valid body (:func:`fast_reader`), a lean LALR driver over the generated tables that reads
every body of a reply in one call (:func:`parse_batch`), and Lark's own parser, run again
on a body that failed, whose error becomes a specific diagnostic (:func:`parse_body`).
Bodies come out as plain ``(tag, text)`` tuples with entities decoded; the parser
module turns them into models. Errors come out as :class:`BodyError` with offsets
into the *decoded* body string; the caller maps them back to the raw input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final

from charfmt._grammar.lexical import NOT_KEY_CHAR, NOT_TEXT_CHAR, BadEntity, decode_text
from charfmt._grammar.rules import (
    C_MARK,
    TEXT_MARK,
    content_terminal,
    element_rules,
    full_grammar_text,
    grammar_text,
    lark_parser,
)
from charfmt._grammar.static import terminal_regex
from charfmt._grammar.tables import cached, scanner_pattern
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TEXT_TAG, TagTable

if TYPE_CHECKING:  # Lark loads only to build tables the cache lacks or to explain an invalid body
    from lark import Lark
    from lark.exceptions import UnexpectedInput

__all__ = [
    "BodyError",
    "Driver",
    "Element",
    "FastReader",
    "Reject",
    "decode_text",
    "element_rules",
    "fast_reader",
    "full_grammar_text",
    "grammar_text",
    "parse_batch",
    "parse_body",
    "terminal_regex",
]

Element = tuple[str, str]
"""A parsed element: ``(tag, decoded text)``."""

_BadEntity = BadEntity
"""A reference in text to a character text does not hold (the lexical module's, under its old name here)."""


# --- the parser --------------------------------------------------------------


FastReader = Callable[[str, str], "list[Element] | None"]
"""``read(chat type, body)``: the body's elements, or ``None`` when the body is not valid."""


@cache
def fast_reader(tags: TagTable = DEFAULT_TAGS) -> FastReader:
    """A reader of valid bodies by regular expression, derived from the grammar and the tag table.

    The body language is regular: a ``C`` body is ``element (_NL element)*``, each element
    one rule generated from the tag table (``<name>KEY</name>`` or ``<name>TEXT?</name>``),
    an ``I``/``E`` body is ``TEXT``. One ``fullmatch`` validates a body against patterns
    built from the grammar's own ``TEXT``, ``KEY`` and ``_NL`` terminals; a second scan
    lifts the elements out (valid content holds no raw ``<``), and entities are decoded
    only where a ``&`` stands. It says nothing about invalid bodies: the LALR parser
    (:func:`parse_batch`, :func:`parse_body`) is the one that explains them.
    """
    newline = terminal_regex("_NL").pattern
    element = "|".join(
        re.escape(t.open)
        + f"(?:{terminal_regex(content_terminal(t.content)[0]).pattern}){content_terminal(t.content)[1]}"
        + re.escape(t.close)
        for t in tags
    )
    # ``element (_NL element)*``, written with one copy of ``element`` (compiling the
    # TEXT pattern is most of the cost of first use). Atomic and possessive: each element
    # matches in one way only, so a body that fails is given up after one linear pass.
    # (No capturing group inside: CPython 3.11 mishandles one in a possessive repeat.)
    c_body = re.compile(f"(?:(?>{element})(?:{newline}(?!\\Z)|\\Z))++").fullmatch
    text_body = re.compile(f"(?:{terminal_regex('TEXT').pattern})").fullmatch
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
                except _BadEntity:  # TEXT admits no such entity; should it ever, the parser decides
                    return None
            return elements
        if text_body(body) is None:
            return None
        try:
            return [(TEXT_TAG, decode_text(body))]
        except _BadEntity:
            return None

    return read


class Reject(Exception):
    """The fast driver met input the grammar does not accept."""


class _Scanners(dict[int, "re.Pattern[str] | None"]):
    """Each parser state's scanner, compiled when the state is first reached.

    Compiling all of them up front costs more than the rest of the first parse; a reply
    reaches only the states of the tags it uses.
    """

    def __init__(self, patterns: dict[int, str | None]) -> None:
        super().__init__()
        self._patterns = patterns

    def __missing__(self, state: int) -> re.Pattern[str] | None:
        pattern = self._patterns[state]
        compiled = None if pattern is None else re.compile(pattern)
        self[state] = compiled
        return compiled


class Driver:
    """Lark's LALR tables and callbacks, driven by a lean loop (the hot path).

    Lark's own ``parse`` spends most of its time on per-token objects (``Token``,
    lexer and parser state); this loop runs the same tables, the same rule
    callbacks and the same contextual lexing (one scanner regex per parser state,
    holding only the terminals that state accepts), on plain strings. It only
    answers "accepted, with this value" or "rejected": diagnostics come from
    Lark's own parser, which is run again on the body that failed.
    """

    def __init__(self, lark: Lark, tags: TagTable = DEFAULT_TAGS) -> None:
        from lark.parsers.lalr_analysis import Shift  # noqa: PLC0415

        frontend: Any = lark.parser
        parser = frontend.parser.parser
        table = parser.parse_table
        self.start_states: dict[str, int] = table.start_states
        self.end_states: dict[str, int] = table.end_states
        terminals = {t.name: t for t in lark.terminals}
        reducers = {
            rule: (str(rule.origin.name), len(rule.expansion), _reducer(rule, tags)) for rule in parser.callbacks
        }
        # Shift: (True, next state); reduce: (False, (rule name, rule length, semantic action)).
        self.states: dict[int, dict[str, tuple[bool, Any]]] = {
            state: {
                str(sym): (True, arg) if action is Shift else (False, reducers[arg])
                for sym, (action, arg) in actions.items()
            }
            for state, actions in table.states.items()
        }
        self.scanners: dict[int, re.Pattern[str] | None] = {}
        for state, actions in table.states.items():
            pattern = scanner_pattern(terminals[name] for name in actions if name in terminals)
            self.scanners[state] = None if pattern is None else re.compile(pattern)

    @classmethod
    def from_cache(cls, lalr: Any, tags: TagTable = DEFAULT_TAGS) -> Driver:
        """The driver of the generated tables ``lalr`` (``charfmt._grammar._lalr``), without Lark.

        ``tags``: the table the cached grammar was generated from (its tag rules build elements).
        """
        reducers = []
        for origin, expansion, expand1 in lalr.RULES:
            # What _reducer reads of a Lark rule: origin.name, expansion (name, is_term,
            # filter_out of each symbol) and options.expand1.
            rule = SimpleNamespace(
                origin=SimpleNamespace(name=origin),
                expansion=[SimpleNamespace(name=n, is_term=t, filter_out=f) for n, t, f in expansion],
                options=SimpleNamespace(expand1=expand1),
            )
            reducers.append((origin, len(expansion), _reducer(rule, tags)))
        driver = cls.__new__(cls)
        driver.start_states = dict(lalr.START_STATES)
        driver.end_states = dict(lalr.END_STATES)
        driver.states = {
            state: {sym: (True, arg) if shift else (False, reducers[arg]) for sym, (shift, arg) in actions.items()}
            for state, actions in lalr.STATES.items()
        }
        driver.scanners = _Scanners(lalr.SCANNERS)
        return driver

    def parse(self, text: str, start: str) -> Any:
        states, scanners = self.states, self.scanners
        state_stack = [self.start_states[start]]
        value_stack: list[Any] = []
        end_state = self.end_states[start]
        pos, n = 0, len(text)
        while True:
            if pos < n:
                scanner = scanners[state_stack[-1]]
                m = scanner.match(text, pos) if scanner is not None else None
                if m is None:
                    raise Reject
                kind: str = m.lastgroup  # type: ignore[assignment]
                value: Any = m.group()
                pos = m.end()
            else:
                kind, value = "$END", ""
            while True:
                try:
                    shift, arg = states[state_stack[-1]][kind]
                except KeyError:
                    raise Reject from None
                if shift:
                    state_stack.append(arg)
                    value_stack.append(value)
                    break
                origin, size, action = arg
                if size:
                    children = value_stack[-size:]
                    del state_stack[-size:]
                    del value_stack[-size:]
                else:
                    children = []
                state_stack.append(states[state_stack[-1]][origin][1])
                value_stack.append(action(children))
                if kind == "$END" and state_stack[-1] == end_state:
                    return value_stack[-1]


def _reducer(rule: Any, tags: TagTable = DEFAULT_TAGS) -> Callable[[list[Any]], Any]:
    """The semantic action of one grammar rule, building ``(tag, text)`` elements.

    Tag rules (generated from the tag table) give an element; ``text_body`` gives a
    one-element list; ``?rule`` with one child passes it through; every other rule
    gives the list of its children, with ``_``-terminals dropped and ``_``-rules
    (Lark's helpers for ``*`` and ``+``) spliced in, reusing the left child's list
    so long bodies build in linear time.
    """
    name = str(rule.origin.name)
    symbols = rule.expansion
    spec = tags.get(name)
    if spec is not None:
        at = next((i for i, sym in enumerate(symbols) if sym.is_term and sym.name in ("TEXT", "KEY")), None)
        if at is None:
            return lambda children: (name, "")
        if spec.content == "key":
            return lambda children: (name, children[at])
        return lambda children: (name, decode_text(children[at]))
    if name == "text_body":
        return lambda children: [(TEXT_TAG, decode_text(children[0]))]
    kept = [i for i, sym in enumerate(symbols) if not (sym.is_term and (sym.filter_out or sym.name.startswith("_")))]
    if rule.options.expand1 and len(kept) == 1:
        only = kept[0]
        return lambda children: children[only]
    spliced = frozenset(i for i in kept if not symbols[i].is_term and symbols[i].name.startswith("_"))

    def collect(children: list[Any]) -> list[Any]:
        out: list[Any] | None = None
        for i in kept:
            if i in spliced:
                if out is None:
                    out = children[i]  # the helper's own list: append to it in place
                else:
                    out.extend(children[i])
            elif out is None:
                out = [children[i]]
            else:
                out.append(children[i])
        return out if out is not None else []

    return collect


@cache
def _driver(tags: TagTable = DEFAULT_TAGS) -> Driver:
    lalr = cached(full_grammar_text(tags))
    return Driver(lark_parser(tags), tags) if lalr is None else Driver.from_cache(lalr, tags)


def parse_batch(bodies: Sequence[tuple[str, str]], tags: TagTable = DEFAULT_TAGS) -> list[list[Element]] | None:
    """Parse every ``(chat type, body)`` of a reply in one LALR call.

    Returns one element list per body, or ``None`` when any body is invalid (then
    call :func:`parse_body` per body to learn what and where).
    """
    if len(bodies) == 1:
        # One body (most replies): parse it where it is; the joined copy would double the
        # memory a long message takes.
        kind, body = bodies[0]
        try:
            return [_driver(tags).parse(body, "c_body" if kind in TAGGED_TYPES else "text_body")]
        except (Reject, _BadEntity):
            return None
    doc = "".join((C_MARK if kind in TAGGED_TYPES else TEXT_MARK) + body for kind, body in bodies)
    try:
        result: list[list[Element]] = _driver(tags).parse(doc, "bodies")
    except (Reject, _BadEntity):
        return None
    return result if len(result) == len(bodies) else None


@dataclass(frozen=True, slots=True)
class BodyError(Exception):
    """Why a body failed, with offsets into the decoded body string."""

    code: str
    message: str
    start: int
    end: int


def parse_body(kind: str, body: str, tags: TagTable = DEFAULT_TAGS) -> list[Element]:
    """Parse one body of chat type ``kind`` in the language of ``tags``; raises :class:`BodyError`."""
    start = "c_body" if kind in TAGGED_TYPES else "text_body"
    try:
        result: list[Element] = _driver(tags).parse(body, start)
    except Reject:
        from lark.exceptions import UnexpectedInput  # noqa: PLC0415

        try:
            lark_parser(tags).parse(body, start=start)
        except UnexpectedInput as e:
            raise _diagnose(e, kind, body, tags) from None
        raise BodyError("CF201", "body rejected", 0, len(body)) from None  # the two parsers disagree: a bug
    except _BadEntity as e:
        at = body.find(e.entity)
        raise BodyError(
            "CF207", f"entity {e.entity} is not a character allowed in text", at, at + len(e.entity)
        ) from None
    return result


# --- error translation ---------------------------------------------------------

_TAG_AT: Final = re.compile(r"<(/?)\s*([^\s<>/]*)([^<>]*?)(/?)>")


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


def _diagnose(e: UnexpectedInput, kind: str, body: str, tags: TagTable) -> BodyError:
    """Turn a Lark error into a :class:`BodyError` with a specific code."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedToken  # noqa: PLC0415

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
    if NOT_TEXT_CHAR.match(ch):
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


_OPENER_BEFORE: Final = re.compile(r"<([a-z][a-z0-9_]*)>\Z")


def _key_name(tags: TagTable, before: str) -> str:
    """What the key after ``before`` is called in messages: ``the emotion key``, ``the sfx value``."""
    m = _OPENER_BEFORE.search(before)
    spec = tags.get(m.group(1)) if m else None
    return f"the {spec.name} value" if spec is not None and spec.role != "emotion" else "the emotion key"


def _diagnose_angle(body: str, pos: int, tags: TagTable, *, text_context: bool) -> BodyError:
    """A '<' the lexer could not use: a raw '<' in text, a tag with attributes, or an unknown tag."""
    m = _TAG_AT.match(body, pos)
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
        if NOT_KEY_CHAR.match(ch):
            what = repr(ch) if ch in "<>&" else f"U+{ord(ch):04X}"
            return BodyError(
                "CF208",
                f"{what} {key!r} holds {what}: a key has no markup, entities or control characters",
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
