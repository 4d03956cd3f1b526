"""Sessions: each player's history in canonical form, bounded in number and in bytes.

A session is keyed by what the front end sends (the ``X-Charfmt-Session`` header, the
OpenAI ``user`` field, or ``/v1/turn``'s ``session``). The store keeps at most
``max_sessions`` (the least recently used goes first) and each session at most
``max_bytes`` of history (its oldest exchanges go first); the prompt's token budget is
applied again when each turn is rendered. Turns of one session run one at a time.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from charfmt.character import Exchange

MAX_KEY: Final = 128
"""Characters of a session key."""

KEY: Final = re.compile(r"[A-Za-z0-9._:@+/=-]{1,128}")
"""What a session key may hold (printable, no spaces: it goes into logs)."""


@dataclass
class Session:
    """One player's history, newest last, and the lock that keeps its turns in order."""

    key: str
    history: list[Exchange] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    """Bytes of each exchange as stored (its JSON), parallel to ``history``."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def size(self) -> int:
        """Bytes of history held."""
        return sum(self.sizes)


class SessionStore:
    """At most ``max_sessions`` sessions of at most ``max_bytes`` of history each."""

    def __init__(self, *, max_sessions: int = 1000, max_bytes: int = 256 << 10) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: str) -> Session:
        """The session ``key`` (a new one where there is none), now the most recently used."""
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = Session(key)
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(key)
        return session

    def peek(self, key: str) -> Session | None:
        """The session ``key`` if it exists (its place in the order unchanged)."""
        return self._sessions.get(key)

    def add(self, session: Session, exchange: Exchange, *, replace: bool = False) -> None:
        """Append ``exchange`` (``replace``: in the last one's place); drop the oldest exchanges past
        ``max_bytes`` (the newest always stays)."""
        if replace and session.history:
            del session.history[-1], session.sizes[-1]
        session.history.append(exchange)
        session.sizes.append(len(exchange.model_dump_json().encode()))
        while len(session.history) > 1 and session.size > self.max_bytes:
            del session.history[0], session.sizes[0]

    def drop(self, key: str) -> bool:
        """Forget session ``key``; whether there was one."""
        return self._sessions.pop(key, None) is not None


def check_key(key: str, what: str = "a session key") -> str | None:
    """Why ``key`` cannot name a session, or ``None`` when it can (``what``: how the message names it)."""
    if KEY.fullmatch(key) is None:
        return f"{what} is 1 to {MAX_KEY} characters of letters, digits and ._:@+/=- (got {key[:40]!r})"
    return None
