"""Events: a reply as a flat sequence, the shape streaming consumers (games, TTS) want.

``Reply.events()`` yields them for a parsed reply; the streaming parser emits the
same types as text arrives. Every event has a ``kind`` and a ``chat`` index.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from charfmt.diagnostics import Diagnostic

if TYPE_CHECKING:
    from charfmt.models import Reply


@dataclass(slots=True)
class _EventBase:
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, ``kind`` first; optional fields that are not set are left out."""
        data = asdict(self)
        return {"kind": data.pop("kind"), **{k: v for k, v in data.items() if v is not None or k == "chat"}}


@dataclass(slots=True)
class ChatStart(_EventBase):
    """A chat begins."""

    chat: int
    type: str
    order: int
    kind: Literal["chat_start"] = field(default="chat_start", init=False)


@dataclass(slots=True)
class SegmentStart(_EventBase):
    """An element of the chat body begins (``tag`` is ``emo``, ``msg``, ``text``...)."""

    chat: int
    segment: int
    tag: str
    kind: Literal["segment_start"] = field(default="segment_start", init=False)


@dataclass(slots=True)
class Emotion(_EventBase):
    """The complete emotion key of an ``emo`` element: switch the sprite now."""

    chat: int
    segment: int
    text: str
    intensity: float | None = None
    kind: Literal["emotion"] = field(default="emotion", init=False)


@dataclass(slots=True)
class Action(_EventBase):
    """The complete text of an ``act`` element."""

    chat: int
    segment: int
    text: str
    kind: Literal["action"] = field(default="action", init=False)


@dataclass(slots=True)
class TextDelta(_EventBase):
    """More decoded text of a ``msg``, ``thought`` or ``text`` segment (append it)."""

    chat: int
    segment: int
    tag: str
    text: str
    kind: Literal["text"] = field(default="text", init=False)


@dataclass(slots=True)
class SegmentEnd(_EventBase):
    """The element is complete."""

    chat: int
    segment: int
    tag: str
    kind: Literal["segment_end"] = field(default="segment_end", init=False)


@dataclass(slots=True)
class ChatEnd(_EventBase):
    """The chat is complete."""

    chat: int
    kind: Literal["chat_end"] = field(default="chat_end", init=False)


@dataclass(slots=True)
class DiagnosticEvent(_EventBase):
    """A problem or repair; ``chat`` is the chat it concerns, or ``None``."""

    chat: int | None
    diagnostic: Diagnostic
    kind: Literal["diagnostic"] = field(default="diagnostic", init=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the diagnostic's fields inline."""
        return {"kind": self.kind, "chat": self.chat, "diagnostic": self.diagnostic.model_dump()}


@dataclass(slots=True)
class Reset(_EventBase):
    """Forget every event so far: the events that follow describe the whole reply.

    Streaming only, and only when a damaged reply, read again as a whole at the end,
    contradicts what was already shown (for example a later ``<|channel|>`` marker
    that turns everything before it into the model's analysis).
    """

    kind: Literal["reset"] = field(default="reset", init=False)


@dataclass(slots=True)
class Dialect(_EventBase):
    """The format the model actually wrote (``Reply.dialect``): the last event of a reply read leniently.

    Only a reply that was not valid has one (``canonical`` when it was repaired but written
    in charfmt's own format). A stream learns it at ``close()``, when it completes a damaged
    reply, so ``Reply.events()`` puts it last too.
    """

    name: str
    kind: Literal["dialect"] = field(default="dialect", init=False)


Event = (
    ChatStart | SegmentStart | Emotion | Action | TextDelta | SegmentEnd | ChatEnd | DiagnosticEvent | Reset | Dialect
)
"""Every event type; switch on ``event.kind``."""


def reply_events(reply: Reply) -> Iterator[Event]:
    """Diagnostics first, then each chat in display order, element by element, then the dialect."""
    for d in reply.diagnostics:
        yield DiagnosticEvent(d.chat, d)
    for c, chat in enumerate(reply.chats):
        yield ChatStart(c, chat.type, chat.order)
        for s, seg in enumerate(chat.segments):
            yield SegmentStart(c, s, seg.tag)
            if seg.tag == "emo":
                yield Emotion(c, s, seg.text, seg.intensity)
            elif seg.tag == "act":
                yield Action(c, s, seg.text)
            elif seg.text:
                yield TextDelta(c, s, seg.tag, seg.text)
            yield SegmentEnd(c, s, seg.tag)
        yield ChatEnd(c)
    if reply.dialect is not None:
        yield Dialect(reply.dialect)
