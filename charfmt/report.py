"""Conformance at scale: read a JSON Lines log of model replies, parse each, summarise per group.

The job is three steps, each usable alone:

1. :func:`read_chunks` streams a log in chunks of lines (memory bounded by the chunk,
   a line longer than ``max_line`` is skipped without being held);
2. :func:`parse_lines` (the worker) turns a chunk into Arrow rows: the line number, the
   group fields, the reply, why the line was bad (not JSON, no field), and the columns
   of :mod:`charfmt.batch`;
3. :class:`Summary` takes the rows in line order and keeps counts per group (memory
   grows with the groups, codes and distinct reply sizes, not with the lines).

:func:`run` wires them up in this process (``jobs=1``), in worker processes, or on Ray
Data, and the report is the same in every case: rows arrive in line order and the
summary depends on nothing else. The command is ``charfmt report`` (``charfmt.cli.report``).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shlex
import tempfile
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from importlib import import_module
from typing import IO, Any, Final

from charfmt import batch
from charfmt._terminal import visible
from charfmt.batch import RESULT_COLUMNS, ArrowTable
from charfmt.diagnostics import CharfmtError
from charfmt.models import Vocabulary
from charfmt.parser import DEFAULT_MAX_SIZE
from charfmt.tags import TagTable

CHUNK_LINES: Final = 1000
"""Lines per chunk handed to a worker."""
CHUNK_BYTES: Final = 4 << 20
"""A chunk also ends once it holds this many bytes (a log of large replies)."""
ROW_GROUP: Final = 10_000
"""Rows per Parquet row group; fixed, so the file is the same whatever the chunks were."""
MAX_GROUPS: Final = 1000
"""Groups kept apart by default (``--max-groups``); the replies of any further group are counted in one row."""
OTHER: Final = "(other groups)"
"""The label of the row that holds the groups past the cap."""
MISSING: Final = "(missing)"
"""How a group key absent from a line is shown (a JSON ``null`` shows as ``null``)."""
KEYS_LISTED: Final = 20
"""Keys a "no field" bad line lists (what the line had instead)."""
FIRST_BAD: Final = 100
"""Bad lines the report lists by line number (all of them are rows of ``rows.parquet``)."""
RAY_RANGE_BYTES: Final = 8 << 20
"""Bytes of the file each Ray task reads."""

SUMMARY_COLUMNS: Final = tuple(c for c in RESULT_COLUMNS if c not in {"chats", "canonical", "reasoning"})
"""The result columns :class:`Summary` reads (not the reply's own text); a job without ``--out`` ships only these."""

Progress = Callable[[int], None]
"""Called with the number of lines read so far."""


@dataclass(frozen=True)
class Job:
    """What to read from each line and what to keep."""

    field: str = "text"
    """The key of each JSON object that holds the model's reply."""
    by: tuple[str, ...] = ()
    """Keys whose values form the group (``model``, ``prompt_version``)."""
    max_line: int = DEFAULT_MAX_SIZE
    """Longest line read, in bytes; a longer one is a bad line."""
    full: bool = False
    """Keep every column (for ``--out``), not only those the summary needs."""
    max_groups: int = MAX_GROUPS
    """Groups the summary keeps apart; the replies of any further group go to one ``(other groups)`` row."""
    tags: TagTable | None = None
    """The tag table replies are read with (a character's ``[[tags]]``: ``Character.tags``); ``None``: the default."""
    vocabulary: Vocabulary | None = None
    """The emotions replies are read with (``Character.vocabulary``); ``None``: any key."""

    def __post_init__(self) -> None:
        taken = {"line", "bad", *RESULT_COLUMNS}
        for name in (self.field, *self.by):
            if not name:
                raise CharfmtError("a field name is empty")
            if name in taken:
                raise CharfmtError(f"field {name!r} is named like a column of the report's rows; rename it")
            taken.add(name)

    @property
    def result_columns(self) -> tuple[str, ...]:
        """The result columns each row carries."""
        return RESULT_COLUMNS if self.full else SUMMARY_COLUMNS

    def schema(self) -> Any:
        """The schema of the rows :func:`parse_lines` returns."""
        pa = batch.require_pyarrow()
        results = batch.result_schema()
        fields = [pa.field("line", pa.int64()), *(pa.field(name, pa.string()) for name in self.by)]
        if self.full:
            fields.append(pa.field(self.field, pa.string()))
        fields.append(pa.field("bad", pa.string()))
        return pa.schema([*fields, *(results.field(name) for name in self.result_columns)])


# -- 1. reading ------------------------------------------------------------------------


class _Range:
    """``readline`` over ``size`` bytes of an open file from where it stands (a Ray task's share)."""

    def __init__(self, f: IO[bytes], size: int) -> None:
        self._f = f
        self._left = size

    def readline(self, limit: int) -> bytes:
        line = self._f.readline(min(limit, self._left)) if self._left > 0 else b""
        self._left -= len(line)
        return line


Line = bytes | str | None
"""A line of the log as read: its bytes, ``None`` for one longer than the limit (not held), or a ``str``
saying why the rest of the log could not be read (damaged gzip data): the last line, a bad one."""

GZIP_MAGIC: Final = b"\x1f\x8b"
"""The first two bytes of gzip data (RFC 1952): a log that starts with them is read decompressed."""


class GzipDamage(CharfmtError):
    """A gzip-compressed log whose compressed data is damaged or cut off: what was read before it counts."""


class GzipLog:
    """``readline`` over a gzip-compressed log, decompressed as it is read (memory bounded by the line)."""

    def __init__(self, raw: IO[bytes]) -> None:
        import gzip  # noqa: PLC0415 (only for a compressed log)

        self._file = gzip.GzipFile(fileobj=raw, mode="rb")
        self.damage: str | None = None
        """Why the data could not be read on, once that happened (a bad line of the report says it too)."""

    def readline(self, limit: int) -> bytes:

        try:
            return self._file.readline(limit)
        except EOFError:
            self.damage = "gzip data cut off: it ends before its end marker (the lines before it are read)"
        except (OSError, zlib.error) as e:  # gzip.BadGzipFile (a CRC, a length, trailing bytes) is an OSError
            self.damage = f"gzip data damaged: {e} (the lines before it are read)"
        raise GzipDamage(self.damage)


class _Prefixed(io.RawIOBase):
    """``head`` then the rest of ``rest``: a stream whose first bytes were read to see what it is."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(self._head), len(view))
            view[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


def open_log(f: IO[bytes]) -> Any:
    """``f`` to be read by lines (``readline(limit)``): as it is, or decompressed if it is gzip (by its magic bytes).

    A plain file is read from its start as it was; standard input or a pipe through a stream that
    gives back the two bytes read to tell.
    """
    head = f.read(len(GZIP_MAGIC))
    if f.seekable():
        f.seek(-len(head), io.SEEK_CUR)
        stream: IO[bytes] = f
    else:
        stream = io.BufferedReader(_Prefixed(head, f), 1 << 20)
    return GzipLog(stream) if head == GZIP_MAGIC else stream


@dataclass(frozen=True, slots=True)
class Packing:
    """A compressed or archive format a log may arrive in: how its data starts, and how to unpack it."""

    name: str
    """What the data is (``bzip2-compressed data``, ``a zip archive``)."""
    magic: re.Pattern[bytes]
    """What its data holds at ``offset`` (its magic number)."""
    offset: int
    unpack: str
    """The command that gives the log back on standard output (``FILE``: the input's name)."""


def _magic(data: bytes) -> re.Pattern[bytes]:
    return re.compile(re.escape(data))


PACKINGS: Final = (
    Packing("gzip-compressed data", _magic(GZIP_MAGIC), 0, "gunzip -c FILE"),
    Packing("bzip2-compressed data", re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)"), 0, "bunzip2 -c FILE"),
    Packing("xz-compressed data", _magic(b"\xfd7zXZ\x00"), 0, "xz -dc FILE"),
    Packing("zstd-compressed data", _magic(b"\x28\xb5\x2f\xfd"), 0, "zstd -dc FILE"),
    Packing("lz4-compressed data", _magic(b"\x04\x22\x4d\x18"), 0, "lz4 -dc FILE"),
    Packing("a zip archive", _magic(b"PK\x03\x04"), 0, "unzip -p FILE"),
    Packing("a 7z archive", _magic(b"7z\xbc\xaf\x27\x1c"), 0, "7z x -so FILE"),
    Packing("a tar archive", _magic(b"ustar"), 257, "tar -xOf FILE"),
)
"""The packings a bad line is recognised as (by magic number), so the report names them instead of
calling the line not UTF-8 or not JSON. Only gzip is read as it is (``open_log``); the others are named."""


def packing(raw: bytes) -> Packing | None:
    """The packing ``raw`` (a line as read) starts as, if any (:data:`PACKINGS`)."""
    for p in PACKINGS:
        if p.magic.match(raw, p.offset):
            return p
    return None


def _packed_reason(p: Packing, line: int) -> str:
    """Why a line that starts as packed data is bad; its kind (before the colon) names the packing."""
    if line > 1:
        return f"{p.name} after uncompressed lines, not JSON Lines"
    if p is PACKINGS[0]:  # the log was gzip-compressed and read decompressed: it was compressed twice
        again = f"decompress it once first ({p.unpack} | charfmt report -)"
        return f"{p.name} inside gzip-compressed data, not JSON Lines: {again}"
    return f"{p.name}, not JSON Lines: unpack the log first ({p.unpack} | charfmt report -)"


def is_gzip(path: str) -> bool:
    """Whether the file at ``path`` starts as gzip data does."""
    with open(path, "rb") as f:
        return f.read(len(GZIP_MAGIC)) == GZIP_MAGIC


def _lines(f: Any, max_line: int) -> Iterator[Line]:
    """Each line of ``f`` (newline kept), ``None`` for one longer than ``max_line`` bytes (not held);
    damaged gzip data ends the lines with why (a ``str``)."""
    try:
        while line := f.readline(max_line + 1):
            if len(line) > max_line and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of it, a piece at a time
                    line = f.readline(1 << 20)
                yield None
            else:
                yield line
    except GzipDamage as e:
        yield str(e)


def read_chunks(f: Any, max_line: int = DEFAULT_MAX_SIZE, first_line: int = 1) -> Iterator[tuple[int, list[Line]]]:
    """``(first line number, lines)`` chunks of ``f`` (anything with ``readline(limit)``: ``open_log``), in order."""
    lines: list[Line] = []
    size = 0
    start = first_line
    for line in _lines(f, max_line):
        lines.append(line)
        size += len(line) if isinstance(line, bytes) else 0
        if len(lines) >= CHUNK_LINES or size >= CHUNK_BYTES:
            yield start, lines
            start += len(lines)
            lines, size = [], 0
    if lines:
        yield start, lines


# -- 2. the worker ---------------------------------------------------------------------

_JSON_KINDS: Final = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number"}


def _json_kind(value: Any) -> str:
    return "null" if value is None else _JSON_KINDS.get(type(value), "a number")  # _NumberText: a number


_ABSENT: Final = object()


def lookup(record: dict[str, Any], name: str) -> Any:
    """The value of key ``name`` in ``record``; a dotted name (``meta.model``) walks into nested objects.

    A key that holds the dot itself wins over the path. Missing: :data:`_ABSENT`.
    """
    if name in record:
        return record[name]
    value: Any = record
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _group_value(value: Any) -> str | None:
    """A group field's value as JSON text, so its type stays (``3`` is not ``"3"``); a missing key is null.

    Strict JSON: a number no double holds (``NaN``, ``Infinity``, ``1e400``) was read as its text (:func:`_load`).
    """
    if value is _ABSENT:
        return None
    return json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)


class _NumberText(str):
    """A number no double holds (``NaN``, ``-Infinity``, ``1e400``), kept as its text: still a number, not a reply."""


def _finite(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else _NumberText(text)


def _load(raw: bytes) -> Any:
    """One log line's JSON; ``NaN``, ``Infinity`` and a number past a double's range are kept as their text.

    So every value of a record can be written back as strict JSON (a group value, ``keep.jsonl``).
    """
    return json.loads(raw, parse_constant=_NumberText, parse_float=_finite)


def group_label(by: Sequence[str], key: Sequence[str | None]) -> str:
    """A group's label: ``model="gpt" v=3``: values as JSON (one line, strings quoted), a missing key ``(missing)``."""
    return " ".join(f"{name}={MISSING if value is None else value}" for name, value in zip(by, key, strict=True))


def _record(raw: Line, job: Job, line: int) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """``(reply, record, why bad)`` of line number ``line``: the reply text, or why there is none."""
    if raw is None:
        return None, None, f"line longer than {job.max_line:,} bytes (--max-size)"
    if isinstance(raw, str):
        return None, None, raw  # the log could not be read on from here
    if (packed := packing(raw)) is not None:  # (a log gzip-compressed whole was read decompressed)
        return None, None, _packed_reason(packed, line)
    try:
        record = _load(raw)
    except UnicodeDecodeError as e:
        return None, None, f"not UTF-8: byte 0x{raw[e.start]:02X} at byte offset {e.start}"
    except json.JSONDecodeError as e:
        return None, None, f"not JSON: {e.msg.removesuffix(' at')} at column {e.colno}"  # "starting at"
    except RecursionError:
        return None, None, "not JSON that can be read: nested too deeply"
    except ValueError as e:  # an integer of more than 4,300 digits
        return None, None, f"not JSON that can be read: {str(e).split(';')[0][:120]}"
    if not isinstance(record, dict):
        return None, None, f"not a JSON object but {_json_kind(record)}"
    text = lookup(record, job.field)
    if text is _ABSENT:
        texts = _string_paths(record)
        return None, record, f"no field {job.field!r} (string keys {json.dumps(texts, ensure_ascii=False)})"
    if isinstance(text, dict):
        listed = json.dumps([f"{job.field}.{path}" for path in _string_paths(text)], ensure_ascii=False)
        return None, record, f"field {job.field!r} is an object, not a string (string keys {listed})"
    if text is None and isinstance(record.get("error"), str):  # ``charfmt serve --log``'s line of a failed turn
        status = record.get("status")
        said = f"status {status}: " if isinstance(status, int) and not isinstance(status, bool) else ""
        return None, record, f"{FAILED_TURN}: no reply ({said}{record['error'][:120]})"
    if not isinstance(text, str) or isinstance(text, _NumberText):
        return None, record, f"field {job.field!r} is {_json_kind(text)}, not a string"
    return text, record, None


FAILED_TURN: Final = "a turn that failed"
"""The reason of a log line that records a turn with no reply (``charfmt serve --log``: ``text`` null, ``error``)."""


def _string_paths(record: dict[str, Any], depth: int = 3) -> list[str]:
    """Dotted names of the string values of ``record``, nested objects included (``response.text``), sorted."""
    found: list[str] = []
    level: list[tuple[str, dict[str, Any]]] = [("", record)]
    for _ in range(depth):
        deeper: list[tuple[str, dict[str, Any]]] = []
        for prefix, table in level:
            for key, value in table.items():
                if isinstance(value, str):
                    found.append(prefix + key)
                elif isinstance(value, dict) and len(deeper) < KEYS_LISTED:
                    deeper.append((f"{prefix}{key}.", value))
        level = deeper
    return sorted(found)[:KEYS_LISTED]


def parse_lines(job: Job, first_line: int, lines: Sequence[Line]) -> ArrowTable:
    """The rows of one chunk (blank lines skipped): what each line held and what parsing made of it."""
    numbers: list[int] = []
    groups: list[list[str | None]] = [[] for _ in job.by]
    texts: list[str | None] = []
    bad: list[str | None] = []
    for k, raw in enumerate(lines):
        if isinstance(raw, bytes) and not raw.strip():
            continue
        text, record, why = _record(raw, job, first_line + k)
        try:
            key = [None if record is None else _group_value(lookup(record, name)) for name in job.by]
        except RecursionError:  # read, but too deep to write back (near the interpreter's limit)
            text, key, why = None, [None] * len(job.by), "not JSON that can be read: a --by value nested too deeply"
        numbers.append(first_line + k)
        for values, value in zip(groups, key, strict=True):
            values.append(value)
        texts.append(text)
        bad.append(why)
    found = batch.rows(texts, job.vocabulary, job.tags)
    for i, why in enumerate(bad):
        if why is not None:
            found[i] = None
    pa = batch.require_pyarrow()
    schema = job.schema()
    arrays = [pa.array(numbers, type=pa.int64()), *(batch.array(values, pa.string()) for values in groups)]
    if job.full:
        arrays.append(batch.array(texts, pa.string()))
    arrays.append(pa.array(bad, type=pa.string()))
    arrays.extend(batch.columns(found, job.result_columns))
    return pa.Table.from_arrays(arrays, schema=schema)


# -- 3. the summary --------------------------------------------------------------------


@dataclass
class Group:
    """Counts of one group of replies."""

    count: int = 0
    valid: int = 0
    repaired: int = 0
    empty: int = 0
    keep: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    """Replies with at least one diagnostic of the code."""
    examples: dict[str, tuple[int, str]] = field(default_factory=dict)
    """The first reply (line, diagnostic) with each code."""
    dialects: Counter[str] = field(default_factory=Counter)
    sizes: Counter[int] = field(default_factory=Counter)
    """Replies per size in bytes: exact percentiles in memory that grows with distinct sizes only."""

    def merge(self, other: Group) -> None:
        """Add ``other``'s counts; examples from whichever line comes first."""
        self.count += other.count
        self.valid += other.valid
        self.repaired += other.repaired
        self.empty += other.empty
        self.keep += other.keep
        self.codes.update(other.codes)
        for code, example in other.examples.items():
            if code not in self.examples or example < self.examples[code]:
                self.examples[code] = example
        self.dialects.update(other.dialects)
        self.sizes.update(other.sizes)

    def percentile(self, q: float) -> int | None:
        """The nearest-rank ``q`` percentile of the reply sizes (``None`` with no reply)."""
        if not self.count:
            return None
        rank = max(1, -(-int(q * self.count * 1000) // 100_000))  # ceil(q/100 * count), in integers
        seen = 0
        for size in sorted(self.sizes):
            seen += self.sizes[size]
            if seen >= rank:
                return size
        raise AssertionError("unreachable: the sizes sum to the count")

    def to_dict(self, top: int) -> dict[str, Any]:
        """The group's figures as JSON-ready values (``top`` codes)."""

        def pct(n: int) -> float | None:
            return round(100 * n / self.count, 2) if self.count else None

        codes = sorted(self.codes.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        dialects = sorted(self.dialects.items(), key=lambda kv: (-kv[1], kv[0]))
        return {
            "count": self.count,
            "valid": self.valid,
            "valid_pct": pct(self.valid),
            "repaired": self.repaired,
            "repaired_pct": pct(self.repaired),
            "empty": self.empty,
            "empty_pct": pct(self.empty),
            "keep": self.keep,
            "keep_pct": pct(self.keep),
            "size_p50": self.percentile(50),
            "size_p99": self.percentile(99),
            "codes": [
                {
                    "code": code,
                    "replies": n,
                    "pct": pct(n),
                    "example": {"line": self.examples[code][0], "message": self.examples[code][1]},
                }
                for code, n in codes
            ],
            "dialects": [{"dialect": name, "replies": n, "pct": pct(n)} for name, n in dialects],
        }


class Summary:
    """The report's figures, fed rows in line order (:meth:`add`)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.groups: dict[tuple[str | None, ...], Group] = {}
        self.other: Group | None = None
        """The replies of groups past ``job.max_groups``, in one row."""
        self.folded: set[tuple[str | None, ...]] = set()
        """Keys folded into :attr:`other` (at most ``job.max_groups`` remembered: memory stays bounded)."""
        self.folded_more = False
        """More distinct keys were folded than :attr:`folded` remembers."""
        self.seen_by: set[str] = set()
        """The ``by`` keys some line had."""
        self.missing_keys: Counter[str] = Counter()
        """Keys of the lines that lacked the reply's field (for the "did you mean" note)."""
        self.missing_field = 0
        self.lines = 0
        """The last line number seen."""
        self.bad = 0
        self.bad_reasons: Counter[str] = Counter()
        self.bad_first: list[tuple[int, str]] = []

    def add(self, table: ArrowTable) -> None:
        """Count the rows of ``table`` (from :func:`parse_lines`), which follow the rows added before."""
        if not table.num_rows:
            return
        col = table.column
        lines = col("line").to_pylist()
        by_values = [col(name).to_pylist() for name in self.job.by]
        keys = list(zip(*by_values, strict=True)) or [()] * len(lines)
        bad, valid, repaired, empty, keep = (col(n).to_pylist() for n in ("bad", "valid", "repaired", "empty", "keep"))
        dialect, errors, warnings, size = (
            col(n).to_pylist() for n in ("dialect", "error_codes", "warning_codes", "size")
        )
        diagnostics = col("diagnostics")
        self.lines = lines[-1]
        for name, values in zip(self.job.by, by_values, strict=True):
            if name not in self.seen_by and any(v is not None for v in values):
                self.seen_by.add(name)
        for i, line in enumerate(lines):
            why = bad[i]
            if why is not None:
                self.bad += 1
                self.bad_reasons[_reason_kind(why)] += 1
                if len(self.bad_first) < FIRST_BAD:
                    self.bad_first.append((line, why))
                if " (string keys [" in why:
                    self.missing_field += 1
                    with suppress(ValueError):
                        for key in json.loads(why[why.index(" (string keys [") + 14 : -1]):
                            if key in self.missing_keys or len(self.missing_keys) < 1000:
                                self.missing_keys[key] += 1
                continue
            group = self._group(keys[i])
            group.count += 1
            group.valid += valid[i]
            group.repaired += repaired[i]
            group.empty += empty[i]
            group.keep += keep[i]
            group.dialects[dialect_label(dialect[i], valid[i])] += 1
            group.sizes[size[i]] += 1
            codes = {*errors[i], *warnings[i]}
            for code in codes:
                group.codes[code] += 1
            missing = codes.difference(group.examples)
            if missing:
                for d in diagnostics[i].as_py():
                    if d["code"] in missing:
                        missing.discard(d["code"])
                        group.examples[d["code"]] = (line, f"{d['line']}:{d['column']}: {d['code']} {d['message']}")

    def _group(self, key: tuple[str | None, ...]) -> Group:
        """The group of ``key``; past ``job.max_groups`` groups, the one row of the other groups."""
        group = self.groups.get(key)
        if group is not None:
            return group
        if len(self.groups) < self.job.max_groups:
            group = self.groups[key] = Group()
            return group
        if self.other is None:
            self.other = Group()
        if len(self.folded) < self.job.max_groups:
            self.folded.add(key)
        elif key not in self.folded:
            self.folded_more = True
        return self.other

    def unseen_by(self) -> list[str]:
        """The ``--by`` keys no line had."""
        return [name for name in self.job.by if name not in self.seen_by]

    def packed(self, name: str = "FILE") -> str | None:
        """The first bad line that is compressed or archived data (``PACKINGS``), saying how to unpack
        ``name`` (``-``, standard input: ``FILE`` stays), with its line number; ``None`` if no line was."""
        for line, why in self.bad_first:
            if why.startswith(tuple(p.name for p in PACKINGS)):
                unpacked = why if name == "-" else why.replace(" FILE", f" {shlex.quote(name)}")
                return f"line {line:,} is {unpacked}" if line > 1 else f"the input is {unpacked}"
        return None

    def all_bad(self, name: str = "FILE") -> str | None:
        """When no line held a reply though some lines were read: one line saying why (else ``None``).

        A log that is compressed or archived data is named so (how to unpack ``name``), not hinted a ``--field``."""
        if not self.bad or any(g.count for g in self.groups.values()) or self.other is not None:
            return None
        if (packed := self.packed(name)) is not None:
            return packed
        field = self.job.field
        if self.missing_field:
            # Lines that are not JSON (a log's header, a stray print) do not hide the hint.
            note = f"no line had field {field!r}"
            others = {why: n for why, n in self.bad_reasons.items() if not why.startswith(("no field ", "field "))}
            if others:
                note += f" (other bad lines: {counted(others)})"
            return note + _hint(field, self.missing_keys, self.missing_field)
        reasons = counted(dict(sorted(self.bad_reasons.items(), key=lambda kv: -kv[1])))
        if set(self.bad_reasons) == {FAILED_TURN}:  # (a server's log of turns that all failed: no reply to report)
            return f"none of the {lines(self.bad)} held a reply: each records {FAILED_TURN} (its line says why)"
        return f"none of the {lines(self.bad)} held a reply ({reasons}): is the input a JSON Lines log?"

    def to_dict(self, name: str, top: int = 5) -> dict[str, Any]:
        """The report as JSON-ready values; the same for the same input, whatever ran it."""
        total = Group()
        for group in self.groups.values():
            total.merge(group)
        if self.other is not None:
            total.merge(self.other)
        ordered = sorted(self.groups.items(), key=lambda kv: [(v is not None, v or "") for v in kv[0]])
        groups = [
            {
                "key": {n: json.loads(v) for n, v in zip(self.job.by, key, strict=True) if v is not None},
                "label": group_label(self.job.by, key),
                "other": False,
                **group.to_dict(top),
            }
            for key, group in ordered
        ]
        if self.other is not None:
            groups.append({"key": None, "label": OTHER, "other": True, **self.other.to_dict(top)})
        return {
            "input": name,
            "field": self.job.field,
            "by": list(self.job.by),
            "lines": self.lines,
            "bad_lines": {
                "count": self.bad,
                "reasons": dict(sorted(self.bad_reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
                "first": [{"line": line, "reason": why} for line, why in self.bad_first],
            },
            "max_groups": self.job.max_groups,
            "folded_groups": None if self.other is None else (None if self.folded_more else len(self.folded)),
            "total": total.to_dict(top),
            "groups": groups,
        }


_REPLY_NAMES: Final = ("text", "reply", "response", "content", "output", "completion", "message", "answer")
"""Names a log gives the model's reply (the last part of a nested name counts)."""


def _hint(field: str, keys: Counter[str], lines: int) -> str:
    """`` — did you mean --field X?`` for the string key most lines had instead of ``field`` (or nothing)."""
    common = [k for k, n in keys.most_common(50) if 2 * n > lines and k != field]
    last = field.rsplit(".", 1)[-1]
    same = [k for k in common if k.rsplit(".", 1)[-1] == last]  # --field text where lines hold response.text
    named = [k for k in common if k.rsplit(".", 1)[-1] in _REPLY_NAMES]
    best = (same or named or common)[:1]
    return f" — did you mean --field {best[0]}?" if best else ""


def dialect_label(dialect: str | None, valid: bool) -> str:
    """A reply's entry in the dialect mix: its ``Reply.dialect``, as ``charfmt.parse(text, lenient=True)``
    says it; ``strict`` for a valid reply (read as it is), ``none`` for one with nothing to read (blank)."""
    if dialect is not None:
        return dialect
    return "strict" if valid else "none"


def _reason_kind(why: str) -> str:
    """The kind of a bad line's reason: its words before the details (``not JSON``, ``no field 'text'``)."""
    return why.split(":", 1)[0].split(" (string keys [", 1)[0]


# -- output ----------------------------------------------------------------------------


def lines(n: int) -> str:
    """``1 line``, ``2 lines``, ``1,000 lines``."""
    return f"{n:,} line" if n == 1 else f"{n:,} lines"


def counted(reasons: dict[str, int]) -> str:
    """Bad lines by kind, as the report writes them: ``not JSON 3, no field 'text' 1``."""
    return ", ".join(f"{why} {n:,}" for why, n in reasons.items())


def bytes_text(n: int | None) -> str:
    """A size in bytes as the report shows it (``12,345 B``; ``-`` for none)."""
    return "-" if n is None else f"{n:,} B"


def percent(value: float | None, width: int = 5) -> str:
    """A share as ``12.5%``, or ``-`` where there was no reply to take a share of."""
    return f"{'-':>{width + 1}}" if value is None else f"{value:>{width}.1f}%"


def render_text(report: dict[str, Any]) -> str:
    """The report for a terminal: a table of the groups, then each group's codes and dialects."""

    out = [f"charfmt report: {report['input']}, field {report['field']!r}, {lines(report['lines'])}"]
    bad = report["bad_lines"]
    rows = [("all", report["total"])]
    if report["by"]:
        rows += [(visible(g["label"]), g) for g in report["groups"]]  # escaped before the width is taken
    width = max(len(name) for name, _ in rows)
    out.append("")
    out.append(
        f"{'group':<{width}}  {'replies':>9}  {'valid':>6}  {'repaired':>8}  {'empty':>6}  {'keep':>6}"
        f"  {'p50 size':>9}  {'p99 size':>9}"
    )
    for name, g in rows:
        out.append(
            f"{name:<{width}}  {g['count']:>9,}  {percent(g['valid_pct'])}  {percent(g['repaired_pct'], 7)}"
            f"  {percent(g['empty_pct'])}  {percent(g['keep_pct'])}"
            f"  {bytes_text(g['size_p50']):>9}  {bytes_text(g['size_p99']):>9}"
        )
    for name, g in rows:
        out.append("")
        out.append(f"== {name}: {g['count']:,} replies")
        mix = ", ".join(f"{d['dialect']} {d['pct']:.1f}%" for d in g["dialects"]) or "-"
        out.append(f"  dialects: {mix}")
        out.append("  top codes:" if g["codes"] else "  top codes: none")
        for c in g["codes"]:
            out.append(
                f"    {c['code']}  {c['pct']:>5.1f}%  {c['replies']:>9,} replies  e.g. line {c['example']['line']}:"
            )
            out.append(f"        {c['example']['message']}")
    out.append("")
    if bad["count"]:
        out.append(f"bad lines: {bad['count']:,} ({counted(bad['reasons'])})")
        for b in bad["first"]:
            out.append(f"  line {b['line']}: {b['reason']}")
        if bad["count"] > len(bad["first"]):
            out.append(f"  ... and {bad['count'] - len(bad['first']):,} more (every one is a row of rows.parquet)")
    else:
        out.append("bad lines: none")
    if report.get("folded_groups") is not None or any(g.get("other") for g in report["groups"]):
        out.append(f"groups past the first {report['max_groups']:,} are counted in one row {OTHER!r} (--max-groups)")
    return visible("\n".join(out)) + "\n"  # group values, messages and bad lines come from the log


class Outputs:
    """``--out DIR``: every row as Parquet (``rows.parquet``), the keep-set as JSON Lines (``keep.jsonl``).

    Written as new files beside their final names (created, never opened where something
    is: a symlink planted at an output name is replaced, not followed) and renamed over
    them by :meth:`close`, so a job that fails or is interrupted leaves what was there.
    Row groups have a fixed size, so the file is the same however the rows arrived.
    """

    def __init__(self, folder: str, job: Job) -> None:
        batch.require_pyarrow()  # a clear error if it is missing
        pq = import_module("pyarrow.parquet")
        self.folder = folder
        self.job = job
        self._rows_tmp, rows = _new_file(folder, "rows.parquet", "wb")
        self._keep_tmp = ""
        try:
            self._keep_tmp, self._keep = _new_file(folder, "keep.jsonl", "w")
            self._rows = rows
            self._writer = pq.ParquetWriter(rows, job.schema())
        except BaseException:
            rows.close()
            for path in (self._rows_tmp, self._keep_tmp):
                with suppress(OSError):
                    os.unlink(path)
            raise
        self._pending: list[ArrowTable] = []
        self._held = 0

    def add(self, table: ArrowTable) -> None:
        """Write ``table``'s rows (row groups of :data:`ROW_GROUP`) and its kept replies."""
        self._pending.append(table)
        self._held += table.num_rows
        while self._held >= ROW_GROUP:
            self._flush(ROW_GROUP)
        keep = table.column("keep").to_pylist()
        if any(keep):
            lines = table.column("line").to_pylist()
            canonical = table.column("canonical").to_pylist()
            groups = [table.column(name).to_pylist() for name in self.job.by]
            for i, kept in enumerate(keep):
                if kept:
                    record = {
                        "line": lines[i],
                        **{
                            name: json.loads(g[i])
                            for name, g in zip(self.job.by, groups, strict=True)
                            if g[i] is not None
                        },
                    }
                    record[self.job.field] = canonical[i]
                    self._keep.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")

    def _flush(self, count: int) -> None:
        pa = batch.require_pyarrow()
        table = pa.concat_tables(self._pending)
        # One contiguous chunk per column: page boundaries then follow the rows alone, not
        # how they arrived, and the file is the same byte for byte.
        self._writer.write_table(table.slice(0, count).combine_chunks(), row_group_size=ROW_GROUP)
        rest = table.slice(count)
        self._pending = [rest] if rest.num_rows else []
        self._held = rest.num_rows

    def close(self, report: str, extension: str) -> None:
        """Finish both files, write the report beside them, and put them in place."""
        if self._held:
            self._flush(self._held)
        self._writer.close()
        self._rows.close()
        self._keep.close()
        name = f"report.{extension}"
        self._report_tmp, f = _new_file(self.folder, name, "w")
        with f:
            f.write(report)
        os.replace(self._rows_tmp, os.path.join(self.folder, "rows.parquet"))
        os.replace(self._keep_tmp, os.path.join(self.folder, "keep.jsonl"))
        os.replace(self._report_tmp, os.path.join(self.folder, name))

    def abort(self) -> None:
        """Remove the unfinished files."""
        for close in (self._writer.close, self._rows.close, self._keep.close):
            with suppress(Exception):  # the job already failed; the files go anyway
                close()
        for path in (self._rows_tmp, self._keep_tmp, getattr(self, "_report_tmp", "")):
            with suppress(OSError):
                os.unlink(path)


def _new_file(folder: str, name: str, mode: str) -> tuple[str, Any]:
    """A new, empty file in ``folder`` for ``name`` (``O_EXCL``, a fresh name), open in ``mode``; its path."""
    fd, path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # as open() would have made it, not mkstemp's 0600
        f = os.fdopen(fd, mode, encoding="utf-8") if "b" not in mode else os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    return path, f


# -- running ---------------------------------------------------------------------------


def local_tables(job: Job, chunks: Iterable[tuple[int, list[Line]]], jobs: int) -> Iterator[ArrowTable]:
    """The rows of each chunk, in order: here (``jobs=1``) or in ``jobs`` worker processes.

    At most ``2 * jobs`` chunks are in flight, so memory does not grow with the input.
    """
    if jobs == 1:
        for first, lines in chunks:
            yield parse_lines(job, first, lines)
        return
    from concurrent.futures import Future, ProcessPoolExecutor  # noqa: PLC0415 (import cost: only for --jobs)
    from multiprocessing import get_context  # noqa: PLC0415 (import cost: only for --jobs)

    # spawn: a fresh interpreter per worker; forking a process that holds Arrow's threads is unsafe.
    pool = ProcessPoolExecutor(jobs, mp_context=get_context("spawn"))
    pending: deque[Future[ArrowTable]] = deque()
    try:
        for first, lines in chunks:
            pending.append(pool.submit(parse_lines, job, first, lines))
            if len(pending) >= 2 * jobs:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def ray_ranges(path: str, max_line: int, size: int = RAY_RANGE_BYTES) -> list[dict[str, Any]]:
    """The file cut at line ends into ranges of about ``size`` bytes: path, start, length, first_line."""
    ranges: list[dict[str, Any]] = []
    if is_gzip(path):
        raise CharfmtError(f"{path}: a gzip-compressed log cannot be cut into byte ranges: decompress it first")
    with open(path, "rb") as f:
        start = position = 0
        line = first = 1
        for raw in _lines(f, max_line):
            line += 1
            position = position + len(raw) if isinstance(raw, bytes) else f.tell()
            if position - start >= size:
                ranges.append({"path": path, "start": start, "length": position - start, "first_line": first})
                start, first = position, line
        if position > start:
            ranges.append({"path": path, "start": start, "length": position - start, "first_line": first})
    return ranges


def ray_parse_ranges(ranges: ArrowTable, job: Job) -> ArrowTable:
    """The rows of each file range of ``ranges`` (a Ray Data batch), in order: the Ray worker."""
    pa = batch.require_pyarrow()
    tables = [job.schema().empty_table()]
    for item in ranges.to_pylist():
        with open(item["path"], "rb") as f:
            f.seek(item["start"])
            for first, lines in read_chunks(_Range(f, item["length"]), job.max_line, item["first_line"]):
                tables.append(parse_lines(job, first, lines))
    return pa.concat_tables(tables)


def ray_tables(job: Job, path: str, address: str | None = None) -> Iterator[ArrowTable]:
    """The rows of the file at ``path``, in order, computed by Ray Data ``map_batches``.

    Each task reads its own byte range of the file, so on a cluster the file must be at
    the same path on every node. ``address``: an existing cluster (``ray.init(address=...)``);
    without it, the one already started in this process, or a new local one.
    """
    try:
        import ray  # noqa: PLC0415 (optional dependency)
        import ray.data  # noqa: PLC0415 (optional dependency: ray, charfmt[ray])
    except ImportError:
        raise CharfmtError("--engine ray needs Ray Data: pip install 'charfmt[ray]'") from None
    import logging  # noqa: PLC0415 (import cost: only for Ray's logs)

    ranges = ray_ranges(path, job.max_line, RAY_RANGE_BYTES)
    if not ranges:
        return
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True  # the rows come back in line order
        context.enable_progress_bars = False
        items = ray.data.from_items(ranges, override_num_blocks=len(ranges))
        rows = items.map_batches(partial(ray_parse_ranges, job=job), batch_size=1, batch_format="pyarrow")
        yield from rows.iter_batches(batch_size=None, batch_format="pyarrow")
    finally:
        if started:
            ray.shutdown()


def run(
    job: Job,
    tables: Iterable[ArrowTable],
    outputs: Outputs | None = None,
    progress: Progress | None = None,
) -> Summary:
    """Feed every table of rows to a :class:`Summary` (and ``outputs``), calling ``progress`` as lines go by."""
    summary = Summary(job)
    for table in tables:
        summary.add(table)
        if outputs is not None:
            outputs.add(table)
        if progress is not None and table.num_rows:
            progress(summary.lines)
    return summary


class ProgressCounter:
    """A progress counter on a terminal: lines read and lines per second, redrawn at most 4 times a second."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.start = time.monotonic()
        self.shown = 0.0
        self.lines = 0

    def __call__(self, lines: int) -> None:
        self.lines = lines
        now = time.monotonic()
        if now - self.shown >= 0.25:
            self.shown = now
            rate = lines / max(now - self.start, 1e-9)
            self.out.write(f"\rcharfmt report: {lines:,} lines, {rate:,.0f}/s ")
            self.out.flush()

    def done(self) -> None:
        """Redraw the counter with the final count and end its line (only if it drew one)."""
        if self.shown:
            took = time.monotonic() - self.start
            self.out.write(f"\rcharfmt report: {self.lines:,} lines in {took:,.1f}s\x1b[K\n")
            self.out.flush()
