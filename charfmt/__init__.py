"""charfmt: parse, stream and render game-character chat in a short-tag format for LLMs.

>>> import charfmt
>>> reply = charfmt.parse('{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<msg>Hi!</msg>"}]}')
>>> [(s.tag, s.text) for s in reply.chats[0].segments]
[('emo', 'joy'), ('msg', 'Hi!')]
"""

from charfmt.character import Character, CharacterError, Exchange, load_history
from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.events import (
    Action,
    ChatEnd,
    ChatStart,
    DiagnosticEvent,
    Dialect,
    Emotion,
    Event,
    Reset,
    SegmentEnd,
    SegmentStart,
    TextDelta,
)
from charfmt.export import grammar
from charfmt.models import Chat, EmotionKey, Reply, Segment, Vocabulary
from charfmt.parser import parse
from charfmt.render import (
    BudgetError,
    TemplateError,
    estimate_tokens,
    render_messages,
    render_system,
    render_text,
    render_user_block,
)
from charfmt.schema import json_schema
from charfmt.speech import Sentence, SentenceSplitter, sentences
from charfmt.stream import StreamParser, aiter_events, collect, iter_events
from charfmt.tags import TAGS, TagSpec
from charfmt.userinput import UserChat, UserContext, UserTurn, parse_input, parse_shorthand
from charfmt.writer import dumps

__all__ = [
    "TAGS",
    "Action",
    "BudgetError",
    "Character",
    "CharacterError",
    "CharfmtError",
    "Chat",
    "ChatEnd",
    "ChatStart",
    "Diagnostic",
    "DiagnosticEvent",
    "Dialect",
    "Emotion",
    "EmotionKey",
    "Event",
    "Exchange",
    "ParseError",
    "Reply",
    "Reset",
    "Segment",
    "SegmentEnd",
    "SegmentStart",
    "Sentence",
    "SentenceSplitter",
    "StreamParser",
    "TagSpec",
    "TemplateError",
    "TextDelta",
    "UserChat",
    "UserContext",
    "UserTurn",
    "Vocabulary",
    "aiter_events",
    "collect",
    "dumps",
    "estimate_tokens",
    "grammar",
    "iter_events",
    "json_schema",
    "load_history",
    "parse",
    "parse_input",
    "parse_shorthand",
    "render_messages",
    "render_system",
    "render_text",
    "render_user_block",
    "sentences",
]
