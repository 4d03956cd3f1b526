"""What ``serve`` says names what the client sent (found by a new user's trial): ``/v1/turn``'s "does not fit the
context window" named ``"param": "messages"``, a field ``/v1/turn`` has not (its words are ``say``);
``--hash-token`` said "not one of 5" of a short token, and hashed the first line of a two-line input silently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"


def test_a_turn_that_does_not_fit_names_say() -> None:
    up = Scripted()
    with loopback(up.app) as base:
        settings = Settings(character=Character.load(REX), upstream_url=base + "/v1", n_ctx=2048, max_tokens=256)
        with loopback(create_app(settings)) as served:
            r = httpx.post(served + "/v1/turn", json={"say": "storm " * 1330, "session": "s"}, timeout=10)
            ws_client = pytest.importorskip("websockets.sync.client")
            with ws_client.connect(served.replace("http://", "ws://") + "/v1/turn/ws", close_timeout=2) as ws:
                ws.send(json.dumps({"session": "w", "say": "storm " * 1330}))
                said = json.loads(ws.recv(timeout=10))
    assert r.status_code == 400 and "does not fit the context window" in r.text, r.text
    assert r.json()["error"]["param"] == "say", r.text
    assert said["kind"] == "error" and said["status"] == 400 and said["error"]["param"] == "say", said
    assert up.requests == []


def _hash(stdin: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "charfmt", "serve", "--hash-token", "alice"]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60, check=False)


def test_hash_token_reads_one_token_and_says_what_is_wrong() -> None:
    ok = _hash("tok-aaaaaaaaaaaaaaaaaaaa\n")
    assert ok.returncode == 0 and ok.stdout.startswith("alice sha256:"), ok
    short = _hash("short\n")
    assert short.returncode == 2 and "not one of 5 characters (--new-token makes one)" in short.stderr, short
    two = _hash("tok-aaaaaaaaaaaaaaaaaaaa\ntok-bbbbbbbbbbbbbbbbbbbb\n")
    assert two.returncode == 2 and two.stdout == "", two
    assert "argument --hash-token: standard input holds 2 lines: give one token, alone" in two.stderr, two


def test_a_turn_with_a_field_it_does_not_know_is_a_400_naming_it() -> None:
    """A misspelt ``"sesion"`` ran a turn without the session's history, silently (left alone at stop 45):
    every door of ``/v1/turn`` now names the field, with the one meant where it is close, and sends nothing up."""
    up = Scripted()
    with loopback(up.app) as base:
        settings = Settings(character=Character.load(REX), upstream_url=base + "/v1")
        with loopback(create_app(settings)) as served:
            post = httpx.post(served + "/v1/turn", json={"sesion": "p1", "say": "[joy] hi"}, timeout=10)
            other = httpx.post(served + "/v1/turn", json={"say": "hi", "model": "x"}, timeout=10)
            get = httpx.get(served + "/v1/turn", params={"say": "hi", "usr_name": "Ann"}, timeout=10)
            ws_client = pytest.importorskip("websockets.sync.client")
            with ws_client.connect(served.replace("http://", "ws://") + "/v1/turn/ws", close_timeout=2) as ws:
                ws.send(json.dumps({"session": "w", "say": "hi", "constrain": True}))
                said = json.loads(ws.recv(timeout=10))
    assert post.status_code == 400, post.text
    assert post.json()["error"]["message"] == "unknown field 'sesion'; did you mean 'session'?", post.text
    assert post.json()["error"]["param"] == "sesion", post.text
    assert other.status_code == 400 and other.json()["error"]["param"] == "model", other.text
    assert "/v1/turn takes 'say', 'session', 'user_name', 'constrained'" in other.json()["error"]["message"]
    assert get.status_code == 400 and "did you mean 'user_name'?" in get.json()["error"]["message"], get.text
    assert said["kind"] == "error" and said["status"] == 400 and said["error"]["param"] == "constrain", said
    assert said["session"] == "w" and "did you mean 'constrained'?" in said["error"]["message"], said
    assert up.requests == []
