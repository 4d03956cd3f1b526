"""The format choices of ``charfmt convert`` and ``sessions export``: the interop table, not a list of their own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from charfmt.cli import main
from charfmt.interop._formats import DECLARED


@pytest.mark.parametrize("argv", [["convert", "--help"], ["sessions", "export", "--help"]])
def test_a_format_in_the_table_is_a_choice_with_no_other_edit(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a newcomer's trial: ``cli/convert.py`` kept its own tuple of format names beside the table."""
    monkeypatch.setitem(DECLARED, "toy", DECLARED["pam"])
    assert main(argv) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert ", ".join(("jsonl", *DECLARED)) in help_text and "toy" in help_text, help_text


def test_an_unknown_format_is_a_usage_error_naming_the_tables_formats() -> None:
    out = subprocess.run([sys.executable, "-m", "charfmt", "convert", "--from", "toy", "--to", "pam", "a", "b"],
                         check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert "invalid choice: 'toy'" in out.stderr and all(repr(name) in out.stderr for name in DECLARED), out.stderr


def test_the_command_line_starts_without_the_interop_formats() -> None:
    code = (
        "import sys\nfrom charfmt.cli import main\ntry:\n    main(['check', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert not [m for m in sys.modules if m.startswith('charfmt.interop')], 'the parser imported interop'"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
