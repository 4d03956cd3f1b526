"""PAM, the portable-ai-memory conversation format (JSON Schema 2020-12, ``schema_version`` 1.0).

Every object in PAM is closed (``additionalProperties: false``) except ``raw_metadata``, so
charfmt's payload goes in the first message's ``raw_metadata``. ``is_thought`` means model
reasoning: ``Reply.reasoning`` is written as an ``is_thought`` assistant message, and a foreign
thought message becomes ``Reply.reasoning``, never the character's ``thought``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Final

from charfmt._strict.envelope import Path
from charfmt.diagnostics import Diagnostic
from charfmt.interop._declaration import Document, Dropped, Format, Line, Message, Names, Native, NativeFields, Writing
from charfmt.interop._document import Source, a_kind, member, need, where
from charfmt.interop._shapes import Extension, RoleField, ThoughtMessage, as_written

SCHEMA: Final = "portable-ai-memory-conversation"
SCHEMA_VERSION: Final = "1.0"
MESSAGE_ROLES: Final = ("user", "assistant", "system", "tool")


def _check(source: Source, doc: Message) -> list[Diagnostic]:
    schema = member(source, doc, (), "schema", kind=str, what=f'"{SCHEMA}"')
    if schema != SCHEMA:
        raise source.fail("CF901", f'schema: expected "{SCHEMA}", found {schema!r}', ("schema",))
    return []


def _header(names: Names, cid: uuid.UUID, stamp: str) -> Message:
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "id": str(cid),
        "provider": {"name": "charfmt"},
        "temporal": {"created_at": stamp},
        "participants": [{"role": "user", "name": names[0]}, {"role": "assistant", "name": names[1]}],
    }


def _names(header: Message) -> Names | None:
    """The names of the header's ``user`` and ``assistant`` participants (the first of each role)."""
    found: dict[str, str] = {}
    participants = header.get("participants")
    for participant in participants if isinstance(participants, list) else []:
        role, name = (participant.get(k) for k in ("role", "name")) if isinstance(participant, dict) else (None, None)
        if isinstance(role, str) and isinstance(name, str) and name.strip():
            found.setdefault(role, name)
    return (found["user"], found["assistant"]) if {"user", "assistant"} <= found.keys() else None


def _message(line: Line, native: Native, writing: Writing) -> Message:
    content = {"type": "text", "text": line.text}
    return {"id": native.id, "role": line.role, "created_at": native.time, "content": content}


def _empty(native: Native, writing: Writing) -> Message:
    return {"id": native.id, "role": "assistant", "created_at": native.time}


@dataclass(frozen=True, slots=True)
class _Content:
    """PAM ``content``: ``{"type": "text", "text": ...}``, or ``{"parts": [...]}`` of which the text parts are read."""

    def of(self, message: Message) -> str | None:
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

    def path(self, message: Message) -> Path:
        content = message.get("content")
        return ("content", "text") if isinstance(content, dict) and content.get("type") == "text" else ("content",)

    def set(self, message: Message, text: str | None) -> Message | None:
        if text is not None and text == self.of(message):
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

    def read(self, source: Source, message: Message, path: Path) -> tuple[str | None, Path | None, Dropped]:
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
                dropped.append((f"{a_kind(kind or 'malformed')} part", (*at, "parts", j)))
        return "\n".join(texts) or None, at, dropped


def _later_branches(source: Source, messages: list[Any]) -> dict[int, Diagnostic]:
    """A note for each message that is a second or later reply to another (``children_ids``): CF911."""
    return {
        n: source.diagnostic(
            "CF911",
            f"{where(('messages', n))}: alternative {which + 1} of the replies to messages[{parent}] (branching);"
            " only the first branch was read as chats, this message is kept in Exchange.foreign",
            ("messages", n),
        )
        for n, (parent, which) in _branches(messages).items()
    }


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


PAM: Final = Format(
    "pam",
    Document("a PAM conversation object", "messages", check=_check, header=_header, names=_names),
    who=RoleField(as_written(*MESSAGE_ROLES)),
    text=_Content(),
    payload=Extension("raw_metadata"),
    native=NativeFields("id", "created_at"),
    message=_message,
    empty=_empty,
    reasoning=ThoughtMessage("is_thought"),
    dropped=(("attachments", "attachments"), ("tool_calls", "tool calls"), ("citations", "citations")),
    skipped=_later_branches,
)
"""PAM, declared."""
