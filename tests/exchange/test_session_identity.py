"""A session belongs to the character's definition, not only its name (found by a new user's trial).

Sessions were keyed by the character's name: a different card also named Rex resumed the first one's
conversation (``chat --session eve``; two ``serve`` sharing a store too). The namespace now holds a digest
of the definition (``charfmt.store.scopes``); a store written before keeps its ``cli/Rex`` sessions
readable and resumable.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

import charfmt
from charfmt import Character
from charfmt.cli import main
from charfmt.prompt.character import Exchange
from charfmt.store import SessionKey, open_store
from charfmt.store.scopes import scope

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def other_rex(tmp_path: Path) -> Path:
    """Another character also named Rex (its persona differs)."""
    path = tmp_path / "other_rex.toml"
    text = REX.read_text(encoding="utf-8")
    path.write_text(text.replace('persona = """', 'persona = """An impostor. ', 1), encoding="utf-8")
    assert path.read_text() != text and Character.load(path).name == Character.load(REX).name
    return path


def _history_sent(up: Scripted) -> list[str]:
    return [m["content"] for m in up.requests[-1]["messages"][1:] if m["role"] in ("user", "assistant")]


def test_chat_session_of_another_card_with_the_same_name_is_not_resumed(
    scripted: tuple[Scripted, str], other_rex: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up, base = scripted
    store = str(tmp_path / "s.sqlite3")
    chat = ["chat", "--endpoint", base + "/v1", "--session", "eve", "--store", store]
    assert main([*chat, "--character", str(REX), "--say", "the secret is mango"]) == 0
    capsys.readouterr()
    assert main([*chat, "--character", str(other_rex), "--say", "what is the secret"]) == 0
    assert "resumed" not in capsys.readouterr().out
    assert not any("mango" in m for m in _history_sent(up)), _history_sent(up)
    assert main([*chat, "--character", str(REX), "--say", "and again"]) == 0  # the first card resumes its own
    assert capsys.readouterr().out.startswith("(resumed: 1 exchange;")
    with open_store(store) as opened:
        spaces = sorted(s.key.namespace for s in opened.sessions(name="eve"))
    assert len(spaces) == 2 and all(ns.startswith("cli/Rex~") for ns in spaces), spaces
    assert main(["sessions", "list", "--store", store, "--namespace", "cli/Rex", "--format", "jsonl"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # (--namespace cli/Rex: every definition of Rex)


def test_a_store_from_before_keeps_its_sessions_resumable(
    scripted: tuple[Scripted, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up, base = scripted
    store = str(tmp_path / "old.sqlite3")
    rex = Character.load(REX)
    reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<msg>Noted.</msg>"}]}')
    with open_store(store) as opened:  # as charfmt wrote it before: the namespace names the character only
        opened.append(SessionKey("", "cli/Rex", "old"), Exchange(user=rex.shorthand("remember the mango"), reply=reply))
    assert main(["chat", "--endpoint", base + "/v1", "--session", "old", "--store", store, "--character", str(REX),
                 "--say", "what was it"]) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith("(resumed: 1 exchange;")
    assert any("mango" in m for m in _history_sent(up))
    with open_store(store) as opened:
        assert [(s.key.namespace, s.turns) for s in opened.sessions()] == [("cli/Rex", 2)]


def test_serve_workers_of_two_cards_named_alike_keep_their_own_sessions(
    scripted: tuple[Scripted, str], other_rex: Path, tmp_path: Path
) -> None:
    up, base = scripted
    store = str(tmp_path / "shared.sqlite3")
    first = create_app(Settings(character=Character.load(REX), upstream_url=base + "/v1", store=store))
    second = create_app(Settings(character=Character.load(other_rex), upstream_url=base + "/v1", store=store))
    with loopback(first) as a, loopback(second) as b:
        r = httpx.post(a + "/v1/turn", json={"say": "the secret is mango", "session": "s"}, timeout=10)
        assert r.status_code == 200
        assert httpx.get(b + "/v1/sessions/turn/s", timeout=10).status_code == 404
        assert json.loads(httpx.get(b + "/v1/sessions", timeout=10).text)["data"] == []
        r = httpx.post(b + "/v1/turn", json={"say": "what is the secret", "session": "s"}, timeout=10)
        assert r.status_code == 200 and not any("mango" in m for m in _history_sent(up))
        assert httpx.get(a + "/v1/sessions/turn/s", timeout=10).json()["turns"] == 1


@pytest.mark.parametrize("fmt", ["pam", "uacs", "groupchat"])
def test_an_export_names_the_character_and_the_time_the_store_knows(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--character``: the speaker is the namespace's character (was "Character"), the document's time
    the session's start (was 1970-01-01)."""
    import time

    store = str(tmp_path / "e.sqlite3")
    rex = Character.load(REX)
    reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<msg>Yo.</msg>"}]}')
    with open_store(store) as opened:
        opened.append(
            SessionKey("", f"cli/{scope('Rex', rex)}", "eve"), Exchange(user=rex.shorthand("hi"), reply=reply)
        )
    assert main(["sessions", "export", "eve", "--store", store, "--to", fmt]) == 0
    text = capsys.readouterr().out
    assert "1970" not in text and time.strftime("%Y-%m-%d", time.gmtime()) in text, text
    assert '"Rex"' in text and '"Character"' not in text, text


def test_show_labels_the_greeting_and_list_counts_exchanges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A card's greeting (an exchange with no player's turn) is shown as the greeting, not as an empty "you"; the
    list's count is of exchanges, the greeting one of them (it said TURNS)."""
    from charfmt.prompt.userinput import UserTurn

    store = str(tmp_path / "g.sqlite3")
    rex = Character.load(REX)
    hello = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<msg>Welcome aboard.</msg>"}]}')
    yo = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<msg>Yo.</msg>"}]}')
    with open_store(store) as opened:
        key = SessionKey("", f"cli/{scope('Rex', rex)}", "eve")
        opened.append(key, Exchange(user=UserTurn(), reply=hello))
        opened.append(key, Exchange(user=rex.shorthand("hi"), reply=yo))
    assert main(["sessions", "show", "eve", "--store", store]) == 0
    shown = capsys.readouterr().out
    assert "--- exchange 1: the greeting (the character speaks first)" in shown and shown.count("\nyou\n") == 1, shown
    assert shown.index("Welcome aboard.") < shown.index("\nyou\n") < shown.index("Yo.")
    assert main(["sessions", "list", "--store", store]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[3] == "EXCHANGES" and row.split()[3] == "2", (header, row)


def test_the_players_name_is_not_part_of_the_identity(other_rex: Path) -> None:
    """A session is the character's whoever the player is called (``--user-name``, a scene's player too)."""
    from charfmt.scene import Scene

    assert scope("Rex", Character.load(REX, user_name="Ann")) == scope("Rex", Character.load(REX, user_name="Bo"))
    assert scope("Rex", Character.load(REX)) != scope("Rex", Character.load(other_rex))
    shrine = ROOT / "examples" / "scenes" / "mars_shrine.toml"
    one, two = Scene.load(shrine), Scene.load(shrine, user_name="Zed")
    assert scope(one.name, one) == scope(two.name, two)
