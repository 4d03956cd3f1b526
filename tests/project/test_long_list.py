"""``tests/long_tests.txt`` names only tests that exist, and what it names leaves the default run.

A renamed test must not slip back into the default run unnoticed, nor a stale line stay behind.
"""

from __future__ import annotations

import ast

import pytest
from conftest import ROOT, long_test_ids, pytest_collection_modifyitems


def test_every_listed_long_test_exists() -> None:
    missing = []
    for test_id in sorted(long_test_ids()):
        path, _, name = test_id.partition("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if name not in names:
            missing.append(test_id)
    assert not missing, f"tests/long_tests.txt names tests that do not exist: {missing}"


class _Item:
    """What ``pytest_collection_modifyitems`` reads of a collected test: its node id, its markers."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.markers: list[str] = []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker.name)


def test_a_listed_test_leaves_the_default_run_for_the_long_one() -> None:
    listed = "tests/language/test_grammar.py::test_numeric_references_name_exactly_the_characters_text_allows"
    assert listed in long_test_ids()
    items = [_Item(f"{listed}[0]"), _Item(listed), _Item("tests/language/test_grammar.py::test_something_else")]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.markers for item in items] == [["long"], ["long"], []]
    # the default run deselects what is marked long
    assert "not long" in (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("addopts", 1)[1].split("\n", 1)[0]
