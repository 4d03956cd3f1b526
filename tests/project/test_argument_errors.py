"""Wrong arguments through the public API are refused at the call, naming the argument (``tests/argument_errors.toml``).

A wrong type is a ``TypeError``, a wrong value a ``CharfmtError`` (a ``ValueError``); never an
``AttributeError`` from deep inside, a regex internal error or a bare pydantic ``ValidationError``.
"""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from conftest import ROOT, TESTS

import charfmt
from charfmt.stream import COMPILED, StreamParser

REPLY = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hi</msg>"}]}'
CASES: list[dict[str, str]] = tomllib.loads((TESTS / "argument_errors.toml").read_text(encoding="utf-8"))["case"]
ERRORS: dict[str, type[Exception]] = {"TypeError": TypeError, "CharfmtError": charfmt.CharfmtError}


def _namespace() -> dict[str, Any]:
    kai = charfmt.Character.load(ROOT / "examples" / "characters" / "yuki.toml")
    turn = kai.shorthand("hi")
    exchange = charfmt.Exchange(user=turn, reply=charfmt.parse(REPLY))
    return {"charfmt": charfmt, "REPLY": REPLY, "StreamParser": StreamParser, "kai": kai, "turn": turn,
            "exchange": exchange}  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_a_wrong_argument_is_refused_naming_it(case: dict[str, str]) -> None:
    with pytest.raises(Exception) as raised:
        eval(case["call"], _namespace())
    assert type(raised.value) is ERRORS[case["raises"]], raised.value
    says = case["says_compiled"] if COMPILED and "says_compiled" in case else case["says"]
    assert says in str(raised.value)


def test_the_same_arguments_of_the_right_type_are_taken() -> None:
    vocabulary = charfmt.Vocabulary.of("joy")
    reply = charfmt.parse(REPLY, vocabulary=vocabulary, tags=charfmt.DEFAULT_TAGS, lenient=False, max_size=len(REPLY))
    assert [e.text for e in reply.events() if e.kind == "emotion"] == ["joy"]
    assert charfmt.parse(REPLY + "x", lenient=True, vocabulary=vocabulary).chats
    namespace = _namespace()
    request = charfmt.render_messages(namespace["kai"], (namespace["exchange"],), "hi", budget=100_000, structured=True)
    assert request["messages"][-1]["role"] == "user"
