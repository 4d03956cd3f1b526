"""The ``charfmt`` command: parse, check, fix, stream, schema, render, grammar, fuzz, demo.

Exit codes:

- 0: success; the input is valid (or, with ``--lenient``, repaired with warnings only);
- 1: invalid input: a file was read but charfmt rejects what it holds (a reply with
  errors, an empty or binary reply, a character file that is not valid TOML or UTF-8);
- 2: usage error (an unknown option, a bad option value) or a file that cannot be used
  at all: missing, a directory, closed standard input, an output file that cannot be
  created, or a ``--replay`` / ``--character`` / ``--history`` file larger than
  ``--max-size``;
- 130: interrupted (Ctrl-C).

Every error is one line on standard error, ``charfmt: error: ...`` (diagnostics of a
reply keep their ``file:line:col: CODE message`` form and caret snippet); never a traceback.
Output that the terminal's encoding cannot hold is escaped (``\\u3042``), not a crash.
"""

from __future__ import annotations

import argparse
import codecs
import difflib
import errno
import json
import math
import os
import re
import secrets
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, NoReturn, TextIO, cast

from charfmt._terminal import VisibleWriter, json_safe, visible
from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.events import DiagnosticEvent, Event
from charfmt.models import Reply, Vocabulary
from charfmt.parser import DEFAULT_MAX_SIZE, lenient_text, parse
from charfmt.schema import PROVIDERS, json_schema
from charfmt.tags import DEFAULT_TAGS, TagTable
from charfmt.writer import dumps

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange
    from charfmt.scene import Scene
    from charfmt.stage import StageReader

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED: Final = 130
"""128 + SIGINT, what shells report for a command stopped with Ctrl-C."""

MAX_DELAY_MS: Final = 60_000.0
"""The longest pause ``stream --delay-ms`` accepts between replayed chunks."""

_PIECE: Final = 1 << 20
"""Bytes read at a time."""


class _InputError(Exception):
    """A file could not be used at all (missing, a directory, closed, too large): exit 2."""


class _InvalidError(Exception):
    """A file was read but what it holds is rejected (not UTF-8, for instance): exit 1."""


