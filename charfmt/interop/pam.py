"""PAM, the portable-ai-memory conversation format (JSON Schema 2020-12, ``schema_version`` 1.0).

Every object in PAM is closed (``additionalProperties: false``) except ``raw_metadata``, so
charfmt's payload goes in the first message's ``raw_metadata``. ``is_thought`` means model
reasoning: ``Reply.reasoning`` is written as an ``is_thought`` assistant message, and a foreign
thought message becomes ``Reply.reasoning``, never the character's ``thought``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.interop._common import (
    UNKNOWN_TIME,
    Format,
    Line,
    Native,
    Reader,
    Source,
    check_history,
    conversation_id,
    document_of,
    export_messages,
    marker,
    member,
    names,
    need,
    read_json,
    where,
)
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

NAME: Final = "pam"
SCHEMA: Final = "portable-ai-memory-conversation"
SCHEMA_VERSION: Final = "1.0"
ROLES: Final = ("user", "assistant", "system", "tool")


class _Pam(Format):
    name = NAME
    extension = "raw_metadata"

    def new_message(self, line: Line, native: Native) -> dict[str, Any]:
        return {
            "id": native.id,
            "role": line.role,
            "created_at": native.time,
            "content": {"type": "text", "text": line.text},
        }

    def empty_message(self, native: Native) -> dict[str, Any]:
        return {"id": native.id, "role": "assistant", "created_at": native.time}

    def text_of(self, message: dict[str, Any]) -> str | None:
        content = message.get("content")
        if not isinstance(content, dict):
            return None
        if content.get("type") == "text":
            text = content.get("text")
            return text if isinstance(text, str) else None
        parts = content.get("parts")
        texts = [
            p["text"]
            for p in (parts if isinstance(parts, list) else [])
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts) if texts else None

    def text_path(self, message: dict[str, Any]) -> tuple[Any, ...]:
        content = message.get("content")
        return ("content", "text") if isinstance(content, dict) and content.get("type") == "text" else ("content",)

    def set_text(self, message: dict[str, Any], text: str | None) -> dict[str, Any] | None:
        if text is not None and text == self.text_of(message):
            return message
        content = message.get("content")
        if text is None:
            if not (isinstance(content, dict) and content.get("type") == "text"):
                return message
            rest = {k: v for k, v in message.items() if k != "content"}
            return rest if rest.get("tool_calls") or rest.get("attachments") else None
        if content is None:
            return {**message, "content": {"type": "text", "text": text}}
        if isinstance(content, dict) and content.get("type") == "text":
            return {**message, "content": {**content, "text": text}}
        return message

    def native_of(self, message: dict[str, Any]) -> Native:
        mid, time = message.get("id"), message.get("created_at")
        return Native(mid if isinstance(mid, str) else None, time if isinstance(time, str) else None)

    def add_reasoning(self, messages: list[dict[str, Any]], shown: list[Any], text: str, native: Native) -> None:
        at = next((n for n, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
        thought = {
            "id": native.id,
            "role": "assistant",
            "created_at": native.time,
            "content": {"type": "text", "text": text},
            "is_thought": True,
        }
        messages.insert(at, thought)
        shown.insert(at, ("R", 0))


SPEC: Final = _Pam()


def export(
    history: Sequence[Exchange],
    character: Character | None = None,
    *,
    tags: TagTable = DEFAULT_TAGS,
    created_at: str | None = None,
) -> dict[str, Any]:
    """A PAM conversation of ``history``: text in ``content``, the exchange in ``raw_metadata``.

    The conversation id is a uuid5 of the history (the same history, the same id); ``created_at``
    is the time written where none is known (default ``1970-01-01T00:00:00Z``).
    """
    history = check_history(history)
    user_name, character_name = names(character)
    stamp = created_at or UNKNOWN_TIME
    cid = conversation_id(history)
    doc = document_of(history, NAME) or {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "id": str(cid),
        "provider": {"name": "charfmt"},
        "temporal": {"created_at": stamp},
        "participants": [{"role": "user", "name": user_name}, {"role": "assistant", "name": character_name}],
    }
    messages = export_messages(
        SPEC, history, tags, names=(user_name, character_name), base=cid.hex[:8], stamp=stamp, header=doc
    )
    return {**doc, "messages": messages}


def read(data: Any, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of a PAM conversation; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(data)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), dict, "a PAM conversation object")
    schema = member(source, doc, (), "schema", kind=str, what=f'"{SCHEMA}"')
    if schema != SCHEMA:
        raise source.fail("CF901", f'schema: expected "{SCHEMA}", found {schema!r}', ("schema",))
    messages = member(source, doc, (), "messages", kind=list, what="an array of messages")
    header = {k: v for k, v in doc.items() if k != "messages"}
    reader = Reader(SPEC, source, tags, header)
    branches = _branches(messages)
    for i, message in enumerate(messages):
        path = ("messages", i)
        need(source, message, path, dict, "a message object")
        role = member(source, message, path, "role", kind=str, what="user, assistant, system or tool")
        if role not in ROLES:
            raise source.fail(
                "CF901", f"messages[{i}].role: expected one of {', '.join(ROLES)}, found {role!r}", (*path, "role")
            )
        entry = marker(source, message.get("raw_metadata"), (*path, "raw_metadata"))
        if entry is not None:
            reader.ours(entry, (*path, "raw_metadata"), message, path, role)
            continue
        text, text_path, dropped = _content(source, message, path)
        for key in ("attachments", "tool_calls", "citations"):
            if message.get(key):
                dropped.append((key.replace("_", " "), (*path, key)))
        notes = []
        if i in branches:
            parent, n = branches[i]
            notes.append(
                source.diagnostic(
                    "CF911",
                    f"{where(path)}: alternative {n + 1} of the replies to messages[{parent}] (branching);"
                    " only the first branch was read as chats, this message is kept in Exchange.foreign",
                    path,
                )
            )
            text = None
        thought = message.get("is_thought") is True
        reader.foreign.message(
            message,
            path,
            role,
            None if thought else text,
            text_path=text_path,
            dropped=dropped,
            reasoning=text if thought else None,
            reasoning_path=text_path,
            notes=notes,
        )
    return reader.done(header)


def _branches(messages: list[Any]) -> dict[int, tuple[int, int]]:
    """Messages that are a second or later child of another (``children_ids``): index -> (parent, which)."""
    index = {m["id"]: n for n, m in enumerate(messages) if isinstance(m, dict) and isinstance(m.get("id"), str)}
    out: dict[int, tuple[int, int]] = {}
    for n, message in enumerate(messages):
        children = message.get("children_ids") if isinstance(message, dict) else None
        if not isinstance(children, list) or len(children) < 2:
            continue
        for which, child in enumerate(children[1:], 1):
            k = index.get(child) if isinstance(child, str) else None
            if k is not None:
                out.setdefault(k, (n, which))
    # a discarded branch's own descendants (later in the list) are discarded with it
    for n, message in enumerate(messages):
        if n in out or not isinstance(message, dict):
            continue
        parent = message.get("parent_id")
        k = index.get(parent) if isinstance(parent, str) else None
        if k is not None and k in out:
            out[n] = out[k]
    return out


def _content(
    source: Source, message: dict[str, Any], path: tuple[Any, ...]
) -> tuple[str | None, Any, list[tuple[str, Any]]]:
    content = message.get("content")
    if content is None:
        return None, None, []
    at = (*path, "content")
    need(source, content, at, dict, "a content object")
    if content.get("type") == "text":
        text = content.get("text")
        return (text if isinstance(text, str) else None), (*at, "text"), []
    parts = content.get("parts") if isinstance(content.get("parts"), list) else []
    texts, dropped = [], []
    for j, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            kind = part.get("type") if isinstance(part, dict) else None
            dropped.append((f"a {kind or 'malformed'} part", (*at, "parts", j)))
    return "\n".join(texts) or None, at, dropped
