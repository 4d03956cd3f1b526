"""Streaming: for any input and any chunking, the events rebuild exactly the batch result."""

from __future__ import annotations

import asyncio
import json
import random
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import AnyStr

import pytest
from conftest import MARK, load_cases
from hypothesis import given
from hypothesis import strategies as st
from test_lenient import CASES as LENIENT_CASES
from test_lenient import _mutate

import charfmt
from charfmt.testing import replies

INVALID = [c.input.replace(MARK, "") for c in load_cases("invalid.txt")]
DAMAGED = [c.input for c in LENIENT_CASES]


def _chunks(text: AnyStr, cuts: list[int]) -> list[AnyStr]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def _stream(chunks: list[str] | list[bytes], **kwargs: object) -> list[charfmt.Event]:
    parser = charfmt.StreamParser(**kwargs)  # type: ignore[arg-type]
    events: list[charfmt.Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    assert parser.reply == charfmt.collect(events)
    return events


def _same(events: list[charfmt.Event], batch: charfmt.Reply) -> None:
    got = charfmt.collect(events)
    assert got.chats == batch.chats
    assert sorted(d.code for d in got.diagnostics) == sorted(d.code for d in batch.diagnostics)


@given(replies(), st.lists(st.integers(0, 10_000), max_size=40), st.sampled_from([None, 2]))
def test_valid_replies_stream_without_holding(reply: charfmt.Reply, cuts: list[int], indent: int | None) -> None:
    text = charfmt.dumps(reply, indent=indent)
    events = _stream(_chunks(text, cuts))
    _same(events, charfmt.parse(text, lenient=True))
    assert not any(isinstance(e, charfmt.Reset) for e in events)


@given(replies())
def test_one_character_chunks(reply: charfmt.Reply) -> None:
    text = charfmt.dumps(reply)
    _same(_stream(list(text)), charfmt.parse(text, lenient=True))


@given(replies(), st.lists(st.integers(0, 10_000), max_size=40))
def test_bytes_split_anywhere_even_inside_a_character(reply: charfmt.Reply, cuts: list[int]) -> None:
    data = charfmt.dumps(reply).encode()
    chunks = _chunks(data, cuts)
    _same(_stream(chunks), charfmt.parse(data, lenient=True))


@given(replies(), st.randoms(use_true_random=False), st.lists(st.integers(0, 10_000), max_size=30))
def test_damaged_replies_stream_to_the_batch_result(reply: charfmt.Reply, rnd: random.Random, cuts: list[int]) -> None:
    text = _mutate(charfmt.dumps(reply), rnd)
    _same(_stream(_chunks(text, cuts)), charfmt.parse(text, lenient=True))


@pytest.mark.parametrize("text", INVALID + DAMAGED)
def test_every_case_file_input_streams_to_the_batch_result(text: str) -> None:
    rnd = random.Random(len(text))
    cuts = [rnd.randint(0, len(text)) for _ in range(12)]
    _same(_stream(_chunks(text, cuts)), charfmt.parse(text, lenient=True))
    _same(_stream(list(text)), charfmt.parse(text, lenient=True))


@given(st.text(max_size=200), st.lists(st.integers(0, 400), max_size=10))
def test_random_text_streams_to_the_batch_result(text: str, cuts: list[int]) -> None:
    _same(_stream(_chunks(text, cuts)), charfmt.parse(text, lenient=True))


@given(replies().filter(lambda r: bool(r.chats)), st.integers(0, 10_000), st.lists(st.integers(0, 10_000), max_size=20))
def test_a_stream_cut_off_keeps_the_partial_text_like_the_batch(
    reply: charfmt.Reply, stop: int, cuts: list[int]
) -> None:
    text = charfmt.dumps(reply)
    text = text[: stop % len(text)]
    events = _stream(_chunks(text, cuts))
    _same(events, charfmt.parse(text, lenient=True))
    assert not any(isinstance(e, charfmt.Reset) for e in events)


def test_deltas_never_hold_a_fragment_of_a_tag_entity_or_escape() -> None:
    body = "<emo>joy</emo>\\n<msg>a &amp; b \\u3042\\ud83d\\ude00 &lt;c&gt;</msg>"
    text = '{"chats":[{"type":"C","order":1,"body":"' + body + '"}]}'
    for size in range(1, 12):
        events = _stream([text[i : i + size] for i in range(0, len(text), size)])
        deltas = [e.text for e in events if isinstance(e, charfmt.TextDelta)]
        assert "".join(deltas) == "a & b あ😀 <c>"
        for d in deltas:  # each delta is decided text: no piece of "&amp;", "\\u3042" or "</msg>"
            assert not any(piece in d for piece in ("amp", "lt;", "gt;", "\\", "u30", "ud8", "</", "/m"))


def test_emotion_is_emitted_once_when_complete() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>surprise</emo>\\n<msg>Hi</msg>"}]}'
    parser = charfmt.StreamParser()
    seen = []
    for ch in text:
        seen.extend(e for e in parser.feed(ch) if isinstance(e, charfmt.Emotion))
        if "</emo>" in text[: text.index(ch)]:
            break
    assert [e.text for e in seen] == ["surprise"]


def test_out_of_order_chats_keep_their_order_and_the_reply_is_sorted() -> None:
    text = '{"chats":[{"type":"I","order":2,"body":"second"},{"type":"C","order":1,"body":"<msg>first</msg>"}]}'
    events = _stream([text])
    starts = [(e.chat, e.order) for e in events if isinstance(e, charfmt.ChatStart)]
    assert starts == [(0, 2), (1, 1)]  # arrival order, each with its order
    reply = charfmt.collect(events)
    assert [c.order for c in reply.chats] == [1, 2]
    assert [d.code for d in reply.diagnostics] == ["CF113"]


def test_repairs_the_batch_reader_makes_the_same_way_stream_through_and_are_reported_at_close() -> None:
    text = (
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hello there</msg>"},'
        '{"type":"c","order":2,"body":"<EMO>sad</EMO><MSG>shout</MSG>"},]}'
    )
    parser = charfmt.StreamParser()
    early = []
    for i in range(0, len(text), 5):
        early.extend(parser.feed(text[i : i + 5]))
    assert "".join(e.text for e in early if isinstance(e, charfmt.TextDelta)) == "Hello thereshout"
    assert [e.text for e in early if isinstance(e, charfmt.Emotion)] == ["joy", "sad"]
    late = parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in late)
    codes = {e.diagnostic.code for e in late if isinstance(e, charfmt.DiagnosticEvent)}
    assert {"CF613", "CF704", "CF701"} <= codes
    _same(early + late, charfmt.parse(text, lenient=True))