def _first_line(e: BaseException) -> str:
    """One line for an error: a pydantic ``ValidationError``'s first message, else the first line."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        from charfmt.models import error_message  # noqa: PLC0415 (pydantic errors come with the models loaded)

        return error_message(errors()[0])
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


# -- reading ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Input:
    """A file read with a size bound."""

    name: str
    """How messages name it: the path, or ``<stdin>``."""
    data: bytes
    """The content; empty when the file is over the bound (``over``)."""
    over: bool = False
    """Larger than the bound: ``data`` was not (completely) read."""
    size: int | None = None
    """The real size in bytes when the file system knows it (a regular file)."""

    def size_words(self, limit: int) -> str:
        """The size of an input over ``limit``: the real one, or "more than" for a pipe."""
        return f"{self.size:,} bytes" if self.size is not None else f"more than {limit:,} bytes"

    def too_large(self, limit: int) -> str:
        """Why an input over ``limit`` is refused, naming it."""
        if self.size is None:
            return f"{self.name}: more than {limit:,} bytes (--max-size)"
        return f"{self.name}: {self.size:,} bytes; the maximum is {limit:,} (--max-size)"


def _stdin() -> IO[bytes]:
    """Standard input as bytes; a closed one (``<&-``) is an unreadable file."""
    stdin: TextIO | None = sys.stdin
    if stdin is None:
        raise _InputError("cannot read standard input: it is closed")
    return stdin.buffer


def _read(path: str, limit: int) -> _Input:
    """Read ``path`` (``-`` for standard input), at most ``limit`` bytes.

    Missing files, directories, closed standard input and read errors raise
    ``_InputError``; a file over ``limit`` comes back with ``over`` set.
    """
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            return _read_from(name, _stdin(), limit)
        with open(path, "rb") as f:
            return _read_from(name, f, limit)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path, or a closed file object
        raise _InputError(f"cannot read {name}: {_reason(e)}") from None


def _read_from(name: str, f: IO[bytes], limit: int) -> _Input:
    size = None
    try:
        st = os.fstat(f.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's in-memory stream)
        pass
    else:
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:  # /proc files say 0: read them
            size = st.st_size
            if size > limit:
                return _Input(name, b"", over=True, size=size)
    # In pieces: read(limit + 1) allocates limit + 1 bytes at once (--max-size 10**15: MemoryError).
    pieces: list[bytes] = []
    total = 0
    while total <= limit and (piece := f.read(min(limit + 1 - total, _PIECE))):
        pieces.append(piece)
        total += len(piece)
    data = b"".join(pieces)
    if len(data) > limit:
        return _Input(name, b"", over=True, size=size if size is not None and size > limit else None)
    return _Input(name, data)


def _read_text(path: str, limit: int, what: str) -> str:
    """A UTF-8 text file for an option (``--character``, ``--history``), bounded by ``limit``."""
    inp = _read(path, limit)
    if inp.over:
        raise _InputError(f"cannot read {what} {inp.too_large(limit)}")
    try:
        return inp.data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _InvalidError(
            f"{inp.name}: not UTF-8 text: byte 0x{inp.data[e.start]:02X} at byte offset {e.start}"
        ) from None


@dataclass(frozen=True)
class _Language:
    """What a reply is read against: the emotion vocabulary and the tag table (``--character``)."""

    vocabulary: Vocabulary | None = None
    tags: TagTable = DEFAULT_TAGS


def _language(args: argparse.Namespace) -> _Language:
    """The ``--character`` file's vocabulary and tags (a ``--scene``'s tags), or the defaults without one."""
    path = getattr(args, "character", None)
    if path is None and getattr(args, "scene", None) is not None:
        return _Language(None, _load_scene(args.scene, args.max_size).tags)
    if path is None:
        return _Language()
    character = _load_character(path, args.max_size, getattr(args, "user_name", None))
    return _Language(character.vocabulary, character.tags)


def _parse(inp: _Input, *, lenient: bool, max_size: int, language: _Language = _Language()) -> Reply:
    """``parse`` of what was read; an input over ``--max-size`` is ``CF002`` with its real size."""
    if inp.over:
        message = f"input is {inp.size_words(max_size)} long; the maximum is {max_size:,} (--max-size)"
        d = Diagnostic.at("", "CF002", message, 0)
        if not lenient:
            raise ParseError([d], "")
        return Reply(diagnostics=[d])
    return parse(inp.data, lenient=lenient, max_size=max_size, vocabulary=language.vocabulary, tags=language.tags)


def _failed(diagnostics: Sequence[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)


# -- writing ---------------------------------------------------------------------


def _ascii_only(out: TextIO) -> bool:
    """Whether ``out`` cannot hold every character (``PYTHONIOENCODING=ascii``, a latin-1 terminal)."""
    try:
        return not codecs.lookup(getattr(out, "encoding", None) or "utf-8").name.startswith("utf")
    except LookupError:
        return True


_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]")


def _json_text(text: str, out: TextIO) -> str:
    """JSON text for ``out``: non-ASCII as ``\\uXXXX`` escapes when ``out`` cannot hold it.

    Right only where every non-ASCII character sits inside a JSON string, as in charfmt's own output.
    """
    if not _ascii_only(out):
        return json_safe(text)
    return _NON_ASCII.sub(lambda m: json.dumps(m.group())[1:-1], text)


def _json(value: Any, out: TextIO, *, indent: int | None = None) -> str:
    """``value`` as JSON that ``out`` can hold (lone surrogates escaped, ASCII where needed).

    Control and bidi characters are ``\\u`` escapes too (``charfmt._terminal.json_safe``): the same value.
    """
    return json_safe(json.dumps(value, ensure_ascii=_ascii_only(out), indent=indent))


def _escape_errors(e: UnicodeError) -> tuple[str | bytes, int]:
    """``surrogateescape`` where it applies (undecodable bytes of a file name), else ``backslashreplace``."""
    if isinstance(e, UnicodeEncodeError) and all(0xDC80 <= ord(c) <= 0xDCFF for c in e.object[e.start : e.end]):
        return codecs.lookup_error("surrogateescape")(e)
    return codecs.backslashreplace_errors(e)


codecs.register_error("charfmt.escape", _escape_errors)

_FORGIVING: Final = {"strict": "backslashreplace", "surrogateescape": "charfmt.escape"}
"""The error handler standard output and error get, by the one they had."""


@contextmanager
def _forgiving_output() -> Iterator[None]:
    """Write what the terminal cannot encode as escapes (``\\u3042``) instead of failing.

    A lone surrogate (a reply may hold ``"\\ud800"``) or Japanese text on an ASCII
    terminal (``PYTHONIOENCODING=ascii``) would otherwise raise ``UnicodeEncodeError``.
    """
    changed: list[tuple[Any, str]] = []
    for stream in (sys.stdout, sys.stderr):
        errors = getattr(stream, "errors", None)
        if errors in _FORGIVING and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors=_FORGIVING[errors])
            except (OSError, ValueError):
                continue
            changed.append((stream, errors))
    try:
        yield
    finally:
        for stream, errors in changed:
            with suppress(OSError, ValueError):
                stream.reconfigure(errors=errors)


def _discard_stdout() -> None:
    """Point standard output at ``os.devnull`` so that the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _error(message: str) -> None:
    if sys.stderr is not None:
        print(f"charfmt: error: {visible(message)}", file=sys.stderr)


