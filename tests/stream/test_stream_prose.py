"""Issue 22.17: replies that ignore the format speak before ``close()``, and end as the batch reads them.

The corpus is tests/data/prose_replies.txt (prose, role-play, quoted speech, brackets,
``<think>`` then prose, chat-template markers); ``benchmarks/bench_stream.py --prose`` adds
the fuzz cases written in the dialect table's prose-like dialects.
"""

from __future__ import annotations

import pytest
from conftest import TESTS

import charfmt
from charfmt.events import Reset, TextDelta
from charfmt.stream import StreamParser, collect

CORPUS = TESTS / "data" / "prose_replies.txt"
_BODY = "\n".join(line for line in CORPUS.read_text(encoding="utf-8").split("\n") if not line.startswith("#"))
REPLIES = [r.strip("\n") for r in _BODY.split("\n%%\n") if r.strip()]
SPEECH = {t.name for t in charfmt.DEFAULT_TAGS.with_role("speech")} | {charfmt.tags.TEXT_TAG}


def _stream(text: str, size: int = 4) -> tuple[list[charfmt.Event], list[charfmt.Event]]:
    parser = StreamParser()
    early = [e for i in range(0, len(text), size) for e in parser.feed(text[i : i + size])]
    return early, parser.close()


def test_the_corpus_is_prose() -> None:
    assert len(REPLIES) >= 30
    assert all(charfmt.parse(r, lenient=True).dialect not in (None, "canonical") for r in REPLIES)


def test_nine_in_ten_prose_replies_speak_before_close() -> None:
    early_speech = 0
    for text in REPLIES:
        early, _late = _stream(text)
        early_speech += any(isinstance(e, TextDelta) and e.tag in SPEECH for e in early)
    assert early_speech >= 0.9 * len(REPLIES), f"{early_speech} of {len(REPLIES)}"


@pytest.mark.parametrize("text", REPLIES, ids=[r[:30] for r in REPLIES])
@pytest.mark.parametrize("size", [1, 4])
def test_a_prose_reply_streams_as_it_reads(text: str, size: int) -> None:
    early, late = _stream(text, size)
    assert not any(isinstance(e, Reset) for e in early + late)
    assert collect(early + late) == charfmt.parse(text, lenient=True)


@pytest.mark.parametrize(
    "preamble",
    [
        "Sure! Here is the reply:\n",
        "Okay.\n",
        "Hello there, friend. ",
        "以下が返答です。\n",
        "Okay here you go, friend\n",
        "Hello there, traveller.\nHere is what I'd say to that\n",
    ],
)
def test_a_preamble_to_a_json_reply_is_not_shown_as_speech(preamble: str) -> None:
    early, late = _stream(preamble + '{"chats": [{"type": "C", "order": 1, "body": "<msg>Hi!</msg>"}]}')
    assert not any(isinstance(e, Reset) for e in early + late)
    assert "".join(e.text for e in early + late if isinstance(e, TextDelta)) == "Hi!"
