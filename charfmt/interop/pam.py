"""PAM, the portable-ai-memory conversation format (JSON Schema 2020-12, ``schema_version`` 1.0).

Every object in PAM is closed (``additionalProperties: false``) except ``raw_metadata``, so
charfmt's payload goes in the first message's ``raw_metadata``. ``is_thought`` means model
reasoning: a foreign thought message becomes ``Reply.reasoning``, never the character's
``thought``.
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

NAME: Final = "pam"
SCHEMA: Final = "portable-ai-memory-conversation"
SCHEMA_VERSION: Final = "1.0"
ROLES: Final = ("user", "assistant", "system", "tool")


def _set_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, dict) and content.get("type") == "text":
        return {**message, "content": {**content, "text": text}}
    return message


def export(
    history: Sequence[Exchange], character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS
) -> dict[str, Any]:
    """A PAM conversation of ``history``: text in ``content``, the exchange in ``raw_metadata``."""
    user_name, character_name = names(character)
    stamp = now()
    doc = document_of(history, NAME) or {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "id": f"charfmt-{stamp}",
        "provider": {"name": "charfmt"},
        "temporal": {"created_at": stamp},
        "participants": [{"role": "user", "name": user_name}, {"role": "assistant", "name": character_name}],
    }
    messages: list[dict[str, Any]] = []
    for n, exchange in enumerate(history):
        foreign = foreign_of(exchange, NAME)
        if foreign is not None:
            out = rewritten(exchange, foreign, _set_text, tags)
        else:
            out = [
                {
                    "id": f"x{n}-{k}",
                    "role": line.role,
                    "created_at": stamp,
                    "content": {"type": "text", "text": line.text},
                }
                for k, line in enumerate(lines(exchange, tags))
            ] or [{"id": f"x{n}-0", "role": "assistant", "created_at": stamp}]
        for k, message in enumerate(out):
            meta = as_dict(message.get("raw_metadata"))
            out[k] = {**message, "raw_metadata": {**meta, **(payload(exchange) if k == 0 else CONTINUED)}}
        messages.extend(out)
    return {**doc, "messages": messages}


def read(text: str, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of a PAM conversation; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(text)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), dict, "a PAM conversation object")
    schema = member(source, doc, (), "schema", kind=str, what=f'"{SCHEMA}"')
    if schema != SCHEMA:
        raise source.fail("CF901", f'schema: expected "{SCHEMA}", found {schema!r}', ("schema",))
    messages = member(source, doc, (), "messages", kind=list, what="an array of messages")
    reader = Reader(NAME, source, tags)
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
            reader.ours(entry, (*path, "raw_metadata"))
            continue
        text, text_path, dropped = _content(source, message, path)
        for key in ("attachments", "tool_calls", "citations"):
            if message.get(key):
                dropped.append((key.replace("_", " "), (*path, key)))
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
        )
    header = {k: v for k, v in doc.items() if k != "messages"}
    return reader.done(header)


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
