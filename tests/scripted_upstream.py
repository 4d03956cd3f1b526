"""A scripted OpenAI-compatible upstream and a loopback uvicorn runner, for the serve tests and benchmark.

``Scripted.mode`` picks what the next requests get: ``ok`` (the reply streamed in small chunks; its message repeats
the player's words, so replies of different sessions differ), ``whole`` (one ``chat.completion``), ``badsse``,
``slow``, ``cut`` (the connection drops mid-reply), ``cutclean`` (half the reply, then the body simply ends: no finish
reason, no ``[DONE]``), ``filter`` (half the reply, then a content filter's stop), ``refuse`` (a refusal, no content),
``trickle`` (the first event a byte at a time, 0.1 s apart), ``wholestall`` (half a ``chat.completion``, then nothing
for a minute), ``500``, ``401``/``403`` (a refused key), ``leak401``/``leak500``/``leakhtml``/``leakstream`` (an
error quoting the key it was sent and other secrets: ``LEAKED``), ``429`` (``Retry-After: 7``), ``html`` (a proxy's
HTML error page), ``endless`` (tokens until the client goes away), ``flood`` (``endless`` at full speed, 30 characters a
token), ``say:TEXT`` (the model writes TEXT; ``say:``: nothing, then ``[DONE]``), ``mute`` (no answer at all),
``silent`` (headers, then nothing) and ``pings`` (headers, then keep-alive comments for ever; ``stall``: the same
after the reply's first chunk). ``reasoning``: where set, the model's reasoning streamed first as ``reasoning_content``
deltas (as vLLM, llama-server and DeepSeek send it). A request whose last message is the model's own (``assistant``)
is a prefill, as llama-server takes it: where the reply starts with that message, the model writes only the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

CHUNK = 4
"""Characters per streamed chunk."""

LEAKED = (
    "sk-proj-OTHERkey0123456789abcdef",
    "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJlMTIz",
    "hf_abcdefghijklmnopqrstuvwxyz0123456789",
    "https://host.example/v1?api_key=QUERYsecret42",
)
"""Secrets of other shapes a ``leak`` mode quotes beside the key it was sent (none of them may reach a client)."""


def reply_for(user_text: str) -> str:
    """The reply the scripted model writes to a prompt whose last user message is ``user_text``."""
    words = " ".join(re.findall(r"[A-Za-z0-9]+", user_text.split("</msg>", maxsplit=1)[0])[-4:]) or "nothing"
    body = f"<emo>neutral</emo>\n<act>beeps</act>\n<msg>You said {words}. Fine. Come back tomorrow.</msg>"
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, ensure_ascii=False)


def scene_reply(speaker: str = "rex") -> str:
    """A scene's reply: ``speaker`` says a line, then the narrator (an ``E`` chat)."""
    chats = [
        {"type": "C", "order": 1, "speaker": speaker, "body": "<emo>neutral</emo>\n<msg>The bell is cracked.</msg>"},
        {"type": "E", "order": 2, "body": "The bell hums."},
    ]
    return json.dumps({"chats": chats}, ensure_ascii=False)


