"""Events: a reply as a flat sequence, the shape streaming consumers (games, TTS) want.

``Reply.events()`` yields them for a parsed reply; the streaming parser emits the
same types as text arrives. Every event has a ``kind`` and a ``chat`` index.

This module sits below the models: it reads a reply through the small protocols below
(what a ``Reply``, ``Chat`` and ``Segment`` have), so ``models`` imports it and not the
other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal, Protocol

from charfmt.diagnostics import Diagnostic
from charfmt.tags import DEFAULT_TAGS, TagTable


class SegmentLike(Protocol):
    """What events read of a segment (``charfmt.Segment``)."""

    @property
    def tag(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def intensity(self) -> float | None: ...


class ChatLike(Protocol):
    """What events read of a chat (``charfmt.Chat``)."""

    @property
    def type(self) -> str: ...
    @property
    def order(self) -> int: ...
    @property
    def segments(self) -> Sequence[SegmentLike]: ...
    @property
    def speaker(self) -> str | None: ...


class ReplyLike(Protocol):
    """What events read of a reply (``charfmt.Reply``)."""

    @property
    def chats(self) -> Sequence[ChatLike]: ...
    @property
    def diagnostics(self) -> Sequence[Diagnostic]: ...
    @property
    def reasoning(self) -> str | None: ...
    @property
    def dialect(self) -> str | None: ...


@dataclass(slots=True)
class _EventBase:
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, ``kind`` first; optional fields that are not set are left out."""
        data = asdict(self)
        return {"kind": data.pop("kind"), **{k: v for k, v in data.items() if v is not None or k == "chat"}}


@dataclass(slots=True)
class _ChatEvent(_EventBase):
    """An event of one chat (its fields come first, in this order)."""

    chat: int


@dataclass(slots=True)
class _SegmentEvent(_ChatEvent):
    """An event of one element of a chat body."""

    segment: int


@dataclass(slots=True)
class _TagEvent(_SegmentEvent):
    """An event of one element, naming its tag."""

    tag: str


class WholeValue:
    """An element's value announced whole, once complete: ``Emotion``, ``Action``, ``Cue``.

    A role whose row names an ``event`` (``charfmt.tags.ROLE_TABLE``) is announced by a subclass
    (built by ``WHOLE_EVENTS``). Consumers (``StreamParser.reply``'s collector, the stage, serve's
    reply formats) dispatch on this class, never on a list of its subclasses, so a new role's
    event is collected, staged and shown without another edit.
    """

    __slots__ = ()
    chat: int
    segment: int
    text: str
    """The whole value."""

    @property
    def intensity(self) -> float | None:
        """How strong it is, where the value has a strength (an ``Emotion``'s); ``None`` otherwise."""
        return None

    @property
    def named_tag(self) -> str | None:
        """The tag the event names where its kind does not say it (a ``Cue``'s: a table may have several);
        ``None`` for an emotion or an action (the table's one tag of its role)."""
        tag = getattr(self, "tag", None)
        return tag if isinstance(tag, str) else None

    def tag_in(self, tags: TagTable) -> str:
        """The tag of the element it announces: the one it names (``named_tag``, a ``Cue``'s), else the first tag
        of ``tags`` whose role's row names the event's ``kind`` (``act`` for an ``Action``, a new role's tag for
        a new role's event that, like ``Action``, carries no ``tag``); a kind no row of ``tags`` names: the kind."""
        named = self.named_tag
        if named is not None:
            return named
        kind = getattr(self, "kind", "")
        return next((spec.name for spec in tags if spec.row.event == kind), kind)


@dataclass(slots=True)
class ChatStart(_ChatEvent):
    """A chat begins (``speaker``: who speaks it, in a scene of several characters).

    Its elements follow, each from a ``SegmentStart`` to its ``SegmentEnd``; ``ChatEnd`` ends it.
    """

    type: str
    order: int
    speaker: str | None = None
    kind: Literal["chat_start"] = field(default="chat_start", init=False)


@dataclass(slots=True)
class SegmentStart(_TagEvent):
    """An element of the chat body begins (``tag`` is ``emo``, ``msg``, ``text``...).

    Its content follows (an ``Emotion``, an ``Action``, a ``Cue``, or ``TextDelta`` events),
    then its ``SegmentEnd``.
    """

    kind: Literal["segment_start"] = field(default="segment_start", init=False)


