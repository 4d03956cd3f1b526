"""``charfmt.prompt.cast``: a ``Character`` (a cast of one) and a ``Scene`` answer the same questions, the same way
their old branches did (issue 41 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, mypy_strict

import charfmt
from charfmt import Character
from charfmt.prompt.cast import stage_reader
from charfmt.prompt.scene import Scene
from charfmt.stage import StageReader

REX = Character.load(ROOT / "examples" / "characters" / "rex.toml")
SCENE = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")


def _reply(*chats: tuple[str | None, str]) -> str:
    out = []
    for order, (speaker, body) in enumerate(chats, 1):
        chat = {"type": "C", "order": order, "body": body, **({"speaker": speaker} if speaker else {})}
        out.append(chat)
    return json.dumps({"chats": out})


def test_a_character_is_a_cast_of_one() -> None:
    assert REX.members == {REX.name: REX} and REX.speakers is None and REX.narrator is None
    assert REX.reading_vocabulary == REX.vocabulary
    assert SCENE.members == SCENE.cast and SCENE.speakers == list(SCENE.cast)


@pytest.mark.parametrize(
    "text",
    [
        _reply((None, "<emo>neutral</emo>\n<act>nods</act>\n<msg>Fine.</msg>")),
        _reply((None, "<emo>nonsense</emo>\n<msg>Hi</msg>")),
        '{"chats": [{"type": "C", "order": 1, "body": "<msg>cut',
        "Plain words, no JSON at all.",
    ],
)
def test_a_characters_parse_and_check_are_the_parse_it_stood_for(text: str) -> None:
    for lenient in (False, True):
        try:
            expected = charfmt.parse(text, lenient=lenient, vocabulary=REX.vocabulary, tags=REX.tags)
        except charfmt.ParseError as e:
            with pytest.raises(charfmt.ParseError) as got:
                REX.parse(text, lenient=lenient)
            assert got.value.diagnostics == e.diagnostics
            continue
        assert REX.parse(text, lenient=lenient) == expected
        assert REX.check(expected, text, lenient=lenient) == []


def test_the_stage_of_a_cast_is_the_stage_each_kind_had() -> None:
    text = _reply((None, "<emo>joy</emo>\n<act>waves</act>\n<msg>Hello there. How are you?</msg>"))
    events = list(REX.parse(text).events(REX.tags))
    mine, before = stage_reader(REX, max_length=10), StageReader(REX, max_length=10)
    cues = [c for e in events for c in mine.feed(e)]
    assert cues and cues == [c for e in events for c in before.feed(e)]
    assert any(c.kind == "expression" for c in cues)  # (its own stage map played)
    assert mine.close() == before.close()

    speaker = SCENE.speakers[0]
    scene_text = _reply((speaker, "<msg>The bell is cracked.</msg>"))
    scene_events = list(SCENE.parse(scene_text).events(SCENE.tags))
    ours, theirs = stage_reader(SCENE), SCENE.stage()
    played = [c for e in scene_events for c in ours.feed(e)]
    assert played and played == [c for e in scene_events for c in theirs.feed(e)]
    assert ours.close() == theirs.close()


USER_CODE = """
from charfmt import Character
from charfmt.prompt.cast import Cast, stage_reader
from charfmt.prompt.scene import Scene

def who(cast: Cast) -> list[str]:
    return [cast.name, *(cast.speakers or []), *cast.members]

rex = Character.load("rex.toml")
scene = Scene.load("scene.toml")
print(who(rex), who(scene), stage_reader(rex), stage_reader(scene))
"""


@pytest.mark.long
def test_character_and_scene_both_meet_the_protocol_under_mypy_strict(tmp_path: Path) -> None:
    result = mypy_strict(tmp_path, USER_CODE)
    assert result.returncode == 0, result.stdout + result.stderr
