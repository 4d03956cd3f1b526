"""Every code block of docs/SERVE.md runs: the request is sent to a served character, the TOML is a stage table."""

from __future__ import annotations

import json
import re
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

DOC = (ROOT / "docs" / "SERVE.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w+)\n(.*?)\n```", DOC, flags=re.DOTALL | re.MULTILINE)
REX = ROOT / "examples" / "characters" / "rex.toml"


def test_every_block_is_one_this_file_runs() -> None:
    assert BLOCKS and {kind for kind, _ in BLOCKS} <= {"json", "toml"}


@pytest.mark.parametrize("body", [body for kind, body in BLOCKS if kind == "json"])
def test_the_requests_are_answered_as_the_page_says(body: str) -> None:
    """The continue of the page, with ``--reply-format tags`` before an upstream that takes a prefill: the model
    goes on from ``Forty bolts. Not one``, and the answer is only what follows."""
    up = Scripted()
    whole = {
        "type": "C",
        "order": 1,
        "body": "<emo>annoyed</emo>\n<act>crosses arms</act>\n<msg>Forty bolts. Not one less.</msg>",
    }
    up.mode = "say:" + json.dumps({"chats": [whole]}, separators=(",", ":"))
    with loopback(up.app) as upstream:
        app = create_app(Settings(character=Character.load(REX), upstream_url=upstream + "/v1", reply_format="tags"))
        with loopback(app) as base:
            r = httpx.post(base + "/v1/chat/completions", json=json.loads(body), timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == " less."
    sent = up.requests[-1]["messages"]
    assert sent[-1]["role"] == "assistant" and sent[-1]["content"].endswith("<msg>Forty bolts. Not one")
    assert sent[-2]["content"].endswith("[System note: Rex answers in at most two sentences.]")


@pytest.mark.parametrize("table", [body for kind, body in BLOCKS if kind == "toml"])
def test_the_stage_tables_name_what_airi_is_sent(table: str, tmp_path: Path) -> None:
    (tmp_path / "rex.toml").write_text(REX.read_text(encoding="utf-8") + "\n" + table + "\n", encoding="utf-8")
    app = create_app(Settings(character=Character.load(tmp_path / "rex.toml"), upstream_url="http://127.0.0.1:9/v1",
                              reply_format="airi"))  # fmt: skip
    names = app.state.charfmt.names
    assert names.names["confused"] == "think" and names.back()["think"] == "confused" and not names.unmapped
