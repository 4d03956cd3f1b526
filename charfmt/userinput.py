"""The user's side: ``UserTurn``, the ``[angry] なんで？`` shorthand, and reading a rendered user block back.

The user block uses the same tag language as the character's reply (design study,
section 4): ``<user_chats><chat type="C"><emo>angry</emo><msg>…</msg></chat></user_chats>``,
optionally after a ``[User Context]`` block. ``parse_input`` reads exactly what
``prompts/user.j2`` writes, with the grammar ``grammars/input.lark``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Final

from lark import Lark
from lark.exceptions import UnexpectedInput
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from charfmt._resources import read_text
from charfmt.body import Driver, Reject, decode_text, grammar_text
from charfmt.diagnostics import Diagnostic, ParseError
from charfmt.models import ChatType, Segment, Vocabulary, check_body
from charfmt.tags import CHAT_TYPES, TAGGED_TYPES

CONTEXT_FIELDS: Final = ("emotion", "action", "environment")
"""The context fields of the study's pattern B, in the order they are rendered."""


class UserChat(BaseModel):
    """One chat of the user's turn: ``C`` with tag segments, or ``I``/``E`` with plain text."""

    model_config = ConfigDict(frozen=True)

    type: ChatType = "C"
    """``C`` what the user says and does; ``I``/``E`` a system note or game event on their side."""
    segments: list[Segment]
    """The body, element by element, exactly as in a character's chat."""

    @model_validator(mode="after")
    def _check(self) -> UserChat:
        check_body(self.type, self.segments)
        return self


