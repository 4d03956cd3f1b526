"""The stage map of a character: [stage] in TOML and Character.stage, validated like the rest of the file."""

from __future__ import annotations

import pytest
from conftest import ROOT, TESTS

import charfmt
from charfmt.stagemap import Expression, Motion, StageMap, Voice

AOI = TESTS / "stage" / "aoi.toml"


def test_a_stage_table_loads_into_the_character() -> None:
    c = charfmt.Character.load(AOI)
    assert c.stage is not None
    joy, mapped = c.stage.expression("joy", "aoi_smile")
    assert mapped and joy.vrm == "happy" and joy.weight == 0.8 and joy.live2d == ["smile"]
    assert joy.live2d_motion == "Happy" and joy.vts_hotkey == "Smile" and joy.sprite == "aoi_smile"
    assert joy.voice is not None and joy.voice.over(c.stage.voice) == Voice(style="happy", speaker=3, rate=1.1)
    sad, mapped = c.stage.expression("sad")
    assert not mapped and sad.vrm == "neutral"  # the fallback
    assert c.stage.motion("wave") == (Motion(vrm="wave.vrma", live2d="Wave"), True)
    assert c.stage.motion("nod", "motion") == (Motion(live2d="Nod"), True)
    assert c.stage.motion("jump") == (None, False)
    # the API builds the same character, and a dump reads back
    again = charfmt.Character.model_validate(c.model_dump())
    assert again == c


def test_a_character_without_a_stage_is_as_before() -> None:
    c = charfmt.Character.load(ROOT / "examples" / "characters" / "rex.toml")
    assert c.stage is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "weight = 0.8",
            "weight = 1.8",
            "aoi.toml:23: stage.emotions.joy.weight: Input should be less than or equal to 1",
        ),
        (
            "vts_hotkey =",
            "vts_hotky =",
            "aoi.toml:26: stage.emotions.joy.vts_hotky: unknown key 'vts_hotky'; did you mean 'vts_hotkey'?",
        ),
        (
            "[stage.emotions.joy]",
            "[stage.emotions.happi]",
            "aoi.toml:21: stage.emotions.happi: 'happi' is not an emotion key (the keys are joy, sad)",
        ),
        (
            "[stage.cues.motion.nod]",
            "[stage.cues.motion.jump]",
            "aoi.toml:33: stage.cues.motion.jump: <motion> value 'jump' is not one of nod, spin",
        ),
        (
            "[stage.cues.motion.nod]",
            "[stage.cues.sfx.nod]",
            "aoi.toml:33: stage.cues.sfx: 'sfx' is not a cue tag of the character (cue tags: motion)",
        ),
        (
            "rate = 1.1",
            "rat = 1.1",
            "aoi.toml:27: stage.emotions.joy.voice.rat: unknown key 'rat'; did you mean 'rate'?",
        ),
        (
            "[stage.fallback]",
            "[stage.fallbak]",
            "aoi.toml:36: stage.fallbak: unknown key 'fallbak'; did you mean 'fallback'?",
        ),
        (
            "[stage.actions.wave]",
            "[stage.actions.wavee]",
            "aoi.toml:29: stage.actions.wavee: 'wavee' is not an action of the character (actions: wave, bow);"
            " did you mean 'wave'?",
        ),
        ("speaker = 3", 'speaker = "8"', "aoi.toml:19: stage.voice.speaker: speaker '8': a speaker id is an int"),
        ("speaker = 3", "speaker = [3]", "aoi.toml:19: stage.voice.speaker"),
    ],
)
def test_stage_errors_name_the_file_the_key_and_the_line(old: str, new: str, expected: str) -> None:
    text = AOI.read_text(encoding="utf-8")
    assert old in text
    with pytest.raises(charfmt.CharacterError) as e:
        charfmt.Character.from_toml(text.replace(old, new), "aoi.toml")
    assert str(e.value).startswith(expected)


def test_an_alias_mapped_as_a_key_says_which_key_it_means() -> None:
    text = AOI.read_text(encoding="utf-8").replace('key = "joy"', 'key = "joy"\naliases = ["happy"]')
    with pytest.raises(charfmt.CharacterError, match=r"stage\.emotions\.happy: 'happy' is an alias of 'joy'"):
        charfmt.Character.from_toml(text.replace("[stage.emotions.joy]", "[stage.emotions.happy]"), "aoi.toml")


def test_live2d_may_be_one_name_and_a_voice_name_is_a_string() -> None:
    text = AOI.read_text(encoding="utf-8").replace('live2d = ["smile"]', 'live2d = "smile"')
    c = charfmt.Character.from_toml(text.replace("speaker = 3", 'speaker = "alloy"'), "aoi.toml")
    assert c.stage is not None and c.stage.expression("joy")[0].live2d == ["smile"]
    assert c.stage.voice == Voice(speaker="alloy")


def test_the_api_checks_the_stage_against_the_vocabulary() -> None:
    with pytest.raises(ValueError, match=r"stage\.emotions\.angry: 'angry' is not an emotion key"):
        charfmt.Character(
            name="A", persona="p", emotions=[{"key": "joy"}], stage=StageMap(emotions={"angry": Expression()})
        )  # type: ignore[list-item]
