"""The stream never stalls on a character a finished body may hold (issue 40, item 6): cases as data.

Each case of ``stream_stalls.jsonl`` is fed in 4-character chunks (and in 1-character ones): once
the chunk that completes ``arrives`` has been fed, and at most one chunk more, the speech shown
so far holds ``shows``. The stream still ends as the batch parse does. ``sizes``, where a case
has it, names the chunk sizes it holds for: a short reply that leaves the format, cut into
1-character chunks, may spend the rereads' budget (a bounded multiple of the text) before its end.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from conftest import TESTS

import charfmt

CASES: Final = [json.loads(line) for line in (TESTS / "stream_stalls.jsonl").read_text("utf-8").splitlines()]
SPEECH: Final = {t.name for t in charfmt.DEFAULT_TAGS.with_role("speech")} | {charfmt.tags.TEXT_TAG}


@pytest.mark.parametrize(
    ("case", "size"),
    [(c, size) for c in CASES for size in c.get("sizes", [4, 1])],
    ids=[f"{c['name']}-{size}" for c in CASES for size in c.get("sizes", [4, 1])],
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
