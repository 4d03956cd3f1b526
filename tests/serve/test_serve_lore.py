"""A card in full through ``charfmt serve``: a scripted upstream sees the card's system prompt, greeting, lore and
post-history instructions; ``/v1/turn`` sends the greeting of a new session and the lore of each turn."""

from __future__ import annotations

import json
import re
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
from test_lore_prompt import CARD, WORLD  # noqa: E402

T = 10.0


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def upstream(scripted: tuple[Scripted, str]) -> Iterator[tuple[Scripted, str]]:
    up, base = scripted
    up.mode, up.delay = "ok", 0.0
    up.requests.clear()
    yield up, base


def _serve(upstream: tuple[Scripted, str], character: Character | None = None, **kw: Any) -> Any:
    mira = character or Character.from_bytes(json.dumps(CARD).encode(), "mira.json", user_name="Alex")
    settings = Settings(character=mira, upstream_url=upstream[1] + "/v1", **kw)
    return loopback(create_app(settings))


def _objects(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", base + "/v1/turn", json=body, timeout=T) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def test_v1_turn_opens_a_session_with_the_greeting_and_sends_the_lore(upstream: tuple[Scripted, str]) -> None:
    world = Lorebook.from_json(WORLD, "world")
    with _serve(upstream, lorebooks=(world,)) as base:
        info = httpx.get(base + "/v1/info", timeout=T).json()
        assert "Welcome back, Alex!" in info["greeting"]["content"]
        first = _objects(base, {"say": "a storm on the reef", "session": "s1"})
        kinds = [o["kind"] for o in first]
        assert kinds[:2] == ["greeting", "lore"] and kinds[-1] == "reply"
        assert first[0]["session"] == "s1" and "Welcome back, Alex!" in first[0]["content"]
        lore = first[1]
        assert sorted(e["uid"] for e in lore["fired"]) == ["0", "0", "1"] and lore["cut"] == []
        assert {e["book"] for e in lore["fired"]} == {"Coast", "world"}
        sent = upstream[0].requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "assistant", "user"]
        assert sent[0]["content"].startswith("You are Mira. Stay in character at all times. Write like a sea shanty.")
        assert "Storms wreck ships" in sent[0]["content"] and "the Teeth" in sent[0]["content"]
        assert "Welcome back, Alex!" in sent[1]["content"]
        assert sent[-1]["content"].endswith("\n\nKeep Mira's answer under three sentences.")  # (in the turn's message)
        second = _objects(base, {"say": "and the lamp?", "session": "s1"})
        assert [o["kind"] for o in second][:1] == ["lore"]  # the greeting: once, for a new session
        sent = upstream[0].requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "assistant", "user", "assistant", "system", "user"]
        assert sent[4]["content"] == "[The lamp is older than the town.]"  # lore at depth 1, as system
        assert "Keep Mira's answer" not in sent[2]["content"]  # (the post-history: the newest turn's only)
        assert sent[5]["content"].endswith("Keep Mira's answer under three sentences.")


def test_chat_completions_sessions_open_with_the_greeting_too(upstream: tuple[Scripted, str]) -> None:
    with _serve(upstream) as base:
        r = httpx.post(
            base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "user": "p1"},
            timeout=T,
        )  # fmt: skip
        assert r.status_code == 200, r.text
        sent = upstream[0].requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "assistant", "user"]


def test_greeting_none_and_no_lore_sends_neither(upstream: tuple[Scripted, str]) -> None:
    with _serve(upstream, greeting=None) as base:
        assert httpx.get(base + "/v1/info", timeout=T).json()["greeting"] is None
        kinds = [o["kind"] for o in _objects(base, {"say": "hello there", "session": "s2"})]
        assert "greeting" not in kinds and "lore" not in kinds
        sent = upstream[0].requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "user"]


def test_an_upstream_that_fails_at_once_is_still_a_status_with_lore_and_a_greeting(
    upstream: tuple[Scripted, str],
) -> None:
    upstream[0].mode = "500"
    with _serve(upstream) as base:
        r = httpx.post(base + "/v1/turn", json={"say": "a storm", "session": "s3"}, timeout=T)
        assert r.status_code == 502, r.text


