"""``charfmt serve --script``: the scripted upstream (``charfmt.serve.upstreams.script``), its file checked before
the start, its replies answered in order through the real app, a budget's cut said as ``length``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

import charfmt  # noqa: E402
from charfmt import Character  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"


def _reply(words: str, emotion: str = "joy") -> str:
    body = f"<emo>{emotion}</emo>\n<msg>{words}</msg>"
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


def _script(tmp_path: Path, *replies: str) -> Path:
    path = tmp_path / "replies.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in replies), encoding="utf-8")
    return path


def _calls(app: Any, *calls: tuple[str, str, dict[str, Any] | None]) -> list[httpx.Response]:
    """Each ``(method, path, JSON body)`` sent in order through the ASGI app itself; the answers (each a 200)."""
    import asyncio

    async def run() -> list[httpx.Response]:
        out = []
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                for method, path, body in calls:
                    response = await client.request(method, path, json=body, timeout=10)
                    assert response.status_code == 200, response.text
                    out.append(response)
        return out

    return asyncio.run(run())


def _answers(settings: Settings, says: list[str]) -> list[str]:
    """What ``/v1/chat/completions`` answers each of ``says``, one turn each."""
    calls = [
        ("POST", "/v1/chat/completions", {"model": "rex", "messages": [{"role": "user", "content": s}]}) for s in says
    ]
    return [r.json()["choices"][0]["message"]["content"] for r in _calls(create_app(settings), *calls)]


def test_each_turn_gets_the_scripts_next_reply_then_the_first_again(tmp_path: Path) -> None:
    path = _script(tmp_path, _reply("First line."), "not json, a damaged reply", _reply("Third.", "anger"))
    settings = Settings(character=Character.load(REX), upstream_kind="script", upstream_target=str(path))
    said = _answers(settings, ["a", "b", "c", "d"])
    assert "First line." in said[0] and "First line." in said[3]
    assert "not json, a damaged reply" in said[1]
    assert "Third." in said[2] and "anger" in said[2]


def test_a_reply_past_the_token_budget_is_cut_with_length() -> None:
    import asyncio

    from charfmt.serve.upstreams.script import CHUNK, ScriptUpstream

    async def deltas() -> list[tuple[str, str | None]]:
        up = ScriptUpstream(["x" * (CHUNK * 5)])
        return [(d.text, d.reason) async for d in up.chat({"messages": []}, max_tokens=3)]

    got = asyncio.run(deltas())
    assert [len(t) for t, _ in got] == [CHUNK] * 3
    assert [r for _, r in got] == [None, None, "length"]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"chats": []}\n', "a reply is a JSON string, not dict"),
        ('"ok"\nnot json\n', ":2: not a JSON string"),
        ("\n\n", "holds no reply"),
    ],
)
def test_a_script_that_cannot_be_served_stops_the_start(tmp_path: Path, content: str, said: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--script", str(path), "--port", "0"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert said in run.stderr and "Traceback" not in run.stderr


def test_the_flag_is_in_serves_help() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "charfmt", "serve", "--help"], check=False, capture_output=True, text=True, timeout=60
    )
    assert "--script FILE.jsonl" in run.stdout


def test_a_continue_is_answered_with_the_scripts_next_reply_as_the_rest(tmp_path: Path) -> None:
    """A script writes whole replies: a continue (SillyTavern's, a last ``assistant`` message) asks for the rest,
    never a prefill (it answered ``{"chats`` or a fence's fragment: the script's text cut at the prefix's length;
    found by a newcomer's trial)."""
    path = _script(tmp_path, _reply("Come back tomorrow."), 'Sure! ```json\n{"type":"chat","body":"<msg>Later."}```')
    settings = Settings(character=Character.load(REX), upstream_kind="script", upstream_target=str(path))
    messages = [{"role": "user", "content": "Fix my drone?"}, {"role": "assistant", "content": "*crosses arms* No."}]
    call = ("POST", "/v1/chat/completions", {"messages": messages})
    answers = [r.json()["choices"][0]["message"]["content"] for r in _calls(create_app(settings), call, call)]

    first, second = answers  # (the JSON reply format: each answer a reply of its own)
    assert [s.text for c in charfmt.parse(first).chats for s in c.segments][-1] == "Come back tomorrow."
    assert "No." not in first
    assert [s.text for c in charfmt.parse(second).chats for s in c.segments] == ["Later."]


@pytest.mark.parametrize("missing", [True, False])
def test_a_script_that_is_not_a_file_is_a_usage_error(tmp_path: Path, missing: bool) -> None:
    target = tmp_path / "nosuch.jsonl" if missing else tmp_path
    run = subprocess.run(
        [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--script", str(target), "--port", "0"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert ("script file not found" if missing else "is a directory") in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("user", ["Alex Smith", "x" * 300, "名前"])
def test_any_openai_user_id_names_a_session(user: str) -> None:
    """OpenAI's ``user`` is any end-user id: one that is no session key (a display name with a space) named a
    400 on every request (found by a newcomer's trial); it now names the session ``user:`` + its digest."""
    import hashlib

    from charfmt.serve.upstreams.script import ScriptUpstream

    up = ScriptUpstream([_reply("First."), _reply("Second.")])
    app = create_app(Settings(character=Character.load(REX), upstream=up))
    turns = [
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": s}], "user": user}) for s in "ab"
    ]
    name = "user:" + hashlib.sha256(user.encode()).hexdigest()[:24]
    *_, listed = _calls(app, *turns, ("GET", f"/v1/sessions/chat/{name}", None))
    exchanges = listed.json()["exchanges"]
    assert len(exchanges) == 2
    assert "First." in json.dumps(up.requests[1]["messages"], ensure_ascii=False)  # (the session's history sent)


def test_a_v1_turn_without_a_session_stands_alone() -> None:
    """``/v1/turn`` without ``session``: no history read or kept, the reply says ``"session": null``."""
    from charfmt.serve.upstreams.script import ScriptUpstream

    up = ScriptUpstream([_reply("First."), _reply("Second.")])
    app = create_app(Settings(character=Character.load(REX), upstream=up))
    first, second = (
        next(o for o in map(json.loads, _data_lines(r.text)) if o.get("kind") == "reply")
        for r in _calls(app, *(("POST", "/v1/turn", {"say": say}) for say in ("hello", "again")))
    )
    assert first["session"] is None and second["session"] is None
    assert "First." not in json.dumps(up.requests[1]["messages"], ensure_ascii=False)


def _data_lines(stream: str) -> list[str]:
    """The JSON of each ``data:`` line of a ``text/event-stream``."""
    return [line[5:] for line in stream.splitlines() if line.startswith("data:")]
