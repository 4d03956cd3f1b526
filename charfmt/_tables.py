"""The body grammar's text, and its LALR tables cached in ``charfmt/_body_table.py`` (a valid body parses without Lark).

The grammar is ``grammars/body.lark`` plus element rules generated from a tag table
(:func:`grammar_text`); the cache holds the tables of the default table's grammar only.
Any other table (``DEFAULT_TAGS.extend(...)``) gets its tables from Lark, built once per table.
The grammar's ``KEY`` and ``TEXT`` patterns (:func:`terminal_regex`) come from the cache too,
so the models check content without loading the parser.

Building the tables means importing Lark and analysing the grammar (about half of
charfmt's cold start). The tables are a pure function of the grammar text, so they
are generated once (``python -m charfmt._tables`` rewrites the cache) and loaded as
plain data. The cache records the grammar text it was built from; when
``grammars/body.lark`` (user-editable) or the tag table no longer gives that text,
the cache is ignored and Lark builds the tables as before. ``tests/test_lazy_import.py``
regenerates the cache and fails if the committed one has drifted.

Lark is still the source of the tables, and still the parser that explains an
invalid body (``body.parse_body`` re-runs it to make the diagnostic).
"""

from __future__ import annotations

import os
import re
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final

from charfmt._resources import read_text
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from lark import Lark

    from charfmt.body import Driver

CACHE_FILE: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_body_table.py")

# --- the grammar text -------------------------------------------------------------

_CONTENT: Final[dict[str, tuple[str, str]]] = {"key": ("KEY", ""), "text": ("TEXT", "?")}
"""What stands between a tag's opening and closing: by the tag's content kind, the
terminal and how many (``?``: it may be empty)."""

_C_MARK: Final = "\x1c"
_TEXT_MARK: Final = "\x1d"
# Internal batch rule: every body of one reply in one LALR call. The marks are C0
# controls, which TEXT and KEY exclude, so a body can never contain one unnoticed
# (a body that did would change the count of results, which the caller checks).
_BATCH_RULES: Final = f"""
// internal: all bodies of one reply in one call
bodies: (_C_MARK c_body | _TEXT_MARK text_body)*
_C_MARK: "\\x{ord(_C_MARK):02x}"
_TEXT_MARK: "\\x{ord(_TEXT_MARK):02x}"
"""

NAMED_ENTITIES: Final = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
"""The named entities the grammar's ``TEXT`` terminal allows, and what each stands for."""


def content_terminal(kind: str) -> tuple[str, str]:
    """The terminal between a tag's opening and closing for content ``kind``, and its repetition."""
    return _CONTENT[kind]


def element_rules(tags: TagTable = DEFAULT_TAGS) -> str:
    """The grammar rules generated from a tag table (appended to ``body.lark``)."""
    lines = ["", "// generated from charfmt/tags.py", "?element: " + " | ".join(t.name for t in tags)]
    for t in tags:
        terminal, times = _CONTENT[t.content]
        lines.append(f"{t.name}: {t.terminal}_OPEN {terminal}{times} {t.terminal}_CLOSE")
    for t in tags:
        lines.append(f'{t.terminal}_OPEN: "{t.open}"')
        lines.append(f'{t.terminal}_CLOSE: "{t.close}"')
    return "\n".join(lines) + "\n"


@cache
def grammar_text(tags: TagTable = DEFAULT_TAGS) -> str:
    """The complete body grammar of ``tags``: ``grammars/body.lark`` plus the generated element rules."""
    return read_text("grammars", "body.lark") + element_rules(tags)


def full_grammar_text(tags: TagTable = DEFAULT_TAGS) -> str:
    """What the parser is built from: :func:`grammar_text` plus the internal batch rule."""
    return grammar_text(tags) + _BATCH_RULES


@cache
def terminal_regex(name: str) -> re.Pattern[str]:
    """The compiled pattern of grammar terminal ``name`` (``KEY``, ``TEXT``, ``_NL``...).

    These terminals do not depend on the tag table. Read from the cache when it is the
    current grammar's; otherwise Lark builds the grammar (an edited ``body.lark``).
    """
    cached = cached_terminals(full_grammar_text())
    if cached is not None and name in cached:
        return re.compile(cached[name])
    from charfmt.body import _lark  # noqa: PLC0415 (only an edited grammar needs Lark here)

    return re.compile(_lark().get_terminal(name).pattern.to_regexp())


