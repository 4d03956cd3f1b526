"""``chat`` and ``serve`` check what they are given before they start (found by a new user's trial).

- ``serve --model nope.gguf`` (or a card given as ``--model``) listened and answered every turn 502 "not a
  GGUF model file": now the start fails as ``chat``'s does (exit 1; a missing file exit 2, as ``--help`` says).
- ``chat`` and ``serve`` refused ``--max-size`` ("unrecognized arguments") though a card over 16 MiB says to
  use it: both take it now, for the ``--character``, ``--scene`` and ``--lorebook`` files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

REX = str(ROOT / "examples" / "characters" / "rex.toml")
DEAD = "http://127.0.0.1:9/v1"
MiB = 1024 * 1024


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "charfmt", *argv]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, check=False, cwd=cwd, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize(
    ("model", "status", "said"),
    [
        ("nope.gguf", 1, "not a GGUF model file: nope.gguf"),
        ("card.json", 1, "not a GGUF model file: card.json"),
        ("missing.gguf", 2, "model file not found: missing.gguf"),
        (".", 2, "model file . is a directory"),
    ],
)
def test_serve_checks_its_model_file_before_it_listens(model: str, status: int, said: str, tmp_path: Path) -> None:
    (tmp_path / "nope.gguf").write_text("not a model\n")
    (tmp_path / "card.json").write_text(json.dumps({"spec": "chara_card_v2", "data": {"name": "Kira"}}))
    done = _run("serve", "--character", REX, "--model", model, "--port", "0", "--memory", cwd=tmp_path)
    assert done.returncode == status, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"charfmt: error: {said}"), done.stderr
    assert "listening" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "command",
    [["chat", "--endpoint", DEAD, "--say", "hi"], ["serve", "--upstream", DEAD, "--port", "0", "--memory"]],
    ids=["chat", "serve"],
)
def test_chat_and_serve_take_max_size(command: list[str], tmp_path: Path) -> None:
    """Below a file's size: the one error line naming --max-size (exit 2); a card over 16 MiB loads with it."""
    small = _run(*command, "--character", REX, "--max-size", "100", cwd=tmp_path)
    assert small.returncode == 2 and "the maximum is 100 (--max-size)" in small.stderr, small
    data = {"name": "Big", "description": "A big one.", "first_mes": "Hi.", "extensions": {"art": "x" * (17 * MiB)}}
    (tmp_path / "big.json").write_text(json.dumps({"spec": "chara_card_v2", "spec_version": "2.0", "data": data}))
    refused = _run(*command, "--character", "big.json", cwd=tmp_path)
    assert refused.returncode == 2 and "(--max-size)" in refused.stderr, refused
    if command[0] == "chat":  # loaded: the greeting shown, then the turn fails at the dead endpoint (exit 1)
        loaded = _run(*command, "--character", "big.json", "--max-size", str(32 * MiB), cwd=tmp_path)
        assert loaded.returncode == 1 and "Big: Hi." in loaded.stdout and "cannot connect" in loaded.stderr, loaded
