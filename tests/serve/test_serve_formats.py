"""The reply formats' table (``charfmt.serve.formats.REPLY_FORMATS``): what every row must do, checked for each.

A new ``--reply-format`` is one row; these properties run over every row, so the row is checked
without another edit here (its own expected answers go beside the others in ``tests/serve/test_serve.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.cli import main
from charfmt.serve.emotion_names import KNOWN
from charfmt.serve.formats import FORMATS, REPLY_FORMATS, Formatter, read_answer, whole
from charfmt.tags import DEFAULT_TAGS
from charfmt.testing import chunkings, replies
from charfmt.writer import dumps

EVENT_ROWS = [name for name, row in REPLY_FORMATS.items() if row.from_reply is None]
"""The formats made from a turn's events (every one but ``canonical``)."""

_SETTINGS = settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def test_the_options_choices_and_help_read_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"--reply-format {{{','.join(REPLY_FORMATS)}}}" in shown
    for row in REPLY_FORMATS.values():
        assert f"{row.name} ({row.help})" in shown
    assert tuple(REPLY_FORMATS) == FORMATS and FORMATS[0] == "canonical"


def test_the_formats_that_write_emotions_are_the_rows_with_markers() -> None:
    assert {name: row.emotion_names for name, row in REPLY_FORMATS.items() if row.marker is not None} == KNOWN
    for row in REPLY_FORMATS.values():
        assert (row.markers is None) == (row.read_marker is None) == (row.marker is None), row.name
        assert row.from_reply is None or (row.marker is None and not row.look_alikes), row.name


@pytest.mark.parametrize("fmt", EVENT_ROWS)
@_SETTINGS
@given(reply=replies(), data=st.data())
def test_a_streamed_answer_is_the_whole_answer(fmt: str, reply: charfmt.Reply, data: Any) -> None:
    text = dumps(reply)
    parser, formatter = charfmt.StreamParser(), Formatter(fmt, DEFAULT_TAGS)
    pieces = [formatter.feed(e) for chunk in data.draw(chunkings(text)) for e in parser.feed(chunk)]
    pieces += [formatter.feed(e) for e in parser.close()]
    assert "".join(pieces) == whole(fmt, reply, DEFAULT_TAGS)


@pytest.mark.parametrize("fmt", EVENT_ROWS)
@_SETTINGS
@given(reply=replies())
def test_an_answer_read_back_shows_as_it_was_shown(fmt: str, reply: charfmt.Reply) -> None:
    """Read back (a front end's history) and shown again, an answer is the same text from the second round on
    (the first drops what the format cannot show: a narrator's chat, a thought, spaces at a line's ends)."""

    def again(text: str) -> str:
        back = read_answer(fmt, text, DEFAULT_TAGS)
        return whole(fmt, back, DEFAULT_TAGS) if back is not None else ""

    once = again(whole(fmt, reply, DEFAULT_TAGS))
    assert again(once) == once
