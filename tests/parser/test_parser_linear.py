"""Guards against the quadratic shapes of issue 12 coming back (small sizes, CPU time).

Each shape of ``benchmarks/bench_pathological.py`` that was once superlinear runs at a
small size n and at 10n; the best of three CPU times at each size must keep the ratio
under a generous 30x (linear is 10x; the regressions these guard against were 40x-90x
at these sizes). The benchmark itself checks the real bound (12x) at full sizes.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("bench_pathological", ROOT / "benchmarks" / "bench_pathological.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_pathological"] = bench
_spec.loader.exec_module(bench)

RATIO = 30.0
SHAPES = {shape.name: shape for shape in bench.SHAPES}

# (shape, mode, small n)
GUARDS: list[tuple[str, str, int]] = [
    ("vocabulary: <emo>Joy</emo> x N", "strict", 300),
    ("vocabulary: <emo>Joy</emo> x N", "lenient", 300),
    ("vocabulary: <emo>Joy</emo> x N", "stream", 300),
    ("order gap: N chats 2..N+1", "strict", 2_000),  # lenient reads valid input on the same path
    ("padded keys <EMO> joy </EMO> x N", "lenient", 100),
    ("padded keys <EMO> joy </EMO> x N", "stream", 100),
    ('{"chats":[]} + N <think>', "lenient", 300),
    ('{"chats":[]} + N <think>', "stream", 300),
    ("bare tags, N <thought>", "lenient", 100),
    ("bare tags, N <thought>", "stream", 100),
    ("trailing '.' x N, 4-char deltas", "speech", 200),
    ("unclosed 「 + N chars, 4-char deltas", "speech", 30_000),
    ("render_text, N exchanges", "render", 20),
    ("macros: {{char}} x N", "macros", 2_000),
    ("macros: '{{' x N", "macros", 4_000),
    ("macros: {{unknown}} x N", "macros", 2_000),
    ("macros: N deep {{random:{{...}}}}", "macros", 10_000),
]


def _best(run: Callable[[Any], object], data: Any) -> float:
    times = []
    for _ in range(3):
        start = time.process_time()
        run(data)
        times.append(time.process_time() - start)
    return min(times)


def _params() -> list[object]:
    out: list[object] = []
    for name, mode, n in GUARDS:
        out.append(pytest.param(name, mode, n, id=f"{name}-{mode}"))
    return out


@pytest.mark.parametrize(("name", "mode", "n"), _params())
def test_ten_times_the_input_costs_about_ten_times_the_time(name: str, mode: str, n: int) -> None:
    shape = SHAPES[name]
    run = bench.runner(shape, mode)
    small, large = shape.make(n), shape.make(10 * n)
    run(small)  # caches (grammar tables, templates) are not what is measured
    t_small = max(_best(run, small), 1e-4)  # below 0.1 ms the clock, not the code, decides
    t_large = _best(run, large)
    assert t_large / t_small <= RATIO, f"{name} / {mode}: {t_small * 1e3:.2f} ms -> {t_large * 1e3:.2f} ms"


def test_every_issue_shape_of_the_benchmark_is_guarded() -> None:
    guarded = {name for name, _mode, _n in GUARDS}
    assert {s.name for s in bench.SHAPES if s.issue} <= guarded
