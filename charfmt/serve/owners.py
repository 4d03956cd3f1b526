"""Who a request is: the bearer credential it carries, as the owner of the sessions it makes.

Three modes (``docs/SESSIONS.md`` says what each protects):

- no auth: every client is the one owner ``""``; a session's name is all it takes to read it;
- ``--token``: one trusted front end (owner ``""``), which names its players' sessions itself;
- ``--tokens FILE``: one token per player or front end, each its own owner: a session made with
  one token does not exist for another (the same name under two tokens is two sessions), and
  ``user`` alone is never a capability. The file holds each token's name and SHA-256 hash, never
  the token (``charfmt serve --new-token NAME`` makes a token and its line). Both flags together:
  the ``--token`` holder is the owner ``""`` beside the players.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from charfmt.diagnostics import CharfmtError

HASH_PREFIX: Final = "sha256:"
MIN_TOKEN: Final = 16
"""Characters of a token, at least: ``--token``'s and each ``--tokens`` one (``--new-token`` makes 43: 256 random
bits)."""

MAX_FILE: Final = 1 << 20
"""Bytes of a ``--tokens`` file."""

NAME: Final = re.compile(r"[A-Za-z0-9._@+=-]{1,64}")
"""What a token's name (its sessions' owner) may hold: printable, no spaces, no ``:`` (it goes into logs)."""

_LINE: Final = re.compile(r"(\S+)\s+(\S+)")


def hash_token(token: str) -> str:
    """The line's hash of ``token``: ``sha256:`` and 64 hex digits (a token is random: no salt is needed)."""
    return HASH_PREFIX + hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def token_line(name: str, token: str) -> str:
    """The ``--tokens`` file's line for ``token``, named ``name``; a ``CharfmtError`` for a bad name or token."""
    if NAME.fullmatch(name) is None:
        raise CharfmtError(f"a token's name is 1 to 64 letters, digits and ._@+=- (got {name[:40]!r})")
    if (why := token_problem(token)) is not None:
        raise CharfmtError(why)
    return f"{name} {hash_token(token)}"


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a credential of the server (``--token``, a ``--tokens`` one), or ``None``: one rule
    for both (an empty one would turn auth off; a short one is guessed)."""
    if len(token) < MIN_TOKEN or any(c.isspace() or not c.isprintable() for c in token):
        short = f"one of {len(token)} character{'s' if len(token) != 1 else ''}"
        got = "an empty one" if not token else short if len(token) < MIN_TOKEN else "one with a space"
        return (
            f"a token is at least {MIN_TOKEN} characters, printable and without spaces, not {got}"
            " (--new-token makes one)"
        )
    return None


def auth_mode(token: str | None, tokens: Sequence[tuple[str, str]]) -> str:
    """What the server asks of a client, as its start says it (``docs/SESSIONS.md``'s three modes)."""
    players = len({name for name, _ in tokens})
    per_player = f"per-player tokens (--tokens: {players:,} name{'s' if players != 1 else ''})"
    if token and tokens:
        return f"auth: {per_player}, and one front end's token (--token) beside them"
    if token:
        return "auth: one bearer token (--token): one trusted front end, which sees every session"
    if tokens:
        return f"auth: {per_player}: each token's sessions its own"
    return "auth: none: any client that reaches the port may use it and every session (--token or --tokens to ask)"


def read_tokens(path: str | Path) -> tuple[tuple[str, str], ...]:
    """The (name, hash) entries of a ``--tokens`` file: ``NAME sha256:HEX`` a line, ``#`` comments; a
    ``CharfmtError`` naming the file and line of anything else."""
    file = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
        text = data.decode("utf-8")
    except OSError as e:
        raise CharfmtError(f"{file}: cannot read the tokens file: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CharfmtError(f"{file}: the tokens file is not UTF-8 text") from None
    if len(data) > MAX_FILE:
        raise CharfmtError(f"{file}: the tokens file is larger than {MAX_FILE:,} bytes")
    entries: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line)
        if m is None or NAME.fullmatch(m[1]) is None or re.fullmatch(r"sha256:[0-9a-f]{64}", m[2]) is None:
            raise CharfmtError(  # (the line is not shown: it may hold a token written there by mistake)
                f"{file}:{number}: expected 'NAME sha256:HEX', the hash of a token, never the token "
                "(charfmt serve --new-token NAME writes such a line)"
            )
        if m[2] in seen:
            raise CharfmtError(f"{file}:{number}: the same token as line {seen[m[2]]}")
        seen[m[2]] = number
        entries.append((m[1], m[2]))
    if not entries:
        raise CharfmtError(f"{file}: the tokens file holds no token (a line 'NAME sha256:HEX' each)")
    return tuple(entries)


class Credentials:
    """The server's credentials: who each ``Authorization`` header is (see the module docstring)."""

    def __init__(self, token: str | None, tokens: Sequence[tuple[str, str]] = ()) -> None:
        self._token = token.encode() if token else None
        self._owners = {digest: name for name, digest in tokens}
        self.open = self._token is None and not self._owners
        """No credential is asked for: every client is the owner ``""``."""

    def owner(self, header: str | None) -> str | None:
        """The owner ``header`` (``Authorization``) proves, or ``None`` where it proves none."""
        if self.open:
            return ""
        if not header or header[:7].lower() != "bearer ":  # the scheme's case does not matter (RFC 9110)
            return None
        given = header[7:].strip()
        if self._token is not None and hmac.compare_digest(given.encode("utf-8", "replace"), self._token):
            return ""
        return self._owners.get(hash_token(given)) if self._owners else None
