"""A subcommand whose optional extra is not installed exits 1 with one line naming the extra, and the
exit-status tables (each ``--help``, ``charfmt --help``, the README) say so (each subcommand's declared ``extras``).

Each case runs in a fresh interpreter where the extra's module cannot be imported
(``sys.modules[name] = None``, as Python does for a module that is not installed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from charfmt.cli import SUBCOMMANDS, main

REX = str(ROOT / "examples" / "characters" / "rex.toml")

# (subcommand and arguments, the module hidden, the extra the error must name)
CASES: dict[str, tuple[list[str], str, str]] = {
    "sessions on PostgreSQL without psycopg": (
        ["sessions", "list", "--store", "postgresql://charfmt@127.0.0.1:9/charfmt"],
        "psycopg",
        "postgres",
    ),
    "serve on PostgreSQL without psycopg": (
        [
            "serve",
            "--character",
            REX,
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--port",
            "0",
            "--store",
            "postgresql://charfmt@127.0.0.1:9/charfmt",
        ],
        "psycopg",
        "postgres",
    ),
    "report without pyarrow": (["report", "{log}"], "pyarrow", "arrow"),
    "report --engine ray without ray": (["report", "{log}", "--engine", "ray"], "ray", "ray"),
    "chat --model without llama-cpp-python": (
        ["chat", "--character", REX, "--model", "{gguf}", "--say", "hi"],
        "llama_cpp",
        "local",
    ),
    "chat --endpoint without httpx": (
        ["chat", "--character", REX, "--endpoint", "http://127.0.0.1:9/v1", "--say", "hi"],
        "httpx",
        "http",
    ),
    "serve without starlette": (
        ["serve", "--character", REX, "--upstream", "http://127.0.0.1:9/v1"],
        "starlette",
        "serve",
    ),
    "serve without uvicorn": (["serve", "--character", REX, "--upstream", "http://127.0.0.1:9/v1"], "uvicorn", "serve"),
    "serve without websockets": (
        ["serve", "--character", REX, "--upstream", "http://127.0.0.1:9/v1", "--port", "0"],
        "websockets",
        "serve",
    ),
    "serve --upstream without aiohttp": (
        ["serve", "--character", REX, "--upstream", "http://127.0.0.1:9/v1", "--port", "0"],
        "aiohttp",
        "serve",
    ),
    "serve --model without llama-cpp-python": (
        ["serve", "--character", REX, "--model", "{gguf}", "--port", "0"],
        "llama_cpp",
        "local",
    ),
}


def _without(module: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = f"import sys\nsys.modules[{module!r}] = None\nfrom charfmt.cli import main\nsys.exit(main({argv!r}))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("case", CASES)
def test_a_missing_extra_exits_1_naming_it(case: str, tmp_path: Path) -> None:
    argv, module, extra = CASES[case]
    if module != "pyarrow" and "report" in argv:
        pytest.importorskip("pyarrow", reason="the report reads its log with pyarrow first")
    (tmp_path / "log.jsonl").write_text('{"text": "hi"}\n', encoding="utf-8")
    (tmp_path / "m.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(64))  # a GGUF header: the import comes next
    files = {"{log}": str(tmp_path / "log.jsonl"), "{gguf}": str(tmp_path / "m.gguf")}
    done = _without(module, [files.get(a, a) for a in argv], tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("charfmt: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert f"charfmt[{extra}]" in done.stderr and "Traceback" not in done.stderr
    assert extra in SUBCOMMANDS[argv[0]].extras  # the code and the tables read the same list


@pytest.mark.parametrize("name", [n for n, c in SUBCOMMANDS.items() if c.extras])
def test_each_help_says_a_missing_extra_exits_1(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([name, "--help"]) == 0
    table = capsys.readouterr().out.split("exit status:", 1)[1]
    row = " ".join(re.search(r"^  1 +(.*?)(?=^  2 )", table, re.M | re.S).group(1).split())  # type: ignore[union-attr]
    assert "optional extra it needs is not installed" in row
    assert all(f"charfmt[{extra}]" in row for extra in SUBCOMMANDS[name].extras), row


def test_the_top_level_help_and_the_readme_say_it_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    table = " ".join(capsys.readouterr().out.split("exit status:", 1)[1].split())
    readme = " ".join((ROOT / "docs" / "CLI.md").read_text(encoding="utf-8").split())
    paragraph = readme[readme.index("Every subcommand exits 0 on success") :][:900]
    for name, command in SUBCOMMANDS.items():
        for extra in command.extras:
            assert f"{name}: " in table and f"charfmt[{extra}]" in table, (name, extra)
            assert f"`{name}`" in paragraph and f"`charfmt[{extra}]`" in paragraph, (name, extra)
    assert "optional extra" in paragraph and "names the extra" in paragraph
