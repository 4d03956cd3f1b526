"""``--character FILE`` on ``parse``, ``check``, ``fix`` and ``schema``: the character's vocabulary and tags.

A reply with the character's own ``<sfx>`` cue is valid for ``check --character``, ``fix``
writes what ``check`` then accepts, ``parse --format jsonl`` gives ``cue`` events, and
``schema`` holds the tags and the emotion keys. Error paths run as subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import charfmt
from charfmt.cli import main

PACKAGE_ROOT = Path(charfmt.__file__).resolve().parent.parent

HANA = """\
name = "Hana"
persona = "You are Hana, a cheerful blacksmith."
actions = ["hammer", "wave"]

[[tags]]
name = "sfx"
role = "cue"
description = "a sound effect"
values = ["anvil", "door_slam", "thunder"]
synonyms = ["sound", "se"]
prefixes = ["sfx", "sound"]

[[tags]]
name = "anim"
role = "cue"
description = "a Live2D motion to play"

[[emotions]]
key = "joy"
aliases = ["happy"]

[[emotions]]
key = "angry"
"""

VALID = json.dumps(
    {"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\n<sfx>anvil</sfx>\n<anim>nod</anim>\n<msg>Hi</msg>"}]}
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    paths = {
        "hana": ("hana.toml", HANA),
        "valid": ("valid.json", VALID),
        "messy": ("messy.txt", "<EMO>happy</EMO><Sound>Anvil</Sound><mood>joy</mood><msg>Welcome!"),
        "off_list": ("off.json", VALID.replace("anvil", "boom")),
        "sad": ("sad.json", VALID.replace("<emo>joy", "<emo>sad")),
        "bad_toml": ("bad.toml", HANA.replace('role = "cue"', 'role = "sound"', 1)),
    }
    out = {}
    for key, (name, text) in paths.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        out[key] = str(tmp_path / name)
    return out


def test_check_with_the_character_accepts_its_own_tags(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", files["valid"]]) == 1  # without it, <sfx> is an unknown tag
    assert "CF204" in capsys.readouterr().out
    assert main(["check", "--character", files["hana"], files["valid"]]) == 0
    assert capsys.readouterr().out.strip() == f"{files['valid']}: ok (1 chat)"


def test_check_with_the_character_applies_its_vocabulary_and_values(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--character", files["hana"], files["sad"]]) == 1
    assert "'sad'" in capsys.readouterr().out  # not one of Hana's emotions
    assert main(["check", "--character", files["hana"], files["off_list"]]) == 1
    assert "CF131 chat 0 body: <sfx> value 'boom' is not one of anvil, door_slam, thunder" in capsys.readouterr().out


def test_fix_output_passes_check(files: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["fix", "--character", files["hana"], files["messy"]]) == 0
    fixed = capsys.readouterr().out
    reply = charfmt.parse(fixed, tags=charfmt.Character.from_toml(HANA).tags)
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [
        ("emo", "joy"),  # <EMO>happy</EMO>: the alias of joy
        ("sfx", "anvil"),  # <Sound>Anvil</Sound>: a synonym, the value's case
        ("emo", "joy"),  # <mood>: a synonym of <emo>
        ("msg", "Welcome!"),
    ]
    (tmp_path / "fixed.json").write_text(fixed, encoding="utf-8")
    assert main(["check", "--character", files["hana"], str(tmp_path / "fixed.json")]) == 0


def test_fix_without_the_character_keeps_sfx_as_an_unknown_tag(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fix", files["messy"]]) == 0
    captured = capsys.readouterr()
    assert "CF708" in captured.err  # <sound> is no tag of the default table
    assert main(["fix", "--character", files["hana"], files["messy"]]) == 0
    assert "CF708" not in capsys.readouterr().err


def test_parse_with_the_character_gives_cue_events(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "--character", files["hana"], "--format", "jsonl", files["valid"]]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["tag"], e["text"]) for e in events if e["kind"] == "cue"] == [("sfx", "anvil"), ("anim", "nod")]
    assert main(["parse", "--character", files["hana"], files["valid"]]) == 0
    assert "sfx     anvil" in capsys.readouterr().out
    assert main(["parse", "--lenient", "--character", files["hana"], files["messy"], "--format", "json"]) == 0
    segments = json.loads(capsys.readouterr().out)["chats"][0]["segments"]
    assert {"tag": "sfx", "text": "anvil"} in segments


def test_schema_with_the_character_holds_its_tags_and_vocabulary(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", "--provider", "openai", "--character", files["hana"]]) == 0
    schema = capsys.readouterr().out
    assert "door_slam" in schema and "anim" in schema and "angry" in schema
    tags = charfmt.Character.from_toml(HANA)
    assert json.loads(schema) == charfmt.json_schema("openai", vocabulary=tags.vocabulary, tags=tags.tags)
    assert main(["schema"]) == 0
    assert "door_slam" not in capsys.readouterr().out


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "charfmt", *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.mark.parametrize("command", ["parse", "check", "fix", "schema"])
def test_a_character_file_that_cannot_be_used_is_one_line_and_the_documented_exit(
    command: str, files: dict[str, str], tmp_path: Path
) -> None:
    reply = [] if command == "schema" else [files["valid"]]
    missing = _run(command, "--character", str(tmp_path / "nope.toml"), *reply)
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr.startswith("charfmt: error: cannot read ") and missing.stderr.count("\n") == 1
    bad = _run(command, "--character", files["bad_toml"], *reply)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "tags[0].role: tag 'sfx': role 'sound' is not one of" in bad.stderr
    large = _run(command, "--character", files["hana"], "--max-size", "10", *reply)
    assert large.returncode == 2 and "--max-size" in large.stderr and "Traceback" not in large.stderr


def test_stream_with_the_character_streams_its_cues_whole(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stream", "--replay", files["valid"], "--chunk", "3", "--sentences"]) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert not any(e["kind"] == "cue" for e in plain)  # without the character, <sfx> is no tag of the table
    argv = ["stream", "--replay", files["valid"], "--chunk", "3", "--sentences", "--character", files["hana"]]
    assert main(argv) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["tag"], e["text"]) for e in events if e["kind"] == "cue"] == [("sfx", "anvil"), ("anim", "nod")]
    assert [e["text"] for e in events if e["kind"] == "sentence"] == ["Hi"]
    assert not any(e["kind"] == "diagnostic" for e in events)


def test_stream_with_a_bad_character_file_is_one_line_and_exit_2(files: dict[str, str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.toml")
    done = subprocess.run(
        [sys.executable, "-m", "charfmt", "stream", "--replay", files["valid"], "--character", missing],
        capture_output=True,
        text=True,
        cwd=PACKAGE_ROOT,
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_option_files_with_a_wide_byte_order_mark_are_decoded_with_cf160(
    encoding: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a newcomer's trial: docs/CLI.md says input files with a UTF-16 or UTF-32 byte order mark are
    decoded (CF160); a character file written by PowerShell's ``>`` was refused as 'not UTF-8'."""
    bom = b"\xfe\xff" if encoding == "utf-16-be" else b""  # Python's utf-16 and utf-32 write their own mark
    wide = tmp_path / "mio.toml"
    source = (ROOT / "examples" / "characters" / "mio.toml").read_text(encoding="utf-8")
    wide.write_bytes(bom + source.encode(encoding))
    history = tmp_path / "history.jsonl"
    history.write_bytes(bom + (ROOT / "examples" / "history.jsonl").read_text(encoding="utf-8").encode(encoding))
    plain = ["render", "--character", str(ROOT / "examples" / "characters" / "mio.toml"), "--say", "hi",
             "--history", str(ROOT / "examples" / "history.jsonl")]  # fmt: skip
    assert main(plain) == 0
    want = capsys.readouterr().out
    assert main(["render", "--character", str(wide), "--say", "hi", "--history", str(history)]) == 0
    out, err = capsys.readouterr()
    assert out == want
    assert [line.split(": CF160")[0] for line in err.splitlines()] == [f"{wide}:1:1", f"{history}:1:1"]
    assert all("warning: input is UTF-" in line for line in err.splitlines())


def test_a_file_that_only_starts_like_a_byte_order_mark_is_still_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfename = 1\n")
    assert main(["render", "--character", str(bad), "--say", "hi"]) == 1
    err = capsys.readouterr().err
    assert "CF160" not in err and "not UTF-8" in err
