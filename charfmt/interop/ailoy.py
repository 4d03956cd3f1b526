"""Ailoy messages: a JSON array of ``Message {role, contents: [Part], id?, thinking?, tool_calls?, signature?}``.

Ailoy's serde types drop unknown keys without a word, so charfmt's payload is a ``value`` part
(``{"type": "value", "value": {"charfmt": ...}}``), the one place arbitrary data survives.
``thinking`` is model reasoning: ``Reply.reasoning`` is written there (on the first assistant
message) and read back from there, never as the character's thought.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt._sdk_chunks import rule_for
from charfmt.interop._common import (
    KEY,
    UNKNOWN_TIME,
    Format,
    Line,
    Native,
    Reader,
    Source,
    check_history,
    conversation_id,
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

NAME: Final = "ailoy"
ROLES: Final = ("system", "user", "assistant", "tool")
PART_TYPES: Final = ("text", "function", "value", "image")


def _texts(message: dict[str, Any]) -> list[int]:
    contents = message.get("contents")
    if not isinstance(contents, list):
        return []
    return [n for n, p in enumerate(contents) if isinstance(p, dict) and p.get("type") == "text"]


def _ours(part: Any) -> bool:
    return (
        isinstance(part, dict)
        and part.get("type") == "value"
        and isinstance(part.get("value"), dict)
        and KEY in part["value"]
    )


class _Ailoy(Format):
    name = NAME

    def new_message(self, line: Line, native: Native) -> dict[str, Any]:
        return {"role": line.role, "contents": [{"type": "text", "text": line.text}], "id": native.id}

    def empty_message(self, native: Native) -> dict[str, Any]:
        return {"role": "assistant", "contents": [], "id": native.id}

    def text_of(self, message: dict[str, Any]) -> str | None:
        found = [message["contents"][n].get("text") for n in _texts(message)]
        texts = [t for t in found if isinstance(t, str)]
        return "\n".join(texts) if texts else None

    def text_path(self, message: dict[str, Any]) -> tuple[Any, ...]:
        texts = _texts(message)
        return ("contents", texts[0], "text") if len(texts) == 1 else ("contents",)

    def set_text(self, message: dict[str, Any], text: str | None) -> dict[str, Any] | None:
        if text is not None and text == self.text_of(message):
            return message
        contents = message.get("contents")
        if not isinstance(contents, list):
            return message
        texts = _texts(message)
        if text is None:
            rest = [p for n, p in enumerate(contents) if n not in texts]
            if not rest and not message.get("tool_calls") and not message.get("thinking"):
                return None
            return {**message, "contents": rest}
        parts = list(contents)
        if len(texts) == 1:
            parts[texts[0]] = {**parts[texts[0]], "text": text}
        elif not texts:
            parts.append({"type": "text", "text": text})
        else:
            return message
        return {**message, "contents": parts}

    def native_of(self, message: dict[str, Any]) -> Native:
        mid = message.get("id")
        return Native(mid if isinstance(mid, str) else None)

    def attach(self, message: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
        contents = message.get("contents")
        parts = contents if isinstance(contents, list) else []
        return {**message, "contents": [*parts, {"type": "value", "value": {KEY: entry}}]}

    def strip(self, message: dict[str, Any]) -> dict[str, Any]:
        contents = message.get("contents")
        if not isinstance(contents, list):
            return message
        kept = [p for p in contents if not _ours(p)]
        return message if len(kept) == len(contents) else {**message, "contents": kept}

    def add_reasoning(self, messages: list[dict[str, Any]], shown: list[Any], text: str, native: Native) -> None:
        for n, message in enumerate(messages):
            if message.get("role") == "assistant":
                messages[n] = {**message, "thinking": text}
                return
        messages.append({"role": "assistant", "contents": [], "id": native.id, "thinking": text})
        shown.append(None)


SPEC: Final = _Ailoy()


def export(
    history: Sequence[Exchange],
    character: Character | None = None,
    *,
    tags: TagTable = DEFAULT_TAGS,
    created_at: str | None = None,
) -> list[dict[str, Any]]:
    """Ailoy messages of ``history``: text parts, reasoning as ``thinking``, the exchange in a value part."""
    history = check_history(history)
    base = conversation_id(history).hex[:8]
    return export_messages(SPEC, history, tags, names=names(character), base=base, stamp=created_at or UNKNOWN_TIME)


def read(data: Any, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges of an array of Ailoy messages; raises ``InteropError`` with a positioned diagnostic."""
    doc, source = read_json(data)
    return _read(doc, source, tags)


def _read(doc: Any, source: Source, tags: TagTable) -> list[Exchange]:
    need(source, doc, (), list, "an array of Ailoy messages")
    reader = Reader(SPEC, source, tags)
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
                    reader.ours(entry, (*at, "value"), message, path, role)
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
    through, and so does the reply text of the SDKs' stream objects ``charfmt.iter_events``
    reads (OpenAI chunks, Anthropic ``text_delta`` events...; see ``charfmt._sdk_chunks``).
    ``thinking`` deltas are model reasoning and are not yielded; function, value and null parts,
    and a message whose content is ``None`` (a refusal), carry no reply text.
    """
    for item in items:
        if isinstance(item, str):
            if item:
                yield item
            continue
        rule = rule_for(item)
        if rule is not None:  # an SDK's stream object (Anthropic's text_delta events...): its reply text
            text = rule.read(item).text
            if isinstance(text, str) and text:
                yield text
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
