"""``tests/long_tests.txt`` names only tests that exist, and what it names leaves the default run.

A renamed test must not slip back into the default run unnoticed, nor a stale line stay behind.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT, long_test_ids


def test_every_listed_long_test_exists() -> None:
    missing = []
    for test_id in sorted(long_test_ids()):
        path, _, name = test_id.partition("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if name not in names:
            missing.append(test_id)
    assert not missing, f"tests/long_tests.txt names tests that do not exist: {missing}"


def _collected(*args: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_a_listed_test_leaves_the_default_run_for_the_long_one() -> None:
    listed = "tests/test_grammar.py::test_numeric_references_name_exactly_the_characters_text_allows"
    assert listed in long_test_ids()
    default = _collected("tests/test_grammar.py")
    assert default, "the file's other tests are collected"
    assert not [i for i in default if i.startswith(listed)]
    assert [i for i in _collected("tests/test_grammar.py", "-m", "long") if i.startswith(listed)]
