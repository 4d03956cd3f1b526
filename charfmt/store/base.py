"""What every conversation store is: the session key, what a store says of a session, and the one interface.

A store keeps, per :class:`SessionKey`, the exchanges of one conversation, oldest first. Every
engine (``memory``, ``sqlite``, ``postgres``) keeps the same promises, checked by one test suite
run against each (``tests/store/``): a turn appended is one transaction (all of it or nothing),
a session's oldest exchanges go first past ``max_bytes`` (the newest always stays), the least
recently used sessions go first past ``keep``, and what a store hands back is a copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final

from pydantic import ValidationError

from charfmt.diagnostics import CharfmtError

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange


MAX_NAME: Final = 128
"""Characters of a session's name."""

NAME: Final = re.compile(r"[A-Za-z0-9._:@+/=-]{1,128}")
"""What a session's name may hold (printable, no spaces: it goes into logs and command lines)."""


def name_problem(name: str, what: str = "a session key") -> str | None:
    """Why ``name`` cannot name a session, or ``None`` when it can (``what``: how the message names it)."""
    if NAME.fullmatch(name) is None:
        return f"{what} is 1 to {MAX_NAME} characters of letters, digits and ._:@+/=- (got {name[:40]!r})"
    return None


class StoreError(CharfmtError):
    """A store cannot be opened, read or written: the message names it and says why, in one line."""


@dataclass(frozen=True, order=True)
class SessionKey:
    """Whose conversation it is (``owner``), through which door (``namespace``), and its ``name``.

    ``owner`` is the credential that made the session (``""``: the server's one trusted front
    end, or no auth at all; a ``--tokens`` entry's name); ``namespace`` keeps doors apart
    (``turn/Mio``: ``/v1/turn`` with the character Mio; ``chat/Mio``: chat completions' ``user``;
    ``cli/Mio``: ``charfmt chat --session``); ``name`` is what the client calls it.
    """

    owner: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.owner or '-'}:{self.namespace}:{self.name}"


@dataclass(frozen=True)
class SessionInfo:
    """A session as a store lists it: its key, its size, and when it began and was last written (Unix time)."""

    key: SessionKey
    turns: int
    """Exchanges held."""
    size: int
    """Bytes of the exchanges held, as stored (their JSON)."""
    created: float
    updated: float


@dataclass(frozen=True)
class Appended:
    """What appending a turn did: whether it began the session, and how many of its oldest exchanges went."""

    created: bool
    dropped: int


class Lease:
    """The right to run a turn of one session, held until ``release`` (a no-op where one process has them all)."""

    def held(self) -> bool:
        """Whether the lease still holds (a connection that carried it may have gone): checked before a turn is kept."""
        return True

    def release(self) -> None:
        """Give the turn back."""


NO_LEASE: Final = Lease()
"""The lease of a store whose server process alone runs turns (memory, SQLite): the server's own lock is enough."""


def encode(exchange: Exchange) -> str:
    """An exchange as a store keeps it: its JSON (``decode`` gives back an equal ``Exchange``)."""
    return exchange.model_dump_json()


def decode(text: str, where: str) -> Exchange:
    """An exchange back from its stored JSON; a ``StoreError`` naming ``where`` when it is not one."""

    from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: every CLI command loads this module)

    try:
        return Exchange.model_validate_json(text)
    except ValidationError as e:
        first = e.errors()[0]
        place = ".".join(str(p) for p in first["loc"])
        raise StoreError(f"{where} is not a stored exchange ({place}: {first['msg']})") from None


class Store(ABC):
    """One place sessions are kept; every engine's methods keep the promises of the module docstring."""

    target: str = ""
    """What the store was opened from, as messages show it (a DSN without its password)."""
    blocking: bool = True
    """Whether its methods wait on files or the network (a server runs them off its event loop)."""

    @abstractmethod
    def history(self, key: SessionKey) -> list[Exchange]:
        """The session's exchanges, oldest first (``[]`` where there is no such session)."""

    @abstractmethod
    def append(self, key: SessionKey, exchange: Exchange, *, max_bytes: int | None = None) -> Appended:
        """Add ``exchange`` at the end of the session (made where new), in one transaction; past
        ``max_bytes`` of history, its oldest exchanges go (the newest always stays)."""

    @abstractmethod
    def sessions(
        self, *, owner: str | None = None, namespace: str | None = None, name: str | None = None
    ) -> list[SessionInfo]:
        """The sessions (those matching each filter given), the most recently written first."""

    def info(self, key: SessionKey) -> SessionInfo | None:
        """The session ``key``, or ``None`` where there is none."""
        found = self.sessions(owner=key.owner, namespace=key.namespace, name=key.name)
        return found[0] if found else None

    @abstractmethod
    def delete(self, key: SessionKey) -> bool:
        """Forget the session and its exchanges; whether there was one."""

    @abstractmethod
    def evict(self, *, keep: int | None = None, older_than: float | None = None) -> list[SessionInfo]:
        """Forget the sessions last written before ``older_than`` (Unix time), then all but the ``keep`` most
        recently written; what was forgotten (for the caller to say)."""

    def try_lock(self, key: SessionKey) -> Lease | None:
        """The session's turn, where no other server process holds it (``None``: one does; try again)."""
        return NO_LEASE

    def close(self) -> None:  # noqa: B027 (most engines hold nothing to close)
        """Let go of files and connections (the store is not used after)."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        with contextlib.suppress(StoreError):
            self.close()


def lock_id(key: SessionKey) -> int:
    """A session's lock number: a signed 64-bit number from its key (distinct keys, distinct numbers)."""
    digest = hashlib.blake2b(f"{key.owner}\0{key.namespace}\0{key.name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def oldest_past(sizes: list[int], max_bytes: int | None) -> int:
    """How many of the oldest exchanges (``sizes``, oldest first) go so the rest fit ``max_bytes``; the
    newest always stays."""
    if max_bytes is None:
        return 0
    total, drop = sum(sizes), 0
    while drop < len(sizes) - 1 and total > max_bytes:
        total -= sizes[drop]
        drop += 1
    return drop
