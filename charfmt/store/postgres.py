"""The PostgreSQL store: the SQLite store's schema in a database several ``serve`` workers share (psycopg 3).

Nothing is cached: each turn reads its session's history from the database, so every worker
sees the others' turns at once. A session's turns never interleave across workers: a turn
holds the session's advisory lock (``pg_try_advisory_lock``, taken on one connection per
worker that holds every lease of it; a worker that dies lets its locks go with its connection).
Every statement is bounded (``statement_timeout``, ``lock_timeout``; TCP keep-alives on a
connection that goes silent), and a server that goes away is one ``StoreError``. The schema is
migrated by the first worker to open it, the others waiting on an advisory lock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from charfmt.store.base import Lease, SessionKey, StoreError, lock_id
from charfmt.store.sql import Run, SQLStore

if TYPE_CHECKING:
    import psycopg

CONNECT: Final[dict[str, Any]] = {
    "autocommit": True,
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "options": "-c statement_timeout=30000 -c lock_timeout=15000 -c idle_in_transaction_session_timeout=60000",
    "application_name": "charfmt",
}
"""How each connection is made: every wait bounded (seconds to connect; milliseconds per statement and lock)."""

IDLE: Final = 8
"""Connections kept open between operations (more are opened while more operations run at once)."""

_MIGRATION_LOCK: Final = 0x63686172666D74  # "charfmt": the advisory lock the opening transaction takes


class PostgresStore(SQLStore):
    """A store in a PostgreSQL database (its ``charfmt_*`` tables; the database may hold others)."""

    engine = "postgres"
    for_update = " FOR UPDATE"
    alone = False

    def __init__(self, dsn: str, *, shown: str, create: bool = True) -> None:
        try:
            import psycopg  # noqa: PLC0415 (optional dependency: psycopg, charfmt[postgres])
        except ImportError as e:
            raise StoreError(f"a postgresql:// store needs psycopg ({e}): pip install 'charfmt[postgres]'") from None
        self._psycopg = psycopg
        self._dsn = dsn
        self.target = shown
        self._idle: list[psycopg.Connection[Any]] = []
        self._pool = threading.Lock()
        self._locks = _Locks(self)
        with self._transaction(write=True) as run:
            run("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))  # (workers starting together: one migrates)
            self._migrate(run, create=create)

    def connect(self) -> psycopg.Connection[Any]:
        """A new connection, or the ``StoreError`` saying why there is none."""
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415 (optional dependency: psycopg, charfmt[postgres])

        try:
            given = conninfo_to_dict(self._dsn).get("options")  # (the DSN's own options kept: a search_path...)
            options = f"{given} {CONNECT['options']}" if given else CONNECT["options"]
            return self._psycopg.connect(self._dsn, **{**CONNECT, "options": options})
        except self._psycopg.Error as e:
            raise self._error(e) from None

    def _checkout(self) -> tuple[psycopg.Connection[Any], bool]:
        """A connection (an idle one where there is one: ``True``), its transaction not begun."""
        with self._pool:
            conn = self._idle.pop() if self._idle else None
        if conn is None or conn.closed or conn.broken:
            return self.connect(), False
        return conn, True

    def _checkin(self, conn: psycopg.Connection[Any]) -> None:
        """Keep ``conn`` for the next operation where it is sound and fewer than ``IDLE`` are kept; else close it."""
        idle = not conn.closed and not conn.broken
        if idle and conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE:
            with self._pool:
                if len(self._idle) < IDLE:
                    self._idle.append(conn)
                    return
        conn.close()

    def _forget_idle(self) -> None:
        """Close the idle connections (one was found dead: the others went with the same server)."""
        with self._pool:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    @contextlib.contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Run]:
        conn, reused = self._checkout()
        try:
            with contextlib.ExitStack() as stack:
                try:
                    stack.enter_context(conn.transaction())
                except self._psycopg.OperationalError:
                    if not reused:
                        raise
                    conn.close()  # (a connection kept idle across an outage: begun again on a new one)
                    self._forget_idle()
                    conn = self.connect()
                    stack.enter_context(conn.transaction())

                def run(sql: str, params: tuple[Any, ...] = ()) -> Any:
                    return conn.execute(sql.replace("?", "%s"), params)

                yield run
        except self._psycopg.Error as e:
            raise self._error(e) from None
        finally:
            self._checkin(conn)

    def _tables(self, run: Run) -> set[str]:
        rows = run("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
        return {row[0] for row in rows}

    def _error(self, e: Exception) -> StoreError:
        """psycopg's error as one line naming the store (never its password)."""
        text = " ".join(str(e).split())[:300] or type(e).__name__
        if isinstance(e, self._psycopg.OperationalError):
            return StoreError(f"the PostgreSQL store {self.target} cannot be reached: {text}")
        return StoreError(f"the PostgreSQL store {self.target}: {text}")

    def try_lock(self, key: SessionKey) -> Lease | None:
        """The session's turn, where no other worker holds it (``None``: one does)."""
        return self._locks.try_lock(key)

    def close(self) -> None:
        """Close every connection (the leases still held go with them)."""
        self._forget_idle()
        self._locks.close()


class _Locks:
    """The one connection of a worker that holds its sessions' advisory locks, and its generation (a new
    connection: a new generation; a lease of an older one is no longer held)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.mutex = threading.Lock()
        self.conn: psycopg.Connection[Any] | None = None
        self.generation = 0

    def _alive(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            if self.conn is not None:
                self.conn.close()
            self.conn = self.store.connect()
            self.generation += 1
        return self.conn

    def try_lock(self, key: SessionKey) -> Lease | None:
        number = lock_id(key)
        with self.mutex:
            for again in (True, False):  # a connection that died while idle: once more on a new one
                generation = self.generation
                conn = self._alive()
                try:
                    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (number,)).fetchone()
                    break
                except self.store._psycopg.OperationalError as e:
                    if not again or generation != self.generation:  # (it was new: the server is away)
                        raise self.store._error(e) from None
                except self.store._psycopg.Error as e:
                    raise self.store._error(e) from None
            return _PostgresLease(self, number, self.generation) if row and row[0] else None

    def close(self) -> None:
        with self.mutex:
            if self.conn is not None:
                self.conn.close()
                self.conn = None


class _PostgresLease(Lease):
    """A session's advisory lock, held on its worker's lock connection of one generation."""

    def __init__(self, locks: _Locks, number: int, generation: int) -> None:
        self.locks, self.number, self.generation = locks, number, generation

    def held(self) -> bool:
        """Whether the lock is still held: its connection is the same and still answers."""
        locks = self.locks
        with locks.mutex:
            conn = locks.conn
            if conn is None or locks.generation != self.generation or conn.closed or conn.broken:
                return False
            try:
                conn.execute("SELECT 1").fetchone()
            except locks.store._psycopg.Error:
                return False
            return True

    def release(self) -> None:
        """Let the lock go (where its connection is gone, it went with it)."""
        locks = self.locks
        with locks.mutex:
            conn = locks.conn
            if conn is None or locks.generation != self.generation or conn.closed or conn.broken:
                return
            with contextlib.suppress(locks.store._psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (self.number,))
