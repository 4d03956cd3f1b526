"""How far a stream that cannot see the future can go: each reply's prefixes read by the batch reader.

Run: .venv/bin/python benchmarks/stream_ceiling.py [--half fit|tune|held] [--told] [--at lines|chunks] [--all-kinds]
     [--list K] [--gaps]

Over the real kinds (``real`` to ``real7``; ``--all-kinds``: every kind) of the tuning rows of
``benchmarks/data/stream_corpus.jsonl`` (``--half tune`` or ``fit``; ``held``: the held rows, the claim's among
them, read with the claim at a round's end and never while tuning), each reply's
prefixes that end a line (up to and including a ``\\n``, the whole reply excluded) are read with
``charfmt.parse(prefix, lenient=True)`` (``--told``: told the request's turn and prompt, as
``bench_stream_early.py --told`` tells the stream), and their speech (the segments of the speech tags and untagged
text, as the bench counts speech) compared with the whole reply's:

- ``prefix ok``: some prefix reads speech that is the start of the whole reply's speech (the same segments, the last
  one maybe shorter): the most a stream could show early if it judged each line end as the batch reader judges the
  whole, and nothing later changed its mind (a ceiling of speech before ``close()``, at the granularity of lines);
- ``retro``: some prefix reads speech that the whole reply's reading does not have (another text or tag): a stream
  that trusted the batch reader's judgement of each prefix would ``Reset`` there. These are the batch reader's
  *retroactive* decisions, where later text decides about earlier text; each is classed by the whole reading's
  diagnostic codes at the place of the first speech the prefix read otherwise (``(none)``: no note there, the text
  read another way: a quotation, a mark, a label);
- ``ok, never retro``: some prefix ok and none retroactive: a stream trusting each line end would speak early
  and never ``Reset``;
- ``stream early`` and ``stream Reset``: what ``StreamParser`` does on the same rows (as ``bench_stream_early.py``).

``--at chunks``: the prefixes at every chunk's end instead (the recorded chunks, else 4 characters), as the stream
is fed: a ceiling within lines too (a reply of one line of JSON speaks before it ends). ``--list K``: K retroactive
replies per code, with the prefix's speech and the whole's; ``--gaps``: the stream's ``Reset``s where no prefix read
speech otherwise, and the replies a prefix reads right, never otherwise, that the stream speaks only at ``close()``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_stream_early as bench

import charfmt

_REAL: Final = frozenset({"real", "real2", "real3", "real4", "real5", "real6", "real7"})


def speech(reply: charfmt.Reply) -> list[tuple[str, str]]:
    """The speech of ``reply`` as (tag, text) pairs, white space made single."""
    return [
        (s.tag, " ".join(s.text.split())) for c in reply.chats for s in c.segments if s.tag in bench.SPEECH and s.text
    ]


def agrees(part: list[tuple[str, str]], whole: list[tuple[str, str]]) -> int:
    """``-1`` if ``part`` is the start of ``whole`` (the same segments, the last one maybe shorter), else the index
    of the first segment of ``part`` that ``whole`` reads otherwise."""
    for k, (tag, text) in enumerate(part):
        if k >= len(whole) or whole[k][0] != tag:
            return k
        last = k == len(part) - 1
        if not (whole[k][1].startswith(text) if last else whole[k][1] == text):
            return k
    return -1


def line_ends(text: str) -> list[int]:
    """The ends of the proper prefixes of ``text`` that end a line (past each ``\\n`` but the last character)."""
    return [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 < len(text)]


def codes_at(batch: charfmt.Reply, at: int) -> str:
    """The codes of ``batch``'s notes whose span holds raw offset ``at`` (``(none)`` if none)."""
    found = sorted(
        {d.code for d in batch.diagnostics if d.offset is not None and d.offset <= at < max(d.end or 0, d.offset + 1)}
    )
    return "+".join(found) or "(none)"


def chunk_ends(row: dict[str, Any]) -> list[int]:
    """The ends of the proper prefixes of ``row``'s text at each of its chunks' ends, as the stream is fed."""
    ends, at = [], 0
    for chunk in bench.chunks_of(row, 4)[:-1]:
        at += len(chunk)
        ends.append(at)
    return ends


