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
