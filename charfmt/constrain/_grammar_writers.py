"""The grammar writers: a regex-IR tree printed in each target's syntax (Lark, GBNF, Python and ECMA regex).

``write`` prints one ``Node`` with a target's ``Syntax`` (how it spells literals, classes,
groups and repetition); ``lark_text`` and ``gbnf_text`` print a whole ``Grammar``, each
after the rewrites its engines need (the same language, written the way they read best).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from charfmt.constrain._regex_ir import Alt, Cls, Lit, Node, Ref, Seq, merge_ranges, rebuild, subtract_ranges
from charfmt.constrain._reply_rules import Grammar

_SURROGATES: Final = ((0xD800, 0xDFFF),)


def _clip_surrogates(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    # Engines that work on UTF-8 bytes (Rust regex, llama.cpp, ECMA without the u flag)
    # cannot name surrogates; valid UTF-8 never holds one, so dropping them changes nothing.
    return subtract_ranges(ranges, _SURROGATES)


@dataclass(frozen=True, slots=True)
class Syntax:
    """How one target spells literals, classes, groups and repetition."""

    char: Callable[[int], str]
    literal: Callable[[str], str]
    keep_surrogates: bool
    group: tuple[str, str]
    separator: str
    alternation: str
    bounded: Callable[[int, int | None], str] = lambda low, high: f"{{{low},{'' if high is None else high}}}"
    """The suffix of ``x`` repeated ``low`` to ``high`` times (``None``: unbounded)."""


def write(node: Node, syn: Syntax, names: Callable[[str], str]) -> str:
    if isinstance(node, Lit):
        return syn.literal(node.text)
    if isinstance(node, Cls):
        ranges = list(node.ranges) if syn.keep_surrogates else _clip_surrogates(node.ranges)
        inner = "".join(syn.char(lo) if lo == hi else f"{syn.char(lo)}-{syn.char(hi)}" for lo, hi in ranges)
        return f"[{'^' if node.negated else ''}{inner}]"
    if isinstance(node, Ref):
        return names(node.name)
    if isinstance(node, Seq):
        parts = [_atom(n, syn, names) if isinstance(n, Alt) else write(n, syn, names) for n in node.items]
        return syn.separator.join(p for p in parts if p)  # a bounded x{0,0} writes nothing
    if isinstance(node, Alt):
        return syn.alternation.join(write(n, syn, names) for n in node.items)
    if node.high == 0:
        return ""  # x{0,0}: nothing (llguidance's Lark rejects the range)
    if (node.low, node.high) == (1, 1):
        return _atom(node.item, syn, names)
    quant = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((node.low, node.high))
    atom = _atom(node.item, syn, names)
    if quant is None:
        quant = syn.bounded(node.low, node.high)
        if node.high is None and not quant:  # the target has no "at least n": x ~ n x*
            return f"{atom} ~ {node.low} {atom}*"
    return atom + quant


def _atom(node: Node, syn: Syntax, names: Callable[[str], str]) -> str:
    text = write(node, syn, names)
    simple = isinstance(node, (Cls, Ref)) or (isinstance(node, Lit) and len(node.text) == 1)
    return text if simple else f"{syn.group[0]}{text}{syn.group[1]}"


def _py_char(cp: int) -> str:
    if chr(cp).isalnum() and cp < 128:
        return chr(cp)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


_PY_CONTROLS: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _py_lit(text: str) -> str:
    # re.escape writes a newline as a backslash and a raw newline: the regex would span lines.
    # \n, \r and \t read the same in Python re and ECMA-262, so the regex prints on one line.
    return "".join(_PY_CONTROLS.get(c) or re.escape(c) for c in text)


PYTHON: Final = Syntax(_py_char, _py_lit, True, ("(?:", ")"), "", "|")


def _fixed_width_char(cp: int) -> str:
    # \uXXXX / \UXXXXXXXX, never \xXX: XGrammar reads \x greedily (\x26a is U+026A, not "&a"),
    # while Rust regex (llguidance), llama.cpp and XGrammar all read these two at fixed width.
    return f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"


def _rust_lit(c: str) -> str:
    return c if c.isalnum() and ord(c) < 128 else _fixed_width_char(ord(c))


RUST: Final = Syntax(_fixed_width_char, lambda s: "".join(_rust_lit(c) for c in s), False, ("(?:", ")"), "", "|")

# ECMA-262 in unicode mode (what ajv and browsers compile ``pattern`` with) allows an identity escape
# only for syntax characters and "/": "\&" or "\#" is a SyntaxError there. Everything else is
# written raw (printable ASCII, and astral characters, which also keeps Python's re, where
# "\u{...}" does not exist, matching the same code point) or as a four-digit \uXXXX.
_ECMA_SYNTAX: Final = frozenset("^$\\.*+?()[]{}|/")


def _ecma_lit(c: str) -> str:
    cp = ord(c)
    if c in _ECMA_SYNTAX:
        return "\\" + c
    if 0x20 <= cp < 0x7F or cp >= 0x10000:
        return c
    return f"\\u{cp:04x}"


def _ecma_char(cp: int) -> str:
    return f"\\u{cp:04x}" if cp < 0x10000 else chr(cp)


ECMA: Final = Syntax(_ecma_char, lambda s: "".join(_ecma_lit(c) for c in s), False, ("(?:", ")"), "", "|")


def _raw_json_lit(c: str) -> str:
    # ECMA, less the escaped '/': llama.cpp's converter copies "\/" into a GBNF literal, which it cannot read.
    return "/" if c == "/" else _ecma_lit(c)


RAW_JSON: Final = Syntax(_ecma_char, lambda s: "".join(_raw_json_lit(c) for c in s), False, ("(", ")"), "", "|")
"""A JSON-schema ``pattern`` over the raw text of a JSON string, as XGrammar, llama.cpp's JSON-schema
converter (no ``(?:``: plain groups) and Outlines (Rust regex) all read it (``schema.raw_pattern``)."""


def _gbnf_char(cp: int) -> str:
    # In a class an escape is always followed by "\", "-" or "]", so XGrammar's greedy \x cannot
    # run on; \xHH (not \u00HH) also keeps llguidance's gbnf_to_lark converter reading it.
    # An astral character is written raw (UTF-8, which llama.cpp and XGrammar read): the
    # converter drops \U's leading zeros (\U10FFFF), which Rust regex then refuses.
    return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}" if cp < 0x10000 else chr(cp)


_GBNF_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _gbnf_literal(text: str) -> str:
    # \" and \\, never \x22: XGrammar reads \x greedily ("\x22c" is one escape, U+22C). Other
    # text is written raw (llama.cpp and XGrammar read UTF-8); a control character becomes \xHH,
    # and the literal is split after it where a hex digit follows.
    parts: list[str] = []
    out = ""
    for i, c in enumerate(text):
        if c in _GBNF_ESCAPES:
            out += _GBNF_ESCAPES[c]
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out += f"\\x{ord(c):02X}"
            if i + 1 < len(text) and text[i + 1] in "0123456789abcdefABCDEF":
                parts.append(out)
                out = ""
        else:
            out += c
    parts.append(out)
    return " ".join(f'"{p}"' for p in parts)


GBNF: Final = Syntax(_gbnf_char, _gbnf_literal, False, ("(", ")"), " ", " | ")


def _lark_literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _lark_bounded(low: int, high: int | None) -> str:
    # Lark's own repetition syntax ("x ~ 2..5"), which the lark package, llguidance and XGrammar
    # all read; "x{2,5}" in a rule is llguidance's alone.
    if high is None:
        return ""
    return f" ~ {low}" if low == high else f" ~ {low}..{high}"


LARK_RULES: Final = Syntax(_fixed_width_char, _lark_literal, False, ("(", ")"), " ", " | ", _lark_bounded)

# What a regular expression gives a meaning to (in a class or outside one), in Python's re
# and Rust's regex alike; each is written as an identity escape (a backslash before it).
_REGEX_META: Final = frozenset("\\^$.|?*+()[]{}-")


def _lark_regex_char(cp: int) -> str:
    # The lark package unescapes \uXXXX in a /regex/ before Python's re compiles it, so
    # "\u005C" reaches re as a bare backslash that escapes what follows (and "\u002E" as "."
    # that matches anything); Rust regex (llguidance) and XGrammar read \uXXXX themselves.
    # A metacharacter is therefore written as an identity escape, which all of them read as
    # the character; everything else as \uXXXX, the character itself once unescaped.
    c = chr(cp)
    if c in _REGEX_META:
        return "\\" + c
    return _rust_lit(c)


LARK_REGEX: Final = Syntax(
    _lark_regex_char, lambda s: "".join(_lark_regex_char(ord(c)) for c in s), False, ("(?:", ")"), "", "|"
)


def lark_text(g: Grammar) -> str:
    lines = [
        '// charfmt reply grammar in Lark syntax (llguidance, XGrammar), generated by charfmt.grammar("lark").',
        "// The whole reply: the JSON envelope, each body a JSON string in the tag language.",
        "",
        f"start: {g.start}",
    ]
    for name, node in g.rules.items():
        lines.append(f"{name}: {write(node, LARK_RULES, str)}")
    for name, node in g.terminals.items():
        if isinstance(node, Lit):
            lines.append(f"{name}: {_lark_literal(node.text)}")
        else:
            lines.append(f"{name}: /{write(_longest_first(node), LARK_REGEX, str)}/")
    return "\n".join(lines) + "\n"


def _longest_first(node: Node) -> Node:
    """``node`` with each choice of literals ordered longest first (same language).

    The lark package's lexer takes the first alternative Python's re matches, not the longest:
    with keys ``joy|joyful`` it would read "joy" out of "joyful" and fail at "ful".
    """
    node = rebuild(node, _longest_first)
    if isinstance(node, Alt) and all(isinstance(n, Lit) for n in node.items):
        return Alt(tuple(sorted(node.items, key=lambda n: -len(n.text) if isinstance(n, Lit) else 0)))
    return node


def _gbnf_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9-]", "-", name).strip("-").lower() or "x"


def gbnf_text(g: Grammar) -> str:
    terminal_names = {_gbnf_name(n) for n in g.terminals}

    def name(n: str) -> str:
        base = _gbnf_name(n)
        return f"t-{base}" if n in g.terminals else (f"r-{base}" if base in terminal_names else base)

    lines = [
        '# charfmt reply grammar for llama.cpp (GBNF), generated by charfmt.grammar("gbnf").',
        f"root ::= {name(g.start)}",
    ]
    for n, node in [*g.rules.items(), *g.terminals.items()]:
        lines.append(f"{name(n)} ::= {write(positive_beyond_ascii(_one_escape(node)), GBNF, name)}")
    return "\n".join(lines) + "\n"


def _one_escape(node: Node) -> Node:
    """``node`` with each text character's JSON escapes as one alternative: ``c | "\\" [..]``.

    The same language; llama.cpp's sampler keeps one parse stack per alternative and checks
    each against every token of the vocabulary, so ``c | "\\\"" | "\\\\" | ...`` (seven stacks)
    costs over three times ``c | "\\" [..]`` (two) at every step of a text.
    """
    node = rebuild(node, _one_escape)
    if isinstance(node, Alt):
        items = node.items
        escapes = [i for i in items[1:] if isinstance(i, Lit) and len(i.text) == 2 and i.text[0] == "\\"]
        if isinstance(items[0], Cls) and len(escapes) == len(items) - 1 and len(escapes) > 1:
            seconds = Cls(tuple(merge_ranges((ord(e.text[1]), ord(e.text[1])) for e in escapes)), False)
            return Alt((items[0], Seq((Lit("\\"), seconds))))
    return node


def all_positive(node: Node) -> Node:
    """``node`` with every negated class written as its complement (the same language).

    For a JSON-schema ``pattern`` over raw JSON text: a class of the text then names characters up to
    U+10FFFF, and XGrammar lowers such a pattern to its own grammar, which reads the raw text (a
    pattern it hands to its regex lexer instead admits no JSON escape: no ``\\n``, no ``\\"``).
    """
    if isinstance(node, Cls) and node.negated:
        return Cls(tuple(subtract_ranges([(0, 0x10FFFF)], merge_ranges(node.ranges))), False)
    return rebuild(node, all_positive)


def positive_beyond_ascii(node: Node) -> Node:
    """``node`` with each negated class that excludes a non-ASCII character written as its complement.

    llama.cpp matches a token that ends inside a UTF-8 sequence against the code points that
    sequence could still become; for a negated class it rejects the token when any of them is
    excluded (after ``>``, the byte 0xC2 of ``¤`` is refused because U+0085 and U+00A0 are
    not keys). A positive class is checked by overlap, which is right for a partial character.
    """
    if isinstance(node, Cls) and node.negated and any(hi > 0x7F for _lo, hi in node.ranges):
        return Cls(tuple(subtract_ranges([(0, 0x10FFFF)], merge_ranges(node.ranges))), False)
    return rebuild(node, positive_beyond_ascii)
