"""Find the user-editable folders (``grammars/``, ``prompts/``) wherever charfmt runs from.

An installed wheel carries them inside the package (hatchling force-include); a
source checkout and an editable install see them only at the repository top level,
so the package copy is tried first and the source tree second.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Final

_PACKAGE_DIR: Final = Path(__file__).resolve().parent
_FOLDERS: Final = ("grammars", "prompts")


@cache
def resource_dir(name: str) -> Path:
    """The folder ``name`` (``grammars`` or ``prompts``) that this charfmt ships."""
    if name not in _FOLDERS:
        raise ValueError(f"unknown resource folder {name!r}")
    # The folder inside the package (a wheel) is what importlib.resources.files() finds for
    # a package on the file system; looking there directly spares importing it (~5 ms).
    inside = _PACKAGE_DIR / name
    if inside.is_dir():
        return inside
    beside = _PACKAGE_DIR.parent / name
    if beside.is_dir():
        return beside
    raise FileNotFoundError(
        f"charfmt cannot find its {name}/ folder (looked in {inside} and {beside}); reinstall charfmt"
    )


def read_text(folder: str, filename: str) -> str:
    """Read one shipped file as UTF-8."""
    return (resource_dir(folder) / filename).read_text(encoding="utf-8")
