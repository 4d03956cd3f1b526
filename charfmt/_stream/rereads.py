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
from collections.abc import Container, Mapping
from typing import Any, Final

from charfmt._lenient.fields import PLACEHOLDER_BODY
from charfmt._lenient.prose import dialogue_decided
from charfmt._lenient.told import learn
from charfmt._lenient.turns import lines_held
from charfmt.events import Event, Reasoning, segment_events
from charfmt.models import Chat, Reply, Segment
from charfmt.parser import parse

from .body_states import Body
from .chats import OpenChat
from .collector import Collector
from .settle import (
    CLEAN,
    OPEN,
    PAIRED,
    PROBE,
    SENTENCE_ENDED,
    before_last_line,
    before_last_sentence,
    first_sentence,
    form_line_speaks,
    in_players_form,
    in_turn_form,
    markup_ahead,
    may_echo,
    open_element,
    opens_as_prompt,
    prose_decided,
    settled,
)  # fmt: skip
from .state import SPECULATE_LIMIT_SHIFT, TOP, ChatEnd, ChatStart, SegmentEnd, SegmentStart, TextDelta

_SPECULATE_MIN: Final = 8
"""A held stream is read again (``_speculate``) once it has grown by this many characters..."""
_SPECULATE_SHIFT: Final = 3
"""... and by an eighth (``>> 3``) of what was read last time: the rereads cost a bounded
multiple of the input, so a damaged stream stays linear."""
_SPECULATE_BUDGET: Final = 16
"""... or sooner, on a character that may complete something, while all rereads together have
read at most this many times the text so far."""
_DECISIVE: Final = re.compile(r"[\]>*\")};\n.!?。！？…]")
"""(What may complete markup, a value or a line; or end a sentence, settled if it is said to someone.) Also
sooner: the chunk after one whose reread held a sentence back, if it brings more than space (``_held_back``)."""
_HALF_CLOSED: Final = re.compile(r"[*\]]\Z")
_WORD_ONLY: Final = re.compile(r"[A-Za-z0-9]+")
_SPECULATE_SMALL: Final = 64
"""... or on any chunk while the text is this short (a short reply shows its end before ``close()``)."""
_PROSE: Final = frozenset({"plain-text", "bracket", "roleplay"})
"""Dialects of a reply of untagged text: the last sentence of its last speech may yet narrate a quotation."""
_UNSETTLED: Final = frozenset({"plain-text", "prose"})
"""Dialects of a reread that show nothing early before a JSON envelope: untagged text may be
prose before the reply (inside a body, it is the body's text)."""
_FRONT_MATTER_START: Final = re.compile(r"[ \t]*-")
"""A body held where front matter may begin (a cut ``---``): its text is not settled before the closing ``---``."""
_JSON_OBJECTS: Final = frozenset({"canonical", "json-array", "hybrid", "single-chat", "json-fields"})
"""Dialects of a reply in JSON: keys beside the body may give a value the body gives too (the body's is read)."""
_ECHOED: Final = "user-chats"
_BARE_TAGS: Final = "bare-tags"
"""The dialect of tag elements written with no JSON around them: an open element's text is its own."""
_ECHOED_CHAT: Final = re.compile(r"[<＜]\s*chat\b[^<>＜＞]*[>＞]", re.IGNORECASE)
"""The echoed request form shows nothing early before its first ``<chat>``: until then the
batch reader takes the text around ``<user_chats>`` for one chat, and drops it as prose
once a ``<chat>`` comes; but a form that opens the reply on a line of its own speaks from its
first line of text (``settle.form_line_speaks``)."""


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
            budget and (_DECISIVE.search(chunk) is not None or (self._held_back and not chunk.isspace()))
        )
        # (On a short text, a reread on any chunk; but a chunk of nothing but a word's letters settles nothing
        # its word's end will not: the budget goes to the chunks that may.)
        small = size <= _SPECULATE_SMALL and _WORD_ONLY.fullmatch(chunk) is None
        if not often and not (budget and small):
            return early
        self._spec_work += size
        if size > self.max_size >> SPECULATE_LIMIT_SHIFT:
            # What is shown is kept (the reply), and a reread needs memory of its own: past
            # 1/32 of max_size, a damaged stream waits for close() (memory within max_size).
            self._spec_on = False
            return early
        self._spec_at = size
        raw = self._raw()
        self._probe_raw, self._probe, self._held_back = raw, None, False
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
        element, clean = open_element(text, self.tags)
        self._open_other = bool(element) and element != self.tags.speech.name
        echo = bool(self._prompt or self._turn) and may_echo(text[text.rfind("\n") + 1 :], self._prompt, self._turn)
        self._echo_line = max(int(echo), lines_held(text))  # (the last lines may open a transcript: turns)
        self._open_tag, self._open_clean = (element, clean) if batch.dialect == _BARE_TAGS else ("", False)
        if self._unsure(batch, text):
            return early  # the text so far may yet turn out to be a preamble to the reply
        if any(d.code == _REORDERED for d in batch.diagnostics):
            # Its chats sorted, the reread no longer lists them as they arrived: which one is still growing is
            # unknown. What was shown stays; close() adds the rest after it.
            self._spec_on = False
            return early
        # Untagged speech may yet see its last sentence made narration by a quotation that follows: in a
        # reply of untagged text until a quotation is read as dialogue, in a body's text always; never the
        # text of an element still open (an element's text is its own, quotes and all).
        held = not element and (batch.dialect not in _PROSE or not dialogue_decided(text))
        # (a text ending in '*' or ']' may be ending '**…**' or '[[…]]' with one of two: not read twice the same)
        # (a value a JSON key gave may yet be the body's to give: it waits for what follows it, never read steady)
        steady_test = often and _HALF_CLOSED.search(text) is None and not _key_value_last(batch, self._lang.whole)
        if not self._advance(batch, self._folded(), steady_test, held=held):
            self._spec_on = False
            self._out = []  # not even the part before the contradiction: the reread is unsure
        if self._state == TOP and any(isinstance(e, ChatStart) for e in self._out):
            # What came before any JSON reads as a reply (bare tags, brackets): from here on
            # the rereads show it, and a JSON envelope after it is no longer looked for.
            self._base += len(self._pend)
            self._pend = ""
            self._hold("", 0)
        return early + self._flush()

    def _unsure(self, batch: Reply, text: str) -> bool:
        """Whether ``batch``, the reread of ``text`` (the stream so far), shows nothing: the text may yet turn out to
        be a preamble to the reply (untagged text not decided, front matter begun, an echoed request form before its
        first chat, a system prompt's opening, a form of the player's lines, reasoning begun), or the reread reads a
        prefix otherwise than the whole may be read (a mark left open at the end read closed, scaffolding in a cut
        body)."""
        return bool(
            (
                batch.dialect in _UNSETTLED
                and (
                    (not self._chats_at[0] and not prose_decided(batch, text))
                    or _FRONT_MATTER_START.match(text, self._held_at[0]) is not None
                )
            )
            or (batch.dialect == _ECHOED and not _ECHOED_CHAT.search(text) and not form_line_speaks(text))
            or (batch.dialect in _PROSE and not self._chats_at[0] and opens_as_prompt(text))
            or (bool(self._turn or self._prompt) and self._in_players_form(text))
            or (
                not self._chats_at[0]
                and self._in_turn_form(batch, text)
                and all(d.code != _FORM_DROPPED for d in batch.diagnostics)
            )
            or _mark_read_closed(batch, text)
            or _scaffolding_in_open_body(batch)
            or (batch.reasoning is None and self._state == TOP and self._lang.reasoning.search(text))
        )

    def _speech_names(self) -> frozenset[str]:
        """The names (and synonyms) of the speech tag, as the form of the player's turn is written with it."""
        speech = self.tags.speech.name
        return frozenset(w for w, tag in self.tags.synonyms.items() if tag == speech)

    def _in_turn_form(self, batch: Reply, text: str) -> bool:
        """Whether ``text`` (read as ``batch``) may yet hold the player's turn before a JSON reply (settle)."""
        told = bool(self._turn or self._prompt)
        player = learn(self._prompt, self._turn).player if told else frozenset()
        echo, whole = _after_echo(batch, text), _synonyms(self.tags.synonyms, self._lang.whole)
        return in_turn_form(text, self._speech_names(), whole, player, told=told, after_echo=echo)

    def _in_players_form(self, text: str) -> bool:
        """Whether ``text`` ends inside a request form whose spoken lines so far may all be the player's (told)."""
        return in_players_form(text, self._prompt, self._turn, _synonyms(self.tags.synonyms, self._lang.whole))

    def _advance(self, batch: Reply, shown: Collector, steady_test: bool = True, *, held: bool = False) -> bool:
        """Emit what ``batch`` (a reread of the text so far) settles beyond ``shown``; ``False`` if it contradicts it.

        Settled: the reasoning once the reply has begun, every chat but the last one as it
        is, and in the last chat every segment but the last one; the last segment's text up
        to ``settled`` (a whole value waits for its segment to close). ``held``: the reply is
        untagged text with no dialogue yet (``prose.dialogue_decided``), whose last sentence a
        quotation may yet make narration: it waits (``before_last_sentence``).
        """
        reasoning = batch.reasoning or ""
        if not reasoning.startswith(self._reasoning):
            return False
        shown_now = reasoning if batch.chats else settled(reasoning)
        if len(shown_now) > len(self._reasoning) and shown_now.startswith(self._reasoning):
            self._out.append(Reasoning(shown_now[len(self._reasoning) :]))
            self._reasoning = shown_now
        arrival = sorted(shown.chats)
        chats = batch.chats
        if [c.order for c in chats[: len(arrival)]] != [shown.chats[i]["order"] for i in arrival]:
            return False  # chats the reread sorts before one shown: close() decides
        self._renumber_waiting({c.order for c in chats}, arrival[-1] + 1 if arrival else 0)
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
            elif k == last:
                # The last chat is announced with the first of its content that is settled: its header alone
                # may yet be dropped (a body of the format's placeholder, '...', echoed from the prompt).
                return self._announce_last(chat, unannounced, steady, held=held)
            else:
                announced = self._announce(chat, unannounced)
                if announced is None:
                    return False
                state, segments = announced, []
            if not self._advance_chat(chat, state, segments, k == last, steady, prose=held):
                return False
        return True

    def _renumber_waiting(self, kept: set[int], first: int) -> None:
        """The chats whose header was read but that never started: those the reread does not keep (a header a
        broken string merged into the next) are forgotten, and the others numbered from ``first`` (after the
        chats shown) in the order they arrived, so that the chats shown are numbered as the batch numbers them."""
        waiting = sorted(index for index, c in self._chats.items() if not c.started)
        if not waiting or (waiting[0] == first and all(self._chats[i].order in kept for i in waiting)):
            return
        states = [self._chats.pop(index) for index in waiting]
        number = first
        for state in states:
            if state.order in kept:
                state.index = number
                self._chats[number] = state
                number += 1
        self._count = number

    def _announce_last(self, chat: Chat, unannounced: dict[int, OpenChat], steady: bool, *, held: bool) -> bool:
        """The last chat of the reread, not shown yet: announced once some of its content is settled."""
        if not chat.segments:
            return True
        state = unannounced.get(chat.order) or OpenChat(self._count, chat.type, chat.order)
        if state.kind != chat.type:
            return False
        mark = len(self._out)
        if not self._advance_chat(chat, state, [], True, steady, prose=held):
            return False
        if len(self._out) > mark:
            unannounced.pop(chat.order, None)
            self._out.insert(mark, self._started(chat, state))
        return True

    def _announce(self, chat: Chat, unannounced: dict[int, OpenChat]) -> OpenChat | None:
        """A chat of the reread that the stream has not shown: announced now; ``None`` if it contradicts."""
        state = (
            unannounced.pop(chat.order) if chat.order in unannounced else OpenChat(self._count, chat.type, chat.order)
        )
        if state.kind != chat.type:
            return None
        self._out.append(self._started(chat, state))
        return state

    def _started(self, chat: Chat, state: OpenChat) -> Event:
        """``state`` (of ``chat``) started: kept among the chats if it is new; its ``ChatStart``."""
        if state.index == self._count:
            self._count += 1
            self._chats[state.index] = state
            self._orders.add(chat.order)
        state.started = True
        return ChatStart(state.index, chat.type, chat.order, chat.speaker)

    def _advance_chat(
        self, chat: Chat, state: OpenChat, segments: list[list[Any]], last_chat: bool, steady: bool, *, prose: bool
    ) -> bool:
        """Emit what the reread settles of ``chat`` beyond its ``segments`` shown; ``False`` if it contradicts them.

        ``prose``: the reply is untagged text, whose last sentence may yet narrate a quotation that follows.
        """
        for n, seg in enumerate(chat.segments):
            held = prose and last_chat and n == len(chat.segments) - 1 and seg.tag == self.tags.speech.name
            went = self._advance_segment(chat, n, seg, state, segments, last_chat=last_chat, steady=steady, held=held)
            if went == _CONTRADICTS:
                return False
            if went == _STILL_OPEN:
                return True
        if not last_chat:
            self._out.append(ChatEnd(state.index))
            del self._chats[state.index]
        return True

    def _spoken(self, seg: Segment, n: int, text: str) -> str:
        """What of ``text`` (the settled text of untagged speech ``seg``, segment ``n`` of the last chat) is speech
        whatever follows: all of it where its last sentence is said to someone, or where a quotation coming next
        would not make it narration (``_keeps``: the segment has ended, a body or a value closed); else all but
        its last sentence (``before_last_sentence``)."""
        spoken = before_last_sentence(text)
        # (A sentence not ended yet may still go on to introduce a quotation; and the probe goes after the
        # text so far, so it asks about the segment only where nothing of it is held back as unsure.)
        whole = text.rstrip() == seg.text.rstrip()
        if len(spoken) < len(text.rstrip()) and whole and SENTENCE_ENDED.search(text) and self._keeps(n, seg):
            return text
        # (a sentence held back: the next chunk that brings more than space shows what follows it)
        self._held_back = self._held_back or len(spoken) < len(text.rstrip())
        return spoken

    def _keeps(self, n: int, seg: Segment) -> bool:
        """Whether segment ``n`` of the last chat stays ``seg`` when a quotation comes next.

        The batch reader is asked: the text of the last reread with a quotation after it (``PROBE``),
        read once per reread where a sentence waits (so the rereads read at most twice what they would).
        """
        if self._probe is None:
            raw = self._probe_raw
            probe = raw + PROBE.encode() if isinstance(raw, bytes) else raw + PROBE
            try:
                self._probe = parse(
                    probe, lenient=True, vocabulary=self.vocabulary, max_size=self.max_size + len(PROBE) * 4,
                    **self._batch_kwargs(),
                )  # fmt: skip
            except Exception:  # (a bug of the batch reader is close()'s to report: here, the sentence waits)
                return False
        chats = self._probe.chats
        segments = chats[-1].segments if chats else []
        return n < len(segments) and segments[n].tag == seg.tag and segments[n].text == seg.text

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
        in_element = (CLEAN if self._open_clean else OPEN) if still_open and seg.tag == self._open_tag else 0
        held = held and not in_element  # (an element's own text is no narration of anything)
        # Read the same twice, the text grown: complete, unless untagged speech a quotation coming next would make
        # narration of (the text grown by a space, say): the batch reader is asked (``_keeps``).
        if steady and held:
            steady = self._keeps(n, seg)
            held = not steady
        # Text followed only by a segment still unsure may yet lose trailing space or
        # turn into markup: it stays open until what follows it is settled.
        # So does text of the last chat holding a character that may begin markup (an
        # asterisk a later one closes may make it an action).
        if last_chat and not still_open and seg.tag not in whole:
            after = chat.segments[-1]
            paired = seg.tag not in self._lang.hidden and PAIRED.search(seg.text) is not None
            still_open = paired or (n == count - 2 and (after.tag in whole or not settled(after.text)))
        # Text of the last chat that is a tag cut before its '>' (read as text only because
        # it is not complete yet) or front matter not closed yet may turn into markup.
        markup = last_chat and seg.tag not in whole and not in_element and markup_ahead(seg.text)
        still_open = still_open or markup
        if n < len(segments):
            tag, parts, intensity = segments[n]
            text = "".join(parts)
            if tag != seg.tag or intensity != seg.intensity:
                return _CONTRADICTS
            if n < state.closed_segments:
                return _ADVANCED if text == seg.text else _CONTRADICTS
        else:
            if still_open and (
                markup or self._waits(seg, n, last=n == count - 1, steady=steady, in_element=in_element, held=held)
            ):
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
            # (nothing more of a cut tag or of front matter until it is settled)
            more = (
                text
                if markup
                else self._showable(
                    seg, n, last=n == count - 1, still_open=still_open, steady=steady, in_element=in_element, held=held
                )
            )
            if len(more) > len(text) and more.startswith(text):
                out.append(TextDelta(index, n, seg.tag, more[len(text) :]))
        if still_open:
            return _STILL_OPEN
        out.append(SegmentEnd(index, n, seg.tag))
        state.closed_segments = n + 1
        return _ADVANCED

    def _waits(self, seg: Segment, n: int, *, last: bool, steady: bool, in_element: int, held: bool) -> bool:
        """Whether segment ``n`` (``last``: the last one), still open and not begun, waits: a whole value until
        its segment closes (or reads the same twice: ``steady``), a text until it has a part it can show."""
        if self._echo_line and last and not _before_lines(seg.text, self._echo_line):
            return True  # (its text so far is all on a line that may echo the prompt)
        if n == 0 and last and PLACEHOLDER_BODY.startswith(seg.text.strip()):
            return True  # (a body of the format's placeholder, '...', echoed from the prompt, is dropped)
        if steady and last:
            return not seg.text
        if seg.tag in self._lang.whole:
            return True
        text = settled(seg.text, in_element=in_element)
        if self._open_other and last:
            text = first_sentence(text)
        return not (self._spoken(seg, n, text) if held else text)

    def _showable(
        self, seg: Segment, n: int, *, last: bool, still_open: bool, steady: bool, in_element: int, held: bool
    ) -> str:
        """The text of segment ``n`` (``last``: the last one) a reread may show: all of it once closed or read the
        same twice (``steady``); else its settled part (``settle.settled``), less a last sentence that waits
        (``held``: ``_spoken``) and a last line that may echo the prompt (``settle.may_echo``)."""
        if not still_open or (steady and last):
            more = seg.text
        else:
            more = settled(seg.text, whole_text=not last, in_element=in_element)
        if held:
            more = self._spoken(seg, n, more)
        if self._echo_line and still_open and last:
            more = _before_lines(more, self._echo_line)
        if self._open_other and still_open and last:
            more = first_sentence(more)
        return more


