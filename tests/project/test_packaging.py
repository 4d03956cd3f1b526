"""grammars/ and prompts/ load from a source checkout, an editable install and an installed wheel;
the wheel holds the mypyc-compiled stream and strict readers where a C compiler is available."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, cannot_compile

PROBE = """
import json, charfmt, charfmt.stream, charfmt.parser
from charfmt._resources import resource_dir
reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>"}]}')
print(json.dumps({"module": charfmt.__file__, "grammars": str(resource_dir("grammars")),
                  "prompts": str(resource_dir("prompts")), "emo": reply.chats[0].segments[0].text,
                  "compiled": charfmt.stream.COMPILED, "strict_compiled": charfmt.parser._READERS.settle()}))
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


def _wheel(out: Path, *, compile_reader: bool) -> Path:
    _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT), compile_reader=compile_reader)
    (built,) = out.glob("charfmt-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pure-Python wheel (seconds); the compiled one is built by the ``long`` tests below (about 20 s)."""
    return _wheel(tmp_path_factory.mktemp("wheel"), compile_reader=False)


@pytest.fixture(scope="module")
def compiled_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _wheel(tmp_path_factory.mktemp("compiled"), compile_reader=True)


def test_wheel_contains_the_folders(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "charfmt/grammars/body.lark" in names
    assert "charfmt/prompts/README.md" in names
    assert "charfmt/py.typed" in names
    assert "charfmt/data/demo_reply.json" in names
    assert "charfmt/_stream/reader.py" in names  # the pure-Python readers ship either way
    assert "charfmt/_strict/fast.py" in names
    assert not any(n.endswith((".so", ".pyd")) for n in names)
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name


def _install_and_probe(wheel: Path, tmp_path: Path) -> dict[str, Any]:
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--target", str(site), str(wheel))
    got = _probe(sys.executable, tmp_path, str(site))
    assert Path(got["module"]).parent == site / "charfmt"
    assert Path(got["grammars"]) == site / "charfmt" / "grammars"
    assert Path(got["prompts"]) == site / "charfmt" / "prompts"
    return got


def test_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    got = _install_and_probe(wheel, tmp_path)
    assert got["compiled"] is False and got["strict_compiled"] is False


@pytest.mark.long
def test_the_wheel_holds_the_compiled_readers_where_a_compiler_is_available(
    compiled_wheel: Path, tmp_path: Path
) -> None:
    names = set(zipfile.ZipFile(compiled_wheel).namelist())
    for source, twin in (("_stream", "_stream_c"), ("_strict", "_strict_c")):
        compiled = {n for n in names if n.startswith(f"charfmt/{twin}") and n.endswith((".so", ".pyd"))}
        sources = [n for n in names if n.startswith(f"charfmt/{source}/") and n.endswith(".py")]
        assert sources  # the pure-Python reader ships either way
        if cannot_compile() is None:
            assert compiled, sorted(names)
            # Every module of the reader, compiled: charfmt.<twin>.<module> for charfmt.<source>.<module>,
            # and the group's shared library beside them.
            modules = {n.removeprefix(f"charfmt/{source}/").removesuffix(".py") for n in sources}
            assert {n.split("/")[2].split(".")[0] for n in compiled if n.count("/") == 2} == modules, sorted(compiled)
            assert any(n.startswith(f"charfmt/{twin}__mypyc.") for n in compiled), sorted(compiled)
        else:
            assert not compiled
    if cannot_compile() is None:
        assert not compiled_wheel.name.endswith("-py3-none-any.whl"), compiled_wheel.name  # tagged for this platform
    else:
        assert compiled_wheel.name.endswith("-py3-none-any.whl"), compiled_wheel.name
    got = _install_and_probe(compiled_wheel, tmp_path)
    assert got["compiled"] == got["strict_compiled"] == (cannot_compile() is None)


def _project_copy(tmp_path: Path) -> Path:
    """What an editable install needs of this project, copied (so that installing never touches ROOT)."""
    copy = tmp_path / "project"
    ignore = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    for folder in ("charfmt", "grammars", "prompts"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "hatch_build.py", ".gitignore"):
        shutil.copy2(ROOT / name, copy / name)
    return copy


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
    project = _project_copy(tmp_path)
    # What an earlier compiled editable install left in the source tree: a pure reinstall removes it.
    tag = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    stale = []
    for name, module in (("_stream_c", "reader"), ("_strict_c", "fast")):
        twin = project / "charfmt" / name
        twin.mkdir(exist_ok=True)  # (a copy of a tree with a compiled twin holds its folder, empty)
        stale += [twin / f"__init__{tag}", twin / f"{module}{tag}", project / "charfmt" / f"{name}__mypyc{tag}"]
        stale.append(twin / f"{module}.pyd")
    for path in stale:
        path.write_bytes(b"an earlier build's")
    _pip("--python", python, "install", "--no-deps", "--no-build-isolation", "-e", str(project), compile_reader=False)
    assert [p.name for p in stale if p.exists()] == []
    for name in ("_stream_c", "_strict_c"):
        assert not (project / "charfmt" / name).exists()  # (a twin's folder holds only what a build put there)
    assert (project / "charfmt" / "_stream" / "reader.py").exists()
    got = _probe(python, tmp_path)
    assert Path(got["module"]).parent == project / "charfmt"
    assert Path(got["grammars"]) == project / "grammars"
    assert got["compiled"] is False and got["strict_compiled"] is False


def _hook_module() -> Any:
    spec = importlib.util.spec_from_file_location("_charfmt_hatch_build", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("value", "wanted"), [(None, True), ("1", False), ("TRUE", False), ("0", True), ("no", True)])
def test_the_build_asks_for_mypy_only_when_it_compiles(
    value: str | None, wanted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline installs: with CHARFMT_PURE_PYTHON=1 the build needs nothing but hatchling."""
    from hatchling.builders.wheel import WheelBuilder

    if value is None:
        monkeypatch.delenv("CHARFMT_PURE_PYTHON", raising=False)
    else:
        monkeypatch.setenv("CHARFMT_PURE_PYTHON", value)
    dependencies = WheelBuilder(str(ROOT)).config.dependencies
    assert dependencies == (_hook_module().BUILD_DEPENDENCIES if wanted else [])


def test_the_hook_has_no_static_dependencies() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]
    assert "dependencies" not in hook, hook
    assert {"mypy>=1.10", "setuptools>=69"} == set(_hook_module().BUILD_DEPENDENCIES)


def test_a_pure_build_leaves_the_source_tree_of_a_wheel_build_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only an editable build removes compiled files (they are its own); a wheel build reads the tree only."""
    project = _project_copy(tmp_path)
    kept = [project / "charfmt" / "_stream_c" / "reader.pyd", project / "charfmt" / "_strict_c" / "fast.pyd"]
    for path in kept:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"someone's")
    monkeypatch.setenv("CHARFMT_PURE_PYTHON", "1")
    hook = _hook_module().CompileScanner(str(project), {}, None, None, str(tmp_path), "wheel")
    build_data: dict[str, Any] = {"force_include": {}}
    hook.initialize("standard", build_data)
    assert all(path.exists() for path in kept)
    hook.initialize("editable", build_data)
    assert not any(path.exists() for path in kept)
    assert build_data == {"force_include": {}}  # pure: nothing added
