"""A scripted upstream (``charfmt serve --script FILE.jsonl``): each turn answered with the file's next reply.

No model and no network: a front end is built and tested against the replies it will meet (a
valid one, a damaged one, a scene's), in the order written, streamed as a model streams them.
Each line of the file is one reply as the model would write it, a JSON string
(``"{\\"chats\\": [...]}"``, or any text a model writes); after the last line the script starts
again. A reply longer than the turn's ``max_tokens`` (each chunk of ``CHUNK`` characters a token)
is cut there, with the finish reason ``length``, as a model's would be.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

from charfmt.diagnostics import CharfmtError
from charfmt.llm._replies import Delta
from charfmt.serve.upstreams.base import UpstreamKind

if TYPE_CHECKING:
    from charfmt.serve.settings import Settings

CHUNK: Final = 8
"""Characters per streamed delta (one token of the turn's budget)."""

MAX_SCRIPT: Final = 16 << 20
"""Bytes of a script file, at most."""


def read_script(path: str) -> list[str]:
    """The replies of the script at ``path``, one JSON string a line; a ``CharfmtError`` naming the line if not."""
    try:
        size = os.path.getsize(path)
        if size > MAX_SCRIPT:
            raise CharfmtError(f"{path}: the script is {size:,} bytes (at most {MAX_SCRIPT:,})")
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_SCRIPT + 1)
    except OSError as e:
        raise CharfmtError(f"{path}: cannot read the script: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CharfmtError(f"{path}: the script is not UTF-8 (byte {e.start})") from None
    replies: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            reply = json.loads(line)
        except ValueError as e:
            raise CharfmtError(f"{path}:{number}: not a JSON string: {e}") from None
        if not isinstance(reply, str):
            raise CharfmtError(f"{path}:{number}: a reply is a JSON string, not {type(reply).__name__}")
        replies.append(reply)
    if not replies:
        raise CharfmtError(f"{path}: the script holds no reply")
    return replies


class ScriptUpstream:
    """The replies of a script, one per turn in order (then again from the first), streamed in ``CHUNK``s."""

    def __init__(self, replies: list[str], name: str = "script") -> None:
        if not replies:
            raise CharfmtError("a script needs at least one reply")
        self.name = name
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        """The request bodies received, in order (what a test checks the server sent)."""
        self._next = 0

    async def aclose(self) -> None:
        """Nothing to close."""

    async def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        """The script's next reply, a ``CHUNK`` of characters a delta, within ``max_tokens`` deltas."""
        self.requests.append(body)
        text = self.replies[self._next % len(self.replies)]
        self._next += 1
        pieces = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
        cut = len(pieces) > max_tokens
        pieces = pieces[:max_tokens]
        for i, piece in enumerate(pieces, 1):
            await asyncio.sleep(0)  # (each delta its own pass of the event loop, as a model's arrive)
            yield Delta(piece, ("length" if cut else "stop") if i == len(pieces) else None)


def _open(settings: Settings, path: str) -> ScriptUpstream:
    return ScriptUpstream(read_script(path), name=path)


def _check(path: str) -> None:
    read_script(path)


KIND: Final = UpstreamKind(
    "script", "--script", "FILE.jsonl", "answer each turn with the next reply of FILE.jsonl (no model: for "
    "building and testing front ends)", _open, check=_check, shown="script", file="script file", prefills=False,
)  # fmt: skip
"""This upstream's row in ``charfmt.serve.upstreams.KINDS``: ``--script FILE.jsonl``."""
