"""``StreamParser`` behaves the same around its events whichever reader runs.

The compiled reader (mypyc) refuses what does not fit its signature at the call, and a
compiled class cannot be subclassed; the pure reader does the same, so that code written
against one runs against the other. Both take bytes-like chunks and can be copied and
pickled mid-stream (a copy goes on exactly like the original).
"""

from __future__ import annotations

import copy
import pickle
from typing import Any, Final

import pytest

import charfmt
import charfmt.stream
from charfmt._stream import reader as _pure

READERS = [pytest.param(_pure.StreamParser, id="pure")]
if charfmt.stream.COMPILED:
    READERS.append(pytest.param(charfmt.stream.StreamParser, id="compiled"))

REPLY = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hello &amp; welcome</msg>"}]}'


def _all(parser: Any, chunks: list[Any]) -> list[charfmt.Event]:
    events: list[charfmt.Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events + parser.close()


@pytest.mark.parametrize("reader", READERS)
def test_it_cannot_be_subclassed(reader: type[charfmt.StreamParser]) -> None:
    with pytest.raises(TypeError):
        type("Mine", (reader,), {})


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    "kwargs",
    [{"max_size": 1e6}, {"lenient": 1}, {"keep_reply": 0}, {"tags": "emo"}, {"vocabulary": ["joy"]}],
    ids=["float-max_size", "int-lenient", "int-keep_reply", "str-tags", "list-vocabulary"],
)
def test_arguments_of_the_wrong_type_are_refused_at_the_call(
    reader: type[charfmt.StreamParser], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError):
        reader(**kwargs)


@pytest.mark.parametrize("reader", READERS)
def test_bytes_like_chunks_read_as_bytes_and_other_chunks_are_refused(reader: type[charfmt.StreamParser]) -> None:
    data = REPLY.encode()
    want = _all(reader(), [data[:40], data[40:]])
    assert _all(reader(), [bytearray(data[:40]), memoryview(data)[40:]]) == want
    assert charfmt.collect(want) == charfmt.parse(REPLY, lenient=True)
    with pytest.raises(TypeError):
        reader().feed(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_copy_taken_mid_stream_goes_on_like_the_original(reader: type[charfmt.StreamParser], how: str) -> None:
    for cut in (10, 45, 60, len(REPLY) - 3):
        original = reader()
        shown = original.feed(REPLY[:cut])
        if how == "copy":
            twin = copy.copy(original)
        elif how == "deepcopy":
            twin = copy.deepcopy(original)
        else:
            twin = pickle.loads(pickle.dumps(original))
        rest = _all(twin, [REPLY[cut:]])
        if how != "copy":  # (a shallow copy shares the original's lists: one of the two goes on)
            assert _all(original, [REPLY[cut:]]) == rest
        assert charfmt.collect(shown + rest) == charfmt.parse(REPLY, lenient=True)


def test_the_class_docstring_is_the_sources_whichever_reader_runs() -> None:
    assert charfmt.StreamParser.__doc__ == _pure.StreamParser.__doc__
    assert "max_size" in (charfmt.StreamParser.__doc__ or "")


STRICT_DAMAGE = [
    pytest.param("```json\n" + REPLY + "\n```", "CF101", id="fence"),
    pytest.param("Sure! Here it is: " + REPLY, "CF101", id="prose-before"),
    pytest.param(REPLY.replace('"C"', '"c"'), "CF107", id="lower-case-type"),
    pytest.param(REPLY.replace("\\n", ""), "CF206", id="no-newline"),
]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("text", "code"), STRICT_DAMAGE)
@pytest.mark.parametrize("size", [1, 4, 64])
def test_a_strict_stream_shows_nothing_from_the_first_damage_on(
    reader: type[charfmt.StreamParser], text: str, code: str, size: int
) -> None:
    with pytest.raises(charfmt.ParseError) as strict:
        charfmt.parse(text)
    assert strict.value.diagnostics[0].code == code
    parser = reader(lenient=False)
    shown: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        shown.extend(parser.feed(text[i : i + size]))
    with pytest.raises(charfmt.ParseError) as streamed:
        parser.close()
    assert streamed.value.diagnostics[0].code == code
    where = strict.value.diagnostics[0].offset
    # Only what comes before the damage may have been shown: here, at most the emotion
    # element before a missing newline; never the speech after it.
    assert not any(isinstance(e, charfmt.TextDelta) for e in shown)
    if where < text.index("<emo>"):
        assert shown == []


CUT_MARKUP = [
    # The design study's pattern D: a tag with an attribute, its quotes JSON-escaped.
    pytest.param('{"status":"ok","chat_body":"<emotion type=\\"joy\\">Hi there</emotion>"}', id="pattern-d"),
    # A bare chats array whose body is front matter.
    pytest.param('[{"type": "C", "order": 1, "body": "---\\nemotion: joy\\n---\\nHi there"}]', id="front-matter"),
]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("text", CUT_MARKUP)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 8])
def test_markup_not_complete_yet_is_never_shown_as_speech(
    reader: type[charfmt.StreamParser], text: str, size: int
) -> None:
    parser = reader()
    shown: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        shown.extend(parser.feed(text[i : i + size]))
    late = parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in late)
    spoken = "".join(e.text for e in shown if isinstance(e, charfmt.TextDelta))
    assert "<" not in spoken and "-" not in spoken and "emotion" not in spoken, spoken
    assert [e.text for e in shown if isinstance(e, charfmt.Emotion)] == ["joy"]
    assert charfmt.collect(shown + late) == charfmt.parse(text, lenient=True)


