"""The body grammar's static part: ``grammars/body.lark`` as shipped, before any tag table's rules, and its terminals.

``KEY`` (a whole value), ``TEXT`` (escaped free text) and ``_NL`` (the element separator)
are the same whatever the tag table, so this module reads none: ``charfmt.tags`` checks
its closed value lists against ``KEY`` here. The terminals' regular expressions come from
the generated cache (``charfmt/_grammar/_lalr.py``) while the cache was built from this
very text; an edited ``body.lark`` gets them from Lark, which then builds the static part
with a stand-in ``element`` rule (only its terminals are read).
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from charfmt._resources import read_text

if TYPE_CHECKING:  # Lark loads only for an edited grammar (or to generate the cache)
    from lark import Lark

ELEMENT_STAND_IN: Final = "\n// stands in for the tag table's elements (only the terminals are read)\n?element: KEY\n"
"""What completes ``body.lark`` into a grammar Lark builds, without a tag table."""


@cache
def static_text() -> str:
    """``grammars/body.lark``: the grammar before the element rules a tag table adds."""
    return read_text("grammars", "body.lark")


def cache_module() -> Any:
    """The generated cache module (``charfmt._grammar._lalr``), or ``None`` on a broken install."""
    try:
        from charfmt._grammar import _lalr  # noqa: PLC0415 (generated data, loaded on first use)
    except ImportError:  # pragma: no cover - a broken install; Lark builds everything
        return None
    return _lalr


def cached(grammar: str) -> Any:
    """The cache module if it was built from the complete grammar text ``grammar``, else ``None``."""
    lalr = cache_module()
    return lalr if lalr is not None and grammar == lalr.GRAMMAR else None


def static_lark() -> Lark:
    """Lark's build of the static part (with :data:`ELEMENT_STAND_IN`): its terminals are the grammar's."""
    from lark import Lark  # noqa: PLC0415 (an edited grammar, or generating the cache)

    return Lark(static_text() + ELEMENT_STAND_IN, parser="lalr", lexer="contextual", start=["c_body", "text_body"])


def terminals_of(lark: Lark) -> dict[str, str]:
    """Each terminal of a built grammar and its regular expression, by name."""
    return {t.name: t.pattern.to_regexp() for t in sorted(lark.terminals, key=lambda t: t.name)}


@cache
def static_terminals() -> dict[str, str]:
    """The static part's terminals (``KEY``, ``TEXT``, ``_NL``) and their regular expressions."""
    lalr = cache_module()
    if lalr is not None and static_text() == lalr.STATIC:
        return dict(lalr.STATIC_TERMINALS)
    return terminals_of(static_lark())


@cache
def terminal_regex(name: str) -> re.Pattern[str]:
    """The compiled pattern of the grammar's terminal ``name`` (``KEY``, ``TEXT``, ``_NL``).

    Raises ``KeyError`` for a name the static part does not define (a tag's ``EMO_OPEN``).
    """
    return re.compile(static_terminals()[name])
