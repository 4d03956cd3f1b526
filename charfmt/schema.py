"""``json_schema``: the reply envelope as JSON Schema, shaped for each provider's structured output."""

from __future__ import annotations

from typing import Any, Final

from charfmt.diagnostics import CharfmtError
from charfmt.tags import CHAT_TYPES, TAGS

PROVIDERS: Final = ("openai", "anthropic", "gemini")

_BODY_DESCRIPTION: Final = (
    "For type C: one element per line, separated by \\n, each one of "
    + ", ".join(f"{t.open}…{t.close} ({t.description})" for t in TAGS)
    + "; no attributes; escape & < > in text as &amp; &lt; &gt;. "
    "For types I and E: plain text with the same escapes."
)
_ORDER_DESCRIPTION: Final = "Display order, an integer starting at 1."
_TYPE_DESCRIPTION: Final = "; ".join(f"{k}: {v}" for k, v in CHAT_TYPES.items())


def _base(*, minimum: bool, closed: bool) -> dict[str, Any]:
    order: dict[str, Any] = {"type": "integer", "description": _ORDER_DESCRIPTION}
    if minimum:
        order["minimum"] = 1
    chat: dict[str, Any] = {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(CHAT_TYPES), "description": _TYPE_DESCRIPTION},
            "order": order,
            "body": {"type": "string", "description": _BODY_DESCRIPTION},
        },
        "required": ["type", "order", "body"],
    }
    root: dict[str, Any] = {
        "type": "object",
        "properties": {
            "chats": {"type": "array", "items": chat, "description": "The character's reply, chat by chat."}
        },
        "required": ["chats"],
    }
    if closed:
        chat["additionalProperties"] = False
        root["additionalProperties"] = False
    return root


def json_schema(provider: str | None = None) -> dict[str, Any]:
    """The ``{"chats": [...]}`` envelope as JSON Schema.

    ``None``: standard JSON Schema (2020-12). ``"openai"``: strict structured outputs
    (every property required, ``additionalProperties: false``). ``"anthropic"``:
    structured outputs (no numeric bounds; ``order >= 1`` is stated in the
    description). ``"gemini"``: the OpenAPI-subset ``responseSchema`` (no
    ``additionalProperties``; ``propertyOrdering`` so ``type`` and ``order`` come first).
    """
    if provider is None:
        schema = _base(minimum=True, closed=True)
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "charfmt reply", **schema}
    if provider == "openai":
        return _base(minimum=True, closed=True)
    if provider == "anthropic":
        return _base(minimum=False, closed=True)
    if provider == "gemini":
        schema = _base(minimum=True, closed=False)
        chat = schema["properties"]["chats"]["items"]
        chat["propertyOrdering"] = list(chat["properties"])
        return schema
    raise CharfmtError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)} or None")
