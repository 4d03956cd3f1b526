"""``charfmt serve``: one server between any front end and any model.

``create_app(Settings(character=..., upstream_url=...))`` is the ASGI app (Starlette); the
CLI (``charfmt.cli.serve``) only parses flags into ``Settings`` and runs uvicorn. Needs the
``serve`` extra: ``pip install 'charfmt[serve]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from charfmt.serve.page import static_page
from charfmt.serve.settings import Settings

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["Settings", "create_app", "static_page"]


def create_app(settings: Settings) -> Starlette:
    """The ASGI app for ``settings`` (see ``charfmt.serve.app``)."""
    from charfmt.diagnostics import CharfmtError  # noqa: PLC0415 (import cost: pydantic loads on first use)

    try:
        from charfmt.serve.app import create_app as _create  # noqa: PLC0415 (Starlette loads only here)
    except ImportError as e:
        raise CharfmtError(f"charfmt serve needs starlette ({e}): pip install 'charfmt[serve]'") from None

    return _create(settings)
