"""The ``charfmt`` command: parse, check, fix, stream, schema, render, grammar, fuzz, demo.

Exit codes:

- 0: success; the input is valid (or, with ``--lenient``, repaired with warnings only);
- 1: invalid input: a file was read but charfmt rejects what it holds (a reply with
  errors, an empty or binary reply, a character file that is not valid TOML or UTF-8);
  or an optional extra the subcommand needs is not installed (``report``: ``charfmt[arrow]``,
  ``charfmt[ray]``; ``chat``: ``charfmt[local]``, ``charfmt[http]``; ``serve``: ``charfmt[serve]``;
  each subcommand's declared ``extras``), the error line naming it;
- 2: usage error (an unknown option, a bad option value) or a file that cannot be used
  at all: missing, a directory, closed standard input, an output file that cannot be
  created, or a ``--replay`` / ``--character`` / ``--history`` file larger than
  ``--max-size``;
- 130: interrupted (Ctrl-C).

Every error is one line on standard error, ``charfmt: error: ...`` (diagnostics of a
reply keep their ``file:line:col: CODE message`` form and caret snippet); never a traceback.
Output that the terminal's encoding cannot hold is escaped (``\\u3042``), not a crash.

Layout: ``SUBCOMMANDS`` names each subcommand's declaration, a ``Subcommand`` (``charfmt.cli._command``) that
its module ends with (``COMMAND``): its one-line help, what exit statuses 0 and 1 mean for it, the optional extras
it may need, its options (``add_arguments``) and what it does (``run``);
``charfmt.cli._io`` holds what they share (reading, writing, errors, exit codes) and
``charfmt.cli._options`` the option types and the options several of them take.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Final

from charfmt.cli import (
    chat,
    check,
    convert,
    demo,
    fix,
    fuzz,
    grammar,
    parse,
    render,
    report,
    schema,
    serve,
    sessions,
    stream,
)
from charfmt.cli._command import Subcommand, exit_codes
from charfmt.cli._io import (
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    InputError,
    InvalidError,
    discard_stdout,
    error,
    forgiving_output,
    reason,
)
from charfmt.cli._options import ArgumentParser
from charfmt.diagnostics import CharfmtError

SUBCOMMANDS: Final[dict[str, Subcommand]] = {
    "parse": parse.COMMAND, "check": check.COMMAND, "stream": stream.COMMAND, "fix": fix.COMMAND,
    "fuzz": fuzz.COMMAND, "schema": schema.COMMAND, "render": render.COMMAND, "grammar": grammar.COMMAND,
    "chat": chat.COMMAND, "demo": demo.COMMAND, "convert": convert.COMMAND, "report": report.COMMAND,
    "serve": serve.COMMAND, "sessions": sessions.COMMAND,
}  # fmt: skip
"""Each subcommand by name, in the order ``--help`` lists them; its declaration says the rest."""


_EXTRAS: Final = (
    "a subcommand's optional extra is not installed ("
    + "; ".join(
        f"{name}: {', '.join(f'charfmt[{extra}]' for extra in command.extras)}"
        for name, command in SUBCOMMANDS.items()
        if command.extras
    )
    + ": the error names it)"
)
"""What exit status 1 also means, in ``charfmt --help``: read from each subcommand's ``extras``."""


class _VersionAction(argparse.Action):
    """``--version``: the version and which stream reader runs; computed only when asked (it imports the reader)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(_version_text())
        parser.exit(EXIT_OK)


def _version_text() -> str:
    """``charfmt 0.1.0`` and the stream reader: ``compiled (mypyc)`` or ``pure Python`` (``charfmt.stream``)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 (import cost: only for --version)

    from charfmt.stream import reader_name  # noqa: PLC0415 (the reader loads only for --version)

    try:
        number = version("charfmt")
    except PackageNotFoundError:  # a source checkout that was never installed
        number = "(not installed)"
    return f"charfmt {number}\nstream reader: {reader_name()}"


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="charfmt",
        description="Parse and check game-character chat replies.",
        epilog=exit_codes(
            invalid=f"invalid input: a reply with errors, a character file charfmt rejects; or {_EXTRAS}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--version", action=_VersionAction, help="print the version and the stream reader (compiled or pure Python)"
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in SUBCOMMANDS.items():
        # --help says what the command does (its one-line help as a sentence) and its exit codes.
        sp = sub.add_parser(
            name,
            help=command.help,
            description=command.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sp.set_defaults(run=command.run, parser=sp)
        command.add_arguments(sp)
        sized = "--max-size" in sp._option_string_actions  # (the exit codes name only the options it has)
        sp.epilog = command.epilog(max_size=sized)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    with forgiving_output():
        status = _run(argv)
    return status


def _run(argv: Sequence[str] | None) -> int:
    try:
        args, unknown = _parser().parse_known_args(argv)
        if unknown:  # said by the subcommand that parsed them: its --help lists what it takes
            args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if sys.stdout is None and not (args.command == "fuzz" and args.out is not None):
            raise InputError("cannot write standard output: it is closed")
        status = int(args.run(args))
        if sys.stdout is not None:
            sys.stdout.flush()  # a write error shows here, not in a traceback at exit
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return EXIT_OK if e.code is None else e.code if isinstance(e.code, int) else EXIT_USAGE
    except InputError as e:
        error(str(e))
        return EXIT_USAGE
    except (InvalidError, CharfmtError) as e:
        error(str(e))
        return EXIT_INVALID
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (| head): nothing more to say
        discard_stdout()
        return EXIT_OK
    except OSError as e:  # writing failed: a full disk, a closed standard output
        discard_stdout()
        error(f"cannot write output: {reason(e)}")
        return EXIT_USAGE
    return status
