"""Conversation stores: each session's history kept in memory, in SQLite or in PostgreSQL, behind one interface.

``open_store(target)`` opens one: ``None`` (or ``":memory:"``) keeps sessions in this process only, a
``postgresql://`` DSN a PostgreSQL database several servers share (extra ``charfmt[postgres]``), any other
target a SQLite file (``default_store_path()``: the one under the user's data folder). A session is
named by a :class:`SessionKey` (owner, namespace, name); each finished turn is one transaction.
"""

from __future__ import annotations

from charfmt.store.base import Appended, Lease, SessionInfo, SessionKey, Store, StoreError, name_problem
from charfmt.store.targets import default_store_path, open_store, shown_target

__all__ = [
    "Appended",
    "Lease",
    "SessionInfo",
    "SessionKey",
    "Store",
    "StoreError",
    "default_store_path",
    "name_problem",
    "open_store",
    "shown_target",
]
