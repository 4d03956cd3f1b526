"""What decides whether a mypyc-compiled twin (``charfmt._stream_c``, ``charfmt._strict_c``) may run.

Shared by the build hook (``hatch_build.py``, at install), ``charfmt.stream`` and ``charfmt.parser``
(at run time), so that all compute the same digest and read ``CHARFMT_PURE_PYTHON`` by the same
rule. The hook loads this file by its path (it cannot import the package it is building):
standard library only, no import of ``charfmt``.

- :data:`TWINS`: each package compiled, and the name of its compiled copy. A twin's own
  modules import each other relatively, so that the copy imports its own.
- ``package_digest``: mypyc compiles in more than a twin's own modules: it inlines ``Final``
  constants of the modules they import (``DEFAULT_MAX_SIZE`` of ``charfmt.parser``, for one),
  and of theirs. So the digest stamped into a twin covers every module of the package,
  subpackages included (``charfmt/**/*.py``): an edit to any of them turns the twins off until
  the next install.
- ``pure_python_requested``: only a true-ish ``CHARFMT_PURE_PYTHON`` (``1``, ``true``, ``yes``,
  ``on``, any case) asks for the pure readers; ``0``, ``false``, ``no``, ``off`` or empty do not.
- ``load``: a twin, if it was built from the very package installed around it and pure Python
  was not asked for; else ``None``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Final

TWINS: Final = {"_stream": "_stream_c", "_strict": "_strict_c"}
"""Each package compiled with mypyc (``charfmt.<source>``) and its compiled copy's name (never part of the digest)."""
SOURCE: Final = "_stream"
"""The stream reader's package (``charfmt._stream``), the first twin's source."""
TWIN: Final = TWINS[SOURCE]
"""The compiled stream reader's package name in the package (``charfmt._stream_c``)."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_TWIN_NAMES: Final = frozenset(TWINS.values())


def pure_python_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CHARFMT_PURE_PYTHON`` asks for the pure-Python readers (a true-ish value only)."""
    value = (os.environ if environ is None else environ).get("CHARFMT_PURE_PYTHON", "")
    return value.strip().lower() in _TRUE


def digest_files(package: Path) -> list[Path]:
    """The files ``package_digest`` reads: the package's modules, ``**/<name>.py``, sorted by their path in it.

    Left out: the twins' folders (``_stream_c/``, ``_strict_c/``, whose sources are only ever
    written in the build's own copy) and any ``.py`` file or folder whose name is no module name
    (an editor's backup or lock file, ``__pycache__``), which nothing can import and the wheel
    would not need.
    """
    return [path for _name, path in _modules(package)]


def _modules(package: Path) -> list[tuple[str, Path]]:
    """``digest_files`` with each file's path in the package (``_stream/reader.py``), by ``os.walk``:
    a third of ``Path.rglob``'s time, which a start-up that checks a twin notices."""
    found: list[tuple[str, Path]] = []
    for folder, subfolders, names in os.walk(package):
        inside = Path(folder).relative_to(package).parts
        subfolders[:] = [d for d in subfolders if d.isidentifier() and (inside or d not in _TWIN_NAMES)]
        prefix = "".join(f"{part}/" for part in inside)
        found += [(prefix + n, Path(folder, n)) for n in names if n.endswith(".py") and n[:-3].isidentifier()]
    return sorted(found)


def package_digest(package: Path) -> str:
    """SHA-256 over the path (in the package), size and content of each file of ``digest_files(package)``.

    Raises ``OSError`` when a file cannot be read.
    """
    h = hashlib.sha256()
    for name, path in _modules(package):
        with open(path, "rb") as f:
            data = f.read()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def load(twin: str, package: Path | None = None) -> ModuleType | None:
    """``charfmt.<twin>`` if it was compiled from the package it sits in (``package``: that package's
    folder, default the installed one), and ``CHARFMT_PURE_PYTHON`` does not ask for pure Python; else ``None``."""
    if pure_python_requested():
        return None
    try:
        module = importlib.import_module(f"charfmt.{twin}")
        digest = package_digest(Path(__file__).parent if package is None else package)
    except (ImportError, OSError):  # not built (no compiler), or no source to compare with
        return None
    return module if getattr(module, "SOURCE_DIGEST", None) == digest else None
