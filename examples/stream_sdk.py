"""Feed an SDK's own stream to charfmt: the OpenAI client (sync) and the Anthropic client (async), offline.

Run: python examples/stream_sdk.py

``charfmt.iter_events(stream)`` and ``charfmt.aiter_events(stream)`` take what the SDK returns
as it is: the reply text goes to the parser, the model's reasoning becomes ``Reasoning``
events, a refusal or a tool call a diagnostic. Here the real clients talk to a replayed
response instead of the network (a mocked httpx2 transport); with an API key, drop the
``http_client=`` and ``base_url=`` arguments and nothing else changes. Without the SDKs
installed (``pip install openai anthropic``), the same stream events are given as the JSON
the SDKs would parse, which charfmt reads the same way.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import charfmt

try:  # the SDKs (pip install openai anthropic); without them, the JSON they would parse stands in
    import httpx2  # their HTTP client
    from anthropic import AsyncAnthropic
    from openai import OpenAI
except ImportError:
    httpx2 = None

REPLY = (Path(__file__).parent / "replies" / "mio.json").read_text(encoding="utf-8")
REASONING = "The player knows Mio's secret: she is caught out, then happy."
MESSAGES = [{"role": "user", "content": "Mio, I know about the festival outfit."}]


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_events() -> list[dict[str, Any]]:
    """A chat completions stream as sent on the wire (reasoning as OpenAI-compatible servers send it)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}

    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"reasoning_content": p}) for p in pieces(REASONING, 8)),
        *(chunk({"content": p}) for p in pieces(REPLY, 5)),
        chunk({}, "stop"),
    ]


def anthropic_events() -> list[dict[str, Any]]:
    """A Messages API stream with extended thinking, as sent on the wire."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": []}
    delta = "content_block_delta"
    return [
        {"type": "message_start", "message": {**message, "usage": {"input_tokens": 1, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        *(
            {"type": delta, "index": 0, "delta": {"type": "thinking_delta", "thinking": p}}
            for p in pieces(REASONING, 8)
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        *({"type": delta, "index": 1, "delta": {"type": "text_delta", "text": p}} for p in pieces(REPLY, 7)),
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]


def replay(events: list[dict[str, Any]], aio: bool = False) -> Any:
    """An httpx2 client that answers every request with ``events`` as server-sent events."""
    body = "".join(f"event: {e.get('type', 'chunk')}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
    transport = httpx2.MockTransport(
        lambda request: httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    )
    return httpx2.AsyncClient(transport=transport) if aio else httpx2.Client(transport=transport)


def show(event: charfmt.Event) -> None:
    if isinstance(event, charfmt.Reasoning):
        print(f"  reasoning += {event.text!r}")
    elif isinstance(event, charfmt.Emotion):
        print(f"  emotion -> {event.text}")
    elif isinstance(event, charfmt.TextDelta) and event.tag == "msg":
        print(f"  msg += {event.text!r}")
    elif isinstance(event, charfmt.DiagnosticEvent):
        print(f"  {event.diagnostic}")


def openai_stream() -> Any:
    if httpx2 is None:
        return openai_events()  # what the SDK would parse into ChatCompletionChunk objects
    client = OpenAI(api_key="offline", base_url="http://replay.invalid/v1", http_client=replay(openai_events()))
    return client.chat.completions.create(model="gpt-5-mini", messages=MESSAGES, stream=True)


def anthropic_stream() -> Any:
    if httpx2 is None:

        async def events() -> Any:
            for event in anthropic_events():
                yield event

        return events()
    client = AsyncAnthropic(
        api_key="offline", base_url="http://replay.invalid", http_client=replay(anthropic_events(), True)
    )
    # The MessageStream helper's manager, as it is: aiter_events opens and closes it.
    return client.messages.stream(model="claude-sonnet-4-6", max_tokens=1024, messages=MESSAGES)


def main() -> int:
    print("OpenAI chat completions stream:")
    events = list(charfmt.iter_events(openai_stream()))
    for event in events:
        show(event)

    print("Anthropic stream (async):")

    async def run() -> list[charfmt.Event]:
        return [event async for event in charfmt.aiter_events(anthropic_stream())]

    async_events = asyncio.run(run())
    for event in async_events:
        show(event)

    batch = charfmt.parse(REPLY)
    for reply in (charfmt.collect(events), charfmt.collect(async_events)):
        assert reply.chats == batch.chats  # the stream rebuilds exactly the batch result
        assert reply.reasoning == REASONING  # and the provider's reasoning, kept apart
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