class UserContext(BaseModel):
    """The ``[User Context]`` block: the user's state, apart from what they say."""

    model_config = ConfigDict(frozen=True)

    emotion: str | None = None
    """The user's emotion (``angry``)."""
    action: str | None = None
    """What the user is doing (``kicking the ground``)."""
    environment: str | None = None
    """Where it happens (``raining``)."""
    extra: dict[str, str] = Field(default_factory=dict)
    """Any other ``Key: value`` lines; keys are letters, digits, ``_`` and ``-``."""

    @field_validator("emotion", "action", "environment", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("extra")
    @classmethod
    def _keys(cls, extra: dict[str, str]) -> dict[str, str]:
        for key, value in extra.items():
            if not _CONTEXT_KEY.fullmatch(key) or key.lower() in CONTEXT_FIELDS:
                raise ValueError(f"context key {key!r}: letters, digits, _ and -, starting with a letter")
            if not value:
                raise ValueError(f"context value for {key!r} is empty")
        return extra

    @model_validator(mode="after")
    def _text(self) -> UserContext:
        for name, value in self.lines():
            if _BAD_VALUE.search(value):
                raise ValueError(f"context {name} holds a control character or lone surrogate")
        return self

    def lines(self) -> list[tuple[str, str]]:
        """``(Key, value)`` pairs in render order (fixed fields first, then ``extra``)."""
        fixed = [(f.capitalize(), getattr(self, f)) for f in CONTEXT_FIELDS if getattr(self, f) is not None]
        return fixed + list(self.extra.items())

    def __bool__(self) -> bool:
        return bool(self.lines())


class UserTurn(BaseModel):
    """What the user sends in one turn: chats, and optionally their context."""

    model_config = ConfigDict(frozen=True)

    chats: list[UserChat] = Field(default_factory=list)
    """The user's chats, in order."""
    context: UserContext | None = None
    """The ``[User Context]`` block, or ``None``."""
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    """What ``parse_shorthand`` could not resolve (kept as text)."""

    @field_validator("context")
    @classmethod
    def _no_empty_context(cls, context: UserContext | None) -> UserContext | None:
        return context if context else None

    @classmethod
    def say(cls, message: str, *, emotion: str | None = None, action: str | None = None) -> UserTurn:
        """A one-chat turn: ``UserTurn.say("なんで？", emotion="angry")``."""
        segments = [Segment(tag=tag, text=text) for tag, text in (("emo", emotion), ("act", action)) if text]
        return cls(chats=[UserChat(segments=[*segments, Segment(tag="msg", text=message)])])


_CONTEXT_KEY: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_BAD_VALUE: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


# --- reading a rendered user block back ----------------------------------------


def _chat_terminals() -> str:
    tagged = "".join(sorted(TAGGED_TYPES))
    plain = "".join(t for t in CHAT_TYPES if t not in TAGGED_TYPES)
    return f'\nCHAT_TAGGED: /<chat type="[{tagged}]">/\nCHAT_PLAIN: /<chat type="[{plain}]">/\n'


@cache
def _input_lark() -> Lark:
    text = read_text("grammars", "input.lark") + _chat_terminals() + grammar_text()
    return Lark(text, parser="lalr", lexer="contextual", start="user_input")


@cache
def _input_driver() -> Driver:
    return Driver(_input_lark())


def parse_input(text: str) -> UserTurn:
    """Read back a user block rendered by ``render_user_block``; raises ``ParseError``."""
    try:
        tree = _input_driver().parse(text, "user_input")
    except Reject:
        try:
            _input_lark().parse(text)
        except UnexpectedInput as e:
            pos = e.pos_in_stream or 0
            expected = ", ".join(sorted(getattr(e, "expected", None) or getattr(e, "allowed", None) or ()))
            message = f"not a user block: unexpected input; expected {expected or 'nothing more'}"
            raise ParseError([Diagnostic.at(text, "CF501", message, pos, pos + 1)], text) from None
        raise ParseError([Diagnostic.at(text, "CF501", "not a user block", 0)], text) from None
    context_rows: list[Any] = tree[0] if len(tree) == 2 else []
    chats_rows: list[Any] = tree[-1]
    context = _context(context_rows) if context_rows else None
    chats = []
    for row in chats_rows:
        opener, segments = row[0], row[1]
        kind = opener[len('<chat type="')]
        chats.append(UserChat(type=kind, segments=[Segment(tag=t, text=s) for t, s in segments]))
    return UserTurn(chats=chats, context=context)


def _context(rows: list[list[str]]) -> UserContext:
    fixed: dict[str, str] = {}
    extra: dict[str, str] = {}
    for key, value in rows:
        name = key.lower()
        (fixed if name in CONTEXT_FIELDS else extra)[name if name in CONTEXT_FIELDS else key] = decode_text(value)
    return UserContext(**fixed, extra=extra)


# --- shorthand -----------------------------------------------------------------

_BRACKET: Final = re.compile(r"\[\[?([^\[\]\n]++)\]\]?|【([^【】\n]++)】")
_EMOTION_PREFIXES: Final = ("emotion", "emo", "face", "mood", "expression")
_ACTION_PREFIXES: Final = ("action", "act", "motion")


def parse_shorthand(text: str, *, vocabulary: Vocabulary | None = None, actions: list[str] | None = None) -> UserTurn:
    """Turn what a player types, ``[angry] なんで？ [sigh] もういい``, into a ``UserTurn``.

    A bracketed word (``[joy]``, ``[emotion:angry]``, ``[action:sigh]``, full-width
    ``【怒り】``) becomes an ``emo`` when the vocabulary knows it (key or alias), an
    ``act`` when it is one of ``actions`` or carries an action prefix. Without a
    vocabulary a bare word is an emotion. Anything else stays text, with a
    ``CF401`` warning. The text between brackets becomes ``msg`` segments.
    """
    segments: list[Segment] = []
    diagnostics: list[Diagnostic] = []
    for m in _BAD_VALUE.finditer(text):
        message = f"character U+{ord(m.group()):04X} cannot be sent; replaced by U+FFFD"
        diagnostics.append(Diagnostic.at(text, "CF402", message, m.start(), m.end(), severity="warning"))
    text = _BAD_VALUE.sub("\ufffd", text)
    known_actions = {a.casefold(): a for a in actions or ()}
    pos = 0
    pending = ""

    def flush(upto: str) -> None:
        words = upto.strip()
        if words:
            segments.append(Segment(tag="msg", text=words))

    for m in _BRACKET.finditer(text):
        word = (m.group(1) or m.group(2)).strip()
        resolved = _resolve_word(word, vocabulary, known_actions)
        if resolved is None:
            diagnostics.append(
                Diagnostic.at(
                    text,
                    "CF401",
                    f"{m.group()}: not an emotion or action of this character; kept as text",
                    m.start(),
                    m.end(),
                    severity="warning",
                )
            )
            pending += text[pos : m.end()]
            pos = m.end()
            continue
        flush(pending + text[pos : m.start()])
        pending = ""
        pos = m.end()
        segments.append(Segment(tag=resolved[0], text=resolved[1]))
    flush(pending + text[pos:])
    if not segments:
        return UserTurn(diagnostics=diagnostics)
    return UserTurn(chats=[UserChat(type="C", segments=segments)], diagnostics=diagnostics)


def _resolve_word(word: str, vocabulary: Vocabulary | None, actions: dict[str, str]) -> tuple[str, str] | None:
    prefix, sep, rest = word.partition(":")
    if sep:
        name, value = prefix.strip().casefold(), rest.strip()
        if name in _ACTION_PREFIXES and value:
            return ("act", actions.get(value.casefold(), value))
        if name in _EMOTION_PREFIXES and value:
            word = value
        else:
            return None
    if vocabulary is not None:
        key = vocabulary.resolve(word)
        if key is not None:
            return ("emo", key)
    if word.casefold() in actions:
        return ("act", actions[word.casefold()])
    if vocabulary is None and _KEYLIKE.fullmatch(word):
        return ("emo", word)
    return None


_KEYLIKE: Final = re.compile(r"[^\s<>&\x00-\x1f\x7f](?:[^<>&\x00-\x1f\x7f]*[^\s<>&\x00-\x1f\x7f])?")
