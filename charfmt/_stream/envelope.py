"""The stream reader's states in the JSON around the bodies: ``{"chats": [``, chat headers, ``,``, ``]``, ``}``.

Text before the reply (prose, a fence, the model's reasoning) is skipped, and kept (bounded)
to read its reasoning once the reply begins; an envelope written inside the reasoning is
part of it. A header is read whole, up to its body's opening quote, however the chunks cut it.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt.events import Reasoning
from charfmt.parser import parse
from charfmt.tags import CHAT_TYPES, TAGGED_TYPES, TEXT_TAG, TYPE_ALIASES

from .chats import NO_CHAT, OpenChat
from .language import (
    BODY_KEY,
    ENVELOPE_MAX,
    HEADER_MATCH,
    HEADER_QUOTES,
    HEADER_WRITTEN_MATCH,
    KEY_FULLMATCH,
    NO_CLOSER,
    ORDER_DIGITS_MAX,
    SPEAKER_CUT,
    STAND_IN_REPLY,
    TOP_CUT,
    TOP_RE,
)
from .state import DONE, END, LIST, OPEN, SEP, TEXT, ChatEnd, Held, State

_BLANK: Final = " \t\n\r"
"""JSON whitespace, which the envelope allows between its tokens."""
_MISSING_SHOWN: Final = 10
"""How many missing orders CF112 names."""


def _blank_end(s: str, i: int) -> int:
    """Where the run of JSON whitespace at ``s[i]`` ends (a run is short)."""
    j = i + 1
    n = len(s)
    while j < n and s[j] in _BLANK:
        j += 1
    return j


class Envelope(State):
    """The envelope's states (each takes the input ``s`` at ``i``; see ``StreamParser``'s table)."""

    __slots__ = ()

    def _top(self, s: str, i: int) -> int:
        """Before the reply: ``{"chats": [``, or text skipped before it."""
        if s[i] in _BLANK:
            j = _blank_end(s, i)
            self._skip(s[i:j])
            return j
        m = TOP_RE.search(s, i)
        if m is None:
            # Prose, a fence, reasoning before the reply: skipped (the batch reader reports
            # it), unless the reread shows a reply in it.
            j = s.rfind("{", i)
            cut = j >= 0 and TOP_CUT.match(s, j) is not None
            if not cut or j > i:
                self._repair()
            self._skip(s[i : j if cut else len(s)])
            return self._stall(s, j, ENVELOPE_MAX) if cut else len(s)
        if self._inside_reasoning(s[i : m.start()]):
            # An envelope written inside the model's reasoning (<think>…{"chats": […) is
            # part of the reasoning: skipped, as the batch reader skips it.
            self._repair()
            self._skip(s[i : m.end()])
            return m.end()
        if m.start() > i:
            self._repair()
            self._skip(s[i : m.start()])
        self._preamble_reasoning()
        self._chats_at = self._here(s, m.end() - 1)
        self._state = LIST
        return m.end()

    def _list(self, s: str, i: int) -> int:
        """Where a chat may start: its header, or the list's end (after a comma: a trailing comma)."""
        c = s[i]
        if c in _BLANK:
            return _blank_end(s, i)
        if c == "]":
            return self._list_end(i)
        if c != "{":
            raise Held
        if s.count('"', i) < HEADER_QUOTES:
            if s.find('"body"', i) >= 0 and BODY_KEY.search(s, i) is not None:
                # The body began before "type" and "order" were both written (one is
                # missing): no header; the rereads show what they settle.
                raise Held
            return self._stall(s, i, ENVELOPE_MAX, '"')
        m = HEADER_WRITTEN_MATCH(s, i) or HEADER_MATCH(s, i)
        if m is None and SPEAKER_CUT.match(s, i) is not None:
            return self._stall(s, i, ENVELOPE_MAX, '"')  # a scene's header, cut in its speaker
        if m is None:
            # All the quotes a header holds are here: more text cannot make it one.
            # Other keys, another order (a dialect): the rereads show what they settle.
            raise Held
        self._chat_begins(m)
        return m.end()

    def _brace(self, s: str, i: int) -> int:
        """After a body's closing quote (``CHAT_END``) or the list (``END``): the ``}`` closing the chat or reply."""
        c = s[i]
        if c in _BLANK:
            return _blank_end(s, i)
        if c != "}":
            raise Held
        if self._state == END:
            self._state = DONE
            return i + 1
        chat = self._chat
        del self._chats[chat.index]
        self._out.append(ChatEnd(chat.index))
        self._chat = NO_CHAT
        self._state = SEP
        return i + 1

    def _sep(self, s: str, i: int) -> int:
        """After a chat: ``,`` or the list's end."""
        c = s[i]
        if c in _BLANK:
            return _blank_end(s, i)
        if c == ",":
            self._state = LIST
            return i + 1
        if c == "]":
            return self._list_end(i)
        raise Held

    def _done(self, s: str, i: int) -> int:
        """After the reply: text after it is damage the batch reader decides at ``close()``."""
        if s[i] in _BLANK:
            return _blank_end(s, i)
        self._repair()
        return len(s)

    def _list_end(self, i: int) -> int:
        """The ``]`` at ``i`` ends the list of chats."""
        if self._state == LIST and self._count:
            self._repair()  # a trailing comma
        self._chats_end = self._base + i + 1
        self._state = END
        return i + 1

    def _chat_begins(self, m: re.Match[str]) -> None:
        """A chat header, read whole (``HEADER_WRITTEN`` or ``HEADER``): its body begins."""
        kind, order_text = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(4), m.group(3))
        if kind not in CHAT_TYPES:
            kind = TYPE_ALIASES[kind.lower()]
            self._repair()  # a chat type the batch reader reads as C, I or E (CF613)
        if len(order_text) > ORDER_DIGITS_MAX:
            raise Held
        order = int(order_text)
        if order in self._orders:
            raise Held  # a repeated order: the batch reader renumbers it
        speaker: str | None = m.group("speaker")
        if speaker is not None and KEY_FULLMATCH(speaker) is None:
            raise Held  # not a name (spaces around it, markup): the batch reader reports it
        chat = self._chat = self._chats[self._count] = OpenChat(self._count, kind, order, speaker=speaker)
        self._count += 1
        self._orders.add(order)
        self._unsorted = self._unsorted or order < self._last_order
        self._last_order = order
        if kind in TAGGED_TYPES:
            self._state = OPEN
        else:
            chat.segment, chat.tag, self._closer = 0, TEXT_TAG, NO_CLOSER
            self._state, self._streams = TEXT, True

    def _order_warnings(self) -> None:
        """What strict parsing says about orders (CF112, CF113), now that all are known."""
        orders = self._orders
        if not len(orders):
            return
        at, end = self._chats_at, self._chats_end
        if orders.top != len(orders):
            missing = orders.missing(_MISSING_SHOWN)
            shown = ", ".join(map(str, missing)) + (" …" if len(missing) == _MISSING_SHOWN else "")
            self._diagnostic("CF112", f"orders are not 1..{len(orders)}: {shown} missing", at, end, None)
        if self._unsorted:
            message = "chats are not listed in order; they are presented sorted by order"
            self._diagnostic("CF113", message, at, end, None)

    # -- what comes before the reply --------------------------------------------------------------
    def _skip(self, text: str) -> None:
        """Keep text skipped before the reply (bounded): it may hold the model's reasoning."""
        if self._preamble is not None and text:
            self._preamble.append(text)
            self._preamble_size += len(text)  # (a running sum: summing the list each time is quadratic)
            if self._preamble_size > ENVELOPE_MAX * 64:
                self._preamble = None  # too long to reread here: close() reports the reasoning

    def _inside_reasoning(self, tail: str) -> bool:
        """Whether the text skipped so far, then ``tail``, ends inside an open reasoning block."""
        if self._preamble is None:
            return False
        tags = [m.group() for m in self._lang.reasoning.finditer("".join(self._preamble) + tail)]
        return bool(tags) and "/" not in tags[-1]

    def _preamble_reasoning(self) -> None:
        """The reply begins: the reasoning written before it is settled, so it streams now, before the chats."""
        preamble, self._preamble = self._preamble, None
        if not preamble:
            return
        text = "".join(preamble)
        if not text.strip():
            return
        # Read as what it is, text before a reply: alone, <think> would read as a bare-tag reply.
        reasoning = parse(
            text + STAND_IN_REPLY, lenient=True, vocabulary=self.vocabulary, **self._batch_kwargs()
        ).reasoning
        shown = self._reasoning  # what a reread already showed of it
        if reasoning and len(reasoning) > len(shown) and reasoning.startswith(shown):
            self._out.append(Reasoning(reasoning[len(shown) :]))
            self._reasoning = reasoning
