"""``render --explain`` and ``--lorebook`` with books that give nothing, or the same book twice (found by a new
user's trial: a book with ``"entries": []`` or only skipped entries was explained as "lore: no lorebook", and the
same ``--lorebook`` given twice made each entry fire twice, without a word)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

from charfmt.cli import main

REX = str(ROOT / "examples" / "characters" / "rex.toml")
WORLD = {"entries": {"0": {"uid": 0, "key": ["drone"], "content": "Drones are cheap on Mars.", "comment": "drones"}}}


@pytest.mark.parametrize(
    ("book", "warned"),
    [({"entries": []}, False), ({"entries": {"0": {"key": "drone", "content": 5}}}, True)],
    ids=["no entries", "every entry skipped"],
)
def test_explain_says_a_book_has_no_entry_to_scan(
    book: dict[str, object], warned: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "world.json"
    path.write_text(json.dumps(book))
    assert main(["render", "--character", REX, "--say", "a drone", "--lorebook", str(path), "--explain"]) == 0
    err = capsys.readouterr().err
    assert "lore: no lorebook" not in err, err
    assert "lore: no entry to scan in world" in err, err
    assert ("CF943" in err) is warned, err


def test_the_same_lorebook_twice_is_read_once_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "world.json"
    path.write_text(json.dumps(WORLD))
    shutil.copy(path, tmp_path / "copy.json")
    argv = ["render", "--character", REX, "--say", "a drone", "--explain"]
    for extra in (["--lorebook", str(path), "--lorebook", str(path)], ["--lorebook", str(path), "--lorebook",
                  str(tmp_path / "copy.json")]):  # fmt: skip
        assert main([*argv, *extra]) == 0
        captured = capsys.readouterr()
        assert captured.out.count("Drones are cheap on Mars.") == 1, captured.out
        assert "lore: 1 fired" in captured.err
        assert f"warning: --lorebook {extra[-1]} is the same book as {path}: read once" in captured.err, captured.err
