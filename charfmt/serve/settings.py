"""Everything ``create_app`` needs, as one frozen value: the CLI builds it from flags, tests by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from charfmt.prompt.character import Character
    from charfmt.prompt.lorebook import Lorebook
    from charfmt.prompt.scene import Scene
    from charfmt.serve.upstreams import Upstream
    from charfmt.store import Store

DEFAULT_MAX_TOKENS: Final = 512
"""Tokens of one reply, at most (the grammar's bounds are computed from it)."""


@dataclass(frozen=True)
class Settings:
    """One server: the character, the model behind it, the reply shape, and every limit."""

    character: Character
    """The character served (with ``scene``: the cast member whose words read the player's shorthand)."""
    scene: Scene | None = None
    """A scene (a cast and a narrator) served instead of one character."""
    upstream_url: str | None = None
    """The upstream's ``…/v1`` or ``…/chat/completions`` URL (``None`` with ``model_path`` or ``upstream``)."""
    api_key: str | None = None
    """Sent upstream as ``Authorization: Bearer`` (the CLI reads it from ``--api-key-env``); never shown."""
    api_key_env: str | None = None
    """The environment variable ``api_key`` came from: an upstream 401/403's message names it."""
    server: str = "llama-server"
    """What ``upstream_url`` runs: which request field carries the grammar or schema."""
    model_path: str | None = None
    """A GGUF file run in-process by llama.cpp instead of an upstream URL."""
    chat_format: str | None = None
    """``model_path``'s chat format, a llama-cpp-python name (``None``: the GGUF's own template)."""
    upstream_kind: str | None = None
    """An upstream kind of ``charfmt.serve.upstreams.KINDS`` by name (``charfmt serve``'s flag chooses it), with
    ``upstream_target``: the upstream the server opens (``upstream_url`` and ``model_path`` name their kinds too)."""
    upstream_target: str | None = None
    """What ``upstream_kind`` opens: its flag's value (a URL, a file)."""
    upstream: Upstream | None = None
    """A ready upstream (tests, embedding); used instead of ``upstream_url``/``model_path``."""
    model_name: str | None = None
    """The ``model`` sent upstream and answered to front ends (default: the character's name)."""
    reply_format: str = "canonical"
    constrained: bool = True
    """Send the reply grammar or schema upstream (a ``/v1/turn`` request may turn it off)."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    n_ctx: int = 8192
    """The upstream's context window: the prompt's token budget is what ``max_tokens`` leaves."""
    tokenizer: str | None = None
    """A ``tokenizer.json`` or tiktoken name to count the upstream's prompts with (``tokens.counter_for``);
    ``None``: the model's own where known (``model_path``; ``model_name``'s tiktoken encoding), else the estimate."""
    timeout: float = 120.0
    """Seconds the upstream may send no event (keep-alive comments do not count)."""
    token: str | None = None
    """Bearer token every ``/v1`` request must carry (``None``: no auth): one trusted front end."""
    tokens: tuple[tuple[str, str], ...] = ()
    """Per-player credentials (``--tokens FILE``, ``charfmt.serve.owners.read_tokens``): (name, ``sha256:`` hash)
    each; a session belongs to the token that made it."""
    cors: tuple[str, ...] = ()
    """Origins allowed to call from a browser (none: CORS off)."""
    allowed_hosts: tuple[str, ...] = ()
    """``Host`` names answered besides loopback and the address a request came in on (``--allow-host``;
    ``*.lan`` a domain's names, ``*`` any: the DNS-rebinding guard off). Others get a 421."""
    log: Path | None = None
    """A JSON Lines file each turn is appended to (``charfmt report`` reads it)."""
    max_request_bytes: int = 1 << 20
    """Bytes of a request body or WebSocket message."""
    max_say: int = 8000
    """Characters of the player's turn."""
    max_messages: int = 512
    """Messages of a chat-completions request."""
    store: str | Path | Store | None = None
    """Where sessions are kept: a SQLite file, a ``postgresql://`` DSN, or a ready ``charfmt.store.Store``
    (closed by its owner); ``None``: in memory (a restart forgets them). ``charfmt serve``'s default is
    ``charfmt.store.default_store_path()``."""
    max_sessions: int | None = 1000
    """Sessions kept (past it, the least recently written is evicted, and logged); ``None``: no bound."""
    max_session_age: float | None = None
    """Seconds a session may go unwritten before it is evicted (logged); ``None``: no bound."""
    session_bytes: int = 256 << 10
    """Bytes of history a session keeps (the oldest exchanges go first, logged)."""
    max_length: int | None = None
    """Sentences longer than this also end at ``、`` or ``,`` (early TTS), as ``charfmt stream``."""
    playground: bool = True
    """Serve the playground page at ``GET /``."""
    lorebooks: tuple[Lorebook, ...] = ()
    """Lore beyond the character card's own book (``--lorebook``), scanned every turn."""
    greeting: int | None = 0
    """The card's greeting a new session opens with (0: ``first_mes``; ``None``: none; ``--greeting``)."""

    @property
    def cast(self) -> Character | Scene:
        """Who answers each turn: the scene where one is served, else the character (either a
        ``charfmt.prompt.cast.Cast``: a door calls it without asking which)."""
        return self.scene if self.scene is not None else self.character

    def secrets(self) -> tuple[str, ...]:
        """What the server never shows (written ``***`` in answers and logs): the upstream's key, the token."""
        return tuple(s for s in (self.api_key, self.token) if s)
