"""What decides whether the mypyc-compiled stream reader (``charfmt._stream_c``) may run.

Shared by the build hook (``hatch_build.py``, at install) and ``charfmt.stream`` (at import), so
that both compute the same digest and read ``CHARFMT_PURE_PYTHON`` by the same rule. The hook
loads this file by its path (it cannot import the package it is building): standard library
only, no import of ``charfmt``.

- ``package_digest``: mypyc compiles in more than the reader's own modules (``charfmt/_stream/``):
  it inlines ``Final`` constants of the modules the reader imports (``DEFAULT_MAX_SIZE`` of
  ``charfmt.parser``, for one), and of theirs. So the digest stamped into the twin covers
  every module of the package, subpackages included (``charfmt/**/*.py``): an edit to any
  of them turns the twin off until the next install.
- ``pure_python_requested``: only a true-ish ``CHARFMT_PURE_PYTHON`` (``1``, ``true``, ``yes``,
  ``on``, any case) asks for the pure reader; ``0``, ``false``, ``no``, ``off`` or empty do not.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

SOURCE: Final = "_stream"
"""The package the twin is compiled from (``charfmt._stream``: the stream reader)."""
TWIN: Final = "_stream_c"
"""The compiled twin's package name in the package (``charfmt._stream_c``); never part of the digest."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})


def pure_python_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CHARFMT_PURE_PYTHON`` asks for the pure-Python reader (a true-ish value only)."""
    value = (os.environ if environ is None else environ).get("CHARFMT_PURE_PYTHON", "")
    return value.strip().lower() in _TRUE


def digest_files(package: Path) -> list[Path]:
    """The files ``package_digest`` reads: the package's modules, ``**/<name>.py``, sorted by their path in it.

    Left out: the twin's folder (``_stream_c/``, whose sources are only ever written in the
    build's own copy) and any ``.py`` file or folder whose name is no module name (an
    editor's backup or lock file, ``__pycache__`` holds none), which nothing can import and
    the wheel would not need.
    """
    found = []
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[0] != TWIN and all(part.isidentifier() for part in parts):
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(package).as_posix())


def package_digest(package: Path) -> str:
    """SHA-256 over the path (in the package), size and content of each file of ``digest_files(package)``.

    Raises ``OSError`` when a file cannot be read.
    """
    h = hashlib.sha256()
    for path in digest_files(package):
        data = path.read_bytes()
        h.update(f"{path.relative_to(package).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()
