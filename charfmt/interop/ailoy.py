"""Ailoy messages: a JSON array of ``Message {role, contents: [Part], id?, thinking?, tool_calls?, signature?}``.

Ailoy's serde types drop unknown keys without a word, so charfmt's payload is a ``value`` part
(``{"type": "value", "value": {"charfmt": ...}}``), the one place arbitrary data survives.
``thinking`` is model reasoning: ``Reply.reasoning`` is written there (on the first assistant
message) and read back from there, never as the character's thought.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

from charfmt.interop._declaration import Document, Format, Line, Message, Native, NativeFields, Writing
from charfmt.interop._shapes import InPart, Parts, RoleField, ThinkingField, as_written
from charfmt.llm._sdk_chunks import rule_for

CHAT_ROLES: Final = ("system", "user", "assistant", "tool")
"""The roles of an Ailoy message (not charfmt's tag roles, ``tags.ROLES``)."""
PART_TYPES: Final = ("text", "function", "value", "image")


def _message(line: Line, native: Native, writing: Writing) -> Message:
    return {"role": line.role, "contents": [{"type": "text", "text": line.text}], "id": native.id}


def _empty(native: Native, writing: Writing) -> Message:
    return {"role": "assistant", "contents": [], "id": native.id}


_CONTENTS: Final = Parts("contents", "an array of parts", keeps=("tool_calls", "thinking"), types=PART_TYPES)

AILOY: Final = Format(
    "ailoy",
    Document("an array of Ailoy messages"),
    who=RoleField(as_written(*CHAT_ROLES)),
    text=_CONTENTS,
    payload=InPart(_CONTENTS, "value", "value"),
    native=NativeFields("id"),
    message=_message,
    empty=_empty,
    reasoning=ThinkingField("thinking"),
    dropped=(("tool_calls", "tool calls"),),
)
"""Ailoy, declared."""


def text_deltas(items: Iterable[Any]) -> Iterator[str]:
    """The text of a stream of Ailoy ``MessageDelta``/``MessageOutput`` items, for ``StreamParser.feed``.

    Accepts dicts (``{"delta": {"contents": [{"type": "text", "text": "..."}]}}``, a bare
    ``MessageDelta`` or ``PartDelta``) and objects with the same attributes; plain strings pass
    through, and so does the reply text of the SDKs' stream objects ``charfmt.iter_events``
    reads (OpenAI chunks, Anthropic ``text_delta`` events...; see ``charfmt.llm._sdk_chunks``).
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
