"""The conversation store's promises, one suite run against every engine: memory, SQLite, a real PostgreSQL."""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

import charfmt
from charfmt.prompt.character import Exchange
from charfmt.prompt.userinput import UserTurn
from charfmt.store import SessionKey, Store, StoreError, open_store

sys.path.insert(0, str(Path(__file__).parents[1]))
from store_targets import ENGINES, store_target

MIO = charfmt.Character.load(ROOT / "examples" / "characters" / "mio.toml")
HISTORY = charfmt.load_history(ROOT / "examples" / "history.jsonl", MIO)
A = SessionKey("", "turn/Mio", "player-1")


def exchange(n: int, words: int = 1) -> Exchange:
    """An exchange whose reply says ``n`` (``words`` times: its size grows with it)."""
    reply = charfmt.parse(
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>' + " ".join([f"n{n}"] * words) + '</msg>"}]}',
        vocabulary=MIO.vocabulary,
    )
    return Exchange(user=UserTurn.say(f"turn {n}"), reply=reply)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(engine: str, tmp_path: Path) -> Iterator[str]:
    with store_target(engine, tmp_path) as found:
        yield found


@pytest.fixture
def store(target: str) -> Iterator[Store]:
    with open_store(target) as opened:
        yield opened


def test_a_history_comes_back_exactly(store: Store) -> None:
    for ex in HISTORY:
        assert store.append(A, ex).dropped == 0
    assert store.history(A) == HISTORY
    (info,) = store.sessions()
    assert info.key == A and info.turns == len(HISTORY)
    assert info.size == sum(len(e.model_dump_json().encode()) for e in HISTORY)
    assert info.created <= info.updated
    assert store.history(SessionKey("", "turn/Mio", "nobody")) == [] and store.info(A) == info


def test_the_first_turn_makes_the_session(store: Store) -> None:
    assert store.append(A, exchange(1)).created is True
    assert store.append(A, exchange(2)).created is False
    assert [ex.user for ex in store.history(A)] == [UserTurn.say("turn 1"), UserTurn.say("turn 2")]


def test_owners_and_namespaces_are_apart(store: Store) -> None:
    keys = [A, SessionKey("alice", "turn/Mio", "player-1"), SessionKey("", "chat/Mio", "player-1")]
    for n, key in enumerate(keys):
        store.append(key, exchange(n))
    for n, key in enumerate(keys):
        assert store.history(key) == [exchange(n)]
    assert {s.key for s in store.sessions(owner="")} == {keys[0], keys[2]}
    assert [s.key for s in store.sessions(namespace="chat/Mio")] == [keys[2]]
    assert [s.key for s in store.sessions(name="player-1", owner="alice")] == [keys[1]]


def test_a_session_keeps_its_newest_turns_within_max_bytes(store: Store) -> None:
    size = len(exchange(0, 50).model_dump_json())
    dropped = [store.append(A, exchange(n, 50), max_bytes=3 * size).dropped for n in range(6)]
    assert dropped == [0, 0, 0, 1, 1, 1]
    assert store.history(A) == [exchange(n, 50) for n in (3, 4, 5)]
    (info,) = store.sessions()
    assert info.turns == 3 and info.size == 3 * size
    # one exchange larger than the bound stays: the newest is never dropped
    assert store.append(A, exchange(9, 2000), max_bytes=size).dropped == 3
    assert store.history(A) == [exchange(9, 2000)]


def test_eviction_takes_the_least_recently_written(store: Store) -> None:
    keys = [SessionKey("", "turn/Mio", f"p{n}") for n in range(5)]
    for key in keys:
        store.append(key, exchange(0))
        time.sleep(0.002)  # (distinct times on every clock)
    store.append(keys[0], exchange(1))  # p0 written again: now the newest
    gone = store.evict(keep=3)
    assert sorted(s.key.name for s in gone) == ["p1", "p2"]
    assert [s.key.name for s in store.sessions()] == ["p0", "p4", "p3"]
    assert store.history(keys[1]) == [] and len(store.history(keys[0])) == 2
    cut = store.sessions()[1].updated  # p4's time: p3 is older
    assert [s.key.name for s in store.evict(older_than=cut)] == ["p3"]
    assert store.evict(keep=5, older_than=0) == []


