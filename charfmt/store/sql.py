"""The SQL stores' operations, written once for SQLite and PostgreSQL: each a transaction of plain statements.

An engine (``charfmt.store.sqlite``, ``charfmt.store.postgres``) gives a transaction (``_transaction``:
a function running one statement, ``?`` placeholders), the names of the tables a database holds, and
its own errors in one line; everything else — the schema's migration, appending a turn and trimming
its session, listing, deleting, evicting — is here, the same statements for both.
"""

from __future__ import annotations

import contextlib
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.store import schema
from charfmt.store.base import Appended, SessionInfo, SessionKey, Store, StoreError, decode, encode, oldest_past

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange

Run = Callable[..., Any]
"""Run one statement in the transaction: ``run(sql, params=())`` → the cursor (``?`` placeholders)."""

_S: Final = schema.SESSIONS
_T: Final = schema.TURNS
_KEY: Final = "owner = ? AND namespace = ? AND name = ?"
_INFO: Final = "owner, namespace, name, turns, size, created, updated"
_EVERY: Final = 1 << 62
"""``LIMIT`` of "all the rest" (SQLite has no ``OFFSET`` without a ``LIMIT``)."""


def _info(row: Sequence[Any]) -> SessionInfo:
    owner, namespace, name, turns, size, created, updated = row
    return SessionInfo(SessionKey(owner, namespace, name), int(turns), int(size), float(created), float(updated))