@dataclass(slots=True)
class Emotion(_SegmentEvent, WholeValue):
    """The complete emotion key of an ``emo`` element: switch the sprite now.

    ``intensity``: how strong it is, where the reply gave one (``[joy:0.6]``).
    """

    text: str
    intensity: float | None = None
    kind: Literal["emotion"] = field(default="emotion", init=False)


@dataclass(slots=True)
class Action(_SegmentEvent, WholeValue):
    """The complete text of an ``act`` element.

    What the character does (the table's ``action`` role): act it out; it is not spoken.
    """

    text: str
    kind: Literal["action"] = field(default="action", init=False)


@dataclass(slots=True)
class Cue(_TagEvent, WholeValue):
    """The complete value of a ``cue`` element (a sound effect, a motion...): act on it now.

    ``tag`` says which cue it is (a table may have several), ``text`` its value.
    """

    text: str
    kind: Literal["cue"] = field(default="cue", init=False)


@dataclass(slots=True)
class Reasoning(_EventBase):
    """More of the model's own reasoning (``<think>``...) written before the reply (append it).

    Not the character's inner voice (that is a ``hidden`` tag such as ``thought``): keep it
    out of the game. ``Reply.reasoning`` holds the whole of it.
    """

    text: str
    kind: Literal["reasoning"] = field(default="reasoning", init=False)


@dataclass(slots=True)
class TextDelta(_TagEvent):
    """More decoded text of a ``msg``, ``thought`` or ``text`` segment (append it).

    A ``speech`` tag's text is what the character says (what text-to-speech reads); a
    ``hidden`` tag's is not meant for the player.
    """

    text: str
    kind: Literal["text"] = field(default="text", init=False)


@dataclass(slots=True)
class SegmentEnd(_TagEvent):
    """The element is complete.

    What it held came before: its ``Emotion``, ``Action`` or ``Cue``, or its ``TextDelta`` events.
    """

    kind: Literal["segment_end"] = field(default="segment_end", init=False)


@dataclass(slots=True)
class ChatEnd(_ChatEvent):
    """The chat is complete."""

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
    ChatStart
    | SegmentStart
    | Emotion
    | Action
    | Cue
    | TextDelta
    | SegmentEnd
    | ChatEnd
    | DiagnosticEvent
    | Reset
    | Dialect
    | Reasoning
)
"""Every event type; switch on ``event.kind``."""


Announce = Callable[[int, int, str, str, float | None], Event]
"""Builds the event announcing a whole value: ``(chat, segment, tag, value, intensity)``."""

WHOLE_EVENTS: Final[dict[str, Announce]] = {
    "emotion": lambda chat, n, tag, text, intensity: Emotion(chat, n, text, intensity),
    "action": lambda chat, n, tag, text, intensity: Action(chat, n, text),
    "cue": lambda chat, n, tag, text, intensity: Cue(chat, n, tag, text),
}
"""Each event ``kind`` a role's row names (``RoleSpec.event``), with how to build it."""


def segment_events(chat: int, n: int, seg: SegmentLike, tags: TagTable = DEFAULT_TAGS) -> list[Event]:
    """The events of one segment; what they are follows the row of the tag's role in ``tags``.

    A tag the table does not know (kept by lenient parsing) streams as text.
    """
    spec = tags.get(seg.tag)
    event = spec.row.event if spec is not None else None
    out: list[Event] = [SegmentStart(chat, n, seg.tag)]
    if event is not None:
        out.append(WHOLE_EVENTS[event](chat, n, seg.tag, seg.text, seg.intensity))
    elif seg.text:
        out.append(TextDelta(chat, n, seg.tag, seg.text))
    out.append(SegmentEnd(chat, n, seg.tag))
    return out


def reply_events(reply: ReplyLike, tags: TagTable = DEFAULT_TAGS) -> Iterator[Event]:
    """Reasoning, diagnostics, then each chat in display order, element by element, then the dialect."""
    if reply.reasoning:
        yield Reasoning(reply.reasoning)
    for d in reply.diagnostics:
        yield DiagnosticEvent(d.chat, d)
    for c, chat in enumerate(reply.chats):
        yield ChatStart(c, chat.type, chat.order, chat.speaker)
        for s, seg in enumerate(chat.segments):
            yield from segment_events(c, s, seg, tags)
        yield ChatEnd(c)
    if reply.dialect is not None:
        yield Dialect(reply.dialect)