def chunk_event(text: str | None, reason: str | None = None) -> bytes:
    """One ``chat.completion.chunk`` event: ``text`` as its content (``None``: an empty delta), the finish reason."""
    delta = {} if text is None else {"content": text}
    choice = {"index": 0, "delta": delta, "finish_reason": reason}
    obj = {"id": "x", "object": "chat.completion.chunk", "choices": [choice]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Scripted:
    """The upstream's state: the mode, the requests seen, and how many streams a client abandoned."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.delay = 0.0
        """Seconds between chunks (``ok`` mode; the benchmark's model speed)."""
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        """The ``Authorization`` header of each request."""
        self.sent: dict[str, list[float]] | None = None
        """Where set (the benchmark): per ``S<n>R<n>`` tag in the user message, when each text chunk was sent."""
        self.written: dict[str, str] = {}
        """Where ``sent`` is set: per tag, the reply the model wrote."""
        self.cancelled = 0
        self.finished = 0
        self.reasoning: str | None = None
        """Where set, streamed first as ``reasoning_content`` deltas."""
        self.refuse_prefill = False
        """Answer a request that ends with the model's own message with llama-server's 400 for a thinking template."""
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        self.auth.append(request.headers.get("authorization"))
        user = body["messages"][-1]["content"]
        text = reply_for(user)
        mode = self.mode
        if mode.startswith("say:"):  # say:TEXT: the model writes TEXT, whatever it is
            text, mode = mode[4:], "ok"
        if mode.startswith("scene:"):  # scene:rex, scene:ghost (a speaker not in the cast)
            text, mode = scene_reply(mode.split(":", 1)[1]), "ok"
        last = body["messages"][-1]
        if last["role"] == "assistant" and self.refuse_prefill:
            message = "Assistant response prefill is incompatible with enable_thinking."
            return JSONResponse({"error": {"code": 400, "message": message, "type": "invalid_request_error"}}, 400)
        if last["role"] == "assistant" and text.startswith(last["content"]):  # a prefill: the model goes on from it
            text = text[len(last["content"]) :]
        if mode == "500":
            return JSONResponse({"error": {"message": "model crashed", "type": "server_error"}}, status_code=500)
        if mode in ("401", "403"):
            return JSONResponse({"error": {"message": "invalid api key"}}, status_code=int(mode))
        if mode == "429":
            return JSONResponse({"error": {"message": "slow down"}}, status_code=429, headers={"Retry-After": "7"})
        if mode.startswith("leak"):  # an upstream that quotes the key it was sent (and other secrets) in its error
            return self._leak(mode, request.headers.get("authorization") or "", text)
        if mode == "html":
            return HTMLResponse("<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>", 502)
        if mode == "mute":  # the request read, and no answer (not even its head) for a minute
            await asyncio.sleep(60)
        if mode == "wholestall":
            message = {"role": "assistant", "content": text}
            half = json.dumps({"object": "chat.completion", "choices": [{"index": 0, "message": message}]}).encode()
            return StreamingResponse(_stalled(half[: len(half) // 2]), media_type="application/json")
        if mode == "whole":
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse({"object": "chat.completion", "choices": [choice]})
        tag = re.search(r"S\d+R\d+", user)
        times = self.sent.setdefault(tag.group(), []) if self.sent is not None and tag else None
        if times is not None and tag:
            self.written[tag.group()] = text
        return StreamingResponse(self._stream(mode, text, times), media_type="text/event-stream")

    def _leak(self, mode: str, auth: str, text: str) -> Response:
        """``leak401``, ``leak500``, ``leakhtml``: an error answer quoting ``auth`` and ``LEAKED`` secrets;
        ``leakstream``: half the reply streamed, then an error event quoting them."""
        key = auth.removeprefix("Bearer ")
        words = f"Incorrect API key provided: {auth}. Key {key!r} in use; also {' '.join(LEAKED)}"
        if mode == "leak401":
            return JSONResponse({"error": {"message": words, "type": "invalid_request_error"}}, status_code=401)
        if mode == "leak500":
            return JSONResponse({"error": {"message": f"crashed calling out with {words}"}}, status_code=500)
        if mode == "leakhtml":
            return HTMLResponse(f"<html><head><title>Bad key: {auth}</title></head><p>{words}</p></html>", 502)

        async def events() -> AsyncIterator[bytes]:
            yield chunk_event(text[: len(text) // 2])
            yield b"data: " + json.dumps({"error": {"message": words}}).encode() + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _stream(self, mode: str, text: str, times: list[float] | None = None) -> AsyncIterator[bytes]:
        try:
            yield chunk_event("")
            reasoning = self.reasoning or ""
            for i in range(0, len(reasoning), CHUNK):
                thought = {"index": 0, "delta": {"content": None, "reasoning_content": reasoning[i : i + CHUNK]}}
                yield b"data: %s\n\n" % json.dumps({"object": "chat.completion.chunk", "choices": [thought]}).encode()
            if mode == "badsse":
                yield b"data: {not json\n\n"
                return
            if mode == "refuse":
                refusal = {"index": 0, "delta": {"refusal": "I cannot help with that."}, "finish_reason": None}
                yield b"data: %s\n\n" % json.dumps({"object": "chat.completion.chunk", "choices": [refusal]}).encode()
                yield chunk_event(None, "stop")
                yield b"data: [DONE]\n\n"
                return
            if mode == "trickle":
                for i, byte in enumerate(chunk_event(text[:CHUNK])):
                    yield bytes([byte])
                    await asyncio.sleep(0.1 if i else 0)
            if mode == "silent":
                await asyncio.sleep(60)
            if mode == "stall":  # the reply's first chunk, then keep-alive comments for ever
                yield chunk_event(text[:CHUNK])
            if mode in ("pings", "stall"):  # keep-alive comments, never (another) event
                while True:
                    await asyncio.sleep(0.05)
                    yield b": ping\n\n"
            if mode == "endless":
                yield chunk_event('{"chats":[{"type":"C","order":1,"body":"<msg>')
                while True:
                    yield chunk_event("la ")
                    await asyncio.sleep(0.001)
            if mode == "flood":  # as endless, as fast as it can, 30 characters a token
                yield chunk_event('{"chats":[{"type":"C","order":1,"body":"<msg>')
                while True:
                    yield chunk_event("la " * 10)
                    await asyncio.sleep(0)
            pieces = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
            for i, piece in enumerate(pieces):
                if mode == "cut" and i == len(pieces) // 2:
                    raise ConnectionResetError("scripted cut")
                if mode == "cutclean" and i == len(pieces) // 2:
                    return  # (a clean end of the body: no finish reason, no [DONE])
                if mode == "filter" and i == len(pieces) // 2:
                    yield chunk_event(None, "content_filter")
                    yield b"data: [DONE]\n\n"
                    return
                if mode == "slow":
                    await asyncio.sleep(0.05)
                elif self.delay:
                    await asyncio.sleep(self.delay)
                if times is not None:
                    times.append(time.perf_counter())
                yield chunk_event(piece)
            yield chunk_event(None, "stop")
            yield b"data: [DONE]\n\n"
            self.finished += 1
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise


async def _stalled(first: bytes) -> AsyncIterator[bytes]:
    yield first
    await asyncio.sleep(60)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def loopback(app: Any, *, timeout: float = 10.0) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 in a thread; yields its base URL; stops within ``timeout``."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio", timeout_graceful_shutdown=1
    )  # (an answer left streaming, such as ``mute``'s minute, is cut at the stop, not waited for)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the loopback server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