def _pretty(reply: Reply, name: str, out: TextIO, tags: TagTable = DEFAULT_TAGS) -> None:
    """The readable view of ``reply``; its diagnostics as ``name:line:col: CODE ...``, as strict errors are.

    Control and bidi characters of the model's text are shown escaped (``charfmt._terminal``).
    """
    out = cast("TextIO", VisibleWriter(out))
    if not reply.chats:
        print("(no chats: the character stays silent)", file=out)
    for chat in reply.chats:
        print(f"#{chat.order} {chat.type}", file=out)
        for seg in chat.segments:
            spec = tags.get(seg.tag)
            hidden = "" if spec is None or spec.shown else " (hidden)"
            lines = seg.text.split("\n")
            print(f"  {seg.tag:<8}{lines[0]}{hidden}", file=out)
            for line in lines[1:]:
                print(f"  {'':<8}{line}", file=out)
    for d in reply.diagnostics:
        print(_diag_line(name, d), file=out)


def _diag_line(name: str, d: Diagnostic) -> str:
    level = "" if d.severity == "error" else f"{d.severity}: "
    return f"{name}:{d.line}:{d.column}: {d.code} {level}{d.message}"


def _emit_diagnostics(name: str, source: str, diagnostics: Sequence[Diagnostic], fmt: str, out: TextIO) -> None:
    out = cast("TextIO", VisibleWriter(out)) if fmt != "jsonl" else out
    for d in diagnostics:
        if fmt == "jsonl":
            print(_json({"file": name, **d.model_dump()}, out), file=out)
        else:
            print(_diag_line(name, d), file=out)
            if source:
                print(d.snippet(source), file=out)


# -- commands --------------------------------------------------------------------


def _cmd_parse(args: argparse.Namespace) -> int:
    language = _language(args)
    inp = _read(args.file, args.max_size)
    try:
        reply = _parse(inp, lenient=args.lenient, max_size=args.max_size, language=language)
    except ParseError as e:
        _emit_diagnostics(inp.name, e.source, e.diagnostics, "jsonl" if args.format == "jsonl" else "text", sys.stderr)
        return EXIT_INVALID
    out = sys.stdout
    if args.format == "pretty":
        _pretty(reply, inp.name, out, language.tags)
    elif args.format == "json":
        print(_json(reply.model_dump(mode="json", exclude_none=True), out, indent=2), file=out)
    else:
        for event in reply.events(language.tags):
            print(_json(event.to_dict(), out), file=out)
    return EXIT_INVALID if _failed(reply.diagnostics) else EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    language = _language(args)
    status = EXIT_OK
    for path in args.files:
        try:
            inp = _read(path, args.max_size)
        except _InputError as e:
            _error(str(e))
            status = EXIT_USAGE
            continue
        try:
            reply = _parse(inp, lenient=args.lenient, max_size=args.max_size, language=language)
        except ParseError as e:
            _emit_diagnostics(inp.name, e.source, e.diagnostics, args.format, sys.stdout)
            status = max(status, EXIT_INVALID)
            continue
        _emit_diagnostics(inp.name, lenient_text(inp.data), reply.diagnostics, args.format, sys.stdout)
        if _failed(reply.diagnostics):
            status = max(status, EXIT_INVALID)
        elif args.format == "text" and not args.quiet:
            repaired = " after repairs" if reply.dialect is not None else ""
            count = len(reply.chats)
            print(f"{inp.name}: ok{repaired} ({count} chat{'' if count == 1 else 's'})", file=sys.stdout)
    return status


def _cmd_fix(args: argparse.Namespace) -> int:
    language = _language(args)
    inp = _read(args.file, args.max_size)
    reply = _parse(inp, lenient=True, max_size=args.max_size, language=language)
    source = lenient_text(inp.data)
    _emit_diagnostics(inp.name, source, reply.diagnostics, "text", sys.stderr)
    fixed = dumps(reply, indent=args.indent)
    if args.diff:
        # The input as it is on disk: bytes that are not UTF-8 go back out unchanged (surrogateescape).
        original = inp.data.decode("utf-8", errors="surrogateescape")
        sys.stdout.writelines(_unified_diff(original, fixed + "\n", inp.name, f"{inp.name} (fixed)"))
    else:
        print(_json_text(fixed, sys.stdout), file=sys.stdout)
    return EXIT_INVALID if _failed(reply.diagnostics) else EXIT_OK


