"""The end of a stream that was damaged or cut off: read whole in batch, matched against what was shown.

``_complete`` reads the kept text with ``charfmt.parse`` (or says why it cannot: ``CF002``
over ``max_size``, ``CF801`` for a long stream that left the format); ``_reconcile`` emits
only what the batch result holds beyond what was streamed, or ``Reset`` and the whole result
where it contradicts what was shown.
"""

from __future__ import annotations

import gc
from typing import Any

from charfmt.diagnostics import Diagnostic, ParseError, too_long
from charfmt.events import DiagnosticEvent, Dialect, Event, Reasoning, Reset, reply_events, segment_events
from charfmt.models import Chat, Reply
from charfmt.parser import parse
from charfmt.tags import TagTable

from .rereads import Rereads
from .state import ChatEnd, ChatStart, SegmentEnd, TextDelta


class Reconcile(Rereads):
    """The batch reader's word at ``close()``, matched against what was streamed."""

    __slots__ = ()

    def _complete(self) -> None:
        """Damaged or cut-off input: read it all in batch, emit only what is missing."""
        raw: str | bytes | None = None
        if self._kept is not None:
            raw = self._raw()
            # Over max_size only by a token that never completed: it began before the bound.
            self._oversize = self._oversize or len(raw) > self.max_size
        if self._oversize:
            # What parse(text, lenient=True) says of the same input (and all it says).
            if raw is not None:
                size = len(raw)
            else:
                size = self.max_size - self._room if self._bytes else self._base + len(self._pend)
            cf002 = Diagnostic.at("", "CF002", too_long(size, self.max_size, in_bytes=self._bytes), 0)
            self._fail(cf002)
            shown = self._collector is None or bool(
                self._folded().chats or self._collector.diagnostics or self._collector.reasoning
            )
            self._out = [Reset()] if shown else []
            self._out.append(DiagnosticEvent(None, cf002))
            return
        if raw is None:
            end = self._base + len(self._pend)
            self._hold(self._pend, 0)  # where the reader stopped (a token that never completed)
            offset, line, column = self._held_at
            message = f"the stream is longer than max_size ({self.max_size:,}) and left the format: the rest is dropped"
            cf801 = Diagnostic(
                code="CF801", message=message, severity="error", line=line, column=column, offset=offset, end=end,
            )  # fmt: skip
            self._fail(cf801)
            self._out.append(DiagnosticEvent(None, cf801))
            return
        # The batch result of a long damaged reply can hold hundreds of thousands of
        # diagnostics, each becoming an event: acyclic objects the collector would rescan
        # again and again (the parser pauses it for the same reason).
        pause = gc.isenabled()
        if pause:
            gc.disable()
        try:
            try:
                batch = parse(
                    raw,
                    lenient=self.lenient,
                    vocabulary=self.vocabulary,
                    max_size=self.max_size,
                    **self._batch_kwargs(),
                )
            except Exception as e:
                if not self.lenient or isinstance(e, ParseError):
                    raise
                # A lenient stream never raises: a bug in the batch reader is reported, not thrown.
                message = f"internal error while recovering ({type(e).__name__}: {e}); please report it"
                self._out = [DiagnosticEvent(None, Diagnostic.at("", "CF999", message, 0))]
                return
            self._reconcile(batch)
        finally:
            if pause:
                gc.enable()

    def _reconcile(self, batch: Reply) -> None:
        """Emit what ``batch`` holds beyond what was streamed, or ``Reset`` and all of it."""
        if self._collector is None:
            self._out = [Reset(), *reply_events(batch, self.tags)]
            return
        streamed = self._folded()
        out: list[Event] = []
        shown = {(d.code, d.offset) for d in streamed.diagnostics}
        out.extend(DiagnosticEvent(d.chat, d) for d in batch.diagnostics if (d.code, d.offset) not in shown)
        by_order = {c["order"]: (index, c) for index, c in streamed.chats.items()}
        next_index = self._count
        unannounced = {c.order: c.index for c in self._chats.values() if not c.started and c.order is not None}
        consistent = len(shown) <= len(batch.diagnostics)
        reasoning = batch.reasoning or ""
        if not reasoning.startswith(self._reasoning):
            consistent = False
        elif len(reasoning) > len(self._reasoning):
            out.insert(0, Reasoning(reasoning[len(self._reasoning) :]))
        # The chats the stream knows (shown, or their header read) are the first to arrive: they come first,
        # by index (the order they arrived in), then the rest in ``order`` (the batch keeps no arrival order).
        # ``batch.chats`` is sorted: a chat listed out of order (CF113) may sort before one still open in the
        # stream, and it never opens inside it.
        known = set(by_order) | set(unannounced)
        first = sorted(
            (((by_order[c.order][0] if c.order in by_order else unannounced[c.order]), c) for c in batch.chats
             if c.order in known),
            key=lambda pair: pair[0],
        )  # fmt: skip
        for index, chat in first:
            if chat.order in by_order:
                events = self._finish_chat(index, by_order.pop(chat.order)[1], chat)
                if events is None:
                    consistent = False
                    break
                out.extend(events)
            else:
                out.extend(_chat_events(index, chat, self.tags))
        for chat in batch.chats:
            if chat.order not in known:
                out.extend(_chat_events(next_index, chat, self.tags))
                next_index += 1
        if by_order or not consistent:
            out = [Reset(), *reply_events(batch, self.tags)]  # the batch reader contradicts what was shown
        elif (dialect := batch.dialect) is not None:
            out.append(Dialect(dialect))  # last, as in Reply.events()
        self._out = out

    def _finish_chat(self, index: int, have: dict[str, Any], chat: Chat) -> list[Event] | None:
        """The events that complete streamed chat ``index`` into ``chat``; ``None`` if it contradicts."""
        state = self._chats.get(index)  # None: the chat ended in the stream
        closed = state.closed_segments if state is not None else len(have["segments"])
        segments = have["segments"]
        if have["type"] != chat.type or have["speaker"] != chat.speaker or len(segments) > len(chat.segments):
            return None
        out: list[Event] = []
        for n, seg in enumerate(chat.segments):
            if n >= len(segments):
                out.extend(segment_events(index, n, seg, self.tags))
                continue
            tag, parts, intensity = segments[n]
            text = "".join(parts)
            if tag != seg.tag or not seg.text.startswith(text) or intensity != seg.intensity:
                return None
            if n < closed:
                if text != seg.text:
                    return None
                continue
            if seg.tag in self._lang.whole:
                if text and text != seg.text:
                    return None  # an emotion, action or cue is shown whole, once
                if not text:
                    out.extend(segment_events(index, n, seg, self.tags)[1:-1])
            elif len(seg.text) > len(text):
                out.append(TextDelta(index, n, seg.tag, seg.text[len(text) :]))
            out.append(SegmentEnd(index, n, seg.tag))
        if state is not None:  # still open in the stream (ended chats leave the table)
            out.append(ChatEnd(index))
        return out


def _chat_events(index: int, chat: Chat, tags: TagTable) -> list[Event]:
    out: list[Event] = [ChatStart(index, chat.type, chat.order, chat.speaker)]
    for n, seg in enumerate(chat.segments):
        out.extend(segment_events(index, n, seg, tags))
    out.append(ChatEnd(index))
    return out
