"""Hostile files for the card-bomb and scene/stage suites, built small here (never committed as blobs),
and a child process that runs the CLI and reports its own peak memory."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

import pytest

import charfmt
from charfmt._png import blank_png

MiB: Final = 1 << 20
PEAK_MB: Final = 100
"""The most a child may hold resident while it reads a hostile file (issue 38: "under 100 MB peak")."""
PACKAGE_ROOT: Final = Path(charfmt.__file__).resolve().parent.parent
"""Where the charfmt under test lives: the children import the same one."""
WALL: Final = 60.0
"""Seconds a child may take at most (it takes one or two; a bomb that is read would take minutes)."""


@cache
def zeros_deflated(size: int = 16 * MiB, byte: bytes = b"\0") -> bytes:
    """``size`` bytes of ``byte`` as one zlib stream (16 MiB of zeros: about 16 KB)."""
    return zlib.compress(byte * size, 9)


def chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC-32."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def ztxt(keyword: bytes, compressed: bytes, method: int = 0) -> bytes:
    """A ``zTXt`` chunk: keyword, NUL, compression method, the zlib stream."""
    return chunk(b"zTXt", keyword + b"\0" + bytes([method]) + compressed)


def itxt(keyword: bytes, text: bytes, *, compressed: bool) -> bytes:
    """An ``iTXt`` chunk: keyword, NUL, flag, method, empty language tag and translated keyword, the text."""
    return chunk(b"iTXt", keyword + b"\0" + bytes([int(compressed), 0]) + b"\0\0" + text)


def png_with(*chunks: bytes) -> bytes:
    """A 1x1 PNG with ``chunks`` before its ``IEND``."""
    image = blank_png()
    return image[:-12] + b"".join(chunks) + image[-12:]


def zip_of(*entries: tuple[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip holding ``entries`` (a name may repeat: the standard writer warns, and writes it)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in entries:
            z.writestr(name, data)
    return buf.getvalue()


def encrypted(data: bytes) -> bytes:
    """``data`` (a zip) with its first entry marked encrypted, as a password-protected CHARX is."""
    out = bytearray(data)
    out[out.find(b"PK\x03\x04") + 6] |= 1  # general purpose flag bit 0, local header
    out[out.find(b"PK\x01\x02") + 8] |= 1  # and central directory
    return bytes(out)


_PEAK: Final = (
    "import os, sys\n"
    "from charfmt.cli import main\n"
    "try:\n"
    "    status = main(sys.argv[1:])\n"
    "finally:\n"
    "    with open('/proc/self/status') as f:\n"
    "        peak = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
    "    with open(os.environ['CHARFMT_TEST_PEAK'], 'w') as f:\n"
    "        f.write(peak)\n"
    "sys.exit(status)\n"
)
"""``charfmt ARGS``, writing its peak resident memory (VmHWM: this process's own, in kB) at exit."""


@dataclass(frozen=True)
class Run:
    """What a ``charfmt`` child did."""

    status: int
    out: str
    err: str
    seconds: float
    peak_mb: float


def run_cli(args: list[str], tmp_path: Path) -> Run:
    """``charfmt ARGS`` in a fresh child process, bounded in wall time, with its own peak memory."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("peak memory is read from /proc/self/status (Linux)")
    peak_file = tmp_path / "peak"
    env = {**os.environ, "CHARFMT_TEST_PEAK": str(peak_file)}
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")])
    env.pop("CHARFMT_TOKEN", None)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, timeout=WALL, check=False, env=env
    )
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - start, int(peak_file.read_text()) / 1024)


def one_error_line(run: Run) -> str:
    """The child's one line of error (exit 1, nothing on standard output, no traceback); its text."""
    assert run.status == 1, run
    assert run.out == "" and "Traceback" not in run.err, run
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("charfmt: error: "), run.err
    return lines[0]