NO_NEWLINE: Final = "\\ No newline at end of file\n"
"""What ``diff`` and ``patch`` write after a last line that has no newline."""


def _patch_lines(text: str) -> list[str]:
    """``text`` in lines as ``patch`` counts them: ended by ``\\n`` only, each keeping its end.

    Not ``str.splitlines``: it also ends lines at ``\\r``, U+2028 and the like, which
    ``patch`` reads as characters within a line.
    """
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _unified_diff(old: str, new: str, old_name: str, new_name: str) -> Iterator[str]:
    """A unified diff that ``patch`` applies, a last line without a newline marked as ``diff`` marks it."""
    for line in difflib.unified_diff(_patch_lines(old), _patch_lines(new), old_name, new_name):
        yield line
        if not line.endswith("\n"):
            yield "\n" + NO_NEWLINE


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


def _stream_chunks(args: argparse.Namespace) -> Iterator[bytes | str]:
    """Standard input as it arrives, or a saved reply replayed in chunks."""
    if args.replay is not None:
        inp = _read(args.replay, args.max_size)
        if inp.over:
            raise _InputError(f"cannot replay {inp.too_large(args.max_size)}")
        yield from _replay(inp.data, args.chunk, args.delay_ms)
        return
    stdin = _stdin()
    read = getattr(stdin, "read1", stdin.read)
    while True:
        try:
            chunk = read(65536)
        except (OSError, ValueError) as e:
            raise _InputError(f"cannot read standard input: {_reason(e)}") from None
        if not chunk:
            return
        yield chunk


def _cmd_stream(args: argparse.Namespace) -> int:
    from charfmt.speech import SentenceSplitter  # noqa: PLC0415
    from charfmt.stream import StreamParser  # noqa: PLC0415

    if args.scene is not None and args.character is not None:
        _usage_error(args, "argument --scene: not allowed with argument --character")
    if args.sentences and args.stage:  # the stage's speak cues are the sentences
        _usage_error(args, "argument --sentences: not allowed with argument --stage (its speak cues are the sentences)")
    if args.max_length is not None and not (args.sentences or args.stage):
        _usage_error(args, "argument --max-length: splits sentences; it needs --sentences or --stage")
    language = _language(args)
    parser = StreamParser(
        lenient=not args.strict, max_size=args.max_size, vocabulary=language.vocabulary, tags=language.tags
    )
    splitter = SentenceSplitter(tags=language.tags, max_length=args.max_length) if args.sentences else None
    stage = _stage_reader(args) if args.stage else None
    failed = False

    def emit(events: list[Event]) -> None:
        nonlocal failed
        out = sys.stdout
        for event in events:
            if event.kind == "diagnostic" and event.diagnostic.severity == "error":
                failed = True
                if stage is not None:  # the cues say nothing of it: say it where errors go
                    print(_diag_line("<stream>", event.diagnostic), file=sys.stderr)
            if stage is None or event.kind == "diagnostic":  # the cues say nothing of it: a diagnostic line
                print(_json(event.to_dict(), out), file=out, flush=True)
            if stage is not None:
                for cue in stage.feed(event):
                    print(_json(cue.to_dict(), out), file=out, flush=True)
            if splitter is not None:
                for sentence in splitter.feed(event):
                    print(_json({"kind": "sentence", **sentence.to_dict()}, out), file=out, flush=True)

    scene = _load_scene(args.scene, args.max_size) if args.scene is not None else None
    seen: list[str | bytes] = []
    try:
        for chunk in _stream_chunks(args):
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
            print(_json(cue.to_dict(), sys.stdout), file=sys.stdout, flush=True)
    except ParseError as e:
        name = "<stdin>" if args.replay in (None, "-") else args.replay
        _emit_diagnostics(name, e.source, e.diagnostics, "text", sys.stderr)
        return EXIT_INVALID
    return EXIT_INVALID if failed else EXIT_OK


