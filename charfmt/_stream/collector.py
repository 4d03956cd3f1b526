"""``Collector``: the ``Reply`` a sequence of stream events describes (``collect``, ``StreamParser.reply``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from charfmt import events
from charfmt.diagnostics import Diagnostic
from charfmt.events import Event
from charfmt.models import Chat, Reply, Segment, construct_trusted


class Collector:
    """Rebuilds a ``Reply`` from events: what ``collect`` and ``StreamParser.reply`` use."""

    def __init__(self) -> None:
        self.chats: dict[int, dict[str, Any]] = {}
        self.diagnostics: list[Diagnostic] = []
        self.dialect: str | None = None
        self.reasoning: list[str] = []

    def add(self, event: Event) -> None:
        """Apply one event."""
        if isinstance(event, events.ChatStart):
            self.chats[event.chat] = {
                "type": event.type,
                "order": event.order,
                "segments": [],
                "speaker": event.speaker,
            }
        elif isinstance(event, events.SegmentStart):
            self.chats[event.chat]["segments"].append([event.tag, [], None])
        elif isinstance(event, events.TextDelta):
            self.chats[event.chat]["segments"][event.segment][1].append(event.text)
        elif isinstance(event, events.WholeValue):  # (any role's whole value: no list of its event classes here)
            segment = self.chats[event.chat]["segments"][event.segment]
            segment[1].append(event.text)
            segment[2] = event.intensity
        elif isinstance(event, events.DiagnosticEvent):
            self.diagnostics.append(event.diagnostic)
        elif isinstance(event, events.Dialect):
            self.dialect = event.name
        elif isinstance(event, events.Reasoning):
            self.reasoning.append(event.text)
        elif isinstance(event, events.Reset):
            self.chats.clear()
            self.diagnostics.clear()
            self.dialect = None
            self.reasoning.clear()

    def reply(self) -> Reply:
        """The reply so far, chats sorted by order (stable: equal orders keep arrival order)."""
        chats = []
        for _index, c in sorted(self.chats.items()):
            segments = [
                construct_trusted(Segment, {"tag": tag, "text": "".join(parts), "intensity": intensity})
                for tag, parts, intensity in c["segments"]
            ]
            fields = {"type": c["type"], "order": c["order"], "segments": segments, "speaker": c["speaker"]}
            chats.append(construct_trusted(Chat, fields))
        chats.sort(key=lambda c: c.order)
        diagnostics = sorted(self.diagnostics, key=lambda d: (d.offset, d.end))
        return construct_trusted(
            Reply,
            {
                "chats": chats,
                "diagnostics": diagnostics,
                "reasoning": "".join(self.reasoning) or None,
                "dialect": self.dialect,
            },
        )


def collect(events: Iterable[Event]) -> Reply:
    """The ``Reply`` a sequence of events describes (chats sorted by order)."""
    collector = Collector()
    for event in events:
        collector.add(event)
    return collector.reply()
