"""Free replies read faithfully (issues 22.2 and 29): the cases of tests/cases/lenient_faithful.txt.

Each case gives the chats a lenient read must find, the diagnostics it must report (``!``)
and those it must not (``!!``: a tag made from scaffolding, say). Every diagnostic points
into the raw input.
"""

from __future__ import annotations

import json

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


def test_an_echo_that_is_not_the_players_turn_is_still_read() -> None:
    text = ECHO + "</chat></user_chats>"
    reply = charfmt.parse(text, lenient=True, turn="[joy] Good morning!")
    assert "You broke it again!" in [s.text for c in reply.chats for s in c.segments]
