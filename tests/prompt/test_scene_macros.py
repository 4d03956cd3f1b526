"""A card in a scene's cast reaches the model as a single character's does: its macros expanded, ``{{char}}`` that
member, ``{{user}}`` the scene's player, through ``Scene.render_system``, ``Scene.render_messages`` and
``charfmt serve --scene`` (a scripted upstream sees the prompt; a front end may name its player per turn)."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from charfmt.prompt.scene import Scene

NOW = dt.datetime(2026, 11, 28, 15, 4)
CARD: dict[str, Any] = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Kira",
        "nickname": "Kiki",
        "description": "{{char}} is a blacksmith. She greets {{user}} warmly. <BOT> never lies to <USER>.",
        "personality": "gruff, {{random:honest,loyal}}",
        "scenario": "{{user}} walks into {{char}}'s forge at {{time}} on {{weekday}}.",
        "first_mes": "*wipes soot off her hands* Welcome, {{user}}.",
        "mes_example": "<START>\n{{user}}: How much?\n{{char}}: *holds up three fingers* Three silver, {{user}}.",
    },
}  # fmt: skip


def _forge(tmp_path: Path, player: str = "Alex") -> Scene:
    (tmp_path / "kira.json").write_text(json.dumps(CARD), encoding="utf-8")
    rex = (ROOT / "examples" / "characters" / "rex.toml").as_posix()
    (tmp_path / "forge.toml").write_text(
        f'name = "The forge"\nsetting = "Rex visits the forge."\nuser_name = "{player}"\n\n'
        f'[[cast]]\nid = "kira"\ncharacter = "kira.json"\n\n[[cast]]\nid = "rex"\ncharacter = "{rex}"\n',
        encoding="utf-8",
    )
    return Scene.load(tmp_path / "forge.toml")


def test_a_cast_members_card_macros_are_expanded_in_the_scenes_system_prompt(tmp_path: Path) -> None:
    scene = _forge(tmp_path)
    system = scene.render_system(seed=3, now=NOW)
    assert "{{" not in system and "<BOT>" not in system and "<USER>" not in system
    kira = system[system.index('### Kira (speaker "kira")') : system.index('### Rex (speaker "rex")')]
    assert "Kiki is a blacksmith. She greets Alex warmly. Kiki never lies to Alex." in kira  # the nickname, the player
    assert "Alex walks into Kiki's forge at 3:04 PM on Saturday." in kira
    assert re.search(r"gruff, (honest|loyal)", kira)
    assert "You are Rex, a retired combat robot" in system  # a member without macros: as written
    assert scene.render_system(seed=3, now=NOW) == system  # the same seed and clock, the same prompt
    assert len({scene.render_system(seed=s, now=NOW) for s in range(12)}) == 2  # {{random}} draws per seed


def test_the_scenes_messages_hold_no_macro_and_repeat_under_a_seed(tmp_path: Path) -> None:
    scene = _forge(tmp_path, player="Sam")
    turn = scene.cast["kira"].shorthand("a blade, please")
    first = scene.render_messages([], turn, seed=9, now=NOW)
    assert "{{" not in json.dumps(first) and "She greets Sam warmly." in first["messages"][0]["content"]
    assert scene.render_messages([], turn, seed=9, now=NOW) == first


httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback, scene_reply  # noqa: E402

T = 10.0


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


def test_serve_scene_sends_the_cast_expanded_and_names_the_player_a_front_end_gives(
    scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    up, base = scripted
    up.mode, up.delay = "say:" + scene_reply("kira"), 0.0
    up.requests.clear()
    scene = _forge(tmp_path)
    settings = Settings(character=scene.cast["kira"], scene=scene, upstream_url=base + "/v1")
    with loopback(create_app(settings)) as served:
        r = httpx.post(served + "/v1/turn", json={"say": "hello", "session": "s"}, timeout=T)
        assert r.status_code == 200, r.text
        named = {"say": "hello again", "session": "s", "user_name": "Robin"}
        assert httpx.post(served + "/v1/turn", json=named, timeout=T).status_code == 200
        chat = {"messages": [{"role": "user", "name": "Kai", "content": "hi"}]}
        assert httpx.post(served + "/v1/chat/completions", json=chat, timeout=T).status_code == 200
    systems = [request["messages"][0]["content"] for request in up.requests]
    assert len(systems) == 3 and all("{{" not in s and "<USER>" not in s for s in systems)
    assert "Kiki is a blacksmith. She greets Alex warmly." in systems[0]  # the scene's own player
    assert "She greets Robin warmly." in systems[1] and "Alex" not in systems[1]  # /v1/turn's user_name
    assert "She greets Kai warmly." in systems[2]  # the player's chat message's name
