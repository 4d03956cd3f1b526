"""What ``chat --session`` and ``serve --store`` do with a file that is no store (found by a new user's trial).

``serve --store empty.json`` made an empty file a SQLite store (while ``charfmt sessions`` called it "an empty
file"), and a refused file (``notdb.sqlite3``, text) was left with a ``-turns.lock`` file beside it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from charfmt.store import StoreError, open_store

REX = str(ROOT / "examples" / "characters" / "rex.toml")
DEAD = "http://127.0.0.1:9/v1"
DOORS = {
    "serve": ["serve", "--character", REX, "--upstream", DEAD, "--port", "0", "--store"],
    "chat": ["chat", "--character", REX, "--endpoint", DEAD, "--say", "hi", "--session", "eve", "--store"],
}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "charfmt", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
                          stdin=subprocess.DEVNULL)  # fmt: skip


@pytest.mark.parametrize("door", list(DOORS))
def test_a_file_that_is_no_store_is_refused_and_left_as_it_was(door: str, tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "notdb.sqlite3").write_text("not a database\n")
    for name, said in (("empty.json", "holds no charfmt store: an empty file"), ("notdb.sqlite3", "is not a SQLite")):
        done = _run([*DOORS[door], name], tmp_path)
        assert done.returncode == 1 and said in done.stderr and "Traceback" not in done.stderr, done
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.json", "notdb.sqlite3"]  # no lock, no log files
    assert (tmp_path / "empty.json").read_bytes() == b""


def test_an_empty_file_named_for_sqlite_is_made_a_store(tmp_path: Path) -> None:
    """``touch sessions.sqlite3`` then ``--store sessions.sqlite3``: made a store, as a new name would be."""
    path = tmp_path / "sessions.sqlite3"
    path.write_bytes(b"")
    with open_store(str(path)) as store:
        assert store.sessions() == []
    other = tmp_path / "notes.json"
    other.write_bytes(b"")
    with pytest.raises(StoreError, match="an empty file"):
        open_store(str(other))
    assert other.read_bytes() == b""
