"""Chats listed out of order stream well nested, whatever the chunking (trial 7, finding 3; docs/STREAMING.md).

A reply may list its chats otherwise than their ``order`` (``CF113``), with integer orders or
with string ones (``"order":"2"``, read as numbers: ``CF614``). The stream cannot know that a
chat with a lower order comes until it does, so it shows chats as they arrive; what
docs/STREAMING.md promises, checked here on every chunking of the cases of
``stream_orders.jsonl`` and on random replies and chunkings (hypothesis):

- a chat never opens inside another: each ``chat_start`` comes after the last chat's
  ``chat_end``, and a chat's segment events come between its own two;
- no ``Reset``: an order is no reason to take back what was shown;
- each chat's events (chats matched by ``order``) and ``collect(events)`` are the batch's
  (``parse(text, lenient=True)``);
- the chats come in arrival order while the stream reads the format (for every chunking);
  in a reply that left it, the chats shown before one out of order was met keep their arrival
  order and the rest follow in ``order`` (how many were shown depends on the chunks);
- a reply whose chats are listed in order streams the batch's chat events exactly, indices too.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from conftest import TESTS
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt.testing import chunkings

CASES: Final = [json.loads(line) for line in (TESTS / "stream_orders.jsonl").read_text("utf-8").splitlines()]


def _stream(chunks: list[str]) -> list[charfmt.Event]:
    parser = charfmt.StreamParser()
    events: list[charfmt.Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    return events


def assert_nested(events: list[charfmt.Event]) -> None:
    """At most one chat open at a time; a chat's own events inside its ``chat_start``/``chat_end``; each index once."""
    open_chat: int | None = None
    seen: set[int] = set()
    for n, event in enumerate(events):
        if isinstance(event, charfmt.Reset):
            open_chat, seen = None, set()
        elif isinstance(event, charfmt.ChatStart):
            assert open_chat is None, f"event {n}: chat {event.chat} opens inside chat {open_chat}"
            assert event.chat not in seen, f"event {n}: chat {event.chat} opens twice"
            open_chat = event.chat
            seen.add(event.chat)
        elif isinstance(event, charfmt.ChatEnd):
            assert event.chat == open_chat, f"event {n}: chat {event.chat} ends while {open_chat} is open"
            open_chat = None
        elif isinstance(event, (charfmt.DiagnosticEvent, charfmt.Dialect, charfmt.Reasoning)):
            continue
        else:
            assert event.chat == open_chat, f"event {n}: {event.kind} of chat {event.chat}, {open_chat} open"
    assert open_chat is None, f"chat {open_chat} never ends"


def _chat_events(events: list[charfmt.Event]) -> list[tuple[Any, ...]]:
    """The chats' events, adjacent text deltas of one segment merged (indices kept)."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, charfmt.ChatStart):
            out.append((event.kind, event.chat, event.type, event.order))
        elif isinstance(event, charfmt.TextDelta):
            last = out[-1] if out else None
            if last is not None and last[0] == "text" and last[1:3] == (event.chat, event.segment):
                out[-1] = (*last[:4], last[4] + event.text)
            else:
                out.append((event.kind, event.chat, event.segment, event.tag, event.text))
        elif isinstance(event, (charfmt.SegmentStart, charfmt.SegmentEnd)):
            out.append((event.kind, event.chat, event.segment, event.tag))
        elif isinstance(event, (charfmt.Emotion, charfmt.Action, charfmt.Cue)):
            out.append((event.kind, event.chat, event.segment, event.text))
        elif isinstance(event, charfmt.ChatEnd):
            out.append((event.kind, event.chat))
    return out


def _by_order(events: list[charfmt.Event]) -> dict[int, list[tuple[Any, ...]]]:
    """Each chat's events without its index, keyed by the chat's ``order``."""
    orders = {e.chat: e.order for e in events if isinstance(e, charfmt.ChatStart)}
    chats: dict[int, list[tuple[Any, ...]]] = {}
    for event in _chat_events(events):
        chats.setdefault(orders[event[1]], []).append((event[0], *event[2:]))
    return chats


def _check(text: str, chunks: list[str], arrival: list[int] | None, *, in_format: bool) -> None:
    events = _stream(chunks)
    assert_nested(events)
    assert not any(isinstance(e, charfmt.Reset) for e in events), "an order is no reason to take back what was shown"
    batch = charfmt.parse(text, lenient=True)
    batch_events = list(batch.events())
    assert _by_order(events) == _by_order(batch_events)
    got = charfmt.collect(events)
    assert got.chats == batch.chats
    assert sorted((d.offset, d.code) for d in got.diagnostics) == sorted((d.offset, d.code) for d in batch.diagnostics)
    assert got.dialect == batch.dialect
    if arrival is None:
        return  # cut off: which chats arrived is the batch reader's to say
    shown = [e.order for e in events if isinstance(e, charfmt.ChatStart)]
    if in_format:
        assert shown == arrival, "in the format, chats come as they arrive"
    else:
        splits = [arrival[:k] + sorted(arrival[k:]) for k in range(len(arrival) + 1)]
        assert shown in splits, f"{shown}: neither arrival order {arrival} nor arrival then sorted"
    if arrival == sorted(arrival):
        assert _chat_events(events) == _chat_events(batch_events)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_chunk_size_streams_the_cases_well_nested(case: dict[str, Any]) -> None:
    text = case["text"]
    for size in range(1, len(text) + 1):
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        _check(text, chunks, case["arrival"], in_format=case.get("in_format", False))


_BODIES: Final = st.sampled_from(
    [
        "<msg>Hi!</msg>",
        "<emo>joy</emo>\n<msg>Well met.</msg>",
        "<act>waves</act>\n<msg>Over here!</msg>",
        "<msg>A</msg>",
    ],
)
_WRAPPERS: Final = {"object": ('{"chats":[', "]}"), "array": ("[", "]"), "prose first": ('Sure!\n{"chats":[', "]}")}


Reply = tuple[str, list[int] | None, bool]
"""A reply's text, its chats' orders as listed (``None``: cut off, some may be lost), whether it is in the format."""


@st.composite
def _replies(draw: st.DrawFn) -> Reply:
    """A reply of 2-4 chats whose orders (some written as strings) may be listed in any order; perhaps cut off."""
    count = draw(st.integers(2, 4))
    orders = draw(st.permutations(draw(st.lists(st.integers(1, 6), min_size=count, max_size=count, unique=True))))
    quoted = [draw(st.booleans()) and draw(st.booleans()) for _ in orders]
    chats = [
        f'{{"type":"C","order":{json.dumps(str(o) if q else o)},"body":{json.dumps(draw(_BODIES))}}}'
        for o, q in zip(orders, quoted, strict=True)
    ]
    wrapper = draw(st.sampled_from(sorted(_WRAPPERS)))
    start, end = _WRAPPERS[wrapper]
    text = start + ",".join(chats) + end
    if draw(st.booleans()) and draw(st.booleans()):
        return text[: draw(st.integers(len(text) // 3, len(text) - 1))], None, False
    return text, list(orders), wrapper == "object" and not any(quoted)


@given(_replies().flatmap(lambda r: chunkings(r[0]).map(lambda chunks: (r, chunks))))
def test_chats_in_any_order_stream_well_nested_on_any_chunking(case: tuple[Reply, list[str]]) -> None:
    (text, arrival, in_format), chunks = case
    _check(text, chunks, arrival, in_format=in_format)
