"""``charfmt report FILE.jsonl|-``: conformance of a log of model replies, per group (``charfmt.report``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import InputError, error, load_character, stdin_bytes
from charfmt.cli._options import add_size, whole
from charfmt.diagnostics import CharfmtError
from charfmt.parser import DEFAULT_MAX_SIZE

OUTPUT_FORMATS = ("text", "json", "html")
_EXTENSIONS = {"text": "txt", "json": "json", "html": "html"}


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt report``."""
    sp.add_argument(
        "file",
        metavar="FILE",
        help="JSON Lines log, one object per reply (gzip-compressed too), or - for standard input",
    )
    sp.add_argument(
        "--field",
        default="text",
        help="the key holding the model's reply (default text; response.text for a nested one)",
    )
    sp.add_argument("--by", metavar="KEYS", help="comma-separated keys to group by: model,prompt_version (meta.model)")
    sp.add_argument(
        "--max-groups",
        type=whole(1),
        default=1000,
        metavar="N",
        help="groups kept apart (default 1,000); the rest are counted in one '(other groups)' row",
    )
    sp.add_argument("--jobs", type=whole(1, 1024), default=1, metavar="N", help="worker processes (default 1)")
    sp.add_argument(
        "--format", choices=OUTPUT_FORMATS, default="text", help="text (default), json, or a self-contained html page"
    )
    sp.add_argument(
        "--out",
        metavar="DIR",
        help="also write rows.parquet, keep.jsonl (canonical) and the report here, each as a new file renamed"
        " into place: a symlink at one of those names is replaced, never followed; a symlinked DIR is the folder"
        " it points to",
    )
    sp.add_argument("--engine", choices=("local", "ray"), default="local", help="local processes or Ray Data")
    sp.add_argument("--ray-address", metavar="ADDR", help="with --engine ray: an existing cluster (ray.init(address=))")
    sp.add_argument("--top", type=whole(1, 1000), default=5, metavar="N", help="codes listed per group (default 5)")
    add_size(sp, meaning=f"longest line read; a longer one is a bad line (default {DEFAULT_MAX_SIZE:,})")
    sp.add_argument("--no-progress", action="store_true", help="no counter on the terminal")
    sp.add_argument(
        "--character", metavar="FILE", help="read replies with this character's emotions and [[tags]] (<sfx>...)"
    )


@contextmanager
def _input(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield stdin_bytes()
        return
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "Is a directory")
        f = open(path, "rb")  # noqa: SIM115 (closed below)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    with f:
        yield f


def _gzip(path: str) -> bool:
    """Whether the file at ``path`` is gzip-compressed; one that cannot be read is not (``_input`` says why)."""
    from charfmt.report import is_gzip  # noqa: PLC0415 (import cost: every CLI command loads this module)

    try:
        return is_gzip(path)
    except (OSError, ValueError):
        return False


def _out_folder(path: str) -> str:
    """``--out``: a folder that exists (made if need be) and takes a file, checked before any line is read."""
    try:
        if os.path.exists(path) and not os.path.isdir(path):
            raise NotADirectoryError(20, "Not a directory")
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".charfmt-probe-", dir=path)  # os.access says yes to root
        os.close(fd)
        os.unlink(probe)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot write --out {path}: {getattr(e, 'strerror', None) or e}") from None
    return path


