"""The group chat format (``version``, ``conversation_meta``, ``conversation_list``; EverMemOS
``group_chat_format.py``).

A consumer that ingests it keeps a message's ``extra`` but drops ``role`` and ``type`` and
rejects an empty ``content``: charfmt's payload goes in ``extra``, and every message it writes
has text (an exchange with nothing to show is one ``…`` system line).
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

NAME: Final = "groupchat"
VERSION: Final = "1.0.0"
MESSAGE_TYPES: Final = ("text", "image", "file", "audio", "video", "link", "system")
SILENT: Final = "…"
"""The text of the one message of an exchange with nothing to show (the format rejects empty content)."""
_SENDERS: Final = {"user": "user", "assistant": "character", "system": "game"}


class _GroupChat(Format):
    name = NAME
    extension = "extra"

    def __init__(self, full: dict[str, str | None] | None = None) -> None:
        self.full = full or {}

    def new_message(self, line: Line, native: Native) -> dict[str, Any]:
        sender = _SENDERS[line.role]
        message: dict[str, Any] = {"message_id": native.id, "create_time": native.time, "sender": sender}
        name = native.name or self.full.get(sender)
        if name:
            message["sender_name"] = name
        if line.role != "system":
            message["role"] = line.role
        message.update({"type": "text" if line.role != "system" else "system", "content": line.text, "refer_list": []})
        return message

    def empty_message(self, native: Native) -> dict[str, Any]:
        return {
            "message_id": native.id,
            "create_time": native.time,
            "sender": "game",
            "type": "system",
            "content": SILENT,
            "refer_list": [],
        }

    def text_of(self, message: dict[str, Any]) -> str | None:
        content = message.get("content")
        if message.get("type", "text") in ("text", "system") and isinstance(content, str):
            return content
        return None

    def text_path(self, message: dict[str, Any]) -> tuple[Any, ...]:
        return ("content",)

    def set_text(self, message: dict[str, Any], text: str | None) -> dict[str, Any] | None:
        if self.text_of(message) is None:
            return message
        if text is None or not text:
            return None if text is None else {**message, "content": text}
        return {**message, "content": text}

    def native_of(self, message: dict[str, Any]) -> Native:
        mid, time, name = message.get("message_id"), message.get("create_time"), message.get("sender_name")
        return Native(*(v if isinstance(v, str) else None for v in (mid, time, name)))


SPEC: Final = _GroupChat()


def export(
    history: Sequence[Exchange],
    character: Character | None = None,
    *,
    tags: TagTable = DEFAULT_TAGS,
    created_at: str | None = None,
) -> dict[str, Any]:
    """A group chat document of ``history``: text in ``content``, the exchange in ``extra``."""
    history = check_history(history)
    user_name, character_name = names(character)
    stamp = created_at or UNKNOWN_TIME
    cid = conversation_id(history)
    doc = document_of(history, NAME) or {
        "version": VERSION,
        "conversation_meta": {
            "scene": "assistant",
            "scene_desc": {"description": f"{user_name} talks with {character_name}"},
            "name": character_name,
            "description": f"A conversation with {character_name}",
            "created_at": stamp,
            "user_details": {
                "user": {"full_name": user_name, "role": "user"},
                "character": {"full_name": character_name, "role": "assistant"},
                "game": {"full_name": "Game"},
            },
        },
    }
    details = doc.get("conversation_meta", {}).get("user_details", {})
    full = {sender: details.get(sender, {}).get("full_name") for sender in _SENDERS.values()}
    messages = export_messages(
        _GroupChat(full), history, tags, names=(user_name, character_name), base=cid.hex[:8], stamp=stamp, header=doc
    )
    return {**doc, "conversation_list": messages}


def read(data: Any, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of a group chat document; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(data)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), dict, "a group chat object")
    version = member(source, doc, (), "version", kind=str, what="a version string")
    meta = member(source, doc, (), "conversation_meta", kind=dict, what="an object")
    details = member(source, meta, ("conversation_meta",), "user_details", kind=dict, what="an object of users by id")
    messages = member(source, doc, (), "conversation_list", kind=list, what="an array of messages")
    header = {k: v for k, v in doc.items() if k != "conversation_list"}
    reader = Reader(SPEC, source, tags, header)
    if version.split(".")[0] != VERSION.split(".")[0]:
        reader.notes.append(
            source.diagnostic(
                "CF912",
                f"version: {version!r}; this charfmt knows {VERSION}: read as that, it may differ",
                ("version",),
            )
        )
    for i, message in enumerate(messages):
        path = ("conversation_list", i)
        need(source, message, path, dict, "a message object")
        sender = member(source, message, path, "sender", kind=str, what="a user id")
        notes = []
        if sender not in details:
            if sender != "system":
                raise source.fail(
                    "CF901",
                    f"conversation_list[{i}].sender: {sender!r} is not in conversation_meta.user_details",
                    (*path, "sender"),
                )
            notes.append(
                source.diagnostic(
                    "CF913",
                    f"{where((*path, 'sender'))}: 'system' is not in conversation_meta.user_details;"
                    " read as a system message",
                    (*path, "sender"),
                )
            )
        entry = marker(source, message.get("extra"), (*path, "extra"))
        kind = message.get("type", "text")
        user = details.get(sender)
        if sender in details:
            need(source, user, ("conversation_meta", "user_details", sender), dict, "a user object")
        role = message.get("role") or (user or {}).get("role") or "user"
        if kind == "system" or sender not in details:
            role = "system"
        role = role if role in ("user", "assistant", "system") else "user"
        if entry is not None:
            reader.ours(entry, (*path, "extra"), message, path, role)
            continue
        if kind not in MESSAGE_TYPES:
            raise source.fail(
                "CF901",
                f"conversation_list[{i}].type: expected one of {', '.join(MESSAGE_TYPES)}, found {kind!r}",
                (*path, "type"),
            )
        content = member(source, message, path, "content", kind=str, what="a string")
        dropped: list[tuple[str, Any]] = []
        text: str | None = content
        if kind not in ("text", "system"):
            dropped.append((f"a {kind} message", (*path, "content")))
            text = None
        if message.get("refer_list"):
            dropped.append(("references", (*path, "refer_list")))
        reader.foreign.message(message, path, role, text, text_path=(*path, "content"), dropped=dropped, notes=notes)
    return reader.done(header)


def validate(doc: Any) -> list[str]:
    """What ``validate_group_chat_format`` and the ingesting consumer would reject; empty if valid.

    The validator's rules: ``version``, ``conversation_meta`` (with ``name`` and
    ``user_details``) and ``conversation_list``; every sender and every sender named in a
    reference is a user; an object reference has a ``message_id``. The consumer's: every
    message has ``message_id``, ``create_time``, ``sender``, ``type`` and a non-empty ``content``.
    """
    problems: list[str] = []
    if not isinstance(doc, dict):
        return ["not an object"]
    for key in ("version", "conversation_meta", "conversation_list"):
        if key not in doc:
            problems.append(f"missing {key}")
    meta = doc.get("conversation_meta")
    if not isinstance(meta, dict) or "name" not in meta or not isinstance(meta.get("user_details"), dict):
        return [*problems, "conversation_meta needs name and user_details"]
    users = set(meta["user_details"])
    for i, msg in enumerate(doc.get("conversation_list") or []):
        if not isinstance(msg, dict):
            problems.append(f"message {i} is not an object")
            continue
        if msg.get("sender") not in users:
            problems.append(f"message {i}: sender {msg.get('sender')!r} is not a user")
        for key in ("message_id", "create_time", "sender", "type", "content"):
            if key not in msg:
                problems.append(f"message {i}: missing {key}")
        if msg.get("type") not in MESSAGE_TYPES:
            problems.append(f"message {i}: type {msg.get('type')!r}")
        if not isinstance(msg.get("content"), str) or not msg["content"]:
            problems.append(f"message {i}: empty content")
        if msg.get("role") not in (None, "user", "assistant"):
            problems.append(f"message {i}: role {msg.get('role')!r}")
        for ref in msg.get("refer_list") or []:
            if isinstance(ref, dict):
                if "message_id" not in ref or ("sender" in ref and ref["sender"] not in users):
                    problems.append(f"message {i}: bad reference {ref!r}")
            elif not isinstance(ref, str):
                problems.append(f"message {i}: bad reference {ref!r}")
    return problems
