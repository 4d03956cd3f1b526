"""The strict body reader's public door: ``charfmt.body.parse_body`` (``docs/GRAMMARS.md``) and its companions.

For users only: nothing inside the package imports this module. The reader is
``charfmt._strict`` (``body``: the regex fast path and the entry points; ``lalr``: the LALR
driver; ``diagnosis``: why a body is invalid), the grammar ``charfmt._grammar``. Bodies come out
as ``(tag, text)`` tuples with entities decoded; errors as :class:`BodyError` with offsets into
the decoded body string.
"""

from __future__ import annotations

from charfmt._grammar.lexical import BadEntity, decode_text
from charfmt._grammar.rules import element_rules, full_grammar_text, grammar_text
from charfmt._grammar.static import terminal_regex
from charfmt._strict.diagnosis import BodyError
from charfmt._strict.elements import Element, FastReader, fast_reader, parse_batch, parse_body
from charfmt._strict.lalr import Driver, Reject

__all__ = [
    "BadEntity",
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
