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
import math
import re
import re._constants as sre_c  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from lark import Lark, Token, Tree
from lark.grammar import NonTerminal, Terminal
from lark.load_grammar import load_grammar

from charfmt.body import grammar_text
from charfmt.diagnostics import CharfmtError
from charfmt.models import Vocabulary
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, ROLES, TAGGED_TYPES, Role, TagSpec, TagTable

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


# --- length bounds: replies that close within a token budget ------------------------------


@dataclass(frozen=True, slots=True)
class Bounds:
    """Length bounds written into an exported grammar or schema (``None``: unbounded).

    A grammar alone guarantees syntax, not that a reply ends: a model may repeat inside
    ``<msg>`` until the token budget runs out and the reply is cut mid-string. With bounds
    every path through the grammar is finite, so the longest reply it allows has a known
    length; ``Bounds.for_tokens`` picks them so that length fits a token budget.
    """

    max_chars: int | None = None
    """Characters of each element's content (and of an ``I``/``E`` body) between two character
    references; a reference (``&amp;``) counts as one character."""
    max_chats: int | None = None
    """Chats in the reply (JSON Schema ``maxItems``)."""
    max_elements: int | None = None
    """Elements in a ``C`` body."""
    max_entities: int = 0
    """Character references per element content when ``max_chars`` is set (0: none; ``< & >``
    are then unavailable, which keeps the longest content ``max_chars`` characters)."""
    max_ws: int | None = None
    """Whitespace characters between two JSON tokens."""
    role_chars: tuple[tuple[Role, int], ...] = ()
    """Characters of the content of a tag of each role listed, in place of ``max_chars``
    (``(("action", 24), ("hidden", 24))``): a short action, the rest to speech."""
    max_speech: int | None = None
    """Speech elements (a tag of the ``speech`` role) in a ``C`` body (needs ``max_elements``)."""
    require_speech: bool = False
    """Every ``C`` body holds a speech element with text (a chat is never an emotion alone), and
    the reply opens with a ``C`` chat (it is never only log lines, nor empty)."""
    min_speech: int = 1
    """With ``require_speech``: the fewest characters of that speech element (at most ``max_chars``),
    so a reply says at least a sentence rather than a word (needs ``max_entities`` 0)."""

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_chats", "max_elements", "max_ws", "max_speech"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ExportError(f"{name} must be at least 1, not {value}")
        if self.max_entities < 0:
            raise ExportError(f"max_entities must be at least 0, not {self.max_entities}")
        for role, n in self.role_chars:
            if role not in ROLES or n < 1:
                raise ExportError(f"role_chars: {role!r} must be a role and {n} at least 1")
        if self.max_speech is not None and self.max_elements is None:
            raise ExportError("max_speech needs max_elements")
        if not 1 <= self.min_speech <= (self.max_chars or self.min_speech) or (
            self.min_speech > 1 and self.max_entities
        ):
            raise ExportError(f"min_speech {self.min_speech} must be 1 to max_chars, with max_entities 0")

    def chars(self, role: Role) -> int | None:
        """The most characters of the content of a tag of ``role``."""
        return dict(self.role_chars).get(role, self.max_chars)

    @property
    def closed(self) -> bool:
        """Whether every length is bounded (the longest reply is finite)."""
        return None not in (self.max_chars, self.max_chats, self.max_elements, self.max_ws)

    @classmethod
    def for_tokens(
        cls,
        max_tokens: int,
        *,
        max_chats: int = 1,
        max_elements: int = 4,
        max_entities: int = 0,
        max_ws: int = 1,
        tokens_per_char: float | None = None,
        vocabulary: Vocabulary | None = None,
        tags: TagTable | None = None,
        short: dict[Role, int] | None = None,
        max_speech: int | None = 1,
        require_speech: bool = False,
        min_speech: float = 0,
    ) -> Bounds:
        """Bounds whose longest reply fits in ``max_tokens`` tokens, with the most room for speech.

        The budget goes where speech is: each role in ``short`` (default ``SHORT_ROLES``: an
        emotion key, an action, a cue, the inner voice) gets at most that many characters, at
        most ``max_speech`` elements of a ``C`` body are speech (``None``: any), and speech gets
        the rest: ``max_chars`` (which also bounds ``I``/``E`` bodies) is the largest that fits.
        Where the budget is too small for the short roles' lengths, they shrink with speech.
        ``require_speech``: every ``C`` body says something, at least ``min_speech`` (a share of
        ``max_chars``, 0 to 1) of the speech length.

        How it is computed: every token a model emits holds at least one byte, so a reply of
        ``n`` bytes takes at most ``n`` tokens. ``max_reply_tokens`` walks the bounded grammar
        and adds up the longest path: each literal counts its UTF-8 bytes, each character from
        a class counts the most bytes a character of that class takes in UTF-8 (4 for free
        text), or ``tokens_per_char`` where given (``measure_tokens_per_char`` measures it
        on the model's own tokenizer: an estimate, not a guarantee). One token is kept for the
        end-of-sequence token.
        """
        wanted = dict(SHORT_ROLES if short is None else short)
        table = DEFAULT_TAGS if tags is None else tags
        roles = {spec.role for spec in table if spec.content == "text" or spec.role == "emotion"}
        if vocabulary is not None:
            roles.discard("emotion")  # the keys are literals: their length is known
        speech = max_speech if max_speech is None else min(max_speech, max_elements)

        def make(n: int) -> Bounds:
            role_chars = tuple((r, min(c, n)) for r, c in wanted.items() if r in roles and r != "speech")
            least = max(1, int(n * min_speech)) if require_speech and not max_entities else 1
            return cls(n, max_chats, max_elements, max_entities, max_ws, role_chars, speech, require_speech, least)

        def fits(n: int) -> bool:
            b = make(n)
            return (
                max_reply_tokens(b, vocabulary=vocabulary, tags=tags, tokens_per_char=tokens_per_char) + 1 <= max_tokens
            )

        if not fits(1):
            need = max_reply_tokens(make(1), vocabulary=vocabulary, tags=tags, tokens_per_char=tokens_per_char)
            raise ExportError(
                f"max_tokens={max_tokens} is too small for {max_chats} chat(s) of {max_elements} element(s): "
                f"the shortest bound (1 character per element) needs {need + 1} tokens"
            )
        low, high = 1, max(1, max_tokens)
        while low < high:  # the largest n that fits
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return make(low)


