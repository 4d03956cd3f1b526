"""``dumps``: write a :class:`Reply` in the canonical form charfmt's strict parser reads back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from charfmt.models import Chat, Reply, Segment
from charfmt.tags import ELEMENT_SEPARATOR, TAG_BY_NAME, TAGGED_TYPES

_ESCAPES: Final = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def escape(text: str) -> str:
    """Escape text content: ``&``, ``<``, ``>`` become entities; nothing else changes."""
    return text.translate(_ESCAPES)


def body(chat: Chat) -> str:
    """The canonical body string of one chat."""
    return body_text(chat.type, chat.segments)


def body_text(kind: str, segments: Sequence[Segment]) -> str:
    """The canonical body string of chat type ``kind`` holding ``segments``."""
    if kind not in TAGGED_TYPES:
        return escape(segments[0].text)
    parts = []
    for seg in segments:
        tag = TAG_BY_NAME[seg.tag]
        content = seg.text if tag.content == "key" else escape(seg.text)
        parts.append(f"{tag.open}{content}{tag.close}")
    return ELEMENT_SEPARATOR.join(parts)


def dumps(reply: Reply, *, indent: int | None = None) -> str:
    """The canonical JSON text of ``reply``: chats sorted by order, keys type/order/body.

    Compact and on one line by default; ``indent`` pretty-prints (still canonical content).
    Non-ASCII characters are written as themselves, not as ``\\u`` escapes.
    """
    chats = sorted(reply.chats, key=lambda c: c.order)
    doc = {"chats": [{"type": c.type, "order": c.order, "body": body(c)} for c in chats]}
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(doc, ensure_ascii=False, indent=indent, separators=separators)
