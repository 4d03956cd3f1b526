"""The body language's lexical facts are written once (``charfmt/_grammar/lexical.py``) and agree with the grammar.

- One entity decoder, one JSON-escape table, one class of body-text characters: read from
  the package's source (AST), no other module restates them. The modules that still do are
  listed below as known exceptions; the list only shrinks (a test fails when an entry no
  longer applies), like ``tests/project/test_architecture.py``'s.
- What the lexical module derives from ``grammars/body.lark`` is what the grammar's own
  terminals accept.
"""

from __future__ import annotations

import ast
import json
import re
from html.entities import html5

import pytest
from conftest import ROOT

from charfmt._grammar import lexical
from charfmt._grammar.static import terminal_regex
from charfmt.prompt.userinput import _input_lark

PACKAGE = ROOT / "charfmt"

HOME: frozenset[str] = frozenset({"charfmt._grammar.lexical", "charfmt._grammar._lalr"})
"""Where the facts may stand: the lexical module, and the tables generated from the grammar."""

# Modules (of other owners in issue 25) that still restate a fact, and which.
KNOWN_RESTATED: dict[str, set[str]] = {}

_ENTITY_NAMES = re.compile(r"\bamp\|lt\b|\bquot\|amp\b|\blt\|gt\b")
_TEXT_CLASS = ("\\ud800-\\udfff", "\ud800-\udfff", "\\x0e-\\x1f", "\x0e-\x1f")
"""How a restated class of text characters shows: its lone-surrogate or C0-control range."""


