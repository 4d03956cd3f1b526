"""``/v1/turn`` reads the player's turn as ``charfmt render --say`` does, and tells the player's own warnings
(found by a newcomer's trial): a ``<user_chats>`` block was sent as the player's literal words, pattern B's
``[User Context]`` got "not an emotion", a broken block was answered 200 where ``render`` exits 1; a ``[smug]`` the
character lacks was kept in the store only; ``GET ?say=hi&say=ho`` used "ho", a missing ``say`` was "not a
string", a JSON array body "is JSON list". Scripted upstreams only."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
ws_client = pytest.importorskip("websockets.sync.client")

from charfmt import Character  # noqa: E402
from charfmt.cli import main  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
T = 10.0
BLOCK = '<user_chats><chat type="C"><emo>annoyed</emo><msg>why</msg></chat></user_chats>'
PATTERN_B = "[User Context]\nEmotion: annoyed\nAction: kicking the ground\n\n[User Message]\nwhy did you do that?"
BROKEN = '<user_chats>\n<chat type="C"><msg>unclosed</chat></user_chats>'


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        settings = Settings(character=Character.load(REX), upstream_url=base + "/v1")
        with loopback(create_app(settings)) as url:
            yield up, url


@pytest.fixture
def server(served: tuple[Scripted, str]) -> tuple[Scripted, str]:
    up, url = served
    up.mode = "ok"
    up.requests.clear()
    return up, url


def _post(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", url + "/v1/turn", json=body, timeout=T) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def _get(url: str, params: dict[str, str]) -> list[dict[str, Any]]:
    with httpx.stream("GET", url + "/v1/turn", params=params, timeout=T) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def _ws(url: str, body: dict[str, Any] | str) -> list[dict[str, Any]]:
    """The objects of one WebSocket turn: up to its reply or error."""
    got: list[dict[str, Any]] = []
    with ws_client.connect(url.replace("http://", "ws://") + "/v1/turn/ws", close_timeout=2) as ws:
        ws.send(body if isinstance(body, str) else json.dumps(body))
        while not got or got[-1]["kind"] not in ("reply", "error"):
            got.append(json.loads(ws.recv(timeout=T)))
    return got


def _said(up: Scripted) -> str:
    """The player's message of the upstream's one request."""
    assert len(up.requests) == 1, up.requests
    last = up.requests[0]["messages"][-1]
    assert last["role"] == "user"
    content = last["content"]
    assert isinstance(content, str)
    return content


def _rendered(say: str, *context: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The player's message ``charfmt render --say`` writes for ``say`` (and ``--context`` items)."""
    options = [x for item in context for x in ("--context", item)]
    assert main(["render", "--character", str(REX), "--say", say, "--greeting", "none", *options]) == 0
    request = json.loads(capsys.readouterr().out)
    content = request["messages"][-1]["content"]
    assert isinstance(content, str)
    return content


# --- say: a user block as a block, as render reads it -----------------------------------------------------------


@pytest.mark.parametrize("say", [BLOCK, PATTERN_B, "[annoyed] why *beeps*", "<emo>annoyed</emo> stays words"])
def test_each_door_sends_the_player_message_render_writes(
    server: tuple[Scripted, str], capsys: pytest.CaptureFixture[str], say: str
) -> None:
    up, url = server
    want = _rendered(say, capsys=capsys)
    for send in (lambda: _post(url, {"say": say}), lambda: _get(url, {"say": say}), lambda: _ws(url, {"say": say})):
        up.requests.clear()
        objects = send()
        assert objects[-1]["kind"] == "reply", objects[-1]
        assert _said(up) == want
        assert all(o["kind"] != "say" for o in objects), objects[0]  # (nothing to warn of)


def test_a_block_is_read_as_the_players_chats_not_their_words(server: tuple[Scripted, str]) -> None:
    up, url = server
    _post(url, {"say": BLOCK})
    said = _said(up)
    assert "<emo>annoyed</emo>" in said and "<msg>why</msg>" in said and "&lt;" not in said, said
    up.requests.clear()
    objects = _post(url, {"say": PATTERN_B})
    said = _said(up)
    assert said.startswith("[User Context]\nEmotion: annoyed\nAction: kicking the ground\n"), said
    assert "<msg>why did you do that?</msg>" in said and "[User Message]" not in said, said
    assert objects[0]["kind"] != "say", objects[0]  # (no "[User Context]: not an emotion")