def test_damage_streams_up_to_the_damage_then_completes_at_close() -> None:
    text = (
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hello there</msg>"},'
        '{"type":"C","order":2,"body":"<msg>shout</emo>\\n<msg>again</msg>"}]}'
    )
    parser = charfmt.StreamParser()
    early = []
    for i in range(0, len(text), 5):
        early.extend(parser.feed(text[i : i + 5]))
    assert "".join(e.text for e in early if isinstance(e, charfmt.TextDelta)).startswith("Hello there")
    late = parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in late)
    _same(early + late, charfmt.parse(text, lenient=True))


def test_strict_stream_raises_at_close_on_invalid_input() -> None:
    parser = charfmt.StreamParser(lenient=False)
    parser.feed('{"chats":[{"type":"C","order":1,"body":"<msg>hi</act>"}]}')
    with pytest.raises(charfmt.ParseError, match="CF205"):
        parser.close()


def test_vocabulary_decisions_stream_like_the_batch() -> None:
    vocab = charfmt.Vocabulary(emotions=[{"key": "joy", "aliases": ["happy"]}])
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>Happy</emo>\\n<msg>x</msg>"}]}'
    events = _stream(list(text), vocabulary=vocab)
    batch = charfmt.parse(text, lenient=True, vocabulary=vocab)
    _same(events, batch)
    streamed = next(e.diagnostic for e in events if isinstance(e, charfmt.DiagnosticEvent))
    assert (streamed.code, streamed.offset, streamed.line, streamed.column) == (
        batch.diagnostics[0].code, batch.diagnostics[0].offset, batch.diagnostics[0].line, batch.diagnostics[0].column,
    )  # fmt: skip


def test_iter_and_aiter_events() -> None:
    demo = Path(charfmt.__path__[0]) / "data" / "demo_reply.json"
    text = charfmt.dumps(charfmt.parse(demo.read_text(encoding="utf-8")))
    chunks = [text[i : i + 7] for i in range(0, len(text), 7)]
    assert charfmt.collect(charfmt.iter_events(chunks)).chats == charfmt.parse(text).chats

    async def source() -> AsyncIterator[str]:
        for c in chunks:
            yield c

    async def run() -> list[charfmt.Event]:
        return [e async for e in charfmt.aiter_events(source())]

    assert charfmt.collect(asyncio.run(run())).chats == charfmt.parse(text).chats


