"""``iter_events`` and ``aiter_events`` read the SDKs' own stream objects, offline.

Each SDK's real client runs against a mocked transport (``httpx2.MockTransport`` for openai,
anthropic and google-genai, which build on httpx2; ``httpx.MockTransport`` for ollama) that
answers with a streamed body in the provider's recorded wire shape (``tests/sdk_wire.py``), so
the objects charfmt receives are the SDK's own. The events must be those of
``charfmt.parse(text, lenient=True)`` with the provider's reasoning as ``Reasoning``
(compared as a user observes them: adjacent text deltas merged, diagnostics as a sorted list,
from the last ``Reset`` on), sync and async. A missing SDK skips its tests, saying why.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import sdk_wire
from conftest import ROOT

import charfmt

MIO = (ROOT / "examples" / "replies" / "mio.json").read_text(encoding="utf-8")
SHORT = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hello &amp; welcome!</msg>"}]}'
REASONING = 'The player teased Mio; she should be surprised first, then <happy> & "relieved". 次は喜ぶ。'

CASES = [
    pytest.param(MIO, REASONING, id="mio-with-reasoning"),
    pytest.param(
        "Sure! Here it is:\n```json\n" + SHORT.replace("<msg>", "<MSG>").replace("</msg>", "</MSG>") + "\n```",
        "",
        id="damaged",
    ),
    pytest.param("<think>inline too</think>" + SHORT, "provider reasoning; ", id="inline-think"),
]


# -- the SDKs: a client on a mocked transport, and the call that streams ------------------------------


MESSAGES = [{"role": "user", "content": "Mio, I know your secret."}]


@dataclass(frozen=True)
class Sdk:
    """One SDK's way to stream: its wire body, its client, the call (sync and async)."""

    name: str
    wire: Callable[..., bytes]
    client: Callable[[bytes, bool, list[Any]], Any]
    call: Callable[[Any, bool], Any]
    """The stream object (sync) or what ``aiter_events`` is given (async: often not awaited)."""
    streamed: Callable[[Any], bool]
    """Whether the request asked for a stream."""


def _json_flag(key: str) -> Callable[[Any], bool]:
    return lambda request: json.loads(request.content).get(key) is True


SDKS = [
    Sdk(
        "openai-chat",
        sdk_wire.openai_chat_wire,
        sdk_wire.openai_client,
        lambda c, aio: c.chat.completions.create(
            model="deepseek-reasoner", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        ),
        _json_flag("stream"),
    ),
    Sdk(
        "openai-responses",
        sdk_wire.responses_wire,
        sdk_wire.openai_client,
        lambda c, aio: c.responses.create(
            model="gpt-5-mini", input=MESSAGES, reasoning={"effort": "medium", "summary": "auto"}, stream=True
        ),
        _json_flag("stream"),
    ),
    Sdk(
        "openai-chat-helper",  # chat.completions.stream(): its manager, as it is
        sdk_wire.openai_chat_wire,
        sdk_wire.openai_client,
        lambda c, aio: c.chat.completions.stream(model="deepseek-reasoner", messages=MESSAGES),
        _json_flag("stream"),
    ),
    Sdk(
        "openai-responses-helper",  # responses.stream(): its manager, as it is
        sdk_wire.responses_wire,
        sdk_wire.openai_client,
        lambda c, aio: c.responses.stream(
            model="gpt-5-mini", input=MESSAGES, reasoning={"effort": "medium", "summary": "auto"}
        ),
        _json_flag("stream"),
    ),
    Sdk(
        "anthropic",
        sdk_wire.anthropic_wire,
        sdk_wire.anthropic_client,
        lambda c, aio: c.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=1024,
            messages=MESSAGES,
            stream=True,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ),
        _json_flag("stream"),
    ),
    Sdk(
        "anthropic-message-stream",  # the MessageStream helper, given as its (async) context manager
        sdk_wire.anthropic_wire,
        sdk_wire.anthropic_client,
        lambda c, aio: c.messages.stream(
            model="claude-sonnet-4-6",
            max_tokens=1024,
            messages=MESSAGES,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ),
        _json_flag("stream"),
    ),
    Sdk(
        "gemini",
        sdk_wire.gemini_wire,
        sdk_wire.gemini_client,
        lambda c, aio: (c.aio if aio else c).models.generate_content_stream(
            model="gemini-2.5-flash",
            contents="Mio, I know your secret.",
            config={"thinking_config": {"include_thoughts": True}},
        ),
        lambda request: request.url.path.endswith(":streamGenerateContent") and request.url.params["alt"] == "sse",
    ),
    Sdk(
        "ollama-chat",
        sdk_wire.ollama_chat_wire,
        sdk_wire.ollama_client,
        lambda c, aio: c.chat(model="qwen3:0.6b", messages=MESSAGES, stream=True, think=True),
        _json_flag("stream"),
    ),
    Sdk(
        "ollama-generate",
        sdk_wire.ollama_generate_wire,
        sdk_wire.ollama_client,
        lambda c, aio: c.generate(model="qwen3:0.6b", prompt="Mio, I know your secret.", stream=True, think=True),
        _json_flag("stream"),
    ),
]
BY_NAME = {sdk.name: sdk for sdk in SDKS}


