"""Usage errors and help that say what is true: each subcommand names itself in its usage errors, its ``--help``
names only options it has, bad values are one clear line (an empty file, an empty ``--tokenizer``), ``chat``'s
typed commands are the chat's (``/help``), and the docs' ``--server`` list is the CLI's."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from charfmt.cli import _parser, main
from charfmt.constrain.engines import SERVERS

REX = str(ROOT / "examples" / "characters" / "rex.toml")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


SUBCOMMANDS = _subparsers(_parser())


def _run(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "charfmt", *argv], input=stdin, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Arguments that satisfy what ``parser`` requires (each required option or group's first, each positional)."""
    argv: list[str] = []
    chosen = [g._group_actions[0] for g in parser._mutually_exclusive_groups if g.required]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or not (action.required or action in chosen):
            continue
        value = [str(next(iter(action.choices)) if action.choices else "x")] if action.nargs != 0 else []
        argv += [action.option_strings[0], *value] if action.option_strings else value
    return argv


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_an_unknown_option_is_said_by_the_subcommand_that_was_given_it(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse's top parser used to say every leftover argument, as 'see charfmt --help'."""
    parser, path = SUBCOMMANDS[name], [name]
    if actions := _subparsers(parser):  # (sessions: its first action)
        path.append(next(iter(actions)))
        parser = actions[path[-1]]
    assert main([*path, *_required(parser), "--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert err == f"charfmt: error: unrecognized arguments: --no-such-option (see 'charfmt {' '.join(path)} --help')\n"


def test_serve_says_serve_help_as_a_process() -> None:
    done = _run("serve", "--character", REX, "--upstream", "http://127.0.0.1:9/v1", "--bogus")
    assert done.returncode == 2
    assert done.stderr == "charfmt: error: unrecognized arguments: --bogus (see 'charfmt serve --help')\n"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_names_only_options_the_subcommand_has(name: str) -> None:
    parser = SUBCOMMANDS[name]
    nested = _subparsers(parser).values()
    own = set(parser._option_string_actions).union(*(set(p._option_string_actions) for p in nested))
    others = "|".join(SUBCOMMANDS)  # ("serve --tokens": another subcommand's option, named with it)
    for shown in (parser, *nested):
        text = re.sub(rf"\b(?:{others}) --[a-z][a-z0-9-]+", "", shown.format_help())
        named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", text))
        assert named <= own, f"charfmt {name}: --help names {sorted(named - own)}, which it does not take"


def test_an_empty_character_file_is_said_to_be_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("  \n")
    for path in ("/dev/null", str(empty)):
        done = _run("render", "--character", path, "--say", "hi")
        assert done.returncode == 1 and done.stderr == f"charfmt: error: {path}: empty file\n", done.stderr


def test_an_empty_tokenizer_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--character", REX, "--say", "hi", "--budget", "900", "--tokenizer", ""]) == 2
    err = capsys.readouterr().err
    assert "argument --tokenizer: a tokenizer.json file or a tiktoken model or encoding name, not nothing" in err


def test_chat_help_lists_the_commands_and_sends_no_command_to_the_model() -> None:
    """``/help`` and a misspelt ``/qiut`` used to go to the model as turns; the endpoint here is never reached
    (nothing listens on port 9): a turn sent would be an error line and exit 1."""
    done = _run("chat", "--character", REX, "--endpoint", "http://127.0.0.1:9/v1", stdin="/help\n/qiut\n/quit\nhi\n")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "commands:\n  /help   list these commands\n  /quit   end the chat" in done.stdout
    assert "unknown command /qiut: /help lists the commands (not sent to the model)" in done.stdout
    assert "you> hi" not in done.stdout  # (/quit ended the chat)


def test_the_docs_list_every_server_the_cli_takes() -> None:
    page = (ROOT / "docs" / "CHAT.md").read_text(encoding="utf-8")
    line = re.search(r"`--server` is one of (.*?)\.\n", page)
    assert line is not None
    assert tuple(re.findall(r"`([a-z-]+)`", line.group(1))) == SERVERS


@pytest.mark.parametrize(
    ("argv", "unit"),
    [
        (["chat", "--character", REX, "--timeout"], "seconds"),
        (["serve", "--character", REX, "--model", "m.gguf", "--timeout"], "seconds"),
        (["serve", "--character", REX, "--model", "m.gguf", "--header-timeout"], "seconds"),
        (["serve", "--character", REX, "--model", "m.gguf", "--max-age"], "days"),
    ],
)
@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "1e9", "soon"])
def test_a_time_option_takes_a_positive_bounded_number(
    argv: list[str], unit: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``serve --timeout`` took any float (-1, nan) and ran; each time option is now one bounded type."""
    assert main([*argv, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"charfmt: error: argument {argv[-1]}: "), err
    assert unit in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["grammar", "--target", "gbnf", "--emotions", "a,,b"], "argument --emotions: an empty key in 'a,,b'"),
        (["grammar", "--target", "gbnf", "--emotions", "joy,"], "argument --emotions: an empty key in 'joy,'"),
        (["grammar", "--target", "gbnf", "--max-tokens", "99999999999999999999"], "from 1 to 10,000,000"),
        (["schema", "--max-chars", "10000001"], "argument --max-chars: must be from 1 to 10,000,000"),
    ],
)
def test_grammar_inputs_no_engine_can_use_are_usage_errors(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a newcomer's trial: ``--emotions "a,,b"`` dropped the empty key in silence, and a bound of 20
    digits wrote a grammar XGrammar and llguidance refuse to compile; both exited 0."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
