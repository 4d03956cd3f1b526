"""``charfmt report`` and ``charfmt.batch`` on hostile logs: every line counted, never a crash, strict JSON out.

A line is a reply, a counted bad line or a counted non-reply, whatever it holds (a
4,301-digit integer, NaN, nesting, odd types in every key); every JSON file charfmt writes
loads with a strict parser; an ``order`` no ``int64`` holds is null in a table, with a CF960
warning naming the chat; ``--out`` never follows a symlink planted at an output name.
"""

from __future__ import annotations

# ruff: noqa: UP031 (JSON text is easier to read with %s than with doubled braces)
import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from charfmt.cli import main

pa = pytest.importorskip("pyarrow", reason="charfmt report needs pyarrow (extra charfmt[arrow])")
pq = pytest.importorskip("pyarrow.parquet")

from charfmt.batch import parse_table  # noqa: E402

GOOD = json.dumps({"chats": [{"type": "E", "order": 1, "body": "Rain."}]})
HUGE = "9" * 4301


def strict(text: str) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (RFC 8259)."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON charfmt wrote")

    return json.loads(text, parse_constant=refuse)


def _report(capsys: Any, log: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    status = main(["report", str(log), "--format", "json", "--no-progress", *args])
    out, err = capsys.readouterr()
    return status, strict(out), err


# --- 5. a 4,301-digit integer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        '{"text": %s, "model": "a"}' % json.dumps(GOOD),
        '{"text": %s, "model": %s}' % (json.dumps(GOOD), HUGE),  # in the --by key
        '{"text": %s, "n": -%s}' % (json.dumps(GOOD), HUGE),  # in another key
        '{"text": %s, "model": "a"}' % HUGE,  # in the reply's key
        '{"text": %s, "model": [[%s]]}' % (json.dumps(GOOD), HUGE),
    ],
)
def test_a_4301_digit_integer_anywhere_is_a_counted_line(line: str, tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(line + "\n" + json.dumps({"text": GOOD, "model": "b"}) + "\n", encoding="utf-8")
    status, data, err = _report(capsys, log, "--by", "model", "--out", str(tmp_path / "out"))
    assert status == 0 and "Traceback" not in err
    assert data["total"]["count"] + data["bad_lines"]["count"] == 2
    if HUGE in line:
        assert data["bad_lines"]["first"][0]["reason"].startswith("not JSON that can be read: Exceeds the limit")


# --- 6. NaN and Infinity never written ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", '{"x": NaN}', "[Infinity, 1]"])
def test_a_non_finite_group_value_is_written_as_strict_json(value: str, tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text('{"text": %s, "model": %s}\n{"text": NaN}\n' % (json.dumps(GOOD), value), encoding="utf-8")
    out = tmp_path / "out"
    status, data, _ = _report(capsys, log, "--by", "model", "--out", str(out))
    assert status == 0
    (group,) = data["groups"]
    assert group["count"] == 1 and "model" in group["key"]
    assert data["bad_lines"]["first"][0]["reason"] == "field 'text' is a number, not a string"
    (kept,) = (out / "keep.jsonl").read_text(encoding="utf-8").splitlines()
    assert strict(kept)["line"] == 1
    strict((out / "report.json").read_text(encoding="utf-8"))
    assert main(["report", str(log), "--by", "model", "--format", "html", "--no-progress"]) == 0
    page = capsys.readouterr().out
    assert "NaN," not in page and ": NaN" not in page and "Infinity," not in page


# --- 7. orders past int64 --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "column", "codes"),
    [(2**63 - 1, 2**63 - 1, []), (2**63, None, ["CF960"]), (-1, 1, ["CF614"]), (10**400, None, ["CF960"])],
)
def test_an_order_past_int64_is_null_in_the_table_with_cf960(order: int, column: int | None, codes: list[str]) -> None:
    text = json.dumps({"chats": [{"type": "E", "order": order, "body": "Rain."}]})
    rows = parse_table(pa.table({"text": [text]}))
    (chats,) = rows.column("chats").to_pylist()
    assert chats[0]["order"] == column
    found = [c for c in rows.column("warning_codes").to_pylist()[0] if c in ("CF960", "CF614")]
    assert found == codes
    assert f'"order":{max(order, 1)},' in rows.column("canonical").to_pylist()[0]  # the reply keeps it exactly
    if codes == ["CF960"]:
        (note,) = [d for d in rows.column("diagnostics").to_pylist()[0] if d["code"] == "CF960"]
        assert (
            note["chat"] == 0
            and note["severity"] == "warning"
            and text[note["offset"] :].startswith("1" if order == 10**400 else "9")
        )
        assert note["message"].startswith("chat 0: order ")


def test_report_out_writes_a_null_order_and_keeps_the_reply(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "log.jsonl"
    orders = [2**63 - 1, 2**63, -1, 10**400]
    log.write_text(
        "".join(
            json.dumps({"text": json.dumps({"chats": [{"type": "E", "order": o, "body": "R."}]})}) + "\n"
            for o in orders
        )
    )
    status, data, _ = _report(capsys, log, "--out", str(tmp_path / "out"))
    assert status == 0 and data["total"]["count"] == 4
    table = pq.read_table(tmp_path / "out" / "rows.parquet")
    assert [c[0]["order"] for c in table.column("chats").to_pylist()] == [2**63 - 1, None, 1, None]
    kept = [strict(line) for line in (tmp_path / "out" / "keep.jsonl").read_text().splitlines()]
    assert str(10**400) in kept[-1]["text"]


# --- 8. --out never follows a planted symlink -------------------------------------------------------


@pytest.mark.parametrize("name", ["report.txt", "keep.jsonl", "rows.parquet"])
def test_out_replaces_a_symlink_at_an_output_name_and_leaves_its_target(name: str, tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"text": GOOD}) + "\n", encoding="utf-8")
    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    assert main(["report", str(log), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (out / name).is_symlink() and (out / name).stat().st_size > 0
    assert sorted(os.listdir(out)) == ["keep.jsonl", "report.txt", "rows.parquet"]


def test_out_help_says_what_a_symlink_means(capsys: Any) -> None:
    assert main(["report", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "a symlink at one of those names is replaced, never followed" in help_text
    assert "a symlinked DIR is the folder it points to" in help_text


# --- the property: any JSON value as a log line --------------------------------------------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from([GOOD, "<emo>joy</emo><msg>hi</msg>", "{", ""])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def _lines(draw: st.DrawFn) -> str:
    """One log line: a JSON value (odd types in every key), perhaps with a huge integer or deep nesting spliced in."""
    record = draw(st.dictionaries(st.sampled_from(["text", "model", "x", "meta"]), _VALUES, max_size=4) | _VALUES)
    line = json.dumps(record)  # NaN and Infinity as Python writes them
    splice = draw(st.sampled_from(["", "", "", "", "", "", "huge", "deep", "very deep"]))
    if splice == "huge":
        line = line.replace("0", "1" + "0" * 4400, 1) if "0" in line else f'{{"model": {HUGE}}}'
    elif splice:
        depth = 500 if splice == "deep" else 100_000
        line = '{"text": %s, "model": %s}' % (json.dumps(GOOD), "[" * depth + "]" * depth)
    return line


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(_lines(), min_size=1, max_size=5), by=st.sampled_from(["model", "x,meta.model"]))
def test_any_json_value_as_a_log_line_is_counted(lines: list[str], by: str, tmp_path_factory: Any) -> None:
    tmp = tmp_path_factory.mktemp("log")
    log = tmp / "log.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp / "out"
    for fmt in ("json", "text"):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
            status = main(["report", str(log), "--by", by, "--format", fmt, "--out", str(out), "--no-progress"])
        assert status in (0, 1)
        if fmt == "json":
            data = strict(buffer.getvalue())
            assert data["total"]["count"] + data["bad_lines"]["count"] == sum(bool(x.strip()) for x in lines)
            strict((out / "report.json").read_text(encoding="utf-8"))
        for kept in (out / "keep.jsonl").read_text(encoding="utf-8").splitlines():
            strict(kept)
    rows = parse_table(pa.table({"text": lines}))  # each line, as a reply
    assert rows.num_rows == len(lines)
    for canonical in rows.column("canonical").to_pylist():
        if canonical is not None:
            strict(canonical)
