"""The body grammar's LALR driver: the generated (or Lark-built) tables run by a lean loop into elements.

Lark is the source of the tables (``charfmt._grammar``); this loop runs them without
Lark's per-token objects and answers only "accepted, with this value" or :class:`Reject`.
Why a body was rejected is :mod:`charfmt._strict.diagnosis`'s question.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from charfmt._grammar.lexical import decode_text
from charfmt._grammar.rules import full_grammar_text, lark_parser
from charfmt._grammar.static import cached
from charfmt.tags import DEFAULT_TAGS, TEXT_TAG, TagTable

if TYPE_CHECKING:  # Lark loads only to build tables the cache lacks
    from lark import Lark


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

        from charfmt._grammar.tables import scanner_pattern  # noqa: PLC0415 (Lark's build only)

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
def driver(tags: TagTable = DEFAULT_TAGS) -> Driver:
    lalr = cached(full_grammar_text(tags))
    return Driver(lark_parser(tags), tags) if lalr is None else Driver.from_cache(lalr, tags)