def test_events_are_json_ready() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>"}]}'
    for event in _stream([text]):
        assert json.loads(json.dumps(event.to_dict()))["kind"] == event.kind


def test_keep_reply_false_keeps_no_reply_and_still_completes() -> None:
    parser = charfmt.StreamParser(keep_reply=False)
    events = parser.feed('{"chats":[{"type":"C","order":1,"body":"<MSG>x</MSG>"}]}') + parser.close()
    assert (
        charfmt.collect(events).chats == charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<msg>x</msg>"}]}').chats
    )
    with pytest.raises(ValueError):
        _ = parser.reply


# -- incremental: valid input is shown as it arrives, not completed at close ------------------------
ORDER_WARNINGS = {"CF112", "CF113"}  # decided only once every order is known


def _close_adds_nothing(chunks: list[str] | list[bytes], **kwargs: object) -> list[charfmt.Event]:
    """Stream ``chunks``; assert ``close()`` has nothing left to add but the order warnings."""
    parser = charfmt.StreamParser(**kwargs)  # type: ignore[arg-type]
    events: list[charfmt.Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    late = parser.close()
    assert all(isinstance(e, charfmt.DiagnosticEvent) and e.diagnostic.code in ORDER_WARNINGS for e in late), late
    return events + late


def _serialized(reply: charfmt.Reply, *, ensure_ascii: bool, escape_slash: bool) -> str:
    """``reply`` as other JSON writers put it: \\uXXXX escapes (surrogate pairs too), '\\/' for '/'."""
    text = json.dumps(json.loads(charfmt.dumps(reply)), ensure_ascii=ensure_ascii)
    return text.replace("/", "\\/") if escape_slash else text


@given(
    replies(), st.lists(st.integers(0, 10_000), max_size=40), st.sampled_from([None, 2]), st.booleans(), st.booleans()
)
def test_valid_replies_stream_completely_before_close(
    reply: charfmt.Reply, cuts: list[int], indent: int | None, ensure_ascii: bool, escape_slash: bool
) -> None:
    other = _serialized(reply, ensure_ascii=ensure_ascii, escape_slash=escape_slash)
    for text in (charfmt.dumps(reply, indent=indent), other):
        events = _close_adds_nothing(_chunks(text, cuts))
        _same(events, charfmt.parse(text, lenient=True))


@given(replies(), st.lists(st.integers(0, 10_000), max_size=40))
def test_valid_bytes_stream_completely_before_close(reply: charfmt.Reply, cuts: list[int]) -> None:
    data = charfmt.dumps(reply).encode()
    chunks = _chunks(data, cuts)
    _same(_close_adds_nothing(chunks), charfmt.parse(data, lenient=True))


@given(st.text(st.characters(exclude_categories=("Cs", "Cc"), exclude_characters='<&"\\'), min_size=1, max_size=30))
def test_each_plain_character_is_emitted_by_the_feed_that_brings_it(message: str) -> None:
    for head, tail in (
        ('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>', '</msg>"}]}'),
        ('{"chats":[{"order":1,"type":"I","body":"', '"}]}'),
    ):
        parser = charfmt.StreamParser()
        for ch in head:
            parser.feed(ch)
        for ch in message:
            assert [e.text for e in parser.feed(ch) if isinstance(e, charfmt.TextDelta)] == [ch]
        for ch in tail:
            assert not [e for e in parser.feed(ch) if isinstance(e, charfmt.TextDelta)]
        assert not parser.close()


def test_markup_written_as_json_escapes_completes_at_close() -> None:
    body = "\\u003cmsg\\u003eHi\\u003c/msg\\u003e"  # '<msg>Hi</msg>', every markup character escaped
    text = '{"chats":[{"type":"C","order":1,"body":"' + body + '"}]}'
    for size in (1, 3, len(text)):
        events = _stream([text[i : i + size] for i in range(0, len(text), size)])
        _same(events, charfmt.parse(text, lenient=True))
        assert charfmt.collect(events).chats[0].segments[0].text == "Hi"


def test_long_whitespace_in_a_chat_header_still_gives_the_batch_result() -> None:
    text = '{"chats":[{"type":"C",' + " " * 10_000 + '"order":1,"body":"<msg>Hi</msg>"}]}'
    for size in (4, 5_000):
        _same(_stream([text[i : i + size] for i in range(0, len(text), size)]), charfmt.parse(text, lenient=True))


# -- max_size: memory stays flat on long streams ----------------------------------------------------
def _long_reply(chats: int) -> str:
    body = "<emo>joy</emo>\\n<msg>" + "わあ、本当ですか！ That is great. " * 8 + "</msg>"
    return '{"chats":[' + ",".join(f'{{"type":"C","order":{n},"body":"{body}"}}' for n in range(1, chats + 1)) + "]}"


def test_a_valid_stream_longer_than_max_size_streams_with_flat_memory() -> None:
    text = _long_reply(4_000)  # about 1.2 MB
    chunks = [text[i : i + 64] for i in range(0, len(text), 64)]
    tracemalloc.start()
    try:
        parser = charfmt.StreamParser(keep_reply=False, max_size=1 << 16)
        count = sum(len(parser.feed(chunk)) for chunk in chunks) + len(parser.close())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count > 4_000 * 5
    assert peak < 400_000, peak  # the text read (1.2 MB) is not kept


def test_damage_past_max_size_is_reported_not_repaired() -> None:
    text = _long_reply(300)
    damaged = text[:-2] + ',{"type":"C","order":301,"body":"<MSG>shout</MSG>"}]}'
    events = _stream([damaged[i : i + 100] for i in range(0, len(damaged), 100)], max_size=50_000)
    reply = charfmt.collect(events)
    assert len(reply.chats) == 300  # every chat before the damage was streamed
    cf801 = [d for d in reply.diagnostics if d.code == "CF801"]
    assert len(cf801) == 1 and cf801[0].offset == damaged.index("<MSG>")  # where the input left the format
    assert cf801[0].line == 1 and cf801[0].column == cf801[0].offset + 1
    # Within max_size the same damage is repaired like the batch parser does.
    _same(_stream([damaged[i : i + 100] for i in range(0, len(damaged), 100)]), charfmt.parse(damaged, lenient=True))
    strict = charfmt.StreamParser(lenient=False, max_size=50_000)
    for i in range(0, len(damaged), 100):
        strict.feed(damaged[i : i + 100])
    with pytest.raises(charfmt.ParseError, match="CF801"):
        strict.close()


def _observed_reply(reply: charfmt.Reply) -> tuple[object, ...]:
    diagnostics = sorted((d.offset, d.end, d.code, d.message, d.line, d.column, d.chat) for d in reply.diagnostics)
    return reply.chats, diagnostics, reply.dialect


def _damaged_long(size: int, words: str = "ずっと続く。") -> str:
    """A reply that leaves the format early (an upper-case tag) and then goes on for ``size`` characters."""
    head = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>前</msg>"},'
    tail = '{"type":"C","order":2,"body":"<MSG>'
    filler = words * (size // len(words) + 1)
    return head + tail + filler[: max(0, size - len(head) - len(tail) - 10)] + '</MSG>"}]}'


@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_damaged_stream_longer_than_max_size_gives_the_batch_result(as_bytes: bool) -> None:
    text = _damaged_long(30_000)
    data: str | bytes = text.encode() if as_bytes else text
    limit = len(data)
    for max_size, oversize in ((limit, False), (limit - 1, True)):
        batch = charfmt.parse(data, lenient=True, max_size=max_size)
        assert ("CF002" in {d.code for d in batch.diagnostics}) == oversize
        for size in (1, 7, 4096):
            chunks = [data[i : i + size] for i in range(0, len(data), size)]
            events = _stream(chunks, max_size=max_size)
            assert _observed_reply(charfmt.collect(events)) == _observed_reply(batch)
            if oversize:  # what was shown before the damage is taken back, as the batch shows nothing
                assert any(isinstance(e, charfmt.Reset) for e in events)
        strict = charfmt.StreamParser(lenient=False, max_size=max_size)
        for i in range(0, len(data), 512):
            strict.feed(data[i : i + 512])
        with pytest.raises(charfmt.ParseError) as raised:
            strict.close()
        with pytest.raises(charfmt.ParseError) as expected:
            charfmt.parse(data, max_size=max_size)
        assert raised.value.first.code == expected.value.first.code
        assert (expected.value.first.code == "CF002") == oversize


def test_a_stream_cut_inside_a_token_at_max_size_gives_the_batch_result() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>' + "x" * 100 + "&amp;</msg>"
    cut = text.index("&amp;") + 3  # ends inside the entity, which waits for its ';'
    for max_size in (cut - 2, cut - 1, cut):
        events = _stream([text[:cut]], max_size=max_size)
        assert _observed_reply(charfmt.collect(events)) == _observed_reply(
            charfmt.parse(text[:cut], lenient=True, max_size=max_size)
        )


@pytest.mark.parametrize(("words", "width"), [("on and on. ", 1), ("ずっと続く。", 2)])
def test_a_damaged_stream_of_10x_max_size_keeps_under_2x_max_size(words: str, width: int) -> None:
    # max_size counts characters of str input (``width`` bytes each in memory), bytes of bytes input.
    max_size = 100_000
    text = _damaged_long(10 * max_size, words)

    def chunks() -> Iterator[str]:  # made while traced: a kept chunk counts
        for i in range(0, len(text), 256):
            yield text[i : i + 256]

    for as_bytes in (False, True):
        tracemalloc.start()
        try:
            parser = charfmt.StreamParser(max_size=max_size)
            for chunk in chunks():
                parser.feed(chunk.encode() if as_bytes else chunk)
            current, _ = tracemalloc.get_traced_memory()
            events = parser.close()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        bound = 2 * max_size * (1 if as_bytes else width)
        assert current < bound and peak < bound, (as_bytes, current, peak)
        assert [e.diagnostic.code for e in events if isinstance(e, charfmt.DiagnosticEvent)] == ["CF002"]


# -- hostile JSON: the stream never raises (issues 12.1, 12.2) ---------------------------------------
HOSTILE = [
    '{"chats":[{"type":{"a":1},"order":1,"body":"x"}]}',
    '{"chats":[{"type":["C"],"order":1,"body":"<msg>x</msg>"}]}',
    '{"chats":[{"type":"C","order":1' + "0" * 5_000 + ',"body":"<msg>x</msg>"}]}',
    '{"chats":[{"order":' + "1" * 4_301 + ',"type":"I","body":"x"}]}',
]


def test_an_order_of_1000_digits_streams_like_the_batch() -> None:
    text = '{"chats":[{"type":"C","order":' + "9" * 1_000 + ',"body":"<msg>x</msg>"}]}'
    batch = charfmt.parse(text, lenient=True)
    for size in (1, 100, len(text)):
        events = _stream([text[i : i + size] for i in range(0, len(text), size)])
        assert _observed_reply(charfmt.collect(events)) == _observed_reply(batch)


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_json_never_makes_the_stream_raise(text: str) -> None:
    for chunks in ([text], list(text), [text.encode()], _chunks(text.encode(), [7, 13, 4_099])):
        parser = charfmt.StreamParser()
        events = [e for chunk in chunks for e in parser.feed(chunk)] + parser.close()
        reply = charfmt.collect(events)
        assert reply == charfmt.parse(text, lenient=True)
        assert "CF999" not in [d.code for d in reply.diagnostics]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_json_streams_to_the_batch_result(text: str) -> None:
    batch = charfmt.parse(text, lenient=True)
    assert _observed_reply(charfmt.collect(_stream(list(text)))) == _observed_reply(batch)


_HUGE = "\x00huge"
"""Stands for an integer literal of 5,000 digits (json.dumps refuses to write one)."""
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.just(_HUGE),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


@given(st.fixed_dictionaries({}, optional={"type": _JSON_VALUES, "order": _JSON_VALUES, "body": _JSON_VALUES}))
def test_hostile_chat_fields_never_make_a_lenient_stream_raise(chat: dict[str, object]) -> None:
    text = '{"chats":[' + json.dumps(chat, allow_nan=True) + "]}"
    text = text.replace(json.dumps(_HUGE), "7" * 5_000)
    parser = charfmt.StreamParser()
    events = [e for ch in _chunks(text, [5, 17, 40]) for e in parser.feed(ch)] + parser.close()
    assert isinstance(charfmt.collect(events), charfmt.Reply)


# -- a reply cut off inside an escape or an entity (issue 11.9) -------------------------------------
_CUT_BODY = "<emo>joy</emo>\\n<msg>a \\u3084 \\n &amp; &#x3042; b</msg>"
_CUT_REPLY = '{"chats":[{"type":"C","order":1,"body":"' + _CUT_BODY + '"}]}'
_CUT_TOKENS = ["\\u3084", "\\n", "&amp;", "&#x3042;"]
_CUT_DECODED = ["a ", "a や ", "a や \n ", "a や \n & "]
"""The message text decided before each token."""
CUTS = [
    pytest.param(_CUT_REPLY.index(token, _CUT_REPLY.index("<msg>")) + k, before, id=f"{token}[:{k}]")
    for token, before in zip(_CUT_TOKENS, _CUT_DECODED, strict=True)
    for k in range(1, len(token))
]


@pytest.mark.parametrize(("stop", "before"), CUTS)
def test_a_reply_cut_inside_an_escape_streams_no_piece_of_it(stop: int, before: str) -> None:
    text = _CUT_REPLY[:stop]
    for chunks in (list(text), [text], _chunks(text.encode(), [3, 11, 40, 57])):
        parser = charfmt.StreamParser()
        early = [e for chunk in chunks for e in parser.feed(chunk)]
        assert "".join(e.text for e in early if isinstance(e, charfmt.TextDelta)) == before
        events = early + parser.close()
        assert _observed_reply(charfmt.collect(events)) == _observed_reply(charfmt.parse(text, lenient=True))


@pytest.mark.parametrize(("stop", "before"), CUTS)
def test_a_reply_cut_inside_an_escape_ends_without_a_piece_of_it(stop: int, before: str) -> None:
    text = _CUT_REPLY[:stop]
    for reply in (charfmt.parse(text, lenient=True), charfmt.collect(_stream(list(text)))):
        assert "".join(reply.chats[0].texts("msg")) == before
        piece = max(text.rfind("\\"), text.rfind("&"))  # where the cut-off escape or entity begins
        assert any(piece <= d.offset <= stop for d in reply.diagnostics)


# -- drift: the stream keeps streaming on the shapes real models write (issue 13.4) ---------------
_REPLY = (
    '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hello there, how are you today? It is a fine day.'
    '</msg>"},{"type":"I","order":2,"body":"Mio joined the party."}]}'
)
_SPOKEN = "Hello there, how are you today? It is a fine day."
DRIFT = {
    "fence": "```json\n" + _REPLY + "\n```",
    "prose around": "Sure! Here is the reply:\n" + _REPLY + "\nHope this helps!",
    "special token after": _REPLY + "<|im_end|>",
    "reasoning before": "<think>The user is upset. Stay calm.</think>\n" + _REPLY,
    "long and lower-case chat types": _REPLY.replace('"type":"C"', '"type":"chat"').replace('"type":"I"', '"type":"i"'),
    "missing newline": _REPLY.replace("\\n<msg>", "<msg>"),
    "upper-case and long tag names": _REPLY.replace("<emo>joy</emo>", "<EMOTION>joy</EMOTION>"),
    "unescaped quotes": _REPLY.replace("how are you", 'how "are" you').replace("Mio joined", 'Mio "joined'),
    "trailing comma": _REPLY.replace("}]}", "},]}"),
    "bare tags": "<emo>joy</emo><msg>" + _SPOKEN + "</msg>",
    "brackets": "[joy] " + _SPOKEN + " [sad] Oh no.",
    "echoed user_chats": '<user_chats><chat type="C"><emo>joy</emo>\n<msg>' + _SPOKEN + "</msg></chat></user_chats>",
}


@pytest.mark.parametrize("size", [1, 3, 16])
@pytest.mark.parametrize("text", list(DRIFT.values()), ids=list(DRIFT))
def test_drift_streams_the_emotion_and_speech_before_close_without_reset(text: str, size: int) -> None:
    parser = charfmt.StreamParser()
    early: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        early.extend(parser.feed(text[i : i + size]))
    late = parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in early + late)
    assert [e.text for e in early if isinstance(e, charfmt.Emotion)][:1] == ["joy"]
    batch = charfmt.parse(text, lenient=True)
    first = next(n for n, seg in enumerate(batch.chats[0].segments) if seg.tag == "msg")
    spoken = "".join(e.text for e in early if isinstance(e, charfmt.TextDelta) and (e.chat, e.segment) == (0, first))
    assert spoken and batch.chats[0].segments[first].text.startswith(spoken)
    _same(early + late, batch)
    assert charfmt.collect(early + late).dialect == batch.dialect


def test_an_unescaped_quote_never_takes_back_what_was_shown() -> None:
    for text in (
        DRIFT["unescaped quotes"],
        '{"chats":[{"type":"I","order":1,"body":"He said "hi" and left."}]}',
        '{"chats":[{"type":"I","order":1,"body":"He said "hi", then left."}]}',  # the batch ends the string at '",'
    ):
        for size in (1, 2, 5):
            events = _stream([text[i : i + size] for i in range(0, len(text), size)])
            assert not any(isinstance(e, charfmt.Reset) for e in events)
            codes = [e.diagnostic.code for e in events if isinstance(e, charfmt.DiagnosticEvent)]
            assert "CF607" in codes  # reported, as the batch reader reports it
            _same(events, charfmt.parse(text, lenient=True))


def test_reasoning_before_the_reply_streams_as_reasoning_events() -> None:
    # Needs the dialects branch: the batch reader fills Reply.reasoning.
    text = DRIFT["reasoning before"]
    batch = charfmt.parse(text, lenient=True)
    assert batch.reasoning == "The user is upset. Stay calm."
    events = _stream([text[i : i + 3] for i in range(0, len(text), 3)])
    reasoning = [n for n, e in enumerate(events) if isinstance(e, charfmt.Reasoning)]
    first_chat = next(n for n, e in enumerate(events) if isinstance(e, charfmt.ChatStart))
    assert reasoning and max(reasoning) < first_chat
    assert charfmt.collect(events).reasoning == batch.reasoning


def test_a_cue_of_an_extended_table_streams_whole_and_a_second_speech_tag_as_deltas() -> None:
    tags = charfmt.DEFAULT_TAGS.extend(
        charfmt.TagSpec("sfx", "cue", "a sound effect", values=("door_slam",)),
        charfmt.TagSpec("whisper", "speech", "what the character whispers"),
    )
    text = (
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<sfx>door_slam</sfx>\\n'
        '<whisper>psst, over here</whisper>\\n<msg>Hi!</msg>"}]}'
    )
    parser = charfmt.StreamParser(tags=tags)
    events: list[charfmt.Event] = []
    for ch in text:
        events.extend(parser.feed(ch))
    assert parser.close() == []
    cues = [e for e in events if isinstance(e, charfmt.Cue)]
    assert cues == [charfmt.Cue(0, 1, "sfx", "door_slam")]
    whispered = [e.text for e in events if isinstance(e, charfmt.TextDelta) and e.tag == "whisper"]
    assert len(whispered) > 1 and "".join(whispered) == "psst, over here"
    assert not any(isinstance(e, charfmt.TextDelta) and e.tag == "sfx" for e in events)
    # The default table does not know <sfx>: that reply is damaged there, and streams no cue.
    default = _stream(list(text))
    assert not any(isinstance(e, charfmt.Cue) for e in default)


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        # Words that introduce the first quote narrate it (issue 40.7: "The old man says "Welcome.""),
        # and the stream holds them until the quote decides...
        (
            '[joy] He said "hi" *waves* "Bye now."',
            [("emo", "joy"), ("act", "He said"), ("msg", "hi"), ("act", "waves"), ("msg", "Bye now.")],
        ),
        # ... the sentences before them stay speech, shown as they end...
        (
            'Of course! Then I say: "Let us go." And we go.',
            [("msg", "Of course!"), ("act", "Then I say:"), ("msg", "Let us go."), ("act", "And we go.")],
        ),
        # ... narration after a quoted line is action.
        (
            '[sad] Okay then. *sighs* "Fine." She leaves.',
            [("emo", "sad"), ("msg", "Okay then."), ("act", "sighs"), ("msg", "Fine."), ("act", "She leaves.")],
        ),
    ],
)
def test_a_later_quote_never_takes_back_speech_already_shown(text: str, segments: list[tuple[str, str]]) -> None:
    batch = charfmt.parse(text, lenient=True)
    assert [(s.tag, s.text) for c in batch.chats for s in c.segments] == segments
    parser = charfmt.StreamParser()
    early = [e for i in range(0, len(text), 4) for e in parser.feed(text[i : i + 4])]
    late = parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in early + late)
    assert any(isinstance(e, charfmt.TextDelta) and e.tag == "msg" for e in early)  # shown before close()
    assert charfmt.collect(early + late) == batch