def _stage_reader(args: argparse.Namespace) -> StageReader:
    """The stage reader of ``stream --stage``: the ``--character``'s stage map, or none."""
    from charfmt.stage import StageReader  # noqa: PLC0415

    if getattr(args, "scene", None) is not None:
        return _load_scene(args.scene, args.max_size).stage(max_length=args.max_length)
    path = getattr(args, "character", None)
    user_name = getattr(args, "user_name", None)
    character = _load_character(path, args.max_size, user_name) if path is not None else None
    return StageReader(character, max_length=args.max_length)


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from charfmt.fuzz import iter_fuzz_cases  # noqa: PLC0415

    language = _language(args)
    cases = iter_fuzz_cases(args.seed, args.count, tags=language.tags, vocabulary=language.vocabulary)
    with _output(args.out) as out:
        # One case at a time: the first line comes at once, and memory does not grow with --count.
        # Each line in one write (print writes its end apart): Ctrl-C between cases cuts no line.
        for i, case in enumerate(cases):
            out.write(_json({"seed": args.seed, "index": i, **case.to_dict()}, out) + "\n")
    return EXIT_OK


@contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    """Standard output, or the file ``path`` written whole or not at all.

    A regular file (or a new one) is written to a temporary file beside it, renamed over
    it when the block ends without an error: an error or Ctrl-C leaves what was there and
    removes the temporary file. Something that is not a regular file (``/dev/null``, a
    FIFO) is written directly.
    """
    if path is None:
        yield sys.stdout
        return
    temporary = ""
    try:
        target = os.path.realpath(path)  # through a symbolic link: the file it names is replaced
        try:
            st: os.stat_result | None = os.stat(target)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if st is not None and not stat.S_ISREG(st.st_mode):
            fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
        else:
            if st is not None and not os.access(target, os.W_OK):  # a rename would get round the permission
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            temporary, fd = _temporary_beside(target)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise _InputError(f"cannot write {path}: {_reason(e)}") from None
    if not temporary:
        with open(fd, "w", encoding="utf-8") as f:
            yield f
        return
    try:
        with open(fd, "w", encoding="utf-8") as f:
            yield f
        if st is not None:
            os.chmod(temporary, stat.S_IMODE(st.st_mode))
        os.replace(temporary, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise


def _temporary_beside(target: str) -> tuple[str, int]:
    """A new file in ``target``'s folder, named after it and hidden: its path and an open descriptor.

    Created with mode 0666 less the umask, as ``open`` creates a file (``tempfile``'s are 0600).
    """
    folder, name = os.path.split(target)
    for _ in range(100):
        temporary = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {name}")


def _cmd_schema(args: argparse.Namespace) -> int:
    language = _language(args)
    schema = json_schema(args.provider, vocabulary=language.vocabulary, tags=language.tags)
    print(_json(schema, sys.stdout, indent=2))
    return EXIT_OK


def _load_character(path: str, limit: int, user_name: str | None = None) -> Character:
    from charfmt.character import Character  # noqa: PLC0415

    inp = _read(path, limit)
    if inp.over:
        raise _InputError(f"cannot read --character {inp.too_large(limit)}")
    character = Character.from_bytes(inp.data, inp.name, max_size=limit, user_name=user_name)
    for d in character.card.diagnostics if character.card is not None else ():  # a default vocabulary (CF920)...
        print(_diag_line(inp.name, d), file=sys.stderr)
    return character


def _load_scene(path: str, limit: int) -> Scene:
    from charfmt.scene import Scene  # noqa: PLC0415

    return Scene.load(path, max_size=limit)


def _load_history(path: str, character: Character, limit: int) -> list[Exchange]:
    from charfmt.character import history_from_jsonl  # noqa: PLC0415

    text = _read_text(path, limit, "--history")
    return history_from_jsonl(text, character, "<stdin>" if path == "-" else path)


def _templates(folder: str | None) -> str | None:
    if folder is not None and not Path(folder).is_dir():
        reason = "not a directory" if Path(folder).exists() else "no such directory"
        raise _InputError(f"cannot read templates folder {folder}: {reason}")
    return folder


def _cmd_render(args: argparse.Namespace) -> int:
    from charfmt.render import render_messages, render_text  # noqa: PLC0415 (jinja only when rendering)

    if not args.say.strip():
        _usage_error(args, "argument --say: nothing to say: an empty user turn is not sent to a model")
    templates = _templates(args.templates)
    character = _load_character(args.character, args.max_size, getattr(args, "user_name", None))
    history = _load_history(args.history, character, args.max_size) if args.history is not None else []
    turn = character.shorthand(args.say)
    for d in turn.diagnostics:
        print(f"charfmt: warning: --say:{d.column}: {d.code} {d.message}", file=sys.stderr)
    options: dict[str, Any] = {"templates": templates, "budget": args.budget}
    if args.format == "text":
        print(render_text(character, history, turn, **options))
    else:
        request = render_messages(
            character, history, turn, provider=args.provider, structured=args.structured, **options
        )
        print(_json(request, sys.stdout, indent=2))
    return EXIT_OK


def _cmd_grammar(args: argparse.Namespace) -> int:
    from charfmt.export import grammar  # noqa: PLC0415

    vocabulary = tags = speakers = None
    if args.character is not None:
        character = _load_character(args.character, args.max_size, getattr(args, "user_name", None))
        vocabulary, tags = character.vocabulary, character.tags
    elif args.scene is not None:
        scene = _load_scene(args.scene, args.max_size)
        vocabulary, tags, speakers = scene.vocabulary, scene.tags, scene.speakers
    elif args.emotions is not None:
        keys = [k.strip() for k in args.emotions.split(",") if k.strip()]
        if not keys:
            _usage_error(args, "argument --emotions: no emotion key given")
        try:
            vocabulary = Vocabulary.of(*keys)
        except ValueError as e:  # pydantic's ValidationError: a key the format cannot hold
            _usage_error(args, f"argument --emotions: {_first_line(e)}")
    from charfmt.export import ExportError  # noqa: PLC0415

    try:
        text = grammar(
            args.target,
            vocabulary=vocabulary,
            tags=tags,
            max_tokens=args.max_tokens,
            max_chars=args.max_chars,
            max_chats=args.max_chats,
            speakers=speakers,
        )
    except ExportError as e:  # bounds that cannot hold a reply (a token budget too small)
        _usage_error(args, str(e))
    sys.stdout.write(text)
    if args.target == "regex":
        sys.stdout.write("\n")
    return EXIT_OK


def _cmd_demo(_args: argparse.Namespace) -> int:
    data = resources.files("charfmt").joinpath("data")
    good = data.joinpath("demo_reply.json").read_text(encoding="utf-8")
    broken = data.joinpath("demo_broken.json").read_text(encoding="utf-8")
    print("== A reply from the model ==")
    print(good.rstrip())
    print("\n== charfmt.parse(reply) ==")
    _pretty(parse(good), "demo_reply.json", sys.stdout)
    print("\n== A broken reply, parsed strictly ==")
    print(broken.rstrip())
    print()
    try:
        parse(broken)
    except ParseError as e:
        print(f"ParseError: {e}\n")
        print(e.report("demo_broken.json"))
    print("\n== The same reply, parsed leniently: what could be repaired, and how ==")
    _pretty(parse(broken, lenient=True), "demo_broken.json", sys.stdout)
    return EXIT_OK


# -- options ---------------------------------------------------------------------


class _ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors as one line: ``charfmt: error: ... (see 'charfmt X --help')``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"charfmt: error: {message} (see '{self.prog} --help')\n")


