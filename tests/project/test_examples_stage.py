"""The stage, scene and card examples run and show what they promise (tests/project/test_docs.py runs every
example too)."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def _run(name: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_vrm_live2d_example_stages_each_cue_before_its_speech() -> None:
    lines = _run("stage_vrm_live2d.py")
    assert lines.index('[vrm]    vrm.expressionManager.setValue("happy", 0.9)') < next(
        i for i, line in enumerate(lines) if line.startswith("[tts]    みんな")
    )
    assert '[live2d] model.motion("Nod", 0)' in lines
    assert any(line.startswith("[tts]    …昨日はお休みしちゃって、ごめんね。") for line in lines)  # not a lone …
    assert '[vts]    {"messageType": "HotkeyTriggerRequest", "data": {"hotkeyID": "Blush"}}' in lines


def test_the_scene_example_reads_each_speaker_and_refuses_an_off_cast_one() -> None:
    lines = _run("scene_narrator.py")
    assert lines[:2] == ['### Rex (speaker "rex")', '### ミオ (speaker "mio")']
    assert "[mio] sprite mio_smile" in lines and "[rex] sprite rex_pleased" in lines
    assert any(line.startswith("[narrator] says 'Mio sets the cracked bell on the counter.'") for line in lines)
    assert "off-cast: CF307 speaker 'kai' is not one of rex, mio" in lines


def test_the_card_example_imports_chats_and_exports() -> None:
    lines = _run("card_chat.py")
    notes = [line for line in lines if re.match(r"CF9\d\d ", line)]
    assert [n[:5] for n in notes] == ["CF920"]  # no emotions (alternate_greetings: used, no CF926)
    assert notes[0].startswith("CF920 the card names no emotions")
    assert "Lumi: Lumi is a lighthouse keeper's cat who can talk." in lines[1]  # {{char}} expanded
    assert lines[2].startswith("few-shots: 2; greeting: ") and "Did you bring sardines?" in lines[2]
    assert "Lumi: Sardines! You may stay." in lines and "  (tts) I am not afraid." in lines
    assert lines[-2:] == ["exported as a V3 card and read back the same: True", "extensions kept: True"]
