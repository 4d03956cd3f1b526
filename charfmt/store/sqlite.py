"""The SQLite store: one file (WAL, ``synchronous=FULL``), one transaction per finished turn, the standard library only.

A process killed at any moment (``kill -9``) loses at most the transaction it had not committed:
SQLite's write-ahead log makes each commit all or nothing, and ``FULL`` syncs it before the
commit returns. The file is checked as it is opened: a file that is not SQLite, a database of
another program, a store of a newer charfmt, a read-only or locked file are each one
``StoreError`` naming the file. A lock held by another program is waited on for ``busy``
seconds at most. Several processes on one file (two ``serve`` by mistake, ``charfmt sessions``
beside a server) never run turns of one session at once: a turn holds a byte-range lock of a
file beside the store (``PATH-turns.lock``, POSIX ``lockf``; a process that dies lets its locks
go). Where there is no ``fcntl`` (Windows), each process orders its own turns only. For several
workers by design, PostgreSQL (``charfmt.store.postgres``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from charfmt.store.base import NO_LEASE, Lease, SessionKey, StoreError, lock_id
from charfmt.store.sql import Run, SQLStore, rolled_back

BUSY_SECONDS: Final = 5.0
"""How long an operation waits for a lock another program holds on the file before it fails."""

_WHY: Final = (
    ("file is not a database", "is not a SQLite database (is it the right file?)"),
    ("database is locked", "is locked by another program (waited {busy:g} s)"),
    ("database table is locked", "is locked by another program (waited {busy:g} s)"),
    ("readonly database", "is read-only: turns cannot be kept there"),
    ("unable to open database file", "cannot be opened (SQLite writes beside it: its folder must be writable)"),
    ("disk i/o error", "cannot be written: a disk I/O error"),
    ("database or disk is full", "cannot be written: the disk is full"),
    ("malformed", "is damaged (SQLite says: {error})"),
)
"""SQLite's errors, as the store says them after the file's name (the first match wins)."""


class SQLiteStore(SQLStore):
    """A store in one SQLite file (made where missing; ``folder``: its folder too; ``create=False``: never made,
    a missing or empty file a ``StoreError``, and the turns' lock file made only when a turn needs it)."""

    engine = "sqlite"
    alone = True

    def __init__(
        self, path: str | Path, *, folder: bool = False, busy: float = BUSY_SECONDS, create: bool = True
    ) -> None:
        path = Path(path).expanduser()
        self.target = str(path)
        self.busy = busy
        if not create:
            _existing(path)
        else:
            _not_empty(path)
        _usable(path, folder=folder)
        self._mutex = threading.Lock()
        """One transaction at a time on the one connection (the server runs them in threads)."""
        self._locks = _TurnLocks(Path(f"{path}-turns.lock"), lazy=True)  # (made once the file proves a store)
        try:
            self._db = sqlite3.connect(path, timeout=busy, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            self._locks.close()
            raise self._error(e) from None
        try:
            with self._mutex:
                try:
                    self._db.execute("PRAGMA journal_mode=WAL").fetchone()
                    self._db.execute("PRAGMA synchronous=FULL")
                except sqlite3.Error as e:
                    raise self._error(e) from None
            with self._transaction(write=True) as run:
                self._migrate(run, create=create)
            if create and self._locks.posix:  # (a server's store: a lock file that cannot be made stops its start)
                self._locks._open()
        except BaseException:
            self._db.close()
            self._locks.close()
            raise

    @contextlib.contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Run]:
        def run(sql: str, params: tuple[Any, ...] = ()) -> Any:
            return self._db.execute(sql, params)

        with self._mutex:
            try:
                self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                with rolled_back(lambda: self._db.execute("ROLLBACK")):
                    yield run
                    self._db.execute("COMMIT")
            except sqlite3.Error as e:
                raise self._error(e) from None

    def _tables(self, run: Run) -> set[str]:
        rows = run("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").fetchall()
        return {row[0] for row in rows}

    def _error(self, e: sqlite3.Error) -> StoreError:
        """SQLite's error as one line naming the file."""
        text = str(e)
        for found, said in _WHY:
            if found in text.lower():
                return StoreError(f"{self.target} {said.format(busy=self.busy, error=text)}")
        return StoreError(f"{self.target}: {text}")

    def try_lock(self, key: SessionKey) -> Lease | None:
        """The session's turn, where no other process holds it (``None``: one does)."""
        return self._locks.try_lock(key)

    def close(self) -> None:
        """Close the file (its write-ahead log checkpointed into it) and the turns' lock file."""
        with self._mutex:
            self._db.close()
        self._locks.close()


class _TurnLocks:
    """One byte of ``path`` locked (``lockf``) per session whose turn this process runs."""

    def __init__(self, path: Path, *, lazy: bool = False) -> None:
        self.path = path
        self.fd: int | None = None
        self.posix = True
        try:
            import fcntl  # noqa: F401, PLC0415 (POSIX only)
        except ImportError:
            self.posix = False
            return
        if not lazy:  # (a server's store: a lock file that cannot be made stops its start, not its first turn)
            self._open()

    def _open(self) -> int:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as e:
                raise StoreError(f"{self.path}: cannot open the turns' lock file: {e.strerror or e}") from None
        return self.fd

    def try_lock(self, key: SessionKey) -> Lease | None:
        if not self.posix:
            return NO_LEASE
        fd = self._open()
        import fcntl  # noqa: PLC0415 (POSIX only: fcntl's file locks)

        offset = lock_id(key) & ((1 << 62) - 1)  # (a byte of a sparse range: the file stays empty)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
        except (BlockingIOError, PermissionError):  # (EAGAIN or EACCES: another process holds it)
            return None
        except OSError as e:
            raise StoreError(f"the turns' lock file beside the store: {e.strerror or e}") from None
        return _TurnLease(self, offset)

    def release(self, offset: int) -> None:
        if self.fd is not None:
            import fcntl  # noqa: PLC0415 (POSIX only: fcntl's file locks)

            with contextlib.suppress(OSError):
                fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, offset)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # (every lock of this process on the file goes with it)
            self.fd = None


