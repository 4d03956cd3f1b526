"""``charfmt convert``: a conversation from one format to another (jsonl, pam, uacs, groupchat, ailoy).

Exit 0 when converted, 1 when the input is not a document of ``--from`` (a positioned
diagnostic with a caret on standard error) or the output would be too big to read back,
2 for a file that cannot be read or written. What it writes reads back with the same
``--max-size`` (default 16 MiB): a document over it is refused, not written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_INVALID, EXIT_OK, InputError, error, load_character, read_text, usage_error
from charfmt.cli._options import add_size
from charfmt.diagnostics import Diagnostic

if TYPE_CHECKING:
    from charfmt.prompt.character import Character, Exchange


class _Formats:
    """``jsonl`` and every interop format's name, read from the formats' table (``charfmt.interop._formats.DECLARED``)
    when first asked (``--from``'s and ``--to``'s choices: asked only when the option is read or its help
    shown), so the command line starts without importing the interop package."""

    def names(self) -> tuple[str, ...]:
        """The names, ``jsonl`` first, then the table's in its order."""
        from charfmt.interop._formats import DECLARED  # noqa: PLC0415 (import cost: every CLI command loads this module)

        return ("jsonl", *DECLARED)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __len__(self) -> int:
        return len(self.names())


CONVERSATION_FORMATS: Final = _Formats()


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The command's options."""
    for flag, dest, what in (("--from", "source_format", "IN"), ("--to", "target_format", "OUT")):
        sp.add_argument(flag, dest=dest, choices=CONVERSATION_FORMATS, required=True, metavar="FORMAT",
                        help=f"format of {what}: %(choices)s")  # fmt: skip  # (a metavar: choices read when asked)
    sp.add_argument("--character", metavar="FILE", help="character TOML (needed to read jsonl; names the speakers)")
    sp.add_argument(
        "--indent",
        metavar="N",
        type=int,
        default=None,
        help="indent a JSON document by N spaces (default: 2 up to 1 MiB, compact above; 0 = compact)",
    )
    sp.add_argument("input", metavar="IN", help="input file, or - for standard input")
    sp.add_argument("output", metavar="OUT", help="output file, or - for standard output")
    add_size(sp, "input or --character file")
    parse_known = sp.parse_known_args

    def own_errors(args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        # An unknown option is this command's usage error (see 'charfmt convert --help'),
        # not the top-level parser's.
        parsed, extras = parse_known(args, namespace)
        if extras:
            sp.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    sp.parse_known_args = own_errors  # type: ignore[method-assign,assignment]


def run(args: argparse.Namespace) -> int:
    """Convert ``IN`` to ``OUT``; the exit code."""
    from charfmt.interop import InteropError  # noqa: PLC0415 (import cost: every CLI command loads this module)

    character = load_character(args.character, args.max_size) if args.character else None
    if args.source_format == "jsonl" and character is None:
        usage_error(args, "argument --character: reading jsonl needs the character (its vocabulary)")
    if args.indent is not None and args.indent < 0:
        usage_error(args, "argument --indent: a number of spaces, 0 or more")
    if _same_file(args.input, args.output):
        usage_error(args, f"OUT is IN ({args.output}): converting would replace the conversation it reads")
    name = "<stdin>" if args.input == "-" else args.input
    text = read_text(args.input, args.max_size, "input")
    try:
        history = _read(args.source_format, text, character, name)
        out = _write(args.target_format, history, character, args.indent, _names(args.source_format, text, character))
    except InteropError as e:
        print(e.report(name), file=sys.stderr)
        if (hint := _jsonl_hint(args.source_format, text)) is not None:
            print(hint, file=sys.stderr)
        return EXIT_INVALID
    size = len(out.encode("utf-8", "surrogatepass"))
    if size > args.max_size:
        error(
            f"the {args.target_format} output would be {size:,} bytes, more than charfmt reads back"
            f" ({args.max_size:,}, --max-size); nothing written (a larger --max-size writes it)"
        )
        return EXIT_INVALID
    if args.output == "-":
        sys.stdout.write(out)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(out)
        except OSError as e:
            raise InputError(f"cannot write {args.output}: {e.strerror or e}") from None
    return EXIT_OK


def _same_file(source: str, target: str) -> bool:
    """Whether OUT names the very file IN does (a link or another spelling of its path included)."""
    if "-" in (source, target):
        return False
    try:
        return os.path.samefile(source, target)
    except OSError:
        return False  # OUT does not exist yet (or IN cannot be read: read_text says so)


def _jsonl_hint(fmt: str, text: str) -> str | None:
    """A hint when a document format failed on what reads as JSON Lines (one object per line)."""
    if fmt == "jsonl":
        return None
    lines = [line for line in text.removeprefix("\ufeff").splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    try:
        if all(isinstance(json.loads(line), dict) for line in lines):
            return f"hint: IN is JSON Lines (one object per line), not a {fmt} document: --from jsonl reads it"
    except ValueError:
        return None
    return None


def _read(fmt: str, text: str, character: Character | None, name: str) -> list[Exchange]:
    if fmt == "jsonl":
        from charfmt.prompt.character import history_from_jsonl  # noqa: PLC0415 (import cost: every CLI command loads this module)

        assert character is not None
        _not_jsonl(text)
        return history_from_jsonl(text, character, name)
    from charfmt.interop import read  # noqa: PLC0415 (import cost: every CLI command loads this module)

    return read(fmt, text, character)


def _not_jsonl(text: str) -> None:
    """CF910 if ``text`` is one JSON document over several lines that is no exchange (not a history)."""
    from charfmt.interop import InteropError  # noqa: PLC0415 (import cost: every CLI command loads this module)

    body = text.removeprefix("\ufeff")
    first = body.lstrip()
    if "\n" not in first.strip() or first[:1] not in "{[":
        return
    line = first.split("\n", 1)[0]
    try:
        json.loads(line)
        return  # the first line is a value of its own: JSON Lines
    except ValueError:
        pass
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return
    if isinstance(value, dict) and {"user", "reply"} <= value.keys():
        return  # one exchange, pretty-printed: a history (history_from_jsonl reads it)
    at = len(body) - len(first)
    kind = "an array" if isinstance(value, list) else "an object"
    if isinstance(value, dict) and "chats" in value:
        hint = " (it looks like one model reply: convert reads histories; `charfmt parse` reads a reply)"
    elif isinstance(value, dict):
        hint = " (it looks like a pam, uacs or groupchat document: --from pam|uacs|groupchat)"
    else:
        hint = " (an Ailoy message array? --from ailoy)"
    message = (
        f"the input is one JSON document ({kind} over several lines), not JSON Lines"
        f" (one exchange object per line){hint}"
    )
    raise InteropError([Diagnostic.at(body, "CF910", message, at, at + 1)], body)


def _names(fmt: str, text: str, character: Character | None) -> tuple[str, str] | None:
    """The speakers' names IN gives (PAM's participants...), where no --character names them."""
    if character is not None or fmt == "jsonl":
        return None
    from charfmt.interop import speaker_names  # noqa: PLC0415 (import cost: every CLI command loads this module)

    return speaker_names(fmt, text)


def _write(
    fmt: str, history: list[Exchange], character: Character | None, indent: int | None, names: tuple[str, str] | None
) -> str:
    if fmt == "jsonl":
        from charfmt.prompt.character import history_line  # noqa: PLC0415 (import cost: every CLI command loads this module)

        return "".join(history_line(ex) for ex in history)
    from charfmt.interop import dumps as dump_document  # noqa: PLC0415 (import cost: every CLI command loads this module)

    return dump_document(fmt, history, character, indent="auto" if indent is None else indent or None, names=names)


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="convert a conversation: jsonl, pam, uacs, groupchat, ailoy",
)
