"""A scene's reply read with the scene's own emotion words at every door that streams it.

``Scene.parse`` reads leniently with ``Scene.reading_vocabulary`` (every cast member's keys and
aliases); ``charfmt chat --scene`` and ``serve --scene`` streamed the same reply with the cast's keys
only, so a member's alias alone on its line (Rex's ``grumpy``, for ``annoyed``) was speech: shown as
``Rex: grumpy``, sent to text-to-speech and as a ``speak`` cue, while the reply stored read it as the
emotion. Each door now reads as ``Scene.parse`` does: the word is Rex's expression, never spoken.
"""

from __future__ import annotations

import contextlib
import io
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

from charfmt.cli import main  # noqa: E402
from charfmt.prompt.scene import Scene  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

SHRINE = ROOT / "examples" / "scenes" / "mars_shrine.toml"
ALIAS = "grumpy"
"""One of Rex's aliases (of ``annoyed``), a key of no cast member."""
REPLY = json.dumps({"chats": [
    {"type": "C", "order": 1, "speaker": "rex", "body": f"{ALIAS}\n<msg>Bells are easy.</msg>"},
    {"type": "C", "order": 2, "speaker": "mio", "body": "嬉しい\n<msg>よかった！</msg>"},
]}, ensure_ascii=False)  # fmt: skip
"""A free reply whose bodies each open with a member's alias alone on its line (Mio's ``嬉しい``: ``joy``)."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    up.mode = "say:" + REPLY
    with loopback(up.app) as base:
        yield up, base + "/v1"


def _segments(reply: Any) -> list[list[tuple[str, str]]]:
    return [[(s.tag, s.text) for s in chat.segments] for chat in reply.chats]


def test_the_batch_read_of_the_reply_is_the_one_each_door_must_agree_with() -> None:
    scene = Scene.load(SHRINE)
    assert ALIAS not in scene.vocabulary.keys and ALIAS in scene.reading_vocabulary.keys
    assert _segments(scene.parse(REPLY, lenient=True)) == [
        [("emo", ALIAS), ("msg", "Bells are easy.")], [("emo", "嬉しい"), ("msg", "よかった！")]
    ]  # fmt: skip


def test_chat_scene_shows_a_members_alias_as_its_sprite_and_never_speaks_it(
    upstream: tuple[Scripted, str],
) -> None:
    up, url = upstream
    up.requests.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["chat", "--scene", str(SHRINE), "--endpoint", url, "--free", "--stage",
                     "--say", "Can you fix this bell?", "--say", "Thanks!"])  # fmt: skip
    assert code == 0
    lines = out.getvalue().splitlines()
    assert "[sprite: rex_annoyed]" in lines and "[sprite: mio_smile]" in lines  # each member's own sprite
    assert "Rex: Bells are easy." in lines and "ミオ: よかった！" in lines
    assert not any(ALIAS in line or "嬉しい" in line for line in lines if not line.startswith("  (stage)"))
    speak = [json.loads(line.split(" ", 3)[3]) for line in lines if line.startswith("  (stage) ")]
    said = [cue["text"] for cue in speak if cue["kind"] == "speak"]
    assert said == ["Bells are easy.", "よかった！"] * 2  # two turns, each sentence once, no emotion word spoken
    # the history the model is sent next holds the word as Rex's emotion
    history = up.requests[1]["messages"][2]["content"]
    assert f"<emo>{ALIAS}</emo>" in history and "<msg>grumpy" not in history


def test_serve_scene_streams_a_members_alias_as_its_expression_as_the_reply_reads_it(
    upstream: tuple[Scripted, str],
) -> None:
    _, url = upstream
    scene = Scene.load(SHRINE)
    app = create_app(Settings(character=next(iter(scene.cast.values())), scene=scene, upstream_url=url))
    with loopback(app) as base, httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=10.0) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    emotions = [e["text"] for e in events if e["kind"] == "emotion"]
    spoken = [e["text"] for e in events if e["kind"] == "sentence"]
    cues = [e["cue"] for e in events if e["kind"] == "stage"]
    assert emotions == [ALIAS, "嬉しい"] and spoken == ["Bells are easy.", "よかった！"]
    assert [(c["speaker"], c["sprite"]) for c in cues if c["kind"] == "expression"] == [
        ("rex", "rex_annoyed"), ("mio", "mio_smile")
    ]  # fmt: skip
    assert [c["text"] for c in cues if c["kind"] == "speak"] == spoken
    # what streamed is what the reply says (the stream read as the batch read of the end)
    final = events[-1]
    assert final["kind"] == "reply"
    assert _segments(scene.parse(json.dumps(final["reply"]), lenient=True)) == _segments(
        scene.parse(REPLY, lenient=True)
    )
