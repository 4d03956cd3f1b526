"""``charfmt convert``: a conversation from one format to another (jsonl, pam, uacs, groupchat, ailoy).

Exit 0 when converted, 1 when the input is not a document of ``--from`` (a positioned
diagnostic with a caret on standard error), 2 for a file that cannot be read or written.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

FORMATS: Final = ("jsonl", "pam", "uacs", "groupchat", "ailoy")


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The command's options."""
    sp.add_argument("--from", dest="source_format", choices=FORMATS, required=True, help="format of IN")
    sp.add_argument("--to", dest="target_format", choices=FORMATS, required=True, help="format of OUT")
    sp.add_argument("--character", metavar="FILE", help="character TOML (needed to read jsonl; names the speakers)")
    sp.add_argument("input", metavar="IN", help="input file, or - for standard input")
    sp.add_argument("output", metavar="OUT", help="output file, or - for standard output")


def run(args: argparse.Namespace) -> int:
    """Convert ``IN`` to ``OUT``; the exit code."""
    from charfmt import cli  # noqa: PLC0415 (the shared readers; cli imports this module lazily)
    from charfmt.interop import InteropError  # noqa: PLC0415

    character = cli._load_character(args.character, args.max_size) if args.character else None
    if args.source_format == "jsonl" and character is None:
        cli._usage_error(args, "argument --character: reading jsonl needs the character (its vocabulary)")
    name = "<stdin>" if args.input == "-" else args.input
    text = cli._read_text(args.input, args.max_size, "input")
    try:
        history = _read(args.source_format, text, character, name)
    except InteropError as e:
        print(e.report(name), file=sys.stderr)
        return cli.EXIT_INVALID
    out = _write(args.target_format, history, character)
    if args.output == "-":
        sys.stdout.write(out)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(out)
        except OSError as e:
            raise cli._InputError(f"cannot write {args.output}: {e.strerror or e}") from None
    return cli.EXIT_OK


def _read(fmt: str, text: str, character: Character | None, name: str) -> list[Exchange]:
    if fmt == "jsonl":
        from charfmt.character import history_from_jsonl  # noqa: PLC0415

        assert character is not None
        return history_from_jsonl(text, character, name)
    from charfmt.interop import read  # noqa: PLC0415

    return read(fmt, text, character)


def _write(fmt: str, history: list[Exchange], character: Character | None) -> str:
    if fmt == "jsonl":
        from charfmt.writer import dumps  # noqa: PLC0415

        rows = []
        for ex in history:
            row: dict[str, Any] = {"user": ex.user.model_dump(mode="json"), "reply": json.loads(dumps(ex.reply))}
            if ex.foreign is not None:
                row["foreign"] = ex.foreign
            rows.append(json.dumps(row, ensure_ascii=False) + "\n")
        return "".join(rows)
    from charfmt.interop import dumps as dump_document  # noqa: PLC0415

    return dump_document(fmt, history, character)


__all__ = ["FORMATS", "add_arguments", "run"]
