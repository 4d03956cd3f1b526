"""Sessions: each player's history in canonical form, kept in a store, bounded in number and in bytes.

A session is named by what the front end sends (the ``X-Charfmt-Session`` header, the OpenAI
``user`` field, or ``/v1/turn``'s ``session``), and keyed in the store (``charfmt.store``: memory,
SQLite or PostgreSQL) by its owner (the credential that made it), its door and character (the
namespace: ``turn/Rex``, ``chat/Rex``) and that name. A turn *holds* its session: one turn at a
time per session (an asyncio lock in this process; the store's lease across the workers of one
PostgreSQL store), its history read fresh from the store, its exchange kept in one transaction.
Each session keeps at most ``max_bytes`` of history (its oldest exchanges go first, said on the
console); past ``max_sessions`` sessions, or ``max_age`` seconds unwritten, a session is evicted,
and the console says which. A store that fails is a 503 naming it; no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from charfmt.serve.wire import HTTPFailure
from charfmt.store import StoreError, name_problem
from charfmt.store.base import MAX_NAME, NAME

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange
    from charfmt.store import Lease, SessionInfo, SessionKey, Store

_T = TypeVar("_T")

MAX_KEY: Final = MAX_NAME
"""Characters of a session key (``charfmt.store``'s rule for a session's name)."""

KEY: Final = NAME
"""What a session key may hold (printable, no spaces: it goes into logs)."""

CONSOLE: Final = logging.getLogger("charfmt.serve")
"""Where an eviction or a trimmed history is said (``charfmt serve`` writes it beside uvicorn's lines)."""

_POLL: Final = (0.01, 0.25)
"""The first and the longest pause between two tries for a session another worker holds (seconds)."""


@dataclass
class _Lock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


@dataclass(eq=False, repr=False)
class Sessions:
    """The server's sessions in ``store``: held one turn at a time, kept, bounded, evicted (see the module)."""

    store: Store
    _: KW_ONLY
    max_sessions: int | None = 1000
    max_bytes: int = 256 << 10
    max_age: float | None = None
    wait: float = 120.0
    """Seconds a turn waits for its session while another worker runs one of it (then a 409)."""
    _locks: dict[SessionKey, _Lock] = field(default_factory=dict, init=False)

    async def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn`` of the store (in a thread where the store waits on a file or the network); a failure a 503."""
        try:
            if self.store.blocking:
                return await asyncio.to_thread(fn, *args, **kwargs)
            return fn(*args, **kwargs)
        except StoreError as e:
            raise HTTPFailure(503, f"the session store failed: {e}") from None

    @contextlib.asynccontextmanager
    async def hold(self, key: SessionKey) -> AsyncIterator[tuple[list[Exchange], Lease]]:
        """The session's turn: its history (read now, from the store) and its lease, for as long as the block runs."""
        held = self._locks.setdefault(key, _Lock())
        held.users += 1
        try:
            async with held.lock:
                lease = await self._lease(key)
                try:
                    yield await self.call(self.store.history, key), lease
                finally:
                    with contextlib.suppress(HTTPFailure):
                        await self.call(lease.release)
        finally:
            held.users -= 1
            if not held.users:
                del self._locks[key]

    async def _lease(self, key: SessionKey) -> Lease:
        """The store's lease of the session, tried again (less and less often) while another worker holds it."""
        deadline = time.monotonic() + self.wait
        pause = _POLL[0]
        while (lease := await self.call(self.store.try_lock, key)) is None:
            if time.monotonic() + pause > deadline:
                raise HTTPFailure(
                    409, f"session {key.name!r}: another worker of the server is running a turn of it "
                    f"(waited {self.wait:g} s); try again when its reply has come", "session",
                )  # fmt: skip
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL[1])
        return lease

    async def keep(self, key: SessionKey, exchange: Exchange, lease: Lease) -> None:
        """Keep a finished turn's exchange (one transaction); trim the session and evict others as bounded."""
        if not await self.call(lease.held):
            raise HTTPFailure(
                503, f"session {key.name!r}: the store's lock of the session was lost during the turn (its connection "
                "dropped); the turn is not kept, the ones before it are",
            )  # fmt: skip
        appended = await self.call(self.store.append, key, exchange, max_bytes=self.max_bytes)
        if appended.dropped:
            CONSOLE.info(
                "session %s: %d oldest exchange(s) dropped (its history is over %s bytes)",
                key, appended.dropped, f"{self.max_bytes:,}",
            )  # fmt: skip
        if appended.created:
            await self.evict()

    async def evict(self) -> list[SessionInfo]:
        """Forget the sessions past ``max_age`` or ``max_sessions``, each said on the console."""
        if self.max_sessions is None and self.max_age is None:
            return []
        older = time.time() - self.max_age if self.max_age is not None else None
        gone = await self.call(self.store.evict, keep=self.max_sessions, older_than=older)
        for info in gone:
            aged = older is not None and info.updated < older
            why = f"unwritten for more than {self.max_age:g} s" if aged else f"more than {self.max_sessions:,} sessions"
            last = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.updated))
            CONSOLE.warning("session %s evicted (%d exchanges, last written %s): %s", info.key, info.turns, last, why)
        return gone


def check_key(key: str, what: str = "a session key") -> str | None:
    """Why ``key`` cannot name a session, or ``None`` when it can (``what``: how the message names it)."""
    return name_problem(key, what)


USER_PREFIX: Final = "user:"
"""What begins the session name of a chat-completions ``user`` that is no session key itself."""


def user_session(user: str) -> str | None:
    """The session a chat-completions ``user`` field names: the value itself where it is a session key, else
    ``user:`` and the first 24 hex digits of its UTF-8 SHA-256 (OpenAI's ``user`` is any end-user id: a display
    name with spaces, a long id; the same value is always the same session); ``None`` for ``""`` (no session)."""
    if not user:
        return None
    if name_problem(user) is None:
        return user
    return USER_PREFIX + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:24]
