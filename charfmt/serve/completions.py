"""``POST /v1/chat/completions``: OpenAI-compatible, streamed (SSE) or not, for existing front ends.

The last user message is the player's turn; the session is the ``X-Charfmt-Session`` header
or the ``user`` field (without either, the history the front end sends is read back). The
answer is the reply in ``--reply-format``: streamed or whole, the same string (``Answer``). A streamed
answer's status waits for the upstream's first piece, so an upstream failure before it is the
HTTP error (a 429 with its ``Retry-After``); one after it is an error chunk, then the end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Final

from starlette.responses import JSONResponse

from charfmt.serve.continuation import Ask
from charfmt.serve.formats import Answer, served_answer
from charfmt.serve.inputs import chat_request, front_options, owner_of, player_turn, read_json
from charfmt.serve.sessions import check_key, user_session
from charfmt.serve.turns import Done, Piece, history_from_messages, read_back
from charfmt.serve.wire import (
    STOPPING,
    EventStreamResponse,
    HTTPFailure,
    compact_json,
    error_body,
    failure,
    failure_response,
    sse,
    watch_disconnect,
)

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from charfmt.prompt.character import Exchange
    from charfmt.prompt.userinput import UserTurn
    from charfmt.serve.continuation import Ask
    from charfmt.serve.inputs import ChatRequest
    from charfmt.serve.state import ServerState
    from charfmt.serve.turns import Engine

SESSION_HEADER: Final = "x-charfmt-session"
"""The header that names a chat-completions request's session (else the ``user`` field)."""


async def chat_completions(state: ServerState, request: Request) -> Response:
    """One chat-completions request: the turn run, the answer whole or streamed."""
    engine = await state.engine()
    await engine.pacer.turn()  # the request read (its JSON, the player's turn, a front end's history): paced
    body = await read_json(request, state.settings.max_request_bytes)
    asked = chat_request(body, state.settings)
    options = front_options(body, asked.earlier)
    user = body.get("user")
    header = request.headers.get(SESSION_HEADER)
    if header is not None and (why := check_key(header, f"the {SESSION_HEADER} header")) is not None:
        raise HTTPFailure(400, why, SESSION_HEADER)
    key = header or (user_session(user) if isinstance(user, str) else None)  # (any end-user id: a session)
    turn = player_turn(engine, asked.say, "messages") if asked.say is not None else None  # (the last user words)
    call = Completion(state, engine, key, turn, options, ask=_ask(engine, asked))
    call.owner = owner_of(request)
    call.history = None if key else history_from_messages(engine, asked.earlier)
    stream_options = body.get("stream_options")
    call.usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True
    return await (call.streamed(request) if asked.stream else call.whole(request))


def _ask(engine: Engine, asked: ChatRequest) -> Ask | None:
    """What the request asks beyond the player's words: instructions after the history, a continue of the
    character's last answer (read back as the reply it shows), the player's line."""

    if not asked.after and asked.partial is None and asked.impersonation is None:
        return None
    going = None
    if asked.partial is not None:
        going = engine.continuation(read_back(engine, asked.partial), asked.partial)
    return Ask(after=asked.after, continuation=going, impersonation=asked.impersonation)


