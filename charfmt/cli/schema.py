"""``charfmt schema``: the reply envelope as JSON Schema, plain or in a provider's structured-output subset."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_OK, dump_json, load_character, load_scene, usage_error
from charfmt.cli._options import add_bounds, add_character, add_size, bounds_of
from charfmt.cli._reply import language
from charfmt.constrain.schema import PROVIDERS, json_schema


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt schema``."""
    sp.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="the schema in the subset that provider's structured output accepts (default: plain JSON Schema)",
    )
    add_character(sp, scene=True)
    add_bounds(sp)
    add_size(sp, "--character or --scene file")


def run(args: argparse.Namespace) -> int:
    """Print the schema."""
    from charfmt.constrain.export import ExportError  # noqa: PLC0415 (import cost: every CLI command loads this module)

    bounds = bounds_of(args)
    if args.scene is not None:  # each speaker an alternative of its own, with its emotions
        scene = load_scene(args.scene, args.max_size, getattr(args, "user_name", None))
        try:
            schema = scene.json_schema(args.provider, **bounds)
        except ExportError as e:
            usage_error(args, str(e))
        print(dump_json(schema, sys.stdout, indent=2))
        return EXIT_OK
    if args.character is not None and args.max_tokens is not None:  # its examples plan the budget
        character = load_character(args.character, args.max_size, getattr(args, "user_name", None))
        constraints: dict[str, Any] = {"character": character}
    else:
        lang = language(args)
        constraints = {"vocabulary": lang.vocabulary, "tags": lang.tags}
    try:
        schema = json_schema(args.provider, **constraints, **bounds)
    except ExportError as e:  # bounds that cannot hold a reply (a token budget too small)
        usage_error(args, str(e))
    print(dump_json(schema, sys.stdout, indent=2))
    return EXIT_OK


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="print the reply envelope as JSON Schema",
    ok="the schema was printed",
    invalid="the --character file is invalid",
)
