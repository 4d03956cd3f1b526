"""Sentences for text-to-speech: complete sentences from message deltas, as early as possible.

Splits after ``。！？…`` (Japanese, Chinese), after ``.!?`` followed by a space (not in
``3.5``), and at newlines; never inside quotes (「…」, "…", “…”). Each sentence keeps
the emotion that was active when it was spoken. Only decoded text reaches it: no markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from charfmt.events import ChatStart, Emotion, Event, Reset, SegmentEnd, TextDelta

_CJK_END: Final = frozenset("。！？…‼⁇⁈⁉")
_WESTERN_END: Final = frozenset(".!?")
_OPENERS: Final = {"「": "」", "『": "』", "“": "”", "（": "）", "(": ")"}
_CLOSERS: Final = frozenset("」』”）)\"'")


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence to speak."""

    text: str
    emotion: str | None
    chat: int
    segment: int

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {"text": self.text, "emotion": self.emotion, "chat": self.chat, "segment": self.segment}


@dataclass(slots=True)
class _Buffer:
    text: str = ""
    scanned: int = 0
    start: int = 0
    quotes: list[str] = field(default_factory=list)
    ascii_quote: bool = False


class SentenceSplitter:
    """Feed it events; it returns sentences as soon as each one is complete."""

    def __init__(self, *, tags: Iterable[str] = ("msg",)) -> None:
        self.tags = frozenset(tags)
        self._emotion: dict[int, str | None] = {}
        self._buffers: dict[tuple[int, int], _Buffer] = {}

    def feed(self, event: Event) -> list[Sentence]:
        """The sentences ``event`` completes."""
        if isinstance(event, ChatStart):
            self._emotion[event.chat] = None
        elif isinstance(event, Emotion):
            self._emotion[event.chat] = event.text
        elif isinstance(event, TextDelta) and event.tag in self.tags:
            buf = self._buffers.setdefault((event.chat, event.segment), _Buffer())
            buf.text += event.text
            return self._split(event.chat, event.segment, buf, final=False)
        elif isinstance(event, SegmentEnd):
            ended = self._buffers.pop((event.chat, event.segment), _Buffer())
            return self._split(event.chat, event.segment, ended, final=True)
        elif isinstance(event, Reset):
            self._emotion.clear()
            self._buffers.clear()
        return []

    def close(self) -> list[Sentence]:
        """Whatever is left (a stream that ended mid-sentence)."""
        out: list[Sentence] = []
        for (chat, segment), buf in sorted(self._buffers.items()):
            out += self._split(chat, segment, buf, final=True)
        self._buffers.clear()
        return out

    def _split(self, chat: int, segment: int, buf: _Buffer, *, final: bool) -> list[Sentence]:
        out: list[Sentence] = []
        text = buf.text
        i = buf.scanned
        n = len(text)
        while i < n:
            c = text[i]
            cut = -1
            if c in _OPENERS:
                buf.quotes.append(_OPENERS[c])
            elif (buf.quotes and c == buf.quotes[-1]) or (c == '"' and buf.ascii_quote):
                if c == '"':
                    buf.ascii_quote = False
                else:
                    buf.quotes.pop()
                if not buf.quotes and not buf.ascii_quote and i > 0 and text[i - 1] in _WESTERN_END | _CJK_END:
                    # 「聞いて！」 ends a sentence only if nothing continues it (「…」と言った。)
                    j = self._after_closers(text, i + 1)
                    if j >= n and not final:
                        if c == '"':  # undo: this closer is looked at again when more text comes
                            buf.ascii_quote = True
                        else:
                            buf.quotes.append(c)
                        break
                    if j >= n or text[j].isspace() or text[j] in _OPENERS or text[j] == '"':
                        cut = j
            elif c == '"':
                buf.ascii_quote = True
            elif c == "\n":
                cut = i
            elif not buf.quotes and not buf.ascii_quote:
                if c in _CJK_END:
                    cut = self._after_enders(text, i)
                elif c in _WESTERN_END:
                    j = self._after_enders(text, i)
                    if j >= n and not final:
                        break  # wait: "3." may become "3.5", "Hi." may get a quote
                    if c == "." and i > 0 and text[i - 1].isdigit() and j < n and text[j].isdigit():
                        cut = -1
                    elif j >= n or text[j].isspace():
                        cut = j
            if cut >= 0:
                self._emit(out, text[buf.start : cut], chat, segment)
                buf.start = cut + (1 if cut < n and text[cut] == "\n" else 0)
                i = max(cut, i + 1)
                continue
            i += 1
        buf.scanned = i
        if final:
            self._emit(out, text[buf.start :], chat, segment)
            buf.start = buf.scanned = n
        elif buf.start > 4096:
            buf.text, buf.scanned, buf.start = text[buf.start :], buf.scanned - buf.start, 0  # keep memory flat
        return out

    def _after_enders(self, text: str, i: int) -> int:
        while i < len(text) and (text[i] in _CJK_END or text[i] in _WESTERN_END):
            i += 1
        return self._after_closers(text, i)

    def _after_closers(self, text: str, i: int) -> int:
        while i < len(text) and text[i] in _CLOSERS and text[i] != '"':
            i += 1
        return i

    def _emit(self, out: list[Sentence], text: str, chat: int, segment: int) -> None:
        text = text.strip()
        if text:
            out.append(Sentence(text, self._emotion.get(chat), chat, segment))


def sentences(events: Iterable[Event], *, tags: Iterable[str] = ("msg",)) -> Iterator[Sentence]:
    """Complete sentences of the ``msg`` text in ``events``, each with its active emotion."""
    splitter = SentenceSplitter(tags=tags)
    for event in events:
        yield from splitter.feed(event)
    yield from splitter.close()
