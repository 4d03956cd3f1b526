"""``/v1/turn`` for games: typed JSON objects as server-sent events (POST or ``EventSource``) or WebSocket messages.

Each object is sent the moment it is certain: the events ``charfmt stream`` prints, stage
cues, sentences, then ``{"kind": "reply", ...}``. The event stream's status waits for the first
object: an upstream failure before it is the HTTP error, OpenAI-shaped (a 429 with its
``Retry-After``); a failure after it is an ``{"kind": "error", ...}`` event, and the stream
ends there. On the WebSocket every failure is such an error object.

The objects are made here, over both transports (``turn_objects``): the pieces of a turn
(``ServerState.turn_batches``) each become one object, the turn's answer in ``--reply-format``
(``served_answer``) the reply object's ``content``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Final

from starlette.websockets import WebSocketDisconnect

from charfmt.events import Event
from charfmt.serve.formats import Answer, served_answer, whole
from charfmt.serve.hosts import cross_site_refusal
from charfmt.serve.inputs import (
    json_object,
    owner_of,
    player_turn,
    query_token,
    read_json,
    same_origin,
    turn_request,
)
from charfmt.serve.turns import Done, Engine, Greeting, Lore, Piece, Prefix, Raw
from charfmt.serve.wire import (
    STOPPING,
    EventStreamResponse,
    HTTPFailure,
    compact_json,
    error_body,
    error_response,
    failure,
    sse,
    watch_disconnect,
)
from charfmt.speech import Sentence
from charfmt.writer import canonical_form, dumps

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.websockets import WebSocket

    from charfmt.models import Reply
    from charfmt.prompt.userinput import UserTurn
    from charfmt.serve.state import ServerState


_FLAGS: Final = {"1": True, "true": True, "0": False, "false": False}
"""``?constrained=``'s values (``EventSource`` sends the query string; anything else is a 400)."""

WAITING: Final = 8
"""Turns a WebSocket may have waiting behind the one under way (more: an error object each)."""


async def turn_sse(state: ServerState, request: Request) -> Response:
    """``POST /v1/turn`` (a JSON body) or ``GET /v1/turn?say=…`` (``EventSource``): the turn's objects as SSE."""
    if request.method == "GET" and (why := cross_site_refusal(request.headers, state.settings.cors)) is not None:
        raise HTTPFailure(403, why)  # (a POST of another site is refused by its content type, or by CORS)
    engine = await state.engine()
    await engine.pacer.turn()  # the request read (its JSON, the player's turn): paced
    if request.method == "GET":  # EventSource: the turn in the query string
        query = request.query_params
        for field in query:  # (a field given twice: which one the player meant is not the server's guess)
            if (times := len(query.getlist(field))) > 1:
                raise HTTPFailure(400, f"{field[:40]!r} is given {times} times: give it once", field)
        body: dict[str, Any] = {key: query[key] for key in query if key != "constrained"}
        if "constrained" in query:
            flag = query["constrained"].lower()
            if flag not in _FLAGS:
                raise HTTPFailure(400, "'constrained' must be 1, true, 0 or false", "constrained")
            body["constrained"] = _FLAGS[flag]
    else:
        body = await read_json(request, state.settings.max_request_bytes)
    asked = turn_request(body, ("token",) if request.method == "GET" else ())
    key = asked.session
    turn = player_turn(engine, asked.say, context=asked.context)
    objects = turn_objects(
        state, key, turn, asked.constrained, state.next_id(), owner=owner_of(request), user_name=asked.user_name
    )
    try:
        first = await watch_disconnect(request, anext(objects, None))
    except BaseException:
        await objects.aclose()
        raise
    if first is not None and first[-1]["kind"] == "error":  # nothing sent yet: the failure is the answer's status
        await objects.aclose()
        error = first[-1]
        retry = error.get("retry_after")
        headers = {"Retry-After": str(retry)} if retry is not None else None
        return error_response(error["status"], error["error"]["message"], error["error"]["param"], headers)

    async def events() -> AsyncGenerator[bytes, None]:  # a batch of objects: its events in one write
        if first is not None:
            yield b"".join(map(sse, first))
        try:
            async for batch in objects:
                yield b"".join(map(sse, batch))
        finally:
            await objects.aclose()

    stopped = {"kind": "error", "status": 503, "session": key, **error_body(503, STOPPING)}
    return EventStreamResponse(events(), sse(stopped))