@dataclass(eq=False, repr=False, slots=True)
class Completion:
    """One chat completion: its id, time and model, the turn it runs, and the chunks it answers with."""

    state: ServerState
    engine: Engine
    key: str | None
    turn: UserTurn | None
    options: dict[str, Any]
    _: KW_ONLY
    ask: Ask | None = None
    history: list[Exchange] | None = field(default=None, init=False)
    owner: str = field(default="", init=False)
    """Whose session ``key`` is (the request's credential; the ``chat`` door's namespace)."""
    usage: bool = field(default=False, init=False)
    """``stream_options.include_usage``: a usage chunk before ``[DONE]``."""
    model: str = field(init=False)
    id: str = field(init=False)
    created: int = field(init=False)
    _text_frame: tuple[bytes, bytes] = field(init=False)
    """A text chunk's event around its text's JSON (in place of the empty text's ``""``)."""

    def __post_init__(self) -> None:
        self.model = self.engine.model
        self.id = f"chatcmpl-{self.state.next_id()}"
        self.created = int(time.time())
        frame = self.chunk({"content": ""})
        at = frame.index(b'"content":""') + len(b'"content":')
        self._text_frame = (frame[:at], frame[at + 2 :])

    def answer(self, *, streamed: bool) -> Answer:
        """The answer in the reply format, to be made from the turn's events (the player's line asked for:
        in the player's shorthand, ``tags`` with the emotion keys, whatever the format)."""
        return served_answer(self.engine, streamed=streamed, ask=self.ask)

    async def whole(self, request: Request) -> Response:
        """The non-streamed answer: one ``chat.completion``."""
        answer = self.answer(streamed=False)
        run = self.state.run_turn(
            self.key, self.history, self.turn, self.id, options=self.options, answer=answer, owner=self.owner,
            door="chat", ask=self.ask,
        )  # fmt: skip
        done = await watch_disconnect(request, run)
        answer.end(done.reply)
        message = {"role": "assistant", "content": answer.text}
        reasoning = answer.reasoning()
        if reasoning:  # (as vLLM, llama-server and DeepSeek write it)
            message["reasoning_content"] = reasoning
        return JSONResponse(
            {
                "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": _finish(done.reason)}],
                "usage": _usage(done), "charfmt": {"valid": done.valid, "request_id": done.request_id},
            }
        )  # fmt: skip

    async def streamed(self, request: Request) -> Response:
        """The streamed answer; its status waits for the turn's first piece (an error before it is the status)."""
        # Canonical JSON is the repaired reply, known only at the end: streamed, it comes whole in
        # the last content chunk. The other formats stream as their events come; at the end, what
        # the whole answer has beyond what was streamed follows (``Answer``), so streamed == whole.
        answer = self.answer(streamed=True)
        batches = self.state.turn_batches(
            self.key, self.history, self.turn, None, self.id, events=answer.events, cues=False, options=self.options,
            owner=self.owner, door="chat", ask=self.ask,
        )  # fmt: skip
        try:
            first = await watch_disconnect(request, anext(batches, None))
        except Exception as e:
            await batches.aclose()
            return failure_response(e)
        chunks = self._chunks(first, batches, answer)
        return EventStreamResponse(chunks, sse(error_body(503, STOPPING)))

    async def _chunks(
        self, first: list[Piece] | None, batches: AsyncGenerator[list[Piece], None], answer: Answer
    ) -> AsyncGenerator[bytes, None]:
        """The answer's events: a batch of the turn's pieces in one chunk (what its events show, together)."""
        yield self.chunk({"role": "assistant", "content": ""})
        feed = answer.feed
        batch = first
        try:
            while batch is not None:
                done = batch[-1]
                if isinstance(done, Done):  # the last batch: the end's events go in one write
                    yield b"".join([*self._end(done, answer), b"data: [DONE]\n\n"])
                    return
                text = feed(batch)
                reasoning = answer.reasoning()
                if reasoning:  # the model's reasoning, as the reasoning servers stream it
                    yield self.chunk({"reasoning_content": reasoning}) + (self.text_chunk(text) if text else b"")
                elif text:
                    yield self.text_chunk(text)
                batch = await anext(batches, None)
        except Exception as e:
            status, message, param, _ = failure(e)
            yield sse(error_body(status, message, param))
            return
        finally:
            await batches.aclose()
        yield b"data: [DONE]\n\n"

    def _end(self, done: Done, answer: Answer) -> list[bytes]:
        """The last chunks: what the whole answer has beyond what was streamed, the finish, the usage."""
        rest = answer.end(done.reply)
        reasoning = answer.reasoning()  # (canonical's <think>, read only at the end)
        out = [self.chunk({"reasoning_content": reasoning})] if reasoning else []
        if rest:
            out.append(self.chunk({"content": rest}))
        extra = {"charfmt": {"valid": done.valid, "request_id": done.request_id}}
        out.append(self.chunk({}, _finish(done.reason), extra))
        if self.usage:
            out.append(sse({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": _usage(done),
            }))  # fmt: skip
        return out

    def text_chunk(self, text: str) -> bytes:
        """``chunk({"content": text})``, written into the frame made once per answer."""
        head, tail = self._text_frame
        return head + compact_json(text).encode() + tail

    def chunk(self, delta: dict[str, Any], reason: str | None = None, extra: dict[str, Any] | None = None) -> bytes:
        """One ``chat.completion.chunk`` event."""
        obj: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
        }  # fmt: skip
        if extra:
            obj.update(extra)
        return sse(obj)


def _usage(done: Done) -> dict[str, int]:
    """The turn's tokens as charfmt counts them: the prompt's with the engine's counter (the model's own where
    known, else the estimate), the reply's with the estimate; not the upstream's own count (not every upstream
    reports one)."""
    from charfmt.prompt.render import estimate_tokens  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

    completion = estimate_tokens(done.text[done.prefilled :])  # (a continue: what the model wrote)
    total = done.prompt_tokens + completion
    return {"prompt_tokens": done.prompt_tokens, "completion_tokens": completion, "total_tokens": total}


def _finish(reason: str | None) -> str:
    """The upstream's finish reason as OpenAI names it: ``length`` and ``content_filter`` (the reply cut
    short) kept, any other (``eos``, none at all) ``stop``."""
    return reason if reason in ("stop", "length", "content_filter") else "stop"
