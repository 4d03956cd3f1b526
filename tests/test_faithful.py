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
