"""Untagged speech's last sentence: shown once nothing that follows can make it narration (issue 40, item 6).

The batch reader reads the sentence right before a quotation as the quotation's narration
(``She smiles. "Hi!"``: an action) unless it is said to someone: a question, an exclamation, a
sentence trailing off, or, where a language marks the hearer in the sentence's ending, that
ending (``すごいね。``, ``请明天再来吧。``, ``일찍 닫아요.``). A stream reads it so too, in every
chunking: such a sentence is shown before the reply ends; one that may narrate is never shown as
speech before what follows it is known; neither is ever taken back.
"""

from __future__ import annotations

from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt

WORDS: Final = st.lists(
    st.sampled_from(["the", "old", "keeper", "lamp", "river", "we", "you", "never", "slowly", "opens", "bright"]),
    min_size=2,
    max_size=6,
).map(lambda w: " ".join(w).capitalize())
SAID: Final = st.one_of(
    st.tuples(WORDS, st.sampled_from(["!", "?", "...", "…", "?!"])).map("".join),
    st.sampled_from(
        [
            "本当にすごいね。",
            "今日はもう閉店の時間なんですよ。",
            "よかったら少し休んでいってください。",
            "不好意思，今天已经打烊了。请明天再来吧。",
            "你真的要去吗。",
            "오늘은 가게 문을 일찍 닫아요.",
            "와 주셔서 감사합니다.",
            "心态崩了，当场裂开…",
        ]
    ),
)
"""Sentences said to someone: speech whatever follows them."""
NARRATION: Final = st.one_of(
    WORDS.map(lambda w: w + "."),
    st.sampled_from(["ミオは袖で口元を隠して、少しだけ笑った。", "旅店老板一言不发，把一碗热汤推到了我面前。"]),
)
"""Sentences a quotation right after them makes narration."""
QUOTATION: Final = st.sampled_from(['"Mind the sparks."', "「はい、どうぞ」", "“好的，我知道了。”"])
SIZES: Final = st.integers(1, 9)


def _stream(text: str, size: int) -> tuple[list[charfmt.Event], list[charfmt.Event]]:
    """The events of ``text`` fed in ``size``-character chunks: before ``close()``, and from it."""
    parser = charfmt.StreamParser()
    early: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        early += parser.feed(text[i : i + size])
    return early, parser.close()


def _speech(events: list[charfmt.Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, charfmt.TextDelta) and e.tag == "msg")


@settings(max_examples=60, deadline=None)
@given(SAID, QUOTATION, SIZES)
def test_a_sentence_said_to_someone_is_speech_and_shown_before_the_end(said: str, quote: str, size: int) -> None:
    text = f"{said} {quote}"
    segments = [(s.tag, s.text) for c in charfmt.parse(text, lenient=True).chats for s in c.segments]
    assert segments[0] == ("msg", said)
    early, late = _stream(text, size)
    assert _speech(early).startswith(said)
    assert not any(isinstance(e, charfmt.Reset) for e in early + late)
    assert charfmt.collect(early + late).chats == charfmt.parse(text, lenient=True).chats


@settings(max_examples=60, deadline=None)
@given(NARRATION, QUOTATION, SIZES)
def test_a_sentence_that_narrates_a_quotation_is_never_shown_as_speech(said: str, quote: str, size: int) -> None:
    text = f"{said} {quote}"
    segments = [(s.tag, s.text) for c in charfmt.parse(text, lenient=True).chats for s in c.segments]
    assert segments[0] == ("act", said)
    early, late = _stream(text, size)
    assert said not in _speech(early + late)
    assert not any(isinstance(e, charfmt.Reset) for e in early + late)
    assert charfmt.collect(early + late).chats == charfmt.parse(text, lenient=True).chats


@pytest.mark.parametrize(
    ("text", "tags"),
    [
        ('She smiles warmly. "Welcome back!"', ["act", "msg"]),
        ('Come in, come in! "Mind the sparks."', ["msg", "msg"]),
        ('The door creaks open... "Who goes there?"', ["msg", "msg"]),
        ("ミオは微笑んだ。「おかえりなさい！」", ["act", "msg"]),
        ("おかえりなさい、待ってたよ。「どうぞ」", ["msg", "msg"]),
        ("老板把汤推到我面前。“吃吧。”", ["act", "msg"]),
        ("快进来吧。“外面很冷。”", ["msg", "msg"]),
        ('Wow!Great work. "Thanks."', ["msg", "act", "msg"]),
    ],
    ids=["full stop", "exclamation", "trailing off", "ja plain", "ja particle", "zh plain", "zh particle", "no space"],
)
def test_which_sentence_narrates_the_quotation_after_it(text: str, tags: list[str]) -> None:
    """The marks that end speech end a sentence wherever they stand: ``Wow!`` stays speech before ``Great work.``."""
    assert [s.tag for c in charfmt.parse(text, lenient=True).chats for s in c.segments] == tags