def _events(sdk: Sdk, body: bytes, aio: bool, **kwargs: Any) -> list[charfmt.Event]:
    """The events ``iter_events``/``aiter_events`` give for the SDK's stream of ``body``."""
    seen: list[Any] = []
    client = sdk.client(body, aio, seen)
    if aio:

        async def run() -> list[charfmt.Event]:
            return [event async for event in charfmt.aiter_events(sdk.call(client, True), **kwargs)]

        events = asyncio.run(run())
    else:
        events = list(charfmt.iter_events(sdk.call(client, False), **kwargs))
    assert len(seen) == 1 and sdk.streamed(seen[0]), "the SDK made one streaming request"
    return events


# -- what a user observes ---------------------------------------------------------------------------------


def _observed(events: list[charfmt.Event]) -> tuple[str, list[tuple[Any, ...]], list[dict[str, Any]]]:
    """(reasoning, diagnostics sorted, the other events with one segment's text deltas merged)."""
    last_reset = max((n for n, e in enumerate(events) if isinstance(e, charfmt.Reset)), default=-1)
    reasoning: list[str] = []
    diagnostics: list[tuple[Any, ...]] = []
    rest: list[dict[str, Any]] = []
    for event in events[last_reset + 1 :]:
        if isinstance(event, charfmt.Reasoning):
            reasoning.append(event.text)
        elif isinstance(event, charfmt.DiagnosticEvent):
            d = event.diagnostic
            diagnostics.append((d.offset, d.end, d.code, d.message, d.line, d.column, -1 if d.chat is None else d.chat))
        elif (
            rest
            and isinstance(event, charfmt.TextDelta)
            and rest[-1]["kind"] == "text"
            and rest[-1]["segment"] == event.segment
        ):
            rest[-1]["text"] += event.text
        else:
            rest.append(event.to_dict())
    return "".join(reasoning), sorted(diagnostics), rest


def _expected(text: str, reasoning: str) -> list[charfmt.Event]:
    """The batch parse's events, the provider's reasoning first."""
    before: list[charfmt.Event] = [charfmt.Reasoning(reasoning)] if reasoning else []
    return before + list(charfmt.parse(text, lenient=True).events())


def _pieces(text: str, rnd: random.Random) -> list[str]:
    """``text`` cut where a model's tokens might end (1 to 9 characters)."""
    out, i = [], 0
    while i < len(text):
        n = rnd.randint(1, 9)
        out.append(text[i : i + n])
        i += n
    return out