def test_the_echoed_request_form_shows_nothing_before_its_first_chat() -> None:
    text = 'Sure! Here is the reply:\n<user_chats>\n<chat type="E">Mio joined.</chat>\n</user_chats>\nAnything else?'
    parser = charfmt.StreamParser()
    events = [e for i in range(0, len(text), 4) for e in parser.feed(text[i : i + 4])] + parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in events)
    assert charfmt.collect(events) == charfmt.parse(text, lenient=True)


def test_a_stream_past_max_size_takes_back_the_reasoning_it_showed() -> None:
    # The batch reads input over max_size as CF002 and nothing else: no reasoning either.
    text = '###Thinking\nThey want the amulet.\n{"chats":[]}'
    parser = charfmt.StreamParser(max_size=len(text) - 1)
    events = parser.feed(text) + parser.close()
    assert charfmt.collect(events) == charfmt.parse(text, lenient=True, max_size=len(text) - 1)


def test_a_header_with_other_keys_streams_from_the_rereads() -> None:
    body = "<emo>sad</emo>\\n<msg>So it goes, and goes on.</msg>"
    text = '{"chats": [{"type": "C", "order": 1, "emotion_summary": "sad", "chat_body": "' + body + '"}]}'
    parser = charfmt.StreamParser()
    early = [e for i in range(0, len(text), 4) for e in parser.feed(text[i : i + 4])]
    events = early + parser.close()
    assert [e.text for e in early if isinstance(e, charfmt.Emotion)] == ["sad"]
    assert any(isinstance(e, charfmt.TextDelta) for e in early)
    assert not any(isinstance(e, charfmt.Reset) for e in events)
    assert charfmt.collect(events) == charfmt.parse(text, lenient=True)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 8, 11])
