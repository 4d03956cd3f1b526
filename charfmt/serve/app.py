"""``create_app(settings)``: the ASGI app of ``charfmt serve`` (Starlette).

Routes:

``POST /v1/chat/completions``
    OpenAI-compatible, streamed (SSE) or not; the last user message is the player's turn.
``POST /v1/turn``
    ``{"session": "...", "say": "[joy] hi"}`` → ``text/event-stream`` of typed events, stage cues
    and sentences as they become certain, then ``{"kind": "reply", ...}``; ``GET /v1/turn?say=…``
    the same for ``EventSource`` (which cannot POST; ``?token=`` where a token is set).
``WS /v1/turn/ws``
    the same JSON objects, one per message, for each ``{"session", "say"}`` the client sends.
``GET /v1/info``, ``GET /v1/models``
    the character (name, emotions, reply format, whether replies are constrained); the model.
``GET /``
    the playground page (no CDN; one file from the package).

Every door is bounded (body bytes, JSON depth, turn length, messages, sessions); every failure
is an OpenAI-shaped ``{"error": {...}}`` with the right status.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocketDisconnect

from charfmt._http_client import JSONDepthError, load_json
from charfmt.diagnostics import CharfmtError
from charfmt.serve.formats import FORMATS, Formatter, whole
from charfmt.serve.sessions import SessionStore, check_key
from charfmt.serve.turns import BadTurn, CuePiece, Done, Engine, EventPiece, Piece, SentencePiece
from charfmt.serve.turns import history_from_messages as _history
from charfmt.serve.upstream import UpstreamFailure

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.websockets import WebSocket

    from charfmt.serve.logs import TurnLog
    from charfmt.serve.settings import Settings
    from charfmt.serve.upstream import Upstream

SESSION_HEADER: Final = "x-charfmt-session"
"""The header that names a chat-completions request's session (else the ``user`` field)."""

_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "upstream_error",
    504: "upstream_timeout",
}


class HTTPFailure(CharfmtError):
    """A request the server refuses: the status, the message, and the request field it is about."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """The OpenAI error object: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _failure(e: BaseException) -> tuple[int, str, str | None, dict[str, str]]:
    """Status, message, param and headers for any failure of a turn."""
    if isinstance(e, HTTPFailure):
        return e.status, str(e), e.param, {}
    if isinstance(e, UpstreamFailure):
        headers = {"Retry-After": str(e.retry_after)} if e.retry_after is not None else {}
        return e.status, str(e), None, headers
    if isinstance(e, BadTurn):
        return 400, str(e), "messages", {}
    if isinstance(e, CharfmtError):
        return 502, f"upstream: {e}", None, {}
    return 500, f"internal error ({type(e).__name__}); see the server log", None, {}