def judge(row: dict[str, Any], known: dict[str, Any] | None, *, chunks: bool = False) -> dict[str, Any]:
    """One reply's prefixes against its whole reading: whether it speaks, a prefix ok, the first retroactive one."""
    text = row["text"]
    whole = charfmt.parse(text, lenient=True, **(known or {}))
    said = speech(whole)
    out: dict[str, Any] = {"speaks": bool(said), "ok": None, "retro": None}
    for end in chunk_ends(row) if chunks else line_ends(text):
        part = speech(charfmt.parse(text[:end], lenient=True, **(known or {})))
        if not part:
            continue
        k = agrees(part, said)
        if k < 0:
            if out["ok"] is None and said:
                out["ok"] = end
            continue
        if out["retro"] is None:
            piece = part[k][1][:24]
            at = text.find(piece) if piece else -1
            if at < 0:  # (the text read with its marks dropped or joined: the first word of it)
                word = piece.split()[0] if piece.split() else ""
                at = text.find(word) if word else -1
            out["retro"] = (end, codes_at(whole, at) if at >= 0 else "(not found)", part[k], said[k : k + 1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half", choices=("fit", "tune", "held"), default="tune")
    ap.add_argument("--told", action="store_true", help="tell each reading its request's turn and prompt")
    ap.add_argument("--all-kinds", action="store_true", help="every kind, not the real ones only")
    ap.add_argument("--list", type=int, default=0, metavar="K", help="print K retroactive replies per code")
    ap.add_argument("--at", choices=("lines", "chunks"), default="lines", help="prefixes at line or chunk ends")
    ap.add_argument("--gaps", action="store_true", help="list the stream's Resets no prefix foresaw, and late replies")
    args = ap.parse_args(argv)
    rows = [r for r in bench.load(args.half) if args.all_kinds or r["kind"] in _REAL]
    known = bench.told(rows) if args.told else {}
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    by_code: Counter[str] = Counter()
    reset_by_code: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    gaps: list[str] = []
    for row in rows:
        told = known.get(row["id"])
        j = judge(row, told, chunks=args.at == "chunks")
        _speaks, spoke, reset, _differs = bench.measure(row, 4, told)
        for key in ("all", row["kind"]):
            c = counts[key]
            c["replies"] += 1
            c["speaks"] += j["speaks"]
            c["ok"] += j["ok"] is not None
            c["retro"] += j["retro"] is not None
            c["clean"] += j["ok"] is not None and j["retro"] is None
            c["early"] += spoke
            c["reset"] += reset
            c["reset, retro"] += reset and j["retro"] is not None
        if args.gaps and reset and j["retro"] is None:
            gaps.append(f"  Reset, no prefix read otherwise: {row['id']} ({row['kind']}): {row['text'][:100]!r}")
        if args.gaps and j["ok"] is not None and j["retro"] is None and not spoke:
            gaps.append(f"  late, a prefix ok at {j['ok']}: {row['id']} ({row['kind']}): {row['text'][:100]!r}")
        if j["retro"] is not None:
            end, code, part, said = j["retro"]
            by_code[code] += 1
            reset_by_code[code] += reset
            if len(examples[code]) < args.list:
                examples[code].append(
                    f"  {row['id']} ({row['kind']}), prefix of {end} of {len(row['text'])}: {part[0]} {part[1][:60]!r}"
                    f" -> whole: {said[0][0] + ' ' + repr(said[0][1][:60]) if said else '(no such segment)'}"
                )
    print(
        f"{bench.CORPUS.name}, half {args.half}{' (told)' if args.told else ''}: {len(rows)} replies,"
        f" prefixes at every {args.at[:-1]} end read with the batch reader"
    )
    print(
        f"  {'kind':<8} {'replies':>7} {'speak':>5} | {'prefix ok':>9} {'ok, never retro':>15} {'retro':>13} |"
        f" {'stream early':>12} {'stream Reset':>12} {'Reset & retro':>13}"
    )
    for key in ["all", *sorted(k for k in counts if k != "all")]:
        c = counts[key]
        n, s = max(c["replies"], 1), max(c["speaks"], 1)
        print(
            f"  {key:<8} {c['replies']:>7} {c['speaks']:>5} | {100 * c['ok'] / s:8.1f}% {100 * c['clean'] / s:14.1f}%"
            f" {c['retro']:>4} {100 * c['retro'] / n:6.2f}% |"
            f" {100 * c['early'] / s:11.1f}% {100 * c['reset'] / n:11.2f}%"
            f" {c['reset, retro']:>13}"
        )
    print("  (prefix ok, ok never retro, stream early: % of the replies that speak; retro, stream Reset: % of all)")
    print("retroactive decisions, by the whole reading's notes where the prefix's speech first differs:")
    print(f"  {'codes':<24} {'replies':>7} {'of them Reset by the stream':>28}")
    for code, n in by_code.most_common():
        print(f"  {code:<24} {n:>7} {reset_by_code[code]:>28}")
        for line in examples[code]:
            print(line)
    for line in sorted(gaps):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
