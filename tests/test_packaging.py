"""grammars/ and prompts/ load from a source checkout, an editable install and an installed wheel;
the wheel holds the mypyc-compiled stream reader where a C compiler is available."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

PROBE = """
import json, charfmt, charfmt.stream
from charfmt._resources import resource_dir
reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>"}]}')
print(json.dumps({"module": charfmt.__file__, "grammars": str(resource_dir("grammars")),
                  "prompts": str(resource_dir("prompts")), "emo": reply.chats[0].segments[0].text,
                  "compiled": charfmt.stream.COMPILED}))
"""


def _probe(python: str, cwd: Path, env_path: str | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CHARFMT_PURE_PYTHON")}
    if env_path:
        env["PYTHONPATH"] = env_path
    done = subprocess.run([python, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["emo"] == "joy"
    return result


def _pip(*args: str, compile_reader: bool = True) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CHARFMT_PURE_PYTHON"}
    if not compile_reader:
        env["CHARFMT_PURE_PYTHON"] = "1"  # (the compile takes about 20 s; tested once, on the wheel)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
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
    assert got["compiled"] == _can_compile()


def _can_compile() -> bool:
    """Whether this machine can build the compiled reader: a C compiler and mypyc (the test extra has it)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return False
    return shutil.which(cc) is not None


def test_the_wheel_holds_the_compiled_reader_where_a_compiler_is_available(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    compiled = {n for n in names if n.startswith("charfmt/_scanner_c") and n.endswith((".so", ".pyd"))}
    assert "charfmt/_scanner.py" in names  # the pure-Python reader ships either way
    if _can_compile():
        assert compiled, sorted(names)
        assert not wheel.name.endswith("-py3-none-any.whl"), wheel.name  # tagged for this platform
    else:
        assert not compiled
        assert wheel.name.endswith("-py3-none-any.whl"), wheel.name


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
    _pip("--python", python, "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT), compile_reader=False)
    got = _probe(python, tmp_path)
    assert Path(got["module"]).parent == ROOT / "charfmt"
    assert Path(got["grammars"]) == ROOT / "grammars"