def _usage_error(args: argparse.Namespace, message: str) -> NoReturn:
    parser: argparse.ArgumentParser = args.parser
    parser.error(message)


def _whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An option's type: a whole number from ``low`` (to ``high``)."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text[:40]!r}") from None
        if value < low or (high is not None and value > high):
            limits = f"from {low:,} to {high:,}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {limits}, not {value}")
        return value

    return whole


def _milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds, not {text[:40]!r}") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_DELAY_MS):
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_DELAY_MS:,.0f}, not {text[:40]}")
    return value


class _VersionAction(argparse.Action):
    """``--version``: the version and which stream reader runs; computed only when asked (it imports the reader)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(_version_text())
        parser.exit(EXIT_OK)


def _version_text() -> str:
    """``charfmt 0.1.0`` and the stream reader: ``compiled (mypyc)`` or ``pure Python`` (``charfmt.stream``)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    from charfmt.stream import reader_name  # noqa: PLC0415 (the reader loads only for --version)

    try:
        number = version("charfmt")
    except PackageNotFoundError:  # a source checkout that was never installed
        number = "(not installed)"
    return f"charfmt {number}\nstream reader: {reader_name()}"


_USAGE_EXIT: Final = "usage error, or a file that cannot be used (missing, a directory, over --max-size)"
_EXITS: Final[dict[str, tuple[str, str | None]]] = {
    "parse": ("the reply is valid (with --lenient: read, warnings only)", "the reply has errors, or is empty"),
    "check": ("every file is valid (with --lenient: repairs only)", "a file is invalid"),
    "stream": ("the stream was read (repairs are events)", "the stream has errors (with --strict) or no reply"),
    "fix": ("fixed, warnings only", "errors remain (what could be read is still printed)"),
    "fuzz": ("every case was written", None),
    "schema": ("the schema was printed", "the --character file is invalid"),
    "render": ("the request was printed", "the --character or --history file is invalid, or over --budget"),
    "grammar": ("the grammar was printed", "the --character file is invalid"),
    "demo": ("the demo ran", None),
    "report": ("the report was written", "no line held a reply (the report is still written)"),
}
"""What exit statuses 0 and 1 mean, by subcommand (2 and 130 mean the same everywhere)."""


