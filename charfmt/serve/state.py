"""What a running server holds: the engine (made on first use), the sessions, the turn log, the credentials.

:class:`ServerState` runs each turn in its session (one at a time per session, its history read
from the store), keeps the exchange and logs the turn (or its failure, or the client leaving);
``/v1/turn``'s JSON objects are made at that door (``charfmt.serve.turn_stream``). A request's credential is its
owner (``charfmt.serve.owners``): the sessions it reaches are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Final

from charfmt.serve.formats import Answer
from charfmt.serve.owners import Credentials
from charfmt.serve.sessions import Sessions
from charfmt.serve.turns import Done, Engine, Greeting, Piece
from charfmt.serve.wire import HTTPFailure, failure
from charfmt.store import Store, open_store

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange
    from charfmt.prompt.userinput import UserTurn
    from charfmt.serve.continuation import Ask
    from charfmt.serve.logs import TurnLog
    from charfmt.serve.settings import Settings
    from charfmt.serve.upstreams import Upstream
    from charfmt.store import Lease, SessionKey


CONSOLE: Final = logging.getLogger("charfmt.serve")
"""Where a failed turn is said (``charfmt serve`` writes it beside uvicorn's lines): its status and why."""


class ServerState:
    """The engine, the sessions, the log and the auth check of one app."""

    def __init__(self, settings: Settings) -> None:
        from charfmt.serve.emotion_names import served_names  # noqa: PLC0415

        self.settings = settings
        self.names = served_names(settings)
        """Each emotion key's name in ``--reply-format`` (``charfmt.serve.emotion_names``), checked at the start."""
        self.sessions = Sessions(
            _store(settings), max_sessions=settings.max_sessions, max_bytes=settings.session_bytes,
            max_age=settings.max_session_age, wait=settings.timeout,
        )  # fmt: skip
        self._own_store = not isinstance(settings.store, Store)  # (a ready store is closed by whoever made it)
        self.scope = _scope(settings)
        """What the sessions' namespaces name beside the door: the character (or scene) served, by name and
        definition (``charfmt.store.scopes``)."""
        self._engine: Engine | None = None
        self._engine_lock = asyncio.Lock()
        self._log: TurnLog | None = None
        self._ids = 0
        self.credentials = Credentials(settings.token, settings.tokens)
        self.opening = _opening(settings)
        """The card's greeting every new session opens with (``Settings.greeting``), or ``None``."""
        self.stopping = False
        """Set when the server begins to stop (``charfmt serve``): a turn it cuts short is logged as such."""
        if settings.log is not None:
            from charfmt._redact import Redactor  # noqa: PLC0415
            from charfmt.serve.logs import TurnLog  # noqa: PLC0415

            self._log = TurnLog(settings.log, Redactor(settings.secrets()))

    def next_id(self) -> str:
        """A request id: random, and counted (unique within this server)."""
        self._ids += 1
        return f"{uuid.uuid4().hex[:16]}{self._ids:x}"

    def owner(self, header: str | None) -> str | None:
        """The owner ``header`` (``Authorization``) proves (``""`` where no credential is asked), or ``None``."""
        return self.credentials.owner(header)

    def authorized(self, header: str | None) -> bool:
        """Whether ``header`` (``Authorization``) carries a credential of the server (always, where none is set)."""
        return self.credentials.owner(header) is not None

    def session_key(self, owner: str, door: str, name: str) -> SessionKey:
        """The store's key of session ``name`` of ``owner`` at ``door`` (``turn``, ``chat``) with this character."""
        from charfmt.store import SessionKey  # noqa: PLC0415

        return SessionKey(owner, f"{door}/{self.scope}", name)

    async def stored_key(self, owner: str, door: str, name: str) -> SessionKey:
        """:meth:`session_key`, or the key a store written before definitions were told apart holds it under."""
        from charfmt.store.scopes import resolved  # noqa: PLC0415

        key = self.session_key(owner, door, name)
        return await self.sessions.call(resolved, self.sessions.store, key)

    async def engine(self) -> Engine:
        """The engine, made (and its upstream connected or loaded) on first use."""
        if self._engine is None:
            async with self._engine_lock:
                if self._engine is None:
                    self._engine = Engine(self.settings, await asyncio.to_thread(self._upstream))
        return self._engine

    def _upstream(self) -> Upstream:
        from charfmt.serve.upstreams import open_upstream  # noqa: PLC0415 (its kinds' modules: the first turn's)

        return open_upstream(self.settings)

    async def aclose(self) -> None:
        """Close the upstream (unless it was given ready-made), the store (the same) and the log."""
        if self._engine is not None:
            self._engine.worker.close()
        if self._engine is not None and self.settings.upstream is None:
            await self._engine.upstream.aclose()
        if self._own_store:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.sessions.store.close)
        if self._log is not None:
            self._log.close()
            self._log = None

    async def turn_batches(
        self, key: str | None, history: list[Exchange] | None, turn: UserTurn | None, constrained: bool | None,
        rid: str, *, events: bool = True, cues: bool = True, options: dict[str, Any] | None = None, owner: str = "",
        door: str = "turn", ask: Ask | None = None, lore: bool = False,
    ) -> AsyncGenerator[list[Piece], None]:  # fmt: skip
        """The pieces of one turn in ``owner``'s session ``key`` at ``door`` (or with ``history`` given), in the
        engine's batches (``Engine.turn_batches``); the exchange kept, the turn logged. A new session opens
        with the card's greeting (``opening``, for the player ``options`` name), kept as its first exchange
        when the first turn ends (a first turn that fails leaves no session behind);
        ``lore=True`` (``/v1/turn``): a ``Greeting`` piece says so and the turn's ``Lore`` leads its first batch.

        ``ask`` (``charfmt.serve.continuation``): the player's line asked for is kept in no history; a continue in
        a session goes on from the session's last reply (a new session's: the greeting), kept as it was (a store
        keeps each exchange as written: the continuation is the front end's to show after it).
        """
        engine = await self.engine()
        if not key:
            async for batch in self._turn(engine, history or [], turn, session=None, lease=None,
                                          constrained=constrained, rid=rid, events=events, cues=cues,
                                          options=options, ask=ask, lore=lore):  # fmt: skip
                yield batch
            return
        session = await self.stored_key(owner, door, key)
        held = contextlib.AsyncExitStack()
        try:
            past, lease = await held.enter_async_context(self.sessions.hold(session))
        except HTTPFailure as e:  # no session to run the turn in (the store failed, another worker holds it)
            self.log_failure(rid, key, engine, e.status, str(e))
            raise
        async with held:
            opening = self.opening_for((options or {}).get("user_name")) if not past else None
            if opening is not None:  # a new session: the character's greeting is its first line (kept with the turn)
                past = [opening]
            if past and ask is not None and ask.continuation is not None:  # the session's last reply, gone on with
                last = past[-1]
                said = last.user if last.user.chats else None  # (the greeting: no player's turn before it)
                past, turn, ask = past[:-1], said, self._same_as_shown(ask, last, engine)
            async for batch in self._turn(engine, past, turn, session=session, lease=lease,
                                          constrained=constrained, rid=rid, events=events, cues=cues,
                                          options=options, ask=ask, lore=lore, opening=opening):  # fmt: skip
                yield batch

    def _same_as_shown(self, ask: Ask, last: Exchange, engine: Engine) -> Ask:
        """``ask`` going on with the session's ``last`` reply itself where the front end sent it as the server
        answered it (narration and all; else with what the front end sent, edited as it may be)."""
        import dataclasses  # noqa: PLC0415

        from charfmt.serve.formats import whole  # noqa: PLC0415

        going = ask.continuation
        assert going is not None
        scene, names = engine.cast.speakers is not None, engine.names.names
        shown = whole(self.settings.reply_format, last.reply, engine.tags, speakers=scene, emotions=names)
        same = shown.strip() == going.shown.strip() and last.reply.chats
        return dataclasses.replace(ask, continuation=engine.continuation(last.reply, going.shown)) if same else ask

    async def _turn(
        self, engine: Engine, past: list[Exchange], turn: UserTurn | None, *, session: SessionKey | None,
        lease: Lease | None, constrained: bool | None, rid: str, events: bool, cues: bool,
        options: dict[str, Any] | None, ask: Ask | None, lore: bool = False, opening: Exchange | None = None,
    ) -> AsyncGenerator[list[Piece], None]:  # fmt: skip
        """The pieces of one turn after ``past``; the exchange kept in ``session`` (its ``lease`` checked) before
        the last batch goes (not a continue's or the player's line asked for: ``turn_batches``). ``opening``: a new
        session's greeting, kept once the turn has ended, before its exchange (nothing is kept of a turn that
        fails); with ``lore``, a ``Greeting`` leads the first batch."""
        key = session.name if session is not None else None
        batches = engine.turn_batches(
            list(past), turn, constrained=constrained, request_id=rid, events=events, cues=cues, options=options,
            ask=ask, lore=lore,
        )  # fmt: skip
        kept = ask is None or (ask.continuation is None and ask.impersonation is None)
        lead: list[Piece] = [Greeting(opening.reply)] if opening is not None and lore else []
        ended = False
        try:
            async for batch in batches:
                done = batch[-1]
                if isinstance(done, Done):
                    if session is not None and lease is not None:  # (kept before the reply is sent)
                        if opening is not None:  # the session begins with this turn: its greeting first
                            await self.sessions.keep(session, opening, lease)
                        if done.exchange.reply.chats and kept:
                            await self.sessions.keep(session, done.exchange, lease)
                    ended = True
                    self.log(done, key, engine)
                yield [*lead, *batch] if lead else batch
                lead = []
        except (asyncio.CancelledError, GeneratorExit):  # the client went away mid-turn, or the server stops
            if not ended and self.stopping:
                self.log_failure(rid, key, engine, 503, "cancelled: the server stopped")
            elif not ended:
                self.log_failure(rid, key, engine, 499, "cancelled: the client went away")
            raise
        except Exception as e:
            status, message, _, _ = failure(e)
            self.log_failure(rid, key, engine, status, message)
            raise
        finally:
            await batches.aclose()

    async def run_turn(
        self, key: str | None, history: list[Exchange] | None, turn: UserTurn | None, rid: str,
        *, options: dict[str, Any] | None = None, answer: Answer | None = None, owner: str = "", door: str = "turn",
        ask: Ask | None = None,
    ) -> Done:  # fmt: skip
        """The end of one turn, its pieces not sent anywhere (a non-streamed answer): its events fed to
        ``answer``, where given (``answer.end`` is the caller's)."""
        done: Piece | None = None
        events = answer is not None and answer.events
        batches = self.turn_batches(
            key, history, turn, None, rid, events=events, cues=False, options=options, owner=owner, door=door,
            ask=ask,
        )  # fmt: skip
        async for batch in batches:
            done = batch[-1]
            if answer is not None:  # (the reasoning too, whatever the format)
                answer.feed(batch)
        assert isinstance(done, Done)
        return done

    def opening_for(self, user_name: str | None) -> Exchange | None:
        """A new session's first exchange for the player ``user_name`` (``None``: the character's own player):
        the card's greeting, its ``{{user}}`` that name, its macros drawn anew (a ``{{roll:d20}}`` each its own)."""
        if self.opening is None:
            return None
        return _opening(self.settings, user_name)

    def log_failure(self, rid: str, key: str | None, engine: Engine, status: int, message: str) -> None:
        """Log a turn that gave no reply: ``text`` null (``charfmt report``: no reply), ``error``, ``status``.

        The console says it too (a client that left: at ``INFO``; any other failure: ``WARNING``).
        """
        level = logging.INFO if status == 499 else logging.WARNING
        CONSOLE.log(level, "turn %s (session %s) failed: %d %s", rid, key or "-", status, message)
        if self._log is None:
            return
        self._log.write(
            {
                "request_id": rid, "session": key, "model": engine.model, "upstream": engine.upstream.name,
                "text": None, "valid": False, "status": status, "error": message,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )  # fmt: skip

    def log(self, done: Done, key: str | None, engine: Engine) -> None:
        """Log a turn that gave a reply (the form ``charfmt report`` reads)."""
        if self._log is None:
            return
        self._log.write(
            {
                "request_id": done.request_id, "session": key, "model": engine.model,
                "prompt_version": done.prompt_version, "upstream": engine.upstream.name, "text": done.text,
                "valid": done.valid, "timing": done.timing(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )  # fmt: skip


def _opening(settings: Settings, user_name: str | None = None) -> Exchange | None:
    """A new session's first exchange: the character card's greeting (none for a scene), ``{{user}}`` the
    player ``user_name`` (``None``: the character's own)."""
    from charfmt.prompt.render import greeting_exchange  # noqa: PLC0415

    if settings.greeting is None or settings.scene is not None:
        return None
    character = settings.character
    if user_name is not None:
        character = character.model_copy(update={"user_name": user_name})
    return greeting_exchange(character, settings.greeting)


def _scope(settings: Settings) -> str:
    """The served character's (or scene's) part of its sessions' namespaces: its name and definition's digest."""
    from charfmt.store.scopes import scope  # noqa: PLC0415

    return scope(settings.cast.name, settings.cast)


def _store(settings: Settings) -> Store:
    """The store ``settings.store`` names (or is); a store that cannot be opened is one ``StoreError``."""
    given = settings.store
    return given if isinstance(given, Store) else open_store(given)
