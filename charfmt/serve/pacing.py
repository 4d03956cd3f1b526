"""Pacing: the heavy steps of many turns taken one per event-loop iteration, so streams keep flowing.

A turn has three lumps of work with nothing to wait on: its request read (the JSON, the
player's turn, a front end's own history), its start (the prompt rendered, the upstream
request written) and its end (the reply read strictly, its canonical form, the history
kept). Fifty front ends that start (or end) at one instant would otherwise run fifty lumps
back to back in one pass of the event loop, and every chunk of the replies already
streaming, arrived meanwhile, would wait behind all of them. Through a :class:`Pacer`, each
lump waits for its own pass: between two lumps the loop reads what arrived and forwards it.
A lump runs as soon as the loop is free; when fifty arrive at once, the last one runs after
the forty-nine before it, as it would have anyway, the streams served in between.
"""

from __future__ import annotations

import asyncio
import collections


class Pacer:
    """Release waiting tasks one per pass of the event loop, in the order they came."""

    def __init__(self) -> None:
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False

    async def turn(self) -> None:
        """Wait until this task's turn: the next pass of the loop if none is waiting, else after those before it."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a test's, a server's restart): the old one's waiters are gone
            self._loop, self._waiting, self._scheduled = loop, collections.deque(), False
        waiter = loop.create_future()
        self._waiting.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._release)
        await waiter

    def _release(self) -> None:
        """Wake the first waiter still waiting (it runs in the next pass), and come back in the next pass."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # (a cancelled waiter: its client went away)
                waiter.set_result(None)
                break
        if self._waiting and self._loop is not None:
            self._loop.call_soon(self._release)
        else:
            self._scheduled = False
