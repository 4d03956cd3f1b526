"""Benchmark: linear time on pathological input (10x the input must cost at most 12x the time).

Run: .venv/bin/python benchmarks/bench_pathological.py [--quick] [--only SUBSTRING]

Every shape comes at two sizes, N/10 and N, and runs through each path it applies to:
``strict`` and ``lenient`` ``parse``, ``stream`` (``StreamParser`` fed 4-character chunks,
which completes damaged input with the lenient parse), ``speech`` (``SentenceSplitter``
fed 4-character message deltas) and ``render`` (``render_text`` with a history of N
exchanges). Time is CPU time (``time.process_time``: other load on the machine does not
count). The two sizes run interleaved, round after round, each from a collected heap;
a round's ratio is large/small, and the figure is the median of the rounds' ratios. A
run shorter than 20 ms is repeated (up to 20 times) within its round and averaged.

``tests/parser/test_parser_linear.py`` runs the same shapes at small sizes as a regression guard.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import charfmt
from charfmt.events import ChatStart, SegmentEnd, SegmentStart, TextDelta

BOUND = 12.0
"""The largest acceptable time ratio for 10x the input."""

VOCABULARY = charfmt.Vocabulary.model_validate(
    {"emotions": [{"key": "joy", "aliases": ["happy"]}, {"key": "sad"}], "policy": "alias"}
)
ROOT = Path(__file__).resolve().parent.parent


def wrap(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, ensure_ascii=False)


def gaps(n: int) -> str:
    """N chats whose orders are 2..N+1: one order (1) missing, so CF112 must look through all N."""
    return json.dumps({"chats": [{"type": "I", "order": i + 2, "body": "x"} for i in range(n)]})


def history(n: int) -> list[charfmt.Exchange]:
    reply = charfmt.parse(wrap("<emo>joy</emo>\n<act>bow</act>\n<msg>ようこそ &amp; welcome!</msg>"))
    turn = charfmt.UserTurn.say("こんにちは！ <b>&</b>", emotion="joy")
    return [charfmt.Exchange(user=turn, reply=reply)] * n


@dataclass(frozen=True)
class Shape:
    """One pathological input: how to make it at size ``n``, the full size, and its paths."""

    name: str
    make: Callable[[int], Any]
    n: int
    modes: tuple[str, ...]
    issue: str = ""
    """Where the shape comes from (an issue item), or empty for the original eight."""


def deep(n: int) -> str:
    """``n`` characters inside sixteen nested ``{{random:`` (each level joins what it holds once)."""
    return "{{random:" * 16 + "x" * n + "}}" * 16


PARSE = ("strict", "lenient", "stream")

SHAPES: list[Shape] = [
    Shape("unclosed <emo> x N", lambda n: wrap("<emo>" * n), 100_000, PARSE),
    Shape("one message of N bytes", lambda n: wrap("<msg>" + "あいうえお.. " * (n // 20) + "</msg>"), 1_000_000, PARSE),
    Shape("'<' x N", lambda n: wrap("<msg>" + "<" * n + "</msg>"), 10_000, PARSE),
    Shape("tiny elements x N", lambda n: wrap("\n".join("<emo>a</emo>" for _ in range(n))), 100_000, PARSE),
    Shape("unclosed <think> x N", lambda n: "<think>" * n + '{"chats": []}', 100_000, PARSE),
    Shape("'[' x N", lambda n: "[" * n, 100_000, PARSE),
    Shape("unclosed quotes x N", lambda n: wrap('<msg>"' * n), 100_000, PARSE),
    Shape("invalid UTF-8 x N", lambda n: b"\xff" * n, 1_000_000, PARSE),
    Shape("vocabulary: <emo>Joy</emo> x N", lambda n: wrap("\n".join(["<emo>Joy</emo>"] * n)), 20_000, PARSE, "12.4"),
    Shape("order gap: N chats 2..N+1", gaps, 20_000, PARSE, "12.5"),
    Shape(
        "padded keys <EMO> joy </EMO> x N", lambda n: wrap("\n".join(["<EMO> joy </EMO>"] * n)), 20_000, PARSE, "12.6"
    ),
    Shape('{"chats":[]} + N <think>', lambda n: '{"chats":[]}' + "<think>" * n, 30_000, PARSE, "12.7"),
    Shape(
        "bare tags, N <thought>",
        lambda n: "<emo>joy</emo>\n" + "<msg>hello there</msg>\n<thought>hmm</thought>\n" * n,
        10_000,
        PARSE,
        "12.7",
    ),
    Shape("trailing '.' x N, 4-char deltas", lambda n: "Wait" + "." * n, 20_000, ("speech",), "12.8"),
    Shape(
        "unclosed 「 + N chars, 4-char deltas", lambda n: "「" + "あいうえお" * (n // 5), 200_000, ("speech",), "12.8"
    ),
    Shape("render_text, N exchanges", history, 2_000, ("render",), "renderer"),
    Shape("macros: {{char}} x N", lambda n: "{{char}} " * n, 200_000, ("macros",), "37.1"),
    Shape("macros: '{{' x N", lambda n: "{{" * n, 400_000, ("macros",), "37.1"),
    Shape("macros: {{unknown}} x N", lambda n: "{{mystery}}" * n, 200_000, ("macros",), "37.1"),
    Shape("macros: N deep {{random:{{...}}}}", deep, 1_000_000, ("macros",), "37.1"),
]


def _parse_limit(data: Any) -> int:
    return max(len(data) * 2, charfmt.parser.DEFAULT_MAX_SIZE)


def _vocabulary(shape: Shape) -> charfmt.Vocabulary | None:
    return VOCABULARY if shape.name.startswith("vocabulary") else None


def runner(shape: Shape, mode: str) -> Callable[[Any], object]:
    """The operation that ``mode`` performs on one input of ``shape``."""
    vocabulary = _vocabulary(shape)
    if mode == "strict":

        def strict(data: Any) -> object:
            with contextlib.suppress(charfmt.ParseError):
                return charfmt.parse(data, vocabulary=vocabulary, max_size=_parse_limit(data))
            return None

        return strict
    if mode == "lenient":
        return lambda data: charfmt.parse(data, lenient=True, vocabulary=vocabulary, max_size=_parse_limit(data))
    if mode == "stream":

        def stream(data: Any) -> object:
            parser = charfmt.StreamParser(max_size=_parse_limit(data), keep_reply=False, vocabulary=vocabulary)
            for i in range(0, len(data), 4):
                parser.feed(data[i : i + 4])
            return parser.close()

        return stream
    if mode == "speech":

        def speech(text: str) -> object:
            splitter = charfmt.SentenceSplitter()
            out = splitter.feed(ChatStart(0, "C", 1))
            out += splitter.feed(SegmentStart(0, 0, "msg"))
            for i in range(0, len(text), 4):
                out += splitter.feed(TextDelta(0, 0, "msg", text[i : i + 4]))
            out += splitter.feed(SegmentEnd(0, 0, "msg"))
            return out + splitter.close()

        return speech
    if mode == "render":
        character = charfmt.Character.load(ROOT / "examples" / "characters" / "mio.toml")
        turn = charfmt.UserTurn.say("またね")
        return lambda exchanges: charfmt.render_text(character, exchanges, turn)
    if mode == "macros":
        from charfmt.prompt.macros import Macros, expand

        return lambda text: expand(text, Macros("Seraphina", "Alex", seed=1, limit=100 * len(text) + 1000))
    raise ValueError(f"unknown mode {mode!r}")


def cpu(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


@dataclass(frozen=True)
class Measure:
    small: float
    """Median CPU seconds at N/10."""
    large: float
    """Median CPU seconds at N."""
    ratio: float
    """Median over the rounds of large / small."""


def _repeat(run: Callable[[Any], object], data: Any) -> int:
    """How many runs make one timing of at least 20 ms (at most 20): below that the clock,
    the allocator's first touch of fresh pages and other one-off costs decide."""
    once = cpu(lambda: run(data))
    return max(1, min(20, int(0.02 / max(once, 1e-6))))


def measure(run: Callable[[Any], object], small: Any, large: Any, rounds: int) -> Measure:
    """Interleaved rounds; in each, both sizes run often enough to be timed precisely."""
    run(small)  # warm caches (grammar tables, templates) outside the timing
    k_small, k_large = _repeat(run, small), _repeat(run, large)
    smalls, larges, ratios = [], [], []
    for _ in range(rounds):
        t_small = cpu(lambda: [run(small) for _ in range(k_small)]) / k_small
        t_large = cpu(lambda: [run(large) for _ in range(k_large)]) / k_large
        smalls.append(t_small)
        larges.append(t_large)
        ratios.append(t_large / max(t_small, 1e-9))
    return Measure(statistics.median(smalls), statistics.median(larges), statistics.median(ratios))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one tenth of the sizes, 3 rounds instead of 5")
    ap.add_argument("--only", default="", help="run only shapes whose name contains this text")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per measurement")
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    print(f"CPU time (process_time), median of {rounds} interleaved rounds; ratio = time(N) / time(N/10)")
    print(f"{'shape':<36} {'issue':<8} {'mode':<8} {'N':>9} {'N/10':>10} {'N':>10} {'ratio':>7}")
    worst: tuple[float, str] = (0.0, "")
    for shape in SHAPES:
        if args.only not in shape.name:
            continue
        n = shape.n // (10 if args.quick else 1)
        small, large = shape.make(n // 10), shape.make(n)
        for mode in shape.modes:
            m = measure(runner(shape, mode), small, large, rounds)
            flag = "  <-- over the bound" if m.ratio > BOUND else ""
            print(
                f"{shape.name:<36} {shape.issue:<8} {mode:<8} {n:>9,} {m.small * 1e3:>8.2f}ms "
                f"{m.large * 1e3:>8.1f}ms {m.ratio:>6.1f}x{flag}",
                flush=True,
            )
            worst = max(worst, (m.ratio, f"{shape.name} / {mode}"))
    print(f"worst ratio for 10x the input: {worst[0]:.1f}x ({worst[1]}); linear: 10x; the bound: {BOUND:.0f}x")
    return 0 if worst[0] <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
