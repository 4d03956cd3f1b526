"""Sentences for speech: split as early as possible, the same for any chunking, with the active emotion."""

from __future__ import annotations

import io
import json
import sys

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
    ("Wait... what?!  Really", ["Wait...", "what?!", "Really"]),
    ("Version 2.0 is out", ["Version 2.0 is out"]),
    ("えっ…まさか", ["えっ…", "まさか"]),
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
    first = [s for e in parser.feed(text[:cut]) for s in splitter.feed(e)]
    assert [s.text for s in first] == ["わあ！"]


def test_each_sentence_keeps_its_emotion_and_markup_never_reaches_it() -> None:
    body = "<emo>joy</emo>\\n<msg>Yay! &lt;3</msg>\\n<emo>sad</emo>\\n<msg>But... no.</msg>"
    body += "\\n<thought>secret.</thought>"
    text = '{"chats":[{"type":"C","order":1,"body":"' + body + '"}]}'
    got = [(s.text, s.emotion) for s in charfmt.sentences(charfmt.iter_events([text]))]
    assert got == [("Yay!", "joy"), ("<3", "joy"), ("But...", "sad"), ("no.", "sad")]


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
