"""Bounded grammars on two real models: replies that finish, parse strictly and say something.

SmolLM2-135M-Instruct and Gemma 3 270M (a base model: llama.cpp falls back to a generic chat
template) through llama-cpp-python; six turns for each example character (rex in English, mio in
Japanese), the grammar bounded at ``max_tokens=300`` by ``charfmt chat``'s own ``chat_bounds``
(the model's tokens per character, speech required). Sampled through llguidance where it is
installed (GBNF through llama.cpp's sampler otherwise). Tokens/s of each sampler against free
generation: ``benchmarks/bench_model_grammar.py``. Marker ``model``; skips without llama-cpp-python
or a model (``tests/models.py`` says where they come from).
"""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

import pytest
from conftest import ROOT
from models import PLAYER_TURNS, gemma_path, smollm2_path

import charfmt
from charfmt import chat
from charfmt.character import Character, Exchange
from charfmt.export import _gbnf_target, _lark_target, max_reply_tokens, measure_tokens_per_char, reply_grammar

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (see docs/CHAT.md: pip install 'charfmt[local]')"
)

BUDGET = 300
TURNS = PLAYER_TURNS
MEDIAN_SPEECH = {"rex.toml": 60, "mio.toml": 40}
"""The least median speech (characters per ``C`` chat) the issue asks of each character."""

MODELS = {"smollm2": smollm2_path, "gemma": gemma_path}


def _model(name: str) -> Any:
    from charfmt.engines import load_llama

    path = MODELS[name]()
    if path is None:
        pytest.skip(f"no {name} GGUF (see tests/models.py)")
    return load_llama(path, n_ctx=4096, seed=0)


@pytest.mark.model
@pytest.mark.parametrize("model", sorted(MODELS))
def test_bounded_replies_finish_parse_strictly_and_speak(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    from charfmt.engines import llama_counter

    llm = _model(model)
    counter = llama_counter(llm)
    llguidance = importlib.util.find_spec("llguidance") is not None
    for file, says in TURNS.items():
        character = Character.load(ROOT / "examples" / "characters" / file)
        per_char = measure_tokens_per_char(llama_counter(llm, per_message=0), chat.speech_texts(character))
        bounds = chat.chat_bounds(character, BUDGET, tokens_per_char=per_char)
        assert bounds.require_speech
        assert max_reply_tokens(bounds, vocabulary=character.vocabulary, tags=character.tags,
                                tokens_per_char=per_char) + 1 <= BUDGET  # fmt: skip
        g = reply_grammar(character.vocabulary, character.tags, bounds=bounds)
        stats: list[chat.TurnStats] = []
        generate = chat.local_model(
            llm, gbnf=_gbnf_target(g), lark=_lark_target(g) if llguidance else None, max_tokens=BUDGET, stats=stats
        )
        history: list[Exchange] = []
        speech: list[int] = []
        spoken = {s.name for s in character.tags if s.role == "speech"}
        for say in says:
            turn = chat.take_turn(
                character, history, say, generate, strict=True, budget=4096 - BUDGET - chat.PROMPT_MARGIN,
                counter=counter, note=chat.limit_note(bounds),
            )  # fmt: skip
            assert stats[-1].finished and stats[-1].tokens <= BUDGET, (say, turn.text)
            reply = charfmt.parse(turn.text, vocabulary=character.vocabulary, tags=character.tags)
            said = [sum(len(s.text) for s in c.segments if s.tag in spoken) for c in reply.chats if c.type == "C"]
            assert said and all(said), (say, turn.text)  # a C chat, and every C chat has speech
            speech += said
        assert statistics.median(speech) >= MEDIAN_SPEECH[file], (file, speech)
        with capsys.disabled():
            print(f"\n{model} {file} ({'llguidance' if llguidance else 'GBNF'}, {per_char:.2f} tokens/char, "
                  f"speech up to {bounds.max_chars}): 6/6 finished and strict, speech {speech}")  # fmt: skip
