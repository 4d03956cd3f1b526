"""The complete body grammar of a tag table: ``grammars/body.lark`` plus element rules generated from the table.

The static part (:mod:`charfmt._grammar.static`) holds the terminals; this module writes
one rule per tag (``emo: EMO_OPEN KEY EMO_CLOSE``), the internal rule that parses every
body of a reply in one call, and builds Lark's parser of the result (only an invalid body's
diagnosis, an edited grammar or a custom tag table needs it).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Final

from charfmt._grammar.static import static_text
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from lark import Lark

_CONTENT: Final[dict[str, tuple[str, str]]] = {"key": ("KEY", ""), "text": ("TEXT", "?")}
"""What stands between a tag's opening and closing: by the tag's content kind, the
terminal and how many (``?``: it may be empty)."""

C_MARK: Final = "\x1c"
TEXT_MARK: Final = "\x1d"
# Internal batch rule: every body of one reply in one LALR call. The marks are C0
# controls, which TEXT and KEY exclude, so a body can never contain one unnoticed
# (a body that did would change the count of results, which the caller checks).
_BATCH_RULES: Final = f"""
// internal: all bodies of one reply in one call
bodies: (_C_MARK c_body | _TEXT_MARK text_body)*
_C_MARK: "\\x{ord(C_MARK):02x}"
_TEXT_MARK: "\\x{ord(TEXT_MARK):02x}"
"""

STARTS: Final = ("c_body", "text_body", "bodies")
"""The grammar's start rules: a ``C`` body, an ``I``/``E`` body, every body of a reply (internal)."""


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
    return static_text() + element_rules(tags)


def generated_text(tags: TagTable = DEFAULT_TAGS) -> str:
    """What the parser's grammar adds to ``body.lark``: the element rules and the internal batch rule."""
    return element_rules(tags) + _BATCH_RULES


def full_grammar_text(tags: TagTable = DEFAULT_TAGS) -> str:
    """What the parser is built from: :func:`grammar_text` plus the internal batch rule."""
    return grammar_text(tags) + _BATCH_RULES


@cache
def lark_parser(tags: TagTable = DEFAULT_TAGS) -> Lark:
    """Lark's LALR parser of the grammar of ``tags`` (the source of the tables; the explainer of invalid bodies)."""
    from lark import Lark  # noqa: PLC0415 (loaded only where a body needs explaining, or tables building)

    return Lark(full_grammar_text(tags), parser="lalr", lexer="contextual", start=list(STARTS))
