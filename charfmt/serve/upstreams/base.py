"""What every upstream of ``charfmt serve`` is: the ``Upstream`` protocol, its one failure, and its kind's row.

An upstream kind is one module of ``charfmt/serve/upstreams/`` and one ``UpstreamKind`` row in
``charfmt.serve.upstreams.KINDS``: the command's flag, the settings it reads and the checks before the
server starts all come from the row.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from charfmt.llm._replies import UpstreamError

if TYPE_CHECKING:
    from charfmt.llm._replies import Delta
    from charfmt.serve.settings import Settings


class UpstreamFailure(UpstreamError):
    """The upstream failed; ``status`` is what the front end is told, ``retry_after`` (seconds) where known."""

    def __init__(
        self, message: str, *, status: int = 502, retry_after: int | None = None, upstream_status: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.upstream_status = upstream_status
        """The upstream's own HTTP status, where it answered with one."""


class Upstream(Protocol):
    """A model: a chat-completion request body in, the reply's deltas out."""

    name: str
    """What the logs call this upstream (the URL or the model file)."""

    def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        """The deltas of the reply to ``body``."""
        ...

    async def aclose(self) -> None:
        """Release connections or the model."""
        ...


def _nothing() -> None:
    return None


def _anything(target: str) -> None:
    return None


@dataclass(frozen=True)
class UpstreamKind:
    """One kind of upstream: how ``charfmt serve`` names it, opens it and checks it before it starts."""

    name: str
    """The kind's name (``Settings.upstream_kind``)."""
    flag: str
    """``charfmt serve``'s flag that chooses it; its value is the kind's target (a URL, a file)."""
    metavar: str
    """What the flag's value is, in ``--help``."""
    help: str
    """The flag's help line."""
    open: Callable[[Settings, str], Upstream]
    """The upstream for ``settings`` and the target (called once, on the first turn, in a worker thread)."""
    require: Callable[[], object] = _nothing
    """Raises a ``CharfmtError`` naming the extra the kind needs where it is missing (checked before the start)."""
    check: Callable[[str], None] = _anything
    """Raises a ``CharfmtError`` where the target cannot be served (``charfmt serve`` exits 1 before it starts)."""
    local: bool = False
    """A model run in this process: opened before the server starts (one that cannot load stops it), its
    tokens per character measured once loaded, constrained as llama-server is (``server``)."""
    shown: str | None = None
    """What ``/v1/info`` says runs the model (``None``: ``Settings.server``)."""
    file: str | None = None
    """What the target is where it is a file ("script file"): one missing or a folder is a usage error (exit 2)."""
    prefills: bool | None = None
    """Whether the upstream goes on from a last answer (a continue's prefill): ``None``, as its ``server`` does
    (``charfmt.serve.continuation.PREFILL``); ``False`` for one that always writes a whole reply (a script)."""

    @property
    def dest(self) -> str:
        """The flag's attribute on the parsed arguments."""
        return self.flag.lstrip("-").replace("-", "_")

    def server(self, settings: Settings) -> str:
        """The server whose request field carries the grammar or schema (``charfmt.constrain.engines.SERVERS``)."""
        return "llama-server" if self.local else settings.server
