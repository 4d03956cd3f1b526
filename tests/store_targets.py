"""The stores the store tests run against: memory, a SQLite file in a temporary folder, and a real PostgreSQL.

PostgreSQL is the server ``.ci/run`` starts (``.ci/postgres``), named by ``$CHARFMT_TEST_POSTGRES``; each
test gets a schema of its own (dropped after), so tests never see each other's sessions. Without the
variable or without psycopg, the PostgreSQL cases are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

ENGINES = ("memory", "sqlite", "postgres")


def postgres_missing() -> str | None:
    """Why no PostgreSQL test can run here, or ``None``."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install 'charfmt[postgres]')"
    if not os.environ.get("CHARFMT_TEST_POSTGRES"):
        return "no PostgreSQL server: $CHARFMT_TEST_POSTGRES is not set (.ci/run starts one with .ci/postgres)"
    return None


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A DSN of the test server whose tables go in a new schema of their own, dropped at the end."""
    import psycopg

    dsn = os.environ["CHARFMT_TEST_POSTGRES"]
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    joiner = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{joiner}options={quote(f'-csearch_path={name}')}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


@contextlib.contextmanager
def store_target(engine: str, folder: Path) -> Iterator[str]:
    """What ``open_store`` opens for ``engine``: ``:memory:``, a file in ``folder``, a fresh PostgreSQL schema."""
    if engine == "memory":
        yield ":memory:"
    elif engine == "sqlite":
        yield str(folder / "sessions.sqlite3")
    else:
        why = postgres_missing()
        if why is not None:
            pytest.skip(why)
        with postgres_schema() as dsn:
            yield dsn
