"""Old home of the body grammar's loading, now ``charfmt._grammar``: the names its importers still read from here.

``python -m charfmt._tables`` still rewrites the cached LALR tables (now
``charfmt/_grammar/_lalr.py``; see :mod:`charfmt._grammar.tables`). The grammar's text
and terminals are :mod:`charfmt._grammar.static` and :mod:`charfmt._grammar.rules`;
the named entities :mod:`charfmt._grammar.lexical`.
"""

from __future__ import annotations

from charfmt._grammar.lexical import NAMED_ENTITIES
from charfmt._grammar.static import terminal_regex


def main() -> int:
    """Rewrite the cached LALR tables (``python -m charfmt._tables``)."""
    from charfmt._grammar.tables import main as rewrite  # noqa: PLC0415 (only rewriting needs Lark)

    return rewrite()


__all__ = ["NAMED_ENTITIES", "main", "terminal_regex"]

if __name__ == "__main__":
    raise SystemExit(main())
