"""The ``charfmt`` command: parse, check, fix, stream, schema, render, grammar, fuzz, demo.

Exit codes: 0 success / valid, 1 invalid input, 2 usage error or unreadable file.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import TextIO

from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.events import Event
from charfmt.models import Reply, Vocabulary
from charfmt.parser import DEFAULT_MAX_SIZE, lenient_text, parse
from charfmt.schema import PROVIDERS, json_schema
from charfmt.tags import TAG_BY_NAME
from charfmt.writer import dumps

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class _InputError(Exception):
    """A file could not be read at all (missing, a directory, no permission)."""


def _read(path: str, max_size: int) -> bytes:
    """Read ``path`` (``-`` for standard input), at most ``max_size + 1`` bytes."""
    try:
        if path == "-":
            return sys.stdin.buffer.read(max_size + 1)
        with open(path, "rb") as f:
            return f.read(max_size + 1)
    except OSError as e:
        raise _InputError(f"cannot read {path}: {e.strerror or e}") from None


def _pretty(reply: Reply, out: TextIO) -> None:
    if not reply.chats:
        print("(no chats: the character stays silent)", file=out)
    for chat in reply.chats:
        print(f"#{chat.order} {chat.type}", file=out)
        for seg in chat.segments:
            hidden = "" if seg.tag not in TAG_BY_NAME or TAG_BY_NAME[seg.tag].shown else " (hidden)"
            lines = seg.text.split("\n")
            print(f"  {seg.tag:<8}{lines[0]}{hidden}", file=out)
            for line in lines[1:]:
                print(f"  {'':<8}{line}", file=out)
    for d in reply.diagnostics:
        print(f"{d.severity}: {d}", file=out)


def _diag_line(name: str, d: Diagnostic) -> str:
    level = "" if d.severity == "error" else f"{d.severity}: "
    return f"{name}:{d.line}:{d.column}: {d.code} {level}{d.message}"


def _emit_diagnostics(name: str, source: str, diagnostics: Sequence[Diagnostic], fmt: str, out: TextIO) -> None:
    for d in diagnostics:
        if fmt == "jsonl":
            print(json.dumps({"file": name, **d.model_dump()}, ensure_ascii=False), file=out)
        else:
            print(_diag_line(name, d), file=out)
            print(d.snippet(source), file=out)


def _cmd_parse(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    data = _read(args.file, args.max_size)
    try:
        reply = parse(data, lenient=args.lenient, max_size=args.max_size)
    except ParseError as e:
        _emit_diagnostics(name, e.source, e.diagnostics, "jsonl" if args.format == "jsonl" else "text", sys.stderr)
        return EXIT_INVALID
    if args.format == "pretty":
        _pretty(reply, sys.stdout)
    elif args.format == "json":
        print(reply.model_dump_json(indent=2, exclude_none=True), file=sys.stdout)
    else:
        for event in reply.events():
            print(json.dumps(event.to_dict(), ensure_ascii=False), file=sys.stdout)
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in args.files:
        name = "<stdin>" if path == "-" else path
        try:
            data = _read(path, args.max_size)
        except _InputError as e:
            print(f"charfmt: error: {e}", file=sys.stderr)
            status = EXIT_USAGE
            continue
        try:
            reply = parse(data, lenient=args.lenient, max_size=args.max_size)
        except ParseError as e:
            _emit_diagnostics(name, e.source, e.diagnostics, args.format, sys.stdout)
            status = max(status, EXIT_INVALID)
            continue
        _emit_diagnostics(name, lenient_text(data), reply.diagnostics, args.format, sys.stdout)
        if any(d.severity == "error" for d in reply.diagnostics):
            status = max(status, EXIT_INVALID)
        elif args.format == "text" and not args.quiet:
            repaired = " after repairs" if reply.dialect is not None else ""
            print(f"{name}: ok{repaired} ({len(reply.chats)} chats)", file=sys.stdout)
    return status


def _cmd_fix(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    data = _read(args.file, args.max_size)
    reply = parse(data, lenient=True, max_size=args.max_size)
    source = lenient_text(data)
    _emit_diagnostics(name, source, reply.diagnostics, "text", sys.stderr)
    fixed = dumps(reply, indent=args.indent)
    if args.diff:
        diff = difflib.unified_diff(
            source.splitlines(keepends=True), (fixed + "\n").splitlines(keepends=True), name, f"{name} (fixed)"
        )
        sys.stdout.writelines(diff)
    else:
        print(fixed)
    return EXIT_INVALID if any(d.severity == "error" for d in reply.diagnostics) else EXIT_OK


def _stream_chunks(args: argparse.Namespace) -> Iterator[bytes | str]:
    """Standard input as it arrives, or a saved reply replayed in chunks."""
    if args.replay:
        try:
            with open(args.replay, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise _InputError(f"cannot read {args.replay}: {e}") from None
        for i in range(0, len(text), args.chunk):
            if i and args.delay_ms:
                time.sleep(args.delay_ms / 1000)
            yield text[i : i + args.chunk]
        return
    stdin = sys.stdin.buffer
    read = getattr(stdin, "read1", stdin.read)
    while chunk := read(4096):
        yield chunk


def _cmd_stream(args: argparse.Namespace) -> int:
    from charfmt.speech import SentenceSplitter  # noqa: PLC0415
    from charfmt.stream import StreamParser  # noqa: PLC0415

    parser = StreamParser(lenient=not args.strict, max_size=args.max_size)
    splitter = SentenceSplitter() if args.sentences else None

    def emit(events: list[Event]) -> None:
        for event in events:
            print(json.dumps(event.to_dict(), ensure_ascii=False), flush=True)
            if splitter is not None:
                for sentence in splitter.feed(event):
                    print(json.dumps({"kind": "sentence", **sentence.to_dict()}, ensure_ascii=False), flush=True)

    try:
        for chunk in _stream_chunks(args):
            emit(parser.feed(chunk))
        emit(parser.close())
    except ParseError as e:
        _emit_diagnostics("<stream>", e.source, e.diagnostics, "text", sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from charfmt.fuzz import fuzz_cases  # noqa: PLC0415

    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115
    try:
        for i, case in enumerate(fuzz_cases(args.seed, args.count)):
            print(json.dumps({"seed": args.seed, "index": i, **case.to_dict()}, ensure_ascii=False), file=out)
    finally:
        if out is not sys.stdout:
            out.close()
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(args.provider), ensure_ascii=False, indent=2))
    return EXIT_OK


def _cmd_render(args: argparse.Namespace) -> int:
    from charfmt.character import Character, load_history  # noqa: PLC0415 (jinja only when rendering)
    from charfmt.render import render_messages, render_text  # noqa: PLC0415

    try:
        character = Character.load(args.character)
        history = load_history(args.history, character) if args.history else []
        turn = character.shorthand(args.say)
        for d in turn.diagnostics:
            print(f"charfmt: warning: --say:{d.column}: {d.code} {d.message}", file=sys.stderr)
        options = {"templates": args.templates, "budget": args.budget}
        if args.format == "text":
            print(render_text(character, history, turn, **options))
        else:
            request = render_messages(
                character, history, turn, provider=args.provider, structured=args.structured, **options
            )
            print(json.dumps(request, ensure_ascii=False, indent=2))
    except CharfmtError as e:
        print(f"charfmt: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def _cmd_grammar(args: argparse.Namespace) -> int:
    from charfmt.character import Character  # noqa: PLC0415
    from charfmt.export import grammar  # noqa: PLC0415

    try:
        vocabulary = None
        if args.character:
            vocabulary = Character.load(args.character).vocabulary
        elif args.emotions:
            vocabulary = Vocabulary.of(*(k.strip() for k in args.emotions.split(",") if k.strip()))
        sys.stdout.write(grammar(args.target, vocabulary=vocabulary))
        if args.target == "regex":
            sys.stdout.write("\n")
    except (CharfmtError, ValueError) as e:
        print(f"charfmt: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def _cmd_demo(_args: argparse.Namespace) -> int:
    data = resources.files("charfmt").joinpath("data")
    good = data.joinpath("demo_reply.json").read_text(encoding="utf-8")
    broken = data.joinpath("demo_broken.json").read_text(encoding="utf-8")
    print("== A reply from the model ==")
    print(good.rstrip())
    print("\n== charfmt.parse(reply) ==")
    _pretty(parse(good), sys.stdout)
    print("\n== A broken reply, parsed strictly ==")
    print(broken.rstrip())
    print()
    try:
        parse(broken)
    except ParseError as e:
        print(f"ParseError: {e}\n")
        print(e.report("demo_broken.json"))
    print("\n== The same reply, parsed leniently: what could be repaired, and how ==")
    _pretty(parse(broken, lenient=True), sys.stdout)
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="charfmt", description="Parse and check game-character chat replies.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_size(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--max-size",
            type=int,
            default=DEFAULT_MAX_SIZE,
            metavar="BYTES",
            help=f"largest input accepted (default {DEFAULT_MAX_SIZE:,})",
        )

    sp = sub.add_parser("parse", help="parse a reply and print it")
    sp.add_argument("file", nargs="?", default="-", help="reply file, or - for standard input")
    sp.add_argument("--lenient", action="store_true", help="report problems instead of failing")
    sp.add_argument("--format", choices=("pretty", "json", "jsonl"), default="pretty")
    add_size(sp)
    sp.set_defaults(run=_cmd_parse)

    sp = sub.add_parser("check", help="check replies strictly; exit 1 if any is invalid")
    sp.add_argument("files", nargs="+", metavar="FILE")
    sp.add_argument("--format", choices=("text", "jsonl"), default="text")
    sp.add_argument("-q", "--quiet", action="store_true", help="print nothing for valid files")
    sp.add_argument("--lenient", action="store_true", help="repair what can be repaired; report repairs as warnings")
    add_size(sp)
    sp.set_defaults(run=_cmd_check)

    sp = sub.add_parser("stream", help="read a reply as it arrives; print events as JSON Lines")
    sp.add_argument("--replay", metavar="FILE", help="simulate a model stream from a saved reply")
    sp.add_argument("--chunk", type=int, default=4, metavar="N", help="characters per replayed chunk (default 4)")
    sp.add_argument("--delay-ms", type=float, default=0, metavar="D", help="pause between replayed chunks")
    sp.add_argument("--strict", action="store_true", help="fail on invalid input instead of repairing it")
    sp.add_argument("--sentences", action="store_true", help="also print complete sentences for speech")
    add_size(sp)
    sp.set_defaults(run=_cmd_stream)

    sp = sub.add_parser("fix", help="repair a reply leniently; print it canonically, the repair log on stderr")
    sp.add_argument("file", nargs="?", default="-", help="reply file, or - for standard input")
    sp.add_argument("--diff", action="store_true", help="print a unified diff from the input to the fixed reply")
    sp.add_argument("--indent", type=int, default=None, metavar="N", help="pretty-print the JSON")
    add_size(sp)
    sp.set_defaults(run=_cmd_fix)

    sp = sub.add_parser("fuzz", help="write damaged replies (with the clean original and the mutations), by seed")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--count", type=int, default=100)
    sp.add_argument("--out", metavar="FILE", help="JSON Lines file (default: standard output)")
    sp.set_defaults(run=_cmd_fuzz)

    sp = sub.add_parser("schema", help="print the reply envelope as JSON Schema")
    sp.add_argument("--provider", choices=PROVIDERS, default=None)
    sp.set_defaults(run=_cmd_schema)

    sp = sub.add_parser("render", help="render a provider request for a character and a user turn")
    sp.add_argument("--character", required=True, metavar="FILE", help="character TOML file")
    sp.add_argument("--say", required=True, metavar="TEXT", help='what the user says, in shorthand: "[angry] なんで？"')
    sp.add_argument("--history", metavar="FILE", help='past exchanges, JSON Lines of {"user": ..., "reply": ...}')
    sp.add_argument("--provider", choices=PROVIDERS, default="openai")
    sp.add_argument(
        "--format", choices=("json", "text"), default="json", help="json: provider request; text: one prompt"
    )
    sp.add_argument("--templates", metavar="DIR", help="a folder of your own templates, looked up first")
    sp.add_argument("--budget", type=int, metavar="TOKENS", help="drop the oldest exchanges to fit")
    sp.add_argument("--structured", action="store_true", help="add the provider's structured-output schema")
    sp.set_defaults(run=_cmd_render)

    sp = sub.add_parser("grammar", help="print the reply format as a grammar for constrained decoding")
    sp.add_argument(
        "--target",
        choices=("lark", "gbnf", "regex"),
        required=True,
        help="lark: llguidance / vLLM / SGLang / outlines; gbnf: llama.cpp; regex: one C body",
    )
    group = sp.add_mutually_exclusive_group()
    group.add_argument("--emotions", metavar="KEYS", help="restrict <emo> to these comma-separated keys")
    group.add_argument("--character", metavar="FILE", help="restrict <emo> to this character's emotions")
    sp.set_defaults(run=_cmd_grammar)

    sp = sub.add_parser("demo", help="parse a bundled reply and show a strict error")
    sp.set_defaults(run=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    try:
        return int(args.run(args))
    except _InputError as e:
        print(f"charfmt: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK
