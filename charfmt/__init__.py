"""charfmt: parse, stream and render game-character chat in a short-tag format for LLMs.

>>> import charfmt
>>> reply = charfmt.parse('{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<msg>Hi!</msg>"}]}')
>>> [f"{s.tag}: {s.text}" for s in reply.chats[0].segments]
['emo: joy', 'msg: Hi!']
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from charfmt.constrain.export import grammar
    from charfmt.constrain.schema import json_schema
    from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
    from charfmt.events import (
        Action,
        ChatEnd,
        ChatStart,
        Cue,
        DiagnosticEvent,
        Dialect,
        Emotion,
        Event,
        Reasoning,
        Reset,
        SegmentEnd,
        SegmentStart,
        TextDelta,
    )
    from charfmt.models import Chat, EmotionKey, Reply, Segment, Vocabulary
    from charfmt.parser import parse
    from charfmt.prompt.character import Character, CharacterError, Exchange, load_history
    from charfmt.prompt.lorebook import Lorebook
    from charfmt.prompt.render import (
        BudgetError,
        RenderedTurn,
        TemplateError,
        bound_tokens,
        estimate_tokens,
        greeting_exchange,
        render_messages,
        render_system,
        render_text,
        render_turn,
        render_user_block,
    )
    from charfmt.prompt.tokens import TokenCounter, counter_for
    from charfmt.prompt.userinput import UserChat, UserContext, UserTurn, parse_input, parse_shorthand, read_turn
    from charfmt.speech import Sentence, SentenceSplitter, sentences
    from charfmt.stage import StageReader, stage_cues
    from charfmt.stream import StreamParser, aiter_events, collect, iter_events
    from charfmt.tags import DEFAULT_TAGS, TAGS, TagError, TagSpec, TagTable
    from charfmt.writer import dumps

__all__ = [
    "DEFAULT_TAGS",
    "TAGS",
    "Action",
    "BudgetError",
    "Character",
    "CharacterError",
    "CharfmtError",
    "Chat",
    "ChatEnd",
    "ChatStart",
    "Cue",
    "Diagnostic",
    "DiagnosticEvent",
    "Dialect",
    "Emotion",
    "EmotionKey",
    "Event",
    "Exchange",
    "Lorebook",
    "ParseError",
    "Reasoning",
    "RenderedTurn",
    "Reply",
    "Reset",
    "Segment",
    "SegmentEnd",
    "SegmentStart",
    "Sentence",
    "SentenceSplitter",
    "StageReader",
    "StreamParser",
    "TagError",
    "TagSpec",
    "TagTable",
    "TemplateError",
    "TextDelta",
    "TokenCounter",
    "UserChat",
    "UserContext",
    "UserTurn",
    "Vocabulary",
    "aiter_events",
    "bound_tokens",
    "collect",
    "counter_for",
    "dumps",
    "estimate_tokens",
    "grammar",
    "greeting_exchange",
    "iter_events",
    "json_schema",
    "load_history",
    "parse",
    "parse_input",
    "parse_shorthand",
    "read_turn",
    "render_messages",
    "render_system",
    "render_text",
    "render_turn",
    "render_user_block",
    "sentences",
    "stage_cues",
]

# Where each public name lives. ``import charfmt`` loads none of these modules: a strict
# parse of valid input needs only the parser, the models, json and re, and Jinja (render),
# Lark (diagnostics of invalid bodies, grammar export, user input) and the streaming,
# speech and character machinery load when first used (tests/project/test_lazy_import.py).
_HOME: dict[str, str] = {
    **dict.fromkeys(("Character", "CharacterError", "Exchange", "load_history"), "prompt.character"),
    **dict.fromkeys(("CharfmtError", "Diagnostic", "ParseError"), "diagnostics"),
    **dict.fromkeys(
        (
            "Action",
            "ChatEnd",
            "ChatStart",
            "Cue",
            "DiagnosticEvent",
            "Dialect",
            "Emotion",
            "Event",
            "Reasoning",
            "Reset",
            "SegmentEnd",
            "SegmentStart",
            "TextDelta",
        ),
        "events",
    ),
    "grammar": "constrain.export",
    "Lorebook": "prompt.lorebook",
    **dict.fromkeys(("Chat", "EmotionKey", "Reply", "Segment", "Vocabulary"), "models"),
    "parse": "parser",
    **dict.fromkeys(
        (
            "BudgetError",
            "RenderedTurn",
            "TemplateError",
            "bound_tokens",
            "estimate_tokens",
            "greeting_exchange",
            "render_messages",
            "render_system",
            "render_text",
            "render_turn",
            "render_user_block",
        ),
        "prompt.render",
    ),
    "json_schema": "constrain.schema",
    **dict.fromkeys(("Sentence", "SentenceSplitter", "sentences"), "speech"),
    **dict.fromkeys(("StageReader", "stage_cues"), "stage"),
    **dict.fromkeys(("StreamParser", "aiter_events", "collect", "iter_events"), "stream"),
    **dict.fromkeys(("DEFAULT_TAGS", "TAGS", "TagError", "TagSpec", "TagTable"), "tags"),
    **dict.fromkeys(("TokenCounter", "counter_for"), "prompt.tokens"),
    **dict.fromkeys(
        ("UserChat", "UserContext", "UserTurn", "parse_input", "parse_shorthand", "read_turn"), "prompt.userinput"
    ),
    "dumps": "writer",
}


if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt name stays an error there

    def __getattr__(name: str) -> Any:
        """Load a public name (or a submodule, ``charfmt.prompt.render``) on first use, then keep it."""
        home = _HOME.get(name)
        if home is not None:
            value = getattr(import_module(f"charfmt.{home}"), name)
        elif not name.startswith("__"):
            try:
                value = import_module(f"charfmt.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"charfmt.{name}":
                    raise
                raise AttributeError(f"module 'charfmt' has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module 'charfmt' has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