_REORDERED: Final = "CF113"
"""The batch reader's note for chats listed out of order: its ``chats`` are sorted, not in arrival order."""
_CUT_OFF: Final = "CF720"
"""The batch reader's note for a mark left open at the very end, read as if it had come."""


def _mark_read_closed(batch: Reply, text: str) -> bool:
    """Whether ``batch`` read a mark left open at the end closed (``CF720``) where the whole reply may read it as text.

    A quote written as a JSON escape outside JSON (``\\"Remember…``): read closed, the quotation is dialogue and the
    backslash before it debris, dropped; once a sentence follows, the same backslash and quote are the text's own.
    A mark that closes on its own line or never (``"``, ``*``, ``(``, ``[``: ``_LINE_MARKS``), open from where it
    stands to the end of the text so far (``"Where did you leave the lantern?``): read closed, its text is a
    quotation (an action) without the mark; the line ended with it still open, the next line makes the mark the
    text's own (``CF706``), quote and all. Either way the reread of a prefix is unsure of the text from the mark.
    """
    for d in batch.diagnostics:
        if d.code != _CUT_OFF or d.offset is None or not 0 <= d.offset < len(text):
            continue
        if (d.offset > 0 and text[d.offset - 1] == "\\") or (
            text[d.offset] in _LINE_MARKS and not text[d.end or 0 :].strip()
        ):
            return True
    return False


