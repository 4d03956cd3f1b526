"""``charfmt report`` after a new user's trial: every line bad, group keys of any JSON type, the group cap,
dotted fields, empty input, ``--out`` checks, the counter's last line, dictionary-encoded columns."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt import report
from charfmt.batch import parse_table
from charfmt.cli import main

GOOD = '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<msg>hi</msg>"}]}'


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def cli(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "charfmt", "report", *argv],
        input=None if stdin is None else stdin.decode("latin-1"),
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
        text=True,
    )


# -- 2. every line bad -------------------------------------------------------------------------


def test_a_wrong_field_exits_1_and_suggests_the_field(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path / "log.jsonl", [{"id": i, "model": "m", "text": GOOD} for i in range(5)])
    assert main(["report", str(path), "--field", "reply"]) == 1
    err = capsys.readouterr().err
    assert err == "charfmt: error: no line had field 'reply' — did you mean --field text?\n"


def test_a_wrong_field_with_no_likely_key_names_none(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path / "log.jsonl", [{"n": i} for i in range(3)])
    assert main(["report", str(path), "--field", "reply"]) == 1
    assert capsys.readouterr().err == "charfmt: error: no line had field 'reply'\n"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (gzip.compress(b"hello\nworld\n"), "not JSON"),  # a gzip file is read decompressed (test_report_gzip.py)
        (bytes(range(256)) * 8, "not UTF-8"),
        (b"hello\nworld\n", "not JSON"),
    ],
    ids=["gzip", "random bytes", "text"],
)
def test_a_file_with_no_good_line_exits_1_with_one_line(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(data)
    done = cli(str(path), "--no-progress")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("charfmt: error: none of the ")
    assert words in done.stderr and "is the input a JSON Lines log?" in done.stderr


def test_some_good_lines_exit_0(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"text": GOOD}) + "\nnope\n", encoding="utf-8")
    assert main(["report", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_a_by_key_in_no_line_is_named(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path / "log.jsonl", [{"text": GOOD, "model": "a"}])
    assert main(["report", str(path), "--by", "model,modle"]) == 0
    assert capsys.readouterr().err == "charfmt report: --by key 'modle' appears in no line\n"


# -- 3. group keys keep their type ---------------------------------------------------------------


def test_missing_null_and_dash_are_three_groups_and_types_stay(tmp_path: Path, capsys: Any) -> None:
    values: list[Any] = [3, "3", True, "true", None, "-", "two\nlines"]
    records = [{"text": GOOD, "v": v} for v in values] + [{"text": GOOD}]
    path = write(tmp_path / "log.jsonl", records)
    out = tmp_path / "out"
    assert main(["report", str(path), "--by", "v", "--out", str(out), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    labels = [g["label"] for g in got["groups"]]
    assert len(set(labels)) == len(labels) == 8
    assert {"v=3", 'v="3"', "v=true", 'v="true"', "v=null", 'v="-"', "v=(missing)", 'v="two\\nlines"'} == set(labels)
    kept = [json.loads(line) for line in (out / "keep.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [k.get("v", "absent") for k in kept] == [*values, "absent"]  # the original JSON types
    assert main(["report", str(path), "--by", "v"]) == 0
    text = capsys.readouterr().out
    assert "two\nlines" not in text and 'v="two\\nlines"' in text
    table = text.split("\n\n")[1].splitlines()
    assert len(table) == 1 + 1 + 8  # header, all, one line per group: no value breaks a row


# -- 4. the group cap -----------------------------------------------------------------------------


def test_groups_past_the_cap_fold_into_one_row(tmp_path: Path) -> None:
    path = write(tmp_path / "log.jsonl", [{"text": GOOD, "id": i} for i in range(50)])
    done = cli(str(path), "--by", "id", "--max-groups", "10", "--format", "json")
    assert done.returncode == 0
    got = json.loads(done.stdout)
    assert len(got["groups"]) == 11 and got["groups"][-1]["label"] == "(other groups)"
    assert got["groups"][-1]["count"] == 40
    assert got["folded_groups"] is None  # more distinct keys than the cap remembers: not counted
    fewer = write(tmp_path / "fewer.jsonl", [{"text": GOOD, "id": i} for i in range(15)])
    assert (
        json.loads(cli(str(fewer), "--by", "id", "--max-groups", "10", "--format", "json").stdout)["folded_groups"] == 5
    )
    assert got["total"]["count"] == 50
    assert "more than 10 groups" in done.stderr and done.stderr.count("\n") == 1


def test_summary_memory_is_bounded_by_the_cap() -> None:
    job = report.Job(by=("id",), max_groups=5)
    summary = report.Summary(job)
    lines = [json.dumps({"text": "hi", "id": i}).encode() for i in range(200)]
    summary.add(report.parse_lines(job, 1, lines))
    assert len(summary.groups) == 5 and len(summary.folded) == 5 and summary.folded_more
    assert summary.other is not None and summary.other.count == 195


# -- 5. smaller ----------------------------------------------------------------------------------------


def test_empty_input_dialect_and_no_reply_percentages(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"text": ""}) + "\n", encoding="utf-8")
    assert main(["report", str(path), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["total"]["dialects"] == [{"dialect": "none", "replies": 1, "pct": 100.0}]  # nothing to read
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert main(["report", str(empty), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["valid_pct"] is None
    assert main(["report", str(empty)]) == 0
    row = capsys.readouterr().out.split("\n\n")[1].splitlines()[1]
    assert "0.0%" not in row and row.split()[1:6] == ["0", "-", "-", "-", "-"]
    assert main(["report", str(empty), "--format", "html"]) == 0
    assert "<td>0.0%</td>" not in capsys.readouterr().out


def test_out_that_is_a_file_is_not_a_directory(tmp_path: Path) -> None:
    log = write(tmp_path / "log.jsonl", [{"text": GOOD}])
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    for out in (str(blocker), "/dev/full"):
        done = cli(str(log), "--out", out)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == f"charfmt: error: cannot write --out {out}: Not a directory\n"


def test_an_unwritable_out_fails_before_any_line_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        # A folder this user cannot write to; root writes anywhere but sysfs (where os.access says yes).
        target = str(folder) if not os.access(folder, os.W_OK) else "/sys"
        if target == "/sys" and not os.path.isdir("/sys"):
            pytest.skip("no folder this user cannot write to")
        # Standard input that never ends: the job must fail before reading it.
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            f"yes '{json.dumps({'text': 'hi'})}' | {sys.executable} -m charfmt report - --out {target}",
            shell=True,
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
            text=True,
        )
        assert done.returncode == 2
        assert done.stderr == f"charfmt: error: cannot write --out {target}: Permission denied\n"
    finally:
        folder.chmod(0o700)


def test_the_counter_ends_on_the_final_count() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    counter = report.ProgressCounter(out)
    counter(10)
    counter.shown = 1.0  # the next call draws nothing: the last line on screen says 10
    counter(25)
    counter.done()
    last = out.getvalue().rsplit("\r", 1)[1]
    assert last.startswith("charfmt report: 25 lines in ") and last.endswith("\x1b[K\n")


def test_dotted_field_and_by(tmp_path: Path, capsys: Any) -> None:
    records = [
        {"response": {"text": GOOD}, "meta": {"model": "a"}},
        {"response": {"text": "hi"}, "meta": {"model": "b"}},
        {"response": {"text": GOOD}, "meta": {}},
        {"response.text": GOOD, "meta": {"model": "a"}},  # a key with the dot in it wins
    ]
    path = write(tmp_path / "log.jsonl", records)
    assert main(["report", str(path), "--field", "response.text", "--by", "meta.model", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["bad_lines"]["count"] == 0
    assert [(g["label"], g["count"]) for g in got["groups"]] == [
        ("meta.model=(missing)", 1),
        ('meta.model="a"', 2),
        ('meta.model="b"', 1),
    ]


def test_parse_table_reads_dictionary_encoded_strings() -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'charfmt[arrow]')")
    texts = [GOOD, "hi", None, GOOD]
    plain = parse_table(pa.table({"text": texts}))
    coded = parse_table(pa.table({"text": pa.array(texts).dictionary_encode()}))
    assert coded.drop_columns(["text"]).equals(plain.drop_columns(["text"]))
    with pytest.raises(ValueError, match="strings or bytes"):
        parse_table(pa.table({"text": pa.array([1, 2]).dictionary_encode()}))


# -- issue 22.12: the field hint survives lines that are not JSON, and finds nested fields -----


@pytest.mark.parametrize(
    "case",
    [
        ([{"id": i, "reply": GOOD} for i in range(6)], 0, "text", "--field reply"),
        ([{"id": i, "reply": GOOD} for i in range(6)], 1, "text", "--field reply"),
        ([{"id": i, "reply": GOOD} for i in range(6)], 3, "text", "--field reply"),
        ([{"response": {"text": GOOD, "model": "m"}} for _ in range(6)], 0, "text", "--field response.text"),
        ([{"response": {"text": GOOD}} for _ in range(6)], 2, "text", "--field response.text"),
        (
            [{"out": {"choice": {"content": GOOD}}, "id": "x"} for _ in range(4)],
            1,
            "reply",
            "--field out.choice.content",
        ),
        ([{"response": {"text": GOOD}} for _ in range(4)], 0, "response", "--field response.text"),
        ([{"meta": {"model": "m"}, "completion": GOOD} for _ in range(4)], 2, "text", "--field completion"),
    ],
    ids=["plain", "one-junk-line", "junk-lines", "nested", "nested-junk", "deep", "object-field", "not-meta"],
)
def test_the_field_hint_holds_with_junk_lines_and_nested_fields(
    tmp_path: Path, capsys: Any, case: tuple[list[dict[str, Any]], int, str, str]
) -> None:
    records, junk, field, hint = case
    path = tmp_path / "log.jsonl"
    lines = [json.dumps(r) for r in records]
    for k in range(junk):
        lines.insert(2 * k, "this line is not JSON")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["report", str(path), "--field", field]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"charfmt: error: no line had field {field!r}") and err.endswith(
        f" — did you mean {hint}?\n"
    ), err
    suggested = hint.removeprefix("--field ")
    assert main(["report", str(path), "--field", suggested, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"]["count"] == len(records) and report["bad_lines"]["count"] == junk


# -- issue 22.11: valid, repaired and empty split the replies; keep holds every valid reply --

SILENT = '{"chats": []}'
_MIXED = [SILENT] * 7 + [GOOD] * 5 + ["Sure! " + GOOD] * 4 + ["", "   ", "{", '{"chats": [}', '{"chats": 5}']


def test_a_valid_empty_reply_is_valid_kept_and_not_empty(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path / "log.jsonl", [{"text": t} for t in _MIXED])
    assert main(["report", str(path), "--format", "json", "--out", str(tmp_path / "out")]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    assert (total["valid"], total["repaired"], total["empty"]) == (12, 4, 5)
    assert total["valid"] + total["repaired"] + total["empty"] == total["count"] == len(_MIXED)
    assert total["keep"] == 16  # every valid reply (the 7 silent ones too) and the 4 repaired without loss
    mix = {d["dialect"]: d["replies"] for d in total["dialects"]}
    assert mix == {"strict": 12, "canonical": 7, "none": 2}  # each reply's Reply.dialect
    assert sum(mix.values()) == total["count"]
    kept = [json.loads(line) for line in (tmp_path / "out" / "keep.jsonl").read_text().splitlines()]
    assert [k["text"] for k in kept[:7]] == ['{"chats":[]}'] * 7


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_MIXED) | st.text(max_size=30), min_size=1, max_size=25))
def test_the_shares_sum_to_100_and_the_mix_is_each_replys_dialect(texts: list[str]) -> None:
    job = report.Job()
    summary = report.Summary(job)
    summary.add(report.parse_lines(job, 1, [json.dumps({"text": t}).encode() + b"\n" for t in texts]))
    g = summary.to_dict("x")["total"]
    assert g["valid"] + g["repaired"] + g["empty"] == g["count"]
    assert abs(g["valid_pct"] + g["repaired_pct"] + g["empty_pct"] - 100) < 0.05
    mix = {d["dialect"]: d["replies"] for d in g["dialects"]}
    assert mix.get("strict", 0) == g["valid"] and sum(mix.values()) == g["count"]
    read = [charfmt.parse(t, lenient=True).dialect for t in texts]  # issue 40.7: the mix is parse's dialect
    assert {k: n for k, n in mix.items() if k not in ("strict", "none")} == dict(Counter(d for d in read if d))
    assert g["valid"] <= g["keep"] <= g["valid"] + g["repaired"]


def _without(module: str, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``module`` cannot be imported (an extra not installed)."""
    guard = f"import sys; sys.modules[{module!r}] = None\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", guard + code]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_a_missing_file_exits_2_before_a_missing_extra_is_named(tmp_path: Path) -> None:
    run = _without(
        "pyarrow", "import sys; from charfmt.cli import main; sys.exit(main(['report', 'missing.jsonl']))", tmp_path
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [run.stderr.strip()] and "missing.jsonl" in run.stderr
    (tmp_path / "log.jsonl").write_text('{"reply": "{\\"chats\\": []}"}\n', encoding="utf-8")
    run = _without(
        "pyarrow", "import sys; from charfmt.cli import main; sys.exit(main(['report', 'log.jsonl']))", tmp_path
    )
    assert run.returncode == 1 and "pip install 'charfmt[arrow]'" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_charfmt_testing_without_hypothesis_names_the_extra(tmp_path: Path) -> None:
    run = _without("hypothesis", "import charfmt.testing", tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "ImportError: charfmt.testing needs hypothesis: pip install 'charfmt[testing]'"
    )
