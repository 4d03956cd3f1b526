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
Everything it emits parses strictly, except that a grammar cannot make ``order``
values unique (``CF111``).
"""

from __future__ import annotations

import json
import re
import re._constants as sre_c  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from lark import Lark, Token, Tree
from lark.grammar import NonTerminal, Terminal
from lark.load_grammar import load_grammar

from charfmt.body import grammar_text
from charfmt.diagnostics import CharfmtError
from charfmt.models import Vocabulary
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, TAGGED_TYPES, TagTable

TARGETS: Final = ("lark", "gbnf", "regex")

# --- the tree every target is written from --------------------------------------


@dataclass(frozen=True, slots=True)
class Lit:
    """Literal text."""

    text: str


@dataclass(frozen=True, slots=True)
class Cls:
    """A character class: code point ranges, or everything but them."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool

    def __contains__(self, ch: str) -> bool:
        inside = any(lo <= ord(ch) <= hi for lo, hi in self.ranges)
        return inside != self.negated


@dataclass(frozen=True, slots=True)
class Seq:
    """Items one after another."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Alt:
    """One of the items."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Rep:
    """``item`` repeated ``low`` to ``high`` times (``None``: unbounded)."""

    item: Node
    low: int
    high: int | None


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to another rule or terminal by name."""

    name: str


Node = Lit | Cls | Seq | Alt | Rep | Ref


class ExportError(CharfmtError):
    """The grammar uses something a target cannot express, or an unknown target was asked for."""


# --- reading regular expressions -------------------------------------------------------


@cache
def _whitespace() -> tuple[tuple[int, int], ...]:
    """The code points Python's ``\\s`` matches in a str pattern, as ranges."""
    points = [c for c in range(0x3001) if re.match(r"\s", chr(c))]
    return tuple(_ranges(points))


def _ranges(points: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for p in sorted(set(points)):
        if out and p == out[-1][1] + 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return out


def from_regex(pattern: str) -> Node:
    """Parse a regular expression (the subset the grammars use) into a ``Node``."""
    return simplify(_from_sre(sre_parse.parse(pattern)))


def simplify(node: Node) -> Node:
    """Flatten nested sequences and join adjacent literals (``"a" "m" "p"`` → ``"amp"``)."""
    if isinstance(node, Seq):
        items: list[Node] = []
        for item in (simplify(n) for n in node.items):
            for part in item.items if isinstance(item, Seq) else (item,):
                if isinstance(part, Lit) and items and isinstance(items[-1], Lit):
                    items[-1] = Lit(items[-1].text + part.text)
                else:
                    items.append(part)
        return items[0] if len(items) == 1 else Seq(tuple(items))
    if isinstance(node, Alt):
        return Alt(tuple(simplify(n) for n in node.items))
    if isinstance(node, Rep):
        item = simplify(node.item)
        # (x+)? and (x*)* are x*: one repetition is easier on every engine (and on
        # llguidance's GBNF reader, which cannot take "(x+)?").
        if isinstance(item, Rep) and item.high is None and item.low <= 1 and node.low == 0:
            return Rep(item.item, 0, None)
        return Rep(item, node.low, node.high)
    return node


def _from_sre(items: Any) -> Node:
    nodes = [_sre_item(op, arg) for op, arg in items]
    return nodes[0] if len(nodes) == 1 else Seq(tuple(nodes))


def _sre_item(op: Any, arg: Any) -> Node:
    if op is sre_c.LITERAL:
        return Lit(chr(arg))
    if op is sre_c.NOT_LITERAL:
        return Cls(((arg, arg),), True)
    if op is sre_c.ANY:
        return Cls(((10, 10),), True)
    if op is sre_c.IN:
        negated = False
        ranges: list[tuple[int, int]] = []
        for kind, value in arg:
            if kind is sre_c.NEGATE:
                negated = True
            elif kind is sre_c.LITERAL:
                ranges.append((value, value))
            elif kind is sre_c.RANGE:
                ranges.append(value)
            elif kind is sre_c.CATEGORY and value is sre_c.CATEGORY_SPACE:
                ranges.extend(_whitespace())
            else:
                raise ExportError(f"unsupported character class item {kind} {value}")
        return Cls(tuple(_merge(ranges)), negated)
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        low, high, sub = arg
        return Rep(_from_sre(sub), low, None if high is sre_c.MAXREPEAT else high)
    if op is sre_c.SUBPATTERN:
        return _from_sre(arg[-1])
    if op is sre_c.BRANCH:
        return Alt(tuple(_from_sre(branch) for branch in arg[1]))
    raise ExportError(f"unsupported regular expression construct {op}")


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


# --- inside a JSON string ------------------------------------------------------------

_JSON_ESCAPES: Final = (('"', '\\"'), ("\\", "\\\\"), ("/", "\\/"), ("\b", "\\b"), ("\f", "\\f"),
                        ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))  # fmt: skip