def test_delete(store: Store) -> None:
    store.append(A, exchange(1))
    assert store.delete(A) is True and store.delete(A) is False
    assert store.history(A) == [] and store.sessions() == []
    store.append(A, exchange(2))  # a new session of the same name starts empty
    assert store.history(A) == [exchange(2)]


def test_a_scene_history_is_kept(store: Store) -> None:
    from charfmt.prompt.scene import Scene

    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    store.append(A, scene.examples[0])
    assert store.history(A) == [scene.examples[0]]


def test_reopened_stores_keep_everything(engine: str, target: str) -> None:
    if engine == "memory":
        pytest.skip("the memory store is this process's only")
    with open_store(target) as first:
        for ex in HISTORY:
            first.append(A, ex)
    with open_store(target) as again:
        assert again.history(A) == HISTORY


def test_only_one_worker_holds_a_session(engine: str, target: str) -> None:
    with open_store(target) as one, open_store(target) as two:
        lease = one.try_lock(A)
        assert lease is not None and lease.held()
        other = SessionKey("", "turn/Mio", "player-2")
        if engine == "postgres":  # two stores: two workers; the other waits for the first's turn
            assert two.try_lock(A) is None
        free = two.try_lock(other)
        assert free is not None
        lease.release()
        free.release()
        again = two.try_lock(A)
        assert again is not None
        again.release()


def _in_another_process(target: str, names: list[str]) -> list[bool]:
    """Whether another process (a fork) opening ``target`` gets the turn of each session named."""
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(read)
            with open_store(target) as other:
                got = [other.try_lock(SessionKey("", "turn/Mio", name)) is not None for name in names]
            os.write(write, bytes(got))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        got = [bool(b) for b in f.read()]
    os.waitpid(pid, 0)
    return got


def test_two_processes_on_one_sqlite_file_never_hold_one_session(tmp_path: Path) -> None:
    """Two servers on one SQLite file (by mistake, or ``charfmt sessions`` beside one): a session's turn is
    held by one process at a time; another session's is free; a lease released is free again."""
    target = str(tmp_path / "s.sqlite3")
    with open_store(target) as store:
        lease = store.try_lock(A)
        assert lease is not None
        assert _in_another_process(target, ["player-1", "player-2"]) == [False, True]
        lease.release()
        assert _in_another_process(target, ["player-1"]) == [True]


# --- SQLite files that are no store --------------------------------------------------------------------


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"dear diary " * 1000)
    with pytest.raises(StoreError, match="is not a SQLite database"):
        open_store(path)
    assert path.read_bytes() == b"dear diary " * 1000  # untouched


def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
    db.close()
    with pytest.raises(StoreError, match=r"another program \(tables users\)"):
        open_store(path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "is a folder"),
        (lambda p: None, "does not exist"),
    ],
)
def test_paths_that_cannot_be_stores(tmp_path: Path, make: object, message: str) -> None:
    path = tmp_path / "s.sqlite3" if message != "does not exist" else tmp_path / "missing" / "s.sqlite3"
    make(path)  # type: ignore[operator]
    with pytest.raises(StoreError, match=message):
        open_store(path)


def test_the_default_store_makes_its_private_folder(tmp_path: Path) -> None:
    path = tmp_path / "data" / "charfmt" / "sessions.sqlite3"
    with open_store(path, default=True) as made:
        made.append(A, exchange(1))
    assert path.parent.stat().st_mode & 0o777 == 0o700 and path.stat().st_mode & 0o077 == 0


