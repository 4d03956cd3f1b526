"""Model text on a terminal: C1 controls and bidi overrides shown escaped; JSON output exact but escaped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from charfmt._terminal import json_safe, visible
from charfmt.cli import main

HOSTILE = "a\u009b31mb \u202eevil\u2066x\u0085y"
"""C1 CSI (opens an escape sequence), a right-to-left override, an isolate, NEL (C0 and DEL the format refuses)."""
RAW = ("\u009b", "\u202e", "\u2066", "\u0085")


def _reply(tmp_path: Path) -> Path:
    path = tmp_path / "reply.json"
    body = f"<emo>joy</emo>\n<msg>{HOSTILE}</msg>"
    path.write_text(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, ensure_ascii=False), "utf-8")
    return path


def test_parse_pretty_shows_them_escaped(tmp_path: Path, capsys: Any) -> None:
    assert main(["parse", str(_reply(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW)
    assert "a\\x9b31mb \\u202eevil\\u2066x\\x85y" in out


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_parse_json_escapes_them_and_keeps_the_value(fmt: str, tmp_path: Path, capsys: Any) -> None:
    assert main(["parse", "--format", fmt, str(_reply(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW)
    assert "\\u009b" in out and "\\u202e" in out
    values = [json.loads(line) for line in out.splitlines()] if fmt == "jsonl" else [json.loads(out)]
    assert HOSTILE in json.dumps(values, ensure_ascii=False)  # the same text, exactly


def test_stream_json_lines_escape_them_and_keep_the_value(tmp_path: Path, capsys: Any) -> None:
    assert main(["stream", "--replay", str(_reply(tmp_path)), "--chunk", "3"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW)
    text = "".join(
        e.get("text", "") for e in map(json.loads, out.splitlines()) if e["kind"] == "text" and e["tag"] == "msg"
    )
    assert text == HOSTILE


def test_an_error_line_shows_them_escaped(tmp_path: Path, capsys: Any) -> None:
    missing = tmp_path / "no\u202efile.json"
    assert main(["parse", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: ") and "\u202e" not in err and "no\\u202efile.json" in err


def test_files_keep_them_exact(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("pyarrow", reason="charfmt report needs pyarrow (extra charfmt[arrow])")
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"text": _reply(tmp_path).read_text("utf-8")}) + "\n", "utf-8")
    assert main(["report", str(log), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    capsys.readouterr()
    kept = (tmp_path / "out" / "keep.jsonl").read_text("utf-8")
    assert "\u202e" in kept and "\u009b" in kept  # raw in the file, as the model wrote them
    assert HOSTILE in json.loads(json.loads(kept)["text"])["chats"][0]["body"]


def test_helpers() -> None:
    assert visible("x\u009b\u202e\n\t\x1b\x7f") == "x\\x9b\\u202e\n\t\\x1b\\x7f"
    assert json.loads(json_safe(json.dumps("\u009b\u202eé", ensure_ascii=False))) == "\u009b\u202eé"
