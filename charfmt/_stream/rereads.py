"""A stream that left the format, reread with the lenient batch reader as it grows; what a reread settles is shown.

A stream in another shape than the JSON format (bare tags, brackets, prose, other dialects)
is held (``HELD``) and reread now and then (``_speculate``): often enough that replies that
ignore the format still speak early, seldom enough that the rereads cost a bounded multiple
of the input. What a reread of a prefix says is taken only where more text cannot change it
(``_advance``); the first reread that contradicts what was shown stops the rereads, and
``close()`` decides.
"""

from __future__ import annotations

import gc
import re
from typing import Any, Final

from charfmt._lenient.prose import dialogue_decided
from charfmt._lenient.words import last_sentence_start
from charfmt.events import Event, Reasoning, segment_events
from charfmt.models import Chat, Reply, Segment
from charfmt.parser import parse
from charfmt.tags import TagTable

from .body import Body
from .chats import OpenChat
from .collector import Collector
from .state import SPECULATE_LIMIT_SHIFT, TOP, ChatEnd, ChatStart, SegmentEnd, SegmentStart, TextDelta

_SPECULATE_MIN: Final = 8
"""A held stream is read again (``_speculate``) once it has grown by this many characters..."""
_SPECULATE_SHIFT: Final = 3
"""... and by an eighth (``>> 3``) of what was read last time: the rereads cost a bounded
multiple of the input, so a damaged stream stays linear."""
_SPECULATE_BUDGET: Final = 16
"""... or sooner, on a character that may complete something, while all rereads together have
read at most this many times the text so far."""
_DECISIVE: Final = re.compile(r"[\]>*\")};\n]")
_SPECULATE_SMALL: Final = 64
"""... or on any chunk while the text is this short (a short reply shows its end before ``close()``)."""
_UNSURE: Final = re.compile(r"<(?=[A-Za-z/!?]|\s*\Z)|&(?=[#\w]*\Z)|[\\*\[`\"(){}#|\ufffd「『“（【]")
"""Characters that may begin markup a later character completes (a tag, an entity, an escape,
an action in asterisks, a bracket value, a quoted line, a UTF-8 character cut in two); the
open segment's text is shown only up to the first one near its end. A '<' before a space or a
digit (``3 < 5``, or an entity decoded) begins no tag, and an '&' no entity once anything but
an entity's characters follows it (the batch reader drops an entity cut at the end)."""
_IN_ELEMENT: Final = re.compile(r"<(?=[A-Za-z/!?]|\s*\Z)[^<>]*\Z|&[#\w]*\Z|[{\[`]")
"""In the text of an element still open in a reply of bare tags, the only markup more text can
complete: a tag cut before its '>' or an entity cut before its ';' at the very end, and a JSON
reply or a fence that may begin there (``{``, ``[``, a backtick: the batch reader looks for a
reply inside). Quotes, asterisks and parentheses there are the element's own text."""
_LAST_TAG: Final = re.compile(r"<[ \t]*(/?)[ \t]*([A-Za-z][\w-]*)[^<>]*>(?=[^<>]*\Z)")
"""The last whole tag of a text, if only text follows it: group 1 '/' for a closing tag, group 2 its name."""
_PAIRED: Final = re.compile(r"[\\*\[`\"(){}#|\ufffd「『“（【]")
"""The same less '<' and '&': in a segment another one follows, those were read already (an
entity decoded, a '<' that began no tag); the others may pair with a later character."""
_UNSURE_SPAN: Final = 48
_SPOKEN: Final = re.compile(r"[!?！？][\"'”)」』）]*+\s*\Z")
"""Text that ends in ``!`` or ``?``: its last sentence is speech whatever follows."""
_PROSE: Final = frozenset({"plain-text", "bracket", "roleplay"})
"""Dialects of a reply of untagged text: the last sentence of its last speech may yet narrate a quotation."""
_UNSETTLED: Final = frozenset({"plain-text", "prose"})
"""Dialects of a reread that show nothing early before a JSON envelope: untagged text may be
prose before the reply (inside a body, it is the body's text)."""
_FRONT_MATTER_START: Final = re.compile(r"[ \t]*-")
"""A body held where front matter may begin (a cut ``---``): its text is not settled before the closing ``---``."""
_ECHOED: Final = "user-chats"
_BARE_TAGS: Final = "bare-tags"
_OPEN: Final = 1
"""``_settled(in_element=)``: the text of an element still open in bare tags."""
_CLEAN: Final = 2
"""... whose raw text so far holds nothing more text can complete."""
"""The dialect of tag elements written with no JSON around them: an open element's text is its own."""
_ECHOED_CHAT: Final = re.compile(r"[<＜]\s*chat\b[^<>＜＞]*[>＞]", re.IGNORECASE)
"""The echoed request form shows nothing early before its first ``<chat>``: until then the
batch reader takes the text around ``<user_chats>`` for one chat, and drops it as prose
once a ``<chat>`` comes."""


