"""Benchmark: cold start, ``import charfmt`` + the first strict parse of a typical reply, in a fresh process.

Run: .venv/bin/python benchmarks/bench_coldstart.py [--runs N] [--base TREE] [--breakdown] [--json OUT]

Each round starts fresh interpreters back to back: a bare one (``-c pass``), one that imports
charfmt and parses a typical ~300-byte reply (``bench_parse.make_reply(300)``) strictly, and two
baselines: pydantic's own import (``from pydantic import BaseModel``, issue 41's yardstick) and
pydantic's floor for a library of models (that import, ``Field``, and three small frozen models
with ``defer_build``: what any package defining pydantic models pays before any code of its own;
charfmt's models are pydantic's). The figures are the median over rounds of (child - bare): what
each costs at start-up, and charfmt's over pydantic's import as the median of the per-round
ratios. Bytecode is cached (in a private folder), as it is after an install. The figure is CPU
time (user + system of the child, from ``getrusage(RUSAGE_CHILDREN)``), which a loaded machine
moves little; wall-clock time is shown for context. ``-X importtime`` of the same run is
summarised as the slowest imports (cumulative microseconds).

``--base TREE`` also runs the same child on another source tree of charfmt (``git worktree add
--detach ../base COMMIT``) in the same rounds: its figure, and this tree's over it (before/after
in one run). ``--breakdown`` says where the time goes: fresh interpreters that load pydantic's
floor, then ``json``, then each module of charfmt in the order the first parse finishes loading
them (each one's own cost: what it imports is loaded before it), then run the first parse,
timing every step (CPU, median over ``--runs``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_parse import make_reply

ROOT = Path(__file__).resolve().parent.parent
GOAL_MS = 120.0
GOAL_RATIO = 1.3
"""Issue 41: import charfmt + first parse within 1.3x pydantic's own import (shown, not the exit status)."""
PYDANTIC = "from pydantic import BaseModel"
PYDANTIC_FLOOR = """
from pydantic import BaseModel, ConfigDict, Field
class A(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    x: int
    y: str | None = None
class B(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    a: list[A] = Field(default_factory=list)
class C(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    b: list[B]
"""
_PYCACHE = tempfile.mkdtemp(prefix="charfmt-coldstart-")


def _env(root: Path = ROOT) -> dict[str, str]:
    """The children import the charfmt of ``root`` (this file's tree), with bytecode cached (as after an install).

    ``PYTHONDONTWRITEBYTECODE`` would make every run compile charfmt's sources anew; the
    bytecode goes to a private folder instead of the source tree.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    return env


def _child(args: list[str], root: Path = ROOT) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh interpreter running ``args`` on the charfmt of ``root``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, env=_env(root), cwd=root)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def cold_start(sample: str, runs: int, base: Path | None = None) -> dict[str, float]:
    """Median over ``runs`` interleaved rounds of each child minus the bare interpreter (seconds), and the ratios."""
    full = f"import charfmt; charfmt.parse({sample!r})"
    children = {"full": (full, ROOT), "pydantic": (PYDANTIC, ROOT), "floor": (PYDANTIC_FLOOR, ROOT)}
    if base is not None:
        children["base"] = (full, base)
    cpu: dict[str, list[float]] = {name: [] for name in children}
    wall: list[float] = []
    bare_cpu: list[float] = []
    bare_wall: list[float] = []
    for code, root in (*children.values(), ("pass", ROOT)):  # warm the file cache and write the bytecode
        _child(["-c", code], root)
    for _ in range(runs):
        b_cpu, b_wall = _child(["-c", "pass"])
        for name, (code, root) in children.items():
            c_cpu, c_wall = _child(["-c", code], root)
            cpu[name].append(c_cpu - b_cpu)
            if name == "full":
                wall.append(c_wall - b_wall)
        bare_cpu.append(b_cpu)
        bare_wall.append(b_wall)
    compared = {}
    if base is not None:
        compared = {
            "base_cpu": statistics.median(cpu["base"]),
            "base_over_pydantic": statistics.median(b / p for b, p in zip(cpu["base"], cpu["pydantic"], strict=True)),
            "over_base": statistics.median(f / b for f, b in zip(cpu["full"], cpu["base"], strict=True)),
        }
    return {
        **compared,
        "cpu": statistics.median(cpu["full"]),
        "wall": statistics.median(wall),
        "interpreter_cpu": statistics.median(bare_cpu),
        "interpreter_wall": statistics.median(bare_wall),
        "pydantic_cpu": statistics.median(cpu["pydantic"]),
        "pydantic_floor_cpu": statistics.median(cpu["floor"]),
        "over_pydantic": statistics.median(f / p for f, p in zip(cpu["full"], cpu["pydantic"], strict=True)),
        "floor_over_pydantic": statistics.median(f / p for f, p in zip(cpu["floor"], cpu["pydantic"], strict=True)),
    }


def import_profile(code: str, top: int) -> list[tuple[int, str]]:
    """The ``top`` slowest imports of running ``code`` by cumulative time (µs), from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
        cwd=ROOT,
    )
    rows: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


