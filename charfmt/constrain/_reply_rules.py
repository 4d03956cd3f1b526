"""The reply grammar as rules over the regex IR: the body from ``grammars/body.lark``, the JSON envelope around it.

``body_grammar`` reads the shipped body grammar with Lark's own loader (rules) and lexer
(terminals), ``bounded_body`` writes length bounds (``charfmt.constrain.export.Bounds``) into it, and
``reply_grammar`` wraps the bodies in the ``{"chats": [...]}`` envelope, each body inside a
JSON string. The writers (``_grammar_writers``) print the result in each target's syntax.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from lark import Lark, Token, Tree
from lark.grammar import NonTerminal, Terminal
from lark.load_grammar import load_grammar

from charfmt._grammar.rules import grammar_text
from charfmt.constrain._regex_ir import (
    Alt,
    ExportError,
    Lit,
    Ref,
    Rep,
    Seq,
    from_regex,
    json_encoded,
    lexeme_friendly,
    trimmed,
    unrolled,
)
from charfmt.constrain._reply_constraints import Speakers
from charfmt.models import Vocabulary
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, ROLE_TABLE, TAGGED_TYPES, TagSpec, TagTable

if TYPE_CHECKING:
    from charfmt.constrain._grammar_bounds import Bounds
    from charfmt.constrain._regex_ir import Node

# --- the body grammar as rules ---------------------------------------------------------


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
def body_grammar(tags: TagTable = DEFAULT_TAGS) -> tuple[dict[str, Node], dict[str, Node]]:
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


def key_node(vocabulary: Vocabulary | None, default: Node) -> Node:
    """The emotion key: one of ``vocabulary``'s keys, or ``default`` (any key) without one."""
    if vocabulary is None:
        return default
    return Alt(tuple(Lit(k) for k in vocabulary.keys))


# --- length bounds written into the body rules -------------------------------------------


def _bounded_text(text: Node, n: int, m: int, *, low: int = 1) -> Node:
    """``TEXT`` (non-empty ``(c | e)+``) with at most ``n`` characters per run and ``m`` references
    (with ``m`` 0: at least ``low`` characters)."""
    shape = unrolled(text)
    if shape is None:
        raise ExportError("the body grammar's TEXT no longer has the shape bounds are written for")
    plain, entity = shape
    if m == 0:
        return Rep(plain, low, n)
    run = Seq((entity, Rep(plain, 0, n)))
    return Alt((Seq((Rep(plain, 1, n), Rep(run, 0, m))), Rep(run, 1, m)))


def _bounded_key(key: Node, n: int) -> Node:
    """``KEY`` (``n (m* n)?``) of at most ``n`` characters."""
    shape = trimmed(key)
    if shape is None:
        raise ExportError("the body grammar's KEY no longer has the shape bounds are written for")
    edge, middle = shape
    return edge if n == 1 else Seq((edge, Rep(Seq((Rep(middle, 0, n - 2), edge)), 0, 1)))


