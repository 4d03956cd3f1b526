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


class Driver:
    """Lark's LALR tables and callbacks, driven by a lean loop (the hot path).

    Lark's own ``parse`` spends most of its time on per-token objects (``Token``,
    lexer and parser state); this loop runs the same tables, the same rule
    callbacks and the same contextual lexing (one scanner regex per parser state,
    holding only the terminals that state accepts), on plain strings. It only
    answers "accepted, with this value" or "rejected": diagnostics come from
    Lark's own parser, which is run again on the body that failed.

    ``Driver(lark, tags)`` reads the tables of a built Lark parser; :meth:`from_cache` the
    generated ones (``charfmt._grammar._lalr``), without Lark. Each state's scanner is
    compiled when the state is first reached: compiling all of them up front costs more
    than the rest of the first parse, and a reply reaches only the states of the tags it uses.
    """

    def __init__(self, lark: Lark | None, tags: TagTable = DEFAULT_TAGS, *, cache: Any = None) -> None:
        """The driver of ``lark``'s tables; with ``lark=None``, of ``cache`` (what ``tables(lark)`` gives, as a module).

        ``tags``: the table the grammar was generated from (its tag rules build elements).
        """
        if lark is not None:
            from charfmt._grammar.tables import tables  # noqa: PLC0415 (Lark's build only)

            cache = SimpleNamespace(**tables(lark))
        reducers = []
        for origin, expansion, expand1 in cache.RULES:
            # What _reducer reads of a Lark rule: origin.name, expansion (name, is_term,
            # filter_out of each symbol) and options.expand1.
            rule = SimpleNamespace(
                origin=SimpleNamespace(name=origin),
                expansion=[SimpleNamespace(name=n, is_term=t, filter_out=f) for n, t, f in expansion],
                options=SimpleNamespace(expand1=expand1),
            )
            reducers.append((origin, len(expansion), _reducer(rule, tags)))
        self.start_states: dict[str, int] = dict(cache.START_STATES)
        self.end_states: dict[str, int] = dict(cache.END_STATES)
        # Shift: (True, next state); reduce: (False, (rule name, rule length, semantic action)).
        self.states: dict[int, dict[str, tuple[bool, Any]]] = {
            state: {sym: (True, arg) if shift else (False, reducers[arg]) for sym, (shift, arg) in actions.items()}
            for state, actions in cache.STATES.items()
        }
        self.scanners: dict[int, re.Pattern[str] | None] = {}
        """Each state's compiled scanner (``None``: the state reads no token), once reached."""
        self._patterns: dict[int, str | None] = dict(cache.SCANNERS)

    @classmethod
    def from_cache(cls, lalr: Any, tags: TagTable = DEFAULT_TAGS) -> Driver:
        """The driver of the generated tables ``lalr`` (``charfmt._grammar._lalr``), without Lark."""
        return cls(None, tags, cache=lalr)

    def _scanner(self, state: int) -> re.Pattern[str] | None:
        pattern = self._patterns[state]
        compiled = None if pattern is None else re.compile(pattern)
        self.scanners[state] = compiled
        return compiled

    def parse(self, text: str, start: str) -> Any:
        states, scanners = self.states, self.scanners
        state_stack = [self.start_states[start]]
        value_stack: list[Any] = []
        end_state = self.end_states[start]
        pos, n = 0, len(text)
        while True:
            if pos < n:
                try:
                    scanner = scanners[state_stack[-1]]
                except KeyError:
                    scanner = self._scanner(state_stack[-1])
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
