"""What a stream shows is never taken back (issue 40, item 6): replies whose stream once did, as data.

Each case of ``stream_resets.jsonl`` is a reply (real model output, or its shape) whose stream
showed something the batch reader then read otherwise, so that ``close()`` took it back with a
``Reset``: a quotation opened far from the end, a label before a quotation, a body's untagged
text before a quotation, the prompt echoed before a JSON reply or in an element, the format's
placeholder body, a quote escaped as in JSON outside JSON, chat-template scaffolding in a body,
a CJK preamble. Fed in 4- and 1-character chunks, told the player's turn and the prompt of
``character`` (as ``charfmt serve`` and ``charfmt chat`` tell theirs) where a case names one: no
``Reset``, and the stream ends as the batch parse does.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Final

import pytest
from conftest import TESTS

import charfmt

HERE: Final = TESTS
CASES: Final = [json.loads(line) for line in (HERE / "stream_resets.jsonl").read_text("utf-8").splitlines()]


@functools.cache
def _character(name: str) -> charfmt.Character:
    return charfmt.Character.load(HERE.parent / "examples" / "characters" / f"{name}.toml")


def told(case: dict[str, Any]) -> dict[str, Any]:
    """What the case's caller told the stream and the batch reader: the turn and the prompt, if it names them."""
    if "character" not in case:
        return {}
    character = _character(case["character"])
    turn = character.shorthand(case["turn"])
    return {"turn": turn, "prompt": charfmt.render_messages(character, [], turn)["messages"]}


@pytest.mark.parametrize("size", [4, 1])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_what_a_stream_shows_is_never_taken_back(case: dict[str, Any], size: int) -> None:
    text, known = case["text"], told(case)
    parser = charfmt.StreamParser(**known)
    events: list[charfmt.Event] = []
    for i in range(0, len(text), size):
        events += parser.feed(text[i : i + size])
    events += parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in events)
    assert charfmt.collect(events).chats == charfmt.parse(text, lenient=True, **known).chats
