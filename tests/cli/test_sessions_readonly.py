"""``charfmt sessions`` only reads a store (``delete`` edits one): a store that is not there is said (exit 1) and
nothing is made — no file, no folder, no lock file, no tables — and a ``--store`` of another scheme is named."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from charfmt import parse
from charfmt.prompt.character import Exchange
from charfmt.prompt.userinput import UserTurn
from charfmt.store import SessionKey, StoreError, open_store

ACTIONS = [["list"], ["show", "evening"], ["export", "evening"], ["delete", "evening"]]


def _sessions(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_DATA_HOME": str(home / "data"), "HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "charfmt", "sessions", *argv], capture_output=True, text=True,
                          timeout=60, check=False, env=env)  # fmt: skip


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("action", ACTIONS, ids=[a[0] for a in ACTIONS])
def test_a_store_that_is_not_there_is_said_and_never_made(action: list[str], tmp_path: Path) -> None:
    before = _tree(tmp_path)
    typo = tmp_path / "typo.sqlite3"
    done = _sessions(*action, "--store", str(typo), home=tmp_path)
    assert done.returncode == 1, done.stderr
    said = "the store does not exist (charfmt serve and charfmt chat --session make one where they keep sessions)"
    assert done.stderr == f"charfmt: error: {typo}: {said}\n"
    assert _tree(tmp_path) == before  # no store, no lock file beside it


def test_the_default_store_is_not_made_by_reading_it(tmp_path: Path) -> None:
    done = _sessions("list", home=tmp_path)
    default = tmp_path / "data" / "charfmt" / "sessions.sqlite3"
    assert done.returncode == 1 and f"{default}: the store does not exist" in done.stderr, done.stderr
    assert _tree(tmp_path) == []  # not even the data folder


def test_an_empty_file_is_no_store_and_stays_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    done = _sessions("list", "--store", str(empty), home=tmp_path)
    assert done.returncode == 1 and done.stderr == f"charfmt: error: {empty} holds no charfmt store: an empty file\n"
    assert empty.stat().st_size == 0 and _tree(tmp_path) == ["empty.sqlite3"]


def test_a_database_without_tables_is_no_store_and_gets_none(tmp_path: Path) -> None:
    path = tmp_path / "blank.sqlite3"
    sqlite3.connect(path).execute("PRAGMA user_version = 1").connection.close()  # a SQLite file with no table
    with pytest.raises(StoreError, match="holds no charfmt store: no session was ever kept there"):
        open_store(path, create=False)
    tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == []


def test_a_store_that_is_there_is_read_without_a_lock_file(tmp_path: Path) -> None:
    store_path = tmp_path / "s.sqlite3"
    with open_store(store_path) as store:
        reply = parse('{"chats": [{"type": "E", "order": 1, "body": "The door creaks."}]}')
        store.append(SessionKey("", "cli/Rex", "evening"), Exchange(user=UserTurn(), reply=reply))
    lock = Path(f"{store_path}-turns.lock")
    lock.unlink()
    done = _sessions("list", "--store", str(store_path), home=tmp_path)
    assert done.returncode == 0 and "evening" in done.stdout, done.stderr
    shown = _sessions("show", "evening", "--store", str(store_path), home=tmp_path)
    assert shown.returncode == 0 and "The door creaks." in shown.stdout, shown.stderr
    assert _tree(tmp_path) == ["s.sqlite3"]  # (its log files gone with the connection; no lock file made)


@pytest.mark.parametrize("target", ["sqlite:/tmp/x.sqlite3", "postgres:/db"])
def test_a_store_url_with_one_slash_is_named_not_taken_for_a_folder(target: str, tmp_path: Path) -> None:
    """``--store sqlite:/tmp/x.sqlite3`` said "the folder sqlite:/tmp does not exist" (exit 1), where
    ``sqlite:///…`` gets a usage error naming it (found by a newcomer's trial)."""
    done = _sessions("list", "--store", target, home=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"argument --store: {target!r} begins like a URL" in done.stderr and "folder" not in done.stderr
    with pytest.raises(StoreError, match="begins like a URL"):
        open_store(target)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("target", ["mysql://user@db/x", "sqlite://x.db", "redis://localhost"])
def test_a_store_url_of_another_scheme_is_named_not_taken_for_a_path(target: str, tmp_path: Path) -> None:
    scheme = target.split("://", maxsplit=1)[0]
    done = _sessions("list", "--store", target, home=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"argument --store: {scheme}:// is not a store charfmt opens" in done.stderr, done.stderr
    assert "folder" not in done.stderr and "(see 'charfmt sessions list --help')" in done.stderr
    with pytest.raises(StoreError, match=f"^{scheme}:// is not a store charfmt opens"):
        open_store(target)
    assert _tree(tmp_path) == []
