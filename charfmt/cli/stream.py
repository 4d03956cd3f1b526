"""``charfmt stream``: a reply read as it arrives (standard input, or ``--replay``ed in chunks), printed as
JSON Lines of events, sentences for speech (``--sentences``) or stage cues (``--stage``)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from charfmt._terminal import visible
from charfmt.cli._command import Subcommand
from charfmt.cli._io import (
    EXIT_INVALID,
    EXIT_OK,
    InputError,
    diag_line,
    dump_json,
    load_character,
    read,
    reason,
    stdin_bytes,
    usage_error,
)
from charfmt.cli._options import add_character, add_size, whole
from charfmt.cli._reply import emit_diagnostics, language
from charfmt.diagnostics import ParseError
from charfmt.events import DiagnosticEvent, Event

if TYPE_CHECKING:
    from charfmt.stage import StageReader


MAX_DELAY_MS: Final = 60_000.0
"""The longest pause ``stream --delay-ms`` accepts between replayed chunks."""


def _milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds, not {text[:40]!r}") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_DELAY_MS):
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_DELAY_MS:,.0f}, not {text[:40]}")
    return value


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt stream``."""
    sp.add_argument("--replay", metavar="FILE", help="simulate a model stream from a saved reply")
    sp.add_argument("--chunk", type=whole(1), default=4, metavar="N", help="characters per replayed chunk (default 4)")
    sp.add_argument(
        "--delay-ms", type=_milliseconds, default=0.0, metavar="D", help="pause between replayed chunks (0 to 60,000)"
    )
    sp.add_argument("--strict", action="store_true", help="fail on invalid input instead of repairing it")
    sp.add_argument("--sentences", action="store_true", help="also print complete sentences for speech")
    sp.add_argument("--stage", action="store_true", help="print stage cues (expression, motion, speak) instead"
                    " of events, mapped by --character's [stage]")  # fmt: skip
    sp.add_argument(
        "--max-length", type=whole(1), metavar="N", help="for speech: a sentence longer than N also ends at 、 or ,"
    )
    sp.add_argument("--scene", metavar="FILE", help="a scene (TOML): its cast's tags; --stage maps each speaker")
    add_character(sp)
    add_size(sp, "stream or --replay file or --character file")


def _replay(data: bytes, chunk: int, delay_ms: float) -> Iterator[bytes | str]:
    """A saved reply in chunks of ``chunk`` characters (bytes, if it is not UTF-8)."""
    text: str | bytes
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data  # the stream parser reports the bad bytes, as it does on standard input
    for i in range(0, len(text), chunk):
        if i and delay_ms:
            time.sleep(delay_ms / 1000)
        yield text[i : i + chunk]


def _chunks(args: argparse.Namespace) -> Iterator[bytes | str]:
    """Standard input as it arrives, or a saved reply replayed in chunks."""
    if args.replay is not None:
        inp = read(args.replay, args.max_size)
        if inp.over:
            raise InputError(f"cannot replay {inp.too_large(args.max_size)}")
        yield from _replay(inp.data, args.chunk, args.delay_ms)
        return
    stdin = stdin_bytes()
    read_some = getattr(stdin, "read1", stdin.read)
    while True:
        try:
            chunk = read_some(65536)
        except (OSError, ValueError) as e:
            raise InputError(f"cannot read standard input: {reason(e)}") from None
        if not chunk:
            return
        yield chunk


def run(args: argparse.Namespace) -> int:
    """Read the stream and print what it says; 1 when it has errors."""
    from charfmt.speech import SentenceSplitter  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.stream import StreamParser  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if args.scene is not None and args.character is not None:
        usage_error(args, "argument --scene: not allowed with argument --character")
    if args.sentences and args.stage:  # the stage's speak cues are the sentences
        usage_error(args, "argument --sentences: not allowed with argument --stage (its speak cues are the sentences)")
    if args.max_length is not None and not (args.sentences or args.stage):
        usage_error(args, "argument --max-length: splits sentences; it needs --sentences or --stage")
    lang = language(args, as_scene=True)
    scene = lang.scene
    if scene is not None and not args.strict:  # read as Scene.parse reads it: the cast's words, told its prompt
        parser = StreamParser(lenient=True, max_size=args.max_size, vocabulary=scene.reading_vocabulary,
                              tags=scene.tags, prompt=scene.own_prompt)  # fmt: skip
    else:
        parser = StreamParser(lenient=not args.strict, max_size=args.max_size, vocabulary=lang.vocabulary,
                              tags=lang.tags)  # fmt: skip
    splitter = SentenceSplitter(tags=lang.tags, max_length=args.max_length) if args.sentences else None
    stage = (
        (scene.stage(max_length=args.max_length) if scene is not None else _stage_reader(args)) if args.stage else None
    )
    failed = False
    name = "<stdin>" if args.replay in (None, "-") else args.replay

    def emit(events: list[Event]) -> None:
        nonlocal failed
        out = sys.stdout
        for event in events:
            if event.kind == "diagnostic" and event.diagnostic.severity == "error":
                failed = True  # exit 1: say why where errors go (stdout may be a pipe nobody reads)
                print(visible(diag_line(name, event.diagnostic)), file=sys.stderr, flush=True)
            if stage is None or event.kind == "diagnostic":  # the cues say nothing of it: a diagnostic line
                print(dump_json(event.to_dict(), out), file=out, flush=True)
            if stage is not None:
                for cue in stage.feed(event):
                    print(dump_json(cue.to_dict(), out), file=out, flush=True)
            if splitter is not None:
                for sentence in splitter.feed(event):
                    print(dump_json({"kind": "sentence", **sentence.to_dict()}, out), file=out, flush=True)

    seen: list[str | bytes] = []
    try:
        for chunk in _chunks(args):
            if scene is not None:
                seen.append(chunk)
            emit(parser.feed(chunk))
        emit(parser.close())
        if scene is not None:  # speakers and their emotions, as Scene.parse checks them (stream == batch)
            raw = b"".join(c if isinstance(c, bytes) else c.encode("utf-8") for c in seen)
            text = raw.decode("utf-8", errors="replace")
            problems = scene.check(parser.reply, text, lenient=not args.strict)
            emit([DiagnosticEvent(d.chat, d) for d in problems])
        for cue in stage.close() if stage is not None else ():
            print(dump_json(cue.to_dict(), sys.stdout), file=sys.stdout, flush=True)
    except ParseError as e:
        emit_diagnostics(name, e.source, e.diagnostics, "text", sys.stderr)
        return EXIT_INVALID
    return EXIT_INVALID if failed else EXIT_OK


def _stage_reader(args: argparse.Namespace) -> StageReader:
    """The stage reader of ``stream --stage``: the ``--character``'s stage map, or none."""
    from charfmt.stage import StageReader  # noqa: PLC0415 (import cost: every CLI command loads this module)

    path = getattr(args, "character", None)
    user_name = getattr(args, "user_name", None)
    character = load_character(path, args.max_size, user_name) if path is not None else None
    return StageReader(character, max_length=args.max_length)


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="read a reply as it arrives; print events as JSON Lines",
    ok="the stream was read (repairs are events)",
    invalid="the stream has errors (with --strict) or no reply",
)
