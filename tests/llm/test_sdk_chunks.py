"""How ``iter_events`` reads stream items of any SDK, without the SDKs: their JSON shapes as dicts.

The SDKs' real clients are exercised in ``test_sdk_streams.py``; here, the table of rules
(which rule reads which item, first match wins), what charfmt does with an item it cannot read,
a ``Reset`` after provider reasoning, ``interop.text_deltas`` on SDK events, and that no SDK
is imported by charfmt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt import interop
from charfmt.llm import _sdk_chunks
from charfmt.testing import chunkings, damaged_replies

SHORT = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hello &amp; welcome!</msg>"}]}'

# (the rule that must read it, the item as the SDK's JSON, (text, reasoning, refusal, note codes))
ITEMS: list[tuple[str, Any, tuple[str, str, str, list[str]]]] = [
    ("text", "hi", ("hi", "", "", [])),
    ("openai-chat", {"choices": [{"index": 0, "delta": {"content": "hi"}}]}, ("hi", "", "", [])),
    ("openai-chat", {"choices": [{"index": 0, "delta": {"content": None, "reasoning": "r"}}]}, ("", "r", "", [])),
    ("openai-chat", {"choices": [{"index": 0, "message": {"content": None, "refusal": "no"}}]}, ("", "", "no", [])),
    ("openai-chat", {"choices": [{"index": 1, "delta": {"content": "other"}}]}, ("", "", "", ["CF825"])),
    ("openai-chat", {"choices": [], "usage": {"total_tokens": 3}}, ("", "", "", [])),
    ("openai-chat", {"choices": [{"index": 0, "text": "hi", "finish_reason": None}]}, ("hi", "", "", [])),
    ("openai-responses", {"type": "response.output_text.delta", "delta": "hi"}, ("hi", "", "", [])),
    ("openai-responses", {"type": "response.reasoning_summary_part.added", "summary_index": 0}, ("", "", "", [])),
    ("openai-responses", {"type": "response.reasoning_summary_part.added", "summary_index": 1}, ("", "\n\n", "", [])),
    ("openai-responses", {"type": "response.reasoning_text.delta", "delta": "r"}, ("", "r", "", [])),
    (
        "openai-responses",
        {"type": "response.incomplete", "response": {"incomplete_details": {"reason": "max_output_tokens"}}},
        ("", "", "", ["CF824"]),
    ),
    (
        "openai-responses",
        {"type": "response.failed", "response": {"error": {"message": "boom"}}},
        ("", "", "", ["CF826"]),
    ),
    (
        "error-event",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ("", "", "", ["CF826"]),
    ),
    ("anthropic", {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}, ("hi", "", "", [])),
    (
        "anthropic",
        {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "r"}},
        ("", "r", "", []),
    ),
    ("anthropic", {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}, ("", "", "", ["CF824"])),
    ("anthropic", {"type": "message_delta", "delta": {"stop_reason": "pause_turn"}}, ("", "", "", ["CF827"])),
    ("helper-derived", {"type": "text", "text": "hi", "snapshot": "hi"}, ("", "", "", [])),
    ("helper-derived", {"type": "content.delta", "delta": "hi", "snapshot": "hi"}, ("", "", "", [])),
    (
        "openai-chat-helper",
        {"type": "chunk", "chunk": {"choices": [{"index": 0, "delta": {"content": "hi"}}]}},
        ("hi", "", "", []),
    ),
    (
        "gemini",
        {"candidates": [{"content": {"parts": [{"text": "r", "thought": True}, {"text": "hi"}]}}]},
        ("hi", "r", "", []),
    ),
    ("gemini", {"prompt_feedback": {"block_reason": "SAFETY"}}, ("", "", "", ["CF823"])),
    ("gemini", {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}, ("", "", "", ["CF823"])),
    (
        "gemini",
        {"candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "MAX_TOKENS"}]},
        ("hi", "", "", ["CF824"]),
    ),
    (
        "gemini",
        {"candidates": [{"content": {"parts": [{"executable_code": {"code": "1+1"}}]}}]},
        ("", "", "", ["CF822"]),
    ),
    ("ollama", {"message": {"content": "hi", "thinking": "r"}, "done": False}, ("hi", "r", "", [])),
    ("ollama", {"response": "hi", "done": True, "done_reason": "length"}, ("hi", "", "", ["CF824"])),
    (
        "langchain",
        {"content": [{"type": "thinking", "thinking": "r"}, {"type": "text", "text": "hi"}], "additional_kwargs": {}},
        ("hi", "r", "", []),
    ),
    (
        "langchain",
        {
            "content": "",
            "additional_kwargs": {"reasoning_content": "r"},
            "tool_call_chunks": [{"name": "f", "index": 0}],
        },
        ("", "r", "", ["CF822"]),
    ),
]


@pytest.mark.parametrize(("rule", "item", "piece"), ITEMS, ids=[f"{n}-{r}" for n, (r, _i, _p) in enumerate(ITEMS)])
def test_each_item_is_read_by_its_rule(rule: str, item: Any, piece: tuple[str, str, str, list[str]]) -> None:
    found = _sdk_chunks.rule_for(item)
    assert found is not None and found.name == rule
    got = found.read(item)
    assert (got.text, got.reasoning, got.refusal, [code for code, _ in got.notes]) == piece


def test_the_rules_are_one_ordered_table_and_the_module_docstring_lists_it_in_order() -> None:
    names = [rule.name for rule in _sdk_chunks.RULES]
    doc = _sdk_chunks.__doc__ or ""
    assert [doc.index(f"``{name}``") for name in names] == sorted(doc.index(f"``{name}``") for name in names)


def test_a_second_choice_is_one_diagnostic_for_the_whole_stream() -> None:
    def chunk(index: int, text: str) -> dict[str, Any]:
        return {"choices": [{"index": index, "delta": {"content": text}}]}

    items = [item for i in range(0, len(SHORT), 10) for item in (chunk(0, SHORT[i : i + 10]), chunk(1, "other"))]
    reply = charfmt.collect(charfmt.iter_events(items))
    assert reply.chats == charfmt.parse(SHORT).chats
    assert [(d.code, d.offset) for d in reply.diagnostics] == [("CF825", 10)]


def test_an_item_charfmt_cannot_read_is_one_diagnostic_per_type_and_the_stream_goes_on() -> None:
    events = list(charfmt.iter_events([5, SHORT[:20], None, 6, SHORT[20:], object()]))
    notes = [e.diagnostic for e in events if isinstance(e, charfmt.DiagnosticEvent)]
    assert [(d.code, d.offset) for d in notes] == [("CF825", 0), ("CF825", 20), ("CF825", len(SHORT))]
    assert "int" in notes[0].message and "NoneType" in notes[1].message
    assert charfmt.collect(events).chats == charfmt.parse(SHORT).chats


def test_after_a_reset_the_provider_reasoning_and_diagnostics_are_shown_again() -> None:
    damaged = SHORT.replace("<msg>", "<MSG>").replace("</msg>", "</MSG>")
    items: list[Any] = [
        {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]},
        damaged[:30],
        5,
        damaged[30:],
    ]
    events = list(charfmt.iter_events(items, keep_reply=False))  # a damaged stream without a kept reply: a Reset
    assert any(isinstance(e, charfmt.Reset) for e in events)
    reply = charfmt.collect(events)
    batch = charfmt.parse(damaged, lenient=True)
    assert reply.reasoning == "hmm"
    assert reply.chats == batch.chats
    assert sorted(d.code for d in reply.diagnostics) == sorted([*(d.code for d in batch.diagnostics), "CF825"])


def test_a_whole_text_or_response_is_one_item() -> None:
    whole = {"choices": [{"index": 0, "message": {"content": SHORT}}]}
    assert charfmt.collect(charfmt.iter_events(whole)) == charfmt.parse(SHORT, lenient=True)


def test_aiter_events_takes_sync_items_and_an_awaitable_stream() -> None:
    import asyncio

    async def stream() -> Any:
        async def items() -> Any:
            yield {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "r"}}
            yield {"type": "content_block_delta", "delta": {"type": "text_delta", "text": SHORT}}

        return items()

    async def run(source: Any) -> charfmt.Reply:
        return charfmt.collect([e async for e in charfmt.aiter_events(source)])

    want = charfmt.parse(SHORT, lenient=True).model_copy(update={"reasoning": "r"})
    assert asyncio.run(run(stream())) == want
    assert asyncio.run(run([SHORT])) == charfmt.parse(SHORT, lenient=True)


def test_interop_text_deltas_reads_anthropic_text_deltas_and_none_content() -> None:
    items: list[Any] = [
        {"type": "message_start", "message": {"content": []}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}},
        *(
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": SHORT[i : i + 7]}}
            for i in range(0, len(SHORT), 7)
        ),
        {"choices": [{"index": 0, "delta": {"content": None, "refusal": None}}]},
        {"delta": {"contents": None}},
        {"type": "message_stop"},
    ]
    assert "".join(interop.text_deltas(items)) == SHORT
    assert charfmt.collect(charfmt.iter_events(interop.text_deltas(items))).chats == charfmt.parse(SHORT).chats


def test_charfmt_imports_no_sdk() -> None:
    shapes = [
        {"choices": [{"index": 0, "delta": {"content": SHORT}}]},
        {"type": "response.output_text.delta", "delta": "x"},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}},
        {"candidates": []},
        {"message": {"content": "x"}, "done": True},
        {"content": "x", "additional_kwargs": {}},
    ]
    code = (
        "import sys, json, charfmt\n"
        f"list(charfmt.iter_events(json.loads({json.dumps(json.dumps(shapes))})))\n"
        "from charfmt import interop\n"
        "sdks = ('openai', 'anthropic', 'google.genai', 'ollama', 'langchain_core')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in sdks or m in sdks))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_sdk_example_runs_without_the_sdks() -> None:
    """``examples/stream_sdk.py`` with the SDKs (``test_docs``) and without: their JSON stands in."""
    example = ROOT / "examples" / "stream_sdk.py"
    code = (
        "import runpy, sys\n"
        "sys.modules['httpx2'] = None  # as if not installed\n"
        f"runpy.run_path({str(example)!r}, run_name='__main__')\n"
        "assert 'openai' not in sys.modules and 'anthropic' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "emotion -> surprise" in out.stdout and "reasoning += " in out.stdout


def test_an_async_stream_given_to_iter_events_is_a_clear_error() -> None:
    async def stream() -> Any:
        yield SHORT

    async def call() -> Any:
        return [SHORT]

    for wrong in (stream(), call()):
        with pytest.raises(TypeError, match="aiter_events"):
            list(charfmt.iter_events(wrong))
        if hasattr(wrong, "close"):
            wrong.close()  # (the coroutine, never awaited)


def test_a_diagnostic_after_many_text_chunks_points_at_the_end_of_their_text() -> None:
    text = SHORT.replace("\\n", "\\n ") * 3 + "\nlast line"
    for chunks in ([*text], [text.encode()[i : i + 1] for i in range(len(text))]):
        events = list(charfmt.iter_events([*chunks, 5]))  # past FOLD chunks, str or bytes
        (note,) = [
            e.diagnostic for e in events if isinstance(e, charfmt.DiagnosticEvent) and e.diagnostic.code == "CF825"
        ]
        assert len(chunks) > _sdk_chunks.FOLD
        assert (note.offset, note.line, note.column) == (len(text), 2, len("last line") + 1)


# Each SDK's item carrying one text delta, one reasoning delta (as the SDK's JSON).
SHAPES: dict[str, tuple[Any, Any]] = {
    "openai-chat": (
        lambda t: {"choices": [{"index": 0, "delta": {"content": t}}]},
        lambda r: {"choices": [{"index": 0, "delta": {"content": None, "reasoning_content": r}}]},
    ),
    "openai-responses": (
        lambda t: {"type": "response.output_text.delta", "delta": t},
        lambda r: {"type": "response.reasoning_summary_text.delta", "delta": r},
    ),
    "anthropic": (
        lambda t: {"type": "content_block_delta", "delta": {"type": "text_delta", "text": t}},
        lambda r: {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": r}},
    ),
    "gemini": (
        lambda t: {"candidates": [{"content": {"parts": [{"text": t}]}}]},
        lambda r: {"candidates": [{"content": {"parts": [{"text": r, "thought": True}]}}]},
    ),
    "ollama": (
        lambda t: {"message": {"content": t}, "done": False},
        lambda r: {"message": {"content": "", "thinking": r}, "done": False},
    ),
    "langchain": (
        lambda t: {"content": [{"type": "text", "text": t}], "additional_kwargs": {}},
        lambda r: {"content": "", "additional_kwargs": {"reasoning_content": r}},
    ),
}


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(damaged=damaged_replies(), sdk=st.sampled_from(sorted(SHAPES)), reasoning=st.text(max_size=20), data=st.data())
def test_any_sdk_any_chunking_collects_to_the_batch_result(
    damaged: Any, sdk: str, reasoning: str, data: st.DataObject
) -> None:
    text: str = damaged.text
    wrap_text, wrap_reasoning = SHAPES[sdk]
    items = [wrap_reasoning(r) for r in data.draw(chunkings(reasoning)) if r]
    items += [wrap_text(t) for t in data.draw(chunkings(text))]
    events = list(charfmt.iter_events(items))
    batch = charfmt.parse(text, lenient=True)
    want = batch.model_copy(update={"reasoning": (reasoning + (batch.reasoning or "")) or None})
    assert charfmt.collect(events) == want


def test_the_langchain_integration_without_langchain_says_how_to_install_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['langchain_core'] = None  # as if not installed\n"
        "try:\n"
        "    import charfmt.integrations.langchain\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'charfmt[langchain]'" in out.stdout


def _reasoning(events: list[Any]) -> str:
    return "".join(e.text for e in events if e.kind == "reasoning")


def test_reasoning_summary_parts_are_paragraphs_in_every_shape() -> None:
    parts = [{"type": "summary_text", "text": "First."}, {"type": "summary_text", "text": "Second."}]
    response = {
        "object": "response",
        "output": [
            {"type": "reasoning", "summary": parts},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Third."}]},
            {"type": "message", "content": [{"type": "output_text", "text": SHORT}]},
        ],
    }
    assert _reasoning(list(charfmt.iter_events(response))) == "First.\n\nSecond.\n\nThird."
    message = {
        "content": [{"type": "reasoning", "summary": parts}, {"type": "text", "text": SHORT}],
        "additional_kwargs": {},
    }
    assert _reasoning(list(charfmt.iter_events(message))) == "First.\n\nSecond."


def test_an_anthropic_pause_turn_is_a_diagnostic() -> None:
    stream = [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": SHORT}},
        {"type": "message_delta", "delta": {"stop_reason": "pause_turn"}},
    ]
    codes = [e.diagnostic.code for e in charfmt.iter_events(stream) if e.kind == "diagnostic"]
    assert codes == ["CF827"]


class _Opened:
    """An SDK's async stream (or response) that records whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    def __aiter__(self) -> Any:
        return self._items()

    async def _items(self) -> Any:
        for i in range(0, len(SHORT), 8):
            yield {"choices": [{"index": 0, "delta": {"content": SHORT[i : i + 8]}}]}

    async def close(self) -> None:
        self.closed = True


class _Manager:
    """``AsyncAnthropic().messages.stream(...)``: an async context manager that opens a stream."""

    def __init__(self) -> None:
        self.stream = _Opened()
        self.exited = False

    async def __aenter__(self) -> _Opened:
        return self.stream

    async def __aexit__(self, *exc: object) -> None:
        self.exited = True


def test_aiter_events_left_early_closes_what_it_opened() -> None:
    import asyncio

    async def first_then_close(source: Any) -> None:
        events = charfmt.aiter_events(source)
        async for _event in events:
            break
        await events.aclose()

    manager = _Manager()
    asyncio.run(first_then_close(manager))
    assert manager.exited  # the manager's exit ran (it closes the response)

    opened = _Opened()

    async def create() -> _Opened:  # create(..., stream=True) before await
        return opened

    asyncio.run(first_then_close(create()))
    assert opened.closed

    mine = _Opened()  # a stream the caller opened is the caller's to close
    asyncio.run(first_then_close(mine))
    assert not mine.closed