SHORT_ROLES: Final[dict[Role, int]] = {"emotion": 16, "action": 24, "cue": 16, "hidden": 24}
"""``Bounds.for_tokens``' default lengths (characters) of the roles that are not speech."""


def measure_tokens_per_char(count: Callable[[str], int], texts: Iterable[str]) -> float:
    """The most tokens per character ``count`` (a model's tokenizer) takes on ``texts``, at least 1.

    Derived from the model's own vocabulary for the language a character speaks (a model whose
    vocabulary holds Japanese takes about one token per kana or kanji, one without it up to
    three, one per byte); pass it to ``Bounds.for_tokens``. An estimate from those texts: a
    reply in another script may take more. At least 1, which is exact for ASCII text.
    """
    ratios = [count(t) / len(t) for t in texts if t]
    return max([1.0, *ratios])


def _bounded_text(text: Node, n: int, m: int, *, low: int = 1) -> Node:
    """``TEXT`` (non-empty ``(c | e)+``) with at most ``n`` characters per run and ``m`` references
    (with ``m`` 0: at least ``low`` characters)."""
    shape = _unrolled(text)
    if shape is None:
        raise ExportError("the body grammar's TEXT no longer has the shape bounds are written for")
    plain, entity = shape
    if m == 0:
        return Rep(plain, low, n)
    run = Seq((entity, Rep(plain, 0, n)))
    return Alt((Seq((Rep(plain, 1, n), Rep(run, 0, m))), Rep(run, 1, m)))


def _bounded_key(key: Node, n: int) -> Node:
    """``KEY`` (``n (m* n)?``) of at most ``n`` characters."""
    shape = _trimmed(key)
    if shape is None:
        raise ExportError("the body grammar's KEY no longer has the shape bounds are written for")
    edge, middle = shape
    return edge if n == 1 else Seq((edge, Rep(Seq((Rep(middle, 0, n - 2), edge)), 0, 1)))


