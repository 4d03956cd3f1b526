"""What each LLM provider sends on the wire when it streams, in the shape recorded from its API,
and each SDK's real client answered by a mocked transport with it.

Each ``*_wire`` function writes the body of one streamed response (SSE or NDJSON) that carries
``reasoning`` pieces, then ``text`` pieces, then the end of the stream, with every field the
provider sends (ids, usage, sequence numbers, stop reasons), so that the real SDK client, given a
mocked transport that answers with it, yields its own objects. ``extra`` events are spliced in
before the end (a refusal, a tool call, a stop reason) by the tests that need them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

CREATED = 1_764_115_200


def sse(events: Sequence[dict[str, Any]], *, named: bool = False, done: bool = False, crlf: bool = False) -> bytes:
    """Server-sent events: ``data: <json>`` each (``event: <type>`` first when ``named``)."""
    end = "\r\n\r\n" if crlf else "\n\n"
    out = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(event, ensure_ascii=False)}{end}")
    if done:
        out.append(f"data: [DONE]{end}")
    return "".join(out).encode()


def ndjson(lines: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()


# -- OpenAI: chat completions ------------------------------------------------------------------------


def openai_chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {
        "id": "chatcmpl-CfD2s9r0xYlq",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "gpt-5-mini-2025-08-07",
        "service_tier": "default",
        "system_fingerprint": None,
        "choices": [choice],
        "obfuscation": "Zq",
        **more,
    }


def openai_chat_wire(text: Sequence[str], reasoning: Sequence[str] = (), extra: Sequence[dict[str, Any]] = ()) -> bytes:
    """``chat.completions.create(stream=True, stream_options={"include_usage": True})``; reasoning
    as OpenAI-compatible servers stream it (``reasoning_content``: DeepSeek, vLLM)."""
    events = [openai_chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [openai_chunk({"content": None, "reasoning_content": piece}) for piece in reasoning]
    events += [openai_chunk({"content": piece}) for piece in text]
    events += list(extra)
    events.append(openai_chunk({}, "stop"))
    usage = {"prompt_tokens": 412, "completion_tokens": 96, "total_tokens": 508}
    events.append({**openai_chunk({}), "choices": [], "usage": usage})
    return sse(events, done=True)


# -- OpenAI: the Responses API -----------------------------------------------------------------------


def responses_wire(text: Sequence[str], reasoning: Sequence[str] = (), extra: Sequence[dict[str, Any]] = ()) -> bytes:
    """``responses.create(stream=True)`` with a reasoning summary, then one message."""
    response = {
        "id": "resp_68c1f0d2a7f88194",
        "object": "response",
        "created_at": CREATED,
        "status": "in_progress",
        "model": "gpt-5-mini-2025-08-07",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "reasoning": {"effort": "medium", "summary": "auto"},
        "usage": None,
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
    ]
    if reasoning:
        item = {"id": "rs_1", "type": "reasoning", "summary": []}
        events += [
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {
                "type": "response.reasoning_summary_part.added",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "part": {"type": "summary_text", "text": ""},
            },
        ]
        events += [
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "delta": piece,
                "obfuscation": "x",
            }
            for piece in reasoning
        ]
        summary = {"type": "summary_text", "text": "".join(reasoning)}
        events += [
            {
                "type": "response.reasoning_summary_text.done",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "text": summary["text"],
            },
            {
                "type": "response.reasoning_summary_part.done",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "part": summary,
            },
            {"type": "response.output_item.done", "output_index": 0, "item": {**item, "summary": [summary]}},
        ]
    message = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    at = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    events += [
        {"type": "response.output_item.added", "output_index": 1, "item": message},
        {"type": "response.content_part.added", **at, "part": part},
    ]
    events += [
        {"type": "response.output_text.delta", **at, "delta": piece, "logprobs": [], "obfuscation": "x"}
        for piece in text
    ]
    whole = {**part, "text": "".join(text)}
    events += [
        {"type": "response.output_text.done", **at, "text": whole["text"], "logprobs": []},
        {"type": "response.content_part.done", **at, "part": whole},
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {**message, "status": "completed", "content": [whole]},
        },
    ]
    events += list(extra)
    usage = {
        "input_tokens": 412,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 96,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 508,
    }
    events.append({"type": "response.completed", "response": {**response, "status": "completed", "usage": usage}})
    for n, event in enumerate(events):
        event["sequence_number"] = n
    return sse(events, named=True)


# -- Anthropic: the Messages API ---------------------------------------------------------------------


def anthropic_wire(
    text: Sequence[str], reasoning: Sequence[str] = (), stop: str = "end_turn", extra: Sequence[dict[str, Any]] = ()
) -> bytes:
    """``messages.create(stream=True)`` with extended thinking: a thinking block, then a text block."""
    message = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 412,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1,
        },
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    index = 0
    if reasoning:
        events.append(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            }
        )
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": p}}
            for p in reasoning
        ]
        events.append(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM"},
            }
        )
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    events.append({"type": "ping"})
    if text:
        events.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
        events += [
            {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}} for p in text
        ]
        events.append({"type": "content_block_stop", "index": index})
    events += list(extra)
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 96}}
    )
    events.append({"type": "message_stop"})
    return sse(events, named=True)


# -- Gemini: google-genai -----------------------------------------------------------------------------


def gemini_chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": 412,
            "candidatesTokenCount": 96,
            "totalTokenCount": 508,
            "thoughtsTokenCount": 64,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "x0HfaK6gJdGdz7IPx9ybwAo",
    }


def gemini_wire(
    text: Sequence[str], reasoning: Sequence[str] = (), finish: str = "STOP", extra: Sequence[dict[str, Any]] = ()
) -> bytes:
    """``models.generate_content_stream`` with ``thinking_config(include_thoughts=True)`` (``alt=sse``)."""
    events = [gemini_chunk([{"text": p, "thought": True}]) for p in reasoning]
    events += [gemini_chunk([{"text": p}]) for p in text]
    events += list(extra)
    if events and not extra:
        events[-1]["candidates"][0]["finishReason"] = finish
    else:
        events.append(gemini_chunk([{"text": ""}], finish))
    return sse(events, crlf=True)


# -- ollama ---------------------------------------------------------------------------------------------


def ollama_chat_wire(text: Sequence[str], reasoning: Sequence[str] = (), extra: Sequence[dict[str, Any]] = ()) -> bytes:
    """``Client.chat(stream=True, think=True)``: NDJSON, the thinking first, then the content."""

    def line(message: dict[str, Any], done: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": "qwen3:0.6b",
            "created_at": "2025-11-26T06:30:00.123456Z",
            "message": {"role": "assistant", "content": "", **message},
            "done": done,
        }
        if done:
            out.update(
                done_reason="stop",
                total_duration=812345678,
                load_duration=1234567,
                prompt_eval_count=412,
                prompt_eval_duration=2345678,
                eval_count=96,
                eval_duration=7654321,
            )
        return out

    lines = [line({"thinking": p}) for p in reasoning] + [line({"content": p}) for p in text]
    return ndjson([*lines, *extra, line({}, done=True)])


def ollama_generate_wire(
    text: Sequence[str], reasoning: Sequence[str] = (), extra: Sequence[dict[str, Any]] = ()
) -> bytes:
    """``Client.generate(stream=True, think=True)``: NDJSON of ``response`` and ``thinking``."""

    def line(done: bool = False, **fields: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": "qwen3:0.6b",
            "created_at": "2025-11-26T06:30:00.123456Z",
            "response": "",
            "done": done,
            **fields,
        }
        if done:
            out.update(done_reason="stop", context=[1, 2, 3], total_duration=812345678, eval_count=96)
        return out

    lines = [line(thinking=p) for p in reasoning] + [line(response=p) for p in text]
    return ndjson([*lines, *extra, line(done=True)])


# -- the real clients, offline: a mocked transport answers every request with ``body`` -----------------


def _transport(module: Any, body: bytes, content_type: str, seen: list[Any]) -> Any:
    def handler(request: Any) -> Any:
        seen.append(request)
        return module.Response(200, headers={"content-type": content_type}, content=body)

    return module.MockTransport(handler)


def openai_client(body: bytes, aio: bool = False, seen: list[Any] | None = None) -> Any:
    """``openai.OpenAI`` (``AsyncOpenAI``) on ``httpx2.MockTransport``; skips without openai."""
    openai = pytest.importorskip("openai")
    httpx2 = pytest.importorskip("httpx2")
    transport = _transport(httpx2, body, "text/event-stream; charset=utf-8", [] if seen is None else seen)
    kwargs = {"api_key": "sk-test", "base_url": "http://openai.test/v1", "max_retries": 0}
    if aio:
        return openai.AsyncOpenAI(http_client=httpx2.AsyncClient(transport=transport), **kwargs)
    return openai.OpenAI(http_client=httpx2.Client(transport=transport), **kwargs)


def anthropic_client(body: bytes, aio: bool = False, seen: list[Any] | None = None) -> Any:
    """``anthropic.Anthropic`` (``AsyncAnthropic``) on ``httpx2.MockTransport``; skips without anthropic."""
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")
    transport = _transport(httpx2, body, "text/event-stream; charset=utf-8", [] if seen is None else seen)
    kwargs = {"api_key": "sk-ant-test", "base_url": "http://anthropic.test", "max_retries": 0}
    if aio:
        return anthropic.AsyncAnthropic(http_client=httpx2.AsyncClient(transport=transport), **kwargs)
    return anthropic.Anthropic(http_client=httpx2.Client(transport=transport), **kwargs)


def gemini_client(body: bytes, aio: bool = False, seen: list[Any] | None = None) -> Any:
    """``google.genai.Client`` with an httpx2 client on ``MockTransport``; skips without google-genai."""
    genai = pytest.importorskip("google.genai")
    httpx2 = pytest.importorskip("httpx2")
    transport = _transport(httpx2, body, "text/event-stream", [] if seen is None else seen)
    options: dict[str, Any] = {"base_url": "http://gemini.test"}
    if aio:
        options["httpx_async_client"] = httpx2.AsyncClient(transport=transport)
    else:
        options["httpx_client"] = httpx2.Client(transport=transport)
    return genai.Client(api_key="test-key", http_options=genai.types.HttpOptions(**options))


def ollama_client(body: bytes, aio: bool = False, seen: list[Any] | None = None) -> Any:
    """``ollama.Client`` (``AsyncClient``) on ``httpx.MockTransport``; skips without ollama."""
    ollama = pytest.importorskip("ollama")
    httpx = pytest.importorskip("httpx")
    transport = _transport(httpx, body, "application/x-ndjson", [] if seen is None else seen)
    return (ollama.AsyncClient if aio else ollama.Client)(host="http://ollama.test", transport=transport)


def readme_namespace(block: str, reply: str) -> dict[str, Any]:
    """What the README's SDK samples assume, offline: each client named in ``block`` answering with
    ``reply`` in 5-character deltas (after a little reasoning), ``messages``, a LangChain prompt and
    fake chat model. Skips the sample where its SDK is not installed."""
    text = [reply[i : i + 5] for i in range(0, len(reply), 5)]
    reasoning = ["The player greets Mio; ", "she is glad."]
    out: dict[str, Any] = {"messages": [{"role": "user", "content": "Hi, Mio!"}]}
    if "openai_client" in block:
        out["openai_client"] = openai_client(openai_chat_wire(text, reasoning))
    if "anthropic_client" in block:
        out["anthropic_client"] = anthropic_client(anthropic_wire(text, reasoning))
    if "genai_client" in block:
        out["genai_client"] = gemini_client(gemini_wire(text, reasoning))
    if "ollama_client" in block:
        out["ollama_client"] = ollama_client(ollama_chat_wire(text, reasoning))
    if "chat_model" in block:
        pytest.importorskip("langchain_core", reason="langchain-core is not installed (extra 'langchain')")
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.prompts import ChatPromptTemplate

        out["prompt"] = ChatPromptTemplate.from_messages([("system", "{format}"), ("human", "{input}")])
        out["chat_model"] = GenericFakeChatModel(messages=iter([AIMessage(content=reply)] * 8))
    return out
