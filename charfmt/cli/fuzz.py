"""``charfmt fuzz``: damaged replies with their clean originals and the mutations, the same for a seed."""

from __future__ import annotations

import argparse
from typing import Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_OK, dump_json, output
from charfmt.cli._options import add_size, whole
from charfmt.cli._reply import language


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt fuzz``."""
    sp.add_argument("--seed", type=whole(0), default=0, help="the same seed writes the same cases (default 0)")
    sp.add_argument("--count", type=whole(0), default=100, help="cases to write (default 100)")
    sp.add_argument(
        "--out", metavar="FILE", help="JSON Lines file, replaced only when every case is written (default: stdout)"
    )
    sp.add_argument("--character", metavar="FILE", help="write the originals in this character's emotions and [[tags]]")
    add_size(sp, "--character file")


def run(args: argparse.Namespace) -> int:
    """Write the cases, one JSON line each."""
    from charfmt.fuzz import iter_fuzz_cases  # noqa: PLC0415 (import cost: every CLI command loads this module)

    lang = language(args)
    cases = iter_fuzz_cases(args.seed, args.count, tags=lang.tags, vocabulary=lang.vocabulary)
    with output(args.out) as out:
        # One case at a time: the first line comes at once, and memory does not grow with --count.
        # Each line in one write (print writes its end apart): Ctrl-C between cases cuts no line.
        for i, case in enumerate(cases):
            out.write(dump_json({"seed": args.seed, "index": i, **case.to_dict()}, out) + "\n")
    return EXIT_OK


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="write damaged replies (with the clean original and the mutations), by seed",
    ok="every case was written",
    invalid=None,
)
