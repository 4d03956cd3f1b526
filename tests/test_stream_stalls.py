"""The stream never stalls on a character a finished body may hold (issue 40, item 6): cases as data.

Each case of ``stream_stalls.jsonl`` is fed in 4-character chunks (and in 1-character ones): once
the chunk that completes ``arrives`` has been fed, and at most one chunk more, the speech shown
so far holds ``shows``. The stream still ends as the batch parse does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

import charfmt

CASES: Final = [
    json.loads(line) for line in (Path(__file__).parent / "stream_stalls.jsonl").read_text("utf-8").splitlines()
]
SPEECH: Final = {t.name for t in charfmt.DEFAULT_TAGS.with_role("speech")} | {charfmt.tags.TEXT_TAG}


PENDING: Final = {"off-format: a short Chinese line (issue 40.6)", "off-format: a short Japanese line"}
"""Cases the reader's held last sentence (a quotation may follow and make it narration) keeps back until
close(): being reconciled with the stall goal on the reader and stream work's merge; xfail until then."""


@pytest.mark.parametrize("size", [4, 1])
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason="the held last sentence (being reconciled)"))
        if c["name"] in PENDING
        else c
        for c in CASES
    ],
    ids=[c["name"] for c in CASES],
)
def test_speech_streams_within_one_chunk_of_arriving(case: dict[str, Any], size: int) -> None:
    text = case["text"]
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    done = text.index(case["arrives"]) + len(case["arrives"])  # the characters that must have arrived
    last = min(-(-done // size), len(chunks) - 1)  # chunks to feed: the one completing it, and one more
    parser = charfmt.StreamParser()
    events: list[charfmt.Event] = []
    for chunk in chunks[: last + 1]:
        events += parser.feed(chunk)
    shown = "".join(e.text for e in events if isinstance(e, charfmt.TextDelta) and e.tag in SPEECH)
    assert case["shows"] in shown, f"after {sum(map(len, chunks[: last + 1]))} characters: {shown!r}"
    for chunk in chunks[last + 1 :]:
        events += parser.feed(chunk)
    events += parser.close()
    assert not any(isinstance(e, charfmt.Reset) for e in events)
    assert charfmt.collect(events).chats == charfmt.parse(text, lenient=True).chats