def create_app(settings: Settings) -> Starlette:
    """The ASGI app serving ``settings.character`` (needs Starlette: ``charfmt[serve]``)."""
    if settings.reply_format not in FORMATS:
        raise CharfmtError(f"unknown reply format {settings.reply_format!r}; expected one of {', '.join(FORMATS)}")
    from charfmt.serve.turns import reply_bounds  # noqa: PLC0415

    reply_bounds(settings)  # a budget too small for one reply fails here, not at each turn
    state = _State(settings)

    def fail(status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None) -> Response:
        return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            header = request.headers.get("authorization")
            if header is None and request.method == "GET":  # EventSource cannot send headers
                header = _query_token(request.query_params.get("token"))
            if not state.authorized(header):
                return fail(401, "missing or wrong bearer token (Authorization: Bearer ...)", None,
                            {"WWW-Authenticate": "Bearer"})  # fmt: skip
            try:
                return await handler(request)
            except Exception as e:  # every failure is an OpenAI-shaped error, never a traceback
                status, message, param, headers = _failure(e)
                return fail(status, message, param, headers)

        return run

    async def chat_completions(request: Request) -> Response:
        body = await state.read_json(request)
        messages, say, stream = _chat_request(body, settings)
        options = _front_options(body, messages)
        key = request.headers.get(SESSION_HEADER) or (body.get("user") if isinstance(body.get("user"), str) else None)
        engine = await state.engine()
        turn = _turn_or_400(engine, say)
        fmt = settings.reply_format
        history = None if key else _history(engine, messages)
        model = engine.model
        cid = f"chatcmpl-{state.next_id()}"
        created = int(time.time())
        scene = engine.scene is not None
        stream_options = body.get("stream_options")
        usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True

        def _usage_chunk(done: Done) -> bytes:
            total = done.prompt_tokens + done.tokens
            return _sse({
                "id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                "usage": {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.tokens, "total_tokens": total},
            })  # fmt: skip

        if not stream:
            done = await _watch_disconnect(request, state.run_turn(key, history, turn, cid, options))
            content = whole(fmt, done.reply, engine.tags, speakers=scene)
            return JSONResponse(
                {
                    "id": cid, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": _finish(done.reason)}],
                    "usage": {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.tokens,
                              "total_tokens": done.prompt_tokens + done.tokens},
                    "charfmt": {"valid": done.valid, "request_id": done.request_id},
                }
            )

        def chunk(delta: dict[str, Any], reason: str | None = None, extra: dict[str, Any] | None = None) -> bytes:
            obj: dict[str, Any] = {
                "id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }  # fmt: skip
            if extra:
                obj.update(extra)
            return _sse(obj)

        # Canonical JSON is the repaired reply, known only at the end: streamed, it comes whole in
        # the last content chunk. The other formats stream as their events come; at the end, what
        # the whole answer has beyond what was streamed follows, so streamed == whole.
        formatter = None if fmt == "canonical" else Formatter(fmt, engine.tags, speakers=scene)
        pieces = state.turn_pieces(
            key, history, turn, None, cid, events=formatter is not None, cues=False, options=options
        )
        try:  # the status waits for the upstream's first piece: a 429 stays a 429 (Retry-After too)
            first = await _watch_disconnect(request, _first_piece(pieces))
        except Exception as e:
            await pieces.aclose()
            status, message, param, headers = _failure(e)
            return fail(status, message, param, headers)

        async def events() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            sent: list[str] = []
            piece = first
            try:
                while piece is not None:
                    text = formatter.feed(piece.event) if formatter and isinstance(piece, EventPiece) else ""
                    if isinstance(piece, Done):
                        target = whole(fmt, piece.reply, engine.tags, speakers=scene)
                        so_far = "".join(sent)
                        text = target[len(so_far) :] if target.startswith(so_far) else ""
                    if text:
                        sent.append(text)
                        yield chunk({"content": text})
                    if isinstance(piece, Done):
                        extra = {"charfmt": {"valid": piece.valid, "request_id": piece.request_id}}
                        yield chunk({}, _finish(piece.reason), extra)
                        if usage:
                            yield _usage_chunk(piece)
                    piece = await anext(pieces, None)
            except Exception as e:
                status, message, param, _ = _failure(e)
                yield _sse(error_body(status, message, param))
                return
            finally:
                await pieces.aclose()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=_NO_BUFFER)

    async def turn_sse(request: Request) -> Response:
        if request.method == "GET":  # EventSource: the turn in the query string
            query = request.query_params
            body: dict[str, Any] = {"say": query.get("say"), "session": query.get("session")}
            if "constrained" in query:
                body["constrained"] = query["constrained"] in ("1", "true")
        else:
            body = await state.read_json(request)
        key, say, constrained = _turn_request(body)
        engine = await state.engine()
        turn = _turn_or_400(engine, say)
        rid = state.next_id()

        async def events() -> AsyncIterator[bytes]:
            async for obj in state.turn_objects(key, turn, constrained, rid):
                yield _sse(obj)

        return StreamingResponse(events(), media_type="text/event-stream", headers=_NO_BUFFER)

    async def turn_ws(ws: WebSocket) -> None:
        origin = ws.headers.get("origin")
        if origin is not None and not _same_origin(origin, ws.headers.get("host")) and origin not in settings.cors:
            await ws.close(code=1008, reason="this Origin may not open a WebSocket (see --cors)")  # HTTP 403
            return
        if not state.authorized(ws.headers.get("authorization") or _query_token(ws.query_params.get("token"))):
            await ws.close(code=1008, reason="missing or wrong bearer token")
            return
        await ws.accept()
        # One reader task takes every message as it comes, so a client that goes away mid-turn
        # cancels that turn (and its upstream request) at once; the turns of one socket run in order.
        inbox: asyncio.Queue[str | None] = asyncio.Queue(maxsize=8)
        current: list[asyncio.Task[None]] = []

        async def reader() -> None:
            try:
                while True:
                    message = await ws.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    text = message.get("text")
                    if text is None:
                        text = (message.get("bytes") or b"").decode("utf-8", "replace")
                    await inbox.put(text)
            finally:
                for task in current:
                    task.cancel()
                inbox.put_nowait(None) if not inbox.full() else None

        async def answer(message: str) -> None:
            key: str | None = None
            try:
                if len(message.encode()) > settings.max_request_bytes:
                    raise HTTPFailure(413, f"a message is larger than {settings.max_request_bytes:,} bytes")
                body = _json(message, "the WebSocket message")
                given = body.get("session")
                key = given if isinstance(given, str) else None
                key, say, constrained = _turn_request(body)
                turn = _turn_or_400(await state.engine(), say)
            except HTTPFailure as e:  # the same shape as a failed turn's: kind, status, session, error
                error = {"kind": "error", "status": e.status, "session": key, **error_body(e.status, str(e), e.param)}
                await ws.send_text(json.dumps(error))
                return
            async for obj in state.turn_objects(key, turn, constrained, state.next_id()):
                await ws.send_text(json.dumps(obj, ensure_ascii=False, allow_nan=False))

        listening = asyncio.ensure_future(reader())
        try:
            while (message := await inbox.get()) is not None:
                current[:] = [asyncio.ensure_future(answer(message))]
                try:
                    await current[0]
                except (asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                    break  # the client went away (a send to a closed socket is a RuntimeError)
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening

    async def info(request: Request) -> Response:
        c, scene = settings.character, settings.scene
        vocabulary = scene.vocabulary if scene is not None else c.vocabulary
        name = scene.name if scene is not None else c.name
        return JSONResponse(
            {
                "name": name, "model": settings.model_name or name,
                "emotions": [e.key for e in vocabulary.emotions],
                "reply_format": settings.reply_format, "constrained": settings.constrained,
                "server": settings.server if settings.model_path is None else "llama.cpp (in-process)",
                "speakers": scene.speakers if scene is not None else [c.name], "auth": settings.token is not None,
            }
        )

    async def models(request: Request) -> Response:
        scene = settings.scene
        name = settings.model_name or (scene.name if scene is not None else settings.character.name)
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "charfmt"}]})

    async def playground(request: Request) -> Response:
        from charfmt.serve import static_page  # noqa: PLC0415

        headers = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff"}
        return HTMLResponse(static_page(), headers=headers)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return fail(status, f"{request.method} {request.url.path}: {getattr(exc, 'detail', 'not found')}")

    routes: list[Any] = [
        Route("/v1/chat/completions", guarded(chat_completions), methods=["POST"]),
        Route("/v1/turn", guarded(turn_sse), methods=["GET", "POST"]),
        WebSocketRoute("/v1/turn/ws", turn_ws),
        Route("/v1/info", guarded(info), methods=["GET"]),
        Route("/v1/models", guarded(models), methods=["GET"]),
    ]
    if settings.playground:
        routes.append(Route("/", playground, methods=["GET"]))
    middleware = []
    if settings.cors:
        middleware.append(
            Middleware(
                CORSMiddleware, allow_origins=list(settings.cors), allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", SESSION_HEADER],
            )
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await state.aclose()

    app = Starlette(
        routes=routes, middleware=middleware, lifespan=lifespan,
        exception_handlers={404: not_found, 405: not_found},
    )  # fmt: skip
    app.state.charfmt = state
    return app


_T = TypeVar("_T")

_NO_BUFFER: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_CSP: Final = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:"


class _State:
    """What the app holds: the engine (made on first use), the sessions, the log, the auth check."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = SessionStore(max_sessions=settings.max_sessions, max_bytes=settings.session_bytes)
        self._engine: Engine | None = None
        self._engine_lock = asyncio.Lock()
        self._log: TurnLog | None = None
        self._ids = 0
        self._token = settings.token.encode() if settings.token else None
        if settings.log is not None:
            from charfmt.serve.logs import TurnLog  # noqa: PLC0415

            self._log = TurnLog(settings.log)

    def next_id(self) -> str:
        import uuid  # noqa: PLC0415

        self._ids += 1
        return f"{uuid.uuid4().hex[:16]}{self._ids:x}"

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self._token)

    async def engine(self) -> Engine:
        if self._engine is None:
            async with self._engine_lock:
                if self._engine is None:
                    self._engine = Engine(self.settings, await asyncio.to_thread(self._upstream))
        return self._engine

    def _upstream(self) -> Upstream:
        s = self.settings
        if s.upstream is not None:
            return s.upstream
        if s.upstream_url is not None:
            from charfmt.chat import endpoint_url  # noqa: PLC0415
            from charfmt.serve.upstream import HTTPUpstream  # noqa: PLC0415

            return HTTPUpstream(
                endpoint_url(s.upstream_url), timeout=s.timeout, api_key=s.api_key, key_env=s.api_key_env
            )
        if s.model_path is not None:
            from charfmt.serve.upstream import load_local  # noqa: PLC0415

            return load_local(s.model_path, n_ctx=s.n_ctx)
        raise CharfmtError("no upstream: give an upstream URL or a model file")

    async def aclose(self) -> None:
        if self._engine is not None and self.settings.upstream is None:
            await self._engine.upstream.aclose()
        if self._log is not None:
            self._log.close()
            self._log = None

    async def read_json(self, request: Request) -> dict[str, Any]:
        """The request's JSON object, read within ``max_request_bytes`` and the JSON depth limit."""
        limit = self.settings.max_request_bytes
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":  # a cross-site form or text/plain POST needs no CORS preflight: refused
            shown = kind[:60] or "none"
            raise HTTPFailure(415, f"the request body must be sent as Content-Type: application/json (not {shown})")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise HTTPFailure(413, f"the request body is {int(declared):,} bytes (at most {limit:,})")
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise HTTPFailure(413, f"the request body is larger than {limit:,} bytes")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise HTTPFailure(400, f"the request body is not UTF-8 (byte {e.start})") from None
        return _json(text)

    async def turn_pieces(
        self, key: str | None, history: list[Any] | None, turn: Any, constrained: bool | None, rid: str,
        *, events: bool = True, cues: bool = True, options: dict[str, Any] | None = None,
    ) -> AsyncGenerator[Piece, None]:  # fmt: skip
        """The pieces of one turn in session ``key`` (or with ``history`` given); the exchange kept, the turn logged."""
        engine = await self.engine()
        session = self.sessions.get(key) if key else None
        lock = session.lock if session is not None else contextlib.nullcontext()
        async with lock:
            past = session.history if session is not None else (history or [])
            pieces = engine.turn(
                list(past), turn, constrained=constrained, request_id=rid, events=events, cues=cues, options=options
            )
            ended = False
            try:
                async for piece in pieces:
                    if isinstance(piece, Done):
                        ended = True
                        if session is not None and piece.exchange.reply.chats:
                            self.sessions.add(session, piece.exchange)
                        self.log(piece, key, engine)
                    yield piece
            except (asyncio.CancelledError, GeneratorExit):  # the client went away mid-turn
                if not ended:
                    self.log_failure(rid, key, engine, 499, "cancelled: the client went away")
                raise
            except Exception as e:
                status, message, _, _ = _failure(e)
                self.log_failure(rid, key, engine, status, message)
                raise

    async def run_turn(
        self, key: str | None, history: list[Any] | None, turn: Any, rid: str, options: dict[str, Any] | None = None
    ) -> Done:
        """The end of one turn, its pieces not sent anywhere (a non-streamed answer)."""
        done: Done | None = None
        async for piece in self.turn_pieces(key, history, turn, None, rid, events=False, cues=False, options=options):
            if isinstance(piece, Done):
                done = piece
        assert done is not None
        return done

    async def turn_objects(
        self, key: str | None, turn: Any, constrained: bool | None, rid: str
    ) -> AsyncIterator[dict[str, Any]]:
        """``/v1/turn``'s JSON objects: events, cues and sentences in order, then the reply (or an error)."""
        from charfmt.writer import canonical_form, dumps  # noqa: PLC0415

        engine = await self.engine()
        scene = engine.scene is not None
        try:
            async for piece in self.turn_pieces(key, None, turn, constrained, rid):
                if isinstance(piece, EventPiece):
                    yield piece.event.to_dict()
                elif isinstance(piece, CuePiece):
                    yield {"kind": "stage", "cue": piece.cue.to_dict()}
                elif isinstance(piece, SentencePiece):
                    yield {"kind": "sentence", **piece.sentence.to_dict()}
                elif isinstance(piece, Done):
                    tags = engine.tags
                    yield {
                        "kind": "reply", "request_id": piece.request_id, "session": key, "valid": piece.valid,
                        "reply": json.loads(dumps(canonical_form(piece.reply, tags=tags))),
                        "content": whole(self.settings.reply_format, piece.reply, tags, speakers=scene),
                        "raw": piece.text,
                        "diagnostics": [d.model_dump() for d in piece.reply.diagnostics], "timing": piece.timing(),
                    }  # fmt: skip
        except Exception as e:
            status, message, param, headers = _failure(e)
            error = error_body(status, message, param)
            retry = headers.get("Retry-After")
            retry_field = {"retry_after": int(retry)} if retry else {}
            yield {"kind": "error", "status": status, "session": key, **error, **retry_field}

    def log_failure(self, rid: str, key: str | None, engine: Engine, status: int, message: str) -> None:
        """Log a turn that gave no reply: ``text`` null (``charfmt report``: no reply), ``error``, ``status``."""
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
        if self._log is None:
            return
        self._log.write(
            {
                "request_id": done.request_id, "session": key, "model": engine.model,
                "prompt_version": done.prompt_version, "upstream": engine.upstream.name, "text": done.text,
                "valid": done.valid, "timing": done.timing(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )


# --- reading requests ------------------------------------------------------------------------------


def _json(text: str, what: str = "the request body") -> dict[str, Any]:
    try:
        value = load_json(text)
    except JSONDepthError as e:
        raise HTTPFailure(400, f"{what} is not usable JSON: {e}") from None
    except ValueError as e:
        raise HTTPFailure(400, f"{what} is not JSON: {str(e)[:200]}") from None
    if not isinstance(value, dict):
        raise HTTPFailure(400, f"{what} is JSON {type(value).__name__}, not an object")
    return value


def _text_of(content: Any, where: str) -> str:
    """A message's content: a string, or the text parts of an array of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise HTTPFailure(400, f"{where}: only text parts are read ({{'type': 'text', 'text': ...}})", where)
            parts.append(part["text"])
        return "".join(parts)
    raise HTTPFailure(400, f"{where}: content must be a string or an array of text parts", where)


def _chat_request(body: dict[str, Any], settings: Settings) -> tuple[list[tuple[str, str]], str, bool]:
    """(the earlier messages as (role, text), the player's turn, stream) of a chat-completions body."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HTTPFailure(400, "'messages' must be a non-empty array of {role, content} objects", "messages")
    if len(messages) > settings.max_messages:
        raise HTTPFailure(400, f"'messages' holds {len(messages)} (at most {settings.max_messages})", "messages")
    read: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise HTTPFailure(400, f"{where} must be an object with a string 'role'", where)
        read.append((m["role"], _text_of(m.get("content"), where)))
    if read[-1][0] != "user":
        role = read[-1][0][:20]
        raise HTTPFailure(400, f"the last message must be the player's (role 'user'), not {role!r}", "messages")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise HTTPFailure(400, "'stream' must be true or false", "stream")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise HTTPFailure(400, "'user' must be a string", "user")
    if isinstance(user, str) and (why := check_key(user)) is not None:
        raise HTTPFailure(400, why, "user")
    return read[:-1], read[-1][1], stream


_SAMPLING: Final = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}
"""Sampling fields a front end may set, forwarded upstream, with their ranges."""


def _front_options(body: dict[str, Any], messages: list[tuple[str, str]]) -> dict[str, Any]:
    """The front end's sampling fields (checked) and its own system text, for the upstream request.

    ``model`` is not forwarded: the upstream gets ``--model-name`` and the answer names the served model.
    """
    options: dict[str, Any] = {}
    for name, (low, high) in _SAMPLING.items():
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise HTTPFailure(400, f"'{name}' must be a number from {low:g} to {high:g}", name)
        options[name] = value
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or abs(seed) >= 1 << 63:
            raise HTTPFailure(400, "'seed' must be a whole number", "seed")
        options["seed"] = seed
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(x, str) and x for x in stops):
            raise HTTPFailure(400, "'stop' must be a string or up to 4 strings", "stop")
        options["stop"] = stops
    system = "\n\n".join(text.strip() for role, text in messages if role in ("system", "developer") and text.strip())
    if system:
        options["system"] = system
    return options


def _turn_request(body: dict[str, Any]) -> tuple[str | None, str, bool | None]:
    """(session, say, constrained) of a ``/v1/turn`` body."""
    key = body.get("session")
    if key is not None:
        if not isinstance(key, str):
            raise HTTPFailure(400, "'session' must be a string", "session")
        if (why := check_key(key)) is not None:
            raise HTTPFailure(400, why, "session")
    say = body.get("say")
    if not isinstance(say, str):
        raise HTTPFailure(400, "'say' must be a string: the player's turn (shorthand such as '[joy] hi')", "say")
    constrained = body.get("constrained")
    if constrained is not None and not isinstance(constrained, bool):
        raise HTTPFailure(400, "'constrained' must be true or false", "constrained")
    return key, say, constrained


def _turn_or_400(engine: Engine, say: str) -> Any:
    try:
        return engine.player_turn(say)
    except CharfmtError as e:
        raise HTTPFailure(400, str(e), "say") from None


def _same_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` (a browser page's) is this server's own (its ``Host``)."""
    scheme, _, rest = origin.partition("://")
    return host is not None and scheme in ("http", "https") and rest.lower() == host.lower()


def _query_token(token: str | None) -> str | None:
    return f"Bearer {token}" if token else None


def _finish(reason: str | None) -> str:
    return reason if reason in ("stop", "length") else "stop"


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode() + b"\n\n"


async def _first_piece(pieces: AsyncIterator[Piece]) -> Piece | None:
    return await anext(pieces, None)


async def _watch_disconnect(request: Request, work: Awaitable[_T]) -> _T:
    """``work``'s result, or cancel it (and the upstream request) when the client goes away first."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise HTTPFailure(499, "the client went away")
    return task.result()