def run(args: argparse.Namespace) -> int:
    """Run ``charfmt report``; 0 once the report is written, 1 when no line held a reply (every line bad)."""
    from charfmt import report  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.batch import require_pyarrow  # noqa: PLC0415 (import cost: every CLI command loads this module)

    names = [] if args.by is None else [name.strip() for name in args.by.split(",")]
    if args.by is not None and not all(names):  # (``--by ""`` or ``a,,b``: a key left out, not "no grouping")
        args.parser.error(f"argument --by: a key is empty in {args.by!r}: name each key once, separated by commas")
    by = tuple(names)
    if len(set(by)) != len(by):
        args.parser.error(f"argument --by: a key is listed twice: {args.by}")
    language: dict[str, Any] = {}
    if args.character is not None:
        character = load_character(args.character, DEFAULT_MAX_SIZE)  # --max-size bounds a line here
        language = {"tags": character.tags, "vocabulary": character.vocabulary}
    try:
        job = report.Job(
            field=args.field,
            by=by,
            max_line=args.max_size,
            full=args.out is not None,
            max_groups=args.max_groups,
            **language,
        )
    except CharfmtError as e:
        args.parser.error(str(e))
    if args.engine == "ray" and args.file == "-":
        args.parser.error("--engine ray reads a file (each task reads its own part); write standard input to one")
    if args.engine != "ray" and args.ray_address is not None:
        args.parser.error("--ray-address needs --engine ray")
    if args.engine == "ray" and _gzip(args.file):
        args.parser.error(
            "--engine ray cuts the file into byte ranges, which a gzip-compressed log has not:"
            " decompress it, or use --engine local (it reads gzip)"
        )
    name = "<stdin>" if args.file == "-" else args.file
    folder = _out_folder(args.out) if args.out is not None else None
    counter = report.ProgressCounter(sys.stderr) if not args.no_progress and _tty(sys.stderr) else None
    log: Any = None
    with _input(args.file) as f:  # a file that cannot be read exits 2 first, whatever is installed
        require_pyarrow()  # a clear error now, not in a worker
        outputs = report.Outputs(folder, job) if folder is not None else None
        try:
            if args.engine == "ray":
                tables = report.ray_tables(job, args.file, args.ray_address)
            else:
                log = report.open_log(f)  # a gzip-compressed log (by its first bytes) is read decompressed
                tables = report.local_tables(job, report.read_chunks(log, job.max_line), args.jobs)
            summary = report.run(job, tables, outputs, counter)
        except BaseException:
            if outputs is not None:
                outputs.abort()
            raise
        finally:
            if counter is not None:
                counter.done()
    data = summary.to_dict(name, top=args.top)
    text = render(data, args.format)
    if outputs is not None:
        outputs.close(text, _EXTENSIONS[args.format])
    sys.stdout.write(text)
    sys.stdout.flush()
    if isinstance(log, report.GzipLog) and log.damage is not None:
        sys.stderr.write(f"charfmt report: warning: {name}: {log.damage}\n")
    for key in summary.unseen_by():
        sys.stderr.write(f"charfmt report: --by key {key!r} appears in no line\n")
    if summary.other is not None:
        sys.stderr.write(
            f"charfmt report: warning: more than {job.max_groups:,} groups; the rest are counted in one"
            f" {report.OTHER!r} row (--max-groups)\n"
        )
    if (why := summary.all_bad(args.file)) is not None:
        error(why)  # (the one error line every command writes: ``charfmt: error: ...``)
        return 1
    if (packed := summary.packed(args.file)) is not None:  # some lines held replies all the same
        sys.stderr.write(f"charfmt report: warning: {packed}\n")
    return 0


def render(data: dict[str, Any], fmt: str) -> str:
    """The report in ``fmt`` (text, json or html)."""
    if fmt == "json":
        return json.dumps(data, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    if fmt == "html":
        from charfmt._report_html import render_html  # noqa: PLC0415 (import cost: every CLI command loads this module)

        return render_html(data)
    from charfmt.report import render_text  # noqa: PLC0415 (import cost: every CLI command loads this module)

    return render_text(data)


def _tty(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):
        return False


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="conformance of a JSON Lines log of replies (gzip-compressed or not), per group",
    ok="the report was written",
    invalid="no line held a reply (the report is still written)",
    # The optional extras it may need: pyarrow (``charfmt[arrow]``), Ray Data for ``--engine ray``.
    extras=("arrow", "ray"),
)
