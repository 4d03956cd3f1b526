"""The command line, called as ``main([...])``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from charfmt.cli import main

GOOD = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>わあ</msg>"},{"type":"I","order":2,"body":"+1"}]}'
BAD = '{"chats":[{"type":"C","order":1,"body":"<msg>hi</act>"}]}'


@pytest.fixture
def good(tmp_path: Path) -> Path:
    p = tmp_path / "good.json"
    p.write_text(GOOD, encoding="utf-8")
    return p


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    p = tmp_path / "bad.json"
    p.write_text(BAD, encoding="utf-8")
    return p


def test_parse_pretty(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(good)]) == 0
    out = capsys.readouterr().out
    assert "#1 C" in out
    assert "emo     joy" in out
    assert "msg     わあ" in out


def test_parse_json(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(good), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chats"][0]["segments"][0] == {"tag": "emo", "text": "joy"}


def test_parse_jsonl_prints_one_event_per_line(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(good), "--format", "jsonl"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[0] == {"kind": "chat_start", "chat": 0, "type": "C", "order": 1}
    assert {"kind": "emotion", "chat": 0, "segment": 0, "text": "joy"} in events


def test_parse_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(GOOD.encode())))
    assert main(["parse", "-"]) == 0
    assert "わあ" in capsys.readouterr().out


def test_parse_invalid_strict_exits_1_with_diagnostics(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:1:48: CF205" in err
    assert "^^^^^^" in err


def test_parse_lenient_reports_instead(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(bad), "--lenient"]) == 0
    assert f"{bad}:1:48: CF703 warning: </act> closes <msg>" in capsys.readouterr().out


def test_check_valid_and_invalid(good: Path, bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(good)]) == 0
    assert "ok (2 chats)" in capsys.readouterr().out
    assert main(["check", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    line, _snippet, carets = out.splitlines()[1:4]
    assert line == f"{bad}:1:48: CF205 chat 0 body: </act> closes <msg>; expected </msg>"
    assert carets.strip() == "^^^^^^"


def test_check_jsonl(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--format", "jsonl", str(bad)]) == 1
    record = json.loads(capsys.readouterr().out)
    assert (record["file"], record["code"], record["line"], record["column"]) == (str(bad), "CF205", 1, 48)


def test_check_unreadable_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: cannot read") and err.count("\n") == 1
    assert main(["check", str(tmp_path)]) == 2  # a directory


def test_usage_error_is_exit_2_and_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["check"], ["schema", "--provider", "nope"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("charfmt: error: ") and err.count("\n") == 1, err
        assert "--help" in err  # where to find the usage


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"\x00\xff\xfe\x80garbage", "CF001"), (b"", "CF003"), (b"\x89PNG\r\n\x1a\n\x00\x00", "CF001")],
)
def test_garbage_and_empty_files_are_one_clear_error(
    tmp_path: Path, content: bytes, code: str, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "f.json"
    p.write_bytes(content)
    assert main(["check", str(p)]) == 1
    out = capsys.readouterr().out
    assert f": {code} " in out.splitlines()[0]
    assert "Traceback" not in out


def test_fifty_megabyte_input_is_refused_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "huge.json"
    with p.open("wb") as f:
        f.write(b'{"chats":[{"type":"I","order":1,"body":"')
        f.write(b"a" * (50 * 1024 * 1024))
        f.write(b'"}]}')
    assert main(["check", str(p)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert "CF002" in first and "maximum" in first
    assert main(["check", "--max-size", str(60 * 1024 * 1024), str(p)]) == 0


def test_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--provider", "openai"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False


def test_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "emo     surprise" in out
    assert "ParseError: CF205" in out
    assert "demo_broken.json:2:83: CF205" in out
    lenient = out.split("parsed leniently")[1]
    assert "msg     やった！" in lenient and "demo_broken.json:2:83: CF703 warning: " in lenient


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "charfmt", "schema"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0
    assert json.loads(done.stdout)["required"] == ["chats"]


@pytest.mark.parametrize("compiled", [True, False])
def test_version_names_the_stream_reader(
    compiled: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import charfmt.stream

    assert main(["--version"]) == 0
    first, reader = capsys.readouterr().out.splitlines()
    assert first.startswith("charfmt ")
    assert reader == ("stream reader: compiled (mypyc)" if charfmt.stream.COMPILED else "stream reader: pure Python")
    monkeypatch.setattr(charfmt.stream, "COMPILED", compiled)
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("stream reader: compiled (mypyc)\n" if compiled else "stream reader: pure Python\n"), out
