"""``create_app(settings)``: the ASGI app of ``charfmt serve`` (Starlette).

Routes:

``POST /v1/chat/completions``
    OpenAI-compatible, streamed (SSE) or not; the last user message is the player's turn.
``POST /v1/turn``
    ``{"session": "...", "say": "[joy] hi"}`` → ``text/event-stream`` of typed events, stage cues
    and sentences as they become certain, then ``{"kind": "reply", ...}``; ``GET /v1/turn?say=…``
    the same for ``EventSource`` (which cannot POST; ``?token=`` where a token is set). An
    upstream failure before the first event is the HTTP error (status, OpenAI-shaped body,
    ``Retry-After``); one after it is a ``{"kind": "error", ...}`` event, and the stream ends.
``WS /v1/turn/ws``
    the same JSON objects, one per message, for each ``{"session", "say"}`` the client sends.
``GET /v1/sessions``, ``GET|DELETE /v1/sessions/{door}/{name}``
    the caller's own sessions: listed, read back, forgotten (another's: a 404 that reveals nothing).
``GET /v1/info``, ``GET /v1/models``
    the character (name, emotions, reply format, whether replies are constrained); the model.
``GET /``
    the playground page (no CDN; one file from the package); ``GET /favicon.ico`` its icon (SVG), which every
    browser asks for.

Every door is bounded (body bytes, JSON depth, turn length, messages, sessions); every failure
is an OpenAI-shaped ``{"error": {...}}`` with the right status, its secrets written ``***``
(``wire.error_body``); a request for a ``Host`` that is not the server's is refused (421,
``hosts``: DNS rebinding) before any route.

The routes live beside this module: ``completions`` (the OpenAI door), ``turn_stream``
(``/v1/turn`` and its WebSocket), on ``state`` (the engine, sessions, log), ``inputs`` (reading
requests) and ``wire`` (errors, SSE); this module only puts them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from charfmt.diagnostics import CharfmtError
from charfmt.serve.completions import SESSION_HEADER, chat_completions
from charfmt.serve.formats import FORMATS
from charfmt.serve.hosts import HostCheck
from charfmt.serve.inputs import OWNER, query_token
from charfmt.serve.session_routes import delete_session, list_sessions, read_session
from charfmt.serve.state import ServerState
from charfmt.serve.turn_stream import greeting_object, turn_sse, turn_ws
from charfmt.serve.turns import reply_bounds
from charfmt.serve.wire import SERVER_SEND, STOPPING, HTTPFailure, error_body, error_response, failure_response

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import Receive, Scope, Send

    from charfmt.serve.settings import Settings

__all__ = ["SESSION_HEADER", "HTTPFailure", "create_app", "error_body"]

_CSP: Final = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:"

Handler = Callable[["ServerState", "Request"], Awaitable["Response"]]


def create_app(settings: Settings) -> Starlette:
    """The ASGI app serving ``settings.character`` (needs Starlette: ``charfmt[serve]``)."""
    if settings.reply_format not in FORMATS:
        raise CharfmtError(f"unknown reply format {settings.reply_format!r}; expected one of {', '.join(FORMATS)}")
    reply_bounds(settings)  # a budget too small for one reply fails here, not at each turn
    state = ServerState(settings)  # (a [stage.formats] table that names what the front end does not know fails)
    routes: list[Any] = [
        Route("/v1/chat/completions", _guarded(state, chat_completions), methods=["POST"]),
        Route("/v1/turn", _guarded(state, turn_sse), methods=["GET", "POST"]),
        WebSocketRoute("/v1/turn/ws", functools.partial(turn_ws, state)),
        Route("/v1/sessions", _guarded(state, list_sessions), methods=["GET"]),
        Route("/v1/sessions/{door}/{name:path}", _guarded(state, read_session), methods=["GET"]),
        Route("/v1/sessions/{door}/{name:path}", _guarded(state, delete_session), methods=["DELETE"]),
        Route("/v1/info", _guarded(state, _info), methods=["GET"]),
        Route("/v1/models", _guarded(state, _models), methods=["GET"]),
    ]
    if settings.playground:
        routes.append(Route("/", _playground, methods=["GET"]))
    routes.append(Route("/favicon.ico", _icon, methods=["GET"]))  # (every browser asks: a 404 is a console error)
    middleware = [Middleware(HostCheck, allowed=settings.allowed_hosts)]  # first: before CORS answers a preflight
    if settings.cors:
        middleware.append(
            Middleware(
                CORSMiddleware, allow_origins=list(settings.cors), allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["authorization", "content-type", SESSION_HEADER],
                expose_headers=["Retry-After"],  # a browser front end may read when to try again
            )
        )  # fmt: skip

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:  # the answers the stop cut short end first (their 503 sent), then the store and upstream close
            if isinstance(app, _App):
                await app.drained(DRAIN_SECONDS)
            await state.aclose()

    app = _App(
        routes=routes, middleware=middleware, lifespan=lifespan,
        exception_handlers={404: _not_found, 405: _not_found},
    )  # fmt: skip
    app.state.charfmt = state
    return app


DRAIN_SECONDS: Final = 3.0
"""Seconds the server's stop waits for the answers it cancelled to end (each sends its 503 as it ends)."""


