"""A card in full meets what front ends ask: a continue and an impersonation get the card's system prompt, its
lore and its post-history instructions as a turn does; both post-history instructions (the card's, the front
end's) close the turn's message, never a late ``system`` message; a new session's greeting can be continued; the
greeting is written and read back with the front end's emotion names; the lore leads a continue's first batch."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character  # noqa: E402
from charfmt.prompt.lorebook import Lorebook  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402
from test_lore_prompt import CARD  # noqa: E402

T = 10.0
CARD_PHI = "Keep Mira's answer under three sentences."
"""The card's post_history_instructions, expanded."""
FRONT_PHI = "[System note: Mira never breaks character.]"
"""The front end's own post-history instructions (SillyTavern's, a system message after the history)."""
INTRO = "You are Mira. Stay in character at all times. Write like a sea shanty."
"""The card's system_prompt, expanded ({{original}}: charfmt's opening line)."""


def mira(first_mes: str | None = None) -> Character:
    data = {**CARD["data"], "first_mes": first_mes} if first_mes is not None else CARD["data"]
    return Character.from_bytes(json.dumps({**CARD, "data": data}).encode(), "mira.json", user_name="Alex")


def reply(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, separators=(",", ":"))


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def up(scripted: tuple[Scripted, str]) -> Iterator[Scripted]:
    upstream = scripted[0]
    upstream.mode, upstream.delay, upstream.reasoning, upstream.refuse_prefill = "ok", 0.0, None, False
    upstream.requests.clear()
    yield upstream


@pytest.fixture
def url(scripted: tuple[Scripted, str]) -> str:
    return scripted[1] + "/v1"


