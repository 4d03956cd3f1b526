"""``check``, ``parse``, ``fix`` and ``schema`` with ``--scene``: a scene's reply read as ``Scene.parse`` reads it
(each speaker one of the cast, each emotion its speaker's). Found by a newcomer's trial: without it, ``check`` said
``ok`` of a reply whose speakers used each other's emotions, and of an off-cast speaker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from charfmt.cli import main
from charfmt.prompt.scene import Scene

SCENE = ROOT / "examples" / "scenes" / "mars_shrine.toml"
CROSSED = json.dumps({"chats": [
    {"type": "C", "order": 1, "speaker": "rex", "body": "<emo>joy</emo>\n<msg>Fine.</msg>"},  # joy: his alias
    {"type": "C", "order": 2, "speaker": "mio", "body": "<emo>pleased</emo>\n<msg>はい</msg>"},  # Rex's key
    {"type": "C", "order": 3, "speaker": "mod", "body": "<msg>hi</msg>"},
]}, ensure_ascii=False)  # fmt: skip


@pytest.fixture
def crossed(tmp_path: Path) -> Path:
    path = tmp_path / "crossed.json"
    path.write_text(CROSSED, encoding="utf-8")
    return path


def test_check_with_a_scene_finds_what_a_character_cannot(crossed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(crossed)]) == 0  # the format alone: nothing wrong
    capsys.readouterr()
    assert main(["check", "--scene", str(SCENE), str(crossed), "--format", "jsonl"]) == 1
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["code"], d["chat"]) for d in found] == [("CF306", 1), ("CF307", 2)]
    assert main(["check", "--scene", str(SCENE), "--lenient", str(crossed)]) == 0  # CF309 warnings
    assert capsys.readouterr().out.count("CF309 warning") == 2


def test_parse_and_fix_with_a_scene_keep_the_speakers(crossed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "--scene", str(SCENE), "--lenient", str(crossed)]) == 0
    out = capsys.readouterr().out
    assert "#1 C rex" in out and "#2 C mio" in out and "#3 C mod" in out
    prose = crossed.with_name("prose.txt")
    prose.write_text("Rex: [pleased] *waves* Fine.\nMio: [joy] はい！\n", encoding="utf-8")
    assert main(["parse", "--scene", str(SCENE), "--lenient", "--format", "json", str(prose)]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert [c.get("speaker") for c in reply["chats"]] == ["rex", "mio"]  # told the scene's own prompt: its labels
    assert main(["fix", "--scene", str(SCENE), str(prose)]) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert [(c["speaker"], c["body"]) for c in fixed["chats"]] == [
        ("rex", "<emo>pleased</emo>\n<act>waves</act>\n<msg>Fine.</msg>"),
        ("mio", "<emo>joy</emo>\n<msg>はい！</msg>"),
    ]


def test_schema_with_a_scene_is_the_scenes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--scene", str(SCENE), "--provider", "openai"]) == 0
    assert json.loads(capsys.readouterr().out) == Scene.load(SCENE).json_schema("openai")


@pytest.mark.parametrize("command", ["check", "parse", "fix", "schema"])
def test_scene_and_character_together_are_a_usage_error(command: str, crossed: Path) -> None:
    args = [command, "--scene", str(SCENE), "--character", str(ROOT / "examples" / "characters" / "rex.toml")]
    run = [sys.executable, "-m", "charfmt", *args, *([] if command == "schema" else [str(crossed)])]
    done = subprocess.run(run, check=False, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "not allowed with argument" in done.stderr and "Traceback" not in done.stderr
    missing = [sys.executable, "-m", "charfmt", command, "--scene", str(crossed.with_name("no.toml"))]
    done = subprocess.run([*missing, *([] if command == "schema" else [str(crossed)])], check=False,
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 2 and "No such file" in done.stderr and done.stderr.count("\n") == 1


def test_stream_with_a_scene_reads_as_scene_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a newcomer's trial: ``stream --stage --scene`` read labelled prose as one chat with no speaker and
    spoke ``Kai: [joy]``, where ``Scene.parse`` (and serve) read each label's speaker: the stream was not told the
    scene's own prompt nor its cast's words."""
    prose = tmp_path / "prose.txt"
    text = "Rex: [pleased] *waves* Fine.\nMio: [joy] はい！\n"
    prose.write_text(text, encoding="utf-8")
    assert main(["stream", "--stage", "--scene", str(SCENE), "--replay", str(prose), "--chunk", "3"]) == 0
    cues = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    spoken = [(c["speaker"], c["text"]) for c in cues if c["kind"] == "speak"]
    batch = Scene.load(SCENE).parse(text, lenient=True)
    assert spoken == [("rex", "Fine."), ("mio", "はい！")]
    assert [c.speaker for c in batch.chats] == ["rex", "mio"]


@pytest.mark.parametrize(
    ("flag", "path", "said"),
    [
        ("--character", SCENE, "a scene file ([[cast]]), not a character: load it with Scene.load (--scene)"),
        ("--scene", ROOT / "examples" / "characters" / "rex.toml", "a character file, not a scene"),
        ("--scene", ROOT / "examples" / "cards" / "lumi.png", "a character card, not a scene"),
    ],
)
def test_a_scene_given_as_a_character_or_back_says_which_flag(flag: str, path: Path, said: str) -> None:
    """Found by a newcomer's trial: a scene file given to ``--character`` printed six lines, one per key a
    character lacks, and a character or a card given to ``--scene`` said nothing of ``--character``."""
    run = [sys.executable, "-m", "charfmt", "render", flag, str(path), "--say", "hi"]
    done = subprocess.run(run, check=False, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and said in done.stderr and done.stderr.count("\n") == 1


TAG = '[[tags]]\nname = "sfx"\nrole = "cue"\ndescription = "a sound"\nvalues = ["door", "{}"]\n'
MEMBER = 'name = "{}"\npersona = "p"\n[[emotions]]\nkey = "calm"\n'


@pytest.mark.parametrize(
    ("second", "said"),
    [
        ("missing.toml", "s.toml:8: cast[1].character: "),  # the scene's line, then the file's own problem
        ("u.toml", "cast 'l': tag <sfx> differs from the <sfx> of cast 'k': values ('door', 'wind') here,"),
    ],
)
def test_a_scenes_cast_errors_name_the_scenes_line_and_the_other_member(tmp_path: Path, second: str, said: str) -> None:
    """Found by a newcomer's trial: a missing cast file named neither the scene nor its key, and two members'
    tags that differ named neither the other member nor the difference."""
    (tmp_path / "t.toml").write_text(MEMBER.format("K") + TAG.format("bell"), encoding="utf-8")
    (tmp_path / "u.toml").write_text(MEMBER.format("L") + TAG.format("wind"), encoding="utf-8")
    cast = f'[[cast]]\nid = "k"\ncharacter = "t.toml"\n[[cast]]\nid = "l"\ncharacter = "{second}"\n'
    scene = 'name = "X"\nsetting = "y"\n' + cast
    (tmp_path / "s.toml").write_text(scene, encoding="utf-8")
    run = [sys.executable, "-m", "charfmt", "render", "--scene", str(tmp_path / "s.toml"), "--say", "hi"]
    done = subprocess.run(run, check=False, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and said in done.stderr and done.stderr.count("\n") == 1