# -- stream = batch, for every SDK, sync and async ------------------------------------------------------


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("sdk", SDKS, ids=[sdk.name for sdk in SDKS])
@pytest.mark.parametrize(("text", "reasoning"), CASES)
def test_the_sdks_stream_gives_the_events_of_the_batch_parse(sdk: Sdk, aio: bool, text: str, reasoning: str) -> None:
    rnd = random.Random(f"{sdk.name}{aio}{text}")
    body = sdk.wire(_pieces(text, rnd), _pieces(reasoning, rnd))
    events = _events(sdk, body, aio)
    assert _observed(events) == _observed(_expected(text, reasoning))
    kinds = [e.kind for e in events]
    assert "reasoning" not in kinds[kinds.index("chat_start") :]  # streamed as it came: before the reply
    reply = charfmt.collect(events)
    batch = charfmt.parse(text, lenient=True)
    assert reply.chats == batch.chats
    assert reply.reasoning == ((reasoning + (batch.reasoning or "")) or None)
    assert sum(isinstance(e, charfmt.TextDelta) for e in events) > sum(
        isinstance(e, charfmt.TextDelta) for e in _expected(text, "")
    )


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
def test_the_provider_reasoning_streams_before_the_reply(aio: bool) -> None:
    sdk = BY_NAME["anthropic"]
    events = _events(sdk, sdk.wire(list(SHORT), ["first ", "second"]), aio)
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["reasoning", "reasoning"] and "reasoning" not in kinds[2:]
    assert [e.text for e in events[:2]] == ["first ", "second"]  # type: ignore[union-attr]


# -- what is not reply text: diagnostics, never a crash -----------------------------------------------------


def _tool_call_chunks() -> list[dict[str, Any]]:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "open_door", "arguments": ""}}
    return [
        sdk_wire.openai_chunk({"tool_calls": [call]}),
        sdk_wire.openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"room":'}}]}),
        sdk_wire.openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "hall"}'}}]}),
    ]


NOT_TEXT = [
    pytest.param(
        "openai-chat",
        lambda: sdk_wire.openai_chat_wire(
            [], extra=[sdk_wire.openai_chunk({"refusal": p}) for p in ("I'm sorry, ", "I can't help with that.")]
        ),
        {"CF821": "I'm sorry, I can't help with that."},
        id="openai-refusal",
    ),
    pytest.param(
        "openai-chat",
        lambda: sdk_wire.openai_chat_wire([SHORT], extra=_tool_call_chunks()),
        {"CF822": "open_door"},
        id="openai-tool-call",
    ),
    pytest.param(
        "openai-chat",
        lambda: sdk_wire.openai_chat_wire([SHORT[:40]], extra=[sdk_wire.openai_chunk({}, "length")]),
        {"CF824": "length", "CF610": ""},
        id="openai-length",
    ),
    pytest.param(
        "openai-responses",
        lambda: sdk_wire.responses_wire(
            [],
            extra=[
                {
                    "type": "response.refusal.delta",
                    "item_id": "msg_1",
                    "output_index": 1,
                    "content_index": 0,
                    "delta": "I can't.",
                },
            ],
        ),
        {"CF821": "I can't."},
        id="responses-refusal",
    ),
    pytest.param(
        "openai-responses",
        lambda: sdk_wire.responses_wire(
            [SHORT],
            extra=[
                {
                    "type": "response.output_item.added",
                    "output_index": 2,
                    "item": {
                        "id": "fc_1",
                        "type": "function_call",
                        "call_id": "call_1",
                        "name": "open_door",
                        "arguments": "",
                        "status": "in_progress",
                    },
                }
            ],
        ),
        {"CF822": "open_door"},
        id="responses-tool-call",
    ),
    pytest.param(
        "anthropic", lambda: sdk_wire.anthropic_wire([], stop="refusal"), {"CF821": "refusal"}, id="anthropic-refusal"
    ),
    pytest.param(
        "anthropic",
        lambda: sdk_wire.anthropic_wire(
            [SHORT],
            stop="tool_use",
            extra=[
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "tool_use", "id": "toolu_1", "name": "open_door", "input": {}},
                },
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": '{"room": "hall"}'},
                },
                {"type": "content_block_stop", "index": 1},
            ],
        ),
        {"CF822": "open_door"},
        id="anthropic-tool-use",
    ),
    pytest.param(
        "gemini",
        lambda: sdk_wire.gemini_wire(
            [SHORT],
            extra=[sdk_wire.gemini_chunk([{"functionCall": {"name": "open_door", "args": {"room": "hall"}}}], "STOP")],
        ),
        {"CF822": "open_door"},
        id="gemini-function-call",
    ),
    pytest.param(
        "gemini",
        lambda: sdk_wire.gemini_wire([SHORT[:30]], finish="SAFETY"),
        {"CF823": "SAFETY", "CF610": ""},
        id="gemini-safety",
    ),
    pytest.param(
        "ollama-chat",
        lambda: sdk_wire.ollama_chat_wire(
            [SHORT],
            extra=[
                {
                    "model": "qwen3:0.6b",
                    "created_at": "2025-11-26T06:30:01Z",
                    "message": {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"function": {"name": "open_door", "arguments": {"room": "hall"}}}],
                    },
                    "done": False,
                }
            ],
        ),
        {"CF822": "open_door"},
        id="ollama-tool-call",
    ),
]


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("name", "body", "said"), NOT_TEXT)
def test_refusals_tool_calls_and_stops_are_diagnostics(
    name: str, body: Callable[[], bytes], said: dict[str, str], aio: bool
) -> None:
    events = _events(BY_NAME[name], body(), aio)
    reply = charfmt.collect(events)
    for code, words in said.items():
        found = [d for d in reply.diagnostics if d.code == code]
        assert found, (code, reply.diagnostics)
        assert len(found) == 1 or not code.startswith("CF82"), found  # one note for the whole stream
        assert words in found[0].message
    if "CF822" in said:  # the reply itself still arrives whole
        assert reply.chats == charfmt.parse(SHORT).chats


