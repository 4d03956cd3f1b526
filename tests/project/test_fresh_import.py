"""Every public module imports in a fresh interpreter: alone, and before or after hypothesis and pytest.

The suite's own process has long imported everything, so an import cycle (hypothesis runs
its plugin entry points while it is being imported) only shows in a new interpreter:
``python -c "import charfmt.testing"`` failed that way, and so did a user's test file whose
first import is ``charfmt.testing``.
"""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import charfmt

PACKAGE_ROOT = Path(charfmt.__file__).resolve().parent.parent
"""Where the charfmt under test lives: the subprocesses import the same one."""

MODULES = ["charfmt", *sorted(f"charfmt.{m.name}" for m in pkgutil.iter_modules(charfmt.__path__) if m.name[0] != "_")]
ORDERS = {
    "alone": ("{}",),
    "after-hypothesis": ("hypothesis", "{}"),
    "before-hypothesis": ("{}", "hypothesis"),
    "after-pytest": ("pytest", "{}"),
    "before-pytest": ("{}", "pytest"),
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=cwd, timeout=120, check=False
    )


def test_the_public_modules_are_found() -> None:
    assert {"charfmt", "charfmt.testing", "charfmt.fuzz", "charfmt.stream", "charfmt.cli"} <= set(MODULES)
    assert not any(m.rsplit(".", 1)[-1].startswith("_") for m in MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_imports_in_a_fresh_interpreter(module: str) -> None:
    """``module`` alone and in each order with hypothesis and pytest; the runs go side by side."""
    scripts = {
        name: "; ".join(f"import {m.format(module)}" for m in order)
        + f"; assert {module!r} in __import__('sys').modules"
        for name, order in ORDERS.items()
    }
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        done = dict(zip(scripts, pool.map(_python, scripts.values()), strict=True))
    failed = {name: run.stderr.strip().splitlines()[-1:] for name, run in done.items() if run.returncode != 0}
    assert not failed, failed


def test_a_users_test_file_may_import_charfmt_testing_first(tmp_path: Path) -> None:
    """The order isort gives a user's file: ``charfmt`` sorts before ``hypothesis``."""
    (tmp_path / "test_user.py").write_text(
        "import charfmt.testing\n"
        "from hypothesis import given, settings\n"
        "from hypothesis import strategies as st\n"
        "\n"
        "import charfmt\n"
        "\n"
        "\n"
        "@settings(max_examples=5, deadline=None)\n"
        "@given(charfmt.testing.replies(), st.from_type(charfmt.Reply))\n"
        "def test_replies(drawn, from_type):\n"
        "    assert isinstance(drawn, charfmt.Reply) and isinstance(from_type, charfmt.Reply)\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout


def _declared_entry_point() -> str:
    with open(PACKAGE_ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    value: str = project["entry-points"]["hypothesis"]["charfmt"]
    return value


@pytest.mark.skipif(not (PACKAGE_ROOT / "pyproject.toml").exists(), reason="needs the source tree's pyproject.toml")
@pytest.mark.parametrize("first", ["charfmt.testing", "hypothesis", "charfmt"])
def test_the_declared_hypothesis_entry_point(first: str) -> None:
    """Hypothesis loading exactly the entry point pyproject.toml declares (an installed copy may be older).

    Loading it imports no strategies (not even hypothesis), and ``st.from_type`` draws charfmt's
    models afterwards, whichever module is imported first.
    """
    code = f"""
import importlib.metadata as md, sys, warnings
point = md.EntryPoint(name="charfmt", value={_declared_entry_point()!r}, group="hypothesis")
hook = point.load()
assert "hypothesis" not in sys.modules and "charfmt.testing" not in sys.modules, "loading imports strategies"
real = md.entry_points
md.entry_points = lambda **kw: md.EntryPoints([point]) if kw.get("group") == "hypothesis" else real(**kw)
import {first}
import charfmt
from hypothesis import strategies as st
warnings.simplefilter("ignore")
for kind in (charfmt.Reply, charfmt.Chat, charfmt.Segment, charfmt.UserTurn):
    assert isinstance(st.from_type(kind).example(), kind), kind
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr[-3000:]