def tables(lark: Lark) -> dict[str, Any]:
    """The data a :class:`body.Driver` needs, as plain literals, read from a built Lark parser."""
    from lark.parsers.lalr_analysis import Shift  # noqa: PLC0415 (only generating needs Lark)

    parser: Any = lark.parser.parser.parser
    table = parser.parse_table
    rules = list(parser.callbacks)
    index = {rule: i for i, rule in enumerate(rules)}
    terminals = {t.name: t for t in lark.terminals}
    # Lark numbers its states in an order that depends on string hashing; number them
    # canonically (breadth first from the start states, symbols in name order) so the
    # generated file is the same on every run.
    number: dict[int, int] = {}
    queue = [table.start_states[name] for name in sorted(table.start_states)]
    while queue:
        state = queue.pop(0)
        if state in number:
            continue
        number[state] = len(number)
        for _sym, (action, arg) in sorted(table.states[state].items(), key=lambda item: str(item[0])):
            if action is Shift and arg not in number:
                queue.append(arg)
    states: dict[int, dict[str, tuple[bool, int]]] = {}
    scanners: dict[int, str | None] = {}
    for state, actions in sorted(table.states.items(), key=lambda item: number[item[0]]):
        states[number[state]] = {
            str(sym): (True, number[arg]) if action is Shift else (False, index[arg])
            for sym, (action, arg) in sorted(actions.items(), key=lambda item: str(item[0]))
        }
        defs = sorted(
            (terminals[name] for name in actions if name in terminals),
            key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name),
        )
        alternatives = "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in defs)
        scanners[number[state]] = alternatives or None
    return {
        "START_STATES": {name: number[state] for name, state in sorted(table.start_states.items())},
        "END_STATES": {name: number[state] for name, state in sorted(table.end_states.items())},
        "RULES": [
            (
                str(rule.origin.name),
                [(str(s.name), bool(s.is_term), bool(getattr(s, "filter_out", False))) for s in rule.expansion],
                bool(rule.options.expand1),
            )
            for rule in rules
        ],
        "STATES": states,
        "SCANNERS": scanners,
        "TERMINALS": {t.name: t.pattern.to_regexp() for t in sorted(lark.terminals, key=lambda t: t.name)},
    }


def generate() -> str:
    """The source of ``_body_table.py`` for the grammar charfmt loads now (imports Lark)."""
    from charfmt import body  # noqa: PLC0415 (generating needs the parser)

    data = tables(body._lark())
    lines = [
        '"""Generated by ``python -m charfmt._tables`` from the body grammar: do not edit."""',
        "",
        "# fmt: off",
        "# ruff: noqa",
        f"GRAMMAR = {full_grammar_text()!r}",
    ]
    lines += [f"{name} = {value!r}" for name, value in data.items()]
    return "\n".join(lines) + "\n"


def _cache(grammar: str) -> Any:
    """The cache module if it was built from ``grammar``, else ``None``."""
    try:
        from charfmt import _body_table  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a broken install; Lark builds the tables
        return None
    return _body_table if grammar == _body_table.GRAMMAR else None


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


def cached_driver(grammar: str, tags: TagTable = DEFAULT_TAGS) -> Driver | None:
    """A :class:`body.Driver` from the cache, without Lark; ``None`` if the cache is not for ``grammar``.

    ``tags``: the table ``grammar`` was generated from (its tag rules build elements).
    """
    from charfmt.body import Driver, _reducer  # noqa: PLC0415

    cache = _cache(grammar)
    if cache is None:
        return None
    reducers = []
    for origin, expansion, expand1 in cache.RULES:
        # What body._reducer reads of a Lark rule: origin.name, expansion (name, is_term,
        # filter_out of each symbol) and options.expand1.
        rule = SimpleNamespace(
            origin=SimpleNamespace(name=origin),
            expansion=[SimpleNamespace(name=n, is_term=t, filter_out=f) for n, t, f in expansion],
            options=SimpleNamespace(expand1=expand1),
        )
        reducers.append((origin, len(expansion), _reducer(rule, tags)))
    driver = Driver.__new__(Driver)
    driver.start_states = dict(cache.START_STATES)
    driver.end_states = dict(cache.END_STATES)
    driver.states = {
        state: {sym: (True, arg) if shift else (False, reducers[arg]) for sym, (shift, arg) in actions.items()}
        for state, actions in cache.STATES.items()
    }
    driver.scanners = _Scanners(cache.SCANNERS)
    return driver


def cached_terminals(grammar: str) -> dict[str, str] | None:
    """Each terminal's regular expression from the cache; ``None`` if the cache is not for ``grammar``."""
    cache = _cache(grammar)
    return None if cache is None else dict(cache.TERMINALS)


def main() -> int:
    """Rewrite the cache for the current grammar."""
    with open(CACHE_FILE, "w", encoding="utf-8") as f:
        f.write(generate())
    print(f"wrote {CACHE_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
