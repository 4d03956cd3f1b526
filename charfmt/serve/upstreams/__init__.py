"""The upstreams of ``charfmt serve``: one module per kind, one row each in ``KINDS``, opened by the settings.

Adding an upstream of another protocol is one module here (a class meeting ``Upstream``, and its
``KIND`` row), its row in ``KINDS``, its test and its line in ``docs/SERVE.md``: the command's flag,
the settings and the checks before the server starts all follow from the row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from charfmt.diagnostics import CharfmtError
from charfmt.serve.upstreams import llama, openai, script
from charfmt.serve.upstreams.base import Upstream, UpstreamFailure, UpstreamKind

if TYPE_CHECKING:
    from charfmt.serve.settings import Settings

__all__ = ["KINDS", "Upstream", "UpstreamFailure", "UpstreamKind", "kind_of", "open_upstream", "source"]

KINDS: Final[tuple[UpstreamKind, ...]] = (openai.KIND, llama.KIND, script.KIND)
"""Every upstream kind ``charfmt serve`` can open, in ``--help``'s order (one flag each)."""

_FIELDS: Final = {"upstream_url": openai.KIND, "model_path": llama.KIND}
"""The settings fields that name a kind's target without ``upstream_kind`` (``Settings(upstream_url=...)``)."""


def kind_of(name: str) -> UpstreamKind:
    """The row of the kind called ``name``, or a ``CharfmtError`` naming the kinds there are."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise CharfmtError(f"no upstream kind {name!r}: one of {', '.join(k.name for k in KINDS)}")


def source(settings: Settings) -> tuple[UpstreamKind, str] | None:
    """The kind of upstream ``settings`` name and its target (``None``: only a ready ``Settings.upstream``)."""
    if settings.upstream_kind is not None and settings.upstream_target is not None:
        return kind_of(settings.upstream_kind), settings.upstream_target
    for field, kind in _FIELDS.items():
        target = getattr(settings, field)
        if target is not None:
            return kind, target
    return None


def open_upstream(settings: Settings) -> Upstream:
    """The upstream ``settings`` name: the ready one, else its kind's, opened (the first turn, in a worker thread)."""
    if settings.upstream is not None:
        return settings.upstream
    found = source(settings)
    if found is None:
        raise CharfmtError(f"no upstream: give one of {', '.join(k.flag for k in KINDS)} (or a ready upstream)")
    kind, target = found
    return kind.open(settings, target)
