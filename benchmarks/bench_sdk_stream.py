"""Benchmark: what ``iter_events`` costs beside ``StreamParser.feed``, for text chunks and SDK objects.

Run: .venv/bin/python benchmarks/bench_sdk_stream.py [--rounds N]

- text chunks (``str`` in 1, 4 and 16 characters): ``list(charfmt.iter_events(chunks))``
  against the loop a user would write over ``StreamParser.feed``/``close``, and against a bare
  generator over ``feed`` (what ``iter_events`` was before it read SDK objects), interleaved
  round after round, CPU time, the median of the per-round ratios (1.00 = no cost);
- SDK objects: the same reply as OpenAI chat completions chunks (the JSON shape, as dicts:
  the rules read attributes or keys alike) and as Anthropic ``content_block_delta`` events,
  4 characters each, against the same text as ``str`` chunks through ``iter_events``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_parse import make_reply

import charfmt


def _feed_loop(chunks: list[Any]) -> None:
    parser = charfmt.StreamParser()
    events = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())


def _feed_generator(chunks: list[Any]) -> None:
    """What ``iter_events`` was before it read SDK objects: a generator over ``feed``."""

    def events() -> Any:
        parser = charfmt.StreamParser()
        for chunk in chunks:
            yield from parser.feed(chunk)
        yield from parser.close()

    list(events())


def _iter_events(chunks: list[Any]) -> None:
    list(charfmt.iter_events(chunks))


def _ratio(rounds: int, new: Callable[[], None], base: Callable[[], None]) -> float:
    ratios = []
    for _ in range(rounds):
        t = time.process_time()
        base()
        b = time.process_time() - t
        t = time.process_time()
        new()
        n = time.process_time() - t
        ratios.append(n / b)
    return statistics.median(ratios)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()
    text = make_reply(3_000)
    print(f"reply: {len(text):,} characters; reader: {charfmt.stream.reader_name()}; {args.rounds} rounds")
    for size in (1, 4, 16):
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        loop = _ratio(args.rounds, lambda c=chunks: _iter_events(c), lambda c=chunks: _feed_loop(c))
        generator = _ratio(args.rounds, lambda c=chunks: _iter_events(c), lambda c=chunks: _feed_generator(c))
        print(
            f"  str chunks of {size:>2}: iter_events / feed loop = {loop:.3f}, / generator over feed = {generator:.3f}"
        )
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    shapes = {
        "openai chat chunks": [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces],
        "anthropic text_delta events": [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}} for p in pieces
        ],
    }
    for name, items in shapes.items():
        ratio = _ratio(args.rounds, lambda i=items: _iter_events(i), lambda: _iter_events(pieces))
        print(f"  {name}: iter_events / iter_events on the str chunks = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
