"""A turn's prompt built off the event loop where its lore makes it slow.

A turn's prompt is built on the event loop (a tenth of a millisecond with a short history and no
lore: a worker thread would only add the handoff). A character with a large lorebook scans every
entry's keys each turn: a 20,000-entry book took seconds, and every other client of the server
waited that long (``GET /v1/info`` included). From :data:`LORE_IN_THREAD` entries on, the prompt is
built in one worker thread of the engine's: the event loop goes on serving the others (Python
hands it the interpreter every few milliseconds), and the prompts of several turns are built one
after another, as they were on the loop (the caches they share are never written at once).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    from charfmt.prompt.lorebook import Lorebook

_T = TypeVar("_T")

LORE_IN_THREAD: Final = 200
"""Lore entries from which a turn's prompt is built in a worker thread (200 entries scan in about 5 ms here)."""


class PromptWorker:
    """Where a served character's turn prompts are built: on the loop, or (much lore) in one worker thread."""

    def __init__(self, served: Any, lorebooks: Sequence[Lorebook] = ()) -> None:
        from charfmt.prompt._card_prompt import lore_entries  # noqa: PLC0415 (import cost: pydantic loads on first use)

        self.entries = lore_entries(served, lorebooks)
        """The lore entries a turn scans."""
        self.threaded = self.entries >= LORE_IN_THREAD
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, build: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``build(*args, **kwargs)``: called here, or awaited from the worker thread where the lore is large."""
        if not self.threaded:
            return build(*args, **kwargs)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="charfmt-prompt")
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(build, *args, **kwargs))

    def close(self) -> None:
        """Let the worker thread go (a prompt under way ends first, unwaited)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
