"""``charfmt fix``: a reply repaired leniently and printed canonically (or as a diff), the repair log on stderr."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterator
from typing import Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_INVALID, EXIT_OK, json_text, read
from charfmt.cli._options import add_character, add_size, whole
from charfmt.cli._reply import emit_diagnostics, failed, language, parse_input
from charfmt.parser import lenient_text
from charfmt.writer import dumps

NO_NEWLINE: Final = "\\ No newline at end of file\n"
"""What ``diff`` and ``patch`` write after a last line that has no newline."""


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt fix``."""
    sp.add_argument("file", nargs="?", default="-", help="reply file, or - for standard input")
    sp.add_argument("--diff", action="store_true", help="print a unified diff from the input to the fixed reply")
    sp.add_argument("--indent", type=whole(0, 64), default=None, metavar="N", help="pretty-print the JSON")
    add_character(sp, scene=True)
    add_size(sp, "input, --character or --scene file")


def run(args: argparse.Namespace) -> int:
    """Repair and print the reply; 1 when errors remain."""
    lang = language(args, as_scene=True)
    inp = read(args.file, args.max_size)
    reply = parse_input(inp, lenient=True, max_size=args.max_size, language=lang)
    source = lenient_text(inp.data)
    emit_diagnostics(inp.name, source, reply.diagnostics, "text", sys.stderr)
    fixed = dumps(reply, indent=args.indent)
    if args.diff:
        # The input as it is on disk: bytes that are not UTF-8 go back out unchanged (surrogateescape).
        original = inp.data.decode("utf-8", errors="surrogateescape")
        sys.stdout.writelines(_unified_diff(original, fixed + "\n", inp.name, f"{inp.name} (fixed)"))
    else:
        print(json_text(fixed, sys.stdout), file=sys.stdout)
    return EXIT_INVALID if failed(reply.diagnostics) else EXIT_OK


def _patch_lines(text: str) -> list[str]:
    """``text`` in lines as ``patch`` counts them: ended by ``\\n`` only, each keeping its end.

    Not ``str.splitlines``: it also ends lines at ``\\r``, U+2028 and the like, which
    ``patch`` reads as characters within a line.
    """
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _unified_diff(old: str, new: str, old_name: str, new_name: str) -> Iterator[str]:
    """A unified diff that ``patch`` applies, a last line without a newline marked as ``diff`` marks it."""
    for line in difflib.unified_diff(_patch_lines(old), _patch_lines(new), old_name, new_name):
        yield line
        if not line.endswith("\n"):
            yield "\n" + NO_NEWLINE


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="repair a reply leniently; print it canonically, the repair log on stderr",
    ok="fixed, warnings only",
    invalid="errors remain (what could be read is still printed)",
)