def test_a_store_locked_by_another_program_fails_in_bounded_time(tmp_path: Path) -> None:
    from charfmt.store.sqlite import SQLiteStore

    path = tmp_path / "s.sqlite3"
    with open_store(path) as made:
        made.append(A, exchange(1))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # (a backup, a sqlite3 shell holding a write)
    try:
        started = time.monotonic()  # opening waits for the lock too, as long
        with pytest.raises(StoreError, match=r"is locked by another program \(waited 0.3 s\)"):
            SQLiteStore(path, busy=0.3)
        assert time.monotonic() - started < 3
    finally:
        other.execute("ROLLBACK")
        other.close()
    store = SQLiteStore(path, busy=0.3)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="is locked by another program"):
            store.append(A, exchange(2))
        assert time.monotonic() - started < 3
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.history(A) == [exchange(1)]  # what was finished is there; the failed turn is not
    store.close()


# --- the schema's version --------------------------------------------------------------------------------


def _version(path: Path) -> str:
    with sqlite3.connect(path) as db:
        (value,) = db.execute("SELECT value FROM charfmt_meta WHERE key = 'schema_version'").fetchone()
    db.close()
    return str(value)


def test_a_store_of_a_newer_charfmt_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    open_store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE charfmt_meta SET value = '99' WHERE key = 'schema_version'")
    db.close()
    with pytest.raises(StoreError, match=r"written by a newer charfmt \(store schema 99; this charfmt reads up to 1\)"):
        open_store(path)
    assert _version(path) == "99"


def test_an_older_store_is_upgraded_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from charfmt.store import schema

    path = tmp_path / "s.sqlite3"
    with open_store(path) as old:
        for ex in HISTORY:
            old.append(A, ex)
    assert _version(path) == "1"
    broken = (*schema.MIGRATIONS, ("ALTER TABLE charfmt_sessions ADD COLUMN note TEXT", "NOT SQL AT ALL"))
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="syntax error"):
        open_store(path)
    with sqlite3.connect(path) as db:  # nothing of the failed step stayed: not its first statement either
        columns = [row[1] for row in db.execute("PRAGMA table_info(charfmt_sessions)")]
    db.close()
    assert "note" not in columns and _version(path) == "1"
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS[:1], broken[1][:1]))
    with open_store(path) as upgraded:
        assert upgraded.history(A) == HISTORY
    assert _version(path) == "2"


# --- properties and permissions ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_any_exchange_comes_back_exactly(engine: str, tmp_path: Path) -> None:
    """Round trip: whatever exchange is appended (any reply, any player's turn, lenient leftovers kept) is
    the one ``history`` gives back, in order, within the byte bound."""
    from hypothesis import given
    from hypothesis import strategies as st

    from charfmt.models import Reply

    with store_target(engine, tmp_path) as target, open_store(target) as store:
        names = iter(range(1 << 30))

        @given(st.lists(st.builds(Exchange, user=st.from_type(UserTurn), reply=st.from_type(Reply)), max_size=4))
        def round_trip(exchanges: list[Exchange]) -> None:
            key = SessionKey("", "turn/Mio", f"h{next(names)}")
            for ex in exchanges:
                store.append(key, ex)
            assert store.history(key) == exchanges

        round_trip()


def _open_as_another_user(path: Path) -> str:
    """What opening ``path`` says in a child process that, run by root (whom no permission stops), becomes
    ``nobody`` first: ``opened``, or the ``StoreError``'s message."""
    import os

    import charfmt.store.sqlite  # noqa: F401 (imported before the fork: the child reads no source file)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            try:
                open_store(path).close()
                said = "opened"
            except StoreError as e:
                said = str(e)
            os.write(write, said.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read().decode()
    os.waitpid(pid, 0)
    return said


def test_a_read_only_store_is_refused(tmp_path: Path) -> None:
    """A store file the server may not write is refused at the start, in one line; so is one in a folder
    SQLite cannot write its log into."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="charfmt-ro-"))
    try:
        folder.chmod(0o755)
        path = folder / "s.sqlite3"
        with open_store(path) as made:
            made.append(A, exchange(1))
        path.chmod(0o444)
        assert (
            _open_as_another_user(path)
            == f"{path} is read-only: turns cannot be kept there (--memory keeps them in memory)"
        )
        path.chmod(0o666)
        folder.chmod(0o555)
        assert (
            _open_as_another_user(path) == f"{path}: its folder is read-only (SQLite writes its log beside the store)"
        )
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
