"""Ailoy messages: a JSON array of ``Message {role, contents: [Part], id?, thinking?, tool_calls?, signature?}``.

Ailoy's serde types drop unknown keys without a word, so charfmt's payload is a ``value`` part
(``{"type": "value", "value": {"charfmt": ...}}``), the one place arbitrary data survives.
``thinking`` is model reasoning (``Reply.reasoning`` on import), never the character's thought.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.interop._common import (
    CONTINUED,
    Reader,
    Source,
    as_list,
    foreign_of,
    lines,
    marker,
    member,
    need,
    payload,
    read_json,
    rewritten,
)
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

NAME: Final = "ailoy"
ROLES: Final = ("system", "user", "assistant", "tool")
PART_TYPES: Final = ("text", "function", "value", "image")


def _set_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    contents = message.get("contents")
    if not isinstance(contents, list):
        return message
    parts = [dict(p) if isinstance(p, dict) else p for p in contents]
    texts = [n for n, p in enumerate(parts) if isinstance(p, dict) and p.get("type") == "text"]
    if len(texts) == 1:
        parts[texts[0]]["text"] = text
    return {**message, "contents": parts}


def export(
    history: Sequence[Exchange], character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS
) -> list[dict[str, Any]]:
    """Ailoy messages of ``history``: text parts, and the exchange in a value part."""
    messages: list[dict[str, Any]] = []
    for n, exchange in enumerate(history):
        foreign = foreign_of(exchange, NAME)
        if foreign is not None:
            out = rewritten(exchange, foreign, _set_text, tags)
        else:
            out = [
                {"role": line.role, "contents": [{"type": "text", "text": line.text}], "id": f"x{n}-{k}"}
                for k, line in enumerate(lines(exchange, tags))
            ] or [{"role": "assistant", "contents": [], "id": f"x{n}-0"}]
        for k, message in enumerate(out):
            contents = as_list(message.get("contents"))
            value = payload(exchange) if k == 0 else CONTINUED
            out[k] = {**message, "contents": [*contents, {"type": "value", "value": value}]}
        messages.extend(out)
    return messages


def read(text: str, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of an array of Ailoy messages; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(text)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), list, "an array of Ailoy messages")
    reader = Reader(NAME, source, tags)
    for i, message in enumerate(doc):
        path: tuple[Any, ...] = (i,)
        need(source, message, path, dict, "a message object")
        role = member(source, message, path, "role", kind=str, what="system, user, assistant or tool")
        if role not in ROLES:
            raise source.fail(
                "CF901", f"[{i}].role: expected one of {', '.join(ROLES)}, found {role!r}", (*path, "role")
            )
        contents = member(source, message, path, "contents", kind=list, what="an array of parts")
        entry = None
        for j, part in enumerate(contents):
            at = (*path, "contents", j)
            need(source, part, at, dict, "a part object")
            kind = member(source, part, at, "type", kind=str, what="text, function, value or image")
            if kind not in PART_TYPES:
                raise source.fail(
                    "CF901",
                    f"[{i}].contents[{j}].type: expected one of {', '.join(PART_TYPES)}, found {kind!r}",
                    (*at, "type"),
                )
            if kind == "value" and entry is None:
                entry = marker(source, part.get("value"), (*at, "value"))
                if entry is not None:
                    reader.ours(entry, (*at, "value"))
        if entry is not None:
            continue
        texts: list[str] = []
        dropped: list[tuple[str, Any]] = []
        text_path: tuple[Any, ...] | None = None
        for j, part in enumerate(contents):
            at = (*path, "contents", j)
            if part["type"] == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
                text_path = (*at, "text") if text_path is None else (*path, "contents")
            else:
                dropped.append((f"a {part['type']} part", at))
        if message.get("tool_calls"):
            dropped.append(("tool calls", (*path, "tool_calls")))
        thinking = message.get("thinking")
        reader.foreign.message(
            message,
            path,
            role,
            "\n".join(texts) or None,
            text_path=text_path,
            dropped=dropped,
            reasoning=thinking if isinstance(thinking, str) else None,
            reasoning_path=(*path, "thinking"),
        )
    return reader.done({})


def text_deltas(items: Iterable[Any]) -> Iterator[str]:
    """The text of a stream of Ailoy ``MessageDelta``/``MessageOutput`` items, for ``StreamParser.feed``.

    Accepts dicts (``{"delta": {"contents": [{"type": "text", "text": "..."}]}}``, a bare
    ``MessageDelta`` or ``PartDelta``) and objects with the same attributes; plain strings pass
    through. ``thinking`` deltas are model reasoning and are not yielded; function, value and
    null parts carry no reply text.
    """
    for item in items:
        if isinstance(item, str):
            if item:
                yield item
            continue
        delta = _get(item, "delta")
        target = delta if delta is not None else item
        contents = _get(target, "contents")
        parts = contents if isinstance(contents, list) else [target]
        for part in parts:
            if _get(part, "type") in ("text", None):
                text = _get(part, "text")
                if isinstance(text, str) and text:
                    yield text


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