_LINE_MARKS: Final = frozenset('"*([')
"""Marks the batch reader closes on their own line or never (``settle.open_mark``): one open when a line ends is
text."""


_ECHO_DROPPED: Final = frozenset({"CF622", "CF631"})
"""The batch reader's notes for chat-template scaffolding and the prompt's own lines echoed: dropped."""
_FIRST_FORM: Final = re.compile(r"[<＜]\s*user_chats?\s*[>＞]", re.IGNORECASE)


def _after_echo(batch: Reply, text: str) -> bool:
    """Whether the first request form of ``text`` stands after text that ``batch`` dropped, all of it, as scaffolding
    or as the prompt's own lines echoed (``<<SYS>>``, ``You are Corvin, who has kept…``): a transcript's opening."""
    form = _FIRST_FORM.search(text)
    if form is None or not text[: form.start()].strip():
        return False
    spans = [(d.offset, d.end) for d in batch.diagnostics if d.code in _ECHO_DROPPED and d.offset is not None]
    return all(ch.isspace() or any(a <= i < (b or 0) for a, b in spans) for i, ch in enumerate(text[: form.start()]))


def _synonyms(synonyms: Mapping[str, str], tags: Container[str]) -> frozenset[str]:
    """The names (and synonyms) of ``tags`` (those whose value is whole: an emotion), as a form's chat writes them."""
    return frozenset(w for w, tag in synonyms.items() if tag in tags)


