"""The group chat format (``version``, ``conversation_meta``, ``conversation_list``; EverMemOS
``group_chat_format.py``).

A consumer that ingests it keeps a message's ``extra`` but drops ``role`` and ``type`` and
rejects an empty ``content``: charfmt's payload goes in ``extra``, and every message it writes
has text (an exchange with nothing to show is one ``…`` system line).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Final

from charfmt._strict.envelope import Path
from charfmt.diagnostics import Diagnostic
from charfmt.interop._declaration import Document, Dropped, Format, Line, Message, Names, Native, NativeFields, Writing
from charfmt.interop._document import Source, a_kind, as_dict, member, need, one_of, where
from charfmt.interop._shapes import Extension

VERSION: Final = "1.0.0"
MESSAGE_TYPES: Final = ("text", "image", "file", "audio", "video", "link", "system")
SILENT: Final = "…"
"""The text of the one message of an exchange with nothing to show (the format rejects empty content)."""
_SENDERS: Final = {"user": "user", "assistant": "character", "system": "game"}
_USERS: Final = ("conversation_meta", "user_details")


def _check(source: Source, doc: Message) -> list[Diagnostic]:
    """The version (CF912 if another major one), and ``conversation_meta.user_details``."""
    version = member(source, doc, (), "version", kind=str, what="a version string")
    meta = member(source, doc, (), "conversation_meta", kind=dict, what="an object")
    member(source, meta, ("conversation_meta",), "user_details", kind=dict, what="an object of users by id")
    if version.split(".")[0] == VERSION.split(".")[0]:
        return []
    message = f"version: {version!r}; this charfmt knows {VERSION}: read as that, it may differ"
    return [source.diagnostic("CF912", message, ("version",))]


def _header(names: Names, cid: uuid.UUID, stamp: str) -> Message:
    user_name, character_name = names
    return {
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


def _complete(header: Message, messages: list[Message]) -> Message:
    """``header`` with a user in ``user_details`` for each sender of ``messages`` it lacks (the format requires one).

    A foreign header (the document an exchange came from) does not name the senders charfmt
    writes for a chat added in Python (``user``, ``character``, ``game``), nor, for part of a
    history, the senders of the exchanges whose document was another's: they are added, as a
    new header names them (or by the message's ``sender_name``).
    """
    meta = as_dict(header.get("conversation_meta"))
    details = meta.get("user_details")
    if not isinstance(details, dict):  # (a header the reader rejects: the export says so)
        return header
    ours = _header(("", ""), uuid.UUID(int=0), "")["conversation_meta"]["user_details"]  # each one's role
    missing: dict[str, Any] = {}
    for message in messages:
        sender = message.get("sender")
        if isinstance(sender, str) and sender not in details and sender not in missing and sender != "system":
            name = message.get("sender_name")
            missing[sender] = {**ours.get(sender, {}), "full_name": name if isinstance(name, str) else sender}
    if not missing:
        return header
    return {**header, "conversation_meta": {**meta, "user_details": {**details, **missing}}}


def _senders(header: Message) -> dict[str, str | None]:
    details = as_dict(as_dict(header.get("conversation_meta")).get("user_details"))
    names = {sender: as_dict(details.get(sender)).get("full_name") for sender in _SENDERS.values()}
    return {sender: name if isinstance(name, str) else None for sender, name in names.items()}


def _names(header: Message) -> Names | None:
    """The full names of the header's ``user`` and ``character`` senders (charfmt's keys), else of the first sender
    of each role (``user_101`` with ``"role": "user"``, ``robot_001`` with ``"role": "assistant"``, as the format's
    own documents key them)."""
    senders = _senders(header)
    user, character = senders.get("user"), senders.get("character")
    if not (user and user.strip() and character and character.strip()):
        by_role: dict[str, str] = {}
        details = as_dict(as_dict(header.get("conversation_meta")).get("user_details"))
        for detail in details.values():
            role, name = as_dict(detail).get("role"), as_dict(detail).get("full_name")
            if isinstance(role, str) and isinstance(name, str) and name.strip():
                by_role.setdefault(role, name)
        user, character = by_role.get("user"), by_role.get("assistant")
    return (user, character) if user and character else None


def _message(line: Line, native: Native, writing: Writing) -> Message:
    sender = _SENDERS[line.role]
    message: Message = {"message_id": native.id, "create_time": native.time, "sender": sender}
    name = native.name or writing.senders.get(sender)
    if name:
        message["sender_name"] = name
    if line.role != "system":
        message["role"] = line.role
    message.update({"type": "text" if line.role != "system" else "system", "content": line.text, "refer_list": []})
    return message


def _empty(native: Native, writing: Writing) -> Message:
    return {
        "message_id": native.id,
        "create_time": native.time,
        "sender": "game",
        "type": "system",
        "content": SILENT,
        "refer_list": [],
    }


class _Senders:
    """A message's ``sender``, a user of ``user_details`` whose ``role`` (or the message's) charfmt reads."""

    def check(self, source: Source, message: Message, path: Path, header: Message) -> tuple[str, list[Diagnostic]]:
        """The sender; CF901 if it is not a user, but for ``system`` (a system message, CF913)."""
        sender: str = member(source, message, path, "sender", kind=str, what="a user id")
        if sender in header["conversation_meta"]["user_details"]:
            return sender, []
        at = (*path, "sender")
        if sender != "system":
            raise source.fail("CF901", f"{where(at)}: {sender!r} is not in conversation_meta.user_details", at)
        message_ = f"{where(at)}: 'system' is not in conversation_meta.user_details; read as a system message"
        return sender, [source.diagnostic("CF913", message_, at)]

    def role(self, source: Source, message: Message, path: Path, found: str, header: Message) -> str:
        """The message's role, else its sender's, else user; system for a system message or sender."""
        details = header["conversation_meta"]["user_details"]
        user = details.get(found)
        if found in details:
            need(source, user, (*_USERS, found), dict, "a user object")
        role = message.get("role") or (user or {}).get("role") or "user"
        if message.get("type", "text") == "system" or found not in details:
            role = "system"
        return str(role) if role in ("user", "assistant", "system") else "user"


@dataclass(frozen=True, slots=True)
class _Content:
    """A message's ``content`` string, its text when its ``type`` is ``text`` or ``system``."""

    def of(self, message: Message) -> str | None:
        content = message.get("content")
        if message.get("type", "text") in ("text", "system") and isinstance(content, str):
            return content
        return None

    def path(self, message: Message) -> Path:
        return ("content",)

    def set(self, message: Message, text: str | None) -> Message | None:
        if self.of(message) is None:
            return message
        return None if text is None else {**message, "content": text}

    def read(self, source: Source, message: Message, path: Path) -> tuple[str | None, Path | None, Dropped]:
        kind = one_of(source, message.get("type", "text"), MESSAGE_TYPES, (*path, "type"))
        content = member(source, message, path, "content", kind=str, what="a string")
        if kind in ("text", "system"):
            return content, (*path, "content"), []
        return None, (*path, "content"), [(f"{a_kind(kind)} message", (*path, "content"))]


GROUPCHAT: Final = Format(
    "groupchat",
    Document(
        "a group chat object",
        "conversation_list",
        check=_check,
        header=_header,
        senders=_senders,
        complete=_complete,
        names=_names,
    ),
    who=_Senders(),
    text=_Content(),
    payload=Extension("extra"),
    native=NativeFields("message_id", "create_time", ("sender_name",)),
    message=_message,
    empty=_empty,
    dropped=(("refer_list", "references"),),
)
"""The group chat format, declared."""


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
        problems.extend(_message_problems(i, msg, users))
    return problems


def _message_problems(i: int, msg: Message, users: set[str]) -> list[str]:
    problems: list[str] = []
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
