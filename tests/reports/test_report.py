"""charfmt report: per-group figures of a JSON Lines log, the same for any --jobs; bad lines; --out; exit codes."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

import charfmt
from charfmt.cli import main
from charfmt.fuzz import iter_fuzz_cases

pa = pytest.importorskip("pyarrow", reason="charfmt report needs pyarrow (extra charfmt[arrow])")
pq = pytest.importorskip("pyarrow.parquet")

from charfmt import report  # noqa: E402 (after the skip)

BAD_LINES: dict[str, str] = {
    "not json\n": "not JSON: Expecting value at column 1",
    "[1, 2]\n": "not a JSON object but an array",
    '{"model": "a"}\n': "no field 'text' (string keys [\"model\"])",
    '{"text": 3, "model": "b"}\n': "field 'text' is a number, not a string",
    '{"text": null}\n': "field 'text' is null, not a string",
    '{"text": null, "status": 502, "error": "upstream: 502 Bad Gateway"}\n': (
        "a turn that failed: no reply (status 502: upstream: 502 Bad Gateway)"  # charfmt serve --log's line
    ),
    "[" * 100_000 + "\n": "not JSON that can be read: nested too deeply",
}


def make_log(path: Path, count: int = 120, seed: int = 7) -> list[dict[str, Any]]:
    """A log of damaged replies and their originals in two models, with every kind of bad line sprinkled in."""
    records: list[dict[str, Any]] = []
    lines: list[bytes] = []
    bad = list(BAD_LINES)
    for i, case in enumerate(iter_fuzz_cases(seed, count)):
        for text in (case.text, charfmt.dumps(case.original)):
            record = {"text": text, "model": "ab"[len(records) % 2], "prompt_version": len(records) % 3}
            records.append(record)
            lines.append(json.dumps(record, ensure_ascii=False).encode() + b"\n")
        if i % 20 == 5:
            lines.append(bad[(i // 20) % len(bad)].encode())
            lines.append(b"\n")  # a blank line: skipped
    lines.append(b'{"text": "caf\xff"}\n')  # not UTF-8
    path.write_bytes(b"".join(lines))
    return records


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    path = tmp_path_factory.mktemp("report") / "log.jsonl"
    return path, make_log(path)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["report", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _strict_ok(text: str) -> bool:
    try:
        charfmt.parse(text)
    except charfmt.ParseError:
        return False
    return True


def test_figures_match_an_independent_count(log: tuple[Path, list[dict[str, Any]]], capsys: Any) -> None:
    path, records = log
    got = run_json(capsys, str(path), "--by", "model", "--top", "100")
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    lines = path.read_bytes().split(b"\n")
    line_of = {}
    for n, raw in enumerate(lines, 1):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            line_of[len(line_of)] = n
            groups.setdefault(value["model"], []).append((n, value))
    assert len(line_of) == len(records)
    assert [g["key"] for g in got["groups"]] == [{"model": "a"}, {"model": "b"}]
    for group in got["groups"]:
        members = groups[group["key"]["model"]]
        replies = [(n, charfmt.parse(r["text"], lenient=True), r["text"]) for n, r in members]
        assert group["count"] == len(members)
        assert group["valid"] == sum(_strict_ok(t) for _, _, t in replies)
        assert group["empty"] == sum(not r.chats and not _strict_ok(t) for _, r, t in replies)
        assert group["repaired"] == sum(bool(r.chats) and not _strict_ok(t) for _, r, t in replies)
        sizes = sorted(len(t.encode()) for _, _, t in replies)
        assert group["size_p50"] == sizes[math.ceil(0.5 * len(sizes)) - 1]
        assert group["size_p99"] == sizes[math.ceil(0.99 * len(sizes)) - 1]
        codes = Counter(code for _, r, _ in replies for code in {d.code for d in r.diagnostics})
        assert {c["code"]: c["replies"] for c in group["codes"]} == dict(codes)
        for c in group["codes"]:
            first = next((n, r) for n, r, _ in replies if any(d.code == c["code"] for d in r.diagnostics))
            assert c["example"]["line"] == first[0]
            d = next(d for d in first[1].diagnostics if d.code == c["code"])
            assert c["example"]["message"] == f"{d.line}:{d.column}: {d.code} {d.message}"
        dialects = Counter(r.dialect or ("strict" if _strict_ok(t) else "none") for _, r, t in replies)
        assert {d["dialect"]: d["replies"] for d in group["dialects"]} == dict(dialects)
    assert got["total"]["count"] == len(records)
    assert got["total"]["valid"] == sum(g["valid"] for g in got["groups"])


def test_bad_lines_are_counted_with_their_line_numbers(log: tuple[Path, list[dict[str, Any]]], capsys: Any) -> None:
    path, _records = log
    got = run_json(capsys, str(path))
    expected = []
    for n, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        text = raw.decode("utf-8", "replace") + "\n"
        if text in BAD_LINES:
            expected.append({"line": n, "reason": BAD_LINES[text]})
        elif b"\xff" in raw:
            expected.append({"line": n, "reason": "not UTF-8: byte 0xFF at byte offset 13"})
    assert got["bad_lines"]["first"] == expected
    assert got["bad_lines"]["count"] == len(expected) >= len(BAD_LINES)
    assert got["lines"] == len(path.read_bytes().split(b"\n")) - 1


def test_the_report_is_the_same_for_any_number_of_jobs(
    log: tuple[Path, list[dict[str, Any]]], tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _records = log
    monkeypatch.setattr(report, "CHUNK_LINES", 17)  # many chunks, so the workers interleave
    monkeypatch.setattr(report, "ROW_GROUP", 100)
    outputs = {}
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}"
        assert main(["report", str(path), "--by", "model,prompt_version", "--jobs", str(jobs), "--out", str(out)]) == 0
        text = capsys.readouterr().out
        files = {name: (out / name).read_bytes() for name in ("rows.parquet", "keep.jsonl", "report.txt")}
        assert files["report.txt"].decode() == text
        outputs[jobs] = files
    assert outputs[1] == outputs[2]


def test_out_rows_and_keep_set(log: tuple[Path, list[dict[str, Any]]], tmp_path: Path, capsys: Any) -> None:
    path, _records = log
    got = run_json(capsys, str(path), "--by", "model", "--out", str(tmp_path))
    rows = pq.read_table(tmp_path / "rows.parquet")
    assert sorted(os.listdir(tmp_path)) == ["keep.jsonl", "report.json", "rows.parquet"]
    assert rows.column("line").to_pylist() == sorted(rows.column("line").to_pylist())
    assert rows.num_rows == got["total"]["count"] + got["bad_lines"]["count"]
    bad = [(r["line"], r["bad"]) for r in rows.select(["line", "bad"]).to_pylist() if r["bad"] is not None]
    assert bad == [(b["line"], b["reason"]) for b in got["bad_lines"]["first"]]
    kept = [json.loads(line) for line in (tmp_path / "keep.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(kept) == got["total"]["keep"] > 0
    keep_lines = [r["line"] for r in rows.select(["line", "keep"]).to_pylist() if r["keep"]]
    assert [k["line"] for k in kept] == keep_lines
    for k in kept:
        assert set(k) == {"line", "model", "text"}
        charfmt.parse(k["text"])  # the keep-set is canonical: strict parsing accepts every reply
    again = run_json(capsys, str(tmp_path / "keep.jsonl"))
    assert again["total"]["valid_pct"] == 100.0 and again["bad_lines"]["count"] == 0


def test_text_format(log: tuple[Path, list[dict[str, Any]]], capsys: Any) -> None:
    path, _records = log
    assert main(["report", str(path), "--by", "model", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = captured.out
    data = run_json(capsys, str(path), "--by", "model")
    for name, group in [("all", data["total"]), ('model="a"', data["groups"][0]), ('model="b"', data["groups"][1])]:
        assert f"== {name}: {group['count']:,} replies" in out
        assert f"{group['valid_pct']:.1f}%" in out
        for c in group["codes"]:
            assert c["example"]["message"] in out
    assert f"bad lines: {data['bad_lines']['count']}" in out
    for b in data["bad_lines"]["first"]:
        assert f"  line {b['line']}: {b['reason']}\n" in out


def test_over_long_lines_are_bad_lines_and_not_held(tmp_path: Path, capsys: Any) -> None:
    good = json.dumps({"text": "hi"})
    path = tmp_path / "log.jsonl"
    path.write_text(f"{good}\n{'x' * 5000}\n{good}\n{'y' * 300}", encoding="utf-8")
    got = run_json(capsys, str(path), "--max-size", "200")
    assert got["total"]["count"] == 2
    reason = "line longer than 200 bytes (--max-size)"
    assert got["bad_lines"]["first"] == [{"line": 2, "reason": reason}, {"line": 4, "reason": reason}]


def test_read_chunks_bounds_lines_and_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "CHUNK_LINES", 3)
    data = b"a\n" + b"z" * 50 + b"\nb\nc\nd\ne"
    chunks = list(report.read_chunks(io.BytesIO(data), max_line=10))
    assert chunks == [(1, [b"a\n", None, b"b\n"]), (4, [b"c\n", b"d\n", b"e"])]


def test_workers_run_ahead_by_at_most_two_chunks_each() -> None:
    job = report.Job()
    pulled = 0

    def chunks() -> Any:
        nonlocal pulled
        for i in range(40):
            pulled += 1
            yield i * 2 + 1, [json.dumps({"text": "hi"}).encode(), b"x"]

    tables = report.local_tables(job, chunks(), jobs=2)
    first = next(tables)
    assert first.column("line").to_pylist() == [1, 2]
    assert pulled <= 2 * 2 + 1
    rest = list(tables)
    assert [t.column("line").to_pylist()[0] for t in rest] == list(range(3, 81, 2))


def test_stdin_and_exit_codes_as_subprocesses(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "charfmt", "report"]
    log = (json.dumps({"text": "hi"}) + "\nnope\n").encode()
    done = subprocess.run(
        [*command, "-", "--format", "json"], input=log, capture_output=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bad_lines"]["first"] == [
        {"line": 2, "reason": "not JSON: Expecting value at column 1"}
    ]
    unreadable = tmp_path / "secret.jsonl"
    unreadable.write_bytes(log)
    unreadable.chmod(0)
    for path, reason in [
        (tmp_path / "missing.jsonl", "No such file or directory"),
        (tmp_path, "Is a directory"),
        *([(unreadable, "Permission denied")] if not os.access(unreadable, os.R_OK) else []),
    ]:
        done = subprocess.run([*command, str(path)], capture_output=True, env=env, timeout=120, check=False, text=True)
        assert done.returncode == 2, (path, done.stderr)
        assert done.stderr == f"charfmt: error: cannot read {path}: {reason}\n"
        assert done.stdout == ""
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    done = subprocess.run(
        [*command, "-", "--out", str(blocker / "out")],
        input=log,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and b"cannot write --out" in done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--by", "model,model"], "a key is listed twice"),
        (["--by", ""], "argument --by: a key is empty in ''"),  # (was: no grouping, silently)
        (["--by", "model,,prompt"], "a key is empty in 'model,,prompt'"),
        (["--by", "valid"], "field 'valid' is named like a column"),
        (["--field", "line"], "field 'line' is named like a column"),
        (["--engine", "ray"], "--engine ray reads a file"),
        (["--ray-address", "auto", "x.jsonl"], "--ray-address needs --engine ray"),
        (["--jobs", "0"], "argument --jobs: must be from 1"),
    ],
)
def test_usage_errors(argv: list[str], message: str, capsys: Any) -> None:
    file = [] if any(a.endswith(".jsonl") for a in argv) else ["-"]
    assert main(["report", *file, *argv]) == 2
    assert message in capsys.readouterr().err


def test_progress_counter_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    counter = report.ProgressCounter(out)
    job = report.Job()
    tables = [report.parse_lines(job, 1, [json.dumps({"text": "hi"}).encode()] * 3)]
    report.run(job, tables, progress=counter)
    counter.done()
    assert out.getvalue().startswith("\rcharfmt report: 3 lines, ")
    assert out.getvalue().endswith("\n")
    quiet = report.ProgressCounter(io.StringIO())
    quiet.done()
    assert quiet.out.getvalue() == ""  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("sizes", "p50", "p99"),
    [([7], 7, 7), (list(range(1, 101)), 50, 99), ([1, 1, 1, 1000], 1, 1000), ([5, 3], 3, 5)],
)
def test_percentiles_are_nearest_rank(sizes: list[int], p50: int, p99: int) -> None:
    group = report.Group(count=len(sizes), sizes=Counter(sizes))
    assert (group.percentile(50), group.percentile(99)) == (p50, p99)
    assert report.Group().percentile(50) is None


def test_an_empty_log(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    got = run_json(capsys, str(path), "--by", "model")
    assert got["total"]["count"] == 0 and got["groups"] == [] and got["lines"] == 0
    assert main(["report", str(path)]) == 0
    assert "bad lines: none" in capsys.readouterr().out


def test_group_values_that_are_not_strings(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "log.jsonl"
    rows = [{"text": "hi", "v": v} for v in (2, None, "2", {"b": 1, "a": [1]}, True)] + [{"text": "hi"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    got = run_json(capsys, str(path), "--by", "v")
    # Each JSON value is its own group, of its own type: 2 is not "2", null is not a missing key.
    assert [(g["key"], g["label"], g["count"]) for g in got["groups"]] == [
        ({}, "v=(missing)", 1),
        ({"v": "2"}, 'v="2"', 1),
        ({"v": 2}, "v=2", 1),
        ({"v": None}, "v=null", 1),
        ({"v": True}, "v=true", 1),
        ({"v": {"a": [1], "b": 1}}, 'v={"a": [1], "b": 1}', 1),
    ]  # by the JSON text of the value; a missing key first


def test_a_failed_job_leaves_no_half_written_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"text": "hi"}) + "\n", encoding="utf-8")

    def broken(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "parse_lines", broken)
    out = tmp_path / "out"
    assert main(["report", str(path), "--out", str(out)]) == 130
    assert os.listdir(out) == []


def test_rows_parquet_is_the_same_however_the_rows_arrive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Columns of a few MB span several Parquet pages: page boundaries must follow the rows, not the tables.
    monkeypatch.setattr(report, "ROW_GROUP", 1500)
    job = report.Job(by=("model",), full=True)
    # Distinct plain texts (the cheapest lenient parse): the dictionary outgrows its page and falls back.
    lines = [json.dumps({"text": f"{i} " + "x" * 1500, "model": "m"}).encode() for i in range(2000)]
    rows = report.parse_lines(job, 1, lines)
    files = []
    for size in (2000, 7):
        folder = tmp_path / str(size)
        folder.mkdir()
        outputs = report.Outputs(str(folder), job)
        for start in range(0, rows.num_rows, size):
            outputs.add(rows.slice(start, size))
        outputs.close("", "txt")
        files.append((folder / "rows.parquet").read_bytes())
    assert pq.read_table(tmp_path / "7" / "rows.parquet").equals(rows)
    assert files[0] == files[1]


def test_text_report_escapes_bidi_in_group_labels_and_says_where_json_broke(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "b.jsonl"
    reply = json.dumps({"chats": []})
    path.write_text(json.dumps({"model": "a\u202eb", "text": reply}, ensure_ascii=False) + '\n{"text": "abc')
    assert main(["report", str(path), "--by", "model", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out and 'model="a\\u202eb"' in out
    table = [line for line in out.splitlines() if line.startswith(("group ", "all ", "model="))]
    assert len({len(line) for line in table}) == 1  # the escaped label keeps the columns aligned
    assert "line 2: not JSON: Unterminated string starting at column 10" in out and "at at" not in out


def test_the_dialect_mix_is_what_parse_says_of_each_fuzzed_reply(tmp_path: Path, capsys: Any) -> None:
    """Issue 40.7: the mix differed from ``parse(...).dialect`` on the replies nothing was recovered
    from (a cut ``canonical`` reply, a refusal read as ``plain-text``): it filed them under ``empty``."""
    log = tmp_path / "fuzz.jsonl"
    assert main(["fuzz", "--count", "400", "--seed", "3", "--out", str(log)]) == 0
    texts = [json.loads(line)["damaged"] for line in log.read_text(encoding="utf-8").splitlines()]
    got = run_json(capsys, str(log), "--field", "damaged")["total"]
    read = [charfmt.parse(t, lenient=True) for t in texts]
    expected = Counter(r.dialect or ("strict" if _strict_ok(t) else "none") for r, t in zip(read, texts, strict=True))
    assert {d["dialect"]: d["replies"] for d in got["dialects"]} == dict(expected)
    assert got["empty"] > 0 and any(not r.chats and r.dialect for r in read)  # the replies the old mix relabelled


def test_a_log_whose_turns_all_failed_says_so(tmp_path: Path) -> None:
    """``charfmt serve --log`` writes a failed turn as ``text`` null with ``error``: not a malformed log."""
    log = tmp_path / "turns.jsonl"
    line = {"request_id": "r1", "text": None, "valid": False, "status": 503, "error": "cancelled: the server stopped"}
    log.write_text(json.dumps(line) + "\n" + json.dumps({**line, "status": 429}) + "\n", encoding="utf-8")
    run = [sys.executable, "-m", "charfmt", "report", str(log)]
    done = subprocess.run(run, check=False, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "charfmt: error: none of the 2 lines held a reply: each records a turn that failed (its line says why)"
    )
    assert "line 2: a turn that failed: no reply (status 429: cancelled: the server stopped)" in done.stdout