_FORM_DROPPED: Final = "CF624"
"""The batch reader's note for a request form written before a JSON reply: dropped."""
_SCAFFOLDING: Final = "CF622"
_CUT_IN_STRING: Final = "CF610"


def _scaffolding_in_open_body(batch: Reply) -> bool:
    """Whether ``batch`` dropped chat-template scaffolding (``[INST]``) from a JSON reply cut off inside a string.

    The reply cut off is repaired, and the repair drops the scaffolding from the body; the same reply finished
    may be valid, its body read as it is, scaffolding and all: the reread of a prefix is unsure of that text.
    """
    codes = {d.code for d in batch.diagnostics}
    return _SCAFFOLDING in codes and _CUT_IN_STRING in codes


def _before_lines(text: str, lines: int) -> str:
    """``text`` less its last ``lines`` lines (``settle.before_last_line``, so many times)."""
    for _ in range(lines):
        text = before_last_line(text)
    return text


def _key_value_last(batch: Reply, whole: Container[str]) -> bool:
    """Whether ``batch`` is a reply in JSON whose last segment is a whole value (an emotion: a tag of ``whole``):
    given by a key (``{"mood":"bad",``), it may yet be the body's to give (``<emo>sad</emo>``, ``CF637``)."""
    chats = batch.chats
    last = chats[-1].segments if chats else []
    return batch.dialect in _JSON_OBJECTS and bool(last) and last[-1].tag in whole
