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
    CONTINUED,
    Reader,
    Source,
    as_dict,
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

NAME: Final = "groupchat"
VERSION: Final = "1.0.0"
MESSAGE_TYPES: Final = ("text", "image", "file", "audio", "video", "link", "system")
SILENT: Final = "…"
"""The text of the one message of an exchange with nothing to show (the format rejects empty content)."""
_SENDERS: Final = {"user": "user", "assistant": "character", "system": "game"}


def _set_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    if message.get("type", "text") in ("text", "system") and isinstance(message.get("content"), str):
        return {**message, "content": text}
    return message


def export(
    history: Sequence[Exchange], character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS
) -> dict[str, Any]:
    """A group chat document of ``history``: text in ``content``, the exchange in ``extra``."""
    user_name, character_name = names(character)
    stamp = now()
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
    messages: list[dict[str, Any]] = []
    for n, exchange in enumerate(history):
        foreign = foreign_of(exchange, NAME)
        if foreign is not None:
            out = rewritten(exchange, foreign, _set_text, tags)
        else:
            out = []
            for k, line in enumerate(lines(exchange, tags) or []):
                sender = _SENDERS[line.role]
                message: dict[str, Any] = {"message_id": f"x{n}-{k}", "create_time": stamp, "sender": sender}
                if full.get(sender):
                    message["sender_name"] = full[sender]
                if line.role != "system":
                    message["role"] = line.role
                message.update(
                    {"type": "text" if line.role != "system" else "system", "content": line.text, "refer_list": []}
                )
                out.append(message)
            if not out:
                out = [
                    {
                        "message_id": f"x{n}-0",
                        "create_time": stamp,
                        "sender": "game",
                        "type": "system",
                        "content": SILENT,
                        "refer_list": [],
                    }
                ]
        for k, message in enumerate(out):
            extra = as_dict(message.get("extra"))
            out[k] = {**message, "extra": {**extra, **(payload(exchange) if k == 0 else CONTINUED)}}
        messages.extend(out)
    return {**doc, "conversation_list": messages}


def read(text: str, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of a group chat document; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(text)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), dict, "a group chat object")
    member(source, doc, (), "version", kind=str, what="a version string")
    meta = member(source, doc, (), "conversation_meta", kind=dict, what="an object")
    details = member(source, meta, ("conversation_meta",), "user_details", kind=dict, what="an object of users by id")
    messages = member(source, doc, (), "conversation_list", kind=list, what="an array of messages")
    reader = Reader(NAME, source, tags)
    for i, message in enumerate(messages):
        path = ("conversation_list", i)
        need(source, message, path, dict, "a message object")
        sender = member(source, message, path, "sender", kind=str, what="a user id")
        if sender not in details:
            raise source.fail(
                "CF901",
                f"conversation_list[{i}].sender: {sender!r} is not in conversation_meta.user_details",
                (*path, "sender"),
            )
        entry = marker(source, message.get("extra"), (*path, "extra"))
        if entry is not None:
            reader.ours(entry, (*path, "extra"))
            continue
        kind = message.get("type", "text")
        if kind not in MESSAGE_TYPES:
            raise source.fail(
                "CF901",
                f"conversation_list[{i}].type: expected one of {', '.join(MESSAGE_TYPES)}, found {kind!r}",
                (*path, "type"),
            )
        content = member(source, message, path, "content", kind=str, what="a string")
        role = message.get("role") or (details.get(sender) or {}).get("role") or "user"
        if kind == "system":
            role = "system"
        dropped: list[tuple[str, Any]] = []
        text: str | None = content
        if kind not in ("text", "system"):
            dropped.append((f"a {kind} message", (*path, "content")))
            text = None
        if message.get("refer_list"):
            dropped.append(("references", (*path, "refer_list")))
        reader.foreign.message(
            message,
            path,
            role if role in ("user", "assistant", "system") else "user",
            text,
            text_path=(*path, "content"),
            dropped=dropped,
        )
    header = {k: v for k, v in doc.items() if k != "conversation_list"}
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