@pytest.mark.parametrize(
    "text",
    [
        # DeepSeek-R1 style: the server strips the opening <think>; only the closing one arrives.
        'Okay, the user greets me. Mio should be happy.\n</think>\n\n{"chats":[{"type":"C","order":1,'
        '"body":"<emo>joy</emo>\\n<msg>Hello! Nice to see you.</msg>"}]}',
        "I should be happy.</think>\n<emo>joy</emo>\n<msg>Hello. Bye.</msg>",
    ],
    ids=["json", "bare tags"],
)
def test_reasoning_whose_opener_was_stripped_is_never_shown_as_speech(text: str, size: int) -> None:
    parser = charfmt.StreamParser()
    early: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        early.extend(parser.feed(text[i : i + size]))
    late = parser.close()
    batch = charfmt.parse(text, lenient=True)
    assert batch.reasoning and batch.reasoning in text
    assert not any(isinstance(e, charfmt.Reset) for e in early + late)
    spoken = "".join(e.text for e in early if isinstance(e, charfmt.TextDelta))
    assert batch.reasoning not in spoken and spoken  # speech streams, the reasoning never as speech
    kinds = [e.kind for e in early]
    assert kinds.index("reasoning") < kinds.index("chat_start")
    _same(early + late, batch)


@pytest.mark.parametrize("size", [1, 3, 7])
@pytest.mark.parametrize(
    "body",
    ["<emo>JOY</emo><msg>Hi.</msg>", "<EMO>happy</EMO>\\n<msg>Hi.</msg>", "<emotion>sad</emotion><msg>Oh.</msg>"],
)
def test_a_vocabulary_on_damaged_input_words_its_diagnostics_as_the_batch_does(body: str, size: int) -> None:
    vocabulary = charfmt.Vocabulary.model_validate({"emotions": [{"key": "joy", "aliases": ["happy"]}, {"key": "sad"}]})
    text = '{"chats":[{"type":"C","order":1,"body":"' + body + '"}]}'
    batch = charfmt.parse(text, lenient=True, vocabulary=vocabulary)
    assert any(d.code.startswith("CF30") for d in batch.diagnostics) or body.startswith("<emotion>")
    events = list(charfmt.iter_events([text[i : i + size] for i in range(0, len(text), size)], vocabulary=vocabulary))
    assert charfmt.collect(events) == batch


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("thought", ["a { b", "use a {brace}", 'Format: {"chats": [...]}. Joy.'])
def test_a_brace_inside_reasoning_does_not_hold_the_reply(thought: str, size: int) -> None:
    text = (
        f"<think>{thought}</think>\n"
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hello there. Bye.</msg>"}]}'
    )
    parser = charfmt.StreamParser()
    early: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        early.extend(parser.feed(text[i : i + size]))
    late = parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in early + late)
    assert [e.text for e in early if isinstance(e, charfmt.Emotion)] == ["joy"]
    assert "".join(e.text for e in early if isinstance(e, charfmt.TextDelta)).startswith("Hello")
    _same(early + late, charfmt.parse(text, lenient=True))


@pytest.mark.parametrize("size", [1, 3, 7])
@pytest.mark.parametrize("header", ['"type": "C", ', '"order": 1, ', ""], ids=["no order", "no type", "neither"])
def test_a_chat_without_type_or_order_streams_before_close(header: str, size: int) -> None:
    text = '{"chats": [{' + header + '"body": "<emo>joy</emo>\\n<msg>Hello there. Bye.</msg>"}]}'
    parser = charfmt.StreamParser()
    early: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        early.extend(parser.feed(text[i : i + size]))
    late = parser.close()
    assert [e.text for e in early if isinstance(e, charfmt.Emotion)] == ["joy"]
    assert "".join(e.text for e in early if isinstance(e, charfmt.TextDelta)).startswith("Hello")
    assert not any(isinstance(e, charfmt.Reset) for e in early + late)
    _same(early + late, charfmt.parse(text, lenient=True))
