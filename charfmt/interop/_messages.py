"""The messages one exchange becomes in a format, and which chat each shows.

An exchange charfmt wrote becomes one message per chat that has something to show (the
user's C chats as ``user``, the character's C chats as ``assistant``, I/E chats as ``system``),
its reasoning where the format keeps reasoning. An exchange read from a document of the same
format becomes its original messages again, each showing its chat as the exchange has it now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from charfmt.interop._declaration import Draft, Format, Line, MessageRole, Names, Native, Side, Writing
from charfmt.interop._formats import DECLARED
from charfmt.models import Segment
from charfmt.tags import DEFAULT_TAGS, TEXT_TAG, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange


@dataclass(frozen=True, slots=True)
class Exporting:
    """One document being written: its format, tags, what its messages know, and the time it writes."""

    fmt: Format
    tags: TagTable
    writing: Writing
    stamp: str
    """The time written where none is known."""


def visible_text(chat_type: str, segments: Sequence[Segment], tags: TagTable = DEFAULT_TAGS) -> str:
    """What a reader that ignores charfmt should see of one chat.

    Speech, line by line; with no speech, the actions as ``*bows*``; an I/E chat's text as is.
    Emotions, cues and hidden text (inner voice) are not shown: they live in the payload.
    """
    if chat_type != "C":
        return "\n".join(s.text for s in segments if s.tag == TEXT_TAG)
    speech = {s.name for s in tags.with_role("speech")}
    spoken = [s.text for s in segments if s.tag in speech and s.text]
    if spoken:
        return "\n".join(spoken)
    action = tags.action
    return "\n".join(f"*{s.text}*" for s in segments if action is not None and s.tag == action.name and s.text)


def visible_lines(exchange: Exchange, tags: TagTable = DEFAULT_TAGS) -> list[Line]:
    """The messages of one exchange as a reader of another format sees them (empty texts left out)."""
    out: list[Line] = []
    for n, chat in enumerate(exchange.user.chats):
        role: MessageRole = "user" if chat.type == "C" else "system"
        out.append(Line(role, visible_text(chat.type, chat.segments, tags), chat.type, "u", n))
    for n, reply_chat in enumerate(exchange.reply.chats):
        role = "assistant" if reply_chat.type == "C" else "system"
        text = visible_text(reply_chat.type, reply_chat.segments, tags)
        out.append(Line(role, text, reply_chat.type, "r", n, reply_chat.speaker))
    return [line for line in out if line.text]


def foreign_of(exchange: Exchange, fmt: str) -> dict[str, Any] | None:
    """The exchange's passthrough if it came from a document of ``fmt``."""
    foreign = exchange.foreign
    if isinstance(foreign, dict) and foreign.get("format") == fmt and isinstance(foreign.get("messages"), list):
        return foreign
    return None


def build(job: Exporting, exchange: Exchange, eid: str) -> Draft:
    """The messages of ``exchange``, whose message ids start with ``eid``."""
    fmt, names, stamp = job.fmt, job.writing.names, job.stamp
    foreign = foreign_of(exchange, fmt.name)
    if foreign is not None:
        return _rewritten(job, exchange, foreign, eid)
    natives = _natives(exchange)
    draft = Draft(job.writing)
    for k, line in enumerate(visible_lines(exchange, job.tags)):
        draft.messages.append(fmt.message(line, _native(natives, line, f"{eid}-{k}", names, stamp), job.writing))
        draft.shown.append((line.side, line.index))
    if exchange.reply.reasoning:
        native = natives.get(("R", 0)) or Native(f"{eid}-r", stamp, names[1])
        fmt.reasoning.write(fmt, draft, exchange.reply.reasoning, native)
    if not draft.messages:
        draft.messages.append(fmt.empty(Native(f"{eid}-0", stamp, None), job.writing))
        draft.shown.append(None)
    return draft


