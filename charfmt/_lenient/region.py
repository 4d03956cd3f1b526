"""Where the reply stands: special tokens, the model's reasoning and headings set aside before it.

``REGION_STEPS`` is an ordered table of named steps, run in order over one ``Region``; a
step that returns ``True`` ends the walk. A reasoning tag is the model's reasoning only
where it stands before the reply: before the JSON, or, in a reply without JSON, first and
followed by the reply. Inside a tag-soup reply ``<thought>`` is the format's own element.
One pass: each search starts where the last one ended.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Final

from charfmt import _control_strings as cs
from charfmt._lenient.marks import HARMONY_END, HARMONY_HEADER, HARMONY_ROLE
from charfmt._lenient.state import Recovery
from charfmt.tags import REASONING_TAGS

_REASONING_OPEN: Final = re.compile(r"<\s*(" + "|".join(sorted(REASONING_TAGS)) + r")\s*>", re.I)
_REASONING_CLOSE: Final = re.compile(r"<\s*/\s*(" + "|".join(sorted(REASONING_TAGS)) + r")\s*>", re.I)
_HEADING: Final = re.compile(
    r"^[ \t]*+(?:#{1,6}[ \t]*+|\*\*)?(?:thinking|thoughts?|reasoning|analysis|思考)(?:\*\*)?[ \t]*+:?[ \t]*+$",
    re.I | re.M,
)
_ANSWER_HEADING: Final = re.compile(
    r"^[ \t]*+(?:#{1,6}[ \t]*+|\*\*)?(?:answer|response|reply|final(?: answer)?|output|回答)(?:\*\*)?[ \t]*+:?[ \t]*+$",
    re.I | re.M,
)
_NON_SPACE: Final = re.compile(r"\S")
_ELEMENT_OPEN: Final = re.compile(r"[<＜]\s*+([A-Za-z][\w.\-]*+)[^<>＜＞/]*+[>＞]")


class Region:
    """The part of the text the reply stands in, narrowed step by step.

    ``json``: looking for a JSON reply (else the text itself is the reply); ``first``: the
    first '{' or '[' at or after ``start`` (``end`` when ``json`` is False).
    """

    __slots__ = ("end", "first", "json", "start", "text")

    def __init__(self, text: str, *, json: bool, start: int, end: int) -> None:
        self.text = text
        self.json = json
        self.start = start
        self.end = end
        self.first = 0


RegionStep = Callable[[Recovery, Region], bool]


def reply_region(state: Recovery, *, json: bool) -> tuple[int, int]:
    """Set aside special tokens, reasoning and headings around the reply; the region left."""
    text = state.source.text
    region = Region(text, json=json, start=0, end=len(text))
    for _name, step in REGION_STEPS:
        if step(state, region):
            break
    return region.start, region.end


def _channels(state: Recovery, region: Region) -> bool:
    """The model's channels other than ``final`` (``<|channel|>analysis<|message|>…``): reasoning, and the
    reply is the final message. Without one (the reply cut off in the analysis, or written after its
    ``<|end|>`` with no header), the reply stands after the last message's end: an analysis cut off is all
    reasoning, never speech."""
    text = region.text
    if cs.HARMONY_CHANNEL not in text:  # (every header holds it: a literal's test, not a scan at every character)
        return False
    headers = list(HARMONY_HEADER.finditer(text))
    if not headers:
        return False
    finals = [h for h in headers if h.group("channel").casefold() == cs.HARMONY_FINAL]
    final = finals[-1] if finals else None
    stop = len(text)
    for header in headers:
        if final is not None and header.start() >= final.start():
            break
        closer = HARMONY_END.search(text, header.end())
        end = closer.start() if closer is not None else _before_cut_marker(text)
        if final is not None:
            end = min(end, final.start())
        state.keep_reasoning(text[header.end() : end])
        stop = closer.end() if closer is not None else len(text)  # (the last message's end: the reply after it)
    if final is not None:
        stop = final.end()
    elif (after := HARMONY_HEADER.match(text, stop) or HARMONY_ROLE.match(text, stop)) is not None:
        stop = after.end()
    state.note("CF603", "the model's reasoning channels (analysis) are kept apart as reasoning", 0, stop)
    region.start = stop
    return False


_HARMONY_MARKERS: Final = (*cs.HARMONY_ENDS, cs.HARMONY_START, cs.HARMONY_CHANNEL)


def _before_cut_marker(text: str) -> int:
    """Where ``text`` ends, less a harmony marker it ends inside (``…plan.<|en``: the marker being written)."""
    for k in range(min(len(text), max(map(len, _HARMONY_MARKERS)) - 1), 0, -1):
        if any(marker.startswith(text[-k:]) for marker in _HARMONY_MARKERS):
            return len(text) - k
    return len(text)


def _chat_before_json(state: Recovery, region: Region) -> bool:
    """``<thought>…</thought><msg>…</msg>{…}``: a chat stands before the JSON, so nothing before it is reasoning."""
    region.first = state.json_start(region.start, region.end) if region.json else region.end
    return region.json and has_elements(state, region.text, region.start, region.first)


def _reasoning_tags(state: Recovery, region: Region) -> bool:
    """``<think>…</think>`` (or left open) before the reply: kept apart as reasoning."""
    text, end = region.text, region.end
    while True:
        if region.first < end:
            m = _REASONING_OPEN.search(text, region.start, region.first)
        else:
            m = _REASONING_OPEN.match(text, state.skip_space(region.start))
            if m is not None and m.group(1).lower() in state.tags:
                m = None  # <thought> opening a reply without JSON is its first element
        if m is None:
            return False
        close = _reasoning_close(m.group(1)).search(text, m.end())
        if region.first >= end and (close is None or not _NON_SPACE.search(text, close.end())):
            return False  # no reply follows: it is the reply's own (thought) element
        stop = close.end() if close is not None else region.first
        state.drop(region.start, m.start())
        state.keep_reasoning(text[m.end() : close.start() if close is not None else region.first])
        state.note("CF603", f"reasoning <{m.group(1)}> kept apart as reasoning, never shown", m.start(), stop)
        region.start = stop
        if region.first < region.start:
            region.first = state.json_start(region.start, end) if region.json else end


def _orphan_closer(state: Recovery, region: Region) -> bool:
    """``thinking…</think>`` with no opener: everything before the last closer is reasoning."""
    text, start, first, end = region.text, region.start, region.first, region.end
    orphan = None
    for found in _REASONING_CLOSE.finditer(text, start, first):
        orphan = found  # the last closer before the JSON
    if (
        orphan is not None
        and (first < end or orphan.group(1).lower() not in state.tags)
        and _NON_SPACE.search(text, orphan.end())
        and not _REASONING_OPEN.search(text, 0, orphan.start())
    ):
        stop = orphan.end()
        state.keep_reasoning(text[start : orphan.start()])
        message = f"everything before the orphan </{orphan.group(1)}> is reasoning, kept apart"
        state.note("CF603", message, start, stop)
        region.start = stop
    return False


def _reasoning_heading(state: Recovery, region: Region) -> bool:
    """A *Thinking* section first (up to an *Answer* heading, or the JSON): kept apart as reasoning."""
    text, start, end = region.text, region.start, region.end
    heading = _HEADING.search(text, start)
    if heading and not text[start : heading.start()].strip():
        answer = _ANSWER_HEADING.search(text, heading.end())
        stop = answer.end() if answer else state.json_start(heading.end(), end)
        state.keep_reasoning(text[heading.end() : answer.start() if answer else stop])
        state.note("CF603", "a reasoning section is kept apart as reasoning, never shown", heading.start(), stop)
        region.start = stop
    return False


REGION_STEPS: Final[tuple[tuple[str, RegionStep], ...]] = (
    ("channels", _channels),
    ("chat before the JSON", _chat_before_json),
    ("reasoning tags", _reasoning_tags),
    ("orphan reasoning closer", _orphan_closer),
    ("reasoning heading", _reasoning_heading),
)
"""What is set aside before the reply, in order (see the module docstring)."""


def has_elements(state: Recovery, text: str, start: int = 0, at: int | None = None) -> bool:
    """Whether ``text`` (from ``start`` to ``at``) holds an element of the format that is no reasoning tag."""
    found = _ELEMENT_OPEN.finditer(text, start, len(text) if at is None else at)
    names = {m.group(1).lower() for m in found}
    return any(name in state.tags.synonyms and name not in REASONING_TAGS for name in names)


@functools.lru_cache(maxsize=16)
def _reasoning_close(name: str) -> re.Pattern[str]:
    """The closer of reasoning tag ``name``, any case and spacing."""
    return re.compile(r"<\s*/\s*" + re.escape(name) + r"\s*>", re.I)
