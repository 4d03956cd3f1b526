"""``charfmt serve`` and its players: the auth it runs with (one token rule, said at the start), the player's name
(``--user-name``, and per turn from the front end), a card's greeting, a first turn that fails, and the log's
``prompt_version`` (the prompt's sources, not one turn's text). Scripted upstreams only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character  # noqa: E402
from charfmt.prompt.lorebook import Lorebook  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402
from serve_process import served  # noqa: E402

REX = str(ROOT / "examples" / "characters" / "rex.toml")
T = 10.0
CARD: dict[str, Any] = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Mira", "description": "{{char}} keeps the lighthouse. {{user}} is her oldest friend.",
        "personality": "{{random:calm,wry,stern,warm,shy,bold}}", "scenario": "It is {{time}}.", "mes_example": "",
        "first_mes": "*waves from the gallery* Welcome back, {{user}}!",
        "alternate_greetings": ["*trims the wick* Oh. It's you, {{user}}."],
        "character_book": {"entries": [
            {"keys": ["storm"], "content": "Storms wreck ships on the reef.", "position": "before_char"},
        ]},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def upstream(scripted: tuple[Scripted, str]) -> tuple[Scripted, str]:
    up, _ = scripted
    up.mode, up.delay = "ok", 0.0
    up.requests.clear()
    return scripted


def _mira(**kw: Any) -> Character:
    return Character.from_bytes(json.dumps(CARD).encode(), "mira.json", **kw)


def _objects(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", base + "/v1/turn", json=body, timeout=T) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def _serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", REX, "--upstream", "http://127.0.0.1:9/v1",
           "--memory", "--port", "0", *argv]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "CHARFMT_TOKEN"} | (env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False, env=environment)


# --- auth ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        (["--token", ""], {}, "argument --token: a token is at least 16 characters, printable and without spaces, "
         "not an empty one (--new-token makes one); to run without auth, leave it out"),
        (["--token", "abc"], {}, "argument --token: a token is at least 16 characters, printable and without "
         "spaces, not one of 3"),
        ([], {"CHARFMT_TOKEN": ""}, "the environment variable CHARFMT_TOKEN: a token is at least 16 characters, "
         "printable and without spaces, not an empty one (--new-token makes one); to run without auth, unset it"),
        (["--token", "sixteen chars ok"], {}, "not one with a space"),
    ],
    ids=["empty-flag", "short-flag", "empty-env", "space"],
)  # fmt: skip
def test_a_token_that_would_turn_auth_off_or_be_guessed_is_a_usage_error(
    argv: list[str], env: dict[str, str], said: str
) -> None:
    """An empty ``--token`` or ``CHARFMT_TOKEN`` used to turn auth off unsaid; a short one was taken while
    ``--hash-token`` refused it: one rule for every token, a usage error (exit 2) before anything starts."""
    done = _serve(*argv, env=env)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_the_start_says_the_auth_mode_and_user_name_names_the_player(upstream: tuple[Scripted, str]) -> None:
    up, base = upstream
    token = "front-end-token-0123"
    with served(base + "/v1", "--memory", "--token", token, "--user-name", "Alex") as server:
        r = httpx.post(f"http://127.0.0.1:{server.port}/v1/turn", json={"say": "hello"}, timeout=T,
                       headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        assert r.status_code == 200, r.text
        console = server.console()
    assert "charfmt serve: auth: one bearer token (--token): one trusted front end" in console, console
    assert token not in console
    system = up.requests[-1]["messages"][0]["content"]
    assert "## What Alex sends" in system and "Customer" not in system  # rex.toml's own player name replaced


def test_a_bad_user_name_flag_is_a_usage_error() -> None:
    done = _serve("--user-name", "Al\nice")
    assert done.returncode == 2 and "argument --user-name: must be one line" in done.stderr, done.stderr


# --- the player's name per turn ------------------------------------------------------------------------------


def test_a_front_end_names_its_player_per_turn_and_the_greeting_greets_them(upstream: tuple[Scripted, str]) -> None:
    up, base = upstream
    with loopback(create_app(Settings(character=_mira(user_name="Alex"), upstream_url=base + "/v1"))) as served_at:
        default = _objects(served_at, {"say": "hello", "session": "a"})
        robin = _objects(served_at, {"say": "hello", "session": "r", "user_name": "Robin"})
        again = _objects(served_at, {"say": "and now?", "session": "r", "user_name": "Robin"})
        with httpx.stream("GET", served_at + "/v1/turn", params={"say": "hi", "session": "q", "user_name": "Quinn"},
                          timeout=T) as r:  # fmt: skip
            assert r.status_code == 200
            r.read()
        chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
                             {"role": "user", "name": "Kai", "content": "again"}]}  # fmt: skip
        assert httpx.post(served_at + "/v1/chat/completions", json=chat, timeout=T).status_code == 200
        ws_client = pytest.importorskip("websockets.sync.client")
        with ws_client.connect(served_at.replace("http://", "ws://") + "/v1/turn/ws", close_timeout=2) as ws:
            ws.send(json.dumps({"session": "w", "say": "hi", "user_name": "Wren"}))
            sent = [json.loads(ws.recv(timeout=T))]
            while sent[-1]["kind"] != "reply":
                sent.append(json.loads(ws.recv(timeout=T)))
    assert sent[0]["kind"] == "greeting" and "Welcome back, Wren!" in sent[0]["content"]
    assert default[0]["kind"] == "greeting" and "Welcome back, Alex!" in default[0]["content"]
    assert robin[0]["kind"] == "greeting" and "Welcome back, Robin!" in robin[0]["content"]
    assert again[0]["kind"] != "greeting"
    systems = [request["messages"][0]["content"] for request in up.requests]
    assert "Alex is her oldest friend." in systems[0]
    assert all("Robin is her oldest friend." in s and "Alex" not in s for s in systems[1:3])
    assert "Welcome back, Robin!" in up.requests[1]["messages"][1]["content"]  # the greeting the model sees
    assert "Quinn is her oldest friend." in systems[3] and "Kai is her oldest friend." in systems[4]
    assert "Wren is her oldest friend." in systems[5]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"say": "hi", "user_name": "Al\nice"}, "user_name"),
        ({"say": "hi", "user_name": "x" * 65}, "user_name"),
        ({"say": "hi", "user_name": 7}, "user_name"),
        ({"say": "hi", "user_name": ""}, "user_name"),
    ],
    ids=["newline", "too-long", "not-a-string", "empty"],
)
def test_a_name_that_cannot_be_a_players_is_a_400_naming_the_field(
    upstream: tuple[Scripted, str], body: dict[str, Any], param: str
) -> None:
    with loopback(create_app(Settings(character=_mira(), upstream_url=upstream[1] + "/v1"))) as served_at:
        r = httpx.post(served_at + "/v1/turn", json=body, timeout=T)
        chat = {"messages": [{"role": "user", "name": body["user_name"], "content": "hi"}]}
        c = httpx.post(served_at + "/v1/chat/completions", json=chat, timeout=T)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert c.status_code == 400 and c.json()["error"]["param"] == "messages[0].name", c.text
    assert upstream[0].requests == []


# --- a first turn that fails, the log's prompt version -------------------------------------------------------


def test_a_first_turn_that_fails_leaves_no_session_behind(upstream: tuple[Scripted, str]) -> None:
    """A new session's greeting used to be kept before its first turn ran: a turn refused (400, too long
    for the window) left a session holding only the greeting."""
    settings = Settings(character=_mira(), upstream_url=upstream[1] + "/v1", n_ctx=2048, max_tokens=256)
    with loopback(create_app(settings)) as served_at:
        r = httpx.post(served_at + "/v1/turn", json={"say": "storm " * 1330, "session": "s"}, timeout=T)
        assert r.status_code == 400 and "does not fit the context window" in r.text, r.text
        assert httpx.get(served_at + "/v1/sessions", timeout=T).json()["data"] == []
        assert upstream[0].requests == []
        _objects(served_at, {"say": "hello", "session": "s"})
        kept = httpx.get(served_at + "/v1/sessions/turn/s", timeout=T).json()["exchanges"]
    assert len(kept) == 2 and kept[0]["user"]["chats"] == []  # the greeting, then the first turn


def test_prompt_version_names_the_prompts_sources_not_a_turns_rendered_text(
    upstream: tuple[Scripted, str], tmp_path: Path
) -> None:
    """The system prompt of a card changes every turn ({{time}}, {{random}}, the lore each turn fires): its
    hash did too. The version is the same for every turn of one character, and another for other lorebooks."""
    versions: list[list[str]] = []
    world = Lorebook.from_json({"entries": {"0": {"key": ["reef"], "content": "The reef is called the Teeth."}}})
    for books in ((), (), (world,)):
        log = tmp_path / f"log{len(versions)}.jsonl"
        settings = Settings(character=_mira(), upstream_url=upstream[1] + "/v1", log=log, lorebooks=books)
        with loopback(create_app(settings)) as served_at:
            for say in ("hello", "a storm is coming", "the reef"):  # (the second fires the card's storm entry)
                _objects(served_at, {"say": say, "session": "v"})
        versions.append([json.loads(line)["prompt_version"] for line in log.read_text().splitlines()])
    systems = {request["messages"][0]["content"] for request in upstream[0].requests[:3]}
    assert len(systems) >= 2  # (the rendered prompts differ turn by turn: the lore, {{random}})
    assert len(set(versions[0])) == 1 and versions[0] == versions[1]  # the same sources: one version, across restarts
    assert len(set(versions[2])) == 1 and versions[2][0] != versions[0][0]  # another lorebook: another version


# --- --greeting ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["render", "--say", "hi"],
        ["chat", "--endpoint", "http://127.0.0.1:9/v1", "--say", "hi"],
        ["serve", "--upstream", "http://127.0.0.1:9/v1", "--memory", "--port", "0"],
    ],
    ids=["render", "chat", "serve"],
)
def test_a_greeting_the_card_does_not_have_is_one_usage_error_everywhere(argv: list[str], tmp_path: Path) -> None:
    card = tmp_path / "mira.json"
    card.write_text(json.dumps(CARD), encoding="utf-8")
    cmd = [sys.executable, "-m", "charfmt", *argv, "--character", str(card), "--greeting", "5"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert (
        "charfmt: error: argument --greeting: 5: the card has 2 greetings (0: first_mes, 1: alternate_greetings;"
        f" none: no greeting) (see 'charfmt {argv[0]} --help')"
    ) in done.stderr, done.stderr
    assert done.stdout == ""
