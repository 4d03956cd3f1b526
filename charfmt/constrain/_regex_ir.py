"""The regex IR: the small tree (``Node``) every grammar target is written from, and rewrites that keep its language.

A ``Node`` is read from a Python regular expression (the subset the grammars use) with
``re._parser``, or built from grammar rules. The rewrites here change how a language is
written, never what it holds: JSON-encoding (what a decoded text looks like inside a JSON
string), shapes derivative-based engines read fast (``lexeme_friendly``), and inlining
references. Every rewrite walks the tree with ``rebuild``.
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

from charfmt._grammar.lexical import JSON_ESCAPES
from charfmt.diagnostics import CharfmtError

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


def rebuild(node: Node, step: Callable[[Node], Node]) -> Node:
    """``node`` with ``step`` applied to each of its items (a leaf as it is): the one walk of every rewrite.

    A rewrite handles the nodes it changes and hands the rest to ``rebuild`` with itself as
    ``step``, so it reaches the whole tree.
    """
    if isinstance(node, Seq):
        return Seq(tuple(step(n) for n in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(step(n) for n in node.items))
    if isinstance(node, Rep):
        return Rep(step(node.item), node.low, node.high)
    return node


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
    node = rebuild(node, simplify)
    if isinstance(node, Seq):
        items: list[Node] = []
        for item in node.items:
            for part in item.items if isinstance(item, Seq) else (item,):
                if isinstance(part, Lit) and items and isinstance(items[-1], Lit):
                    items[-1] = Lit(items[-1].text + part.text)
                else:
                    items.append(part)
        return items[0] if len(items) == 1 else Seq(tuple(items))
    # (x+)? and (x*)* are x*: one repetition is easier on every engine (and on
    # llguidance's GBNF reader, which cannot take "(x+)?").
    if isinstance(node, Rep) and node.low == 0:
        item = node.item
        if isinstance(item, Rep) and item.high is None and item.low <= 1:
            return Rep(item.item, 0, None)
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
        return Cls(tuple(merge_ranges(ranges)), negated)
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        low, high, sub = arg
        return Rep(_from_sre(sub), low, None if high is sre_c.MAXREPEAT else high)
    if op is sre_c.SUBPATTERN:
        return _from_sre(arg[-1])
    if op is sre_c.BRANCH:
        return Alt(tuple(_from_sre(branch) for branch in arg[1]))
    raise ExportError(f"unsupported regular expression construct {op}")


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


# --- inside a JSON string ------------------------------------------------------------

_JSON_ESCAPES: Final = tuple((ch, "\\" + letter) for letter, ch in JSON_ESCAPES.items())
"""Each character a JSON string may escape with one letter, and its escape (``lexical.JSON_ESCAPES``)."""
NOT_RAW_IN_JSON: Final = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))


def json_encoded(node: Node) -> Node:
    """What ``node`` (over decoded text) looks like written inside a JSON string."""
    if isinstance(node, Lit):
        return Lit(json.dumps(node.text, ensure_ascii=False)[1:-1])
    if isinstance(node, Cls):
        # A class becomes: its characters that JSON writes raw, or the escapes of the others.
        if node.negated:
            raw = Cls(tuple(merge_ranges([*node.ranges, *NOT_RAW_IN_JSON])), True)
        else:
            raw = Cls(tuple(subtract_ranges(node.ranges, NOT_RAW_IN_JSON)), False)
        escapes: list[Node] = [Lit(esc) for ch, esc in _JSON_ESCAPES if ch in node]
        return Alt((raw, *escapes)) if escapes else raw
    return rebuild(node, json_encoded)


def subtract_ranges(ranges: Iterable[tuple[int, int]], cut: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
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


def raw_in_json(cls: Cls) -> Cls:
    """The characters of ``cls`` that a JSON string holds unescaped."""
    encoded = json_encoded(cls)
    raw = encoded.items[0] if isinstance(encoded, Alt) else encoded
    assert isinstance(raw, Cls)
    return raw


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


def unrolled(node: Node) -> tuple[Cls, Node] | None:
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


def trimmed(node: Node) -> tuple[Cls, Cls] | None:
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
        return Cls(tuple(subtract_ranges(b.ranges, a.ranges)), False)
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
    text = unrolled(node)
    if text is not None:
        plain, entity = text
        return Rep(Alt((plain, entity)), 1, None)
    key = trimmed(node)
    if key is not None:
        edge, middle = key
        blank = _cls_minus(middle, edge)
        if not blank.ranges:
            return Rep(edge, 1, None)
        return Seq((Rep(edge, 1, None), Rep(Seq((blank, Rep(middle, 0, None), edge)), 0, 1)))
    return node


# --- rules into one expression ------------------------------------------------------------


def inline(node: Node, rules: dict[str, Node], terminals: dict[str, Node], seen: tuple[str, ...] = ()) -> Node:
    """``node`` with every reference replaced by its definition (the language must be regular)."""
    if isinstance(node, Ref):
        if node.name in seen:
            raise ExportError(f"rule {node.name} is recursive: no regular expression for it")
        target = rules.get(node.name) or terminals[node.name]
        return inline(target, rules, terminals, (*seen, node.name))
    return rebuild(node, lambda n: inline(n, rules, terminals, seen))
