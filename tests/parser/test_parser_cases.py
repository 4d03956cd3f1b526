"""The data-driven cases in tests/cases/: valid replies and invalid ones with positions."""

from __future__ import annotations

import json

import pytest
from conftest import MARK, Case, load_cases

import charfmt

VALID = load_cases("valid.txt")
INVALID = load_cases("invalid.txt")


@pytest.mark.parametrize("case", VALID, ids=[c.name for c in VALID])
def test_valid(case: Case) -> None:
    reply = charfmt.parse(case.input)
    got = [[c.type, c.order, [[s.tag, s.text] for s in c.segments]] for c in reply.chats]
    assert got == [json.loads(line) for line in case.expected]
    assert all(d.severity != "error" for d in reply.diagnostics)


@pytest.mark.parametrize("case", VALID, ids=[c.name for c in VALID])
def test_valid_survives_canonical_rewrite(case: Case) -> None:
    reply = charfmt.parse(case.input)
    again = charfmt.parse(charfmt.dumps(reply))
    assert again.chats == reply.chats


@pytest.mark.parametrize("case", INVALID, ids=[c.name for c in INVALID])
def test_invalid(case: Case) -> None:
    marks = []
    text = case.input
    while MARK in text:
        marks.append(text.index(MARK))
        text = text.replace(MARK, "", 1)
    assert len(marks) == len(case.expected), f"{case.name}: one marker per expected code"
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text)
    errors = [d for d in info.value.diagnostics if d.severity == "error"]
    assert [(d.code, d.offset) for d in errors] == list(zip(case.expected, marks, strict=True))
    for d in errors:
        before = text[: d.offset]
        assert d.line == before.count("\n") + 1
        assert d.column == len(before) - (before.rfind("\n") + 1) + 1
        assert d.code in str(d)
    first = errors[0]
    assert f"line {first.line}, column {first.column}" in str(info.value)


@pytest.mark.parametrize("case", INVALID, ids=[c.name for c in INVALID])
def test_invalid_input_is_repaired_and_the_repair_reported_when_lenient(case: Case) -> None:
    text = case.input.replace(MARK, "")
    reply = charfmt.parse(text, lenient=True)
    assert reply.diagnostics, "a lenient read of invalid input says what it repaired"
    assert "CF999" not in [d.code for d in reply.diagnostics]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("<emo></emo>", "is empty"),
        ("<emo> joy</emo>", "starts or ends with whitespace"),
        ("<emo>a&lt;b</emo>", "holds '&'"),
        ("<emo>a<</emo>", "holds '<'"),
        ("<emo>a\tb</emo>", "holds U+0009"),
    ],
)
def test_a_bad_emotion_key_is_described_as_it_is(body: str, says: str) -> None:
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}))
    assert info.value.first.code == "CF208"
    assert says in info.value.first.message
    assert "body: the emotion key" in info.value.first.message, info.value.first.message  # it names the key
