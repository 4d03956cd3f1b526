"""charfmt report --engine ray: the same report, rows and keep-set as the local run (Ray in local mode)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from test_batch import run_recipe
from test_report import make_log

from charfmt import report
from charfmt.cli import main

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="--engine ray needs Ray Data (extra charfmt[ray])")
pytest.importorskip("ray.data")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local Ray for the module (its start-up is most of the time)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_gives_the_same_report_and_outputs(
    local_ray: None, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log.jsonl"
    make_log(log, count=60)
    monkeypatch.setattr(report, "RAY_RANGE_BYTES", 4096)  # several tasks, so order matters
    monkeypatch.setattr(report, "CHUNK_LINES", 7)
    monkeypatch.setattr(report, "ROW_GROUP", 50)
    assert len(report.ray_ranges(str(log), 1 << 20, 4096)) > 3
    results = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        argv = ["report", str(log), "--by", "model,prompt_version", "--format", "json", "--out", str(out)]
        assert main([*argv, "--engine", engine]) == 0
        printed = capsys.readouterr().out
        results[engine] = (printed, *((out / n).read_bytes() for n in ("rows.parquet", "keep.jsonl", "report.json")))
    assert results["ray"] == results["local"]
    assert '"bad_lines"' in results["ray"][0] and len(results["ray"][1]) > 0


def test_ray_ranges_cover_the_file_at_line_ends(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    data = b"".join(b'{"text": "%d"}\n' % i for i in range(500)) + b"x" * 3000 + b"\nlast"
    log.write_bytes(data)
    ranges = report.ray_ranges(str(log), 1000, 1024)
    assert ranges[0]["start"] == 0 and ranges[0]["first_line"] == 1
    for before, after in pairwise(ranges):
        assert after["start"] == before["start"] + before["length"]
        assert data[after["start"] - 1 : after["start"]] == b"\n"
        assert after["first_line"] == data.count(b"\n", 0, after["start"]) + 1
    assert ranges[-1]["start"] + ranges[-1]["length"] == len(data)


def test_readme_ray_recipe(local_ray: None) -> None:
    rows = run_recipe("ray")["rows"]
    got = sorted(rows.take_all(), key=lambda r: r["id"])
    assert [(r["id"], r["valid"], r["dialect"]) for r in got] == [(1, True, None), (2, False, "plain-text")]


def test_ray_reads_a_characters_own_tags(local_ray: None, tmp_path: Path, capsys: Any) -> None:
    from test_custom_tags_tools import SFX_REPLIES, YUKI, YUKI_FILE, write_log

    log = write_log(tmp_path / "log.jsonl", SFX_REPLIES)
    printed = {}
    for engine in ("local", "ray"):
        argv = ["report", str(log), "--format", "json", "--character", str(YUKI_FILE), "--engine", engine]
        assert main(argv) == 0
        printed[engine] = capsys.readouterr().out
    assert printed["ray"] == printed["local"] and '"valid_pct": 100.0' in printed["ray"]
    # The README's recipe with a character: fn_kwargs carries the tags and the vocabulary to each task.
    import pyarrow as pa

    from charfmt.batch import parse_table

    ds = ray.data.from_arrow(pa.table({"text": SFX_REPLIES}))
    language = {"tags": YUKI.tags, "vocabulary": YUKI.vocabulary}
    rows = ds.map_batches(parse_table, fn_kwargs=language, batch_format="pyarrow").take_all()
    assert [r["keep"] for r in rows] == [True] * 30