def _bounded_body(
    rules: dict[str, Node], terminals: dict[str, Node], bounds: Bounds | None, tags: TagTable = DEFAULT_TAGS
) -> tuple[dict[str, Node], dict[str, Node]]:
    """The body rules and terminals (decoded level) with ``bounds`` applied.

    A role with its own length (``Bounds.role_chars``) gets its own text terminal,
    ``TEXT_<ROLE>``, in the rules of its tags; the emotion key is bounded by its role's length.
    """
    if bounds is None:
        return rules, terminals
    rules, terminals = dict(rules), dict(terminals)
    text = terminals["TEXT"]
    if bounds.max_chars is not None:
        terminals["TEXT"] = _bounded_text(text, bounds.max_chars, bounds.max_entities)
    emotion_chars = bounds.chars("emotion")
    if emotion_chars is not None:
        terminals["KEY"] = _bounded_key(terminals["KEY"], emotion_chars)
    for role, n in bounds.role_chars:
        if role == "emotion":
            continue
        name = f"TEXT_{role.upper()}"
        terminals[name] = _bounded_text(text, n, bounds.max_entities)
        for spec in tags:
            if spec.role == role and spec.content == "text":
                rules[spec.name] = _text_element(spec, name, optional=True)
    speech = [s for s in tags if s.role == "speech"]
    if bounds.require_speech:
        for spec in speech:  # a speech element says something: at least min_speech characters
            said = _text_terminal(rules[spec.name])
            if bounds.min_speech > 1:
                said = f"{said}_SAID"
                terminals[said] = _bounded_text(text, bounds.chars("speech") or 0, 0, low=bounds.min_speech)
            rules[f"{spec.name}_said"] = _text_element(spec, said, optional=False)
    rules["c_body"] = _c_body(tags, speech, bounds, rules)
    return rules, terminals


def _text_terminal(rule: Node) -> str:
    """The text terminal of a text element's rule (``OPEN TEXT? CLOSE``)."""
    assert isinstance(rule, Seq) and isinstance(rule.items[1], Rep) and isinstance(rule.items[1].item, Ref)
    return rule.items[1].item.name


def _text_element(spec: TagSpec, terminal: str, *, optional: bool) -> Node:
    content: Node = Rep(Ref(terminal), 0, 1) if optional else Ref(terminal)
    return Seq((Ref(f"{spec.terminal}_OPEN"), content, Ref(f"{spec.terminal}_CLOSE")))


def _c_body(tags: TagTable, speech: list[TagSpec], bounds: Bounds, rules: dict[str, Node]) -> Node:
    """A ``C`` body under ``bounds``: at most ``max_elements`` elements, of them at most ``max_speech``
    speech elements, and with ``require_speech`` one with text first among them.

    Bounded, it is a small automaton over (elements written, speech elements written), one rule
    per state (``c_next_I_K``) added to ``rules``.
    """
    element = Ref("element")
    n, most = bounds.max_elements, bounds.max_speech
    if not bounds.require_speech and most is None:
        return Seq((element, Rep(Seq((Ref("_NL"), element)), 0, None if n is None else n - 1)))
    said = Alt(tuple(Ref(f"{s.name}{'_said' if bounds.require_speech else ''}") for s in speech))
    spoken = Alt(tuple(Ref(s.name) for s in speech))
    others = tuple(Ref(s.name) for s in tags if s.role != "speech")
    other = Alt(others)
    if n is None:  # require_speech alone: (other NL)* said (NL element)*
        tail = Rep(Seq((Ref("_NL"), element)), 0, None)
        return Seq((Rep(Seq((other, Ref("_NL"))), 0, None), said, tail)) if others else Seq((said, tail))
    least = 1 if bounds.require_speech else 0
    most = n if most is None else most

    def state(i: int, k: int) -> Ref:
        """The element after ``i`` elements of which ``k`` are speech (``i < n``), as a rule."""
        name = f"c_next_{i}_{k}"
        if name not in rules:
            choices: list[Node] = []
            if k < most:
                choices.append(then(said if k < least else spoken, i + 1, k + 1))
            if others and n - i > least - k:  # room is left for the speech still required
                choices.append(then(other, i + 1, k))
            rules[name] = choices[0] if len(choices) == 1 else Alt(tuple(choices))
        return Ref(name)

    def then(first: Node, i: int, k: int) -> Node:
        """``first``, the ``i``-th element, then what may follow it."""
        if i == n:
            return first
        more = Seq((Ref("_NL"), state(i, k)))
        return Seq((first, Rep(more, 0, 1) if k >= least else more))

    return state(0, 0)


