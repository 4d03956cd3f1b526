"""``charfmt check``: replies checked strictly (or repaired, ``--lenient``); exit 1 if any is invalid."""

from __future__ import annotations

import argparse
import sys
from typing import Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_INVALID, EXIT_OK, EXIT_USAGE, InputError, error, read
from charfmt.cli._options import add_character, add_size
from charfmt.cli._reply import emit_diagnostics, failed, language, parse_input
from charfmt.diagnostics import ParseError
from charfmt.parser import lenient_text


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt check``."""
    sp.add_argument("files", nargs="+", metavar="FILE", help="reply files to check, or - for standard input")
    sp.add_argument(
        "--format",
        choices=("text", "jsonl"),
        default="text",
        help="text: file:line:col: CODE message with a caret (default); jsonl: one diagnostic per line",
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="print nothing for valid files")
    sp.add_argument("--lenient", action="store_true", help="repair what can be repaired; report repairs as warnings")
    add_character(sp, scene=True)
    add_size(sp, "input, --character or --scene file")


def run(args: argparse.Namespace) -> int:
    """Check each file; the worst status: 2 for a file that cannot be read, 1 for an invalid one."""
    lang = language(args, as_scene=True)
    status = EXIT_OK
    for path in args.files:
        try:
            inp = read(path, args.max_size)
        except InputError as e:
            error(str(e))
            status = EXIT_USAGE
            continue
        try:
            reply = parse_input(inp, lenient=args.lenient, max_size=args.max_size, language=lang)
        except ParseError as e:
            emit_diagnostics(inp.name, e.source, e.diagnostics, args.format, sys.stdout)
            status = max(status, EXIT_INVALID)
            continue
        emit_diagnostics(inp.name, lenient_text(inp.data), reply.diagnostics, args.format, sys.stdout)
        if failed(reply.diagnostics):
            status = max(status, EXIT_INVALID)
        elif args.format == "text" and not args.quiet:
            repaired = " after repairs" if reply.dialect is not None else ""
            count = len(reply.chats)
            print(f"{inp.name}: ok{repaired} ({count} chat{'' if count == 1 else 's'})", file=sys.stdout)
    return status


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="check replies strictly; exit 1 if any is invalid",
    ok="every file is valid (with --lenient: repairs only)",
    invalid="a file is invalid",
)