@pytest.mark.parametrize("reader", READERS)
def test_a_long_stream_keeps_flat_memory(reader: type[charfmt.StreamParser]) -> None:
    """``keep_reply=False`` past ``max_size``: what a stream holds does not grow with its chats."""
    import tracemalloc

    chat = '{"type":"C","order":%d,"body":"<emo>joy</emo>\\n<msg>Hello there, traveller.</msg>"}'

    def held(chats: int) -> int:
        text = '{"chats":[' + ",".join(chat % n for n in range(1, chats + 1)) + "]}"
        tracemalloc.start()
        try:
            parser = reader(keep_reply=False, max_size=1 << 14)
            ended = 0
            for i in range(0, len(text), 512):
                ended += sum(isinstance(e, charfmt.ChatEnd) for e in parser.feed(text[i : i + 512]))
            size, _ = tracemalloc.get_traced_memory()  # what the parser holds (the text was made before)
        finally:
            tracemalloc.stop()
        assert ended == chats
        assert parser.close() == []
        return size

    small, large = held(1_000), held(10_000)
    assert large - small < 50_000, (small, large)  # a set of every order grew by about 700 KB here


def test_iter_events_takes_a_whole_text_as_one_chunk_and_the_parsers_keywords() -> None:
    whole = list(charfmt.iter_events(REPLY))
    assert whole == list(charfmt.iter_events([REPLY]))
    assert list(charfmt.iter_events(REPLY.encode())) == list(charfmt.iter_events([REPLY.encode()]))
    assert list(charfmt.iter_events(bytearray(REPLY.encode()))) == list(charfmt.iter_events([REPLY.encode()]))
    assert charfmt.collect(whole) == charfmt.parse(REPLY, lenient=True)
    # max_size and keep_reply reach the parser: out of the format before the bound and over
    # it, the batch reader's CF002.
    damaged = "Sure! " + REPLY
    small = list(charfmt.iter_events([damaged[:20], damaged[20:]], max_size=10))
    assert [e.diagnostic.code for e in small if isinstance(e, charfmt.DiagnosticEvent)] == ["CF002"]
    parser = charfmt.StreamParser(max_size=10, keep_reply=False)
    assert list(charfmt.iter_events([damaged[:20], damaged[20:]], max_size=10, keep_reply=False)) == [
        *parser.feed(damaged[:20]),
        *parser.feed(damaged[20:]),
        *parser.close(),
    ]


def test_aiter_events_takes_the_parsers_keywords() -> None:
    import asyncio

    async def source(text: str) -> Any:
        for i in range(0, len(text), 7):
            yield text[i : i + 7]

    async def run(text: str, **kwargs: Any) -> list[charfmt.Event]:
        return [e async for e in charfmt.aiter_events(source(text), **kwargs)]

    assert charfmt.collect(asyncio.run(run(REPLY))) == charfmt.parse(REPLY, lenient=True)
    small = asyncio.run(run("Sure! " + REPLY, max_size=10, keep_reply=False))
    assert [e.diagnostic.code for e in small if isinstance(e, charfmt.DiagnosticEvent)] == ["CF002"]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_the_text_kept_for_close_costs_about_what_it_weighs(reader: type[charfmt.StreamParser], as_bytes: bool) -> None:
    """Within ``max_size`` the raw text is kept (``close()`` may need it): as text, not as a list of tokens."""
    import tracemalloc

    chat = '{"type":"C","order":%d,"body":"<emo>joy</emo>\\n<msg>Hello there, traveller.</msg>"}'
    text = '{"chats":[' + ",".join(chat % n for n in range(1, 5_001)) + "]}"
    data: str | bytes = text.encode() if as_bytes else text
    chunks = [data[i : i + 4] for i in range(0, len(data), 4)]
    tracemalloc.start()
    try:
        parser = reader(keep_reply=False)
        for chunk in chunks:
            parser.feed(chunk)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parser.close() == []
    assert size < 1.5 * len(text), (size, len(text))  # a list of 4-character chunks: about 15x


DAMAGED_LONG: Final = {
    "prose before": (
        'Sure! Here it is:\n{"chats":[',
        '{"type":"C","order":%d,"body":"<emo>joy</emo>\\n<msg>Hi there.</msg>"}',
        ",",
    ),
    "single quotes": ("{'chats':[", "{'type':'C','order':%d,'body':'<msg>Hi there.</msg>'}", ","),
    "bare tags": ("", "<EMO>joy</EMO>\n<MSG>Hi there, number %d.</MSG>\n", ""),
    "unclosed elements": ('{"chats":[', '{"type":"C","order":%d,"body":"<msg>Hi there.<act>waves"}', ","),
    "role-play prose": ("", "*waves %d* \"Hello there,\" she said. ", ""),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("shape", sorted(DAMAGED_LONG))
def test_a_damaged_stream_past_max_size_holds_flat_memory_while_fed(
    reader: type[charfmt.StreamParser], shape: str
) -> None:
    """Issue 22.16: a damaged stream past ``max_size`` holds what a clean one does during ``feed()``, not the input."""
    import tracemalloc

    head, item, sep = DAMAGED_LONG[shape]

    def peak(n: int) -> int:
        text = head + sep.join(item % k for k in range(1, n + 1))
        tracemalloc.start()
        try:
            parser = reader(keep_reply=False, max_size=1 << 13)
            for i in range(0, len(text), 256):
                parser.feed(text[i : i + 256])
            _, top = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        parser.close()
        return top

    small, large = peak(500), peak(10_000)  # 20x the input
    assert large < 2 * small + 200_000, (small, large)