def _utf8_max(cls: Cls) -> int:
    top = 0x10FFFF if cls.negated else max(hi for _lo, hi in cls.ranges)
    return 1 if top < 0x80 else 2 if top < 0x800 else 3 if top < 0x10000 else 4


def _is_json_char(n: Alt) -> bool:
    """Whether ``n`` is one character of text written in a JSON string (``json_encoded``): a class or escapes."""
    return isinstance(n.items[0], Cls) and all(isinstance(i, Lit) and i.text[:1] == "\\" for i in n.items[1:])


def max_length(
    node: Node,
    g: Grammar,
    char_cost: Callable[[Cls], float],
    char_cost_of_escape: Callable[[Lit], float] | None = None,
) -> int:
    """The longest text ``node`` allows: literals by UTF-8 bytes, class characters by ``char_cost``
    (the total rounded up); with ``char_cost_of_escape``, a JSON escape of a text character by it.

    Raises ``ExportError`` if some repetition is unbounded (the longest text is infinite).
    """
    memo: dict[str, float] = {}

    def walk(n: Node, seen: tuple[str, ...]) -> float:
        if isinstance(n, Lit):
            return len(n.text.encode())
        if isinstance(n, Cls):
            return char_cost(n)
        if isinstance(n, Seq):
            return sum(walk(i, seen) for i in n.items)
        if isinstance(n, Alt):
            if char_cost_of_escape is not None and _is_json_char(n):
                # one character of text in a JSON string: the character, or its JSON escape
                return max(char_cost(n.items[0]), *(char_cost_of_escape(i) for i in n.items[1:]))  # type: ignore[arg-type]
            return max(walk(i, seen) for i in n.items)
        if isinstance(n, Rep):
            if n.high is None:
                raise ExportError("the grammar has an unbounded repetition: set every bound")
            return n.high * walk(n.item, seen) if n.high else 0
        if n.name not in memo:
            if n.name in seen:
                raise ExportError(f"rule {n.name} is recursive: its longest text is unbounded")
            target = g.rules.get(n.name) or g.terminals[n.name]
            memo[n.name] = walk(target, (*seen, n.name))
        return memo[n.name]

    return math.ceil(walk(node, ()) - 1e-9)


def max_reply_tokens(
    bounds: Bounds,
    *,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
    tokens_per_char: float | None = None,
) -> int:
    """The most tokens a reply the bounded grammar allows can take (end token not counted).

    An upper bound for any tokenizer whose tokens each hold at least one byte (every
    byte-level BPE, and SentencePiece with byte fallback): the reply's longest length in
    bytes. ``tokens_per_char`` replaces the per-character byte count of text classes
    (an assumption about the tokenizer, not a guarantee).
    """
    if not bounds.closed:
        raise ExportError("max_reply_tokens needs max_chars, max_chats, max_elements and max_ws all set")
    g = reply_grammar(vocabulary, tags, bounds=bounds)

    def cost(c: Cls) -> float:
        most = _utf8_max(c)
        return most if tokens_per_char is None or most == 1 else tokens_per_char

    if tokens_per_char is None:
        return max_length(Ref(g.start), g, cost)
    # A JSON escape ("\\n") is one character of text too: counted as one, at most its two bytes.
    return max_length(Ref(g.start), g, cost, lambda escape: min(len(escape.text), tokens_per_char))


