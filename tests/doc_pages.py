"""The documentation's pages and their code blocks, as the docs tests read them.

A page is ``README.md`` or any ``docs/**/*.md``. A code block is a fenced block (three or more
backticks or tildes, indented or not, as inside a list item). The line right before a block may
carry a marker comment that says how the tests treat it when they cannot simply run it:

- ``<!-- docs: not run: REASON -->``: not executed, for the REASON given (installing packages, a
  hosted API key, a model download, a server, a language with no checker here). The
  ``charfmt`` commands of a marked shell block still have their subcommand and every flag
  checked against ``--help``.
- ``<!-- docs: part of PATH -->``: a TOML or JSON snippet taken from the repository file PATH;
  every table and value it shows must be in that file, and the file must load.
- ``<!-- docs: run by tests/FILE.py::NAME -->``: a test of its own runs the block (it needs a
  server, an optional engine...); the test must exist.

The README's ``<!-- demo-command -->`` and ``<!-- test-command -->`` blocks count as not run: they
install the package (CI runs the test command from the README itself).

Everything else is run (Python, ``charfmt`` commands) or checked (JSON, TOML, JavaScript) by
``tests/project/test_doc_blocks.py``.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*\n", re.MULTILINE)
_MARKER = re.compile(r"^ *<!-- docs: (?P<kind>not run|part of|run by):? *(?P<what>.*?) *-->$")


def pages() -> list[Path]:
    """Every page whose code blocks the tests run: the README, then ``docs/**/*.md``."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def name(page: Path) -> str:
    """The page's path from the repository root (``docs/FORMAT.md``)."""
    return page.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    """The page, from the repository root."""
    line: int
    """The 1-based line of its opening fence."""
    lang: str
    """The fence's language word, lower case (``""`` where none is given)."""
    code: str
    """Its text, dedented (a block in a list item is indented with it)."""
    marker: tuple[str, str] | None
    """``(kind, what)`` of the marker comment right before it, if any."""

    @property
    def id(self) -> str:
        """``docs/FORMAT.md:97``: where the block opens."""
        return f"{self.page}:{self.line}"


@cache
def blocks(page: Path) -> tuple[Block, ...]:
    """The fenced blocks of ``page``, in order; an unclosed fence is an error."""
    text = page.read_text(encoding="utf-8")
    lines = text.split("\n")
    found: list[Block] = []
    position = 0
    while (opening := _FENCE.search(text, position)) is not None:
        indent, fence = opening["indent"], opening["fence"]
        closing = re.compile(rf"^ {{0,{len(indent) + 3}}}{fence[0]}{{{len(fence)},}} *$", re.MULTILINE)
        end = closing.search(text, opening.end())
        line = text.count("\n", 0, opening.start()) + 1
        assert end is not None, f"{name(page)}:{line}: a code block that is never closed"
        code = textwrap.dedent(text[opening.end() : end.start()]).rstrip("\n")
        found.append(Block(name(page), line, opening["lang"].lower(), code, _marker(lines, line - 1)))
        position = end.end()
    return tuple(found)


SETUP = {
    "<!-- demo-command -->": "the README's set-up command: installs the package into a new virtual environment",
    "<!-- test-command -->": "the README's test command: installs every extra and runs the tests (CI runs it)",
}
"""The README's two set-up commands (which CI reads by these comments) count as marked, for this reason."""


def _marker(lines: list[str], fence: int) -> tuple[str, str] | None:
    """The marker on the last non-blank line before the fence at index ``fence``, if any."""
    before = fence - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    if before >= 0 and lines[before].strip() in SETUP:
        return "not run", SETUP[lines[before].strip()]
    if before < 0 or (found := _MARKER.match(lines[before])) is None:
        return None
    return found["kind"], found["what"]


def all_blocks() -> list[Block]:
    """Every block of every page."""
    return [block for page in pages() for block in blocks(page)]
