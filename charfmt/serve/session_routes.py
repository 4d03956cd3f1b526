"""``/v1/sessions``: the caller's own sessions, listed, read back (a front end showing a conversation again) or deleted.

``GET /v1/sessions`` lists the sessions of the request's owner with the character served, at both
doors (``turn``: ``/v1/turn`` and its WebSocket; ``chat``: chat completions); ``GET
/v1/sessions/{door}/{name}`` gives one's exchanges, oldest first, each as a line of ``charfmt
sessions export`` (``{"user": ..., "reply": ...}``, the reply canonical); ``DELETE`` forgets it.
A session of another owner is answered exactly as one that does not exist: a 404 that reveals
nothing.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Final

from starlette.responses import JSONResponse

from charfmt.serve.inputs import owner_of
from charfmt.serve.wire import HTTPFailure
from charfmt.store.scopes import legacy

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from charfmt.serve.state import ServerState
    from charfmt.store import SessionInfo, SessionKey

DOORS: Final = ("turn", "chat")
"""The doors whose sessions a client may read: ``/v1/turn`` (and its WebSocket) and chat completions."""


def _info(info: SessionInfo) -> dict[str, object]:
    door = info.key.namespace.split("/", 1)[0]
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.updated))
    return {"door": door, "name": info.key.name, "turns": info.turns, "bytes": info.size, "updated": when}


async def list_sessions(state: ServerState, request: Request) -> Response:
    """``GET /v1/sessions``: the caller's sessions with this character, the most recently written first."""
    owner = owner_of(request)
    found = []
    for door in DOORS:
        namespace = state.session_key(owner, door, "-").namespace
        found += await state.sessions.call(state.sessions.store.sessions, owner=owner, namespace=namespace)
        if (old := legacy(namespace)) is not None:  # (a store written before definitions were told apart)
            found += await state.sessions.call(state.sessions.store.sessions, owner=owner, namespace=old)
    found.sort(key=lambda s: s.updated, reverse=True)
    return JSONResponse({"object": "list", "data": [_info(s) for s in found]})


async def _key(state: ServerState, request: Request) -> SessionKey:
    """The caller's session the path names; a 404 for a door that is none."""
    door, name = request.path_params["door"], request.path_params["name"]
    if door not in DOORS:
        raise HTTPFailure(404, f"no door {door[:20]!r}: a session is at /v1/sessions/turn/NAME or .../chat/NAME")
    return await state.stored_key(owner_of(request), door, name)


def _gone(key: SessionKey) -> HTTPFailure:
    """The answer for a session that is not the caller's: the same whether it exists for another or not."""
    door = key.namespace.split("/", 1)[0]
    return HTTPFailure(404, f"no session {key.name[:128]!r} at the {door} door", "name")


async def read_session(state: ServerState, request: Request) -> Response:
    """``GET /v1/sessions/{door}/{name}``: the caller's session's exchanges, oldest first."""
    from charfmt.prompt.character import history_line  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

    key = await _key(state, request)
    info = await state.sessions.call(state.sessions.store.info, key)
    if info is None:
        raise _gone(key)
    history = await state.sessions.call(state.sessions.store.history, key)
    exchanges = [json.loads(history_line(ex)) for ex in history]
    return JSONResponse({**_info(info), "exchanges": exchanges})


async def delete_session(state: ServerState, request: Request) -> Response:
    """``DELETE /v1/sessions/{door}/{name}``: forget the caller's session."""
    key = await _key(state, request)
    if not await state.sessions.call(state.sessions.store.delete, key):
        raise _gone(key)
    return JSONResponse({"deleted": True, "door": key.namespace.split("/", 1)[0], "name": key.name})