def test_a_broken_block_is_a_400_with_its_line_and_column_on_every_door(server: tuple[Scripted, str]) -> None:
    up, url = server
    post = httpx.post(url + "/v1/turn", json={"say": BROKEN}, timeout=T)
    get = httpx.get(url + "/v1/turn", params={"say": BROKEN}, timeout=T)
    (ws,) = _ws(url, {"say": BROKEN, "session": "b1"})
    for r in (post, get):
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "say", error
        assert "CF501 at line 2, column 29: unexpected </chat>; expected </msg>" in error["message"], error
    assert ws["kind"] == "error" and ws["status"] == 400 and ws["session"] == "b1", ws
    assert ws["error"]["param"] == "say" and "line 2, column 29" in ws["error"]["message"], ws
    assert up.requests == []


def test_an_empty_block_is_nothing_to_say(server: tuple[Scripted, str]) -> None:
    up, url = server
    r = httpx.post(url + "/v1/turn", json={"say": "<user_chats>\n</user_chats>"}, timeout=T)
    assert r.status_code == 400 and r.json()["error"]["param"] == "say", r.text
    assert "nothing to say: the user block holds no chat and no context" in r.json()["error"]["message"]
    assert up.requests == []


# --- context: the [User Context] block, as render --context writes it ------------------------------------------------


def test_context_is_written_as_render_context_writes_it(
    server: tuple[Scripted, str], capsys: pytest.CaptureFixture[str]
) -> None:
    up, url = server
    context = {"action": "kicking the ground", "Environment": "raining", "weather": "rain"}
    want = _rendered("[annoyed] why", *(f"{k}={v}" for k, v in context.items()), capsys=capsys)
    assert want.startswith("[User Context]\nAction: kicking the ground\nEnvironment: raining\nweather: rain\n"), want
    _post(url, {"say": "[annoyed] why", "context": context})
    assert _said(up) == want
    up.requests.clear()
    assert _ws(url, {"say": "[annoyed] why", "context": context})[-1]["kind"] == "reply"
    assert _said(up) == want


@pytest.mark.parametrize(
    ("context", "say", "message"),
    [
        ("angry", "hi", "'context' must be an object of string values"),
        (["emotion", "angry"], "hi", "'context' must be an object of string values"),
        ({"emotion": 3}, "hi", "'context' must be an object of string values"),
        ({"bad key": "x"}, "hi", "'context': context key 'bad key': letters, digits"),
        ({"emotion": "a", "Emotion": "b"}, "hi", "'context': context key 'Emotion' is given twice"),
        ({"action": "a\x07"}, "hi", "'context': context Action holds a control character"),
        ({"action": "x"}, PATTERN_B, "'context': the user block has a [User Context] already: give the context once"),
    ],
)
def test_a_context_that_cannot_be_one_is_a_400_naming_it(
    server: tuple[Scripted, str], context: Any, say: str, message: str
) -> None:
    up, url = server
    r = httpx.post(url + "/v1/turn", json={"say": say, "context": context}, timeout=T)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "context", r.text
    assert message in r.json()["error"]["message"], r.text
    (ws,) = _ws(url, {"say": say, "context": context})
    assert ws["kind"] == "error" and ws["error"]["param"] == "context" and message in ws["error"]["message"], ws
    assert up.requests == []


def test_get_cannot_carry_a_context_and_says_so(server: tuple[Scripted, str]) -> None:
    r = httpx.get(server[1] + "/v1/turn", params={"say": "hi", "context": "angry"}, timeout=T)
    assert r.status_code == 400 and r.json()["error"]["param"] == "context", r.text


def test_a_context_counts_toward_the_turns_length(server: tuple[Scripted, str]) -> None:
    up, url = server
    r = httpx.post(url + "/v1/turn", json={"say": "hi", "context": {"action": "x" * 8000}}, timeout=T)
    assert r.status_code == 400, r.text
    assert "the player's turn with its context is 8,008 characters (at most 8,000)" in r.json()["error"]["message"]
    assert up.requests == []


# --- the player's own warnings: a say object, first ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("say", "where"),
    [
        ("[smug] hi", [("CF401", 1, 1, 0, 6)]),
        ("hi\nthere [smug]", [("CF401", 2, 7, 9, 15)]),
        ('<user_chats><chat type="C"><emo>smug</emo><msg>hi</msg></chat></user_chats>', [("CF401", 1, 28, 27, 42)]),
        ("hi\x07 [smug]", [("CF402", 1, 3, 2, 3), ("CF401", 1, 5, 4, 10)]),
    ],
)
def test_the_players_warnings_are_the_turns_first_object_on_every_door(
    server: tuple[Scripted, str], say: str, where: list[tuple[str, int, int, int, int]]
) -> None:
    _, url = server
    for objects in (_post(url, {"say": say}), _get(url, {"say": say}), _ws(url, {"say": say})):
        first = objects[0]
        assert first["kind"] == "say", objects[:2]
        assert set(first) == {"kind", "diagnostics"}, first
        got = [(d["code"], d["line"], d["column"], d["offset"], d["end"]) for d in first["diagnostics"]]
        assert got == where
        assert all(d["severity"] == "warning" and d["message"] for d in first["diagnostics"]), first
        assert sum(o["kind"] == "say" for o in objects) == 1
        assert objects[-1]["kind"] == "reply", objects[-1]


