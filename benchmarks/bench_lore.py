"""A/B: a turn's prompt with a 20,000-entry lorebook (plain and regex keys), CPU time, on two source trees.

Run: .venv/bin/python benchmarks/bench_lore.py A_TREE B_TREE [--rounds N] [--entries N]

A is a checkout of the commit before (``git worktree add --detach ../base <commit>``), B the working tree.
Each round runs one fresh child per tree (the order alternating round by round), ``PYTHONPATH`` that tree:
it builds the card a new user's trial wrote (each entry ten plain keys and a ``/x{i}+y/i`` regex key of its
own, its content naming the next entry's key; recursive scanning, a 100,000-token budget; the turn says
``k1``), then measures with ``time.process_time`` the first ``render_turn`` (the book's regex keys
compiled) and the median of the next three (a server's later turns). The figures are the medians of the
per-round ratios B/A (below 1: B is faster) and each tree's median seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent(
    """
    import json, statistics, sys, time, charfmt
    n = int(sys.argv[1])
    book = [{"id": i, "keys": [f"k{i * 10 + j}" for j in range(10)] + [f"/x{i}+y/i"], "secondary_keys": [f"s{i}"],
             "content": f"lore {i} {{{{char}}}} k{i + 1} ", "enabled": True, "insertion_order": i,
             "position": "after_char", "selective": False} for i in range(n)]
    lore = {"entries": book, "recursive_scanning": True, "token_budget": 100000}
    data = {"name": "Kira", "description": "A pirate.", "first_mes": "hi k0", "character_book": lore}
    c = charfmt.Character.from_bytes(json.dumps({"spec": "chara_card_v2", "data": data}).encode(), "kira.json")
    turn = c.shorthand("hello k1 there")
    times = []
    for _ in range(4):
        start = time.process_time()
        charfmt.render_turn(c, [], turn, seed=1)
        times.append(time.process_time() - start)
    assert charfmt.__file__.startswith(sys.argv[2]), (charfmt.__file__, sys.argv[2])
    print(json.dumps({"first": times[0], "later": statistics.median(times[1:])}))
    """
)


def _measure(tree: str, entries: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree, "CHARFMT_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(entries), tree],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=900,
        cwd=tree,
    )  # fmt: skip (cwd: "-c" puts it first on the path)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--entries", type=int, default=20_000)
    args = ap.parse_args()
    rows: list[tuple[dict[str, float], dict[str, float]]] = []
    for n in range(args.rounds):
        if n % 2:
            b = _measure(args.b, args.entries)
            a = _measure(args.a, args.entries)
        else:
            a = _measure(args.a, args.entries)
            b = _measure(args.b, args.entries)
        rows.append((a, b))
        print(f"round {n + 1}: A first {a['first']:.2f} s later {a['later']:.2f} s; "
              f"B first {b['first']:.2f} s later {b['later']:.2f} s", flush=True)  # fmt: skip
    for what in ("first", "later"):
        ratio = statistics.median(b[what] / a[what] for a, b in rows)
        a_s = statistics.median(a[what] for a, _ in rows)
        b_s = statistics.median(b[what] for _, b in rows)
        print(f"{what} turn: B/A {ratio:.3f} (A {a_s:.2f} s, B {b_s:.2f} s CPU; median of {len(rows)} rounds)")


if __name__ == "__main__":
    main()