def reply_grammar(
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
    *,
    bounds: Bounds | None = None,
    speakers: Sequence[str] | None = None,
) -> Grammar:
    """The whole reply: the JSON envelope, with bodies in the tag language inside JSON strings.

    With ``bounds``, the lengths they set are written into the grammar (see ``Bounds``).
    With ``speakers`` (a scene's cast), each ``C`` chat names one of them after its order.
    """
    body_rules, body_terms = _body_grammar(DEFAULT_TAGS if tags is None else tags)
    body_rules, bounded_terms = _bounded_body(body_rules, body_terms, bounds, DEFAULT_TAGS if tags is None else tags)
    terminals = {
        name: json_encoded(node if node is not body_terms.get(name) else lexeme_friendly(node))
        for name, node in bounded_terms.items()
    }
    bounded_key = bounds is not None and bounds.chars("emotion") is not None
    key_default = bounded_terms["KEY"] if bounded_key else lexeme_friendly(body_terms["KEY"])
    terminals["KEY"] = json_encoded(_key(vocabulary, key_default))
    max_chats = None if bounds is None else bounds.max_chats
    max_ws = None if bounds is None else bounds.max_ws
    if max_chats is not None and max_chats < 10:
        # Orders 1..max_chats: a model that numbers its reply by the turn writes a valid order instead.
        terminals["ORDER"] = from_regex(f"[1-{max_chats}]")
    else:
        digits = None if max_chats is None else len(str(max_chats)) - 1
        terminals["ORDER"] = Seq((from_regex("[1-9]"), Rep(from_regex("[0-9]"), 0, digits)))
    terminals["WS"] = Rep(from_regex(r"[ \t\n\r]"), 1, max_ws)
    ws = Rep(Ref("WS"), 0, 1)

    def member(key: str, value: Node) -> Node:
        return Seq((Lit(json.dumps(key)), ws, Lit(":"), ws, value))

    def chat(types: list[str], body_rule: str) -> Node:
        kind = Alt(tuple(Lit(json.dumps(t)) for t in types)) if len(types) > 1 else Lit(json.dumps(types[0]))
        speaker: tuple[Node, ...] = ()
        if speakers and any(t in TAGGED_TYPES for t in types):  # a scene: who speaks, one of the cast
            names = tuple(Lit(json.dumps(s, ensure_ascii=False)) for s in speakers)
            speaker = (member("speaker", names[0] if len(names) == 1 else Alt(names)), ws, Lit(","), ws)
        return Seq((
            Lit("{"), ws, member("type", kind), ws, Lit(","), ws, member("order", Ref("ORDER")), ws, Lit(","), ws,
            *speaker, member("body", Seq((Lit('"'), Ref(body_rule), Lit('"')))), ws, Lit("}"),
        ))  # fmt: skip

    tagged = sorted(TAGGED_TYPES)
    plain = [t for t in CHAT_TYPES if t not in TAGGED_TYPES]
    # With require_speech a reply says something: it opens with a C chat (which holds speech).
    speaks = bounds is not None and bounds.require_speech
    first = "said_chat" if speaks else "chat"
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
                            Rep(
                                Seq((Ref(first), Rep(Seq((ws, Lit(","), ws, Ref("chat"))), 0, _less(max_chats)))),
                                int(speaks),
                                1,
                            ),
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
    if speaks:
        rules["said_chat"] = chat(tagged, "c_body")
    return Grammar("reply", rules, terminals)


def _less(n: int | None) -> int | None:
    return None if n is None else n - 1


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
    bounded: Callable[[int, int | None], str] = lambda low, high: f"{{{low},{'' if high is None else high}}}"
    """The suffix of ``x`` repeated ``low`` to ``high`` times (``None``: unbounded)."""


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
        return syn.separator.join(p for p in parts if p)  # a bounded x{0,0} writes nothing
    if isinstance(node, Alt):
        return syn.alternation.join(_write(n, syn, names) for n in node.items)
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


def _atom(node: Node, syn: _Syntax, names: Callable[[str], str]) -> str:
    text = _write(node, syn, names)
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


_PY: Final = _Syntax(_py_char, _py_lit, True, ("(?:", ")"), "", "|")


def _fixed_width_char(cp: int) -> str:
    # \uXXXX / \UXXXXXXXX, never \xXX: XGrammar reads \x greedily (\x26a is U+026A, not "&a"),
    # while Rust regex (llguidance), llama.cpp and XGrammar all read these two at fixed width.
    return f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"


def _rust_lit(c: str) -> str:
    return c if c.isalnum() and ord(c) < 128 else _fixed_width_char(ord(c))


