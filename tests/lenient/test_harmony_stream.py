"""gpt-oss "harmony" reasoning and transcripts read without the prompt, streamed: never speech taken back.

The analysis channel (``<|channel|>analysis<|message|>…``) is the model's reasoning wherever the stream
stands: before its ``final`` message arrives it streams as ``Reasoning``, never as speech that a
``Reset`` must take back, and no harmony marker is ever a word said (trial 7, finding 2). A transcript
of a role and a name never told (``Kai: …`` / ``User: …``) streams its reply without a ``Reset`` (finding 1).
"""

from __future__ import annotations

import json
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt.testing import chunkings

_REPLY: Final = json.dumps({"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\n<msg>Hi!</msg>"}]})
_ANALYSIS: Final = "<|channel|>analysis<|message|>Mio should smile and wave. Then say hi. <|end|>"
_FINAL: Final = "<|start|>assistant<|channel|>final<|message|>"
HARMONY: Final = (
    _ANALYSIS + _FINAL + _REPLY,
    _ANALYSIS + _FINAL + "<emo>joy</emo>\n<msg>Hi!</msg><|return|>",
    "<|start|>assistant" + _ANALYSIS + _FINAL + "Hi there, friend!",
    "<|start|>assistant<|channel|>analysis<|message|>Think it through. Wave first.",
    _ANALYSIS + "<|start|>assistant<|channel|>commentary<|message|>Then wave.",
    _ANALYSIS + "<|start|>assistant\nHello there, friend!",
)
TRANSCRIPTS: Final = (
    "Player: hi\nKai: <emo>grumpy</emo>\n<msg>What.</msg>",
    "User: hi\nKai: What do you want?",
    "Kai: What do you want?\nUser: a drink",
    "User: hi\nKaiserin von Wald: What do you want today? Speak up.",
)
_MARKERS: Final = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|", "|>", "assistant", "final")


def _stream(chunks: list[str]) -> list[charfmt.Event]:
    parser = charfmt.StreamParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)]
    return events + parser.close()


def _said(events: list[charfmt.Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, charfmt.TextDelta))


@pytest.mark.parametrize("text", HARMONY)
def test_harmony_reasoning_is_reasoning_in_batch(text: str) -> None:
    reply = charfmt.parse(text, lenient=True)
    assert reply.reasoning is not None and reply.reasoning.startswith(("Mio should", "Think it"))
    assert "CF603" in [d.code for d in reply.diagnostics]
    said = " ".join(s.text for c in reply.chats for s in c.segments)
    assert not any(m in said for m in _MARKERS) and "wave" not in said


@pytest.mark.parametrize("text", HARMONY + TRANSCRIPTS)
@given(data=st.data())
def test_streamed_in_any_chunks_no_reset_and_the_batch_events(text: str, data: st.DataObject) -> None:
    events = _stream(data.draw(chunkings(text)))
    assert not any(isinstance(e, charfmt.Reset) for e in events)
    assert not any(m in _said(events) for m in _MARKERS if m not in {"final"})
    batch = charfmt.parse(text, lenient=True)
    collected = charfmt.collect(events)
    assert (collected.chats, collected.reasoning, collected.dialect) == (batch.chats, batch.reasoning, batch.dialect)


@pytest.mark.parametrize("text", HARMONY)
def test_harmony_reasoning_streams_before_any_speech(text: str) -> None:
    for size in range(1, 12):
        events = _stream([text[i : i + size] for i in range(0, len(text), size)])
        kinds = [type(e) for e in events if isinstance(e, (charfmt.Reasoning, charfmt.TextDelta))]
        assert kinds and kinds[0] is charfmt.Reasoning, size
        assert "wave" not in _said(events), size
