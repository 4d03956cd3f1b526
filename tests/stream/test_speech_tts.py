"""Sentences for TTS: never punctuation alone (issue 22.8), early splits on 、/, past a length (issue 23)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import charfmt


def _reply(body: str) -> charfmt.Reply:
    seg = charfmt.Segment(tag="msg", text=body)
    return charfmt.Reply(
        chats=[charfmt.Chat(type="C", order=1, segments=[charfmt.Segment(tag="emo", text="sad"), seg])]
    )


def _split(chunks: list[str], max_length: int | None = None) -> list[str]:
    splitter = charfmt.SentenceSplitter(max_length=max_length)
    out = splitter.feed(charfmt.ChatStart(0, "C", 1))
    for chunk in chunks:
        out += splitter.feed(charfmt.TextDelta(0, 0, "msg", chunk))
    out += splitter.feed(charfmt.SegmentEnd(0, 0, "msg"))
    return [s.text for s in out]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("…寂しかった。", ["…寂しかった。"]),
        ("……寂しかった。ずっと。", ["……寂しかった。", "ずっと。"]),
        ("…\n寂しかった", ["…寂しかった"]),
        ("！？ えっ", ["！？ えっ"]),
        ("…", ["…"]),
        ("えっ…まさか", ["えっ…", "まさか"]),
    ],
)
def test_punctuation_alone_is_never_a_sentence(body: str, expected: list[str]) -> None:
    text = charfmt.dumps(_reply(body))
    assert [s.text for s in charfmt.sentences(charfmt.parse(text))] == expected
    assert [s.text for s in charfmt.sentences(charfmt.iter_events(list(text)))] == expected


_LONG = (
    "今日は本当に楽しかったね、また明日も一緒に神社の裏山まで遊びに行こうよ、"
    "お弁当も全部持っていくからね、約束だからね、絶対に忘れないでよ。"
)


def test_a_long_japanese_sentence_splits_early_at_the_configured_length() -> None:
    assert len(_LONG) == 68
    assert _split([_LONG]) == [_LONG]  # off by default
    first = "今日は本当に楽しかったね、また明日も一緒に神社の裏山まで遊びに行こうよ、"
    assert _split([_LONG], max_length=30) == [first, "お弁当も全部持っていくからね、約束だからね、絶対に忘れないでよ。"]
    assert _split([_LONG], max_length=40) == [
        first + "お弁当も全部持っていくからね、",
        "約束だからね、絶対に忘れないでよ。",
    ]
    assert _split(list(_LONG), max_length=10) == [
        "今日は本当に楽しかったね、",
        "また明日も一緒に神社の裏山まで遊びに行こうよ、",
        "お弁当も全部持っていくからね、",
        "約束だからね、絶対に忘れないでよ。",
    ]
    got = list(charfmt.sentences(_reply(_LONG), max_length=30))
    assert [s.emotion for s in got] == ["sad", "sad"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It costs 3,000 bolts, which is a lot, friend.", ["It costs 3,000 bolts,", "which is a lot,", "friend."]),
        ("「ねえ、聞いて、ほら、ここだよ」", ["「ねえ、聞いて、ほら、ここだよ」"]),  # not inside quotes
        ("short, ok", ["short, ok"]),
    ],
)
def test_commas_split_only_past_the_length_and_outside_quotes(text: str, expected: list[str]) -> None:
    assert _split([text], max_length=8) == expected
    assert _split(list(text), max_length=8) == expected


def test_max_length_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_length"):
        charfmt.SentenceSplitter(max_length=0)


_PIECES = st.sampled_from(
    ["え", "本当", "3", "0", "a", " ", "、", ",", "，", "。", "！", "…", "「", "」", "\n", "...", "word"]
)


@given(st.lists(_PIECES, max_size=40).map("".join), st.lists(st.integers(0, 200), max_size=20), st.integers(1, 12))
def test_any_chunking_gives_the_same_early_split(text: str, cuts: list[int], max_length: int) -> None:
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    whole = _split([text], max_length)
    assert _split(chunks, max_length) == whole
    assert _split(list(text), max_length) == whole
    assert "".join(whole).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