class _TurnLease(Lease):
    """A session's byte of the turns' lock file, held by this process."""

    def __init__(self, locks: _TurnLocks, offset: int) -> None:
        self.locks, self.offset = locks, offset

    def release(self) -> None:
        """Let the byte go."""
        self.locks.release(self.offset)


def _existing(path: Path) -> None:
    """A ``StoreError`` for a path that holds no store to read: missing, or an empty file (nothing is made)."""
    if path.is_dir():
        return  # (_usable says it is a folder)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise StoreError(
            f"{path}: the store does not exist (charfmt serve and charfmt chat --session make one where they keep"
            " sessions)"
        ) from None
    except OSError as e:
        raise StoreError(f"{path}: cannot read the store: {e.strerror or e}") from None
    if size == 0:
        raise StoreError(f"{path} holds no charfmt store: an empty file")


SQLITE_SUFFIXES: Final = (".sqlite3", ".sqlite", ".db", ".db3")
"""The names of a SQLite file: an empty one of these names is made a store (a file made for it: ``touch``)."""


def _not_empty(path: Path) -> None:
    """A ``StoreError`` for an existing empty file of another name (``empty.json``): it is no store, and making
    it one would overwrite what the user meant it for (``charfmt sessions`` calls it an empty file too)."""
    try:
        empty = path.is_file() and path.stat().st_size == 0
    except OSError:
        return  # (_usable says why it cannot be used)
    if empty and path.suffix.lower() not in SQLITE_SUFFIXES:
        raise StoreError(
            f"{path} holds no charfmt store: an empty file (give a new file name, or one ending in .sqlite3, and"
            " the store is made there)"
        )


def _usable(path: Path, *, folder: bool) -> None:
    """A ``StoreError`` for a path that cannot be a store: a folder, a folder that is missing, no permission."""
    if path.is_dir():
        raise StoreError(f"{path} is a folder, not a store file (give a file name: {path / 'sessions.sqlite3'})")
    parent = path.parent
    if not parent.is_dir():
        if not folder:
            raise StoreError(f"{path}: the folder {parent} does not exist")
        try:
            parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # (conversations are private)
        except OSError as e:
            raise StoreError(f"{path}: cannot make its folder: {e.strerror or e}") from None
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StoreError(f"{path} is read-only: turns cannot be kept there (--memory keeps them in memory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"{path}: its folder is read-only (SQLite writes its log beside the store)")
    if not path.exists():
        try:  # made private before SQLite opens it (its log files take the store's permissions)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        except OSError as e:
            raise StoreError(f"{path}: cannot make the store file: {e.strerror or e}") from None