class _App(Starlette):
    """Starlette, the server's own ``send`` kept in the scope: an event stream sends its events straight to it;
    the requests under way known, so that a stop waits for them to end before the store closes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.under_way: set[asyncio.Task[Any]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SERVER_SEND] = send
        task = asyncio.current_task() if scope["type"] != "lifespan" else None
        if task is not None:
            self.under_way.add(task)
        try:
            await super().__call__(scope, receive, send)
        finally:
            if task is not None:
                self.under_way.discard(task)

    async def drained(self, seconds: float) -> None:
        """Wait (``seconds`` at most) for the requests under way to end: uvicorn's stop cancels them when its
        grace period is over and goes on at once; a turn that releases its session in the store's thread
        (SQLite, PostgreSQL) would otherwise be cut before its ``{"kind": "error", "status": 503}``."""
        if self.under_way:
            await asyncio.wait(set(self.under_way), timeout=seconds)


def _guarded(state: ServerState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind the bearer token, its every failure an OpenAI-shaped error (never a traceback)."""

    async def run(request: Request) -> Response:
        header = request.headers.get("authorization")
        if header is None and request.method == "GET":  # EventSource cannot send headers
            header = query_token(request.query_params.get("token"))
        owner = state.owner(header)
        if owner is None:
            return error_response(401, "missing or wrong bearer token (Authorization: Bearer ...)", None,
                                  {"WWW-Authenticate": "Bearer"})  # fmt: skip
        request.scope[OWNER] = owner  # (the sessions the request reaches are this owner's)
        try:
            return await handler(state, request)
        except Exception as e:
            return failure_response(e)
        except asyncio.CancelledError:  # the server stops (its grace period over) before the answer began
            if not state.stopping:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return error_response(503, STOPPING)

    return run


async def _info(state: ServerState, request: Request) -> Response:
    settings = state.settings
    cast = settings.cast
    vocabulary, tags, name = cast.vocabulary, cast.tags, cast.name
    names = state.names
    return JSONResponse(
        {
            "name": name, "model": settings.model_name or name,
            "emotions": [e.key for e in vocabulary.emotions],
            "reply_format": settings.reply_format, "constrained": settings.constrained,
            "server": _server(settings),
            "speakers": list(cast.members), "auth": not state.credentials.open,
            "speech_tags": [spec.name for spec in tags.with_role("speech")],
            "emotion_names": {e.key: names.names.get(e.key, e.key) for e in vocabulary.emotions} if names.known else {},
            "unmapped_emotions": list(names.unmapped),
            "greeting": _greeting(state),
        }
    )  # fmt: skip


def _server(settings: Settings) -> str:
    """What ``/v1/info`` says runs the model: the upstream kind's own words, else the ``--server``."""
    from charfmt.serve.upstreams import source  # noqa: PLC0415 (its kinds' modules: the first turn's)

    found = source(settings)
    return (found[0].shown if found is not None else None) or settings.server


def _greeting(state: ServerState) -> dict[str, Any] | None:
    """The card's greeting a new session opens with (``/v1/info``'s ``greeting``), or ``None``."""
    opening = state.opening
    if opening is None:
        return None
    found = greeting_object(state, opening.reply, None)
    return {"reply": found["reply"], "content": found["content"]}


async def _models(state: ServerState, request: Request) -> Response:
    settings = state.settings
    name = settings.model_name or settings.cast.name
    return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "charfmt"}]})


async def _playground(request: Request) -> Response:
    from charfmt.serve.page import static_page  # noqa: PLC0415

    headers = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff"}
    return HTMLResponse(static_page(), headers=headers)


async def _icon(request: Request) -> Response:
    from charfmt.serve.page import static_bytes  # noqa: PLC0415

    headers = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}
    return Response(static_bytes("favicon.svg"), media_type="image/svg+xml", headers=headers)


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    return error_response(status, f"{request.method} {request.url.path}: {getattr(exc, 'detail', 'not found')}")
