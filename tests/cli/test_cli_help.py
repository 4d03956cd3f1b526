"""Each subcommand's ``--help`` says what it does, what each option means and its exit codes (issue 22.13).

The subcommands are read from the parser itself, so one added later is checked too.
"""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from charfmt import cli
from charfmt.cli import _parser, main
from charfmt.cli._command import Subcommand


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


SUBCOMMANDS = _subcommands()


def test_every_subcommand_is_checked() -> None:
    # The names the issue lists are among them (a parser without subcommands would pass vacuously).
    assert {"parse", "check", "stream", "fix", "fuzz", "schema", "render", "grammar", "chat", "report"} <= set(
        SUBCOMMANDS
    )


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main([*argv, "--help"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_says_what_the_command_does(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = SUBCOMMANDS[name]
    assert parser.description and len(parser.description.split()) >= 3, name
    text = _help([name], capsys)
    assert parser.description.split("\n")[0] in text


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_argument_has_help(name: str) -> None:
    missing = [
        a.option_strings[0] if a.option_strings else a.dest
        for a in SUBCOMMANDS[name]._actions
        if not isinstance(a, argparse._HelpAction) and (not a.help or a.help == argparse.SUPPRESS)
    ]
    assert missing == [], f"charfmt {name}: no help for {missing}"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_states_the_exit_codes(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([name], capsys)
    assert "exit status:" in text
    tail = text[text.index("exit status:") :]
    codes = re.findall(r"^\s+(\d+)\s", tail, re.M)
    assert "0" in codes and "2" in codes and codes == sorted(codes, key=int), tail


def test_the_top_level_help_states_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([], capsys)
    tail = text[text.index("exit status:") :]
    assert re.findall(r"^\s+(\d+)\s", tail, re.M) == ["0", "1", "2", "130"]


@pytest.mark.parametrize(
    ("name", "option"),
    [
        ("parse", "--format"),
        ("check", "FILE"),
        ("check", "--format"),
        ("fuzz", "--seed"),
        ("schema", "--provider"),
        ("render", "--provider"),
        ("chat", "--seed"),
    ],
)
def test_the_options_the_issue_names_are_explained(name: str, option: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([name], capsys)
    options = text[text.index("options:") if option.startswith("-") else text.index("positional arguments:") :]
    line = next(line for line in options.splitlines() if line.strip().startswith(option))
    block = options[options.index(line) :].split("\n  -", 1)[0]
    explained = block.replace(line.strip().split("  ")[0], "", 1)
    assert len(explained.split()) >= 3, block


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_is_its_modules_one_declaration(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # A subcommand's module ends with one ``Subcommand`` (``COMMAND``); the parser, its --help and charfmt --help
    # read it and nothing else (a declaration edited in its module shows everywhere).
    declared = importlib.import_module(f"charfmt.cli.{name}").COMMAND
    assert isinstance(declared, Subcommand)
    assert cli.SUBCOMMANDS[name] is declared
    parser = SUBCOMMANDS[name]
    assert parser.get_default("run") is declared.run
    assert parser.description == declared.description
    epilog = declared.epilog(max_size="--max-size" in parser._option_string_actions)
    assert parser.epilog == epilog
    assert _help([name], capsys).endswith(f"\n{epilog}\n")
    listing = " ".join(_help([], capsys).split())  # (argparse wraps a long help line)
    assert f" {name} {declared.help} " in listing, listing