_STEPS = """
import sys, time
steps = []
def step(name, t=[time.process_time()]):
    now = time.process_time()
    steps.append((name, now - t[0]))
    t[0] = now
from pydantic import BaseModel
step("pydantic: from pydantic import BaseModel")
from pydantic import ConfigDict, Field
class _A(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    x: int = Field(default=0)
step("pydantic's floor: Field, pydantic.types, a model with defer_build")
import json
step("json")
import importlib
for name in MODULES:
    importlib.import_module(name)
    step(name)
import charfmt
charfmt.parse(SAMPLE)
step("the first parse")
print(repr(steps))
"""


def _load_order(sample: str) -> list[str]:
    """The modules of charfmt the first parse loads, each after what it imports.

    ``-X importtime`` prints an import when it ends; one made by ``importlib.import_module`` (``charfmt``'s
    lazy names: ``charfmt.parse`` loads ``charfmt.parser``) it does not print, so those come last.
    """
    code = f"import charfmt, sys; charfmt.parse({sample!r}); print(' '.join(sys.modules))"
    args = [sys.executable, "-X", "importtime", "-c", code]
    done = subprocess.run(args, capture_output=True, text=True, check=True, env=_env(), cwd=ROOT)
    names = [line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    loaded = [name for name in done.stdout.split() if name == "charfmt" or name.startswith("charfmt.")]
    ended = [name for name in names if name in loaded]
    return ended + [name for name in loaded if name not in ended]


def breakdown(sample: str, runs: int) -> list[tuple[str, float]]:
    """Each step of a cold start (pydantic, json, each module of charfmt, the first parse): its median CPU seconds."""
    code = _STEPS.replace("MODULES", repr(_load_order(sample))).replace("SAMPLE", repr(sample))
    rounds: list[list[tuple[str, float]]] = []
    for _ in range(runs + 1):  # (the first writes the bytecode)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env())
        rounds.append(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    names = [name for name, _ in rounds[-1]]
    return [(name, statistics.median(r[i][1] for r in rounds[1:])) for i, name in enumerate(names)]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures; exit 1 if CPU time is over the goal."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="interleaved rounds (default 15)")
    ap.add_argument("--top", type=int, default=15, help="import-time rows to show (default 15)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--base", type=Path, help="another tree of charfmt, measured in the same rounds (before/after)")
    ap.add_argument("--breakdown", action="store_true", help="also time each step of a cold start")
    args = ap.parse_args(argv)
    sample = make_reply(300)
    result = cold_start(sample, args.runs, args.base)
    profile = import_profile(f"import charfmt; charfmt.parse({sample!r})", args.top)
    print(
        f"cold start (import charfmt + first strict parse, bare interpreter subtracted, median of {args.runs}):\n"
        f"  CPU  {result['cpu'] * 1e3:6.1f} ms   (bare interpreter {result['interpreter_cpu'] * 1e3:.1f} ms)\n"
        f"  wall {result['wall'] * 1e3:6.1f} ms   (bare interpreter {result['interpreter_wall'] * 1e3:.1f} ms)\n"
        f"  goal <= {GOAL_MS:.0f} ms CPU\n"
        f"pydantic's own import ({PYDANTIC}): CPU {result['pydantic_cpu'] * 1e3:.1f} ms\n"
        f"  charfmt / pydantic's import: {result['over_pydantic']:.2f}x (median of per-round ratios; "
        f"goal <= {GOAL_RATIO:.2f}x)\n"
        f"  pydantic's floor for a library of models (+ Field, three small models): CPU "
        f"{result['pydantic_floor_cpu'] * 1e3:.1f} ms, {result['floor_over_pydantic']:.2f}x its import"
    )
    if args.base is not None:
        print(
            f"base tree ({args.base}), same rounds: CPU {result['base_cpu'] * 1e3:.1f} ms, "
            f"{result['base_over_pydantic']:.2f}x pydantic's import\n"
            f"  this tree / base: {result['over_base']:.3f} (median of per-round ratios)"
        )
    print("slowest imports of import charfmt + first strict parse (cumulative µs, -X importtime):")
    for cumulative, name in profile:
        print(f"  {cumulative:8d}  {name}")
    steps = breakdown(sample, args.runs) if args.breakdown else []
    if steps:
        print(f"where a cold start's CPU goes (each step after the one before it, median of {args.runs}):")
        for name, seconds in steps:
            print(f"  {seconds * 1e3:7.2f} ms  {name}")
        own = sum(s for name, s in steps if name.startswith("charfmt") or name in ("json", "the first parse"))
        print(f"  {own * 1e3:7.2f} ms  charfmt's own (json, its modules, the first parse)")
    if args.json:
        report = {**result, "imports": profile, "breakdown": steps}
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0 if result["cpu"] * 1e3 <= GOAL_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
