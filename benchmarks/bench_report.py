"""Benchmark: ``charfmt report`` throughput with worker processes, peak memory vs input size, Ray's overhead.

Run: .venv/bin/python benchmarks/bench_report.py [--quick] [--records N] [--rounds R] [--no-ray] [--no-out]

The log holds ``N`` records (default 200,000; ``--quick`` 20,000): replies from
``charfmt.fuzz`` (damaged) and their clean originals, half and half, in two models and
three prompt versions. Every run is ``python -m charfmt report LOG --by model,prompt_version
--format json --out DIR`` in a fresh process, so each figure includes start-up:

* **throughput**: ``--jobs 1`` and ``--jobs 2`` in interleaved rounds; records per second
  of wall time, and the median of the per-round ratios jobs2 / jobs1 (target >= 1.7x on
  2 cores). CPU time (the process and its workers, from ``wait4``) gives the workers'
  overhead: jobs2 CPU / jobs1 CPU.
* **memory**: peak resident set of the largest process (``ru_maxrss`` from ``wait4``)
  at 1x and 5x the records (the log repeated 5 times), ``--jobs 2``; target ratio <= 1.2.
* **Ray**: ``--engine ray`` (a local Ray started by the command) against ``--jobs 2``:
  the report must be identical, and its CPU time is summed over every process of the
  run's session (sampled from ``/proc`` while it runs, so Ray's own daemons count).

Wall-clock throughput is the figure that parallelism changes, so it is what the ratio
uses; on a machine shared with other work the figures move, and the median of the
per-round ratios moves least. Every report of a run is compared with the first: a
benchmark whose runs disagree is a failure, not a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def write_log(path: Path, records: int) -> None:
    """``records`` JSON Lines records: fuzz cases and their originals."""
    sys.path.insert(0, str(ROOT))
    from charfmt.fuzz import iter_fuzz_cases
    from charfmt.writer import dumps

    with path.open("w", encoding="utf-8") as f:
        n = 0
        for case in iter_fuzz_cases(17, (records + 1) // 2):
            for text in (case.text, dumps(case.original)):
                if n == records:
                    break
                record = {"id": n, "model": ("m1", "m2")[n % 2], "prompt_version": f"v{n % 3}", "text": text}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                n += 1


def _command(log: Path, out: Path | None, *options: str) -> list[str]:
    argv = [sys.executable, "-m", "charfmt", "report", str(log), "--by", "model,prompt_version", "--format", "json"]
    argv += ["--no-progress", *options]
    if out is not None:
        argv += ["--out", str(out)]
    return argv


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def measure(argv: list[str]) -> dict[str, Any]:
    """Run ``argv``; its wall time, CPU time and peak RSS (the process and the workers it waited for)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as stdout:
        child = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, env=_env())
        _pid, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        stderr = child.stderr.read().decode() if child.stderr else ""
        if status != 0:
            raise SystemExit(f"failed ({status}): {' '.join(argv)}\n{stderr}")
        stdout.seek(0)
        report = stdout.read()
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "report": report,
    }


def _session_cpu(session: int) -> dict[int, float]:
    """CPU seconds of every live process in ``session``, by pid."""
    found: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session:  # field 6 of stat: the session id
            found[int(name)] = (int(fields[11]) + int(fields[12])) / TICKS
    return found


