"""grammars/ and prompts/ load from a source checkout, an editable install and an installed wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

PROBE = """
import json, charfmt
from charfmt._resources import resource_dir
reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>"}]}')
print(json.dumps({"module": charfmt.__file__, "grammars": str(resource_dir("grammars")),
                  "prompts": str(resource_dir("prompts")), "emo": reply.chats[0].segments[0].text}))
"""


def _probe(python: str, cwd: Path, env_path: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if env_path:
        env["PYTHONPATH"] = env_path
    done = subprocess.run([python, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout)
    assert result["emo"] == "joy"
    return result


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_source_checkout(tmp_path: Path) -> None:
    got = _probe(sys.executable, tmp_path, str(ROOT))
    assert Path(got["module"]).parent == ROOT / "charfmt"
    assert Path(got["grammars"]) == ROOT / "grammars"
    assert Path(got["prompts"]) == ROOT / "prompts"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT))
    (built,) = out.glob("charfmt-*.whl")
    return built


def test_wheel_contains_the_folders(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "charfmt/grammars/body.lark" in names
    assert "charfmt/prompts/README.md" in names
    assert "charfmt/py.typed" in names
    assert "charfmt/data/demo_reply.json" in names


def test_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--target", str(site), str(wheel))
    got = _probe(sys.executable, tmp_path, str(site))
    assert Path(got["module"]).parent == site / "charfmt"
    assert Path(got["grammars"]) == site / "charfmt" / "grammars"
    assert Path(got["prompts"]) == site / "charfmt" / "prompts"


def test_editable_install(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    inner = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Dependencies (lark, pydantic) come from the test environment; charfmt itself does not.
    (Path(inner) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _pip("--python", python, "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT))
    got = _probe(python, tmp_path)
    assert Path(got["module"]).parent == ROOT / "charfmt"
    assert Path(got["grammars"]) == ROOT / "grammars"