def _facts(tree: ast.AST) -> set[str]:
    """Which facts a module's source states itself."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _ENTITY_NAMES.search(node.value):
                found.add("entity decoder")  # a pattern naming the entities
            if any(part in node.value for part in _TEXT_CLASS):
                found.add("body-text class")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if keys & {"amp", "&amp;"}:
                found.add("entity decoder")  # a table of entities
            if {"b", "f", "n", "r", "t"} <= keys or {"\b", "\f"} <= keys:
                found.add("JSON-escape table")
        elif isinstance(node, ast.Tuple):
            pair = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if pair == ["\b", "\\b"]:
                found.add("JSON-escape table")  # a table of (character, escape) pairs
        elif isinstance(node, ast.Attribute) and node.attr == "unescape" and ast.unparse(node.value) == "html":
            found.add("entity decoder")
    return found


def restated() -> dict[str, set[str]]:
    """Module -> the lexical facts its source states (outside their home)."""
    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        facts = _facts(ast.parse(path.read_text(encoding="utf-8")))
        if facts and name not in HOME:
            out[name] = facts
    return out


def test_the_finder_sees_what_it_looks_for() -> None:
    assert _facts(ast.parse('E = re.compile(r"&(amp|lt|gt);")')) == {"entity decoder"}
    assert _facts(ast.parse('T = {"amp": "&"}')) == {"entity decoder"}
    assert _facts(ast.parse('J = {"b": "\\b", "f": "\\f", "n": "\\n", "r": "\\r", "t": "\\t"}')) == {
        "JSON-escape table"
    }
    assert _facts(ast.parse('C = re.compile(r"[^<&\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]")')) == {"body-text class"}
    source = (PACKAGE / "_grammar" / "lexical.py").read_text(encoding="utf-8")
    assert "JSON-escape table" in _facts(ast.parse(source))


def test_no_module_restates_a_lexical_fact() -> None:
    new = {name: facts - KNOWN_RESTATED.get(name, set()) for name, facts in restated().items()}
    new = {name: facts for name, facts in new.items() if facts}
    assert not new, f"use charfmt._grammar.lexical instead: {new}"


def test_known_restatements_still_exist() -> None:
    found = restated()
    gone = {name: facts - found.get(name, set()) for name, facts in KNOWN_RESTATED.items()}
    gone = {name: facts for name, facts in gone.items() if facts}
    assert not gone, f"switched (delete from KNOWN_RESTATED): {gone}"


# --- the facts agree with the grammar ----------------------------------------------------------


def test_the_text_class_is_the_grammars() -> None:
    text = terminal_regex("TEXT")
    text_char = re.compile(lexical.text_class())
    for cp in range(0x110000):
        ch = chr(cp)
        literal = text.fullmatch(ch) is not None
        assert (text_char.fullmatch(ch) is not None) == literal, hex(cp)
        assert (lexical.NOT_TEXT_CHAR.fullmatch(ch) is not None) == (not literal and ch not in lexical.MARKUP), hex(cp)


def test_the_key_class_is_the_grammars() -> None:
    key = terminal_regex("KEY")
    not_key = re.compile(f"[{lexical.NOT_KEY}]")
    for cp in range(0x110000):
        ch = chr(cp)
        # a character a key may hold between two others
        inside = key.fullmatch(f"a{ch}b") is not None
        assert (not_key.fullmatch(ch) is None) == inside, hex(cp)


def test_the_decoder_decodes_exactly_what_text_allows() -> None:
    text = terminal_regex("TEXT")
    for cp in [*range(0x300), *range(0xD700, 0xE100), *range(0x10FF00, 0x110005), *range(0, 0x110000, 4099)]:
        allowed = text.fullmatch(f"&#x{cp:x};") is not None
        assert (lexical.entity_char(f"#x{cp:x}") is not None) == allowed, hex(cp)
        assert (lexical.entity_char(f"#{cp}") is not None) == allowed, cp
        if allowed:
            assert lexical.decode_text(f"&#x{cp:X};&#{cp};") == chr(cp) * 2
    for name, ch in lexical.NAMED_ENTITIES.items():
        assert text.fullmatch(f"&{name};"), name
        assert html5[f"{name};"] == ch, name
    assert not text.fullmatch("&nbsp;") and lexical.entity_char("nbsp") is None


def test_strict_and_lenient_decoding() -> None:
    assert lexical.decode_text("a &amp;lt; &#x1F389; &quot;") == 'a &lt; \U0001f389 "'
    with pytest.raises(lexical.BadEntity) as bad:
        lexical.decode_text("x &#0; y")
    assert bad.value.entity == "&#0;"
    assert lexical.decode_entities("&eacute; &#0; &amp;lt; &nosuch; &#65;") == "é &#0; &lt; &nosuch; A"


def test_the_json_escape_table_is_jsons() -> None:
    for letter, ch in lexical.JSON_ESCAPES.items():
        assert json.loads(f'"\\{letter}"') == ch, letter
    for letter in "acdeghijklmopqsvwxyz'":
        with pytest.raises(json.JSONDecodeError):
            json.loads(f'"\\{letter}"')


def test_the_writer_escapes_markup() -> None:
    assert "a<b&c>d".translate(lexical.TEXT_ESCAPES) == "a&lt;b&amp;c&gt;d"
    assert lexical.decode_text("a<b&c>d".translate(lexical.TEXT_ESCAPES)) == "a<b&c>d"


def test_the_text_class_composes() -> None:
    """The stream reader's run of plain text inside a JSON string: text, and no '"', '\\' or raw control."""
    run = re.compile(lexical.text_class('"\\\\\\x00-\\x1f') + "+")
    assert run.fullmatch("ab>c\u3042")
    for bad in ("a<b", "a&b", 'a"b', "a\\b", "a\nb", "a\x7fb", "a\ud800b"):
        assert run.fullmatch(bad) is None, bad


# --- the other grammar files derive their text from the body's --------------------------------

GRAMMARS = PACKAGE.parent / "grammars"


@pytest.mark.parametrize("name", sorted(p.name for p in GRAMMARS.glob("*.lark") if p.name != "body.lark"))
def test_no_other_grammar_file_restates_the_text_class(name: str) -> None:
    source = (GRAMMARS / name).read_text(encoding="utf-8")
    restated = [part for part in _TEXT_CLASS if part in source]
    assert not restated, f"grammars/{name} restates the body's text class ({restated}): use _PLAIN or TEXT"


def test_the_user_blocks_text_is_the_bodys() -> None:
    grammar = _input_lark()  # the input grammar, as parse_input loads it

    def terminal(name: str) -> re.Pattern[str]:
        return re.compile(grammar.get_terminal(name).pattern.to_regexp())

    text, message, value = terminal("TEXT"), terminal("MESSAGE_TEXT"), terminal("CONTEXT_VALUE")
    for cp in range(0x110000):
        ch = chr(cp)
        literal = text.fullmatch(ch) is not None
        assert (message.fullmatch(ch) is not None) == literal, hex(cp)  # [User Message]: any text
        assert (value.fullmatch(ch) is not None) == (literal and ch not in "\t\n\r"), hex(cp)  # a value: one line
    assert message.fullmatch("a &amp; b") and value.fullmatch("a &amp; b&#10;c") and not value.fullmatch("a\nb")
