"""The documented grammar call on two real models: replies that finish, parse strictly and say something.

SmolLM2-135M-Instruct and Gemma 3 270M (its ``gemma`` chat format) through llama-cpp-python; six turns
for each example character (rex in English, mio in Japanese), each constrained by the call the README
documents, ``charfmt.grammar(target, vocabulary=..., tags=..., max_tokens=300)`` (no model information:
``plan_bounds``' default tokens per character), as GBNF through llama.cpp's sampler and as Lark through
llguidance. Then a scene (rex and mio, a narrator), constrained through llguidance and through XGrammar:
every reply strictly valid, each speaker with its own emotions. Tokens/s of each sampler against free
generation: ``benchmarks/bench_model_grammar.py``. Marker ``model``; skips without llama-cpp-python or a
model (``tests/models.py`` says where they come from).
"""

from __future__ import annotations

import functools
import statistics
from typing import Any

import pytest
from conftest import ROOT
from models import CHAT_FORMATS, PLAYER_TURNS, SCENE_TURNS, gemma_path, smollm2_path

import charfmt
from charfmt import chat
from charfmt.constrain import budget
from charfmt.constrain.export import max_reply_tokens, resolve_bounds
from charfmt.prompt.character import Character, Exchange
from charfmt.prompt.scene import Scene
from charfmt.prompt.tokens import PROMPT_MARGIN

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (see docs/CHAT.md: pip install 'charfmt[local]')"
)

BUDGET = 300
N_CTX = 4096
MEDIAN_SPEECH = {"rex.toml": 60, "mio.toml": 40}
"""The least median speech (characters per ``C`` chat) the issue asks of each character."""

MODELS = {"smollm2": smollm2_path, "gemma": gemma_path}


@functools.cache
def _model(name: str) -> Any:
    from charfmt.llm._model_clients import LocalModel
    from charfmt.llm.loading import load_llama

    path = MODELS[name]()
    if path is None:
        pytest.skip(f"no {name} GGUF (see tests/models.py)")
    return LocalModel(load_llama(path, n_ctx=N_CTX, seed=0), chat_format=CHAT_FORMATS[name])


def speech(reply: charfmt.Reply, tags: charfmt.TagTable) -> list[int]:
    """Characters of speech in each ``C`` chat of ``reply``."""
    spoken = {s.name for s in tags if s.row.spoken}
    return [sum(len(s.text) for s in c.segments if s.tag in spoken) for c in reply.chats if c.type == "C"]


@pytest.mark.model
@pytest.mark.parametrize("target", ["gbnf", "lark"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_documented_grammar_call_finishes_parses_strictly_and_speaks(
    model: str, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if target == "lark":
        pytest.importorskip("llguidance", reason="llguidance is not installed (pip install 'charfmt[engines]')")
    local = _model(model)
    for file, says in PLAYER_TURNS.items():
        character = Character.load(ROOT / "examples" / "characters" / file)
        v, t = character.vocabulary, character.tags
        grammar = charfmt.grammar(target, vocabulary=v, tags=t, max_tokens=BUDGET)
        bounds = resolve_bounds(vocabulary=v, tags=t, max_tokens=BUDGET)
        assert bounds is not None and bounds.require_speech
        assert max_reply_tokens(bounds, vocabulary=v, tags=t, tokens_per_char=1.0) + 1 <= BUDGET
        stats: list[chat.TurnStats] = []
        generate = chat.local_model(
            local, gbnf=grammar if target == "gbnf" else None, lark=grammar if target == "lark" else None,
            max_tokens=BUDGET, seed=0, stats=stats,
        )  # fmt: skip
        history: list[Exchange] = []
        said: list[int] = []
        for say in says:
            turn = chat.take_turn(
                character, history, say, generate, strict=True, budget=N_CTX - BUDGET - PROMPT_MARGIN,
                counter=local.counter(), note=budget.limit_note(bounds),
            )  # fmt: skip
            assert stats[-1].finished and stats[-1].tokens <= BUDGET, (say, turn.text)
            lengths = speech(charfmt.parse(turn.text, vocabulary=v, tags=t), t)
            assert lengths and all(lengths), (say, turn.text)  # a C chat, and every C chat speaks
            said += lengths
        assert statistics.median(said) >= MEDIAN_SPEECH[file], (file, said)
        with capsys.disabled():
            print(f"\n{model} {file} {target}: 6/6 finished and strict, speech up to {bounds.max_chars}: {said}")


SHRINE = ROOT / "examples" / "scenes" / "mars_shrine.toml"


@pytest.mark.model
@pytest.mark.parametrize("engine", ["llguidance", "xgrammar"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_scene_constrained_is_strictly_valid_each_speaker_with_its_own_emotions(
    model: str, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scenes were 7 of 12 strictly valid: a speaker used another member's emotion, which Scene.parse refuses."""
    from charfmt.constrain.engines import llguidance_processor, xgrammar_processor

    if engine == "llguidance":
        pytest.importorskip("llguidance", reason="llguidance is not installed (pip install 'charfmt[engines]')")
    else:
        try:
            charfmt.constrain.engines.load_xgrammar()
        except charfmt.constrain.engines.EngineMissing as e:
            pytest.skip(str(e))
    local = _model(model)
    scene = Scene.load(SHRINE)
    bounds = budget.chat_bounds(scene, BUDGET, tokens_per_char=local.tokens_per_char(budget.speech_texts(scene)))
    grammar = scene.grammar("lark" if engine == "llguidance" else "gbnf", max_tokens=BUDGET,
                            tokens_per_char=local.tokens_per_char(budget.speech_texts(scene)))  # fmt: skip
    make = llguidance_processor if engine == "llguidance" else xgrammar_processor
    stats: list[chat.TurnStats] = []

    def generate(messages: list[dict[str, str]]) -> Any:
        chunks = local.chunks(messages, max_tokens=BUDGET, processor=make(local.llm, grammar), seed=len(stats))
        for chunk in chunks:
            choice = chunk["choices"][0]
            if choice["delta"].get("content"):
                yield choice["delta"]["content"]
            if choice.get("finish_reason"):
                stats.append(chat.TurnStats(0, 0, 0, choice["finish_reason"] == "stop", choice["finish_reason"]))

    history: list[Exchange] = []
    speakers: list[str | None] = []
    for say in SCENE_TURNS:
        turn = chat.take_turn(scene, history, say, generate, strict=True, budget=N_CTX - BUDGET - PROMPT_MARGIN,
                              counter=local.counter(), note=budget.limit_note(bounds))  # fmt: skip
        assert stats[-1].finished, turn.text
        scene.parse(turn.text)  # strictly valid: each speaker in the cast, each emotion its speaker's
        assert all(speech(turn.reply, scene.tags)), turn.text
        speakers += [c.speaker for c in turn.reply.chats if c.type == "C"]
    with capsys.disabled():
        print(f"\n{model} scene {engine}: 6/6 strict, speakers {speakers}")