def post(base: str, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    r = httpx.post(base + "/v1/chat/completions", json={**body, "stream": False}, headers=headers, timeout=T)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def no_late_system(messages: list[dict[str, str]]) -> None:
    assert [m["role"] for m in messages[1:] if m["role"] == "system"] == [], [m["role"] for m in messages]


CUT = "[fear] *grips the rail* The lamp"
"""Mira's answer as the front end shows it, cut off; it names the lamp (a key at depth 1) that the turn did not."""
WHOLE = reply("<emo>fear</emo>\n<act>grips the rail</act>\n<msg>The lamp must stay lit.</msg>")


@pytest.mark.parametrize("server", ["llama-server", "openai"], ids=["prefill", "rest"])
def test_a_continue_gets_the_turns_system_prompt_lore_and_both_post_history_instructions(
    server: str, up: Scripted, url: str
) -> None:
    """Prefilled or asked for as the rest, a continue is sent the system prompt of the turn it continues (the
    card's system_prompt, the lore that turn fired, the same seed's rolls): the reply so far is not scanned
    again. The card's post-history instructions, then the front end's, close the user message."""
    said = [{"role": "user", "content": "a storm is coming"}]
    continued = [*said, {"role": "assistant", "content": CUT}, {"role": "system", "content": FRONT_PHI}]
    up.mode = "say:" + WHOLE
    with loopback(create_app(Settings(character=mira(), upstream_url=url, server=server, reply_format="tags"))) as b:
        post(b, {"messages": said, "seed": 5})
        turn = up.requests[-1]["messages"]
        answer = post(b, {"messages": continued, "seed": 5})
    sent = up.requests[-1]["messages"]
    assert answer["choices"][0]["message"]["content"].endswith("must stay lit.")
    assert sent[0]["content"] == turn[0]["content"]  # the turn's own system prompt, lore and all
    assert sent[0]["content"].startswith(INTRO) and "Storms wreck ships" in sent[0]["content"]
    assert "The lamp is older than the town." not in json.dumps(sent)  # (the turn's lore: its words, not the reply's)
    no_late_system(sent)
    asked = [m for m in sent if m["role"] == "user"][-1]["content"]
    assert asked.index(CARD_PHI) < asked.index(FRONT_PHI) and asked.endswith(FRONT_PHI)
    if server == "llama-server":  # the turn's message, then the reply so far to go on from
        assert sent[-1]["role"] == "assistant" and sent[-1]["content"].endswith("<msg>The lamp")
        assert asked.index("a storm is coming") < asked.index(CARD_PHI)
    else:  # the turn, the reply so far, then the rest asked for
        assert [m["role"] for m in sent[-3:]] == ["user", "assistant", "user"] and "a storm" in sent[-3]["content"]
        assert CARD_PHI not in sent[-3]["content"] and asked.index("Write only the rest of it") < asked.index(CARD_PHI)


def test_an_impersonation_gets_the_cards_prompt_and_the_lore_of_the_history(up: Scripted, url: str) -> None:
    """The player's line asked for: the card's system prompt, the lore the history wakes (the newest message
    scanned is the character's last reply: the turn asked for is none yet), the post-history instructions."""
    near = Lorebook.from_json({"entries": {"0": {"uid": 0, "key": ["gallery"], "content": "The gallery is iron.",
                                                 "scanDepth": 1}}}, "near")  # fmt: skip
    messages = [
        {"role": "user", "content": "where are you?"},
        {"role": "assistant", "content": "[neutral] *leans over the gallery* Up here!"},
        {"role": "system", "content": FRONT_PHI},
        {"role": "system", "content": "[Write your next reply from the point of view of Alex.]"},
    ]
    up.mode = "say:" + reply("<emo>joy</emo>\n<msg>Coming up!</msg>")
    settings = Settings(character=mira(), upstream_url=url, reply_format="tags", lorebooks=(near,))
    with loopback(create_app(settings)) as base:
        answer = post(base, {"messages": messages})
    assert answer["choices"][0]["message"]["content"] == "[joy] Coming up!"
    sent = up.requests[-1]["messages"]
    assert sent[0]["content"].startswith(INTRO) and "The gallery is iron." in sent[0]["content"]
    no_late_system(sent)
    asked = sent[-1]["content"]
    assert sent[-1]["role"] == "user" and asked.startswith("[Write the next message of Alex (the player)")
    assert asked.index("point of view of Alex") < asked.index(CARD_PHI) < asked.index(FRONT_PHI)


def test_a_new_sessions_greeting_is_continued_and_kept_once(up: Scripted, url: str) -> None:
    """A front end that shows the card's greeting and asks to continue it, in a new session: the session opens
    with the greeting (kept once) and the model goes on from it; only the rest is answered."""
    app = create_app(Settings(character=mira(), upstream_url=url, reply_format="tags"))
    greeting = reply("<act>waves from the gallery</act>\n<msg>Welcome back, Alex! The kettle is on.</msg>")
    up.mode = "say:" + greeting
    with loopback(app) as base:
        shown = httpx.get(base + "/v1/info", timeout=T).json()["greeting"]["content"]
        assert shown == "*waves from the gallery* Welcome back, Alex!"
        answer = post(base, {"messages": [{"role": "assistant", "content": shown}]}, **{"X-Charfmt-Session": "g"})
    assert answer["choices"][0]["message"]["content"] == " The kettle is on."
    sent = up.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant"]
    assert sent[1]["content"] == CARD_PHI  # no player's turn: the post-history instructions alone
    assert sent[2]["content"].endswith("<msg>Welcome back, Alex!")
    (kept,) = app.state.charfmt.sessions.store.sessions()
    assert kept.turns == 1  # the greeting, kept as it was (the continuation is the front end's)


def test_the_greeting_is_written_and_read_back_with_the_front_ends_emotion_names(up: Scripted, url: str) -> None:
    """AIRI knows ``happy``, not ``joy``: ``/v1/info``'s greeting says ``happy``, and the greeting the front end
    sends back before the player's first words is the first exchange, its emotion read back as ``joy``."""
    character = mira("[joy] *waves from the gallery* Welcome back, {{user}}!")
    with loopback(create_app(Settings(character=character, upstream_url=url, reply_format="airi"))) as base:
        info = httpx.get(base + "/v1/info", timeout=T).json()
        shown = info["greeting"]["content"]
        assert '"name":"happy"' in shown and "joy" not in shown and info["emotion_names"]["joy"] == "happy"
        post(base, {"messages": [{"role": "assistant", "content": shown}, {"role": "user", "content": "hi"}]})
    sent = up.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "assistant", "user"]
    assert "<emo>joy</emo>" in sent[1]["content"] and "Welcome back, Alex!" in sent[1]["content"]


def test_the_lore_leads_a_continues_first_batch_before_what_it_goes_on_from(up: Scripted, url: str) -> None:
    from charfmt.serve.continuation import Ask, Prefix
    from charfmt.serve.turns import Lore

    character = mira()
    up.mode = "say:" + WHOLE
    app = create_app(Settings(character=character, upstream_url=url))

    async def first_batch() -> list[Any]:
        engine = await app.state.charfmt.engine()
        going = engine.continuation(engine.read(WHOLE.replace(" must stay lit.", "")))
        batches = engine.turn_batches([], character.shorthand("a storm!"), ask=Ask(continuation=going), lore=True)
        try:
            return await anext(batches)
        finally:
            await batches.aclose()
            await app.state.charfmt.aclose()

    batch = asyncio.run(first_batch())
    assert isinstance(batch[0], Lore) and isinstance(batch[1], Prefix)
    assert "Storms" in json.dumps(batch[0].to_dict())
