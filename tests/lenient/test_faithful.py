"""Free replies read faithfully (issues 22.2 and 29): the cases of tests/cases/lenient_faithful.txt.

Each case gives the chats a lenient read must find, the diagnostics it must report (``!``)
and those it must not (``!!``: a tag made from scaffolding, say). Every diagnostic points
into the raw input.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import Case, load_cases

import charfmt
from charfmt.events import TextDelta
from charfmt.stream import StreamParser, collect

CASES = load_cases("lenient_faithful.txt")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_faithful_case(case: Case) -> None:
    reply = charfmt.parse(case.input, lenient=True)
    got = [[c.type, c.order, [[s.tag, s.text] for s in c.segments]] for c in reply.chats]
    assert got == [json.loads(line) for line in case.expected if line.startswith("[")]
    codes = [d.code for d in reply.diagnostics]
    for line in case.expected:
        if line.startswith("!!"):
            assert line[2:].strip() not in codes, codes
        elif line.startswith("!"):
            assert line[1:].strip() in codes, f"{line[1:].strip()} not in {codes}"
        elif line.startswith("dialect:"):
            assert reply.dialect == line.split(":", 1)[1].strip()
    for d in reply.diagnostics:
        assert 0 <= d.offset <= d.end <= len(case.input)
    assert "CF999" not in codes


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_faithful_case_streams_as_it_reads(case: Case) -> None:
    for size in (1, 7):
        parser = StreamParser()
        events = []
        for i in range(0, len(case.input), size):
            events += parser.feed(case.input[i : i + size])
        events += parser.close()
        assert collect(events).chats == charfmt.parse(case.input, lenient=True).chats


# --- issue 22.14: what is not text gets a TypeError of charfmt's own ----------------------------


@pytest.mark.parametrize("value", [None, {"chats": []}, [{"type": "C"}], 3])
@pytest.mark.parametrize("lenient", [False, True])
def test_parse_of_something_not_text_says_str_or_bytes(value: object, lenient: bool) -> None:
    with pytest.raises(TypeError, match="str or bytes, not " + type(value).__name__):
        charfmt.parse(value, lenient=lenient)  # type: ignore[arg-type]


def test_parse_takes_any_bytes_like_object() -> None:
    text = b'{"chats": [{"type": "I", "order": 1, "body": "ok"}]}'
    assert charfmt.parse(bytearray(text)) == charfmt.parse(memoryview(text)) == charfmt.parse(text)  # type: ignore[arg-type]


# --- issue 22.2b: an echo of the player's own turn is not the character's speech ----------------

ECHO = '<user_chats><chat type="C"><emo>annoyed</emo><msg>You broke it again!</msg>\n<act>kicks the &lt;drone&gt;</act>'
TURNS = [
    "[angry] You broke it again! *kicks the <drone>*",
    charfmt.UserTurn.say("You broke it again!", emotion="angry", action="kicks the <drone>"),
    ["You broke it again!", "kicks the <drone>"],
]


@pytest.mark.parametrize("turn", TURNS, ids=["typed", "UserTurn", "lines"])
@pytest.mark.parametrize("closed", [False, True])
def test_an_echo_of_the_players_turn_is_reported_not_shown(turn: object, closed: bool) -> None:
    text = ECHO + ("</chat></user_chats>" if closed else "")
    blind = charfmt.parse(text, lenient=True)
    assert "You broke it again!" in [s.text for c in blind.chats for s in c.segments]  # without the turn: read
    told = charfmt.parse(text, lenient=True, turn=turn)  # type: ignore[arg-type]
    assert told.chats == []
    assert "CF625" in [d.code for d in told.diagnostics]
    if not closed:
        return  # (what follows an echo left open is inside it)
    answer = charfmt.parse(text + "\n<emo>sad</emo>\n<msg>Sorry...</msg>", lenient=True, turn=turn)  # type: ignore[arg-type]
    assert [[(s.tag, s.text) for s in c.segments] for c in answer.chats] == [[("emo", "sad"), ("msg", "Sorry...")]]


@pytest.mark.parametrize("size", [1, 5])
def test_a_stream_told_the_turn_never_shows_its_echo(size: int) -> None:
    text = ECHO + "</chat></user_chats>\n<emo>sad</emo>\n<msg>Sorry...</msg>"
    parser = StreamParser(turn=TURNS[0])
    events = []
    for i in range(0, len(text), size):
        events += parser.feed(text[i : i + size])
    events += parser.close()
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "broke" not in shown
    assert collect(events).chats == charfmt.parse(text, lenient=True, turn=TURNS[0]).chats


@pytest.mark.parametrize("turn", TURNS, ids=["typed", "UserTurn", "lines"])
@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_iter_events_and_aiter_events_take_the_turn_as_parse_does(turn: object, size: int) -> None:
    text = ECHO + "</chat></user_chats>\n<emo>sad</emo>\n<msg>Sorry...</msg>"
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    batch = charfmt.parse(text, lenient=True, turn=turn)  # type: ignore[arg-type]

    async def agen() -> Any:
        for chunk in chunks:
            yield chunk

    async def gather() -> list[Any]:
        return [e async for e in charfmt.aiter_events(agen(), turn=turn)]  # type: ignore[arg-type]

    for events in (list(charfmt.iter_events(chunks, turn=turn)), asyncio.run(gather())):  # type: ignore[arg-type]
        assert "broke" not in "".join(e.text for e in events if isinstance(e, TextDelta))
        assert collect(events) == batch  # stream == batch, the echo's CF625 included
    assert "CF625" in [d.code for d in batch.diagnostics]


def test_an_echo_that_is_not_the_players_turn_is_still_read() -> None:
    text = ECHO + "</chat></user_chats>"
    reply = charfmt.parse(text, lenient=True, turn="[joy] Good morning!")
    assert "You broke it again!" in [s.text for c in reply.chats for s in c.segments]


MIXED = '<user_chats>\n<chat type="C">\n<msg>Hi! Can you fix my drone?</msg>\nThe customer replied:\n<emo>pleased</emo>'
"""The request form echoed with the player's line in it, then the model's own words in the same chat."""


@pytest.mark.parametrize("size", [0, 1, 6])
def test_the_players_line_inside_an_echoed_request_form_is_dropped_the_rest_read(size: int) -> None:
    turn = charfmt.UserTurn.say("Hi! Can you fix my drone?", emotion="joy")
    reply = charfmt.parse(MIXED, lenient=True, turn=turn)
    assert [[(s.tag, s.text) for s in c.segments] for c in reply.chats] == [
        [("msg", "The customer replied:"), ("emo", "pleased")]
    ]
    echo = next(d for d in reply.diagnostics if d.code == "CF625")
    assert MIXED[echo.offset : echo.end] == "Hi! Can you fix my drone?"
    if size:
        parser = StreamParser(turn=turn)
        events = [e for i in range(0, len(MIXED), size) for e in parser.feed(MIXED[i : i + size])] + parser.close()
        assert "drone" not in "".join(e.text for e in events if isinstance(e, TextDelta))
        assert collect(events).chats == reply.chats


# --- issue 29.5: the reader never manufactures chats, tags or elements from fragments -----------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from charfmt.testing import replies  # noqa: E402

WORDS = st.lists(st.from_regex(r"[A-Za-z]{1,8}", fullmatch=True), min_size=2, max_size=12)
PREFIXES = [
    "<<SYS>>\nBe Rex.\n<</SYS>>\n", "[INST] hi [/INST]", "<|im_start|>assistant\n", "<start_of_turn>model\n",
    "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|assistant|>", "<USER-CHAT-ID>7</USER-CHAT-ID>",
    "[SYSTEM_PROMPT]Be Rex.[/SYSTEM_PROMPT]", "<|im_start|>user\nhi<|im_end|>\n",
    "<start_of_turn>user\nhi<end_of_turn>",
]  # fmt: skip
"""Scaffolding echoed before a reply: prompt turns closed, or the assistant's turn opened."""
SUFFIXES = ["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "[INST]", "<|im_start|>user\nmore"]
"""Scaffolding after a reply: its turn closed, or the next (user) turn begun."""
MARKERS = ["<<SYS>>", "<</SYS>>", "[INST]", "[/INST]", "<|im_", "_of_turn>", "_header_id|>", "<|eot_id|>", "USER-CHAT"]


@settings(max_examples=40, deadline=None)
@given(replies().filter(lambda r: bool(r.chats)), WORDS, st.sampled_from(["}", "", "]", "}}"]))
def test_prose_after_a_json_reply_left_unbalanced_is_never_one_chat_per_word(
    reply: charfmt.Reply, words: list[str], closer: str
) -> None:
    text = charfmt.dumps(reply)
    assert text.endswith("]}")
    damaged = text[:-2] + closer + "\n" + " ".join(words) + "."
    got = charfmt.parse(damaged, lenient=True)
    assert len(got.chats) <= len(reply.chats)
    assert {d.code for d in got.diagnostics} & {"CF601", "CF623"}  # the prose is reported, not read as chats


@settings(max_examples=60, deadline=None)
@given(
    WORDS,
    st.lists(st.sampled_from(PREFIXES), max_size=3),
    st.lists(st.sampled_from(SUFFIXES), max_size=2),
    st.booleans(),
)
def test_chat_template_markers_are_never_tags_or_speech(
    words: list[str], before: list[str], after: list[str], tagged: bool
) -> None:
    if not before and not after:
        before = [PREFIXES[0]]
    speech = " ".join(words) + "."
    reply = f"<emo>joy</emo>\n<msg>{speech}</msg>" if tagged else speech
    text = "".join(before) + reply + "".join(after)
    got = charfmt.parse(text, lenient=True)
    table = {t.name for t in charfmt.TAGS}
    for chat in got.chats:
        for s in chat.segments:
            assert s.tag in table
            assert not any(m in s.text for m in MARKERS), s.text
            assert "<" not in s.text and "[" not in s.text and "|" not in s.text, s.text
    assert any(s.text == speech for c in got.chats for s in c.segments)
    assert "CF622" in {d.code for d in got.diagnostics}


# --- issue 29.6: strict errors point at the first character no valid reply can continue from ---


def _first_error(text: str) -> int | None:
    try:
        charfmt.parse(text)
    except charfmt.ParseError as e:
        return min(d.offset for d in e.diagnostics if d.severity == "error")
    return None


def _first_stream_error(text: str, size: int) -> int | None:
    parser = StreamParser(lenient=False)
    try:
        for i in range(0, len(text), size):
            parser.feed(text[i : i + size])
        parser.close()
    except charfmt.ParseError as e:
        return min(d.offset for d in e.diagnostics if d.severity == "error")
    return None


def test_strict_first_error_is_where_the_strict_stream_first_fails_over_fuzz_cases() -> None:
    from charfmt.fuzz import fuzz_cases

    checked = 0
    for case in fuzz_cases(7, 300):
        first = _first_error(case.text)
        assert first == _first_stream_error(case.text, 5), case.text
        checked += first is not None
    assert checked > 200


def test_the_first_strict_error_is_the_body_before_the_broken_json() -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<EMO>joy</EMO>\\q"}]}'
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text)
    assert info.value.first.offset == text.index("<EMO>")
    assert [d.code for d in info.value.diagnostics] == ["CF204", "CF101"]
