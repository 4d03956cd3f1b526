"""Models, vocabulary and events through the public API."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

import charfmt
from charfmt import Reply, Segment, Vocabulary
from charfmt._strict.envelope import Locator

SAMPLE = (
    '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<act>jump</act>\\n<msg>Hi &amp; bye</msg>"},'
    ' {"type": "I", "order": 2, "body": "Affection +1"}]}'
)


def test_parse_accepts_bytes() -> None:
    assert charfmt.parse(SAMPLE.encode()) == charfmt.parse(SAMPLE)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tag": "emo", "text": " joy"}, "key"),
        ({"tag": "emo", "text": ""}, "key"),
        ({"tag": "emo", "text": "a<b"}, "key"),
        ({"tag": "msg", "text": "bell\x07"}, "control"),
        ({"tag": "Speak!", "text": "x"}, "not a tag name"),
    ],
)
def test_segment_rejects_what_the_grammar_rejects(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Segment(**kwargs)


def test_segment_text_may_hold_markup_characters() -> None:
    seg = Segment(tag="msg", text="</msg><emo>x</emo> & more")
    reply = Reply(chats=[charfmt.Chat(type="C", order=1, segments=[seg])])
    assert charfmt.parse(charfmt.dumps(reply)) == reply


def test_chat_shapes_are_checked() -> None:
    with pytest.raises(ValidationError):
        charfmt.Chat(type="I", order=1, segments=[Segment(tag="msg", text="x")])
    with pytest.raises(ValidationError):
        charfmt.Chat(type="C", order=1, segments=[])
    with pytest.raises(ValidationError):
        charfmt.Chat(type="C", order=0, segments=[Segment(tag="msg", text="x")])
    with pytest.raises(ValidationError):
        charfmt.Chat(type="X", order=1, segments=[Segment(tag="msg", text="x")])  # type: ignore[arg-type]


def test_reply_presents_chats_sorted_by_order_stably() -> None:
    a = charfmt.Chat(type="I", order=2, segments=[Segment(tag="text", text="a")])
    b = charfmt.Chat(type="I", order=1, segments=[Segment(tag="text", text="b")])
    assert [c.order for c in Reply(chats=[a, b]).chats] == [1, 2]


def test_dumps_is_canonical() -> None:
    assert charfmt.dumps(charfmt.parse(SAMPLE)) == (
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<act>jump</act>\\n<msg>Hi &amp; bye</msg>"},'
        '{"type":"I","order":2,"body":"Affection +1"}]}'
    )


def test_dumps_writes_non_ascii_as_itself() -> None:
    reply = charfmt.parse('{"chats":[{"type":"I","order":1,"body":"\\u3042"}]}')
    assert charfmt.dumps(reply) == '{"chats":[{"type":"I","order":1,"body":"あ"}]}'


def test_vocabulary_resolves_keys_and_aliases_any_case() -> None:
    vocab = Vocabulary(emotions=[{"key": "joy", "aliases": ["happy", "喜び"]}, "sad"])
    assert vocab.keys == ["joy", "sad"]
    assert vocab.resolve("Joy") == "joy"
    assert vocab.resolve(" HAPPY ") == "joy"
    assert vocab.resolve("喜び") == "joy"
    assert vocab.resolve("angry") is None


def test_vocabulary_rejects_an_alias_naming_two_keys() -> None:
    with pytest.raises(charfmt.CharfmtError, match="names both"):  # (as Vocabulary.of: not pydantic's own error)
        Vocabulary(emotions=[{"key": "joy", "aliases": ["glad"]}, {"key": "calm", "aliases": ["glad"]}])


def test_strict_parse_with_vocabulary_rejects_unknown_key_at_its_position() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<msg>\\u3042</msg>\\n<emo>furious</emo>"}]}'
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text, vocabulary=Vocabulary.of("joy", "sad"))
    (d,) = info.value.diagnostics
    assert d.code == "CF301"
    assert text[d.offset : d.end] == "furious"
    assert "joy, sad" in d.message


def test_every_vocabulary_decision_points_at_its_own_key() -> None:
    # Escapes before and between the keys (\u3042 is 6 raw characters for 1, \n 2 for 1)
    # and keys repeated across elements: each decision names the raw span of its key.
    vocab = Vocabulary(emotions=[{"key": "joy", "aliases": ["happy"]}, {"key": "sad"}], policy="alias")
    words = ["Joy", "sad", "HAPPY", "\\u3042\\u3042", "Sad", "furious"]
    body = "\\n".join(f"<msg>\\u3042 &amp; {i}</msg>\\n<emo>{w}</emo>" for i, w in enumerate(words))
    text = '{"chats":[{"type":"I","order":1,"body":"x"},{"type":"C","order":2,"body":"' + body + '"}]}'
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text, vocabulary=vocab)
    spans = [(d.code, text[d.offset : d.end], d.chat) for d in info.value.diagnostics]
    assert spans == [
        ("CF302", "Joy", 1),
        ("CF302", "HAPPY", 1),
        ("CF301", "\\u3042\\u3042", 1),
        ("CF302", "Sad", 1),
        ("CF301", "furious", 1),
    ]


def test_vocabulary_normalises_aliases_to_the_canonical_key() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>Happy</emo>"}]}'
    vocab = Vocabulary(emotions=[{"key": "joy", "aliases": ["happy"]}])
    assert charfmt.parse(text, vocabulary=vocab).chats[0].segments[0].text == "joy"
    assert charfmt.parse(text).chats[0].segments[0].text == "Happy"


def test_events_follow_the_reply() -> None:
    events = list(charfmt.parse(SAMPLE).events())
    assert [e.kind for e in events] == [
        "chat_start",
        "segment_start", "emotion", "segment_end",
        "segment_start", "action", "segment_end",
        "segment_start", "text", "segment_end",
        "chat_end",
        "chat_start", "segment_start", "text", "segment_end", "chat_end",
    ]  # fmt: skip
    emotion = events[2]
    assert isinstance(emotion, charfmt.Emotion)
    assert emotion.to_dict() == {"kind": "emotion", "chat": 0, "segment": 0, "text": "joy"}
    delta = events[8]
    assert isinstance(delta, charfmt.TextDelta)
    assert (delta.tag, delta.text) == ("msg", "Hi & bye")


def test_diagnostics_become_events_in_lenient_mode() -> None:
    reply = charfmt.parse(
        '{"chats":[{"type":"I","order":1,"body":"a"},{"type":"I","order":1,"body":"b"}]}', lenient=True
    )
    first = next(reply.events())
    assert isinstance(first, charfmt.DiagnosticEvent)
    assert first.to_dict()["diagnostic"]["code"] == "CF614"  # repeated orders renumbered


def test_warnings_do_not_fail_strict_parsing() -> None:
    reply = charfmt.parse('{"chats":[{"type":"I","order":3,"body":"b"},{"type":"I","order":1,"body":"a"}]}')
    assert [d.code for d in reply.diagnostics] == ["CF112", "CF113"]
    assert all(d.severity == "warning" for d in reply.diagnostics)


def test_diagnostic_snippet_points_at_the_span() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<msg>hi</act>"}]}'
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text)
    snippet = info.value.diagnostics[0].snippet(text)
    line, carets = snippet.split("\n")
    assert carets.index("^") == line.index("</act>")
    assert carets.count("^") == len("</act>")
    assert "demo:1:" in info.value.report("demo")


def test_snippet_counts_wide_characters_twice() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<msg>わあ</act>"}]}'
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text)
    line, carets = info.value.diagnostics[0].snippet(text).split("\n")
    assert carets.index("^") == line.index("</act>") + 2  # two wide characters before it


def test_parse_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        charfmt.parse("{}")
    assert issubclass(charfmt.ParseError, charfmt.CharfmtError)


@pytest.mark.parametrize(
    ("data", "code", "lenient_code"),
    [
        (b"\xff\xfe{", "CF001", "CF001"),
        ("", "CF003", "CF003"),
        ("   \n", "CF003", "CF003"),
        ("[" * 100_000, "CF110", "CF616"),
        (b'{"chats":[{"type":"C","order":1,"body":"<msg>\xe3\x81</msg>"}]}', "CF001", "CF001"),
    ],
)
def test_bad_input_is_a_diagnostic_never_a_traceback(data: str | bytes, code: str, lenient_code: str) -> None:
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(data)
    assert info.value.diagnostics[0].code == code
    assert lenient_code in [d.code for d in charfmt.parse(data, lenient=True).diagnostics]


@pytest.mark.parametrize(
    "data",
    ["", " \n\t ", b"", b"\xff\xfe{", "x" * 11, "[" * 100_000],
    ids=["empty", "blank", "no-bytes", "bad-utf8", "oversize", "deep"],
)
def test_every_lenient_reply_has_a_dialect(data: str | bytes) -> None:
    # Issue 11, defect 3: the early exits built a Reply without ``dialect``.
    reply = charfmt.parse(data, lenient=True, max_size=10 if data == "x" * 11 else charfmt.parser.DEFAULT_MAX_SIZE)
    assert reply.dialect is None or isinstance(reply.dialect, str)
    assert reply.model_dump()["dialect"] == reply.dialect
    assert Reply.model_validate(reply.model_dump()) == reply


def test_max_size_is_enforced_and_configurable() -> None:
    with pytest.raises(charfmt.ParseError, match="CF002"):
        charfmt.parse(SAMPLE, max_size=10)
    assert charfmt.parse(SAMPLE, max_size=len(SAMPLE)).chats


def test_public_api_is_small_and_exported() -> None:
    for name in charfmt.__all__:
        assert hasattr(charfmt, name)
    assert {"parse", "dumps", "json_schema", "Reply", "Chat", "Segment", "Diagnostic", "ParseError"} <= set(
        charfmt.__all__
    )


@given(st.text(alphabet="ab\n", max_size=200), st.data())
def test_line_and_column_of_long_sources(tail: str, data: st.DataObject) -> None:
    from charfmt.diagnostics import line_col

    source = "x\n" * 2100 + tail  # long enough for the indexed path
    offset = data.draw(st.integers(0, len(source)))
    before = source[:offset]
    assert line_col(source, offset) == (before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1)


def test_line_index_cache_tells_sources_apart() -> None:
    from charfmt.diagnostics import line_col

    # Six long sources of the same length, newlines in different places, asked in turn
    # (more than the cache holds): each answer is its own source's.
    sources = ["a" * k + "\n" + "b" * (5000 - k) for k in range(0, 6000, 1000)]
    for _ in range(2):
        for k, source in zip(range(0, 6000, 1000), sources, strict=True):
            assert line_col(source, 5000) == ((2, 5000 - k) if k < 5000 else (1, 5001))
            assert line_col("".join(source), 5000) == line_col(source, 5000)  # an equal copy


ORDER_WARNINGS = [
    '{"chats": [{"type": "I", "order": 3, "body": "x"}, {"type": "I", "order": 1, "body": "y"}]}',
    '\n {"chats":[{"order":5,"body":"x","type":"E"},{"order":2,"body":"\\"]","type":"E"}]}\n',
    '{"meta": {"a": [1, "]"]}, "chats" : [{"type": "I", "order": 2, "body": "x"}] , "n": 1e5}',
    '{"chats": [], "chats": [{"type": "I", "order": 9, "body": "x"}]}',
]


@pytest.mark.parametrize("text", ORDER_WARNINGS)
def test_order_warnings_point_at_the_chats_array(text: str) -> None:
    try:
        diagnostics = charfmt.parse(text).diagnostics
    except charfmt.ParseError as e:  # an unknown or duplicate key besides
        diagnostics = e.diagnostics
    spans = {d.code: text[d.offset : d.end] for d in diagnostics if d.code in ("CF112", "CF113")}
    assert "CF112" in spans
    for span in spans.values():
        assert span.startswith("[") and span.endswith("]")
        assert json.loads(span) == json.loads(text)["chats"]


@pytest.mark.parametrize("text", ORDER_WARNINGS)
def test_the_quick_top_level_locator_agrees_with_the_full_scan(text: str) -> None:
    quick = Locator(text)
    assert quick.value(("chats",)) == Locator(text)._spans.values[("chats",)]


@pytest.mark.parametrize("at", [0, 1, 65_535, 65_536, 65_537, 200_000])
def test_invalid_utf8_in_large_input_is_found_at_its_byte(at: int) -> None:
    data = bytearray(b'{"chats":[]}' + b" " * 300_000)
    data[at] = 0xFF
    with pytest.raises(charfmt.ParseError, match=f"byte 0xFF at byte offset {at}$") as info:
        charfmt.parse(bytes(data))
    assert info.value.first.code == "CF001"
    assert info.value.first.offset == len(bytes(data[:at]).decode())


def test_a_character_across_the_utf8_probe_is_not_an_error() -> None:
    for pad in range(65_533, 65_537):
        text = " " * pad + "あ" + '{"chats":[]}'
        with pytest.raises(charfmt.ParseError) as info:
            charfmt.parse(text.encode())
        assert info.value.first.code == "CF101"  # JSON after the character, not CF001
