"""Issue 22.1-2: no reader ever shows a piece of markup, an entity or an escape as text.

Every case of tests/cases/markup_cuts.txt (one per dialect of the dialect table) is cut at
every character; the cut reply is read in batch and as a stream in several chunkings, strict
and lenient. Each text a reader shows (a segment's text, the text deltas of a segment so far)
must be a piece of the text the whole reply says: ``'See you</'``, ``'3 < 5 &am'``, ``'"Tom'``
or ``'<'`` never are.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import TESTS, Case, load_cases
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.dialects import DIALECT_NAMES
from charfmt.events import Reset, TextDelta
from charfmt.stream import StreamParser, collect

CASES = load_cases("markup_cuts.txt")
KEYS = frozenset(t.name for t in charfmt.TAGS if t.content == "key")


def _texts(reply: charfmt.Reply) -> list[str]:
    return [s.text for c in reply.chats for s in c.segments if s.tag not in KEYS]


def _pieces_of(case: Case) -> str:
    """The texts the whole reply says, joined by a character none of them holds."""
    return "\x00".join(t for line in case.expected for _tag, t in json.loads(line)[2] if _tag not in KEYS)


def _check(shown: str, whole: str, where: str) -> None:
    assert shown.strip() in whole, f"{shown!r} shown for {where!r}: not a piece of the reply's text"


def _stream(text: str, sizes: list[int], *, lenient: bool) -> tuple[list[object], dict[tuple[int, int], str]]:
    parser = StreamParser(lenient=lenient)
    events: list[object] = []
    shown: dict[tuple[int, int], str] = {}
    pos = k = 0
    try:
        while pos < len(text):
            size = sizes[k % len(sizes)]
            k += 1
            events += parser.feed(text[pos : pos + size])
            pos += size
        events += parser.close()
    except charfmt.ParseError:
        pass
    for e in events:
        if isinstance(e, Reset):
            shown = {}
        elif isinstance(e, TextDelta):
            shown[e.chat, e.segment] = shown.get((e.chat, e.segment), "") + e.text
    return events, shown


def test_the_cases_cover_every_dialect_of_the_table() -> None:
    replies = [charfmt.parse(c.input, lenient=True) for c in CASES]
    met = {r.dialect or "canonical" for r in replies}
    # A tag form names a reply only where no outer form does: seen by its repair (CF705).
    forms = {"dot-notation", "attribute-xml"}
    assert sum("CF705" in {d.code for d in r.diagnostics} for r in replies) >= len(forms)
    # "prose" names text between the elements of a tagged body: the role-play cases hold it.
    assert met | forms | {"prose"} == set(DIALECT_NAMES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_whole_reply_reads_as_expected(case: Case) -> None:
    reply = charfmt.parse(case.input, lenient=True)
    got = [[c.type, c.order, [[s.tag, s.text] for s in c.segments]] for c in reply.chats]
    assert got == [json.loads(line) for line in case.expected]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_reply_cut_anywhere_shows_no_markup_in_batch_or_stream(case: Case) -> None:
    whole = _pieces_of(case)
    for cut in range(1, len(case.input) + 1):
        text = case.input[:cut]
        batch = charfmt.parse(text, lenient=True)
        for shown in _texts(batch):
            _check(shown, whole, text)
        for sizes in ([1], [3, 1, 5]):
            events, deltas = _stream(text, sizes, lenient=True)
            for shown in deltas.values():
                _check(shown, whole, text)
            assert collect(events).chats == batch.chats  # type: ignore[arg-type]
        _events, deltas = _stream(text, [2], lenient=False)
        for shown in deltas.values():
            _check(shown, whole, text)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CASES), st.data())
def test_any_chunking_of_any_cut_shows_no_markup(case: Case, data: st.DataObject) -> None:
    cut = data.draw(st.integers(1, len(case.input)), label="cut")
    sizes = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=8), label="chunk sizes")
    lenient = data.draw(st.booleans(), label="lenient")
    _events, deltas = _stream(case.input[:cut], sizes, lenient=lenient)
    for shown in deltas.values():
        _check(shown, _pieces_of(case), case.input[:cut])


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("<emo>joy</emo>\n<msg>See you</", "See you"),
        ("<emo>joy</emo>\n<msg>3 &lt; 5 &am", "3 < 5"),
        ('{"chats":[{"type":"C","order":1,"body":"<msg>やった 3 &lt; 5 &am', "やった 3 < 5"),
        ('*waves* "Tom', "Tom"),
        ("[joy] Hi [ang", "Hi"),
    ],
)
def test_the_reported_cuts(text: str, want: str) -> None:
    reply = charfmt.parse(text, lenient=True)
    speech = [s.text for c in reply.chats for s in c.segments if s.tag == "msg"]
    assert [s.strip() for s in speech] == [want]
    assert {"CF610", "CF702", "CF716", "CF720"} & {d.code for d in reply.diagnostics}


# --- the real free replies of two small models (tests/data/real_replies.jsonl) -----------------------

REAL = TESTS / "data" / "real_replies.jsonl"
REPLIES = [json.loads(line) for line in REAL.read_text(encoding="utf-8").splitlines()] if REAL.exists() else []
FRAGMENT = re.compile(
    r"""[<＜][/／]?\s*[A-Za-z_|!]      # a tag begun: <msg, </user_chats, <|im_start
      | [A-Za-z_|"']\s*[>＞]           # a tag ended: C">, /user_chats>, |>
      | &\#?[A-Za-z0-9]+;              # an entity left undecoded
      | \\[nu"\\]                      # a JSON escape left undecoded
      | \[/?INST\] | <<|>>             # chat-template scaffolding
      | \btype=|"\s*[}\]]              # the request form's attributes, JSON punctuation
      | ^[^\w.…!?。！？、\s]{1,3}$        # a lone piece of markup punctuation: '<', '"}]'
    """,
    re.X,
)


def test_there_are_real_replies_of_both_models() -> None:
    assert {r["model"] for r in REPLIES} >= {"SmolLM2-135M-Instruct", "gemma-3-270m"}
    assert len(REPLIES) >= 12


@pytest.mark.parametrize("row", REPLIES, ids=[f"{r['model']}-{r['character']}-{i}" for i, r in enumerate(REPLIES)])
def test_a_real_reply_shows_no_markup_in_batch_or_stream(row: dict[str, str]) -> None:
    text = row["reply"]
    batch = charfmt.parse(text, lenient=True)
    for shown in _texts(batch):
        assert not FRAGMENT.search(shown), f"{shown!r} from {text!r}"
    events, deltas = _stream(text, [4], lenient=True)
    for shown in deltas.values():
        assert not FRAGMENT.search(shown), f"{shown!r} streamed from {text!r}"
    assert collect(events).chats == batch.chats  # type: ignore[arg-type]
