"""Shared helpers: fixture files of cases, and the repository root."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

TESTS = Path(__file__).resolve().parent
"""``tests/``: its data folders (``cases/``, ``data/``, ``lore/``, ``stage/``, ``interop/``, ``golden/``…) and
helper modules stay here; the test files sit one folder down, in their wing's folder (docs/DEVELOP.md)."""
ROOT = TESTS.parent
CASES = TESTS / "cases"
WINGS = sorted(folder for folder in TESTS.iterdir() if folder.is_dir() and any(folder.glob("test_*.py")))
"""The folders of test files: ``tests/<wing>/`` for each wing of docs/ARCHITECTURE.md, and ``tests/project/``."""

# Test files import the helpers here (``from conftest import ROOT``, ``import scripted_upstream``) and a few
# import another test file (``from test_engines import DEMO``) wherever it sits: every folder of test files is
# on the path, as the one flat folder was, however a run is started (one file, -n auto, the whole suite).
for _folder in [TESTS, *WINGS]:
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
MARK = "\u2038"  # ‸ marks expected diagnostic positions in fixture inputs

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True)
settings.register_profile("fuzz", max_examples=20_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))


@dataclass(frozen=True)
class Case:
    """One case of a fixture file: a name, an input, the expected lines."""

    name: str
    input: str
    expected: list[str]


def mypy_strict(folder: Path, source: str) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` over ``source`` as a user's module in ``folder``, charfmt importable from this tree."""
    (folder / "user_code.py").write_text(source, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", os.devnull, "user_code.py"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def load_cases(filename: str) -> list[Case]:
    """Read ``tests/cases/FILENAME``: ``=== name``, input, ``---``, expected lines."""
    cases: list[Case] = []
    text = (CASES / filename).read_text(encoding="utf-8")
    for block in text.split("\n=== ")[1:]:
        name, _, rest = block.partition("\n")
        given, sep, expected = rest.rpartition("\n---\n")  # the last one: inputs may hold "---"
        assert sep, f"case {name!r} in {filename} has no '---' line"
        lines = [line for line in expected.strip("\n").split("\n") if line.strip()]
        cases.append(Case(name.strip(), given.rstrip("\n"), lines))
    return cases


def cannot_compile() -> str | None:
    """Why this machine cannot build the compiled stream reader, or ``None`` when it can."""
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (the test extra has it): the pure reader is the installed one"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc} is not on PATH): the pure reader is the installed one"
    return None


LONG_TESTS = TESTS / "long_tests.txt"


def long_test_ids() -> set[str]:
    """The ``file::function`` ids ``tests/long_tests.txt`` moves behind the ``long`` marker."""
    lines = LONG_TESTS.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


_DATA_HOME: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """The user's data folder is a temporary one for the whole run (and every process it starts): the default
    session store of ``charfmt serve`` and ``charfmt chat --session`` is never the user's."""
    import tempfile

    _DATA_HOME.append(tempfile.mkdtemp(prefix="charfmt-test-data-"))
    os.environ["XDG_DATA_HOME"] = _DATA_HOME[-1]


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _DATA_HOME:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests listed in ``tests/long_tests.txt`` ``long`` (left out of the default run)."""
    listed = long_test_ids()
    for item in items:
        if item.nodeid.partition("[")[0] in listed:
            item.add_marker(pytest.mark.long)