def test_a_scene_served_sends_its_cast_and_scene_lore(upstream: tuple[Scripted, str], tmp_path: Path) -> None:
    from scripted_upstream import scene_reply
    from test_lore_prompt import _scene

    scene = _scene(tmp_path)
    upstream[0].mode = "say:" + scene_reply()
    settings = Settings(character=next(iter(scene.cast.values())), scene=scene, upstream_url=upstream[1] + "/v1")
    with loopback(create_app(settings)) as base:
        objects = _objects(base, {"say": "the bell needs bolts", "session": "sc"})
    lore = next(o for o in objects if o["kind"] == "lore")
    assert sorted(e["book"] for e in lore["fired"]) == ["rex_lore", "shrine"]
    system = upstream[0].requests[-1]["messages"][0]["content"]
    assert "Rex counts every bolt twice." in system and "The bell was cast on Earth." in system


def _needs(upstream: tuple[Scripted, str], n_ctx: int, **kw: Any) -> tuple[int, int]:
    """(the tokens the turn's request needs, the prompt's budget) from the 400 of a window too small for it."""
    with _serve(upstream, greeting=None, n_ctx=n_ctx, max_tokens=256, **kw) as base:
        r = httpx.post(base + "/v1/turn", json={"say": "a storm on the reef"}, timeout=T)
    assert r.status_code == 400, r.text
    m = re.search(r"the request needs (\d+) tokens .* the prompt's budget is (\d+)", r.json()["error"]["message"])
    assert m is not None, r.text
    return int(m.group(1)), int(m.group(2))


def test_lore_is_cut_to_fit_the_window_before_a_turn_is_refused(upstream: tuple[Scripted, str]) -> None:
    """``render`` cut lore to fit its budget (fix9), but serve refused the same turn: "does not fit the context
    window" where the turn fits once the lowest-priority lore is cut. Now it is cut (CF947, the lore object's
    ``cut``), and only a turn that does not fit with no lore at all is refused."""
    world = Lorebook.from_json(
        {"entries": {str(i): {"uid": i, "key": ["reef"], "content": f"Reef fact {i}: " + "coral " * 20, "order": i}
                     for i in range(4)}}, "world",
    )  # fmt: skip
    no_lore = {**CARD, "data": {k: v for k, v in CARD["data"].items() if k != "character_book"}}
    bare = Character.from_bytes(json.dumps(no_lore).encode(), "mira.json", user_name="Alex")
    needs_bare, budget = _needs(upstream, 400, character=bare)
    n_ctx = 400 - budget + needs_bare + 50  # 50 tokens to spare: some of the lore fits, not all of its share
    with _serve(upstream, greeting=None, n_ctx=n_ctx, max_tokens=256, lorebooks=(world,)) as base:
        objects = _objects(base, {"say": "a storm on the reef"})
    assert objects[-1]["kind"] == "reply", objects[-1]
    (lore,) = [o for o in objects if o["kind"] == "lore"]
    assert lore["cut"] and lore["fired"], lore
    assert min(e["order"] for e in lore["fired"]) > max(e["order"] for e in lore["cut"]), lore  # the lowest cut
    sent = upstream[0].requests[-1]["messages"]
    assert "Storms wreck ships" in sent[0]["content"], sent[0]["content"]
    assert not any(f"Reef fact {e['uid']}:" in sent[0]["content"] for e in lore["cut"] if e["book"] == "world")
    with _serve(upstream, greeting=None, n_ctx=n_ctx - 51, max_tokens=256, lorebooks=(world,)) as base:
        refused = httpx.post(base + "/v1/turn", json={"say": "a storm on the reef"}, timeout=T)
    assert refused.status_code == 400 and "does not fit the context window" in refused.text, refused.text
    said = refused.json()["error"]["message"]  # (its parts add up to the whole, the lore in the system prompt's)
    m = re.search(r"needs (\d+) tokens \(([^;]*);", said)
    assert m is not None and "lore entries are counted in it, and with all of them cut it still does not" in said, said
    assert int(m.group(1)) == sum(int(part.rsplit(" ", 1)[1]) for part in m.group(2).split(", ")), said