class SQLStore(Store):
    """A store in a SQL database; the engine says how to open a transaction and how its errors read."""

    engine: str = ""
    """``sqlite`` or ``postgres`` (how ``schema.ID_COLUMN`` spells the key)."""
    for_update: str = ""
    """What locks a session's row for the rest of the transaction, where the engine locks rows (PostgreSQL)."""
    alone: bool = True
    """Whether the store is the database's only content (SQLite: a file of its own) or shares it (PostgreSQL)."""

    @abstractmethod
    def _transaction(self, *, write: bool) -> contextlib.AbstractContextManager[Run]:
        """One transaction (committed at the end, rolled back on an error); the engine's errors a ``StoreError``."""

    @abstractmethod
    def _tables(self, run: Run) -> set[str]:
        """The names of the tables the database holds."""

    # --- opening -------------------------------------------------------------------------------------

    def _migrate(self, run: Run, *, create: bool = True) -> None:
        """Bring the database up to ``schema.SCHEMA_VERSION`` inside the opening transaction (refuse a newer one);
        ``create=False``: a database that holds no store is a ``StoreError``, not made one."""
        migrations = schema.MIGRATIONS
        newest = len(migrations)
        tables = self._tables(run)
        if schema.META not in tables and not create and not (self.alone and tables):  # (another program's: below)
            raise StoreError(f"{self.target} holds no charfmt store: no session was ever kept there")
        if schema.META in tables:
            row = run(f"SELECT value FROM {schema.META} WHERE key = ?", ("schema_version",)).fetchone()
            have = int(row[0]) if row is not None and str(row[0]).isdigit() else -1
            if have < 0:
                raise StoreError(f"{self.target}: the store's schema version is unreadable ({row!r})")
        elif self.alone and tables:
            shown = ", ".join(sorted(tables)[:5])
            raise StoreError(
                f"{self.target} is a database of another program (tables {shown}); charfmt will not write into it"
            )
        else:
            have = 0
        if have > newest:
            raise StoreError(
                f"{self.target} was written by a newer charfmt (store schema {have}; this charfmt reads up to "
                f"{newest}): upgrade charfmt to open it"
            )
        if have == newest:
            return
        for sql in schema.steps(have, self.engine, migrations):
            run(sql)
        run(
            f"INSERT INTO {schema.META} (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            ("schema_version", str(newest)),
        )

    # --- the operations ------------------------------------------------------------------------------

    def history(self, key: SessionKey) -> list[Exchange]:
        """The session's exchanges, oldest first (``[]`` where there is no such session)."""
        with self._transaction(write=False) as run:
            rows = run(
                f"SELECT t.seq, t.exchange FROM {_T} t JOIN {_S} s ON s.id = t.session_id "
                f"WHERE s.owner = ? AND s.namespace = ? AND s.name = ? ORDER BY t.seq",
                (key.owner, key.namespace, key.name),
            ).fetchall()
        return [decode(text, f"{self.target}: session {key}, turn {seq}") for seq, text in rows]

    def append(self, key: SessionKey, exchange: Exchange, *, max_bytes: int | None = None) -> Appended:
        """Add ``exchange`` at the end of the session (made where new) in one transaction; past ``max_bytes``,
        the oldest exchanges go."""
        text = encode(exchange)
        size = len(text.encode())
        now = time.time()
        params = (key.owner, key.namespace, key.name)
        with self._transaction(write=True) as run:
            made = run(
                f"INSERT INTO {_S} (owner, namespace, name, created, updated) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (owner, namespace, name) DO NOTHING",
                (*params, now, now),
            ).rowcount
            sid, seq, total, turns = run(
                f"SELECT id, next_seq, size, turns FROM {_S} WHERE {_KEY}{self.for_update}", params
            ).fetchone()
            run(f"INSERT INTO {_T} (session_id, seq, exchange, size, created) VALUES (?, ?, ?, ?, ?)",
                (sid, seq, text, size, now))  # fmt: skip
            total, turns, drop = total + size, turns + 1, 0
            if max_bytes is not None and total > max_bytes and turns > 1:
                rows = run(f"SELECT seq, size FROM {_T} WHERE session_id = ? ORDER BY seq", (sid,)).fetchall()
                drop = oldest_past([int(r[1]) for r in rows], max_bytes)
                if drop:
                    run(f"DELETE FROM {_T} WHERE session_id = ? AND seq <= ?", (sid, rows[drop - 1][0]))
                    total -= sum(int(r[1]) for r in rows[:drop])
                    turns -= drop
            run(f"UPDATE {_S} SET next_seq = ?, size = ?, turns = ?, updated = ? WHERE id = ?",
                (seq + 1, total, turns, now, sid))  # fmt: skip
        return Appended(made == 1, drop)

    def sessions(
        self, *, owner: str | None = None, namespace: str | None = None, name: str | None = None
    ) -> list[SessionInfo]:
        """The sessions matching each filter given, the most recently written first."""
        where, params = _filters(owner=owner, namespace=namespace, name=name)
        with self._transaction(write=False) as run:
            rows = run(f"SELECT {_INFO} FROM {_S}{where} ORDER BY updated DESC, id DESC", params).fetchall()
        return [_info(row) for row in rows]

    def delete(self, key: SessionKey) -> bool:
        """Forget the session and its exchanges; whether there was one."""
        with self._transaction(write=True) as run:
            row = run(f"SELECT id FROM {_S} WHERE {_KEY}", (key.owner, key.namespace, key.name)).fetchone()
            if row is None:
                return False
            run(f"DELETE FROM {_T} WHERE session_id = ?", (row[0],))
            run(f"DELETE FROM {_S} WHERE id = ?", (row[0],))
        return True

    def evict(self, *, keep: int | None = None, older_than: float | None = None) -> list[SessionInfo]:
        """Forget the sessions last written before ``older_than``, then all but the ``keep`` newest; in one
        transaction."""
        gone: list[tuple[Any, SessionInfo]] = []
        with self._transaction(write=True) as run:
            if older_than is not None:
                rows = run(f"SELECT id, {_INFO} FROM {_S} WHERE updated < ?", (older_than,)).fetchall()
                gone += [(row[0], _info(row[1:])) for row in rows]
            if keep is not None:
                (count,) = run(f"SELECT count(*) FROM {_S}").fetchone()
                if count - len(gone) > keep:
                    rows = run(
                        f"SELECT id, {_INFO} FROM {_S} WHERE updated >= ? ORDER BY updated DESC, id DESC "
                        "LIMIT ? OFFSET ?",
                        (older_than if older_than is not None else -1.0, _EVERY, keep),
                    ).fetchall()
                    gone += [(row[0], _info(row[1:])) for row in rows]
            for sid, _ in gone:
                run(f"DELETE FROM {_T} WHERE session_id = ?", (sid,))
                run(f"DELETE FROM {_S} WHERE id = ?", (sid,))
        return [info for _, info in gone]


def _filters(**given: str | None) -> tuple[str, tuple[str, ...]]:
    """A ``WHERE`` clause (and its parameters) for the columns given a value."""
    named = [(column, value) for column, value in given.items() if value is not None]
    if not named:
        return "", ()
    return " WHERE " + " AND ".join(f"{column} = ?" for column, _ in named), tuple(v for _, v in named)


@contextlib.contextmanager
def rolled_back(rollback: Callable[[], Any]) -> Iterator[None]:
    """Run ``rollback`` where the block fails (its own failure ignored: the first error is the one to say)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            rollback()
        raise
