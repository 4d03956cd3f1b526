"""Sentences for speech: split as early as possible, the same for any chunking, with the active emotion."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt.cli import main

CASES = [
    ("わあ！本当ですか？", ["わあ！", "本当ですか？"]),
    ("你好。我很好！", ["你好。", "我很好！"]),
    ("It costs 3.5 gold. Okay! Fine...", ["It costs 3.5 gold.", "Okay!", "Fine..."]),
    ("「ねえ。聞いて！」と言った。次は？", ["「ねえ。聞いて！」と言った。", "次は？"]),
    ("「ねえ！」「なに？」", ["「ねえ！」", "「なに？」"]),
    ('He said "Stop. Now." Then left.', ['He said "Stop. Now."', "Then left."]),
    ("line one\nline two", ["line one", "line two"]),
    ("Wait... what?!  Really", ["Wait... what?!", "Really"]),
    ("Version 2.0 is out", ["Version 2.0 is out"]),
    ("えっ…まさか", ["えっ…", "まさか"]),
    # A run of end punctuation is one end, however the stream cuts it (issue 11.10).
    ("えっ！？うそ", ["えっ！？", "うそ"]),
    ("やったー！！！次は？", ["やったー！！！", "次は？"]),
    ("本当…。嘘でしょ", ["本当…。", "嘘でしょ"]),
    ("えっ！？", ["えっ！？"]),
    ("わあ！」本当", ["わあ！」", "本当"]),
    ("No way?! Yes!!! Ok", ["No way?!", "Yes!!!", "Ok"]),
    # Abbreviations and an ellipsis that the sentence goes on after.
    ("Dr. Smith is here. Ask Mrs. Lee, e.g. now.", ["Dr. Smith is here.", "Ask Mrs. Lee, e.g. now."]),
    ("Really... that is great. Wait... What?", ["Really... that is great.", "Wait...", "What?"]),
    ("Hmm…maybe. えっ…まさか", ["Hmm…maybe.", "えっ…", "まさか"]),
    ("Gold, silver, etc. are here", ["Gold, silver, etc. are here"]),
    # A quote left open closes at the end of its line.
    ("「ねえ。聞いて\nほら！ここ", ["「ねえ。聞いて", "ほら！", "ここ"]),
]


def _reply(body: str, emotion: str = "joy") -> str:
    seg = charfmt.Segment(tag="msg", text=body)
    chat = charfmt.Chat(type="C", order=1, segments=[charfmt.Segment(tag="emo", text=emotion), seg])
    return charfmt.dumps(charfmt.Reply(chats=[chat]))


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_sentences(body: str, expected: list[str]) -> None:
    text = _reply(body)
    assert [s.text for s in charfmt.sentences(charfmt.parse(text).events())] == expected
    assert [s.text for s in charfmt.sentences(charfmt.iter_events(list(text)))] == expected


@given(st.sampled_from(CASES), st.lists(st.integers(0, 500), max_size=20))
def test_sentences_do_not_depend_on_chunking(case: tuple[str, list[str]], cuts: list[int]) -> None:
    text = _reply(case[0])
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert [s.text for s in charfmt.sentences(charfmt.iter_events(chunks))] == case[1]


def test_a_sentence_is_out_as_soon_as_it_ends() -> None:
    text = _reply("わあ！本当ですか？")
    splitter = charfmt.SentenceSplitter()
    parser = charfmt.StreamParser()
    cut = text.index("！") + 1
    # "！" may be the start of "！？": the sentence waits for the character after the run.
    assert not [s for e in parser.feed(text[:cut]) for s in splitter.feed(e)]
    first = [s for e in parser.feed(text[cut : cut + 1]) for s in splitter.feed(e)]
    assert [s.text for s in first] == ["わあ！"]


def test_each_sentence_keeps_its_emotion_and_markup_never_reaches_it() -> None:
    body = "<emo>joy</emo>\\n<msg>Yay! &lt;3</msg>\\n<emo>sad</emo>\\n<msg>But... No.</msg>"
    body += "\\n<thought>secret.</thought>"
    text = '{"chats":[{"type":"C","order":1,"body":"' + body + '"}]}'
    got = [(s.text, s.emotion) for s in charfmt.sentences(charfmt.iter_events([text]))]
    assert got == [("Yay!", "joy"), ("<3", "joy"), ("But...", "sad"), ("No.", "sad")]


def test_cli_stream_replay_and_stdin(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "r.json"
    path.write_text(_reply("Hi. Bye."), encoding="utf-8")
    assert main(["stream", "--replay", str(path), "--chunk", "3", "--sentences"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"kind": "sentence", "text": "Hi.", "emotion": "joy", "chat": 0, "segment": 1} in lines
    assert lines[0] == {"kind": "chat_start", "chat": 0, "type": "C", "order": 1}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert main(["stream"]) == 0
    assert charfmt.collect([]) is not None
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["kind"] for e in events][-1] == "chat_end"


def test_cli_stream_strict_fails_on_invalid_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"chats":[{"type":"C","order":1,"body":"<msg>x</act>"}]}'))
    )
    assert main(["stream", "--strict"]) == 1
    assert "CF205" in capsys.readouterr().err


# -- the split depends on the text only, never on the chunking (issue 11.10) -------------------
def _split(deltas: list[str]) -> list[str]:
    """Sentences of one ``msg`` segment delivered as ``deltas``, through the public events."""
    splitter = charfmt.SentenceSplitter()
    out = splitter.feed(charfmt.ChatStart(0, "C", 1))
    out += splitter.feed(charfmt.SegmentStart(0, 0, "msg"))
    for delta in deltas:
        out += splitter.feed(charfmt.TextDelta(0, 0, "msg", delta))
    out += splitter.feed(charfmt.SegmentEnd(0, 0, "msg"))
    return [s.text for s in out]


_PIECES = st.sampled_from(
    [
        *["え", "っ", "本当", "Dr", "Mrs", "e.g", "3", "5", "a", "b", "Wait", "what", "What", "x"],
        *"。！？…‼.!?「」『』“”（）()\"' \n",
        *["...", "…。", "！？", "?!"],
    ]
)


@given(st.lists(_PIECES, max_size=40).map("".join), st.lists(st.integers(0, 200), max_size=20))
def test_any_chunking_gives_the_batch_split(text: str, cuts: list[int]) -> None:
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert _split(chunks) == _split([text])
    assert _split(list(text)) == _split([text])


_WORDS = st.text(st.sampled_from("あいうえおかきくけこ本当やった"), min_size=1, max_size=5)
_RUNS = st.lists(st.sampled_from("。！？…‼!?"), min_size=1, max_size=4).filter(lambda r: bool(set(r) & set("。！？…‼")))


@given(st.lists(st.tuples(_WORDS, _RUNS.map("".join)), min_size=1, max_size=6), st.lists(st.integers(0, 100)))
def test_a_run_of_end_punctuation_stays_with_its_sentence(pairs: list[tuple[str, str]], cuts: list[int]) -> None:
    text = "".join(word + run for word, run in pairs)
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    got = _split(chunks)
    assert got == [word + run for word, run in pairs]  # never a lone "？"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("えっ！？", ["えっ！？"]),
        ("やったー！！！", ["やったー！！！"]),
        ("本当…。", ["本当…。"]),
        ("Dr. Who? Yes.", ["Dr. Who?", "Yes."]),
        ("Really... that's it. OK", ["Really... that's it.", "OK"]),
    ],
)
def test_one_character_deltas_never_split_a_run(text: str, expected: list[str]) -> None:
    assert _split(list(text)) == expected


def test_an_undecided_end_waits_for_the_next_delta_or_the_segment_end() -> None:
    splitter = charfmt.SentenceSplitter()
    splitter.feed(charfmt.ChatStart(0, "C", 1))
    assert not splitter.feed(charfmt.TextDelta(0, 0, "msg", "えっ！"))
    assert not splitter.feed(charfmt.TextDelta(0, 0, "msg", "？"))
    assert [s.text for s in splitter.feed(charfmt.TextDelta(0, 0, "msg", "う"))] == ["えっ！？"]
    assert not splitter.feed(charfmt.TextDelta(0, 0, "msg", "そ… "))  # lower case may follow
    assert [s.text for s in splitter.feed(charfmt.SegmentEnd(0, 0, "msg"))] == ["うそ…"]


# -- linear work: no rescans, no copies of pending text (issue 12.8) ----------------------------
def _feed(text: str, size: int = 4) -> charfmt.SentenceSplitter:
    splitter = charfmt.SentenceSplitter()
    splitter.feed(charfmt.ChatStart(0, "C", 1))
    for i in range(0, len(text), size):
        splitter.feed(charfmt.TextDelta(0, 0, "msg", text[i : i + size]))
    splitter.feed(charfmt.SegmentEnd(0, 0, "msg"))
    return splitter


SHAPES: list[Callable[[int], str]] = [
    lambda n: "." * n,
    lambda n: "Hi" + "!" * n,
    lambda n: "「" + "あ" * n,
    lambda n: "ね！" + "」" * n,
    lambda n: "So..." + " " * n + "x",
    lambda n: "Ok. " * (n // 4),
]
"""Trailing runs the splitter must not rescan, and pending text it must not copy per delta."""


@pytest.mark.parametrize("shape", SHAPES)
def test_work_is_linear_in_the_text(shape: Callable[[int], str]) -> None:
    small, large = shape(2_000), shape(20_000)
    assert _feed(large).steps <= 2 * len(large) + 10  # each character is looked at about once
    assert _feed(large).steps <= 12 * _feed(small).steps + 10


def _cpu(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        _feed(text)
        best = min(best, time.process_time() - start)
    return max(best, 1e-3)


@pytest.mark.parametrize(("shape", "n"), [(SHAPES[0], 2_000), (SHAPES[2], 50_000)])
def test_10x_the_text_costs_about_10x_the_time(shape: Callable[[int], str], n: int) -> None:
    # A rescan of the trailing run, or a copy of the pending text, per 4-character delta makes
    # 10x input cost x100 (a copy is cheap per character: it shows from about 50,000 on); the bound
    # is generous for a loaded machine.
    assert _cpu(shape(10 * n)) <= 30 * _cpu(shape(n))


def test_sentences_of_a_whole_reply_are_those_of_its_events() -> None:
    reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hi! How are you?</msg>"}]}')
    assert list(charfmt.sentences(reply)) == list(charfmt.sentences(reply.events()))
    assert [s.text for s in charfmt.sentences(reply)] == ["Hi!", "How are you?"]


@pytest.mark.parametrize("wrong", ["Hello. World.", b"Hello.", ["Hello."]])
def test_feed_refuses_text_instead_of_events(wrong: object) -> None:
    with pytest.raises(TypeError, match="takes events"):
        charfmt.SentenceSplitter().feed(wrong)  # type: ignore[arg-type]
