"""What a store target names — memory, a SQLite file, a PostgreSQL DSN — and the default store's place."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from charfmt.store.base import StoreError

if TYPE_CHECKING:
    from charfmt.store.base import Store

MEMORY: Final = ":memory:"
"""The target of the memory store (``serve --memory``)."""

DSN_SCHEMES: Final = ("postgresql://", "postgres://")

FILE_NAME: Final = "sessions.sqlite3"


def data_folder() -> Path:
    """charfmt's folder under the user's data folder: ``$XDG_DATA_HOME/charfmt`` (``~/.local/share/charfmt``),
    ``~/Library/Application Support/charfmt`` on macOS, ``%LOCALAPPDATA%\\charfmt`` on Windows."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin" and not os.environ.get("XDG_DATA_HOME"):
        base = str(Path.home() / "Library" / "Application Support")
    else:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "charfmt"


def default_store_path() -> Path:
    """The store ``charfmt serve`` and ``charfmt chat --session`` use where no ``--store`` is given."""
    return data_folder() / FILE_NAME


def is_dsn(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL database (``postgresql://…``), not a file."""
    return isinstance(target, str) and target.lower().startswith(DSN_SCHEMES)


def shown_target(target: str | Path) -> str:
    """``target`` as messages show it: a DSN without its password (in the URL or as ``password=``)."""
    if not is_dsn(target):
        return str(target)
    parts = urlsplit(str(target))
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in parse_qsl(parts.query)], safe="/")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def open_store(target: str | Path | None, *, default: bool = False, create: bool = True) -> Store:
    """The store ``target`` names: ``None`` or ``":memory:"`` memory, a ``postgresql://`` DSN PostgreSQL,
    anything else a SQLite file (``default``: the default store, whose folder is made where missing).

    ``create=False`` (a command that only reads, or deletes): a store that does not exist is a
    ``StoreError`` saying so, and nothing is made (no file, no folder, no tables). A URL of another
    scheme (``mysql://``) is a ``StoreError`` naming it, never a file path.
    """
    if target is None or str(target) == MEMORY:
        from charfmt.store.memory import MemoryStore  # noqa: PLC0415 (a cycle: importing charfmt.store.memory imports this module)

        return MemoryStore()
    if is_dsn(target):
        from charfmt.store.postgres import PostgresStore  # noqa: PLC0415 (psycopg, an optional extra; and a cycle)

        return PostgresStore(str(target), shown=shown_target(target), create=create)
    if (why := target_problem(target)) is not None:
        raise StoreError(why)
    from charfmt.store.sqlite import SQLiteStore  # noqa: PLC0415 (a cycle: importing charfmt.store.sqlite imports this module)

    return SQLiteStore(target, folder=default and create, create=create)


_URL: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)(?:://|(?<=..)(:)/(?!/))")
"""A URL's head: ``scheme://``, or ``scheme:/`` and a path (group 2: the one slash; a drive letter has one
character, ``C:/``, and is a path's)."""


def target_problem(target: str | Path) -> str | None:
    """Why ``target`` names no store charfmt opens (a URL of a scheme other than ``postgresql://``), or ``None``."""
    m = _URL.match(str(target)) if isinstance(target, str) else None
    if m is None or is_dsn(target):
        return None
    scheme = m.group(1)
    if m.group(2) is not None:  # ``sqlite:/tmp/x.db``: a URL's scheme with one slash (a path holds no such head)
        return (
            f"{target!r} begins like a URL ({scheme}:) but is none charfmt opens: a SQLite file's path"
            " (/tmp/x.db), or a postgresql:// DSN (extra charfmt[postgres])"
        )
    return (
        f"{scheme}:// is not a store charfmt opens: a SQLite file's path, or a postgresql:// DSN "
        "(extra charfmt[postgres])"
    )