def test_the_players_warnings_come_before_a_failure_on_the_websocket(server: tuple[Scripted, str]) -> None:
    """A turn whose upstream fails before anything is sent: on the WebSocket, the warnings, then the error (on the
    event stream the failure is the answer's status, as every such failure is)."""
    up, url = server
    up.mode = "500"
    objects = _ws(url, {"say": "[smug] hi"})
    assert [o["kind"] for o in objects] == ["say", "error"], objects
    r = httpx.post(url + "/v1/turn", json={"say": "[smug] hi"}, timeout=T)
    assert r.status_code == 502, r.text


# --- the door's own quirks ---------------------------------------------------------------------------------------


def test_a_field_given_twice_in_the_query_is_a_400_naming_it(server: tuple[Scripted, str]) -> None:
    up, url = server
    for query, name in (("say=hi&say=ho", "say"), ("say=hi&session=a&session=b", "session"),
                        ("say=hi&constrained=1&constrained=0", "constrained")):  # fmt: skip
        r = httpx.get(f"{url}/v1/turn?{query}", timeout=T)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == {
            "message": f"'{name}' is given 2 times: give it once", "type": "invalid_request_error", "param": name,
            "code": 400,
        }  # fmt: skip
    assert up.requests == []


def test_a_missing_say_is_said_missing_on_every_door(server: tuple[Scripted, str]) -> None:
    up, url = server
    post = httpx.post(url + "/v1/turn", json={"session": "p1"}, timeout=T)
    get = httpx.get(url + "/v1/turn", params={"session": "p1"}, timeout=T)
    (ws,) = _ws(url, {"session": "p1"})
    for error in (post.json()["error"], get.json()["error"], ws["error"]):
        assert error["param"] == "say", error
        assert error["message"].startswith("'say' is missing: the player's turn"), error
    wrong = httpx.post(url + "/v1/turn", json={"say": 3}, timeout=T)
    assert wrong.json()["error"]["message"].startswith("'say' must be a string"), wrong.text
    assert up.requests == []


@pytest.mark.parametrize(
    ("body", "kind"),
    [("[1]", "a JSON array"), ('"hi"', "a JSON string"), ("3", "a JSON number"), ("null", "JSON null")],
)
def test_a_body_that_is_not_an_object_says_what_it_is(server: tuple[Scripted, str], body: str, kind: str) -> None:
    _, url = server
    r = httpx.post(url + "/v1/turn", content=body, headers={"Content-Type": "application/json"}, timeout=T)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == f"the request body is {kind}, not an object", r.text
    (ws,) = _ws(url, body)
    assert ws["error"]["message"] == f"the WebSocket message is {kind}, not an object", ws


# --- chat completions: the player's message read the same way ---------------------------------------------------


def test_chat_completions_reads_the_players_message_and_history_as_render_does(
    server: tuple[Scripted, str], capsys: pytest.CaptureFixture[str]
) -> None:
    up, url = server
    want = _rendered(PATTERN_B, capsys=capsys)
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": PATTERN_B}]}, timeout=T)
    assert r.status_code == 200, r.text
    assert _said(up) == want
    up.requests.clear()
    history = [
        {"role": "user", "content": BLOCK}, {"role": "assistant", "content": "[neutral] Fine."},
        {"role": "user", "content": "again"},
    ]  # fmt: skip
    r = httpx.post(url + "/v1/chat/completions", json={"messages": history}, timeout=T)
    assert r.status_code == 200, r.text
    sent = [m["content"] for m in up.requests[0]["messages"] if m["role"] == "user"]
    assert sent[-2] == _rendered(BLOCK, capsys=capsys), sent
    up.requests.clear()
    for messages in ([{"role": "user", "content": BROKEN}], [{"role": "user", "content": BROKEN}, *history[1:]]):
        r = httpx.post(url + "/v1/chat/completions", json={"messages": messages}, timeout=T)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "messages" and "line 2, column 29" in r.json()["error"]["message"]
    assert up.requests == []
