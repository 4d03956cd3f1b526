"""A front end's own history sent back in ``--reply-format tags``: an unknown ``[word]`` is the writer's text, as
in a user turn (found by a new user's trial: ``[joy] *grins* Welcome [aboard].`` went to the model as
``<emo>aboard</emo>``, an emotion no vocabulary has)."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("answer", "sent", "never"),
    [
        ("[joy] *grins* Welcome [aboard].", ["<emo>pleased</emo>", "<msg>Welcome [aboard].</msg>"], "<emo>aboard"),
        ("[pleased] Fine. [annoyed] Go.", ["<emo>pleased</emo>", "<emo>annoyed</emo>", "<msg>Go.</msg>"], "[annoyed]"),
    ],
)
def test_an_unknown_bracket_in_an_answer_sent_back_stays_text(answer: str, sent: list[str], never: str) -> None:
    up = Scripted()
    with loopback(up.app) as base:
        settings = Settings(character=Character.load(REX), upstream_url=base + "/v1", reply_format="tags")
        with loopback(create_app(settings)) as served:
            chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": answer},
                                 {"role": "user", "content": "thanks"}]}  # fmt: skip
            assert httpx.post(served + "/v1/chat/completions", json=chat, timeout=10).status_code == 200
    (back,) = [m["content"] for m in up.requests[-1]["messages"] if m["role"] == "assistant"]
    assert all(s in back for s in sent) and never not in back, back
