"""The SQL stores' schema, one for SQLite and PostgreSQL alike, and the steps that bring a store up to it.

``MIGRATIONS`` is the ordered table of steps: step *n* takes a store of schema version *n - 1*
to version *n* (step 1 makes an empty database a store). Opening a store runs the steps it
lacks, and records the new version, in ONE transaction: a failure leaves it as it was. A store
of a version above ``SCHEMA_VERSION`` was written by a newer charfmt and is refused. A new
version is one more row here, and a test that opens a store of the previous one.
"""

from __future__ import annotations

from typing import Final

META: Final = "charfmt_meta"
"""The table that says what the database is: ``schema_version`` (and which program wrote it first)."""

SESSIONS: Final = "charfmt_sessions"
TURNS: Final = "charfmt_turns"

ID_COLUMN: Final = {
    "sqlite": "INTEGER PRIMARY KEY",  # (SQLite's rowid: numbered as rows come)
    "postgres": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
}
"""The only spelling the two engines need differently: a key numbered by the database."""

_CREATE: Final = (
    f"CREATE TABLE {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"""CREATE TABLE {SESSIONS} (
        id {{id}},
        owner TEXT NOT NULL,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        updated DOUBLE PRECISION NOT NULL,
        turns INTEGER NOT NULL DEFAULT 0,
        size BIGINT NOT NULL DEFAULT 0,
        next_seq BIGINT NOT NULL DEFAULT 0,
        UNIQUE (owner, namespace, name)
    )""",
    f"CREATE INDEX {SESSIONS}_updated ON {SESSIONS} (updated)",
    f"""CREATE TABLE {TURNS} (
        session_id BIGINT NOT NULL,
        seq BIGINT NOT NULL,
        exchange TEXT NOT NULL,
        size INTEGER NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
)
"""Version 1: sessions (one row each, with its size and the next turn's number) and their turns (one row each)."""

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (_CREATE,)
"""Step *n* (index *n - 1*): the statements taking schema version *n - 1* to *n* (``{id}``: ``ID_COLUMN``)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The version this charfmt writes and reads."""


def steps(have: int, engine: str, migrations: tuple[tuple[str, ...], ...] = MIGRATIONS) -> list[str]:
    """The statements that take a store of version ``have`` to the last of ``migrations``, for ``engine``."""
    return [sql.replace("{id}", ID_COLUMN[engine]) for step in migrations[have:] for sql in step]