async def turn_ws(state: ServerState, ws: WebSocket) -> None:
    """``/v1/turn/ws``: for each ``{"session", "say"}`` message, the turn's objects, one message each."""
    settings = state.settings
    origin = ws.headers.get("origin")
    allowed = origin in settings.cors or "*" in settings.cors
    if origin is not None and not same_origin(origin, ws.headers.get("host")) and not allowed:
        await _refuse(ws, 403, "this Origin may not open a WebSocket (see --cors)")
        return
    owner = state.owner(ws.headers.get("authorization") or query_token(ws.query_params.get("token")))
    if owner is None:
        await _refuse(ws, 401, "missing or wrong bearer token (Authorization: Bearer ..., or ?token=)")
        return
    await ws.accept()
    # One reader task takes every message as it comes, so a client that goes away mid-turn
    # cancels that turn (and its upstream request) at once; the turns of one socket run in order.
    inbox: asyncio.Queue[str | None] = asyncio.Queue()  # (bounded by _receive: WAITING behind the turn under way)
    current: list[asyncio.Task[None]] = []
    listening = asyncio.ensure_future(_receive(ws, inbox, current))
    try:
        while (message := await inbox.get()) is not None:
            current[:] = [asyncio.ensure_future(_answer(state, ws, message, owner))]
            try:
                await current[0]
            except (asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                break  # the client went away (a send to a closed socket is a RuntimeError)
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening


async def _refuse(ws: WebSocket, status: int, message: str) -> None:
    """Refuse the handshake as the HTTP routes refuse a request: the status and the OpenAI-shaped error
    (where the server can answer a handshake with a response; else closed, which it sends as 403)."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        await ws.send_denial_response(error_response(status, message, None, headers))
    else:
        await ws.close(code=1008, reason=message[:120])


async def _receive(ws: WebSocket, inbox: asyncio.Queue[str | None], current: list[asyncio.Task[None]]) -> None:
    """Every message of ``ws`` into ``inbox``; at the client's leaving, the turn under way cancelled."""
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", "replace")
            under_way = 1 if current and not current[0].done() else 0
            if inbox.qsize() + under_way > WAITING:  # never wait to put: this task must see the client leave
                why = f"{WAITING} turns are already waiting on this socket: wait for their replies"
                error = {"kind": "error", "status": 429, "session": _session_of(text), **error_body(429, why)}
                try:
                    await ws.send_text(compact_json(error))
                except (RuntimeError, WebSocketDisconnect):  # (closed meanwhile)
                    break
                continue
            inbox.put_nowait(text)
    finally:
        for task in current:
            task.cancel()
        inbox.put_nowait(None)


def _session_of(message: str) -> str | None:
    """The session a WebSocket message names, where it is a JSON object naming one (for a refusal's answer)."""
    try:
        given = json_object(message, "the WebSocket message").get("session")
    except HTTPFailure:
        return None
    return given if isinstance(given, str) else None


async def _answer(state: ServerState, ws: WebSocket, message: str, owner: str) -> None:
    """One WebSocket message: the turn's objects sent back, or the error that stops it."""
    key: str | None = None
    limit = state.settings.max_request_bytes
    try:
        if len(message.encode()) > limit:
            raise HTTPFailure(413, f"a message is larger than {limit:,} bytes")
        body = json_object(message, "the WebSocket message")
        given = body.get("session")
        key = given if isinstance(given, str) else None
        asked = turn_request(body)
        turn = player_turn(await state.engine(), asked.say, context=asked.context)
    except HTTPFailure as e:  # the same shape as a failed turn's: kind, status, session, error
        error = {"kind": "error", "status": e.status, "session": key, **error_body(e.status, str(e), e.param)}
        await ws.send_text(compact_json(error))
        return
    objects = turn_objects(
        state, asked.session, turn, asked.constrained, state.next_id(), owner=owner, user_name=asked.user_name
    )
    async with contextlib.aclosing(objects):  # (a send that fails or a cancel leaves it at a yield: closed now,
        async for batch in objects:  # and with it the upstream request, not whenever the collector finds it)
            for obj in batch:
                await ws.send_text(compact_json(obj))  # as each SSE event's data


async def turn_objects(
    state: ServerState, key: str | None, turn: UserTurn, constrained: bool | None, rid: str, *, owner: str = "",
    user_name: str | None = None,
) -> AsyncGenerator[list[dict[str, Any]], None]:  # fmt: skip
    """``/v1/turn``'s JSON objects, a batch at a time: the player's own warnings (``say_object``), events,
    cues and sentences in order, then the reply (or an error, last in its batch: alone, or after the player's
    warnings). ``user_name``: the player's name (the card's ``{{user}}``)."""
    engine = await state.engine()
    answer = served_answer(engine, streamed=False)
    options = {"user_name": user_name} if user_name is not None else None
    leading = [say_object(turn)] if turn.diagnostics else []  # (the first batch's first object)
    try:
        async for batch in state.turn_batches(key, None, turn, constrained, rid, owner=owner, lore=True,
                                              options=options):  # fmt: skip
            answer.feed(batch)
            objects = [_object(state, piece, key, engine, answer) for piece in batch if not isinstance(piece, Raw)]
            if objects:
                yield [*leading, *objects]
                leading = []
    except Exception as e:
        yield [*leading, error_object(e, key)]
        return
    if leading:  # (a turn that sent nothing: its warnings still said)
        yield leading


def say_object(turn: UserTurn) -> dict[str, Any]:
    """The player's own warnings (``CF401`` for an emotion the character lacks, ``CF402``), as the reply's
    diagnostics are written, each placed in the ``say`` text: a turn's first object where it has any."""
    return {"kind": "say", "diagnostics": [d.model_dump() for d in turn.diagnostics]}


def _object(state: ServerState, piece: Piece, key: str | None, engine: Engine, answer: Answer) -> dict[str, Any]:
    """One piece of a turn as ``/v1/turn`` sends it."""
    if isinstance(piece, Lore):
        return piece.to_dict()
    if isinstance(piece, Greeting):
        return greeting_object(state, piece.reply, key)
    if isinstance(piece, Done):
        answer.end(piece.reply)
        return reply_object(piece, key, engine, answer.text)
    if isinstance(piece, Sentence):
        return {"kind": "sentence", **piece.to_dict()}
    if isinstance(piece, Event):
        return piece.to_dict()
    assert not isinstance(piece, Raw | Prefix)  # (a continue is chat completions' only)
    return {"kind": "stage", "cue": piece.to_dict()}


def greeting_object(state: ServerState, reply: Reply, key: str | None) -> dict[str, Any]:
    """The card's greeting as ``/v1/turn`` (and ``/v1/info``) send it: canonical and in the reply format (its
    emotions by the names the front end knows, as a reply's ``content``)."""

    settings = state.settings
    return {
        "kind": "greeting", "session": key, "reply": json.loads(dumps(reply)),
        "content": whole(settings.reply_format, reply, settings.character.tags, emotions=state.names.names),
    }  # fmt: skip


def reply_object(done: Done, key: str | None, engine: Engine, content: str) -> dict[str, Any]:
    """``/v1/turn``'s last object: the reply, canonical and in the reply format (``content``, the turn's
    ``Answer``), raw, diagnosed, timed."""

    return {
        "kind": "reply", "request_id": done.request_id, "session": key, "valid": done.valid,
        "reply": json.loads(dumps(canonical_form(done.reply, tags=engine.tags))),
        "content": content,
        "raw": done.text, "reasoning": done.reply.reasoning,
        "diagnostics": [d.model_dump() for d in done.reply.diagnostics], "timing": done.timing(),
    }  # fmt: skip


def error_object(e: BaseException, key: str | None) -> dict[str, Any]:
    """A failed turn as ``/v1/turn`` and the WebSocket say it: kind, status, session, the OpenAI error."""
    status, message, param, headers = failure(e)
    if param == "messages":  # (a turn that cannot be sent: /v1/turn has no messages, its player's words are say)
        param = "say"
    retry = headers.get("Retry-After")
    retry_field = {"retry_after": int(retry)} if retry else {}
    return {"kind": "error", "status": status, "session": key, **error_body(status, message, param), **retry_field}
