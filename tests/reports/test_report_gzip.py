"""``charfmt report`` on a gzip-compressed log: read decompressed (by its magic bytes), from a file or
standard input, with the same report as the log itself; damaged gzip data is a bad line and a warning."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from charfmt.cli import main

pytest.importorskip("pyarrow", reason="charfmt report needs pyarrow (extra charfmt[arrow])")

GOOD = '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<msg>hi</msg>"}]}'
RECORDS = [{"text": GOOD if i % 3 else f"Sure! hi {i}", "model": f"m{i % 2}"} for i in range(1200)]
LOG = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()


class Pipe(io.RawIOBase):
    """Bytes that cannot be sought back, as a pipe on standard input gives them (a few at a time)."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self._data), 1000)
        buffer[:n], self._data = self._data[:n], self._data[n:]
        return n


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["report", *argv, "--no-progress"])
    out, err = capsys.readouterr()
    return status, out, err


def figures(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The ``--format json`` report, less the input's name; nothing on standard error."""
    status, out, err = run([*argv, "--by", "model", "--format", "json"], capsys)
    assert status == 0 and err == "", err
    got = json.loads(out)
    del got["input"]
    return got


# Each way a gzip log is written, and how it is given to the command.
LAYOUTS = {
    "a .gz file": (gzip.compress(LOG), "file", ()),
    "a file with another name": (gzip.compress(LOG, compresslevel=1), "file", ()),
    "standard input (a pipe)": (gzip.compress(LOG), "stdin", ()),
    "two gzip members (cat a.gz b.gz)": (gzip.compress(LOG[:50_000]) + gzip.compress(LOG[50_000:]), "file", ()),
    "two worker processes": (gzip.compress(LOG), "file", ("--jobs", "2")),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_gzip_log_gives_the_report_of_the_log(
    layout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "log.jsonl").write_bytes(LOG)
    plain = figures([str(tmp_path / "log.jsonl")], capsys)
    assert plain["lines"] == len(RECORDS) and plain["bad_lines"]["count"] == 0
    data, given, extra = LAYOUTS[layout]
    path = tmp_path / ("log.jsonl.gz" if layout == "a .gz file" else "other.jsonl")
    path.write_bytes(data)
    if given == "stdin":
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Pipe(data))))
    assert figures(["-" if given == "stdin" else str(path), *extra], capsys) == plain


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (gzip.compress(LOG)[:1500], "gzip data cut off: it ends before its end marker"),
        (gzip.compress(LOG) + b"garbage", "gzip data damaged: Not a gzipped file"),
        (gzip.compress(LOG)[:-8] + b"\0" * 8, "gzip data damaged: CRC check failed"),
    ],
    ids=["cut off", "trailing bytes", "a wrong checksum"],
)
def test_damaged_gzip_data_is_a_bad_line_and_a_warning(
    data: bytes, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(data)
    status, out, err = run([str(path), "--format", "json"], capsys)
    got = json.loads(out)  # the report of what could be read is written
    assert status == 0
    (last,) = [b for b in got["bad_lines"]["first"] if b["reason"].startswith("gzip data")]
    assert words in last["reason"] and last["line"] == got["lines"]  # the last line: nothing after it was read
    assert got["total"]["count"] + got["bad_lines"]["count"] == got["lines"] > 100
    assert err == f"charfmt report: warning: {path}: {last['reason']}\n"
    _, text, _ = run([str(path)], capsys)
    assert f"bad lines: {got['bad_lines']['count']} (" in text and f"{words.partition(':')[0]} 1" in text


def test_engine_ray_refuses_a_gzip_log_with_one_usage_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(gzip.compress(LOG[:1000]))
    status, out, err = run([str(path), "--engine", "ray"], capsys)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "gzip-compressed" in err and "--engine local" in err


def test_the_summary_line_counts_lines_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"text": "hi"}\n', encoding="utf-8")
    assert run([str(path)], capsys)[1].startswith(f"charfmt report: {path}, field 'text', 1 line\n")
    path.write_text("nope\n{}\n[]\n", encoding="utf-8")
    _, out, err = run([str(path)], capsys)
    assert "bad lines: 3 (no field 'text' 1, not JSON 1, not a JSON object but an array 1)" in out
    assert err.startswith("charfmt: error: no line had field 'text' (other bad lines: not JSON 1, ")


# -- issue 40.7: a log in another packing is named as such, never hinted a --field -----------------

NESTED = "".join(json.dumps({"response": {"text": GOOD}, "model": "m"}) + "\n" for _ in range(50)).encode()
"""A log whose replies sit under ``response.text``: read as it is, the report hints ``--field response.text``."""


def _tar(data: bytes, mode: str) -> bytes:
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tar:
        info = tarfile.TarInfo("log.jsonl")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _zip(data: bytes) -> bytes:
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("log.jsonl", data)
    return out.getvalue()


def _packed(name: str) -> bytes:
    import bz2
    import lzma

    return {
        "gzip twice": lambda: gzip.compress(gzip.compress(NESTED)),
        "bzip2": lambda: bz2.compress(NESTED),
        "xz": lambda: lzma.compress(NESTED),
        "zip": lambda: _zip(NESTED),
        "tar": lambda: _tar(NESTED, "w"),
        "tar.gz": lambda: _tar(NESTED, "w:gz"),
    }[name]()


PACKED = {  # what the one stderr line names, and the command it gives to unpack the file
    "gzip twice": ("gzip-compressed data inside gzip-compressed data", "gunzip -c"),
    "bzip2": ("bzip2-compressed data", "bunzip2 -c"),
    "xz": ("xz-compressed data", "xz -dc"),
    "zip": ("a zip archive", "unzip -p"),
    "tar": ("a tar archive", "tar -xOf"),
    "tar.gz": ("a tar archive", "tar -xOf"),
}


@pytest.mark.parametrize("packed", PACKED)
def test_a_compressed_or_archived_log_is_named_not_hinted_a_field(
    packed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "my log.bin"
    path.write_bytes(_packed(packed))
    status, out, err = run([str(path), "--format", "json"], capsys)
    what, command = PACKED[packed]
    assert status == 1 and err.count("\n") == 1, err
    assert err.startswith(f"charfmt: error: the input is {what}, not JSON Lines: "), err
    assert f"({command} '{path}' | charfmt report -)" in err and "--field" not in err and "UTF-8" not in err
    first = json.loads(out)["bad_lines"]["first"][0]
    assert first["line"] == 1 and first["reason"].startswith(f"{what}, not JSON Lines")


def test_an_archive_whose_lines_read_after_its_header_is_still_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tar's first line is its header (and the first record); the records after it hold replies."""
    path = tmp_path / "log.tar.gz"
    path.write_bytes(_packed("tar.gz"))
    status, out, err = run([str(path), "--field", "response.text", "--format", "json"], capsys)
    assert status == 0 and json.loads(out)["total"]["count"] == 49
    unpack = f"unpack the log first (tar -xOf {path} | charfmt report -)"
    assert err == f"charfmt report: warning: the input is a tar archive, not JSON Lines: {unpack}\n"


def test_a_plain_and_a_gzip_log_of_nested_replies_still_get_the_field_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, data in (("log.jsonl", NESTED), ("log.jsonl.gz", gzip.compress(NESTED))):
        (tmp_path / name).write_bytes(data)
        status, _, err = run([str(tmp_path / name)], capsys)
        assert status == 1 and err == "charfmt: error: no line had field 'text' — did you mean --field response.text?\n"