def _native(natives: dict[tuple[str, int], Native], line: Line, mid: str, names: Names, stamp: str) -> Native:
    found = natives.get((line.side, line.index))
    name = _name(line, names)
    if found is None:
        return Native(mid, stamp, name)
    return Native(found.id or mid, found.time or stamp, found.name or name)


def _name(line: Line, names: Names) -> str | None:
    """Who a message is from: the user's or the character's name, a scene's speaker, none for the system."""
    if line.speaker is not None:
        return line.speaker
    return names[0] if line.role == "user" else names[1] if line.role == "assistant" else None


def _natives(exchange: Exchange) -> dict[tuple[str, int], Native]:
    """Ids, times and speakers of a foreign exchange's messages, by the chat each became."""
    foreign = exchange.foreign
    if not isinstance(foreign, dict) or not isinstance(foreign.get("messages"), list):
        return {}
    source = DECLARED.get(str(foreign.get("format")))
    if source is None:
        return {}
    out: dict[tuple[str, int], Native] = {}
    for link in foreign["messages"]:
        message = link.get("message") if isinstance(link, dict) else None
        if not isinstance(message, dict):
            continue
        side = "u" if link.get("side") == "user" else "r"
        if isinstance(link.get("chat"), int):
            out.setdefault((side, link["chat"]), source.native.of(message))
        elif link.get("reasoning"):
            out.setdefault(("R", 0), source.native.of(message))
    return out


def _rewritten(job: Exporting, exchange: Exchange, foreign: dict[str, Any], eid: str) -> Draft:
    """The original messages of a foreign exchange, each showing its chat as the exchange has it now.

    A message whose chat was removed or emptied loses its text (and goes, if nothing else is
    left in it); a chat with no message (added in Python) gets a new message after the others
    of its side.
    """
    fmt, tags = job.fmt, job.tags
    draft = Draft(job.writing)
    chats: dict[str, Sequence[Any]] = {"u": exchange.user.chats, "r": exchange.reply.chats}
    linked: set[tuple[str, int]] = set()
    last = {"u": -1, "r": -1}
    for i, link in enumerate(foreign["messages"]):
        message: dict[str, Any] | None = link["message"]
        side: Side = "u" if link.get("side") == "user" else "r"
        k = link.get("chat")
        shown: tuple[Side, int] | None = None
        if isinstance(k, int) and message is not None:
            have: Sequence[Any] = chats[side]
            text = visible_text(have[k].type, have[k].segments, tags) if k < len(have) else ""
            linked.add((side, k))
            if text:
                message = fmt.text.set(message, text)
                shown = (side, k)
            else:
                message = fmt.text.set(message, None)
        if message is None:
            continue
        if fmt.text.of(message) is None:
            shown = None
        draft.same[i] = len(draft.messages)
        draft.messages.append(message)
        draft.shown.append(shown)
        last[side] = len(draft.messages)
    _add_new(job, exchange, draft, linked=linked, last=last, eid=eid)
    return draft


def _add_new(
    job: Exporting, exchange: Exchange, draft: Draft, *, linked: set[tuple[str, int]], last: dict[str, int], eid: str
) -> None:
    """A new message for each chat no original message shows, after the others of its side."""
    added = [line for line in visible_lines(exchange, job.tags) if (line.side, line.index) not in linked]
    for n, line in enumerate(added):
        at = last[line.side] if last[line.side] >= 0 else len(draft.messages)
        native = Native(f"{eid}-n{n}", job.stamp, _name(line, job.writing.names))
        draft.messages.insert(at, job.fmt.message(line, native, job.writing))
        draft.shown.insert(at, (line.side, line.index))
        draft.same = {i: (m + 1 if m >= at else m) for i, m in draft.same.items()}
        last = {s: (v + 1 if v >= at else v) for s, v in last.items()}
        last[line.side] = at + 1
    if not draft.messages:
        draft.messages.append(job.fmt.empty(Native(f"{eid}-0", job.stamp, None), job.writing))
        draft.shown.append(None)