_CUT_TAG: Final = re.compile(r"<[A-Za-z/][^<>]*\Z")
"""A tag cut before its '>' at the end of a segment's text."""
_FRONT_MATTER_OPEN: Final = re.compile(r"\s*-(?![\s\S]*\n[ \t]*---)")
"""Text that begins like front matter (``---``) whose closing ``---`` line has not come yet."""


_SENTENCE_DONE: Final = re.compile(r"[.!?…]++[\"')]*+(?:\s|\Z)|[。！？]++[」』）]*+")
_PREAMBLE_HINT: Final = re.compile(
    r"(?i)json|```|[{\[]|\bhere(?:'s| is| are| you go)\b|\b(?:reply|response|answer|output)\b"
    r"|\bthe (?:user|player)\b|:[ \t]*+(?:\n|\Z)|以下"
)
"""Words of a preamble to a reply (``Sure! Here is the reply:``) or of reasoning about it
(``The user is angry.``, before an orphan ``</think>``), not of the reply itself."""
_ENDS_SENTENCE: Final = re.compile(r"[!?！？…。][\"')」』）]*+\Z")
"""The text so far ends with an exclamation, a question, a trailing ``…`` or a CJK full stop:
speech, where a plain English sentence may yet narrate a quotation that follows (``She smiled.
"Hi"``), and ``Okay.`` on a line of its own stand before a JSON reply (a CJK preamble names
what follows: ``以下が返答です。``, which ``_PREAMBLE_HINT`` knows)."""
_PROSE_DECIDED_MIN: Final = 8
_PROSE_DECIDED_AFTER: Final = 12


def _prose_decided(batch: Reply, text: str) -> bool:
    """Whether a reread reads the text so far as prose that is the reply, not a preamble to a JSON one.

    Nothing in it announces a reply to come (``Sure! Here is the JSON:``), it has at least
    ``_PROSE_DECIDED_MIN`` characters, and two sentences are complete; or one, and it ends the
    text so far (not at a line break, where ``Okay.`` may stand before a JSON reply), or
    ``_PROSE_DECIDED_AFTER`` characters follow it (enough to hold a preamble's words). More
    text may still bring JSON (then ``close()`` takes back what was shown), but a reply that
    ignores the format speaks as it is written.
    """
    spoken = " ".join(s.text for c in batch.chats for s in c.segments)
    if len(spoken) < _PROSE_DECIDED_MIN or _PREAMBLE_HINT.search(spoken) is not None:
        return False
    ends = [m.end() for m in _SENTENCE_DONE.finditer(spoken)]
    if len(ends) != 1:
        return len(ends) > 1
    after = len(spoken[ends[0] :].strip())
    return after >= _PROSE_DECIDED_AFTER or (after == 0 and _ENDS_SENTENCE.search(text) is not None)


def _before_last_sentence(text: str) -> str:
    """``text`` less its last sentence, unless it ended in ``!`` or ``?`` (speech whatever follows): a quotation
    coming next may make it narration, or the words still to come may introduce one."""
    return text if _SPOKEN.search(text) else text[: last_sentence_start(text)].rstrip()


