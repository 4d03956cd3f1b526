"""Who speaks: a scene's reply written as a transcript read by cast speaker, and ``charfmt parse --character``.

A new user's trial (issue 39.5, fourth round): ``Mio: [joy] わあ！…`` / ``Rex: [annoyed] Twenty bolts.``
read with the scene (``Scene.parse``, and the stream ``charfmt chat --scene`` reads it with) is one chat per
cast member's label, each with its speaker, never one chat that speaks ``Mio:``; and ``charfmt parse
--lenient --character FILE`` tells the reader the character (its name: a speaker label of it is dropped).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.cli import main
from charfmt.prompt.scene import Scene
from charfmt.stream import StreamParser, collect

SCENE = ROOT / "examples" / "scenes" / "mars_shrine.toml"
REX = ROOT / "examples" / "characters" / "rex.toml"
TRANSCRIPT = "Mio: [joy] わあ！直ったの？\nRex: [annoyed] Twenty bolts.\n"


def _read(reply: charfmt.Reply) -> list[tuple[str | None, list[tuple[str, str]]]]:
    return [(c.speaker, [(s.tag, s.text) for s in c.segments]) for c in reply.chats]


def test_a_scene_transcript_is_one_chat_per_cast_speaker() -> None:
    scene = Scene.load(SCENE)
    reply = scene.parse(TRANSCRIPT, lenient=True)
    assert _read(reply) == [
        ("mio", [("emo", "joy"), ("msg", "わあ！直ったの？")]),
        ("rex", [("emo", "annoyed"), ("msg", "Twenty bolts.")]),
    ]
    codes = [d.code for d in reply.diagnostics]
    assert codes.count("CF633") == 2 and "CF309" not in codes  # labels reported; every chat has its speaker


@pytest.mark.parametrize("size", [1, 4, 64])
def test_the_stream_chat_scene_reads_splits_the_same(size: int) -> None:
    """``charfmt chat --scene`` reads the model's chunks with a ``StreamParser`` told the request's messages."""
    scene = Scene.load(SCENE)
    messages = scene.render_messages([], next(iter(scene.cast.values())).shorthand("Can you fix it?"))["messages"]
    options = {"vocabulary": scene.reading_vocabulary, "tags": scene.tags, "prompt": messages}
    parser = StreamParser(lenient=True, **options)
    events = [e for i in range(0, len(TRANSCRIPT), size) for e in parser.feed(TRANSCRIPT[i : i + size])]
    streamed = collect([*events, *parser.close()])
    assert _read(streamed) == _read(scene.parse(TRANSCRIPT, lenient=True, prompt=messages))
    assert [c.speaker for c in streamed.chats] == ["mio", "rex"]
    assert not scene.check(streamed, TRANSCRIPT, lenient=True)


def test_a_label_that_names_no_cast_member_starts_no_chat() -> None:
    scene = Scene.load(SCENE)
    reply = scene.parse("Note: [joy] the bell rings.\n", lenient=True)
    codes = [d.code for d in reply.diagnostics]
    # (no label's speaker: ``joy`` is Mio's key alone, so the chat is hers by its emotion, CF643, not by 'Note:')
    assert [c.speaker for c in reply.chats] == ["mio"] and "CF633" not in codes and "CF643" in codes
    reply = scene.parse("Note: the bell rings.\n", lenient=True)
    assert [c.speaker for c in reply.chats] == [None]


def test_parse_character_drops_the_characters_own_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reply = tmp_path / "reply.txt"
    reply.write_text("Rex: [annoyed] *crosses arms* Forty bolts.\n", encoding="utf-8")
    assert main(["parse", "--lenient", "--character", str(REX), "--format", "json", str(reply)]) == 0
    out = charfmt.Reply.model_validate_json(capsys.readouterr().out)
    assert _read(out) == [(None, [("emo", "annoyed"), ("act", "crosses arms"), ("msg", "Forty bolts.")])]
    assert "CF633" in [d.code for d in out.diagnostics]


WORD = st.from_regex(r"[a-z]{2,9}", fullmatch=True)
SENTENCE = st.lists(WORD, min_size=2, max_size=7).map(lambda w: " ".join(w).capitalize() + ".")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Rex", "rex", "Mio", "ミオ", "mio"]), SENTENCE), min_size=1, max_size=4),
       st.integers(1, 9))  # fmt: skip
def test_each_cast_label_begins_a_chat_of_its_speaker(lines: list[tuple[str, str]], size: int) -> None:
    """Whatever cast members speak, in any order, by name or id: one chat per labelled line, each its speaker's,
    the same streamed (in chunks of ``size``) as read in batch."""
    scene = Scene.load(SCENE)
    text = "".join(f"{who}: {said}\n" for who, said in lines)
    reply = scene.parse(text, lenient=True)
    ids = {"rex": "rex", "mio": "mio", "ミオ": "mio"}
    assert _read(reply) == [(ids[who.casefold()], [("msg", said)]) for who, said in lines]
    parser = StreamParser(lenient=True, vocabulary=scene.reading_vocabulary, tags=scene.tags,
                          prompt=scene.render_system())  # fmt: skip
    events = [e for i in range(0, len(text), size) for e in parser.feed(text[i : i + size])]
    assert collect([*events, *parser.close()]).chats == reply.chats
