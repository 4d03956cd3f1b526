"""The player's name (and the character's) in a card's greeting is text, always (found by a new user's trial).

The greeting's macros were expanded before the greeting was read as role-play markup, so a player named
``[anger]`` opened the chat with an ``<emo>anger</emo>``, ``*kicks you*`` with an ``<act>``, and ``Al & <b>``
lost its ``<b>`` silently; in ``serve`` a front end's per-turn ``user_name`` or a message's ``name`` did the
same to a new session's greeting, which was then stored. Now the names are put in after the reading.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import charfmt
from charfmt.cli import main

CARD: dict[str, Any] = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Mira", "description": "{{char}} keeps the lighthouse.", "personality": "", "scenario": "",
        "mes_example": "", "first_mes": "*waves at {{user}}* Welcome back, {{user}}!",
    },
}  # fmt: skip
NAMES = ["[anger]", "*kicks you*", "Al & <b>", "[joy] *waves* hi", "<msg>x</msg>", "{{char}}", "(laughs)"]


def _mira(user: str, **data: Any) -> charfmt.Character:
    card = {**CARD, "data": {**CARD["data"], **data}}
    return charfmt.Character.from_bytes(json.dumps(card).encode(), "mira.json", user_name=user)


def _segments(reply: charfmt.Reply) -> list[tuple[str, str]]:
    return [(s.tag, s.text) for chat in reply.chats for s in chat.segments]


@pytest.mark.parametrize("name", NAMES)
def test_the_greeting_holds_the_players_name_as_text(name: str) -> None:
    opening = charfmt.greeting_exchange(_mira(name))
    assert opening is not None
    assert _segments(opening.reply) == [("act", f"waves at {name}"), ("msg", f"Welcome back, {name}!")]


def test_the_characters_name_is_text_too_and_the_markup_of_the_card_still_reads() -> None:
    character = _mira("Alex", name="[joy] *Mira*", first_mes="[joy] *bows* I am {{char}}, {{user}}.")
    opening = charfmt.greeting_exchange(character)
    assert opening is not None
    assert _segments(opening.reply) == [("emo", "joy"), ("act", "bows"), ("msg", "I am [joy] *Mira*, Alex.")]


@pytest.mark.parametrize(
    ("first_mes", "segments"),
    [
        ("\u202eevil\x1b[31mred\x9b", [("msg", "\u202eevil\ufffd[31mred\x9b")]),
        ("*waves* Hi there [unfinished", [("act", "waves"), ("msg", "Hi there [unfinished")]),
        ("*waves* [half", [("act", "waves"), ("msg", "[half")]),
    ],
    ids=["terminal escape", "open bracket", "open bracket alone"],
)
def test_a_greeting_keeps_markup_left_open_at_its_end_as_words(first_mes: str, segments: list[tuple[str, str]]) -> None:
    """A card's text is whole: what the lenient reader drops as cut off at a stream's end (CF720) is its words
    (a new user's trial: ``\x1b[31mred`` vanished from a greeting, without a word)."""
    opening = charfmt.greeting_exchange(_mira("Alex", first_mes=first_mes))
    assert opening is not None and _segments(opening.reply) == segments


def test_a_long_name_many_times_is_within_the_macro_bound() -> None:
    """A name put back counts toward the macros' output bound, as it did when written by the expansion."""
    with pytest.raises(charfmt.CharfmtError, match="CF929"):
        charfmt.greeting_exchange(_mira("n" * 4096, first_mes="{{user}} " * 2000))


def test_cli_render_keeps_the_name_as_text(tmp_path: Path) -> None:
    card = tmp_path / "mira.json"
    card.write_text(json.dumps(CARD), encoding="utf-8")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["render", "--character", str(card), "--say", "hi", "--user-name", "[anger]"]) == 0
    greeting = json.loads(out.getvalue())["messages"][1]
    assert greeting["role"] == "assistant"
    body = json.loads(greeting["content"])["chats"][0]["body"]
    assert body == "<act>waves at [anger]</act>\n<msg>Welcome back, [anger]!</msg>", body


httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with (
        loopback(up.app) as base,
        loopback(create_app(Settings(character=_mira("Alex"), upstream_url=base + "/v1"))) as at,
    ):
        yield up, at


def test_serve_greets_a_front_ends_player_by_name_as_text(served: tuple[Scripted, str]) -> None:
    """A per-turn ``user_name`` and a chat message's ``name``: the greeting sent, stored and sent upstream as text."""
    up, base = served
    with httpx.stream("POST", base + "/v1/turn", json={"say": "hi", "session": "s", "user_name": "[anger]"},
                      timeout=10) as r:  # fmt: skip
        objects = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ")]
    greeting = objects[0]
    assert greeting["kind"] == "greeting", objects
    body = greeting["reply"]["chats"][0]["body"]
    assert "<emo>" not in body and "Welcome back, [anger]!" in body, body
    stored = json.dumps(httpx.get(base + "/v1/sessions/turn/s", timeout=10).json())
    assert "<act>waves at [anger]</act>\\n<msg>Welcome back, [anger]!</msg>" in stored, stored
    chat = {"messages": [{"role": "user", "name": "*kicks you*", "content": "hi"}], "user": "kai"}
    assert httpx.post(base + "/v1/chat/completions", json=chat, timeout=10).status_code == 200
    sent = [m["content"] for m in up.requests[-1]["messages"] if m["role"] == "assistant"]
    assert any("Welcome back, *kicks you*!" in m for m in sent), sent
    assert not any("<act>kicks you</act>" in m for m in sent), sent


def test_serve_draws_a_new_sessions_greeting_anew(served: tuple[Scripted, str]) -> None:
    """A greeting's ``{{roll}}``/``{{random}}`` is drawn for each new session, as ``chat`` and ``render`` draw it
    (it was drawn once at the server's start: every player, and every restart, the same roll)."""
    up = Scripted()
    card = _mira("Alex", first_mes="*rolls* {{roll:d1000000}} and {{random:a,b,c,d,e,f,g,h}}")
    with (
        loopback(up.app) as upstream,
        loopback(create_app(Settings(character=card, upstream_url=upstream + "/v1"))) as base,
    ):
        greetings = set()
        for n in range(3):
            with httpx.stream("POST", base + "/v1/turn", json={"say": "hi", "session": f"g{n}"}, timeout=10) as r:
                events = [x for x in r.iter_lines() if x.startswith("data: ")]
            first = json.loads(events[0][6:])
            assert first["kind"] == "greeting"
            greetings.add(first["content"])
    assert len(greetings) == 3, greetings
