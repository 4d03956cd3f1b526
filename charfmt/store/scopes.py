"""Whose conversation a session is besides its owner: the door and the character (or scene), by name AND definition.

A session's namespace was ``door/Name`` (``turn/Kira``): a different card also named Kira,
served or chatted with on the same store, resumed the first card's conversations. The namespace
now names the character by its name and a digest of its definition (``turn/Kira~3f9a1c2b``: the
character's or scene's fields as charfmt reads them, whoever the player is). A store written
before keeps its ``door/Name`` sessions: each is still resumed by a character of that name (one
of its definition cannot be known) until it ends, and listed, shown, exported and deleted as ever.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Final

from charfmt.store.base import SessionKey

if TYPE_CHECKING:
    from pydantic import BaseModel

    from charfmt.store.base import SessionInfo, SessionKey, Store

MARK: Final = "~"
"""Between a character's name and its definition's digest in a namespace."""
DIGEST: Final = 8
"""Hex digits of the definition's digest kept in a namespace (32 bits: one card told from another of its name)."""


def scope(name: str, definition: BaseModel) -> str:
    """The character's part of a namespace: ``name~digest`` of ``definition`` (a ``Character`` or a ``Scene``;
    the player's name, ``user_name``, is not part of it)."""
    text = json.dumps(_without_player(definition.model_dump(mode="json")), sort_keys=True, ensure_ascii=False)
    return f"{name}{MARK}{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:DIGEST]}"


def _without_player(value: Any) -> Any:
    """``value`` (a dumped definition) without any ``user_name``: a scene's cast members hold the player's too."""
    if isinstance(value, dict):
        return {k: _without_player(v) for k, v in value.items() if k != "user_name"}
    if isinstance(value, list):
        return [_without_player(v) for v in value]
    return value


def legacy(namespace: str) -> str | None:
    """The namespace a store written before digests held the same sessions in (``turn/Kira``), or None."""
    head, mark, digest = namespace.rpartition(MARK)
    return head if mark and len(digest) == DIGEST and "/" in head else None


def character_of(namespace: str) -> str | None:
    """The character's (or scene's) name a namespace holds (``turn/Kira~3f9a1c2b``, ``turn/Kira``: ``Kira``)."""
    _door, slash, rest = namespace.partition("/")
    if not slash or not rest:
        return None
    head, mark, digest = rest.rpartition(MARK)
    return head if mark and len(digest) == DIGEST else rest


def resolved(store: Store, key: SessionKey) -> SessionKey:
    """``key``, or the session a store written before digests holds for it (``legacy``) where only that one exists."""

    old = legacy(key.namespace)
    if old is None or store.info(key) is not None:
        return key
    before = SessionKey(key.owner, old, key.name)
    return before if store.info(before) is not None else key


def other_definitions(store: Store, key: SessionKey) -> list[SessionInfo]:
    """The sessions of ``key``'s owner and name kept for another definition of its character (an edited card
    or TOML file), the most recently written first: what a new session of an edited character did not resume."""
    door = legacy(key.namespace)
    if door is None:
        return []
    found = store.sessions(owner=key.owner, name=key.name)
    return [s for s in found if s.key.namespace != key.namespace and legacy(s.key.namespace) == door]
