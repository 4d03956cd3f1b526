"""The pages shipped with the server (``charfmt/serve/static``): the playground and the icon browsers ask for."""

from __future__ import annotations

from importlib import resources


def static_page(name: str = "playground.html") -> str:
    """A page shipped in ``charfmt/serve/static`` (the playground)."""
    return resources.files("charfmt.serve").joinpath("static", name).read_text(encoding="utf-8")


def static_bytes(name: str) -> bytes:
    """A file shipped in ``charfmt/serve/static`` (the icon), as bytes."""
    return resources.files("charfmt.serve").joinpath("static", name).read_bytes()