def _markup_ahead(text: str) -> bool:
    """Whether the text of a segment read from a prefix may still turn into markup as the reply grows."""
    return _CUT_TAG.search(text) is not None or _FRONT_MATTER_OPEN.match(text) is not None


def _settled(text: str, *, whole_text: bool = False, in_element: int = 0) -> str:
    """The part of the open segment's ``text`` (read from a cut-off prefix) that more text cannot change.

    Up to the first character near the end that may begin markup, less trailing white
    space (the batch reader strips it where a segment ends). ``in_element``: the text of an
    element still open in a reply of bare tags, where only a tag or an entity cut at the very
    end is unsure (``_IN_ELEMENT``); ``_CLEAN``: one whose raw text holds no such thing (all settled).
    """
    if in_element:
        m = (
            None
            if in_element == _CLEAN
            else _IN_ELEMENT.search(text, 0 if whole_text else max(0, len(text) - _UNSURE_SPAN))
        )
    else:
        m = _UNSURE.search(text, 0 if whole_text else max(0, len(text) - _UNSURE_SPAN))
    return (text if m is None else text[: m.start()]).rstrip()


def open_element(text: str, tags: TagTable) -> tuple[str, bool]:
    """The tag of ``tags`` whose element is open at the end of ``text`` (its last whole tag opens it,
    only text follows), as the batch reader names it (``""`` if there is none); and whether its raw
    text so far holds nothing more text can complete (then all of it is settled: a '<' or '&' the
    reread shows at its end was an entity)."""
    m = _LAST_TAG.search(text, max(0, text.rfind("<", 0, max(0, text.rfind(">")) + 1)))
    if m is None or m.group(1):
        return "", False
    return tags.synonyms.get(m.group(2).lower(), ""), _IN_ELEMENT.search(text, m.end()) is None


_ADVANCED: Final = 0
"""``_advance_segment``: the segment is shown as far as it is settled, and closed; the next one may follow."""
_STILL_OPEN: Final = 1
"""... the segment stays open: nothing after it is settled."""
_CONTRADICTS: Final = 2
"""... the reread contradicts what was shown."""


