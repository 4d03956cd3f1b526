"""What every ``charfmt`` subcommand shares: reading its files, writing its output, errors and exit codes.

A file that cannot be used at all (missing, a directory, closed standard input, over
``--max-size``) is an ``InputError`` (exit 2); one that was read but holds what charfmt
rejects is an ``InvalidError`` (exit 1). Output that the terminal's encoding cannot hold is
escaped (``\\u3042``), not a crash (``forgiving_output``).
"""

from __future__ import annotations

import argparse
import codecs
import errno
import hashlib
import json
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, NoReturn, TextIO

from charfmt._terminal import json_safe, visible

if TYPE_CHECKING:
    from charfmt.diagnostics import Diagnostic
    from charfmt.prompt.character import Character
    from charfmt.prompt.lorebook import Lorebook
    from charfmt.prompt.scene import Scene

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED: Final = 130
"""128 + SIGINT, what shells report for a command stopped with Ctrl-C."""

_PIECE: Final = 1 << 20
"""Bytes read at a time."""


# -- errors ----------------------------------------------------------------------


class InputError(Exception):
    """A file could not be used at all (missing, a directory, closed, too large): exit 2."""


class InvalidError(Exception):
    """A file was read but what it holds is rejected (not UTF-8, for instance): exit 1."""


def reason(e: BaseException) -> str:
    """Why an operation on a file failed, in words (an ``OSError``'s ``strerror``)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def usage_error(args: argparse.Namespace, message: str) -> NoReturn:
    """A usage error of the subcommand that parsed ``args``: one line, exit 2."""
    parser: argparse.ArgumentParser = args.parser
    parser.error(message)


def error(message: str) -> None:
    """The one ``charfmt: error: ...`` line on standard error."""
    if sys.stderr is not None:
        print(f"charfmt: error: {visible(message)}", file=sys.stderr)


def diag_line(name: str, d: Diagnostic) -> str:
    """A diagnostic as ``name:line:col: CODE message`` (``warning:`` before the message of a warning)."""
    level = "" if d.severity == "error" else f"{d.severity}: "
    return f"{name}:{d.line}:{d.column}: {d.code} {level}{d.message}"


# -- reading ---------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
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


def stdin_bytes() -> IO[bytes]:
    """Standard input as bytes; a closed one (``<&-``) is an unreadable file."""
    stdin: TextIO | None = sys.stdin
    if stdin is None:
        raise InputError("cannot read standard input: it is closed")
    return stdin.buffer


def usable_file(path: str, what: str) -> None:
    """``path`` names a file, else an ``InputError`` (exit 2) saying it is missing or a directory.

    For a file opened later by another reader (a model, a script); ``what`` names it ("model file").
    """
    if os.path.isdir(path):
        raise InputError(f"{what} {path} is a directory")
    if not os.path.isfile(path):
        raise InputError(f"{what} not found: {path}")


def read(path: str, limit: int) -> Input:
    """Read ``path`` (``-`` for standard input), at most ``limit`` bytes.

    Missing files, directories, closed standard input and read errors raise
    ``InputError``; a file over ``limit`` comes back with ``over`` set.
    """
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            return _read_from(name, stdin_bytes(), limit)
        with open(path, "rb") as f:
            return _read_from(name, f, limit)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path, or a closed file object
        raise InputError(f"cannot read {name}: {reason(e)}") from None


def _read_from(name: str, f: IO[bytes], limit: int) -> Input:
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
                return Input(name, b"", over=True, size=size)
    # In pieces: read(limit + 1) allocates limit + 1 bytes at once (--max-size 10**15: MemoryError).
    pieces: list[bytes] = []
    total = 0
    while total <= limit and (piece := f.read(min(limit + 1 - total, _PIECE))):
        pieces.append(piece)
        total += len(piece)
    data = b"".join(pieces)
    if len(data) > limit:
        return Input(name, b"", over=True, size=size if size is not None and size > limit else None)
    return Input(name, data)


def _utf8(inp: Input) -> Input:
    """An option's file that starts with a UTF-16 or UTF-32 byte order mark (PowerShell's ``>`` writes
    UTF-16) decoded as such, with ``CF160`` on standard error, as a reply's file is; else as it is."""
    from charfmt.parser import wide_text  # noqa: PLC0415 (import cost: loaded with the character these files go with)

    if (wide := wide_text(inp.data)) is None:
        return inp  # (UTF-8, or only starts like a mark: UTF-8's own error names the byte)
    text, name = wide
    print(f"{inp.name}:1:1: CF160 warning: input is {name}, not UTF-8: decoded as {name.split()[0]}", file=sys.stderr)
    return Input(inp.name, text.encode("utf-8", "surrogatepass"))


def read_text(path: str, limit: int, what: str) -> str:
    """A text file for an option (``--history``, ``convert``'s input), bounded by ``limit``: UTF-8, or UTF-16
    or UTF-32 with its byte order mark (``CF160``)."""
    inp = read(path, limit)
    if inp.over:
        raise InputError(f"cannot read {what} {inp.too_large(limit)}")
    inp = _utf8(inp)
    try:
        return inp.data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidError(
            f"{inp.name}: not UTF-8 text: byte 0x{inp.data[e.start]:02X} at byte offset {e.start}"
        ) from None