_NOT_RAW_IN_JSON: Final = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))


def json_encoded(node: Node) -> Node:
    """What ``node`` (over decoded text) looks like written inside a JSON string."""
    if isinstance(node, Lit):
        return Lit(json.dumps(node.text, ensure_ascii=False)[1:-1])
    if isinstance(node, Cls):
        # A class becomes: its characters that JSON writes raw, or the escapes of the others.
        if node.negated:
            raw = Cls(tuple(_merge([*node.ranges, *_NOT_RAW_IN_JSON])), True)
        else:
            raw = Cls(tuple(_subtract(node.ranges, _NOT_RAW_IN_JSON)), False)
        escapes: list[Node] = [Lit(esc) for ch, esc in _JSON_ESCAPES if ch in node]
        return Alt((raw, *escapes)) if escapes else raw
    if isinstance(node, Seq):
        return Seq(tuple(json_encoded(n) for n in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(json_encoded(n) for n in node.items))
    if isinstance(node, Rep):
        return Rep(json_encoded(node.item), node.low, node.high)
    return node


def _subtract(ranges: Iterable[tuple[int, int]], cut: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out = list(ranges)
    for clo, chi in cut:
        kept = []
        for lo, hi in out:
            if hi < clo or lo > chi:
                kept.append((lo, hi))
                continue
            if lo < clo:
                kept.append((lo, clo - 1))
            if hi > chi:
                kept.append((chi + 1, hi))
        out = kept
    return out


# --- shapes that constrained-decoding engines read fast ---------------------------------------


def _plain_star(node: Node) -> Cls | None:
    """``c*`` for a class ``c``: the class, else ``None``."""
    if isinstance(node, Rep) and isinstance(node.item, Cls) and node.low == 0 and node.high is None:
        return node.item
    return None


def _entity_run(node: Node) -> tuple[Node, Cls] | None:
    """``e c*`` (a flattened sequence): ``(e, c)``, else ``None``."""
    if isinstance(node, Seq) and len(node.items) >= 2:
        plain = _plain_star(node.items[-1])
        if plain is not None:
            head = node.items[:-1]
            return (head[0] if len(head) == 1 else Seq(head)), plain
    return None


def _unrolled(node: Node) -> tuple[Cls, Node] | None:
    """The unrolled loop ``c+ (e c*)* | (e c*)+`` (either order): its ``(c, e)``, else ``None``.

    body.lark writes TEXT so, for backtracking regex engines; its language is ``(c | e)+``.
    """
    if not (isinstance(node, Alt) and len(node.items) == 2):
        return None
    for lead, runs in (node.items, node.items[::-1]):
        if not (isinstance(runs, Rep) and runs.low == 1 and runs.high is None):
            continue
        run = _entity_run(runs.item)
        if run is None or not (isinstance(lead, Seq) and len(lead.items) == 2):
            continue
        first, rest = lead.items
        tail = _entity_run(rest.item) if isinstance(rest, Rep) and rest.low == 0 and rest.high is None else None
        if isinstance(first, Rep) and first.item == run[1] and first.low == 1 and first.high is None and tail == run:
            return run[1], run[0]
    return None


def _trimmed(node: Node) -> tuple[Cls, Cls] | None:
    """``n (m* n)?`` (no leading or trailing ``m``-but-not-``n``): its ``(n, m)``, else ``None``."""
    if not (isinstance(node, Seq) and len(node.items) == 2):
        return None
    edge, opt = node.items
    if not (
        isinstance(edge, Cls) and isinstance(opt, Rep) and (opt.low, opt.high) == (0, 1) and isinstance(opt.item, Seq)
    ):
        return None
    inner = opt.item.items
    if len(inner) == 2 and inner[1] == edge:
        middle = _plain_star(inner[0])
        if middle is not None:
            return edge, middle
    return None


def _cls_minus(a: Cls, b: Cls) -> Cls:
    """The characters of ``a`` that are not in ``b`` (both negated, or ``b`` negated)."""
    if a.negated and b.negated:
        # [^A] - [^B] = B - A
        return Cls(tuple(_subtract(b.ranges, a.ranges)), False)
    raise ExportError("unsupported class difference")


def lexeme_friendly(node: Node) -> Node:
    """The same language, written the way derivative-based engines (llguidance) precompute best.

    - text ``c+ (e c*)* | (e c*)+`` becomes ``(c | e)+``: one repeated item, so llguidance's
      slicer sees that every token of plain text characters fits and skips walking them;
    - a key ``n (m* n)?`` (inner but no outer blanks) becomes ``n+ (w m* n)?`` with ``w`` the
      blanks (``m`` less ``n``): inside its first word the rest is ``n* (w m* n)?``, a run of
      ``n`` (covered by the slice ``n+``), and after a space it is ``m* n`` (covered by the
      slice `` n+``), so the tokens that continue a key are not walked one by one.
    """
    text = _unrolled(node)
    if text is not None:
        plain, entity = text
        return Rep(Alt((plain, entity)), 1, None)
    key = _trimmed(node)
    if key is not None:
        edge, middle = key
        blank = _cls_minus(middle, edge)
        if not blank.ranges:
            return Rep(edge, 1, None)
        return Seq((Rep(edge, 1, None), Rep(Seq((blank, Rep(middle, 0, None), edge)), 0, 1)))
    return node


# --- the grammar as rules --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grammar:
    """Named rules (lower case) and terminals (upper case), and the start rule."""

    start: str
    rules: dict[str, Node]
    terminals: dict[str, Node]


def _ebnf(tree: Any) -> Node:
    """A Lark EBNF tree (from ``load_grammar``) as a ``Node``."""
    if isinstance(tree, (NonTerminal, Terminal)):
        return Ref(tree.name)
    if isinstance(tree, Token):
        raise ExportError(f"unexpected token {tree!r} in a rule")
    assert isinstance(tree, Tree)
    kids = [_ebnf(c) for c in tree.children if not isinstance(c, Token)]
    if tree.data == "expansions":
        return kids[0] if len(kids) == 1 else Alt(tuple(kids))
    if tree.data == "expansion":
        return kids[0] if len(kids) == 1 else Seq(tuple(kids))
    if tree.data == "value":
        return kids[0]
    if tree.data == "maybe":
        return Rep(kids[0], 0, 1)
    if tree.data == "expr":
        op = str(tree.children[1])
        low, high = {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(op, (None, None))
        if low is None:
            raise ExportError(f"unsupported repetition {op!r} in a rule")
        return Rep(kids[0], low, high)
    raise ExportError(f"unsupported grammar construct {tree.data!r}")


@cache
def _body_grammar(tags: TagTable = DEFAULT_TAGS) -> tuple[dict[str, Node], dict[str, Node]]:
    """The body grammar's rules and terminals (decoded level), read from the shipped grammar.

    A cue tag with a list of values gets its own terminal ``NAME_VALUE``, one of them, in
    place of ``KEY``: what a constrained model writes there is always one of the values.
    """
    text = grammar_text(tags)
    loaded, _ = load_grammar(text, "<body>", None, False)  # type: ignore[no-untyped-call]
    rules = {str(name): _ebnf(tree) for name, _params, tree, _opts in loaded.rule_defs}
    lark = Lark(text, parser="lalr", start=["c_body", "text_body"])
    terminals: dict[str, Node] = {}
    for t in lark.terminals:
        if t.pattern.type == "str":
            terminals[t.name] = Lit(t.pattern.value)
        else:
            terminals[t.name] = from_regex(t.pattern.value)
    for spec in tags:
        if spec.values is not None:
            value = f"{spec.terminal}_VALUE"
            terminals[value] = Alt(tuple(Lit(v) for v in spec.values))
            rules[spec.name] = Seq((Ref(f"{spec.terminal}_OPEN"), Ref(value), Ref(f"{spec.terminal}_CLOSE")))
    return rules, terminals


def _key(vocabulary: Vocabulary | None, default: Node) -> Node:
    if vocabulary is None:
        return default
    return Alt(tuple(Lit(k) for k in vocabulary.keys))


def reply_grammar(vocabulary: Vocabulary | None = None, tags: TagTable | None = None) -> Grammar:
    """The whole reply: the JSON envelope, with bodies in the tag language of ``tags`` inside JSON strings."""
    body_rules, body_terms = _body_grammar(DEFAULT_TAGS if tags is None else tags)
    terminals = {name: json_encoded(lexeme_friendly(node)) for name, node in body_terms.items()}
    terminals["KEY"] = json_encoded(_key(vocabulary, lexeme_friendly(body_terms["KEY"])))
    terminals["ORDER"] = from_regex(r"[1-9][0-9]*")
    terminals["WS"] = from_regex(r"[ \t\n\r]+")
    ws = Rep(Ref("WS"), 0, 1)

    def member(key: str, value: Node) -> Node:
        return Seq((Lit(json.dumps(key)), ws, Lit(":"), ws, value))

    def chat(types: list[str], body_rule: str) -> Node:
        kind = Alt(tuple(Lit(json.dumps(t)) for t in types)) if len(types) > 1 else Lit(json.dumps(types[0]))
        return Seq((
            Lit("{"), ws, member("type", kind), ws, Lit(","), ws, member("order", Ref("ORDER")), ws, Lit(","), ws,
            member("body", Seq((Lit('"'), Ref(body_rule), Lit('"')))), ws, Lit("}"),
        ))  # fmt: skip

    tagged = sorted(TAGGED_TYPES)
    plain = [t for t in CHAT_TYPES if t not in TAGGED_TYPES]
    rules: dict[str, Node] = {
        "reply": Seq(
            (
                ws,
                Lit("{"),
                ws,
                member(
                    "chats",
                    Seq(
                        (
                            Lit("["),
                            ws,
                            Rep(Seq((Ref("chat"), Rep(Seq((ws, Lit(","), ws, Ref("chat"))), 0, None))), 0, 1),
                            ws,
                            Lit("]"),
                        )
                    ),
                ),
                ws,
                Lit("}"),
                ws,
            )
        ),
        "chat": Alt((chat(tagged, "c_body"), chat(plain, "text_body"))),
        **body_rules,
    }
    return Grammar("reply", rules, terminals)


# --- writing it out ---------------------------------------------------------------------


def _inline(node: Node, rules: dict[str, Node], terminals: dict[str, Node], seen: tuple[str, ...] = ()) -> Node:
    """``node`` with every reference replaced by its definition (the language must be regular)."""
    if isinstance(node, Ref):
        if node.name in seen:
            raise ExportError(f"rule {node.name} is recursive: no regular expression for it")
        target = rules.get(node.name) or terminals[node.name]
        return _inline(target, rules, terminals, (*seen, node.name))
    if isinstance(node, Seq):
        return Seq(tuple(_inline(n, rules, terminals, seen) for n in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(_inline(n, rules, terminals, seen) for n in node.items))
    if isinstance(node, Rep):
        return Rep(_inline(node.item, rules, terminals, seen), node.low, node.high)
    return node


_SURROGATES: Final = ((0xD800, 0xDFFF),)


def _clip_surrogates(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    # Engines that work on UTF-8 bytes (Rust regex, llama.cpp, ECMA without the u flag)
    # cannot name surrogates; valid UTF-8 never holds one, so dropping them changes nothing.
    return _subtract(ranges, _SURROGATES)


@dataclass(frozen=True, slots=True)
class _Syntax:
    """How one target spells literals, classes, groups and repetition."""

    char: Callable[[int], str]
    literal: Callable[[str], str]
    keep_surrogates: bool
    group: tuple[str, str]
    separator: str
    alternation: str


def _write(node: Node, syn: _Syntax, names: Callable[[str], str]) -> str:
    if isinstance(node, Lit):
        return syn.literal(node.text)
    if isinstance(node, Cls):
        ranges = list(node.ranges) if syn.keep_surrogates else _clip_surrogates(node.ranges)
        inner = "".join(syn.char(lo) if lo == hi else f"{syn.char(lo)}-{syn.char(hi)}" for lo, hi in ranges)
        return f"[{'^' if node.negated else ''}{inner}]"
    if isinstance(node, Ref):
        return names(node.name)
    if isinstance(node, Seq):
        parts = [_atom(n, syn, names) if isinstance(n, Alt) else _write(n, syn, names) for n in node.items]
        return syn.separator.join(parts)
    if isinstance(node, Alt):
        return syn.alternation.join(_write(n, syn, names) for n in node.items)
    quant = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((node.low, node.high))
    if quant is None:
        quant = f"{{{node.low},{'' if node.high is None else node.high}}}"
    return _atom(node.item, syn, names) + quant


def _atom(node: Node, syn: _Syntax, names: Callable[[str], str]) -> str:
    text = _write(node, syn, names)
    simple = isinstance(node, (Cls, Ref)) or (isinstance(node, Lit) and len(node.text) == 1)
    return text if simple else f"{syn.group[0]}{text}{syn.group[1]}"


def _py_char(cp: int) -> str:
    if chr(cp).isalnum() and cp < 128:
        return chr(cp)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


_PY: Final = _Syntax(_py_char, re.escape, True, ("(?:", ")"), "", "|")
_RUST: Final = _Syntax(lambda cp: f"\\x{{{cp:x}}}", lambda s: "".join(_rust_lit(c) for c in s), False, ("(?:", ")"),
                       "", "|")  # fmt: skip
_ECMA: Final = _Syntax(lambda cp: f"\\u{cp:04x}" if cp < 0x10000 else _surrogate_pair(cp), re.escape, False,
                       ("(?:", ")"), "", "|")  # fmt: skip


def _rust_lit(c: str) -> str:
    return c if c.isalnum() and ord(c) < 128 else f"\\x{{{ord(c):x}}}"


def _surrogate_pair(cp: int) -> str:
    cp -= 0x10000
    return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"


def _gbnf_char(cp: int) -> str:
    return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"


def _gbnf_literal(text: str) -> str:
    out = "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else _gbnf_char(ord(c)) for c in text)
    return f'"{out}"'


_GBNF: Final = _Syntax(_gbnf_char, _gbnf_literal, False, ("(", ")"), " ", " | ")


def _lark_literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


_LARK_RULES: Final = _Syntax(lambda cp: f"\\x{{{cp:x}}}", _lark_literal, False, ("(", ")"), " ", " | ")


def body_regex(
    kind: str = "C", *, vocabulary: Vocabulary | None = None, flavor: str = "python", tags: TagTable | None = None
) -> str:
    """An anchored regular expression for a decoded body of chat type ``kind`` (tags of ``tags``).

    ``flavor``: ``python`` (``re``), or ``ecma`` (JSON Schema ``pattern``).
    """
    rules, terminals = _body_grammar(DEFAULT_TAGS if tags is None else tags)
    terminals = {**terminals, "KEY": _key(vocabulary, terminals["KEY"])}
    start = "c_body" if kind in TAGGED_TYPES else "text_body"
    node = _inline(Ref(start), rules, terminals)
    if flavor == "python":
        # \Z, not $: Python's $ also matches before a final newline, which strict parsing rejects.
        return f"^(?:{_write(node, _PY, str)})\\Z"
    # ECMA's $ (without the m flag) matches only at the very end.
    return f"^(?:{_write(node, _ECMA, str)})$"


def _lark_target(g: Grammar) -> str:
    lines = [
        '// charfmt reply grammar for llguidance (Lark syntax), generated by charfmt.grammar("lark").',
        "// The whole reply: the JSON envelope, each body a JSON string in the tag language.",
        "%llguidance {}",
        "",
        f"start: {g.start}",
    ]
    for name, node in g.rules.items():
        lines.append(f"{name}: {_write(node, _LARK_RULES, str)}")
    for name, node in g.terminals.items():
        if isinstance(node, Lit):
            lines.append(f"{name}: {_lark_literal(node.text)}")
        else:
            lines.append(f"{name}: /{_write(node, _RUST, str)}/")
    return "\n".join(lines) + "\n"


def _raw_in_json(cls: Cls) -> Cls:
    """The characters of ``cls`` that a JSON string holds unescaped."""
    encoded = json_encoded(cls)
    raw = encoded.items[0] if isinstance(encoded, Alt) else encoded
    assert isinstance(raw, Cls)
    return raw


def llguidance_slices() -> list[str]:
    """Tokenizer slices for llguidance that fit the exported grammars' text and key lexemes.

    llguidance skips walking the tokens of a *slice* (a regular expression) wherever every
    one of them is allowed. Its default slices are JSON string characters, which include
    ``<`` and ``&``; charfmt's text excludes them raw, so no default slice ever fits and
    every mask in a body walks the whole vocabulary. These slices are a key's non-blank
    characters (alone and after a space: the tokens that go on with a key), the text's own
    characters, then llguidance's defaults, so JSON schemas keep theirs. Build the tokenizer once with them::

        llguidance.LLTokenizer(..., slices=charfmt.export.llguidance_slices())
        llguidance.tiktoken.lltokenizer_from_encoding(enc, slices=charfmt.export.llguidance_slices())
    """
    _, terminals = _body_grammar()
    text = _unrolled(terminals["TEXT"])
    key = _trimmed(terminals["KEY"])
    if text is None or key is None:
        raise ExportError("the body grammar's TEXT or KEY no longer has the shape slices are derived from")
    if " " in key[0] or " " not in key[1]:
        raise ExportError("the body grammar's KEY no longer allows inner spaces only")
    text_chars = _write(_raw_in_json(text[0]), _RUST, str)
    key_chars = _write(_raw_in_json(key[0]), _RUST, str)
    json_chars = _write(Cls(tuple(_merge([*_NOT_RAW_IN_JSON, (0x7F, 0x7F)])), True), _RUST, str)
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


def _gbnf_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9-]", "-", name).strip("-").lower() or "x"


def _gbnf_target(g: Grammar) -> str:
    terminal_names = {_gbnf_name(n) for n in g.terminals}

    def name(n: str) -> str:
        base = _gbnf_name(n)
        return f"t-{base}" if n in g.terminals else (f"r-{base}" if base in terminal_names else base)

    lines = [
        '# charfmt reply grammar for llama.cpp (GBNF), generated by charfmt.grammar("gbnf").',
        f"root ::= {name(g.start)}",
    ]
    for n, node in [*g.rules.items(), *g.terminals.items()]:
        lines.append(f"{name(n)} ::= {_write(node, _GBNF, name)}")
    return "\n".join(lines) + "\n"


def grammar(target: str, *, vocabulary: Vocabulary | None = None, tags: TagTable | None = None) -> str:
    """The reply format as a grammar for a constrained-decoding engine.

    ``lark``: llguidance's Lark syntax for the whole reply (llguidance, vLLM
    ``structured_outputs={"grammar": ...}``, SGLang, outlines ``CFG``); ``gbnf``: the
    same for llama.cpp; ``regex``: one decoded ``C`` body, for engines that take only
    a regular expression. With ``vocabulary``, the emotion tag holds only its keys;
    ``tags``: the tag table (``None``: ``DEFAULT_TAGS``), a cue with values holds one of them.
    """
    if target == "lark":
        return _lark_target(reply_grammar(vocabulary, tags))
    if target == "gbnf":
        return _gbnf_target(reply_grammar(vocabulary, tags))
    if target == "regex":
        return body_regex("C", vocabulary=vocabulary, tags=tags)
    raise ExportError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
