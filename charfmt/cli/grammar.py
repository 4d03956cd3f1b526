"""``charfmt grammar``: the reply format as a grammar for constrained decoding (Lark, GBNF or a body regex)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_OK, load_character, load_scene, usage_error
from charfmt.cli._options import add_bounds, add_size, bounds_of
from charfmt.models import Vocabulary
from charfmt.tags import DEFAULT_TAGS

if TYPE_CHECKING:
    from charfmt.prompt.character import Character
    from charfmt.prompt.scene import Scene


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt grammar``."""
    sp.add_argument(
        "--target",
        choices=("lark", "gbnf", "regex"),
        required=True,
        help="lark: llguidance / vLLM / SGLang / outlines; gbnf: llama.cpp; regex: one C body",
    )
    group = sp.add_mutually_exclusive_group()
    group.add_argument(
        "--emotions", metavar="KEYS", help=f"restrict {DEFAULT_TAGS.emotion.open} to these comma-separated keys"
    )
    group.add_argument("--character", metavar="FILE", help="this character's emotions and [[tags]]")
    group.add_argument("--scene", metavar="FILE", help="a scene's cast: each C chat names its speaker (scene TOML)")
    add_bounds(sp)
    add_size(sp, "--character file")


def run(args: argparse.Namespace) -> int:
    """Print the grammar."""
    from charfmt.constrain.export import grammar  # noqa: PLC0415 (import cost: every CLI command loads this module)

    vocabulary = None
    subject: Character | Scene | None = None
    if args.character is not None:
        subject = load_character(args.character, args.max_size, getattr(args, "user_name", None))
    elif args.scene is not None:
        subject = load_scene(args.scene, args.max_size)  # (each speaker's emotions its own)
    elif args.emotions is not None:
        keys = [k.strip() for k in args.emotions.split(",")]
        if len(keys) > 1 and "" in keys and any(keys):  # ("a,,b", "a,": a key left out by mistake, not dropped)
            usage_error(args, f"argument --emotions: an empty key in {args.emotions!r} (keys are comma-separated)")
        keys = [k for k in keys if k]
        if not keys:
            usage_error(args, "argument --emotions: no emotion key given")
        try:
            vocabulary = Vocabulary.of(*keys)
        except ValueError as e:  # pydantic's ValidationError: a key the format cannot hold
            usage_error(args, f"argument --emotions: {_first_line(e)}")
    from charfmt.constrain.export import ExportError  # noqa: PLC0415 (import cost: every CLI command loads this module)

    try:
        text = grammar(args.target, vocabulary=vocabulary, character=subject, **bounds_of(args))
    except ExportError as e:  # bounds that cannot hold a reply (a token budget too small)
        usage_error(args, str(e))
    sys.stdout.write(text)
    if args.target == "regex":
        sys.stdout.write("\n")
    return EXIT_OK


def _first_line(e: BaseException) -> str:
    """One line for an error: a pydantic ``ValidationError``'s first message, else the first line."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        from charfmt.models import error_message  # noqa: PLC0415 (pydantic errors come with the models loaded)

        return error_message(errors()[0])
    return str(e).splitlines()[0] if str(e) else type(e).__name__


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="print the reply format as a grammar for constrained decoding",
    ok="the grammar was printed",
    invalid="the --character file is invalid",
)
