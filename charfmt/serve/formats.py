"""What the character says, in the shape each front end reads (``--reply-format``).

``canonical``
    the reply's JSON (``{"chats": [...]}``); streamed, the model's own text as it arrives.
``tags``
    inline ``[joy] Hello!`` (aituber-kit, Open-LLM-VTuber): the emotion in brackets before the
    speech, an action as ``*waves*`` (what charfmt's lenient reader reads back as an action).
``speech``
    only what is spoken: the speech tags' text, chats on their own lines.
``airi``
    AIRI's markers: ``<|ACT:{"emotion":{"name":"joy","intensity":1}}|>`` before the speech, an
    action as ``<|ACT:{"motion":"waves"}|>``.

Each formatter turns events into text pieces, so a streamed reply and the same reply answered
whole read the same (``reply_events`` of the whole reply give the events of its stream).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from charfmt.events import Action, ChatEnd, ChatStart, Cue, Emotion, Event, Reset, TextDelta

if TYPE_CHECKING:
    from charfmt.models import Reply
    from charfmt.tags import TagTable

FORMATS: Final = ("canonical", "tags", "speech", "airi")
"""Every ``--reply-format``, the default first."""


class Formatter:
    """Events in, the text a front end shows out (``tags``, ``speech`` or ``airi``)."""

    def __init__(self, name: str, tags: TagTable) -> None:
        if name not in FORMATS[1:]:
            raise ValueError(f"no event formatter for {name!r}")
        self.name = name
        self._speech = {spec.name for spec in tags.with_role("speech")}
        self._chats = 0
        self._after = ""  # what goes between the last piece and the next speech (a space after a marker)

    def feed(self, event: Event) -> str:
        """The text ``event`` adds (often ``""``)."""
        name = self.name
        if isinstance(event, ChatStart):
            self._chats += 1
            self._after = ""
            return "\n" if self._chats > 1 else ""
        if isinstance(event, Emotion | Action | Cue) and name != "speech":
            before, self._after = self._after if name == "tags" else "", " " if name == "tags" else ""
            return before + self._marker(event)
        if isinstance(event, TextDelta) and event.tag in self._speech and event.text:
            out, self._after = self._after + event.text, ""
            return out
        if isinstance(event, ChatEnd):
            self._after = ""
        if isinstance(event, Reset):  # what was shown cannot be taken back: start a new line
            self._chats = 0
            return "\n"
        return ""


    def _marker(self, event: Emotion | Action | Cue) -> str:
        if self.name == "tags":
            if isinstance(event, Emotion):
                return f"[{event.text}]"
            return f"*{event.text}*" if isinstance(event, Action) else f"[{event.tag}:{event.text}]"
        if isinstance(event, Emotion):
            intensity = 1 if event.intensity is None else event.intensity
            return _act({"emotion": {"name": event.text, "intensity": intensity}})
        return _act({"motion": event.text} if isinstance(event, Action) else {event.tag: event.text})


def _act(value: dict[str, object]) -> str:
    return f"<|ACT:{json.dumps(value, ensure_ascii=False, separators=(',', ':'))}|>"


def whole(name: str, reply: Reply, tags: TagTable) -> str:
    """``reply`` in format ``name``, as a non-streamed answer carries it."""
    from charfmt.events import reply_events  # noqa: PLC0415
    from charfmt.writer import canonical_form, dumps  # noqa: PLC0415

    if name == "canonical":
        return dumps(canonical_form(reply, tags=tags))
    formatter = Formatter(name, tags)
    return "".join(formatter.feed(e) for e in reply_events(reply, tags)).strip()
