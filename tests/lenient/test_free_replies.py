"""The lenient reader on real free replies: SmolLM2 and Gemma 3 270M, without a grammar (issue 29).

``tests/data/free_replies.jsonl`` holds replies the two models wrote to ``render_messages``
requests for the example characters (English and Japanese), each with its own seed
(``tests/data/make_corpus.py`` regenerates it; ``tests/data/README.md`` says how). Over every
reply, read leniently with the character's vocabulary and tags:

- no segment's text is a fragment of markup (``'<'``, ``'/user_chats>'``, ``'type='``, ``'C">'``, ``'"}]'``, a fence);
- no tag is made from a chat-template marker (``<<SYS>>``, ``[INST]``, ``<|im_start|>``,
  ``<start_of_turn>``...), and no segment's text holds one;
- no reply is exploded into one-word chats;
- the stream (as the model streamed it, and cut into single characters) shows the same event
  sequence as the batch parse.

Each reply is read as its caller reads it: told the player's turn it answers (``turn=``), so an
echo of that turn is reported (``CF625``), not shown as the character's speech.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Final

import pytest
from conftest import ROOT, TESTS
from test_stream_events import _batch_events, _observed, _stream

import charfmt
from charfmt.prompt.character import Character

CORPUS: Final = TESTS / "data" / "free_replies.jsonl"
ROWS: Final[list[dict[str, Any]]] = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
IDS: Final = [f"{r['model']}-{r['chat_format'] or 'default'}-{r['character']}-{r['turn_index']}" for r in ROWS]

_PIECE: Final = (
    r"</?(?:[A-Za-z_!?|][\w|!?-]*(?:\s+[\w-]+(?:=\"[^\"]*\"?)?)*\s*/?>?)?"  # a tag, whole or cut: <chat, <
    r"|/?[A-Za-z_][\w-]*\|?>"  # the end of a tag: /user_chats>, msg>
    r"|[\w-]+=\"?"  # an attribute: type=, type="
    r"|\"?[A-Za-z]?\"?>"  # the end of an attribute: C">, ">
    r"|[{}\[\]\",:]+"  # JSON punctuation: "}], {"
    r"|`{3,}\w*"  # a code fence
)
MARKUP_FRAGMENT: Final = re.compile(rf"\s*(?:(?:{_PIECE})\s*)+")
"""A text made of nothing but pieces of markup: no reader may show it as content."""

TEMPLATE_MARKERS: Final = (
    "<<SYS>>", "<</SYS>>", "[INST]", "[/INST]",  # llama-2
    "<|im_start|>", "<|im_end|>",  # ChatML
    "<start_of_turn>", "<end_of_turn>",  # Gemma
    "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",  # Llama 3
    "<|user|>", "<|assistant|>", "<|system|>", "<|end|>",  # Phi
    "<s>", "</s>",  # llama-2, Mistral
)  # fmt: skip
"""The markers of the common chat templates: scaffolding, never a tag, never speech."""

MARKER_TAGS: Final = frozenset(re.sub(r"[^a-z_]", "", m.lower().replace("/", "")) for m in TEMPLATE_MARKERS)
"""The tag names a reader would make of the markers (``sys``, ``inst``, ``im_start``, ``s``...)."""


ONE_WORD: Final = re.compile(r"[^\W_]+(?:['’-][^\W_]+)?[.,!?;:]?", re.ASCII)
"""One word of a language written with spaces (Japanese prose is not cut at spaces: it has none)."""


@functools.cache
def character(stem: str) -> Character:
    return Character.load(ROOT / "examples" / "characters" / f"{stem}.toml")


def read(row: dict[str, Any]) -> charfmt.Reply:
    c = character(row["character"])
    # The caller knows the turn (render_messages built the request from it): an echo of it is told apart.
    return charfmt.parse(
        row["reply"], lenient=True, vocabulary=c.vocabulary, tags=c.tags, turn=c.shorthand(row["turn"])
    )


def test_the_corpus_is_what_its_readme_promises() -> None:
    assert len(ROWS) >= 80
    assert {r["model"] for r in ROWS} == {"smollm2", "gemma"}
    assert {r["language"] for r in ROWS} == {"en", "ja"} and len({r["character"] for r in ROWS}) >= 3
    for row in ROWS:
        assert isinstance(row["seed"], int) and row["reply"] == "".join(row["chunks"])
        assert row["chat_format_used"] and row["max_tokens"] > 0
    keys = [(r["model"], r["chat_format"], r["character"], r["turn_index"]) for r in ROWS]
    assert len(set(keys)) == len(keys)


def test_the_markup_fragment_pattern_knows_a_fragment_from_text() -> None:
    for fragment in ("<", "/user_chats>", "<chat", "type=", 'C">', '"}]', "```json", '<chat type="C">', "</"):
        assert MARKUP_FRAGMENT.fullmatch(fragment), fragment
    for text in ("Hi.", "40 bolts?", "3 < 5", "...", "いらっしゃいませ", "joy", "I said: no", '"Hello," she said.'):
        assert not MARKUP_FRAGMENT.fullmatch(text), text
    assert {"sys", "inst", "im_start", "start_of_turn", "s", "eot_id"} <= MARKER_TAGS


def _fragments(reply: charfmt.Reply) -> list[tuple[str, str]]:
    return [(s.tag, s.text) for c in reply.chats for s in c.segments if MARKUP_FRAGMENT.fullmatch(s.text)]


def _markers(reply: charfmt.Reply) -> list[tuple[str, str]]:
    return [
        (s.tag, s.text)
        for c in reply.chats
        for s in c.segments
        if re.sub(r"[^a-z_]", "", s.tag.lower()) in MARKER_TAGS or any(m in s.text for m in TEMPLATE_MARKERS)
    ]


def _exploded(reply: charfmt.Reply) -> bool:
    """Three chats in a row that each hold one word: prose cut up, not chats the model wrote."""
    run = 0
    for chat in reply.chats:
        text = " ".join(s.text for s in chat.segments if s.tag != "emo").strip()
        run = run + 1 if ONE_WORD.fullmatch(text) else 0
        if run >= 3:
            return True
    return False


def _failing(check: Any) -> list[str]:
    return [ident for ident, row in zip(IDS, ROWS, strict=True) if check(read(row))]


def test_no_segment_is_a_markup_fragment() -> None:
    bad = {i: _fragments(read(r)) for i, r in zip(IDS, ROWS, strict=True)}
    assert {i: f for i, f in bad.items() if f} == {}


def test_no_tag_or_text_is_made_of_a_chat_template_marker() -> None:
    bad = {i: _markers(read(r)) for i, r in zip(IDS, ROWS, strict=True)}
    assert {i: f for i, f in bad.items() if f} == {}


def test_no_reply_is_exploded_into_one_word_chats() -> None:
    assert _failing(_exploded) == []


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_the_stream_shows_what_the_batch_reads(row: dict[str, Any]) -> None:
    c = character(row["character"])
    batch = read(row)
    expected = _observed(list(_batch_events(batch, c.tags)))
    text = row["reply"]
    for chunks in (row["chunks"], list(text)):
        events = _stream(chunks, lenient=True, vocabulary=c.vocabulary, tags=c.tags, turn=c.shorthand(row["turn"]))
        assert _observed(events) == expected
        assert charfmt.collect(events).chats == batch.chats
