"""Feed an OpenAI-style or Anthropic-style SDK stream to charfmt (offline, on a fake stream).

Run: python examples/stream_sdk.py

Both SDKs stream objects, not text. ``text_of`` is duck-typed over their delta shapes:
OpenAI chat completions chunks (``chunk.choices[0].delta.content``) and Anthropic
message events (``event.type == "content_block_delta"``, ``event.delta.text``).
Replace the fake streams with ``client.chat.completions.create(..., stream=True)`` or
``client.messages.create(..., stream=True)``; nothing else changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import charfmt

REPLY = (Path(__file__).parent / "replies" / "mio.json").read_text(encoding="utf-8")


def text_of(item: Any) -> str | None:
    """The text in one streamed SDK item, whichever SDK it came from."""
    choices = getattr(item, "choices", None)
    if choices:  # OpenAI: ChatCompletionChunk
        return getattr(choices[0].delta, "content", None)
    if getattr(item, "type", None) == "content_block_delta":  # Anthropic: RawContentBlockDeltaEvent
        return getattr(item.delta, "text", None)
    return None


def texts(stream: Iterable[Any]) -> Iterator[str]:
    """Only the text pieces of an SDK stream."""
    for item in stream:
        text = text_of(item)
        if text:
            yield text


def fake_openai_stream(reply: str, size: int = 5) -> Iterator[Any]:
    """What ``client.chat.completions.create(stream=True)`` yields, offline."""
    yield SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(role="assistant", content=None))])
    for i in range(0, len(reply), size):
        yield SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(content=reply[i : i + size]))])
    yield SimpleNamespace(choices=[])  # the usage chunk at the end


async def fake_anthropic_stream(reply: str, size: int = 7) -> AsyncIterator[Any]:
    """What ``await client.messages.create(stream=True)`` yields, offline."""
    yield SimpleNamespace(type="message_start")
    yield SimpleNamespace(type="content_block_start", index=0)
    for i in range(0, len(reply), size):
        yield SimpleNamespace(
            type="content_block_delta", index=0, delta=SimpleNamespace(type="text_delta", text=reply[i : i + size])
        )
    yield SimpleNamespace(type="content_block_stop", index=0)
    yield SimpleNamespace(type="message_stop")


async def atexts(stream: AsyncIterator[Any]) -> AsyncIterator[str]:
    """Only the text pieces of an async SDK stream."""
    async for item in stream:
        text = text_of(item)
        if text:
            yield text


def show(event: charfmt.Event) -> None:
    if isinstance(event, charfmt.Emotion):
        print(f"  emotion -> {event.text}")
    elif isinstance(event, charfmt.TextDelta) and event.tag == "msg":
        print(f"  msg += {event.text!r}")


def main() -> int:
    print("OpenAI-style stream:")
    for event in charfmt.iter_events(texts(fake_openai_stream(REPLY))):
        show(event)

    print("Anthropic-style stream (async):")

    async def run() -> charfmt.Reply:
        events = [event async for event in charfmt.aiter_events(atexts(fake_anthropic_stream(REPLY)))]
        for event in events:
            show(event)
        return charfmt.collect(events)

    reply = asyncio.run(run())
    assert reply.chats == charfmt.parse(REPLY).chats  # the stream rebuilds exactly the batch result
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
