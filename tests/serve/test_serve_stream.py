"""serve's stream is told what the reply answers: the player's turn and the request's messages (the prompt).

A model that echoes its prompt (a line of the system prompt before its answer, as small models
do) shows none of it as the character's speech, streamed (``/v1/turn``'s events, a streamed
chat completion) or answered whole, as ``charfmt.parse(text, lenient=True, prompt=...)`` reads it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character, parse  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402
from charfmt.writer import canonical_form, dumps  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX: Final = ROOT / "examples" / "characters" / "rex.toml"
T: Final = 10.0  # seconds any one request may take
ECHO: Final = "You are Rex, a retired combat robot who now runs a tiny repair shop on Mars."
"""A line of Rex's system prompt (its persona), echoed by the model before its answer."""
ANSWER: Final = "Put it on the counter. Forty bolts, come back tomorrow."


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


def _sse(response: Any) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def test_an_echo_of_the_prompt_is_never_the_characters_speech(upstream: tuple[Scripted, str]) -> None:
    up, base = upstream
    up.requests.clear()
    up.mode = "say:" + f"{ECHO}\n{ANSWER}"
    app = create_app(Settings(character=Character.load(REX), upstream_url=base + "/v1", reply_format="speech"))
    body = {"messages": [{"role": "user", "content": "Hi! Can you fix my drone?"}]}
    with loopback(app) as served:
        with httpx.stream("POST", served + "/v1/turn", json={"say": "Hi! Can you fix my drone?"}, timeout=T) as r:
            events = list(_sse(r))
        with httpx.stream("POST", served + "/v1/chat/completions", json={**body, "stream": True}, timeout=T) as r:
            streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in _sse(r) if c.get("choices"))
        whole = httpx.post(served + "/v1/chat/completions", json=body, timeout=T).json()
    kinds = [e["kind"] for e in events]
    spoken = "".join(e["text"] for e in events if e["kind"] == "text" and e["tag"] == "msg")
    assert "reset" not in kinds and spoken == ANSWER  # the echo was never shown, so nothing is taken back
    assert any(d["code"] == "CF631" for d in events[-1]["diagnostics"])  # said, not shown
    told = parse(events[-1]["raw"], lenient=True, prompt=up.requests[0]["messages"])  # what the upstream was sent
    assert events[-1]["reply"] == json.loads(dumps(canonical_form(told)))
    assert streamed == ANSWER
    assert whole["choices"][0]["message"]["content"] == ANSWER