def measure_session(argv: list[str]) -> dict[str, Any]:
    """Like :func:`measure`, with CPU summed over every process of the run's own session (Ray's daemons too)."""
    start = time.perf_counter()
    seen: dict[int, float] = {}
    with tempfile.TemporaryFile() as stdout:
        child = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, env=_env(), start_new_session=True)
        while child.poll() is None:
            for pid, cpu in _session_cpu(child.pid).items():
                seen[pid] = max(seen.get(pid, 0.0), cpu)
            time.sleep(0.2)
        wall = time.perf_counter() - start
        stderr = child.stderr.read().decode() if child.stderr else ""
        if child.returncode != 0:
            raise SystemExit(f"failed ({child.returncode}): {' '.join(argv)}\n{stderr}")
        stdout.seek(0)
        report = stdout.read()
    return {"wall": wall, "cpu": sum(seen.values()), "processes": len(seen), "report": report}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20,000 records, 2 rounds")
    p.add_argument("--records", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--no-ray", action="store_true", help="skip the Ray run")
    p.add_argument("--ray-only", action="store_true", help="only the Ray run against --jobs 2")
    p.add_argument("--no-out", action="store_true", help="report only, no Parquet / keep-set")
    args = p.parse_args()
    records = args.records or (20_000 if args.quick else 200_000)
    rounds = args.rounds or (2 if args.quick else 3)
    work = Path(tempfile.mkdtemp(prefix="bench_report_"))
    try:
        log = work / "log.jsonl"
        t = time.perf_counter()
        write_log(log, records)
        print(f"log: {records:,} records, {log.stat().st_size / 1e6:.1f} MB (made in {time.perf_counter() - t:.1f} s)")
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")

        def out(name: str) -> Path | None:
            return None if args.no_out else work / name

        runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        for r in range(0 if args.ray_only else rounds):
            for jobs in (1, 2) if r % 2 == 0 else (2, 1):
                result = measure(_command(log, out(f"out{jobs}"), "--jobs", str(jobs)))
                runs[jobs].append(result)
                print(
                    f"round {r + 1} --jobs {jobs}: {records / result['wall']:8,.0f} records/s wall, "
                    f"{result['cpu']:6.1f} s CPU, peak RSS {result['rss_mb']:.0f} MB"
                )
        if args.ray_only:
            ray_run(args, log, out, work)
            return
        first = runs[1][0]["report"]
        assert all(run["report"] == first for rs in runs.values() for run in rs), "reports differ between runs"
        if not args.no_out:
            for name in ("rows.parquet", "keep.jsonl"):
                assert (work / "out1" / name).read_bytes() == (work / "out2" / name).read_bytes(), name
        speedups = [one["wall"] / two["wall"] for one, two in zip(runs[1], runs[2], strict=True)]
        overheads = [two["cpu"] / one["cpu"] for one, two in zip(runs[1], runs[2], strict=True)]
        speedup = statistics.median(speedups)
        print(
            f"\nthroughput --jobs 2 / --jobs 1: {speedup:.2f}x (median of {rounds} rounds: "
            f"{', '.join(f'{s:.2f}' for s in speedups)}; target >= 1.7x) "
            f"{'PASS' if speedup >= 1.7 else 'BELOW TARGET'}"
        )
        print(f"CPU --jobs 2 / --jobs 1: {statistics.median(overheads):.2f}x (workers' overhead)")

        big = work / "log5.jsonl"
        with big.open("wb") as f:
            for _ in range(5):
                f.write(log.read_bytes())
        one_x = max(run["rss_mb"] for run in runs[2])
        five = measure(_command(big, out("out5"), "--jobs", "2"))
        ratio = five["rss_mb"] / one_x
        print(
            f"peak RSS --jobs 2: {one_x:.0f} MB at {records:,} records, {five['rss_mb']:.0f} MB at {5 * records:,} "
            f"({ratio:.2f}x; target <= 1.2x) {'PASS' if ratio <= 1.2 else 'ABOVE TARGET'}"
        )

        if not args.no_ray:
            ray_run(args, log, out, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ray_run(args: argparse.Namespace, log: Path, out: Any, work: Path) -> None:
    """``--engine ray`` against ``--jobs 2``: identical output, and the CPU of every process of each run."""
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray: not installed; skipped")
        return
    local = measure_session(_command(log, out("out_local"), "--jobs", "2"))
    on_ray = measure_session(_command(log, out("out_ray"), "--engine", "ray"))
    differ = [] if on_ray["report"] == local["report"] else ["report"]
    if not args.no_out:
        differ += [
            n
            for n in ("rows.parquet", "keep.jsonl")
            if (work / "out_ray" / n).read_bytes() != (work / "out_local" / n).read_bytes()
        ]
    same = not differ
    print(
        f"ray local mode: {on_ray['wall']:.1f} s wall, {on_ray['cpu']:.1f} s CPU over "
        f"{on_ray['processes']} processes; --jobs 2: {local['wall']:.1f} s wall, {local['cpu']:.1f} s CPU; "
        f"CPU overhead {100 * (on_ray['cpu'] / local['cpu'] - 1):+.0f}%, "
        f"wall {on_ray['wall'] / local['wall']:.2f}x; report identical: {same}"
    )
    assert same, f"the Ray run's output differs from the local one: {', '.join(differ)}"


if __name__ == "__main__":
    main()