def load_character(path: str, limit: int, user_name: str | None = None) -> Character:
    """The ``--character`` file (TOML or a card); a card's diagnostics (a default vocabulary...) on stderr."""
    from charfmt.prompt.character import Character  # noqa: PLC0415 (import cost: every CLI command loads this module)

    inp = read(path, limit)
    if inp.over:
        raise InputError(f"cannot read --character {inp.too_large(limit)}")
    inp = _utf8(inp)
    character = Character.from_bytes(inp.data, inp.name, max_size=limit, user_name=user_name)
    for d in character.card.diagnostics if character.card is not None else ():  # a default vocabulary (CF920)...
        print(diag_line(inp.name, d), file=sys.stderr)
    return character


def check_greeting(args: argparse.Namespace, character: Character, index: int | None) -> None:
    """``--greeting N`` past the card's greetings (or of a character that is no card): a usage error (exit 2),
    the same line from every subcommand that takes it."""
    from charfmt.prompt.cards import greeting_count  # noqa: PLC0415 (import cost: every CLI command loads this module)

    count = greeting_count(character)
    if index is not None and index >= count and (index > 0 or character.card is not None):
        if character.card is None:
            have = "the character is not a card and has no greeting (--greeting 0 or none)"
        else:
            alternates = "1" if count == 2 else f"1 to {count - 1}"
            last = f", {alternates}: alternate_greetings" if count > 1 else ", no alternate_greetings"
            have = f"the card has {count} greeting{'s' if count != 1 else ''} (0: first_mes{last}; none: no greeting)"
        usage_error(args, f"argument --greeting: {index}: {have}")


def check_model_name(args: argparse.Namespace, program: str) -> None:
    """``--model-name`` for ``--server``: a server that answers only a model named needs it (a usage error); one
    that has a default model answers with it, which a warning says (``program``: the warning line's start)."""
    from charfmt.llm._model_clients import NAMED_SERVERS  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if args.model_name is not None or args.server not in NAMED_SERVERS:
        return
    if NAMED_SERVERS[args.server]:
        usage_error(args, f"argument --model-name: --server {args.server} needs the model's name")
    if sys.stderr is not None:
        print(f"{program}: warning: no --model-name for --server {args.server}: the server's default model",
              file=sys.stderr)  # fmt: skip


def load_lorebooks(paths: Sequence[str] | None, limit: int) -> list[Lorebook]:
    """The ``--lorebook`` files (SillyTavern World Info, or a card's book); what reading noted on stderr."""
    from charfmt.prompt.lorebook import Lorebook, LorebookError  # noqa: PLC0415 (import cost: every CLI command loads this module)

    books = []
    seen: dict[bytes, str] = {}
    for path in paths or ():
        inp = read(path, limit)
        if inp.over:
            raise InputError(f"cannot read --lorebook {inp.too_large(limit)}")
        inp = _utf8(inp)
        digest = hashlib.sha256(inp.data).digest()
        if digest in seen:  # (the same book twice: each entry would fire twice, its content twice in the prompt)
            print(f"charfmt: warning: --lorebook {inp.name} is the same book as {seen[digest]}: read once",
                  file=sys.stderr)  # fmt: skip
            continue
        seen[digest] = inp.name
        try:
            book = Lorebook.from_bytes(inp.data, Path(inp.name).stem, max_size=limit)
        except LorebookError as e:
            raise InvalidError(f"{inp.name}: {e}") from None
        for d in book.diagnostics:
            print(diag_line(inp.name, d), file=sys.stderr)
        books.append(book.model_copy(update={"diagnostics": ()}))
    return books


def templates_folder(folder: str | None) -> str | None:
    """``--templates DIR`` checked: a folder that exists (else ``InputError``, exit 2), or ``None``."""
    if folder is not None and not Path(folder).is_dir():
        reason = "not a directory" if Path(folder).exists() else "no such directory"
        raise InputError(f"cannot read templates folder {folder}: {reason}")
    return folder


def load_scene(path: str, limit: int, user_name: str | None = None) -> Scene:
    """The ``--scene`` file (``user_name``: the player's name in the whole cast, in place of the file's)."""
    from charfmt.prompt.scene import Scene  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if path == "-":  # (its cast files are named relative to its folder)
        raise InputError("cannot read --scene from standard input: a scene names its cast files beside it")
    try:  # (a missing file, a directory: exit 2, as --character's; its size and contents: Scene.load's to say)
        if stat.S_ISDIR(os.stat(path).st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise InputError(f"cannot read {path}: {reason(e)}") from None
    return Scene.load(path, max_size=limit, user_name=user_name)


# -- writing ---------------------------------------------------------------------


def _ascii_only(out: TextIO) -> bool:
    """Whether ``out`` cannot hold every character (``PYTHONIOENCODING=ascii``, a latin-1 terminal)."""
    try:
        return not codecs.lookup(getattr(out, "encoding", None) or "utf-8").name.startswith("utf")
    except LookupError:
        return True


_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]")


def json_text(text: str, out: TextIO) -> str:
    """JSON text for ``out``: non-ASCII as ``\\uXXXX`` escapes when ``out`` cannot hold it.

    Right only where every non-ASCII character sits inside a JSON string, as in charfmt's own output.
    """
    if not _ascii_only(out):
        return json_safe(text)
    return _NON_ASCII.sub(lambda m: json.dumps(m.group())[1:-1], text)


def dump_json(value: Any, out: TextIO, *, indent: int | None = None) -> str:
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
def forgiving_output() -> Iterator[None]:
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


def discard_stdout() -> None:
    """Point standard output at ``os.devnull`` so that the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


@contextmanager
def output(path: str | None) -> Iterator[TextIO]:
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
        raise InputError(f"cannot write {path}: {reason(e)}") from None
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
