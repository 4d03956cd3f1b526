"""UACS, the Universal AI Conversation Schema (validated against ``tests/interop/uacs.schema.json``).

A message's ``content`` is an ordered array of typed parts. charfmt writes the visible text
as a ``text`` part (``format: plain``) and the exact exchange as a ``structured_data`` part
(``schema_id`` names charfmt's payload and its version), with a marker in ``metadata``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.interop._common import (
    CONTINUED,
    KEY,
    VERSION,
    Reader,
    Source,
    as_dict,
    as_list,
    document_of,
    foreign_of,
    lines,
    marker,
    member,
    names,
    need,
    now,
    payload,
    read_json,
    rewritten,
)
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

NAME: Final = "uacs"
SCHEMA_ID: Final = f"application/vnd.charfmt.exchange+json;v={VERSION}"
"""The ``schema_id`` of the ``structured_data`` part that holds an exchange."""
ROLES: Final = {"human": "user", "assistant": "assistant", "system": "system", "tool": "tool"}
"""UACS actor roles and the role charfmt reads each as."""
_ACTOR_ROLE: Final = {"user": "human", "assistant": "assistant", "system": "system"}


def _set_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = [dict(p) if isinstance(p, dict) else p for p in content]
    texts = [n for n, p in enumerate(parts) if isinstance(p, dict) and p.get("type") == "text"]
    if len(texts) == 1:
        parts[texts[0]]["text"] = text
    return {**message, "content": parts}


def export(
    history: Sequence[Exchange], character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS
) -> dict[str, Any]:
    """A UACS conversation of ``history``: text parts, and the exchange in a structured_data part."""
    user_name, character_name = names(character)
    actors = {
        "user": {"id": "user", "role": "human", "name": user_name},
        "assistant": {"id": "character", "role": "assistant", "name": character_name},
        "system": {"id": "game", "role": "system", "name": "Game"},
    }
    stamp = now()
    doc = document_of(history, NAME) or {"conversation_id": str(uuid.uuid4()), "created_at": stamp, "updated_at": stamp}
    messages: list[dict[str, Any]] = []
    for n, exchange in enumerate(history):
        foreign = foreign_of(exchange, NAME)
        if foreign is not None:
            out = rewritten(exchange, foreign, _set_text, tags)
        else:
            out = [
                {
                    "message_id": f"x{n}-{k}",
                    "timestamp": stamp,
                    "actor": actors[line.role],
                    "content": [{"type": "text", "text": line.text, "format": "plain"}],
                }
                for k, line in enumerate(lines(exchange, tags))
            ] or [{"message_id": f"x{n}-0", "timestamp": stamp, "actor": actors["assistant"], "content": []}]
        for k, message in enumerate(out):
            meta = as_dict(message.get("metadata"))
            if k == 0:
                data = payload(exchange)
                part = {"type": "structured_data", "schema_id": SCHEMA_ID, "data": data}
                content = as_list(message.get("content"))
                out[k] = {
                    **message,
                    "content": [*content, part],
                    "metadata": {**meta, KEY: {"v": VERSION, "exchange_part": len(content)}},
                }
            else:
                out[k] = {**message, "metadata": {**meta, **CONTINUED}}
        messages.extend(out)
    return {**doc, "messages": messages}


def read(text: str, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of a UACS conversation; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(text)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), dict, "a UACS Conversation object")
    if set(doc) == {"Conversation"}:  # the seed's root schema wraps the conversation in a property
        raise source.fail(
            "CF901", 'the document is wrapped in {"Conversation": ...}; give the Conversation object itself', ()
        )
    messages = member(source, doc, (), "messages", kind=list, what="an array of messages")
    reader = Reader(NAME, source, tags)
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
        ours = _ours(source, message, content, path)
        if ours is not None:
            entry, at = ours
            reader.ours(entry, at)
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
    header = {k: v for k, v in doc.items() if k != "messages"}
    return reader.done(header)


def _ours(
    source: Source, message: dict[str, Any], content: list[Any], path: tuple[Any, ...]
) -> tuple[dict[str, Any], tuple[Any, ...]] | None:
    """charfmt's entry in a message: the structured_data part's payload, or the metadata marker."""
    for j, part in enumerate(content):
        if (
            isinstance(part, dict)
            and part.get("type") == "structured_data"
            and str(part.get("schema_id", "")).startswith("application/vnd.charfmt.")
        ):
            at = (*path, "content", j, "data")
            entry = marker(source, part.get("data"), at)
            if entry is not None:
                return entry, at
    meta = message.get("metadata")
    mark = meta.get(KEY) if isinstance(meta, dict) else None
    if isinstance(mark, dict) and "continued" in mark:
        meta_at = (*path, "metadata")
        entry = marker(source, meta, meta_at)
        return (entry, meta_at) if entry is not None else None
    return None
