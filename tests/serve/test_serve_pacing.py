"""Pacing (``charfmt.serve.pacing``): turns' starts and ends one per pass of the event loop.

The pacer on its own (one waiter per pass, in order; a cancelled waiter skipped; a new event
loop after an old one died with waiters), then through the engine: a reply already streaming
is read on while twenty turns wait to start, not after all of them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import ROOT

from charfmt import Character
from charfmt.llm._replies import Delta
from charfmt.serve.pacing import Pacer

pytest.importorskip("starlette")

from charfmt.serve.settings import Settings
from charfmt.serve.turns import Done, Engine, Raw

REX = Character.load(ROOT / "examples" / "characters" / "rex.toml")


async def _passes(log: list[str], stop: asyncio.Event) -> None:
    """Note each pass of the loop (a task that yields once per pass)."""
    n = 0
    while not stop.is_set():
        log.append(f"pass {n}")
        n += 1
        await asyncio.sleep(0)


def test_waiters_go_one_per_pass_in_the_order_they_came() -> None:
    async def main() -> list[str]:
        pacer, log, stop = Pacer(), [], asyncio.Event()

        async def waiter(i: int) -> None:
            await pacer.turn()
            log.append(f"w{i}")

        ticker = asyncio.ensure_future(_passes(log, stop))
        await asyncio.gather(*(waiter(i) for i in range(6)))
        stop.set()
        await ticker
        return log

    log = asyncio.run(main())
    released = [entry for entry in log if entry.startswith("w")]
    assert released == [f"w{i}" for i in range(6)]
    passes = [sum(1 for e in log[: log.index(w)] if e.startswith("pass")) for w in released]
    assert all(b > a for a, b in itertools.pairwise(passes)), log  # never two in one pass


def test_a_cancelled_waiter_does_not_hold_up_those_behind_it() -> None:
    async def main() -> list[int]:
        pacer, done = Pacer(), []

        async def waiter(i: int) -> None:
            await pacer.turn()
            done.append(i)

        tasks = [asyncio.ensure_future(waiter(i)) for i in range(4)]
        await asyncio.sleep(0)  # all four waiting
        tasks[1].cancel()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        return done

    assert asyncio.run(main()) == [0, 2, 3]


def test_a_pacer_serves_a_new_loop_after_its_old_one_died_with_waiters() -> None:
    pacer = Pacer()
    left: list[asyncio.Future[None]] = []

    async def abandon() -> None:
        left.extend(asyncio.ensure_future(pacer.turn()) for _ in range(2))

    old = asyncio.new_event_loop()
    old.run_until_complete(abandon())  # stops with both waiting, and the pacer's next release never run
    old.close()
    assert not any(w.done() for w in left)

    async def again() -> str:
        await asyncio.wait_for(pacer.turn(), 5)
        return "served"

    assert asyncio.run(again()) == "served"


class _Upstream:
    """Session A's reply waits for ``go`` after its first chunk; every other turn's upstream notes its start."""

    name = "test"

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.go = asyncio.Event()

    async def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        user = body["messages"][-1]["content"]
        if "session A" not in user:
            self.log.append("start")
            yield Delta('{"chats": [{"type": "E", "order": 1, "body": "ok"}]}', "stop")
            return
        yield Delta('{"chats": [{"type": "E", "order": 1, "body": "one ')
        await self.go.wait()
        yield Delta('two"}]}')
        yield Delta("", "stop")

    async def aclose(self) -> None:
        pass


def _race() -> list[str]:
    """Session A streams; after its first chunk twenty turns start at once, and A's next chunk arrives behind them."""

    async def main() -> list[str]:
        log: list[str] = []
        upstream = _Upstream(log)
        engine = Engine(Settings(character=REX, upstream=upstream), upstream)  # type: ignore[arg-type]
        first = asyncio.Event()

        async def session_a() -> None:
            async for batch in engine.turn_batches([], engine.player_turn("session A"), cues=False):
                for piece in batch:
                    if isinstance(piece, Raw):
                        log.append(f"A: {piece.text.strip()[-3:]}")
                        first.set()
                    elif isinstance(piece, Done):
                        log.append("A done")

        async def other(i: int) -> None:
            async for _ in engine.turn_batches([], engine.player_turn(f"player {i}"), cues=False):
                pass

        a = asyncio.ensure_future(session_a())
        await first.wait()
        others = [asyncio.ensure_future(other(i)) for i in range(20)]  # twenty turns start at once...
        upstream.go.set()  # ...and A's next chunk arrives behind them, in the same pass
        await asyncio.wait_for(asyncio.gather(a, *others), 30)
        return log

    return asyncio.run(main())


def test_a_streaming_reply_is_read_on_while_other_turns_wait_to_start() -> None:
    log = _race()
    assert log[0] == "A: one"
    assert log.count("start") == 20 and "A done" in log
    assert log.index("A: }]}") < log.index("start") + 2, log  # not behind twenty renders


def test_without_the_pacer_the_same_chunk_waits_behind_every_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with the pacer's wait taken out, A's chunk comes after all twenty starts."""

    async def no_wait(self: Pacer) -> None:
        return None

    monkeypatch.setattr(Pacer, "turn", no_wait)
    log = _race()
    assert log.index("A: }]}") > max(i for i, e in enumerate(log) if e == "start")


# --- text holding lone UTF-16 surrogates (JSON may say "\udc00": no character) -----------------------


class _Lone:
    """An upstream whose text holds lone surrogates (as a JSON decoder gives ``"\\udc00"``), one a delta's
    last character, one its only one: no UTF-8 writer takes them. (A pair split across two deltas is made
    whole by the HTTP reader: ``tests/llm/test_http_client.py``.)"""

    name = "lone"

    async def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        for text in ('{"chats": [{"type": "C", "order": 1, "body": "<msg>hi \U0001f600 and \udc00', "\ud83d",
                     ' bye</msg>"}]}'):  # fmt: skip
            yield Delta(text)
        yield Delta("", "stop")

    async def aclose(self) -> None:
        pass


def test_a_lone_surrogate_is_a_replacement_said_where_and_every_piece_can_be_written() -> None:
    from charfmt.serve.wire import sse

    async def main() -> list[Any]:
        upstream = _Lone()
        engine = Engine(Settings(character=REX, upstream=upstream), upstream)  # type: ignore[arg-type]
        return [p async for batch in engine.turn_batches([], engine.player_turn("hi")) for p in batch]

    pieces = asyncio.run(main())
    done = pieces[-1]
    assert isinstance(done, Done)
    raw = "".join(p.text for p in pieces if isinstance(p, Raw))
    assert raw == done.text and "hi \U0001f600 and \ufffd\ufffd bye" in raw
    raw.encode()  # every piece of text can be written out (was: UnicodeEncodeError, a stream cut short)
    for piece in pieces[:-1]:
        if not isinstance(piece, Raw):
            sse(piece.to_dict())
    assert done.reply.chats[0].texts("msg") == ["hi \U0001f600 and \ufffd\ufffd bye"]
    said = [p.diagnostic for p in pieces if getattr(p, "kind", None) == "diagnostic" and p.diagnostic.code == "CF714"]
    lone = [d for d in done.reply.diagnostics if d.code == "CF714"]
    assert [(d.offset, d.end) for d in said] == [(d.offset, d.end) for d in lone]  # said as it came too
    assert [raw[d.offset : d.end] for d in lone] == ["\ufffd", "\ufffd"] and lone[0].end == lone[1].offset
    assert done.valid is False  # the model's text was not strictly valid: it held no character there
