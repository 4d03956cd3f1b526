"""``charfmt demo``: a bundled reply parsed and shown, then a broken one: its strict error and its repair."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from typing import Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_OK
from charfmt.cli._reply import pretty
from charfmt.diagnostics import ParseError
from charfmt.parser import parse


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """``charfmt demo`` takes no options."""


def run(_args: argparse.Namespace) -> int:
    """Show the demo."""
    data = resources.files("charfmt").joinpath("data")
    good = data.joinpath("demo_reply.json").read_text(encoding="utf-8")
    broken = data.joinpath("demo_broken.json").read_text(encoding="utf-8")
    print("== A reply from the model ==")
    print(good.rstrip())
    print("\n== charfmt.parse(reply) ==")
    pretty(parse(good), "demo_reply.json", sys.stdout)
    print("\n== A broken reply, parsed strictly ==")
    print(broken.rstrip())
    print()
    try:
        parse(broken)
    except ParseError as e:
        print(f"ParseError: {e}\n")
        print(e.report("demo_broken.json"))
    print("\n== The same reply, parsed leniently: what could be repaired, and how ==")
    pretty(parse(broken, lenient=True), "demo_broken.json", sys.stdout)
    return EXIT_OK


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="parse a bundled reply and show a strict error",
    ok="the demo ran",
    invalid=None,
)