_RUST: Final = _Syntax(_fixed_width_char, lambda s: "".join(_rust_lit(c) for c in s), False, ("(?:", ")"), "", "|")

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


_ECMA: Final = _Syntax(_ecma_char, lambda s: "".join(_ecma_lit(c) for c in s), False, ("(?:", ")"), "", "|")


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


_GBNF: Final = _Syntax(_gbnf_char, _gbnf_literal, False, ("(", ")"), " ", " | ")


def _lark_literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _lark_bounded(low: int, high: int | None) -> str:
    # Lark's own repetition syntax ("x ~ 2..5"), which the lark package, llguidance and XGrammar
    # all read; "x{2,5}" in a rule is llguidance's alone.
    if high is None:
        return ""
    return f" ~ {low}" if low == high else f" ~ {low}..{high}"


_LARK_RULES: Final = _Syntax(_fixed_width_char, _lark_literal, False, ("(", ")"), " ", " | ", _lark_bounded)

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


_LARK_REGEX: Final = _Syntax(
    _lark_regex_char, lambda s: "".join(_lark_regex_char(ord(c)) for c in s), False, ("(?:", ")"), "", "|"
)


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
    rules, terminals = _bounded_body(*_body_grammar(table), bounds, table)
    terminals = {**terminals, "KEY": _key(vocabulary, terminals["KEY"])}
    start = "c_body" if kind in TAGGED_TYPES else "text_body"
    node = _inline(Ref(start), rules, terminals)
    if flavor not in ("python", "ecma"):
        raise ExportError(f"unknown regex flavor {flavor!r}; expected python or ecma")
    if flavor == "python":
        # \Z, not $: Python's $ also matches before a final newline, which strict parsing rejects.
        return f"^(?:{_write(node, _PY, str)})\\Z"
    # ECMA's $ (without the m flag) matches only at the very end.
    return f"^(?:{_write(node, _ECMA, str)})$"


def _lark_target(g: Grammar) -> str:
    lines = [
        '// charfmt reply grammar in Lark syntax (llguidance, XGrammar), generated by charfmt.grammar("lark").',
        "// The whole reply: the JSON envelope, each body a JSON string in the tag language.",
        "",
        f"start: {g.start}",
    ]
    for name, node in g.rules.items():
        lines.append(f"{name}: {_write(node, _LARK_RULES, str)}")
    for name, node in g.terminals.items():
        if isinstance(node, Lit):
            lines.append(f"{name}: {_lark_literal(node.text)}")
        else:
            lines.append(f"{name}: /{_write(_longest_first(node), _LARK_REGEX, str)}/")
    return "\n".join(lines) + "\n"


def _longest_first(node: Node) -> Node:
    """``node`` with each choice of literals ordered longest first (same language).

    The lark package's lexer takes the first alternative Python's re matches, not the longest:
    with keys ``joy|joyful`` it would read "joy" out of "joyful" and fail at "ful".
    """
    if isinstance(node, Alt):
        items = tuple(_longest_first(n) for n in node.items)
        if all(isinstance(n, Lit) for n in items):
            items = tuple(sorted(items, key=lambda n: -len(n.text) if isinstance(n, Lit) else 0))
        return Alt(items)
    if isinstance(node, Seq):
        return Seq(tuple(_longest_first(n) for n in node.items))
    if isinstance(node, Rep):
        return Rep(_longest_first(node.item), node.low, node.high)
    return node


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
        lines.append(f"{name(n)} ::= {_write(_positive_beyond_ascii(_one_escape(node)), _GBNF, name)}")
    return "\n".join(lines) + "\n"


def _one_escape(node: Node) -> Node:
    """``node`` with each text character's JSON escapes as one alternative: ``c | "\\" [..]``.

    The same language; llama.cpp's sampler keeps one parse stack per alternative and checks
    each against every token of the vocabulary, so ``c | "\\\"" | "\\\\" | ...`` (seven stacks)
    costs over three times ``c | "\\" [..]`` (two) at every step of a text.
    """
    if isinstance(node, Alt):
        items = tuple(_one_escape(n) for n in node.items)
        escapes = [i for i in items[1:] if isinstance(i, Lit) and len(i.text) == 2 and i.text[0] == "\\"]
        if isinstance(items[0], Cls) and len(escapes) == len(items) - 1 and len(escapes) > 1:
            seconds = Cls(tuple(_merge((ord(e.text[1]), ord(e.text[1])) for e in escapes)), False)
            return Alt((items[0], Seq((Lit("\\"), seconds))))
        return Alt(items)
    if isinstance(node, Seq):
        return Seq(tuple(_one_escape(n) for n in node.items))
    if isinstance(node, Rep):
        return Rep(_one_escape(node.item), node.low, node.high)
    return node


