"""Benchmark: linear time on pathological input (10x the input must cost at most 12x the time).

Run: .venv/bin/python benchmarks/bench_pathological.py [--quick]

Each input comes at two sizes, n/10 and n; both are parsed leniently (the mode that
must read everything) and, where it differs, strictly, and streamed in 4-character
chunks (``StreamParser``, which completes damaged input with the lenient parse). For context, the lazy regex
``<(\\w+)>(.*?)</\\1>`` that many tools use is timed on the same inputs (capped).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import re
import sys
import time
from collections.abc import Callable

import charfmt

LAZY = re.compile(r"<(\w+)>(.*?)</\1>", re.S)


def wrap(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, ensure_ascii=False)


INPUTS: dict[str, Callable[[int], str | bytes]] = {
    "unclosed <emo> x N": lambda n: wrap("<emo>" * n),
    "one message of N bytes": lambda n: wrap("<msg>" + "あいうえお.. " * (n // 20) + "</msg>"),
    "'<' x N": lambda n: wrap("<msg>" + "<" * n + "</msg>"),
    "tiny elements x N": lambda n: wrap("\n".join("<emo>a</emo>" for _ in range(n))),
    "unclosed <think> x N": lambda n: "<think>" * n + '{"chats": []}',
    "'[' x N": lambda n: "[" * n,
    "unclosed quotes x N": lambda n: wrap('<msg>"' * n),
    "invalid UTF-8 x N": lambda n: b"\xff" * n,
}
SIZES = {
    "unclosed <emo> x N": 100_000,
    "one message of N bytes": 1_000_000,
    "'<' x N": 10_000,
    "tiny elements x N": 100_000,
    "unclosed <think> x N": 100_000,
    "'[' x N": 100_000,
    "unclosed quotes x N": 100_000,
    "invalid UTF-8 x N": 1_000_000,
}


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best(fn: Callable[[], object], rounds: int) -> float:
    """The fastest of ``rounds`` runs, each from a collected heap (as ``timeit`` advises: the
    slower runs measure other load on the machine, not the code)."""
    times = []
    for _ in range(rounds):
        gc.collect()
        times.append(timed(fn))
    return min(times)


def best_pair(small: Callable[[], object], large: Callable[[], object], rounds: int) -> tuple[float, float]:
    """The fastest run of each, the two interleaved so that both see the same machine and
    the same number of tries; see ``best``."""
    t_small, t_large = [], []
    for _ in range(rounds):
        gc.collect()
        t_small.append(timed(small))
        gc.collect()
        t_large.append(timed(large))
    return min(t_small), min(t_large)


def stream(data: str | bytes, max_size: int) -> None:
    parser = charfmt.StreamParser(max_size=max_size, keep_reply=False)
    for i in range(0, len(data), 4):
        parser.feed(data[i : i + 4])
    parser.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one tenth of the sizes, fewer rounds")
    args = ap.parse_args(argv)
    rounds = 3 if args.quick else 7
    print(
        f"{'input':<24} {'N':>9} {'lenient N/10':>13} {'lenient N':>11} {'ratio':>6}  {'strict N':>9}  "
        f"{'stream N/10':>11} {'stream N':>9} {'ratio':>6}  lazy regex N"
    )
    worst = 0.0
    for name, make in INPUTS.items():
        n = SIZES[name] // (10 if args.quick else 1)
        small, large = make(n // 10), make(n)
        size = max(len(large) * 2, charfmt.parser.DEFAULT_MAX_SIZE)
        t_small, t_large = best_pair(
            functools.partial(charfmt.parse, small, lenient=True, max_size=size),
            functools.partial(charfmt.parse, large, lenient=True, max_size=size),
            rounds,
        )
        reply = charfmt.parse(large, lenient=True, max_size=size)
        assert "CF999" not in [d.code for d in reply.diagnostics], name

        def strict(s: str | bytes = large, limit: int = size) -> None:
            with contextlib.suppress(charfmt.ParseError):
                charfmt.parse(s, max_size=limit)

        t_strict = best(strict, rounds)
        s_small, s_large = best_pair(
            functools.partial(stream, small, size), functools.partial(stream, large, size), rounds
        )
        lazy_text = (large if isinstance(large, str) else large.decode("latin-1"))[:50_000]
        t_lazy = best(lambda s=lazy_text: list(LAZY.finditer(s)), 1)  # type: ignore[misc]
        ratio, s_ratio = t_large / t_small, s_large / s_small
        worst = max(worst, ratio, s_ratio)
        print(
            f"{name:<24} {n:>9,} {t_small * 1e3:>11.1f}ms {t_large * 1e3:>9.1f}ms {ratio:>5.1f}x  "
            f"{t_strict * 1e3:>7.1f}ms  {s_small * 1e3:>9.1f}ms {s_large * 1e3:>7.1f}ms {s_ratio:>5.1f}x  "
            f"{t_lazy * 1e3:.1f}ms on the first 50 KB"
        )
    print(f"worst ratio for 10x the input: {worst:.1f}x (linear: 10x; the bound: 12x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
