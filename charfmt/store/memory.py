"""The memory store: sessions kept in this process only (``serve --memory``; a restart forgets them)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from charfmt.store.base import Appended, SessionInfo, SessionKey, Store, encode, oldest_past

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange


@dataclass
class _Session:
    created: float
    updated: float
    exchanges: list[Exchange] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


class MemoryStore(Store):
    """Sessions in a dict, the most recently written last (the same promises as the SQL stores)."""

    target = ":memory:"
    blocking = False

    def __init__(self) -> None:
        self._sessions: dict[SessionKey, _Session] = {}

    def history(self, key: SessionKey) -> list[Exchange]:
        """The session's exchanges, oldest first (``[]`` where there is no such session)."""
        found = self._sessions.get(key)
        return list(found.exchanges) if found is not None else []

    def append(self, key: SessionKey, exchange: Exchange, *, max_bytes: int | None = None) -> Appended:
        """Add ``exchange`` at the end of the session (made where new); past ``max_bytes``, the oldest go."""
        size = len(encode(exchange).encode())  # (as a SQL store counts it: the bound means the same everywhere)
        now = time.time()
        found = self._sessions.pop(key, None)
        created = found is None
        session = _Session(now, now) if found is None else found
        session.exchanges.append(exchange)
        session.sizes.append(size)
        session.updated = now
        drop = oldest_past(session.sizes, max_bytes)
        del session.exchanges[:drop], session.sizes[:drop]
        self._sessions[key] = session  # (last: the most recently written)
        return Appended(created, drop)

    def sessions(
        self, *, owner: str | None = None, namespace: str | None = None, name: str | None = None
    ) -> list[SessionInfo]:
        """The sessions matching each filter given, the most recently written first."""
        return [
            SessionInfo(key, len(s.exchanges), sum(s.sizes), s.created, s.updated)
            for key, s in reversed(self._sessions.items())
            if (owner is None or key.owner == owner)
            and (namespace is None or key.namespace == namespace)
            and (name is None or key.name == name)
        ]

    def delete(self, key: SessionKey) -> bool:
        """Forget the session; whether there was one."""
        return self._sessions.pop(key, None) is not None

    def evict(self, *, keep: int | None = None, older_than: float | None = None) -> list[SessionInfo]:
        """Forget the sessions last written before ``older_than``, then all but the ``keep`` newest."""
        listed = self.sessions()
        gone = [s for s in listed if older_than is not None and s.updated < older_than]
        left = listed[: len(listed) - len(gone)]  # (the most recently written first: the old ones are last)
        if keep is not None:
            gone += left[keep:]
        for info in gone:
            del self._sessions[info.key]
        return gone
