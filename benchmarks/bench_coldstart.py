"""Benchmark: cold start, ``import charfmt`` + the first strict parse of a typical reply, in a fresh process.

Run: .venv/bin/python benchmarks/bench_coldstart.py [--runs N] [--json OUT]

Each round starts two fresh interpreters back to back: a bare one (``-c pass``) and one that
imports charfmt and parses a typical ~300-byte reply (``bench_parse.make_reply(300)``) strictly.
The figure is the median over rounds of (full - bare): what charfmt itself costs at start-up.
It is given in CPU time (user + system of the child, from ``getrusage(RUSAGE_CHILDREN)``), which
a loaded machine moves little, and in wall-clock time for context. ``-X importtime`` of
``import charfmt`` is summarised as the slowest top-level imports (cumulative microseconds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_parse import make_reply

ROOT = Path(__file__).resolve().parent.parent
GOAL_MS = 120.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _child(args: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh interpreter running ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, env=_env())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def cold_start(sample: str, runs: int) -> dict[str, float]:
    """Median over ``runs`` interleaved rounds of the full run minus the bare interpreter (seconds)."""
    code = f"import charfmt; charfmt.parse({sample!r})"
    cpu, wall, bare_cpu, bare_wall = [], [], [], []
    _child(["-c", code])  # warm the file cache and the bytecode
    for _ in range(runs):
        b_cpu, b_wall = _child(["-c", "pass"])
        f_cpu, f_wall = _child(["-c", code])
        cpu.append(f_cpu - b_cpu)
        wall.append(f_wall - b_wall)
        bare_cpu.append(b_cpu)
        bare_wall.append(b_wall)
    return {
        "cpu": statistics.median(cpu),
        "wall": statistics.median(wall),
        "interpreter_cpu": statistics.median(bare_cpu),
        "interpreter_wall": statistics.median(bare_wall),
    }


def import_profile(top: int) -> list[tuple[int, str]]:
    """The ``top`` slowest imports of ``import charfmt`` by cumulative time (µs), from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import charfmt"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    rows: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures; exit 1 if CPU time is over the goal."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="interleaved rounds (default 15)")
    ap.add_argument("--top", type=int, default=15, help="import-time rows to show (default 15)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    result = cold_start(make_reply(300), args.runs)
    profile = import_profile(args.top)
    print(
        f"cold start (import charfmt + first strict parse, bare interpreter subtracted, median of {args.runs}):\n"
        f"  CPU  {result['cpu'] * 1e3:6.1f} ms   (bare interpreter {result['interpreter_cpu'] * 1e3:.1f} ms)\n"
        f"  wall {result['wall'] * 1e3:6.1f} ms   (bare interpreter {result['interpreter_wall'] * 1e3:.1f} ms)\n"
        f"  goal <= {GOAL_MS:.0f} ms CPU"
    )
    print("slowest imports of `import charfmt` (cumulative µs, -X importtime):")
    for cumulative, name in profile:
        print(f"  {cumulative:8d}  {name}")
    if args.json:
        args.json.write_text(json.dumps({**result, "imports": profile}, indent=2), encoding="utf-8")
    return 0 if result["cpu"] * 1e3 <= GOAL_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
