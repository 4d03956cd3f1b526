"""A test a game developer writes for their own event handler, with charfmt's strategies.

Run: pip install 'charfmt[testing]' pytest && pytest examples/test_event_handler.py

The handler below stands for your game code. The properties say: it never crashes on
anything a model may send (damaged replies, cut into random chunks), it never shows
markup, and the sprite always ends on a key the character knows.
"""

from __future__ import annotations

from hypothesis import given

import charfmt
from charfmt.testing import chunkings, damaged_replies

VOCABULARY = charfmt.Vocabulary(
    emotions=[{"key": "joy", "aliases": ["happy"]}, "sad", "angry", "surprise", "neutral"],
    policy="fallback",
    fallback="neutral",
)


class MessageWindow:
    """Your game's code: a sprite and a message window driven by events."""

    def __init__(self) -> None:
        self.sprite = "neutral"
        self.shown = ""

    def handle(self, event: charfmt.Event) -> None:
        if isinstance(event, charfmt.Emotion):
            self.sprite = event.text
        elif isinstance(event, charfmt.TextDelta) and event.tag == "msg":
            self.shown += event.text
        elif isinstance(event, charfmt.Reset):
            self.shown = ""


@given(damaged_replies())
def test_handler_survives_whatever_the_model_sends(damaged: charfmt.fuzz.Damaged) -> None:
    window = MessageWindow()
    for event in charfmt.parse(damaged.text, lenient=True, vocabulary=VOCABULARY).events():
        window.handle(event)
    assert window.sprite in VOCABULARY.keys or window.sprite == "neutral"


@given(damaged_replies().flatmap(lambda d: chunkings(d.text).map(lambda chunks: (d, chunks))))
def test_streamed_text_never_shows_a_tag(case: tuple[charfmt.fuzz.Damaged, list[str]]) -> None:
    _damaged, chunks = case
    window = MessageWindow()
    for event in charfmt.iter_events(chunks, vocabulary=VOCABULARY):
        window.handle(event)
    for tag in charfmt.TAGS:
        assert tag.open not in window.shown and tag.close not in window.shown
