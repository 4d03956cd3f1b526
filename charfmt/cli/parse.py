"""``charfmt parse``: a reply read strictly (or ``--lenient``ly) and printed for a person, as JSON or as events."""

from __future__ import annotations

import argparse
import sys
from typing import Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_INVALID, EXIT_OK, dump_json, read
from charfmt.cli._options import add_character, add_size
from charfmt.cli._reply import Language, emit_diagnostics, failed, language, parse_input, pretty
from charfmt.diagnostics import ParseError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt parse``."""
    sp.add_argument("file", nargs="?", default="-", help="reply file, or - for standard input")
    sp.add_argument("--lenient", action="store_true", help="report problems instead of failing")
    sp.add_argument(
        "--format",
        choices=("pretty", "json", "jsonl"),
        default="pretty",
        help="pretty: chats for a person (default); json: the Reply model; jsonl: one event per line",
    )
    add_character(sp, scene=True)
    add_size(sp, "input, --character or --scene file")


def _told(args: argparse.Namespace, lang: Language) -> str | None:
    """With ``--lenient --character``: the character's system prompt, which the reader is told (it learns the
    character's name there: a speaker label of that name is dropped, ``CF633``, and the prompt echoed, ``CF631``)."""
    if not args.lenient or lang.character is None:
        return None
    from charfmt.prompt.render import render_system  # noqa: PLC0415 (jinja2: only a lenient read told the character)

    return render_system(lang.character)


def run(args: argparse.Namespace) -> int:
    """Parse the reply and print it; 1 when it has errors."""
    lang = language(args, as_scene=True)
    inp = read(args.file, args.max_size)
    try:
        reply = parse_input(inp, lenient=args.lenient, max_size=args.max_size, language=lang, prompt=_told(args, lang))
    except ParseError as e:
        emit_diagnostics(inp.name, e.source, e.diagnostics, "jsonl" if args.format == "jsonl" else "text", sys.stderr)
        return EXIT_INVALID
    out = sys.stdout
    if args.format == "pretty":
        pretty(reply, inp.name, out, lang.tags)
    elif args.format == "json":
        print(dump_json(reply.model_dump(mode="json", exclude_none=True), out, indent=2), file=out)
    else:
        for event in reply.events(lang.tags):
            print(dump_json(event.to_dict(), out), file=out)
    return EXIT_INVALID if failed(reply.diagnostics) else EXIT_OK


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="parse a reply and print it",
    ok="the reply is valid (with --lenient: read, warnings only)",
    invalid="the reply has errors, or is empty",
)