def bounded_body(
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
    key_chars = bounds.chars(tags.emotion.role)  # the KEY terminal is the emotion's
    if key_chars is not None:
        terminals["KEY"] = _bounded_key(terminals["KEY"], key_chars)
    for role, n in bounds.role_chars:
        if ROLE_TABLE[role].content == "key":
            continue  # its tags hold the KEY bounded above
        name = f"TEXT_{role.upper()}"
        terminals[name] = _bounded_text(text, n, bounds.max_entities)
        for spec in tags:
            if spec.role == role and spec.content == "text":
                rules[spec.name] = _text_element(spec, name, optional=True)
    for spec in tags:  # an empty act, thought or msg means nothing: a model under bounds writes none
        if spec.content == "text":
            rules[spec.name] = _text_element(spec, _text_terminal(rules[spec.name]), optional=False)
    speech = [s for s in tags if s.row.spoken]
    if bounds.require_speech:
        for spec in speech:  # a speech element says something: at least min_speech characters
            said = _text_terminal(rules[spec.name])
            if bounds.min_speech > 1:
                said = f"{said}_SAID"
                terminals[said] = _bounded_text(text, bounds.chars(spec.role) or 0, 0, low=bounds.min_speech)
            rules[f"{spec.name}_said"] = _text_element(spec, said, optional=False)
    rules["c_body"] = _c_body(tags, speech, bounds, rules)
    return rules, terminals


def _text_terminal(rule: Node) -> str:
    """The text terminal of a text element's rule (``OPEN TEXT? CLOSE`` or ``OPEN TEXT CLOSE``)."""
    assert isinstance(rule, Seq)
    content = rule.items[1].item if isinstance(rule.items[1], Rep) else rule.items[1]
    assert isinstance(content, Ref)
    return content.name


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
    others = tuple(Ref(s.name) for s in tags if not s.row.spoken)
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


# --- the JSON envelope around the bodies -------------------------------------------------


def reply_grammar(
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
    *,
    bounds: Bounds | None = None,
    speakers: Speakers | None = None,
) -> Grammar:
    """The whole reply: the JSON envelope, with bodies in the tag language inside JSON strings.

    With ``bounds``, the lengths they set are written into the grammar (see ``Bounds``).
    With ``speakers`` (a scene's cast), each ``C`` chat names one of them after its order; where
    they map each speaker to its own vocabulary, that chat's emotion is one of its speaker's keys
    (one alternative per speaker: a speaker cannot use another's emotion).
    """
    table = DEFAULT_TAGS if tags is None else tags
    body_rules, body_terms = body_grammar(table)
    body_rules, bounded_terms = bounded_body(body_rules, body_terms, bounds, table)
    terminals = {
        name: json_encoded(node if node is not body_terms.get(name) else lexeme_friendly(node))
        for name, node in bounded_terms.items()
    }
    bounded_key = bounds is not None and bounds.chars(table.emotion.role) is not None
    key_default = bounded_terms["KEY"] if bounded_key else lexeme_friendly(body_terms["KEY"])
    terminals["KEY"] = json_encoded(key_node(vocabulary, key_default))
    max_chats = None if bounds is None else bounds.max_chats
    terminals["ORDER"] = _order(max_chats)
    terminals["WS"] = Rep(from_regex(r"[ \t\n\r]"), 1, None if bounds is None else bounds.max_ws)
    ws = Rep(Ref("WS"), 0, 1)
    tagged = sorted(TAGGED_TYPES)
    plain = [t for t in CHAT_TYPES if t not in TAGGED_TYPES]
    rules: dict[str, Node] = dict(body_rules)
    spoken = _spoken_chats(
        rules, terminals, tagged, ws, speakers=speakers, key=lambda v: json_encoded(key_node(v, key_default))
    )
    # With require_speech a reply says something: it opens with a C chat (which holds speech).
    speaks = bounds is not None and bounds.require_speech
    rules["chat"] = Alt((spoken, _chat(plain, "text_body", ws, None)))
    listed: Node
    if max_chats is None:
        if speaks:
            rules["said_chat"] = spoken
        more = Rep(Seq((ws, Lit(","), ws, Ref("chat"))), 0, None)
        listed = Rep(Seq((Ref("said_chat" if speaks else "chat"), more)), int(speaks), 1)
    else:
        listed = _numbered(rules, terminals, max_chats, ws, spoken if speaks else None)
    chats = Seq((Lit("["), ws, listed, ws, Lit("]")))
    rules["reply"] = Seq((ws, Lit("{"), ws, _member("chats", chats, ws), ws, Lit("}"), ws))
    return Grammar("reply", {"reply": rules.pop("reply"), "chat": rules.pop("chat"), **rules}, terminals)


def _numbered(
    rules: dict[str, Node], terminals: dict[str, Node], max_chats: int, ws: Node, said: Node | None
) -> Node:
    """At most ``max_chats`` chats, the k-th of order k (``chat_<k>``, ``ORDER_<k>``): orders a bounded grammar
    writes are unique, so what it lets a model emit parses strictly (two equal orders are ``CF111``).
    ``said``: the chat that must open the reply (one that speaks), else none is required."""
    speaks = said is not None
    for k in range(1, max_chats + 1):  # (written in this order: chat_1 first)
        terminals[f"ORDER_{k}"] = Lit(str(k))
        shape = said if k == 1 and said is not None else rules["chat"]
        rules[f"chat_{k}"] = _renamed(shape, {"ORDER": f"ORDER_{k}"})
    tail: Node | None = None
    for k in range(max_chats, 0, -1):
        item: Node = Ref(f"chat_{k}") if tail is None else Seq((Ref(f"chat_{k}"), Rep(tail, 0, 1)))
        tail = item if k == 1 else Seq((ws, Lit(","), ws, item))
    assert tail is not None  # (max_chats >= 1: Bounds says so)
    return tail if speaks else Rep(tail, 0, 1)


def _spoken_chats(
    rules: dict[str, Node],
    terminals: dict[str, Node],
    tagged: list[str],
    ws: Node,
    *,
    speakers: Speakers | None,
    key: Callable[[Vocabulary | None], Node],
) -> Node:
    """The ``C`` chat: one shape, or (speakers with their own vocabularies) one per speaker, each with its
    own copy of the body rules that reach the emotion key, ``KEY_S<n>`` its speaker's keys."""
    if not isinstance(speakers, Mapping):
        return _chat(tagged, "c_body", ws, speakers)
    options: list[Node] = []
    for n, (who, vocabulary) in enumerate(speakers.items()):
        suffix = f"_s{n}"
        terminals[f"KEY{suffix.upper()}"] = key(vocabulary)
        renamed = _copied_for(rules, "KEY", f"KEY{suffix.upper()}", suffix)
        options.append(_chat(tagged, renamed.get("c_body", "c_body"), ws, [who]))
    return options[0] if len(options) == 1 else Alt(tuple(options))


def _copied_for(rules: dict[str, Node], terminal: str, replacement: str, suffix: str) -> dict[str, str]:
    """Copies (named ``<rule><suffix>``, added to ``rules``) of every rule that reaches ``terminal``,
    with ``replacement`` in its place; the new name of each rule copied."""
    reaching: set[str] = set()
    grew = True
    while grew:  # the rules that refer to the terminal, or to a rule that does
        found = {name for name, node in rules.items() if _refs(node) & (reaching | {terminal})}
        grew, reaching = found - reaching != set(), reaching | found
    names = {name: f"{name}{suffix}" for name in sorted(reaching)}
    names[terminal] = replacement
    for name in sorted(reaching):
        rules[names[name]] = _renamed(rules[name], names)
    return names


def _refs(node: Node) -> set[str]:
    """The names ``node`` refers to."""
    if isinstance(node, Ref):
        return {node.name}
    if isinstance(node, (Seq, Alt)):
        return set().union(*(_refs(i) for i in node.items))
    if isinstance(node, Rep):
        return _refs(node.item)
    return set()


def _renamed(node: Node, names: dict[str, str]) -> Node:
    """``node`` with each reference named in ``names`` renamed."""
    if isinstance(node, Ref):
        return Ref(names.get(node.name, node.name))
    if isinstance(node, Seq):
        return Seq(tuple(_renamed(i, names) for i in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(_renamed(i, names) for i in node.items))
    if isinstance(node, Rep):
        return Rep(_renamed(node.item, names), node.low, node.high)
    return node


def _order(max_chats: int | None) -> Node:
    """The ``order`` value: a positive integer, of as many digits as ``max_chats`` has."""
    if max_chats is not None and max_chats < 10:
        # Orders 1..max_chats: a model that numbers its reply by the turn writes a valid order instead.
        return from_regex(f"[1-{max_chats}]")
    digits = None if max_chats is None else len(str(max_chats)) - 1
    return Seq((from_regex("[1-9]"), Rep(from_regex("[0-9]"), 0, digits)))


def _member(key: str, value: Node, ws: Node) -> Node:
    """``"key": value`` in a JSON object."""
    return Seq((Lit(json.dumps(key)), ws, Lit(":"), ws, value))


def _chat(types: list[str], body_rule: str, ws: Node, speakers: Speakers | None) -> Node:
    """One chat object of one of ``types``, its body ``body_rule`` inside a JSON string."""
    kind = Alt(tuple(Lit(json.dumps(t)) for t in types)) if len(types) > 1 else Lit(json.dumps(types[0]))
    speaker: tuple[Node, ...] = ()
    if speakers and any(t in TAGGED_TYPES for t in types):  # a scene: who speaks, one of the cast
        names = tuple(Lit(json.dumps(s, ensure_ascii=False)) for s in speakers)
        speaker = (_member("speaker", names[0] if len(names) == 1 else Alt(names), ws), ws, Lit(","), ws)
    return Seq((
        Lit("{"), ws, _member("type", kind, ws), ws, Lit(","), ws, _member("order", Ref("ORDER"), ws), ws, Lit(","), ws,
        *speaker, _member("body", Seq((Lit('"'), Ref(body_rule), Lit('"'))), ws), ws, Lit("}"),
    ))  # fmt: skip


def _less(n: int | None) -> int | None:
    return None if n is None else n - 1
