"""``grammar``: the reply format as a grammar for constrained decoding, derived from the shipped one.

Nothing here restates the tag language. The body rules come from ``grammars/body.lark``
(read with Lark's own grammar loader), the tag elements from the tag table, and the
TEXT/KEY terminals from their regular expressions, parsed into a small tree (``Node``)
that each target writes in its own syntax:

- ``lark``: llguidance's Lark dialect, the whole reply (JSON envelope, with each body
  as a JSON string whose content follows the tag language);
- ``gbnf``: the same for llama.cpp;
- ``regex``: a Python ``re`` pattern for one decoded ``C`` body.

What a constrained model can emit is a subset of what ``charfmt.parse`` accepts:
keys in the order ``type``, ``order``, ``body``; JSON string escapes ``\\" \\\\ \\/ \\b
\\f \\n \\r \\t`` but no ``\\uXXXX``; emotion keys spelled exactly as in the vocabulary.
Everything it emits parses strictly; with bounds (``max_chats``) the k-th chat is of order k, so
orders are unique. Without bounds a grammar cannot make ``order`` values unique (``CF111``).

The work is done by four private modules, each one job: ``_regex_ir`` (the tree, read from
regular expressions), ``_reply_rules`` (the grammar as rules), ``_grammar_bounds`` (length
bounds) and ``_grammar_writers`` (each target's syntax). This module is their public face.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Unpack

from charfmt.constrain._grammar_bounds import (
    SHORT_ROLES,
    Bounds,
    bytes_per_char,
    example_shape,
    learned_lengths,
    max_length,
    max_reply_tokens,
    measure_tokens_per_char,
    plan_bounds,
    resolve_bounds,
    speech_of,
)
from charfmt.constrain._grammar_writers import ECMA, PYTHON, RUST, gbnf_text, lark_text, write
from charfmt.constrain._regex_ir import (
    NOT_RAW_IN_JSON,
    Alt,
    Cls,
    ExportError,
    Lit,
    Node,
    Ref,
    Rep,
    Seq,
    from_regex,
    inline,
    json_encoded,
    lexeme_friendly,
    merge_ranges,
    raw_in_json,
    simplify,
    trimmed,
    unrolled,
)
from charfmt.constrain._reply_constraints import (
    DEFAULT_TOKENS_PER_CHAR,
    ReplyConstraints,
    Speakers,
    constrains,
    constraints_of,
)
from charfmt.constrain._reply_rules import Grammar, body_grammar, bounded_body, key_node, reply_grammar
from charfmt.models import Vocabulary
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TagTable

__all__ = [
    "DEFAULT_TOKENS_PER_CHAR",
    "SHORT_ROLES",
    "TARGETS",
    "Alt",
    "Bounds",
    "Cls",
    "ExportError",
    "Grammar",
    "Lit",
    "Node",
    "Ref",
    "Rep",
    "Seq",
    "body_regex",
    "bytes_per_char",
    "example_shape",
    "from_regex",
    "gbnf_text",
    "grammar",
    "json_encoded",
    "lark_text",
    "learned_lengths",
    "lexeme_friendly",
    "llguidance_slices",
    "max_length",
    "max_reply_tokens",
    "measure_tokens_per_char",
    "plan_bounds",
    "reply_grammar",
    "resolve_bounds",
    "simplify",
    "speech_of",
]

TARGETS: Final = ("lark", "gbnf", "regex")

# Private names charfmt.constrain.engines and charfmt.chat still import from here, under their old spelling.
_ECMA = ECMA
_body_grammar = body_grammar
_bounded_body = bounded_body
_gbnf_target = gbnf_text
_inline = inline
_key = key_node
_lark_target = lark_text
_write = write


def body_regex(
    kind: str = "C",
    *,
    vocabulary: Vocabulary | None = None,
    flavor: str = "python",
    tags: TagTable | None = None,
    bounds: Bounds | None = None,
) -> str:
    """An anchored regular expression for a decoded body of chat type ``kind`` (tags of ``tags``).

    ``flavor``: ``python`` (``re``), or ``ecma`` (JSON Schema ``pattern``, valid ECMA-262 in
    unicode mode: ajv, browsers). ``bounds``: the lengths of ``Bounds`` written in.
    """
    table = DEFAULT_TAGS if tags is None else tags
    rules, terminals = bounded_body(*body_grammar(table), bounds, table)
    terminals = {**terminals, "KEY": key_node(vocabulary, terminals["KEY"])}
    start = "c_body" if kind in TAGGED_TYPES else "text_body"
    node = inline(Ref(start), rules, terminals)
    if flavor not in ("python", "ecma"):
        raise ExportError(f"unknown regex flavor {flavor!r}; expected python or ecma")
    if flavor == "python":
        # \Z, not $: Python's $ also matches before a final newline, which strict parsing rejects.
        return f"^(?:{write(node, PYTHON, str)})\\Z"
    # ECMA's $ (without the m flag) matches only at the very end.
    return f"^(?:{write(node, ECMA, str)})$"


def llguidance_slices() -> list[str]:
    """Tokenizer slices for llguidance that fit the exported grammars' text and key lexemes.

    llguidance skips walking the tokens of a *slice* (a regular expression) wherever every
    one of them is allowed. Its default slices are JSON string characters, which include
    ``<`` and ``&``; charfmt's text excludes them raw, so no default slice ever fits and
    every mask in a body walks the whole vocabulary. These slices are a key's non-blank
    characters (alone and after a space: the tokens that go on with a key), the text's own
    characters, then llguidance's defaults, so JSON schemas keep theirs. Build the tokenizer once with them::

        llguidance.LLTokenizer(..., slices=charfmt.constrain.export.llguidance_slices())
        llguidance.tiktoken.lltokenizer_from_encoding(enc, slices=charfmt.constrain.export.llguidance_slices())
    """
    _, terminals = body_grammar()
    text = unrolled(terminals["TEXT"])
    key = trimmed(terminals["KEY"])
    if text is None or key is None:
        raise ExportError("the body grammar's TEXT or KEY no longer has the shape slices are derived from")
    if " " in key[0] or " " not in key[1]:
        raise ExportError("the body grammar's KEY no longer allows inner spaces only")
    text_chars = write(raw_in_json(text[0]), RUST, str)
    key_chars = write(raw_in_json(key[0]), RUST, str)
    json_chars = write(Cls(tuple(merge_ranges([*NOT_RAW_IN_JSON, (0x7F, 0x7F)])), True), RUST, str)
    return [
        r"[\x20\x0A\x0D\x09]+",
        f"{key_chars}+",
        f"\\x20{key_chars}+",
        f"{text_chars}{{1,10}}",
        f"{text_chars}{{1,30}}",
        f"{text_chars}+",
        f"{json_chars}{{1,10}}",
        f"{json_chars}{{1,30}}",
        f"{json_chars}+",
    ]


@constrains
def grammar(target: str, *, speakers: Speakers | None = None, **constraints: Unpack[ReplyConstraints]) -> str:
    """The reply format as a grammar for a constrained-decoding engine.

    ``lark``: Lark syntax for the whole reply, read by llguidance (vLLM
    ``structured_outputs={"grammar": ...}``, SGLang, outlines ``CFG``) and by XGrammar
    (``GrammarCompiler.compile_lark``); ``gbnf``: the same for llama.cpp and XGrammar
    (``compile_grammar``); ``regex``: one decoded ``C`` body, for engines that take only
    a regular expression. With ``vocabulary``, the emotion tag holds only its keys;
    ``tags``: the tag table (``None``: ``DEFAULT_TAGS``), a cue with values holds one of them.
    ``character``: a character's vocabulary and tags, or a scene's cast (each ``C`` chat names
    a speaker, and its emotion is one of that speaker's keys).

    Length bounds (see ``Bounds``): ``max_chars`` per element content, ``max_chats`` per
    reply, or ``max_tokens``, a token budget the longest allowed reply fits in, planned by
    ``plan_bounds`` (the engine ``charfmt chat`` and ``serve`` use): speech required, each role
    as long as the character's examples show, speech the rest, counted at ``tokens_per_char``.
    ``speakers``: a scene's cast (``charfmt.prompt.scene``): each ``C`` chat names one of them; a mapping
    gives each its own vocabulary.
    """
    c = constraints_of("grammar", constraints, speakers)
    bounds = resolve_bounds(speakers=c.speakers, **constraints)
    if target == "lark":
        return lark_text(reply_grammar(c.vocabulary, c.tags, bounds=bounds, speakers=c.speakers))
    if target == "gbnf":
        return gbnf_text(reply_grammar(c.vocabulary, c.tags, bounds=bounds, speakers=c.speakers))
    if target == "regex":  # (one body: a scene's speaker is not in it, so its emotion is any of the cast's keys)
        return body_regex("C", vocabulary=c.vocabulary or _cast_keys(c.speakers), tags=c.tags, bounds=bounds)
    raise ExportError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")


def _cast_keys(speakers: Speakers | None) -> Vocabulary | None:
    """Every emotion key of a scene's speakers (``None``: no speaker has a vocabulary: any key)."""
    if not isinstance(speakers, Mapping) or not any(v is not None for v in speakers.values()):
        return None
    keys = dict.fromkeys(key for v in speakers.values() if v is not None for key in v.keys)
    return Vocabulary.of(*keys)
