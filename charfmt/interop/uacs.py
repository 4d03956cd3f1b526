"""UACS, the Universal AI Conversation Schema (validated against ``tests/interop/uacs.schema.json``).

A message's ``content`` is an ordered array of typed parts. charfmt writes the visible text
as a ``text`` part (``format: plain``) and the exact exchange as a ``structured_data`` part
(``schema_id`` names charfmt's payload), with a marker in ``metadata``.
"""

from __future__ import annotations

import uuid
from typing import Final

from charfmt.diagnostics import Diagnostic
from charfmt.interop._declaration import Document, Format, Line, Message, Names, Native, NativeFields, Writing
from charfmt.interop._document import Source
from charfmt.interop._shapes import InPart, Parts, RoleField

SCHEMA_ID: Final = "application/vnd.charfmt.exchange+json"
"""The ``schema_id`` of the ``structured_data`` part that holds an exchange (its ``v`` is inside)."""
ACTOR_ROLES: Final = {"human": "user", "assistant": "assistant", "system": "system", "tool": "tool"}
"""UACS actor roles and the role charfmt reads each as."""
_ACTORS: Final = {"user": ("user", "human"), "assistant": ("character", "assistant"), "system": ("game", "system")}


def _check(source: Source, doc: Message) -> list[Diagnostic]:
    if set(doc) == {"Conversation"}:  # the seed's root schema wraps the conversation in a property
        raise source.fail(
            "CF901", 'the document is wrapped in {"Conversation": ...}; give the Conversation object itself', ()
        )
    return []


def _header(names: Names, cid: uuid.UUID, stamp: str) -> Message:
    return {"conversation_id": str(cid), "created_at": stamp, "updated_at": stamp}


def _message(line: Line, native: Native, writing: Writing) -> Message:
    actor_id, role = _ACTORS[line.role]
    actor = {"id": actor_id, "role": role, "name": native.name or "Game"}
    text = {"type": "text", "text": line.text, "format": "plain"}
    return {"message_id": native.id, "timestamp": native.time, "actor": actor, "content": [text]}


def _empty(native: Native, writing: Writing) -> Message:
    actor = {"id": "character", "role": "assistant", "name": writing.names[1]}
    return {"message_id": native.id, "timestamp": native.time, "actor": actor, "content": []}


_CONTENT: Final = Parts("content", "an array of content parts", new={"format": "plain"})

UACS: Final = Format(
    "uacs",
    Document("a UACS Conversation object", "messages", check=_check, header=_header),
    who=RoleField(ACTOR_ROLES, within=("actor", "an actor object {id, role}")),
    text=_CONTENT,
    payload=InPart(
        _CONTENT, "structured_data", "data", schema_id=SCHEMA_ID, family="application/vnd.charfmt.", marks="metadata"
    ),
    native=NativeFields("message_id", "timestamp", ("actor", "name")),
    message=_message,
    empty=_empty,
)
"""UACS, declared."""
