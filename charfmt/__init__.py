"""charfmt: parse, stream and render game-character chat in a short-tag format for LLMs.

>>> import charfmt
>>> reply = charfmt.parse('{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<msg>Hi!</msg>"}]}')
>>> [(s.tag, s.text) for s in reply.chats[0].segments]
[('emo', 'joy'), ('msg', 'Hi!')]
"""

from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.events import (
    Action,
    ChatEnd,
    ChatStart,
    DiagnosticEvent,
    Emotion,
    Event,
    SegmentEnd,
    SegmentStart,
    TextDelta,
)
from charfmt.models import Chat, EmotionKey, Reply, Segment, Vocabulary
from charfmt.parser import parse
from charfmt.schema import json_schema
from charfmt.tags import TAGS, TagSpec
from charfmt.writer import dumps

__all__ = [
    "TAGS",
    "Action",
    "CharfmtError",
    "Chat",
    "ChatEnd",
    "ChatStart",
    "Diagnostic",
    "DiagnosticEvent",
    "Emotion",
    "EmotionKey",
    "Event",
    "ParseError",
    "Reply",
    "Segment",
    "SegmentEnd",
    "SegmentStart",
    "TagSpec",
    "TextDelta",
    "Vocabulary",
    "dumps",
    "json_schema",
    "parse",
]