def _exit_codes(ok: str = "success", invalid: str | None = "invalid input: charfmt rejects what the file holds") -> str:
    """The ``exit status:`` block at the end of a ``--help``."""
    rows = [("0", ok), *([("1", invalid)] if invalid else []), ("2", _USAGE_EXIT), ("130", "interrupted (Ctrl-C)")]
    return "exit status:\n" + "\n".join(f"  {code:<5}{what}" for code, what in rows)


def _parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(
        prog="charfmt",
        description="Parse and check game-character chat replies.",
        epilog=_exit_codes(invalid="invalid input: a reply with errors, a character file charfmt rejects"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--version", action=_VersionAction, help="print the version and the stream reader (compiled or pure Python)"
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_size(sp: argparse.ArgumentParser, what: str = "input") -> None:
        sp.add_argument(
            "--max-size",
            type=_whole(1),
            default=DEFAULT_MAX_SIZE,
            metavar="BYTES",
            help=f"largest {what} accepted (default {DEFAULT_MAX_SIZE:,})",
        )

    def add_character(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--character", metavar="FILE", help="read replies with this character's emotions and [[tags]]")
        sp.add_argument("--user-name", metavar="NAME", help="the player's name: what a card's {{user}} becomes")

    def command(name: str, run: Callable[[argparse.Namespace], int], **kwargs: Any) -> argparse.ArgumentParser:
        # --help says what the command does (its one-line help as a sentence) and its exit codes.
        what = kwargs.get("help", "")
        kwargs.setdefault("description", what[:1].upper() + what[1:] + "." if what else None)
        kwargs.setdefault("epilog", _exit_codes(*_EXITS.get(name, ())))
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        sp = sub.add_parser(name, **kwargs)
        sp.set_defaults(run=run, parser=sp)
        return sp

    sp = command("parse", _cmd_parse, help="parse a reply and print it")
    sp.add_argument("file", nargs="?", default="-", help="reply file, or - for standard input")
    sp.add_argument("--lenient", action="store_true", help="report problems instead of failing")
    sp.add_argument(
        "--format",
        choices=("pretty", "json", "jsonl"),
        default="pretty",
        help="pretty: chats for a person (default); json: the Reply model; jsonl: one event per line",
    )
    add_character(sp)
    add_size(sp, "input or --character file")

    sp = command("check", _cmd_check, help="check replies strictly; exit 1 if any is invalid")
    sp.add_argument("files", nargs="+", metavar="FILE", help="reply files to check, or - for standard input")
    sp.add_argument(
        "--format",
        choices=("text", "jsonl"),
        default="text",
        help="text: file:line:col: CODE message with a caret (default); jsonl: one diagnostic per line",
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="print nothing for valid files")
    sp.add_argument("--lenient", action="store_true", help="repair what can be repaired; report repairs as warnings")
    add_character(sp)
    add_size(sp, "input or --character file")

    sp = command("stream", _cmd_stream, help="read a reply as it arrives; print events as JSON Lines")
    sp.add_argument("--replay", metavar="FILE", help="simulate a model stream from a saved reply")
    sp.add_argument("--chunk", type=_whole(1), default=4, metavar="N", help="characters per replayed chunk (default 4)")
    sp.add_argument(
        "--delay-ms", type=_milliseconds, default=0.0, metavar="D", help="pause between replayed chunks (0 to 60,000)"
    )
    sp.add_argument("--strict", action="store_true", help="fail on invalid input instead of repairing it")
    sp.add_argument("--sentences", action="store_true", help="also print complete sentences for speech")
    sp.add_argument(
        "--stage",
        action="store_true",
        help="print stage cues (expression, motion, speak) instead of events, mapped by --character's [stage]",
    )
    sp.add_argument(
        "--max-length", type=_whole(1), metavar="N", help="for speech: a sentence longer than N also ends at 、 or ,"
    )
    sp.add_argument("--scene", metavar="FILE", help="a scene (TOML): its cast's tags; --stage maps each speaker")
    add_character(sp)
    add_size(sp, "stream or --replay file or --character file")

    sp = command("fix", _cmd_fix, help="repair a reply leniently; print it canonically, the repair log on stderr")
    sp.add_argument("file", nargs="?", default="-", help="reply file, or - for standard input")
    sp.add_argument("--diff", action="store_true", help="print a unified diff from the input to the fixed reply")
    sp.add_argument("--indent", type=_whole(0, 64), default=None, metavar="N", help="pretty-print the JSON")
    add_character(sp)
    add_size(sp, "input or --character file")

    sp = command("fuzz", _cmd_fuzz, help="write damaged replies (with the clean original and the mutations), by seed")
    sp.add_argument("--seed", type=_whole(0), default=0, help="the same seed writes the same cases (default 0)")
    sp.add_argument("--count", type=_whole(0), default=100, help="cases to write (default 100)")
    sp.add_argument(
        "--out", metavar="FILE", help="JSON Lines file, replaced only when every case is written (default: stdout)"
    )
    sp.add_argument("--character", metavar="FILE", help="write the originals in this character's emotions and [[tags]]")
    add_size(sp, "--character file")

    sp = command("schema", _cmd_schema, help="print the reply envelope as JSON Schema")
    sp.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="the schema in the subset that provider's structured output accepts (default: plain JSON Schema)",
    )
    add_character(sp)
    add_size(sp, "--character file")

    sp = command("render", _cmd_render, help="render a provider request for a character and a user turn")
    sp.add_argument("--character", required=True, metavar="FILE", help="character TOML file or card")
    sp.add_argument("--user-name", metavar="NAME", help="the player's name: what a card's {{user}} becomes")
    sp.add_argument("--say", required=True, metavar="TEXT", help='what the user says, in shorthand: "[angry] なんで？"')
    sp.add_argument("--history", metavar="FILE", help='past exchanges, JSON Lines of {"user": ..., "reply": ...}')
    sp.add_argument(
        "--provider", choices=PROVIDERS, default="openai", help="whose chat API the request is for (default openai)"
    )
    sp.add_argument(
        "--format", choices=("json", "text"), default="json", help="json: provider request; text: one prompt"
    )
    sp.add_argument("--templates", metavar="DIR", help="a folder of your own templates, looked up first")
    sp.add_argument("--budget", type=_whole(1), metavar="TOKENS", help="drop the oldest exchanges to fit")
    sp.add_argument("--structured", action="store_true", help="add the provider's structured-output schema")
    add_size(sp, "--character or --history file")

    sp = command("grammar", _cmd_grammar, help="print the reply format as a grammar for constrained decoding")
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
    sp.add_argument(
        "--max-tokens", type=_whole(1), metavar="N", help="bound the reply so it always closes within N tokens"
    )
    sp.add_argument("--max-chars", type=_whole(1), metavar="N", help="at most N characters per element")
    sp.add_argument("--max-chats", type=_whole(1), metavar="N", help="at most N chats per reply")
    add_size(sp, "--character file")

    from charfmt.chat import register as register_chat  # noqa: PLC0415 (the chat command's code)

    register_chat(sub, command)

    command("demo", _cmd_demo, help="parse a bundled reply and show a strict error")

    from charfmt import _cli_convert  # noqa: PLC0415

    sp = command("convert", _cli_convert.run, help="convert a conversation: jsonl, pam, uacs, groupchat, ailoy")
    _cli_convert.add_arguments(sp)
    add_size(sp, "input or --character file")

    from charfmt import _cli_report  # noqa: PLC0415 (the command lives in its own module)

    sp = command("report", _cli_report.cmd_report, help="conformance of a JSON Lines log of replies, per group")
    _cli_report.add_arguments(sp, _whole)

    from charfmt import _cli_serve  # noqa: PLC0415

    sp = command("serve", _cli_serve.run, help="serve a character over HTTP: OpenAI-compatible, events, playground")
    _cli_serve.add_arguments(sp, _whole)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    with _forgiving_output():
        status = _run(argv)
    return status


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = _parser().parse_args(argv)
        if sys.stdout is None and not (args.command == "fuzz" and args.out is not None):
            raise _InputError("cannot write standard output: it is closed")
        status = int(args.run(args))
        if sys.stdout is not None:
            sys.stdout.flush()  # a write error shows here, not in a traceback at exit
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return EXIT_OK if e.code is None else e.code if isinstance(e.code, int) else EXIT_USAGE
    except _InputError as e:
        _error(str(e))
        return EXIT_USAGE
    except (_InvalidError, CharfmtError) as e:
        _error(str(e))
        return EXIT_INVALID
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (| head): nothing more to say
        _discard_stdout()
        return EXIT_OK
    except OSError as e:  # writing failed: a full disk, a closed standard output
        _discard_stdout()
        _error(f"cannot write output: {_reason(e)}")
        return EXIT_USAGE
    return status
