"""Benchmark: how soon a stream speaks, and how seldom it takes back what it showed (issue 40, item 6).

Run: .venv/bin/python benchmarks/bench_stream_early.py [--half held|fit|all] [--chunk N] [--show K]

Over ``benchmarks/data/stream_corpus.jsonl`` (real model replies, the replies written by hand after
them, and real prose, quoted speech and CJK lines sent off-format, as bare tags with entities, as
canonical replies and damaged ones; ``benchmarks/data/make_stream_corpus.py`` says how it is built),
each reply streamed in the chunks it was recorded in, else in ``--chunk``-character chunks (default 4):

- speech before ``close()``: of the replies whose lenient parse has speech text, the share whose
  first speech ``TextDelta`` comes before ``close()`` (goal >= 95 %);
- Resets: the share of all replies whose stream emits a ``Reset`` (goal <= 0.2 %);
- stream != batch: replies whose stream ends with other chats than ``parse(text, lenient=True)``
  (must be 0);
- per kind of reply, the same; ``--show K`` prints K replies that speak only at ``close()``.

The stream's heuristics are tuned on the ``fit`` half; the figures to report are the ``held`` half's
(the default), read once at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

import charfmt

CORPUS: Final = Path(__file__).resolve().parent / "data" / "stream_corpus.jsonl"
SPEECH: Final = {t.name for t in charfmt.DEFAULT_TAGS.with_role("speech")} | {charfmt.tags.TEXT_TAG}


def load(half: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if half == "all" or r["half"] == half]


def chunks_of(row: dict[str, Any], size: int) -> list[str]:
    if row["chunks"]:
        return list(row["chunks"])
    text = row["text"]
    return [text[i : i + size] for i in range(0, len(text), size)]


def measure(row: dict[str, Any], size: int) -> tuple[bool, bool, bool, bool]:
    """``(speaks, spoke early, reset, differs)`` of one reply."""
    text = row["text"]
    batch = charfmt.parse(text, lenient=True)
    parser = charfmt.StreamParser()
    early: list[charfmt.Event] = []
    for chunk in chunks_of(row, size):
        early.extend(parser.feed(chunk))
    late = parser.close()
    speaks = any(s.tag in SPEECH and s.text for c in batch.chats for s in c.segments)
    spoke = any(isinstance(e, charfmt.TextDelta) and e.tag in SPEECH for e in early)
    reset = any(isinstance(e, charfmt.Reset) for e in early + late)
    return speaks, speaks and spoke, reset, charfmt.collect(early + late).chats != batch.chats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("held", "fit", "all"), default="held")
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--show", type=int, default=0, metavar="K")
    args = ap.parse_args(argv)
    rows = load(args.half)
    counts: dict[str, Counter[str]] = {}
    late: list[dict[str, Any]] = []
    for row in rows:
        speaks, spoke, reset, differs = measure(row, args.chunk)
        for key in ("all", row["kind"]):
            c = counts.setdefault(key, Counter())
            c["replies"] += 1
            c["speaks"] += speaks
            c["early"] += spoke
            c["reset"] += reset
            c["differ"] += differs
        if speaks and not spoke:
            late.append(row)
    reader = "compiled" if charfmt.stream.COMPILED else "pure Python"
    print(
        f"{CORPUS.name}, half {args.half}: {len(rows)} replies,"
        f" {args.chunk}-char chunks where none were recorded ({reader})"
    )
    for key in ["all", *sorted(k for k in counts if k != "all")]:
        c = counts[key]
        print(
            f"  {key:<11} speech before close(): {100 * c['early'] / max(c['speaks'], 1):5.1f} % of {c['speaks']:>4}"
            f"   Reset: {100 * c['reset'] / max(c['replies'], 1):4.2f} % of {c['replies']:>4}"
            f"   stream != batch: {c['differ']}"
        )
    for row in late[: args.show]:
        print(f"--- {row['id']} ({row['kind']}): {row['text'][:160]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