def test_a_diagnostic_points_where_the_speech_text_had_reached() -> None:
    text = SHORT[:30] + "\n" + SHORT[30:]
    body = sdk_wire.openai_chat_wire([text[:31], text[31:40]], extra=_tool_call_chunks())
    events = _events(BY_NAME["openai-chat"], body, False)
    (note,) = [e.diagnostic for e in events if isinstance(e, charfmt.DiagnosticEvent) and e.diagnostic.code == "CF822"]
    assert (note.offset, note.line, note.column, note.chat) == (40, 2, 10, None)


# -- whole (not streamed) responses ---------------------------------------------------------------------------


def test_whole_responses_read_like_their_streams() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": sdk_wire.CREATED,
        "model": "deepseek-reasoner",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": MIO, "reasoning_content": REASONING, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    seen: list[Any] = []
    client = sdk_wire.openai_client(json.dumps(completion).encode(), False, seen)
    whole = client.chat.completions.create(model="deepseek-reasoner", messages=MESSAGES)
    assert _observed(list(charfmt.iter_events(whole))) == _observed(_expected(MIO, REASONING))

    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": sdk_wire.CREATED,
        "status": "completed",
        "model": "gpt-5-mini",
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": REASONING}]},
            {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": MIO, "annotations": []}],
            },
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    client = sdk_wire.openai_client(json.dumps(response).encode(), False, seen)
    whole = client.responses.create(model="gpt-5-mini", input=MESSAGES)
    assert _observed(list(charfmt.iter_events(whole))) == _observed(_expected(MIO, REASONING))

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "thinking", "thinking": REASONING, "signature": "x"}, {"type": "text", "text": MIO}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    client = sdk_wire.anthropic_client(json.dumps(message).encode(), False, seen)
    whole = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=MESSAGES)
    assert _observed(list(charfmt.iter_events(whole))) == _observed(_expected(MIO, REASONING))


def test_a_gemini_chunk_with_only_usage_says_nothing() -> None:
    usage = {"usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 9}, "modelVersion": "gemini-2.5-flash"}
    events = _events(BY_NAME["gemini"], sdk_wire.gemini_wire([SHORT], extra=[usage]), False)
    assert charfmt.collect(events) == charfmt.parse(SHORT, lenient=True)
