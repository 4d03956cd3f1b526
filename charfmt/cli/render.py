"""``charfmt render``: the provider request (or one prompt text) for a character, its history and a user turn."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from charfmt.cli._io import EXIT_OK, InputError, dump_json, load_character, read_text, usage_error
from charfmt.cli._options import add_size, add_tokenizer, add_user_name, whole
from charfmt.schema import PROVIDERS

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

HELP: Final = "render a provider request for a character and a user turn"

EXITS: Final[tuple[str, str | None]] = (
    "the request was printed",
    "the --character or --history file is invalid, or over --budget",
)
EXTRAS: Final[tuple[str, ...]] = ()


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt render``."""
    sp.add_argument("--character", required=True, metavar="FILE", help="character TOML file or card")
    add_user_name(sp)
    sp.add_argument("--say", required=True, metavar="TEXT", help='what the user says, in shorthand: "[angry] なんで？"')
    sp.add_argument(
        "--history",
        metavar="FILE",
        help='past exchanges: JSON Lines of {"user": ..., "reply": ...} (an exchange may span lines)',
    )
    sp.add_argument(
        "--provider", choices=PROVIDERS, default="openai", help="whose chat API the request is for (default openai)"
    )
    sp.add_argument(
        "--format", choices=("json", "text"), default="json", help="json: provider request; text: one prompt"
    )
    sp.add_argument("--templates", metavar="DIR", help="a folder of your own templates, looked up first")
    sp.add_argument("--budget", type=whole(1), metavar="TOKENS", help="drop the oldest exchanges to fit")
    add_tokenizer(sp, "for --budget")
    sp.add_argument("--structured", action="store_true", help="add the provider's structured-output schema")
    add_size(sp, "--character or --history file")


def run(args: argparse.Namespace) -> int:
    """Print the request."""
    from charfmt.render import render_messages, render_text  # noqa: PLC0415 (jinja only when rendering)

    if not args.say.strip():
        usage_error(args, "argument --say: nothing to say: an empty user turn is not sent to a model")
    if args.tokenizer is not None and args.budget is None:
        usage_error(args, "argument --tokenizer: it counts for --budget, which is not given")
    templates = _templates(args.templates)
    character = load_character(args.character, args.max_size, getattr(args, "user_name", None))
    history = _load_history(args.history, character, args.max_size) if args.history is not None else []
    turn = character.shorthand(args.say)
    for d in turn.diagnostics:
        print(f"charfmt: warning: --say:{d.column}: {d.code} {d.message}", file=sys.stderr)
    options: dict[str, Any] = {"templates": templates, "budget": args.budget}
    if args.tokenizer is not None:
        from charfmt.tokens import counter_for  # noqa: PLC0415

        options["counter"] = counter_for(tokenizer=args.tokenizer)
    if args.format == "text":
        print(render_text(character, history, turn, **options))
    else:
        request = render_messages(
            character, history, turn, provider=args.provider, structured=args.structured, **options
        )
        print(dump_json(request, sys.stdout, indent=2))
    return EXIT_OK


def _load_history(path: str, character: Character, limit: int) -> list[Exchange]:
    from charfmt.character import history_from_jsonl  # noqa: PLC0415

    text = read_text(path, limit, "--history")
    return history_from_jsonl(text, character, "<stdin>" if path == "-" else path)


def _templates(folder: str | None) -> str | None:
    if folder is not None and not Path(folder).is_dir():
        reason = "not a directory" if Path(folder).exists() else "no such directory"
        raise InputError(f"cannot read templates folder {folder}: {reason}")
    return folder
