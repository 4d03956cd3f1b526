"""A/B: the same measurements on two source trees of charfmt, interleaved, as a ratio B/A.

Run: .venv/bin/python benchmarks/ab.py A_TREE B_TREE [--rounds N] [--only parse,stream,...]

A redesign that must not change speed (issue 25) is checked with this: A is a checkout of the
commit before (``git worktree add --detach ../base <commit>``), B the working tree. Each round
runs every measurement once on each tree, in a fresh process with ``PYTHONPATH`` set to that
tree (the order A/B alternates round by round), and reads the child's CPU time (its own
``time.process_time`` around the work, or ``getrusage`` of the whole child for start-up). The
figure is the median of the per-round ratios B/A: 1.00 is the same speed, 1.03 is 3 % slower.

- ``parse``: ``charfmt.parse`` of a 3 KB and a 300 KB valid reply (strict), and of a damaged
  one (``lenient=True``), as ``bench_parse.make_reply`` writes them.
- ``stream``: a 300 KB reply streamed in 4-character chunks with the pure-Python reader
  (``CHARFMT_PURE_PYTHON=1``: an uninstalled tree has no compiled twin), then collected.
- ``turn``: ``charfmt serve``'s reading of one turn (``serve.turns._Reading``: the stream reader, the
  stage and the sentences) fed a 300 KB reply in 4-character deltas, as an upstream sends them
  (not in the default ``--only``: ask for it).
- ``coldstart``: ``import charfmt`` + the first strict parse of a 300-byte reply (whole child).
- ``report``: ``python -m charfmt report`` over 10,000 log lines (damaged and clean replies),
  ``--jobs 1`` (whole child).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = {
    "parse": """
        import time, charfmt
        from bench_parse import make_reply
        small, big = make_reply(3_000), make_reply(300_000)
        damaged = big.replace('</msg>', '', 40).replace('"order": 7,', '"order": 7', 1)
        charfmt.parse(small); charfmt.parse(damaged, lenient=True)
        t = time.process_time()
        for _ in range(200): charfmt.parse(small)
        for _ in range(3): charfmt.parse(big)
        for _ in range(2): charfmt.parse(damaged, lenient=True)
        print(time.process_time() - t)
    """,
    "stream": """
        import time, charfmt
        from charfmt.stream import StreamParser
        from bench_parse import make_reply
        text = make_reply(300_000)
        t = time.process_time()
        for _ in range(2):
            p = StreamParser()
            for i in range(0, len(text), 4): p.feed(text[i:i + 4])
            p.close()
        print(time.process_time() - t)
    """,
    "turn": """
        import time
        from pathlib import Path
        from charfmt import Character
        from charfmt.llm._replies import Delta
        from charfmt.serve.settings import Settings
        from charfmt.serve.turns import Engine, _Reading
        from bench_parse import make_reply

        class Upstream:
            name = "ab"

        rex = Character.load(Path("examples/characters/rex.toml"))
        engine = Engine(Settings(character=rex, upstream=Upstream()), Upstream())
        text = make_reply(300_000)
        deltas = [Delta(text[i:i + 4]) for i in range(0, len(text), 4)]
        t = time.process_time()
        for _ in range(2):
            reading = _Reading(engine, None, events=True, cues=True)
            for delta in deltas: reading.feed(delta)
            reading.close()
        print(time.process_time() - t)
    """,
}


def _child_cpu(tree: Path, code: str, env: dict[str, str]) -> float:
    """Run ``code`` on ``tree``; its printed CPU time.

    In ``tree`` as its folder: ``python -c`` puts the current folder first on ``sys.path``, so a
    run started inside the other tree would otherwise import that tree's charfmt.
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**env, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}"},
        capture_output=True, text=True, check=True, cwd=tree,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def _whole_child_cpu(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """CPU time (user + system) of a whole child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, check=False)
    if run.returncode not in (0, 1):  # report: 1 when a reply of the log is invalid
        raise RuntimeError(f"{cmd} exited {run.returncode}: {run.stderr.decode()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _report_log(folder: Path) -> Path:
    """10,000 log lines of damaged and clean replies (``charfmt.fuzz``, the same for both trees)."""
    log = folder / "log.jsonl"
    code = f"""
        import json
        from charfmt.fuzz import fuzz_cases
        from charfmt.writer import dumps
        with open({str(log)!r}, "w", encoding="utf-8") as out:
            for i, case in enumerate(fuzz_cases(7, 5_000)):
                for text in (case.text, dumps(case.original)):
                    out.write(json.dumps({{"model": "m" + str(i % 2), "reply": text}}) + "\\n")
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)
    return log


def measure(name: str, tree: Path, scratch: Path) -> float:
    env = {**os.environ, "CHARFMT_PURE_PYTHON": "1"}
    env.pop("PYTHONPATH", None)
    if name in _CHILD:
        return _child_cpu(tree, _CHILD[name], env)
    env["PYTHONPATH"] = f"{tree}{os.pathsep}{HERE}"
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache" / tree.name)
    if name == "coldstart":
        code = "import charfmt; from bench_parse import make_reply; charfmt.parse(make_reply(300))"
        return _whole_child_cpu([sys.executable, "-c", code], env, scratch)
    if name == "report":
        log = scratch / "log.jsonl"
        out = scratch / f"out-{tree.name}"
        cmd = [sys.executable, "-m", "charfmt", "report", str(log), "--by", "model", "--format", "json", "--jobs", "1"]
        return _whole_child_cpu([*cmd, "--out", str(out)], env, scratch)
    raise ValueError(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="tree A (the baseline)")
    ap.add_argument("b", type=Path, help="tree B")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--only", default="parse,stream,coldstart,report")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    names = args.only.split(",")
    a, b = args.a.resolve(), args.b.resolve()
    ratios: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        if "report" in names:
            _report_log(scratch)
        for n in names:  # warm the bytecode caches of both trees
            measure(n, a, scratch), measure(n, b, scratch)
        for r in range(args.rounds):
            for n in names:
                first, second = (a, b) if r % 2 == 0 else (b, a)
                t1, t2 = measure(n, first, scratch), measure(n, second, scratch)
                ta, tb = (t1, t2) if first == a else (t2, t1)
                ratios[n].append(tb / ta)
            print(f"round {r + 1}: " + ", ".join(f"{n} {ratios[n][-1]:.3f}" for n in names), flush=True)
    result = {n: statistics.median(v) for n, v in ratios.items()}
    print(f"B/A, median of {args.rounds} per-round CPU-time ratios (B = {b}, A = {a}):")
    for n, v in result.items():
        print(f"  {n:10s} {v:.3f}  ({'faster' if v < 1 else 'slower'} by {abs(v - 1) * 100:.1f} %)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
