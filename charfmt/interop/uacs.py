"""UACS, the Universal AI Conversation Schema (validated against ``tests/interop/uacs.schema.json``).

A message's ``content`` is an ordered array of typed parts. charfmt writes the visible text
as a ``text`` part (``format: plain``) and the exact exchange as a ``structured_data`` part
(``schema_id`` names charfmt's payload), with a marker in ``metadata``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.interop._common import (
    KEY,
    UNKNOWN_TIME,
    VERSION,
    Format,
    Line,
    Native,
    Reader,
    Source,
    as_dict,
    check_history,
    conversation_id,
    document_of,
    export_messages,
    marker,
    member,
    names,
    need,
    read_json,
)
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

NAME: Final = "uacs"
SCHEMA_ID: Final = "application/vnd.charfmt.exchange+json"
"""The ``schema_id`` of the ``structured_data`` part that holds an exchange (its ``v`` is inside)."""
ROLES: Final = {"human": "user", "assistant": "assistant", "system": "system", "tool": "tool"}
"""UACS actor roles and the role charfmt reads each as."""
_ACTORS: Final = {"user": ("user", "human"), "assistant": ("character", "assistant"), "system": ("game", "system")}


def _texts(message: dict[str, Any]) -> list[int]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [n for n, p in enumerate(content) if isinstance(p, dict) and p.get("type") == "text"]


def _ours(part: Any) -> bool:
    return (
        isinstance(part, dict)
        and part.get("type") == "structured_data"
        and str(part.get("schema_id", "")).startswith("application/vnd.charfmt.")
    )


class _Uacs(Format):
    name = NAME
    extension = "metadata"

    def __init__(self, names: tuple[str, str] = ("User", "Character")) -> None:
        self.names = names

    def new_message(self, line: Line, native: Native) -> dict[str, Any]:
        actor_id, role = _ACTORS[line.role]
        actor = {"id": actor_id, "role": role, "name": native.name or "Game"}
        return {
            "message_id": native.id,
            "timestamp": native.time,
            "actor": actor,
            "content": [{"type": "text", "text": line.text, "format": "plain"}],
        }

    def empty_message(self, native: Native) -> dict[str, Any]:
        return {
            "message_id": native.id,
            "timestamp": native.time,
            "actor": {"id": "character", "role": "assistant", "name": self.names[1]},
            "content": [],
        }

    def text_of(self, message: dict[str, Any]) -> str | None:
        found = [message["content"][n].get("text") for n in _texts(message)]
        texts = [t for t in found if isinstance(t, str)]
        return "\n".join(texts) if texts else None

    def text_path(self, message: dict[str, Any]) -> tuple[Any, ...]:
        texts = _texts(message)
        return ("content", texts[0], "text") if len(texts) == 1 else ("content",)

    def set_text(self, message: dict[str, Any], text: str | None) -> dict[str, Any] | None:
        if text is not None and text == self.text_of(message):
            return message
        content = message.get("content")
        if not isinstance(content, list):
            return message
        texts = _texts(message)
        if text is None:
            rest = [p for n, p in enumerate(content) if n not in texts]
            return {**message, "content": rest} if rest else None
        parts = list(content)
        if len(texts) == 1:
            parts[texts[0]] = {**parts[texts[0]], "text": text}
        elif not texts:
            parts.append({"type": "text", "text": text, "format": "plain"})
        else:
            return message
        return {**message, "content": parts}

    def native_of(self, message: dict[str, Any]) -> Native:
        mid, time, name = message.get("message_id"), message.get("timestamp"), as_dict(message.get("actor")).get("name")
        return Native(*(v if isinstance(v, str) else None for v in (mid, time, name)))

    def attach(self, message: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
        meta = as_dict(message.get("metadata"))
        if "x" not in entry:
            return {**message, "metadata": {**meta, KEY: entry}}
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        part = {"type": "structured_data", "schema_id": SCHEMA_ID, "data": {KEY: entry}}
        return {
            **message,
            "content": [*parts, part],
            "metadata": {**meta, KEY: {"v": VERSION, "exchange_part": len(parts)}},
        }

    def strip(self, message: dict[str, Any]) -> dict[str, Any]:
        message = super().strip(message)
        content = message.get("content")
        if isinstance(content, list) and any(_ours(p) for p in content):
            message = {**message, "content": [p for p in content if not _ours(p)]}
        return message


SPEC: Final = _Uacs()


def export(
    history: Sequence[Exchange],
    character: Character | None = None,
    *,
    tags: TagTable = DEFAULT_TAGS,
    created_at: str | None = None,
) -> dict[str, Any]:
    """A UACS conversation of ``history``: text parts, and the exchange in a structured_data part.

    ``conversation_id`` is a uuid5 of the history (the same history, the same id).
    """
    history = check_history(history)
    who = names(character)
    stamp = created_at or UNKNOWN_TIME
    cid = conversation_id(history)
    doc = document_of(history, NAME) or {"conversation_id": str(cid), "created_at": stamp, "updated_at": stamp}
    fmt = _Uacs(who)
    messages = export_messages(fmt, history, tags, names=who, base=cid.hex[:8], stamp=stamp, header=doc)
    return {**doc, "messages": messages}


def read(data: Any, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of a UACS conversation; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(data)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), dict, "a UACS Conversation object")
    if set(doc) == {"Conversation"}:  # the seed's root schema wraps the conversation in a property
        raise source.fail(
            "CF901", 'the document is wrapped in {"Conversation": ...}; give the Conversation object itself', ()
        )
    messages = member(source, doc, (), "messages", kind=list, what="an array of messages")
    header = {k: v for k, v in doc.items() if k != "messages"}
    reader = Reader(SPEC, source, tags, header)
    for i, message in enumerate(messages):
        path = ("messages", i)
        need(source, message, path, dict, "a message object")
        actor = member(source, message, path, "actor", kind=dict, what="an actor object {id, role}")
        role = member(source, actor, (*path, "actor"), "role", kind=str, what="human, assistant, system or tool")
        if role not in ROLES:
            raise source.fail(
                "CF901",
                f"messages[{i}].actor.role: expected one of {', '.join(ROLES)}, found {role!r}",
                (*path, "actor", "role"),
            )
        content = member(source, message, path, "content", kind=list, what="an array of content parts")
        ours = _entry(source, message, content, path)
        if ours is not None:
            entry, at = ours
            reader.ours(entry, at, message, path, ROLES[role])
            continue
        texts: list[str] = []
        dropped: list[tuple[str, Any]] = []
        text_path: tuple[Any, ...] | None = None
        for j, part in enumerate(content):
            at = (*path, "content", j)
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
                text_path = (*at, "text") if text_path is None else (*path, "content")
            else:
                kind = part.get("type") if isinstance(part, dict) else None
                dropped.append((f"a {kind or 'malformed'} part", at))
        reader.foreign.message(
            message, path, ROLES[role], "\n".join(texts) or None, text_path=text_path, dropped=dropped
        )
    return reader.done(header)


def _entry(
    source: Source, message: dict[str, Any], content: list[Any], path: tuple[Any, ...]
) -> tuple[dict[str, Any], tuple[Any, ...]] | None:
    """charfmt's entry in a message: the structured_data part's payload, or the metadata marker."""
    for j, part in enumerate(content):
        if _ours(part):
            at = (*path, "content", j, "data")
            entry = marker(source, part.get("data"), at)
            if entry is not None:
                return entry, at
    meta = message.get("metadata")
    mark = meta.get(KEY) if isinstance(meta, dict) else None
    if isinstance(mark, dict) and ("continued" in mark or "of" in mark):
        meta_at = (*path, "metadata")
        entry = marker(source, meta, meta_at)
        return (entry, meta_at) if entry is not None else None
    return None