class Rereads(Body):
    """The rereads of a held stream (``HELD``, or damaged before its reply began)."""

    __slots__ = ()

    def _speculate(self, chunk: str) -> list[Event]:
        """Reread the held stream with the lenient batch reader; emit what it settles.

        Run when the text has grown by an eighth since the last reread, or when ``chunk``
        brings a character that may complete something (a ']', a '>', an asterisk, a quote)
        while the rereads have read less than ``_SPECULATE_BUDGET`` times the text: either
        way, the rereads cost a bounded multiple of the input. What a reread of a prefix says is taken only where
        more text cannot change it (``_advance``); the first reread that contradicts what was
        shown stops the rereads, and ``close()`` decides (``Reset`` only if the whole reply
        still contradicts it).
        """
        early = self._flush()
        size = self._base + len(self._pend)
        grown = size - self._spec_at
        budget = grown > 0 and self._spec_work + size <= _SPECULATE_BUDGET * size
        often = grown >= max(_SPECULATE_MIN, self._spec_at >> _SPECULATE_SHIFT) or (
            budget and _DECISIVE.search(chunk) is not None
        )
        if not often and not (budget and size <= _SPECULATE_SMALL):
            return early
        self._spec_work += size
        if size > self.max_size >> SPECULATE_LIMIT_SHIFT:
            # What is shown is kept (the reply), and a reread needs memory of its own: past
            # 1/32 of max_size, a damaged stream waits for close() (memory within max_size).
            self._spec_on = False
            return early
        self._spec_at = size
        raw = self._raw()
        pause = gc.isenabled()
        if pause:
            gc.disable()
        try:
            batch = parse(raw, lenient=True, vocabulary=self.vocabulary, max_size=self.max_size, **self._batch_kwargs())
        except Exception:  # close() reads it again and reports what went wrong
            self._spec_on = False
            return early
        finally:
            if pause:
                gc.enable()
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        self._open_tag, self._open_clean = open_element(text, self.tags) if batch.dialect == _BARE_TAGS else ("", False)
        if (
            (
                batch.dialect in _UNSETTLED
                and (
                    (not self._chats_at[0] and not _prose_decided(batch, text))
                    or _FRONT_MATTER_START.match(text, self._held_at[0]) is not None
                )
            )
            or (batch.dialect == _ECHOED and not _ECHOED_CHAT.search(text))
            or (batch.reasoning is None and self._state == TOP and self._lang.reasoning.search(text))
        ):
            return early  # the text so far may yet turn out to be a preamble to the reply
        if not self._advance(batch, self._folded(), often, held=batch.dialect in _PROSE and not dialogue_decided(text)):
            self._spec_on = False
            self._out = []  # not even the part before the contradiction: the reread is unsure
        if self._state == TOP and any(isinstance(e, ChatStart) for e in self._out):
            # What came before any JSON reads as a reply (bare tags, brackets): from here on
            # the rereads show it, and a JSON envelope after it is no longer looked for.
            self._base += len(self._pend)
            self._pend = ""
            self._hold("", 0)
        return early + self._flush()

    def _advance(self, batch: Reply, shown: Collector, steady_test: bool = True, *, held: bool = False) -> bool:
        """Emit what ``batch`` (a reread of the text so far) settles beyond ``shown``; ``False`` if it contradicts it.

        Settled: the reasoning once the reply has begun, every chat but the last one as it
        is, and in the last chat every segment but the last one; the last segment's text up
        to ``_settled`` (a whole value waits for its segment to close). ``held``: the reply is
        untagged text with no dialogue yet (``prose.dialogue_decided``), whose last sentence a
        quotation may yet make narration: it waits (``_before_last_sentence``).
        """
        reasoning = batch.reasoning or ""
        if not reasoning.startswith(self._reasoning):
            return False
        settled = reasoning if batch.chats else _settled(reasoning)
        if len(settled) > len(self._reasoning) and settled.startswith(self._reasoning):
            self._out.append(Reasoning(settled[len(self._reasoning) :]))
            self._reasoning = settled
        arrival = sorted(shown.chats)
        chats = batch.chats
        if [c.order for c in chats[: len(arrival)]] != [shown.chats[i]["order"] for i in arrival]:
            return False  # chats the reread sorts before one shown: close() decides
        unannounced = {c.order: c for c in self._chats.values() if not c.started}
        last = len(chats) - 1
        # The last segment read the same by two rereads, the text having grown in between,
        # is complete (what came in between is markup after it): shown whole, left open.
        tail = chats[-1].segments[-1] if chats and chats[-1].segments else None
        now = None if tail is None else (chats[-1].order, len(chats[-1].segments) - 1, tail.tag, tail.text)
        # (Not between the rereads of every chunk of a short text: a few characters may add
        # nothing the reader shows, a cut entity or a space, and still be the start of markup.)
        steady = steady_test and now is not None and now == self._spec_last
        if steady_test:
            self._spec_last = now
        for k, chat in enumerate(chats):
            segments: list[list[Any]]
            if k < len(arrival):
                have = shown.chats[arrival[k]]
                if have["type"] != chat.type or have["speaker"] != chat.speaker:
                    return False
                found = self._chats.get(arrival[k])
                if found is None:
                    continue  # ended in the stream; close() checks it against the whole reply
                state, segments = found, have["segments"]
            elif k == last and not chat.segments:
                break
            else:
                announced = self._announce(chat, unannounced)
                if announced is None:
                    return False
                state, segments = announced, []
            if not self._advance_chat(chat, state, segments, k == last, steady, prose=held):
                return False
        return True

    def _announce(self, chat: Chat, unannounced: dict[int, OpenChat]) -> OpenChat | None:
        """A chat of the reread that the stream has not shown: announced now; ``None`` if it contradicts."""
        state = (
            unannounced.pop(chat.order) if chat.order in unannounced else OpenChat(self._count, chat.type, chat.order)
        )
        if state.kind != chat.type:
            return None
        if state.index == self._count:
            self._count += 1
            self._chats[state.index] = state
            self._orders.add(chat.order)
        state.started = True
        self._out.append(ChatStart(state.index, chat.type, chat.order, chat.speaker))
        return state

    def _advance_chat(
        self, chat: Chat, state: OpenChat, segments: list[list[Any]], last_chat: bool, steady: bool, *, prose: bool
    ) -> bool:
        """Emit what the reread settles of ``chat`` beyond its ``segments`` shown; ``False`` if it contradicts them.

        ``prose``: the reply is untagged text, whose last sentence may yet narrate a quotation that follows.
        """
        for n, seg in enumerate(chat.segments):
            held = prose and last_chat and n == len(chat.segments) - 1 and seg.tag == self.tags.speech.name
            went = self._advance_segment(
                chat, n, seg, state, segments, last_chat=last_chat, steady=steady and not held, held=held
            )
            if went == _CONTRADICTS:
                return False
            if went == _STILL_OPEN:
                return True
        if not last_chat:
            self._out.append(ChatEnd(state.index))
            del self._chats[state.index]
        return True

    def _advance_segment(
        self,
        chat: Chat,
        n: int,
        seg: Segment,
        state: OpenChat,
        segments: list[list[Any]],
        *,
        last_chat: bool,
        steady: bool,
        held: bool = False,
    ) -> int:
        """Emit what the reread settles of segment ``n`` of ``chat`` beyond what ``segments`` showed of it.

        ``held``: untagged speech whose last sentence waits (what follows may make it narration).
        """
        whole = self._lang.whole
        index, out, count = state.index, self._out, len(chat.segments)
        still_open = last_chat and n == count - 1
        # The text of an element still open in bare tags is the element's, quotes and all.
        in_element = (_CLEAN if self._open_clean else _OPEN) if still_open and seg.tag == self._open_tag else 0
        # Text followed only by a segment still unsure may yet lose trailing space or
        # turn into markup: it stays open until what follows it is settled.
        # So does text of the last chat holding a character that may begin markup (an
        # asterisk a later one closes may make it an action).
        if last_chat and not still_open and seg.tag not in whole:
            after = chat.segments[-1]
            paired = seg.tag not in self._lang.hidden and _PAIRED.search(seg.text) is not None
            still_open = paired or (n == count - 2 and (after.tag in whole or not _settled(after.text)))
        # Text of the last chat that is a tag cut before its '>' (read as text only because
        # it is not complete yet) or front matter not closed yet may turn into markup.
        markup = last_chat and seg.tag not in whole and not in_element and _markup_ahead(seg.text)
        still_open = still_open or markup
        if n < len(segments):
            tag, parts, intensity = segments[n]
            text = "".join(parts)
            if tag != seg.tag or intensity != seg.intensity:
                return _CONTRADICTS
            if n < state.closed_segments:
                return _ADVANCED if text == seg.text else _CONTRADICTS
        else:
            steady_last = n == count - 1 and steady
            unsure = markup or (
                not seg.text if steady_last else seg.tag in whole or not _settled(seg.text, in_element=in_element)
            )
            unsure = unsure or (held and not _before_last_sentence(_settled(seg.text, in_element=in_element)))
            if still_open and unsure:
                return _STILL_OPEN  # a whole value waits for its segment to close; a tag, for its first text
            out.append(SegmentStart(index, n, seg.tag))
            text = ""
        if seg.tag in whole:
            if text and text != seg.text:
                return _CONTRADICTS
            if not text:
                out.extend(segment_events(index, n, seg, self.tags)[1:-1])
        else:
            if not seg.text.startswith(text):
                return _CONTRADICTS
            if markup:
                more = text  # (nothing more until it is settled)
            elif not still_open or (steady and n == count - 1):
                more = seg.text
            else:
                more = _settled(seg.text, whole_text=n < count - 1, in_element=in_element)
            if held:
                more = _before_last_sentence(more)
            if len(more) > len(text) and more.startswith(text):
                out.append(TextDelta(index, n, seg.tag, more[len(text) :]))
        if still_open:
            return _STILL_OPEN
        out.append(SegmentEnd(index, n, seg.tag))
        state.closed_segments = n + 1
        return _ADVANCED