def _positive_beyond_ascii(node: Node) -> Node:
    """``node`` with each negated class that excludes a non-ASCII character written as its complement.

    llama.cpp matches a token that ends inside a UTF-8 sequence against the code points that
    sequence could still become; for a negated class it rejects the token when any of them is
    excluded (after ``>``, the byte 0xC2 of ``¤`` is refused because U+0085 and U+00A0 are
    not keys). A positive class is checked by overlap, which is right for a partial character.
    """
    if isinstance(node, Cls):
        if node.negated and any(hi > 0x7F for _lo, hi in node.ranges):
            return Cls(tuple(_subtract([(0, 0x10FFFF)], _merge(node.ranges))), False)
        return node
    if isinstance(node, Seq):
        return Seq(tuple(_positive_beyond_ascii(n) for n in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(_positive_beyond_ascii(n) for n in node.items))
    if isinstance(node, Rep):
        return Rep(_positive_beyond_ascii(node.item), node.low, node.high)
    return node


def resolve_bounds(
    *,
    max_tokens: int | None = None,
    max_chars: int | None = None,
    max_chats: int | None = None,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
) -> Bounds | None:
    """The ``Bounds`` the keyword arguments of ``grammar``/``json_schema`` ask for (``None``: none).

    ``max_tokens``: ``Bounds.for_tokens`` (``max_chats`` defaults to 1 there), lowered to
    ``max_chars`` where that is smaller; otherwise ``max_chars`` and ``max_chats`` as given.
    """
    if max_tokens is not None:
        found = Bounds.for_tokens(max_tokens, max_chats=max_chats or 1, vocabulary=vocabulary, tags=tags)
        if max_chars is not None and max_chars < (found.max_chars or 0):
            found = Bounds(max_chars, found.max_chats, found.max_elements, found.max_entities, found.max_ws)
        return found
    if max_chars is None and max_chats is None:
        return None
    return Bounds(max_chars=max_chars, max_chats=max_chats)


def grammar(
    target: str,
    *,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
    max_tokens: int | None = None,
    max_chars: int | None = None,
    max_chats: int | None = None,
    speakers: Sequence[str] | None = None,
) -> str:
    """The reply format as a grammar for a constrained-decoding engine.

    ``lark``: Lark syntax for the whole reply, read by llguidance (vLLM
    ``structured_outputs={"grammar": ...}``, SGLang, outlines ``CFG``) and by XGrammar
    (``GrammarCompiler.compile_lark``); ``gbnf``: the same for llama.cpp and XGrammar
    (``compile_grammar``); ``regex``: one decoded ``C`` body, for engines that take only
    a regular expression. With ``vocabulary``, the emotion tag holds only its keys;
    ``tags``: the tag table (``None``: ``DEFAULT_TAGS``), a cue with values holds one of them.

    Length bounds (see ``Bounds``): ``max_chars`` per element content, ``max_chats`` per
    reply, or ``max_tokens``, a token budget the longest allowed reply fits in
    (``Bounds.for_tokens``), so a constrained reply always closes before the budget ends.
    ``speakers``: a scene's cast (``charfmt.scene``): each ``C`` chat names one of them.
    """
    bounds = resolve_bounds(
        max_tokens=max_tokens, max_chars=max_chars, max_chats=max_chats, vocabulary=vocabulary, tags=tags
    )
    if target == "lark":
        return _lark_target(reply_grammar(vocabulary, tags, bounds=bounds, speakers=speakers))
    if target == "gbnf":
        return _gbnf_target(reply_grammar(vocabulary, tags, bounds=bounds, speakers=speakers))
    if target == "regex":
        return body_regex("C", vocabulary=vocabulary, tags=tags, bounds=bounds)
    raise ExportError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
