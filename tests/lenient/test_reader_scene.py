"""A scene read leniently: told its cast's emotion words, and loaded whatever tags each member adds.

Two fixes of issue 39.5's found-after list: ``Scene.load`` of a cast where one member declares a
tag that takes a default tag's synonym (``<motion>``, a cue, takes ``motion`` from ``<act>``) and
another does not; and ``Scene.parse(lenient=True)``, which read a scene's reply without the
cast's emotion words (a key alone on its line was speech; a bracket naming none split a sentence).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import charfmt
from charfmt.prompt.scene import Scene
from charfmt.stream import StreamParser, collect

MOVER = """name = "Ines"
persona = "A ferry captain."
[[tags]]
name = "motion"
role = "cue"
description = "a body motion the avatar plays"
values = ["nod", "wave"]
[[emotions]]
key = "brisk"
description = "Default."
aliases = ["calm"]
"""
STILL = """name = "Tomas"
persona = "A deckhand."
[[emotions]]
key = "sleepy"
description = "Default."
aliases = ["tired"]
"""
SCENE = """name = "Ferry"
[[cast]]
id = "ines"
character = "ines.toml"
[[cast]]
id = "tomas"
character = "tomas.toml"
[[examples]]
user = "Hello?"
[[examples.reply]]
type = "C"
speaker = "ines"
body = "<emo>brisk</emo>\\n<motion>wave</motion>\\n<msg>Aboard, quick.</msg>"
[[examples.reply]]
type = "C"
speaker = "tomas"
body = "<emo>sleepy</emo>\\n<act>motion to the rail</act>\\n<msg>Mm.</msg>"
"""


@pytest.fixture
def scene_file(tmp_path: Path) -> Path:
    (tmp_path / "ines.toml").write_text(MOVER, encoding="utf-8")
    (tmp_path / "tomas.toml").write_text(STILL, encoding="utf-8")
    (tmp_path / "scene.toml").write_text(SCENE, encoding="utf-8")
    return tmp_path / "scene.toml"


def test_a_cast_whose_members_differ_by_a_cue_loads_and_reads_both(scene_file: Path) -> None:
    scene = Scene.load(scene_file)
    assert scene.tags.get("motion") is not None and "motion" not in scene.tags.get("act").synonyms  # type: ignore[union-attr]
    body = {"ines": "<emo>brisk</emo>\n<motion>nod</motion>\n<msg>Ropes!</msg>",
            "tomas": "<emo>tired</emo>\n<act>yawns</act>\n<msg>Aye.</msg>"}  # fmt: skip
    chats = [{"type": "C", "order": n, "speaker": who, "body": b} for n, (who, b) in enumerate(body.items(), 1)]
    reply = scene.parse(json.dumps({"chats": chats}))
    assert [[(s.tag, s.text) for s in c.segments] for c in reply.chats] == [
        [("emo", "brisk"), ("motion", "nod"), ("msg", "Ropes!")],
        [("emo", "tired"), ("act", "yawns"), ("msg", "Aye.")],
    ]


def test_a_tag_two_members_declare_differently_is_still_a_clear_error(scene_file: Path) -> None:
    (scene_file.parent / "tomas.toml").write_text(
        STILL + '[[tags]]\nname = "motion"\nrole = "cue"\ndescription = "other"\nvalues = ["bow"]\n', encoding="utf-8"
    )
    with pytest.raises(charfmt.CharfmtError, match=r"tag <motion> differs"):
        Scene.load(scene_file)
    run = subprocess.run(
        [sys.executable, "-m", "charfmt", "grammar", "--target", "gbnf", "--scene", str(scene_file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode in (1, 2) and "Traceback" not in run.stderr and "differs" in run.stderr


def test_the_lenient_read_of_a_scene_knows_every_members_emotion_words(scene_file: Path) -> None:
    scene = Scene.load(scene_file)
    text = "tired\nI am [narcissus_a] a sailor, [calm] and I sail."
    reply = scene.parse(text, lenient=True)
    segments = [(s.tag, s.text) for c in reply.chats for s in c.segments]
    assert segments == [("emo", "tired"), ("msg", "I am [narcissus_a] a sailor,"), ("emo", "calm"),
                        ("msg", "and I sail.")]  # fmt: skip
    codes = [d.code for d in reply.diagnostics]
    assert "CF723" in codes and "CF724" in codes
    stream = StreamParser(lenient=True, vocabulary=scene.reading_vocabulary, tags=scene.tags)
    events = [*stream.feed(text), *stream.close()]
    assert collect(events).chats == reply.chats


def test_a_scene_keeps_each_members_word_as_written_and_checks_it_per_speaker(scene_file: Path) -> None:
    scene = Scene.load(scene_file)
    chats = [{"type": "C", "order": 1, "speaker": "tomas", "body": "<emo>calm</emo>\n<msg>Mm.</msg>"}]
    reply = scene.parse(json.dumps({"chats": chats}), lenient=True)
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [("emo", "calm"), ("msg", "Mm.")]
    assert [d.code for d in reply.diagnostics] == ["CF309"]  # Ines's alias, not Tomas's: the scene says so once
