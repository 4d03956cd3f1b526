"""``charfmt schema``: the reply envelope as JSON Schema, plain or in a provider's structured-output subset."""

from __future__ import annotations

import argparse
import sys
from typing import Final

from charfmt.cli._io import EXIT_OK, dump_json
from charfmt.cli._options import add_character, add_size
from charfmt.cli._reply import language
from charfmt.constrain.schema import PROVIDERS, json_schema

HELP: Final = "print the reply envelope as JSON Schema"

EXITS: Final[tuple[str, str | None]] = ("the schema was printed", "the --character file is invalid")
EXTRAS: Final[tuple[str, ...]] = ()


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt schema``."""
    sp.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="the schema in the subset that provider's structured output accepts (default: plain JSON Schema)",
    )
    add_character(sp)
    add_size(sp, "--character file")


def run(args: argparse.Namespace) -> int:
    """Print the schema."""
    lang = language(args)
    schema = json_schema(args.provider, vocabulary=lang.vocabulary, tags=lang.tags)
    print(dump_json(schema, sys.stdout, indent=2))
    return EXIT_OK
