"""The user's side: ``UserTurn``, the ``[angry] なんで？`` shorthand, and reading a user block back.

The user block uses the same tag language as the character's reply (design study,
section 4): ``<user_chats><chat type="C"><emo>angry</emo><msg>…</msg></chat></user_chats>``,
optionally after a ``[User Context]`` block. ``parse_input`` reads what
``prompts/user.j2`` writes and the study's own layouts (indented, compact on one line,
CRLF, and pattern B verbatim: the message under a ``[User Message]`` header), with the
grammar ``grammars/input.lark``: whitespace between elements is layout, text inside them
is kept exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, Final, Literal

from lark import Lark
from lark.exceptions import UnexpectedInput, UnexpectedToken
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from charfmt._arguments import check_tags, check_vocabulary
from charfmt._grammar.lexical import NOT_TEXT_CHAR, BadEntity, decode_text, text_class
from charfmt._grammar.rules import grammar_text
from charfmt._resources import read_text
from charfmt._strict.lalr import Driver, Reject
from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.models import ChatType, Segment, Vocabulary, check_body, error_message
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, TAGGED_TYPES, TagTable

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
        table = DEFAULT_TAGS
        pairs = [(table.emotion.name, emotion), *([(table.action.name, action)] if table.action else [])]
        segments = [Segment(tag=tag, text=text) for tag, text in pairs if text]
        return cls(chats=[UserChat(segments=[*segments, Segment(tag=DEFAULT_TAGS.speech.name, text=message)])])


_CONTEXT_KEY: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_BAD_VALUE: Final = NOT_TEXT_CHAR


# --- reading a user block back ------------------------------------------------


def _chat_terminals() -> str:
    tagged = "".join(sorted(TAGGED_TYPES))
    plain = "".join(t for t in CHAT_TYPES if t not in TAGGED_TYPES)
    return f'\nCHAT_TAGGED: /<chat type="[{tagged}]">/\nCHAT_PLAIN: /<chat type="[{plain}]">/\n'


_LINE_ENDS: Final = "\\t\\n\\r"
"""What a context value never holds raw (as a regex class body): it is written ``&#9;``, ``&#10;``, ``&#13;``."""


def _line_terminal() -> str:
    """``_LINE_PLAIN``: a run of a context value's text, the body's text class on one line (no tab, CR, LF)."""
    return f"_LINE_PLAIN: /{text_class(excluding=_LINE_ENDS)}+/\n"


@cache
def _input_lark(tags: TagTable = DEFAULT_TAGS) -> Lark:
    generated = _chat_terminals() + _line_terminal()
    text = read_text("grammars", "input.lark") + generated + grammar_text(tags)
    return Lark(text, parser="lalr", lexer="contextual", start="user_input")


@cache
def _input_driver(tags: TagTable = DEFAULT_TAGS) -> Driver:
    return Driver(_input_lark(tags), tags)


@cache
def _terminal_words(tags: TagTable = DEFAULT_TAGS) -> dict[str, str]:
    """Grammar terminals in the user's words, for "expected ..." in error messages."""
    words = {
        "_USER_CHATS_OPEN": "<user_chats>",
        "_USER_CHATS_CLOSE": "</user_chats>",
        "_CHAT_CLOSE": "</chat>",
        "CHAT_TAGGED": " or ".join(f'<chat type="{t}">' for t in CHAT_TYPES if t in TAGGED_TYPES),
        "CHAT_PLAIN": " or ".join(f'<chat type="{t}">' for t in CHAT_TYPES if t not in TAGGED_TYPES),
        "_CONTEXT_HEADER": "[User Context]",
        "_MESSAGE_HEADER": "[User Message]",
        "MESSAGE_TEXT": "the message",
        "CONTEXT_KEY": "a context line (Key: value)",
        "_CONTEXT_SEP": "': ' after the key",
        "CONTEXT_VALUE": "a value",
        "_EOL": "the end of the line",
        "TEXT": "text",
        "KEY": "an emotion key",
        "$END": "the end of the input",
    }
    for tag in tags:
        words[f"{tag.terminal}_OPEN"] = tag.open
        words[f"{tag.terminal}_CLOSE"] = tag.close
    return words


def _expected_words(expected: set[str], tags: TagTable) -> str:
    # Layout whitespace is always optional: it is never what was missing.
    words = _terminal_words(tags)
    names = sorted({words.get(name, name) for name in expected if name != "_LAYOUT"})
    return ", ".join(names) if names else "nothing more"


def _found(text: str, pos: int) -> str:
    """What stands at ``pos``, as the user wrote it: a tag, a character, or the end."""
    if pos >= len(text):
        return "the end of the input"
    m = re.compile(r"</?[^<>\s]*(?:\s[^<>]*)?>").match(text, pos)
    if m and len(m.group()) <= 40:
        return m.group()
    return repr(text[pos])


def _fail(text: str, e: UnexpectedInput, tags: TagTable) -> ParseError:
    """The one place a user block is rejected: what was found, what was expected, where."""
    expected = set(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())
    at_end = isinstance(e, UnexpectedToken) and e.token.type == "$END"
    pos = len(text) if at_end else e.pos_in_stream or 0
    found = _found(text, pos)
    ch = text[pos] if pos < len(text) else ""
    key_closes = {f"{t.terminal}_CLOSE" for t in tags if t.content == "key"}
    if "KEY" in expected or (expected and all(n in key_closes for n in expected)):
        message = f"unexpected {found}: an emotion key is not empty and has no surrounding whitespace"
    elif found.startswith("<chat") and "CHAT_TAGGED" in expected:
        message = f"{found}: a chat opens with {' or '.join(f'<chat type={t!r}>' for t in CHAT_TYPES)}"
        message = message.replace("'", '"')
    elif ch in ("<", "&") and not found.startswith("<") and ("TEXT" in expected or _closes_text(expected, tags)):
        message = f"raw {ch!r} in text: write '<' as &lt; and '&' as &amp;"
    elif not ch:
        message = f"the input ends too early; expected {_expected_words(expected, tags)}"
    else:
        message = f"unexpected {found}; expected {_expected_words(expected, tags)}"
    end = pos + (len(found) if found.startswith("<") else 1)
    return ParseError([Diagnostic.at(text, "CF501", message, pos, end)], text)


def _closes_text(expected: set[str], tags: TagTable) -> bool:
    if any(f"{t.terminal}_CLOSE" in expected for t in tags if t.content == "text"):
        return True
    # the text of an I/E chat, not the place between two elements of a C chat
    return "_CHAT_CLOSE" in expected and not any(f"{t.terminal}_OPEN" in expected for t in tags)


def is_user_block(text: str) -> bool:
    """Whether ``text`` opens as a user block (``<user_chats>``, ``[User Context]`` or ``[User Message]``).

    Such text is read with ``parse_input``; any other text is shorthand (``parse_shorthand``), where
    markup is the player's own words. The caller chooses: a game's player never types a block.
    """
    words = _terminal_words(DEFAULT_TAGS)
    start = text.lstrip()
    return any(start.startswith(words[name]) for name in _BLOCK_OPENINGS)


_BLOCK_OPENINGS: Final = ("_USER_CHATS_OPEN", "_CONTEXT_HEADER", "_MESSAGE_HEADER")
"""The terminals a user block can open with (``_terminal_words`` spells them)."""


def parse_input(text: str, *, tags: TagTable | None = None, vocabulary: Vocabulary | None = None) -> UserTurn:
    """Read a user block (``render_user_block``'s output, or the design study's layouts); raises ``ParseError``.

    Whitespace between blocks, chats and elements is layout (indentation, CRLF, blank
    lines, none at all); text inside elements is kept exactly. Errors say what was
    expected, at the line and column of ``text``. ``tags``: the tag table (``None``: ``DEFAULT_TAGS``).
    ``vocabulary``: the character's emotions, as ``parse_shorthand`` reads them: an emotion written as one of its
    keys or aliases is that key; any other is kept as written, with a ``CF401`` warning in the turn's
    ``diagnostics`` (``None``: emotions are not checked).
    """
    check_vocabulary(vocabulary)
    table = DEFAULT_TAGS if tags is None else tags
    try:
        tree = _input_driver(table).parse(text, "user_input")
    except (Reject, BadEntity):
        try:
            _input_lark(table).parse(text)
        except UnexpectedInput as e:
            raise _fail(text, e, table) from None
        raise ParseError([Diagnostic.at(text, "CF501", "not a user block", 0)], text) from None
    context_rows: list[Any] = tree[0] if len(tree) == 2 else []
    chats_rows: list[Any] = tree[-1]
    try:
        context = _context(context_rows) if context_rows else None
        if len(chats_rows) == 1 and isinstance(chats_rows[0], str):  # [User Message] (pattern B)
            chats = [_message_chat(chats_rows[0], table)]
        else:
            chats = [_row_chat(row) for row in chats_rows]
        notes: list[Diagnostic] = []
        if vocabulary is not None:
            chats = _emotions_checked(text, chats, table, vocabulary, notes)
        return UserTurn(chats=chats, context=context, diagnostics=notes)
    except ValidationError as e:
        message = error_message(e.errors()[0])
        raise ParseError([Diagnostic.at(text, "CF501", message, 0, len(text))], text) from None


def _emotions_checked(
    text: str, chats: list[UserChat], tags: TagTable, vocabulary: Vocabulary, notes: list[Diagnostic]
) -> list[UserChat]:
    """``chats`` with each emotion the vocabulary knows as its key; a ``CF401`` in ``notes`` for each it does not
    know (kept as written), placed at its element in ``text`` (the elements' openings, in order: an element's own
    text holds no raw ``<``)."""
    emotion = tags.emotion
    found = list(re.finditer(f"{re.escape(emotion.open)}.*?{re.escape(emotion.close)}", text, re.DOTALL))
    seen = 0
    out: list[UserChat] = []
    for chat in chats:
        segments: list[Segment] = []
        for seg in chat.segments:
            if seg.tag == emotion.name:
                at = found[seen] if seen < len(found) else None
                seen += 1
                key = vocabulary.resolve(seg.text)
                if key is None:
                    where = (at.start(), at.end()) if at is not None else (0, len(text))
                    shown = at.group() if at is not None else f"{emotion.open}{seg.text}{emotion.close}"
                    message = f"{shown}: not an emotion of this character; kept as written"
                    notes.append(Diagnostic.at(text, "CF401", message, *where, severity="warning"))
                elif key != seg.text:
                    seg = seg.model_copy(update={"text": key})  # noqa: PLW2901 (the alias read as its key)
            segments.append(seg)
        out.append(chat.model_copy(update={"segments": segments}) if segments != chat.segments else chat)
    return out


def _message_chat(raw: str, tags: TagTable) -> UserChat:
    """The text under ``[User Message]``: one chat holding one message (trailing line breaks are layout)."""
    text = decode_text(raw.rstrip(" \t\r\n"))
    return UserChat(type="C", segments=[Segment(tag=tags.speech.name, text=text)])


def _row_chat(row: list[Any]) -> UserChat:
    """One ``chat`` row: the opener, then ``(tag, text)`` elements or a one-element text body."""
    opener, *elements = row
    kind = opener[len('<chat type="')]
    if kind not in TAGGED_TYPES:
        elements = elements[0]
    return UserChat(type=kind, segments=[Segment(tag=t, text=s) for t, s in elements])


def _context(rows: list[list[str]]) -> UserContext:
    fixed: dict[str, str] = {}
    extra: dict[str, str] = {}
    for key, value in rows:
        name = key.lower()
        (fixed if name in CONTEXT_FIELDS else extra)[name if name in CONTEXT_FIELDS else key] = decode_text(value)
    return UserContext(**fixed, extra=extra)


# --- the player's turn, as every door reads it ------------------------------------


class TurnError(CharfmtError):
    """A player's turn that cannot be sent: nothing to say, or a context that cannot be one."""

    def __init__(self, field: Literal["say", "context"], message: str) -> None:
        super().__init__(message)
        self.field: Literal["say", "context"] = field
        """Which part of the turn is wrong: ``say`` (the player's words) or ``context``."""


def read_turn(
    say: str,
    *,
    vocabulary: Vocabulary | None = None,
    actions: list[str] | None = None,
    tags: TagTable | None = None,
    context: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
) -> UserTurn:
    """The player's turn as ``charfmt render --say`` and the server's doors read it.

    ``say`` that opens as a user block (``is_user_block``: ``<user_chats>``, ``[User Context]``,
    ``[User Message]``) is read with ``parse_input`` (a block that does not read: ``ParseError``, CF501 at its
    line and column); anything else is shorthand (``parse_shorthand``), where markup is the player's own
    words. Either way an emotion the character lacks is a ``CF401`` warning in the turn's ``diagnostics``.
    ``context``: the player's state as ``(key, value)`` pairs (or a mapping), written as the ``[User Context]``
    block: ``emotion``, ``action``, ``environment`` in any case, any other key as given
    (``render --context KEY=VALUE``). ``TurnError`` where there is nothing to say or the context cannot be one.
    """
    if not isinstance(say, str):
        raise TypeError(f"the player's turn must be a str, not {type(say).__name__}")
    check_tags(tags)
    pairs = list(context.items() if isinstance(context, Mapping) else context or ())
    block = is_user_block(say)
    if block:
        turn = parse_input(say, tags=tags, vocabulary=vocabulary)
    else:
        turn = parse_shorthand(say, vocabulary=vocabulary, actions=actions, tags=tags)
    if not turn.chats and turn.context is None and not pairs:
        said = "the user block holds no chat and no context" if block else "the player's turn is empty"
        raise TurnError("say", f"nothing to say: {said}")
    if not pairs:
        return turn
    if turn.context is not None:
        raise TurnError("context", "the user block has a [User Context] already: give the context once")
    return UserTurn(chats=turn.chats, context=user_context(pairs), diagnostics=turn.diagnostics)


def user_context(pairs: Iterable[tuple[str, str]]) -> UserContext:
    """The ``[User Context]`` of ``(key, value)`` pairs (``read_turn``'s ``context``), or ``TurnError``."""
    fields: dict[str, Any] = {"extra": {}}
    for given, value in pairs:
        key = given.strip() if isinstance(given, str) else given
        if not isinstance(key, str) or not key:
            raise TurnError("context", f"context key {given!r}: letters, digits, _ and -, starting with a letter")
        fixed = key.lower() in CONTEXT_FIELDS
        slot, name = (fields, key.lower()) if fixed else (fields["extra"], key)
        if name in slot:
            raise TurnError("context", f"context key {key!r} is given twice")
        if not isinstance(value, str):
            raise TurnError("context", f"context {key!r}: the value must be a string, not {type(value).__name__}")
        slot[name] = value
    try:
        return UserContext(**fields)
    except ValidationError as e:
        raise TurnError("context", error_message(e.errors()[0])) from None


# --- shorthand -----------------------------------------------------------------

_SHORTHAND_WORD: Final = re.compile(
    r"\[\[?(?P<square>[^\[\]\n]++)\]\]?|【(?P<lenticular>[^【】\n]++)】|[(（](?P<paren>[^()（）\n]++)[)）]"
    r"|(?<![\w*])\*(?P<star>[^*\s](?:[^*\n]*+(?<=[^*\s]))?)\*(?![\w*])"
)
"""A shorthand word: ``[joy]``, ``[[joy]]``, ``【喜び】``, in parentheses ``(怒り)``, ``（怒り）``, or
an action between asterisks, ``*waves*`` (not ``**bold**``, not ``2*3*4``)."""


def parse_shorthand(
    text: str,
    *,
    vocabulary: Vocabulary | None = None,
    actions: list[str] | None = None,
    tags: TagTable | None = None,
) -> UserTurn:
    """Turn what a player types, ``[angry] なんで？ [sigh] もういい``, into a ``UserTurn``.

    A bracketed word (``[joy]``, ``[emotion:angry]``, ``[action:sigh]``, full-width
    ``【怒り】``) becomes an ``emo`` when the vocabulary knows it (key or alias), an
    ``act`` when it is one of ``actions`` or carries an action prefix. Without a
    vocabulary a bare bracketed word is an emotion. Any other bracketed word stays
    text, with a ``CF401`` warning.

    A word between asterisks (``*waves*``, as roleplay writes an action) is an action,
    tagged with the tag table's action tag; ``**bold**`` and ``2*3*4`` stay text.

    A word in parentheses (the design study's 省略形 ``(怒り) なんで？ (ため息)``,
    full-width ``（怒り）`` too) is read the same way when it is one of the
    character's emotion keys, aliases or actions, or carries a prefix. Parentheses
    are also ordinary prose (``I (really) mean it``), so any other parenthesised
    words stay text without a warning; only a prefixed one (``(emotion:furious)``),
    which can only be meant as a tag, gets ``CF401``.

    The text between words becomes ``msg`` segments. Each emotion opens a new chat
    once the current one already has an emotion or a message, so every chat shows one
    emotion, as in a character's reply: ``[joy] やったー！ [sad] でも疲れちゃった...``
    gives two chats, ``joy`` + its message and ``sad`` + its message. (The study
    writes that line after a ``User:`` speaker label; a label is not read specially:
    typed, it is text like any other.)

    Prefixes come from the tag table (``tags``, ``None``: ``DEFAULT_TAGS``): each tag's
    ``prefixes`` mark a word as that tag, so a table with
    ``TagSpec("sfx", "cue", ..., prefixes=("sfx",))`` reads ``[sfx:door_slam]`` as an
    ``<sfx>`` (one of its values, when it has a list).
    """
    if not isinstance(text, str):
        raise TypeError(f"the player's line must be a str, not {type(text).__name__}")
    check_vocabulary(vocabulary)
    check_tags(tags)
    table = DEFAULT_TAGS if tags is None else tags
    text, diagnostics = _unsendable_replaced(text)
    known_actions = {a.casefold(): a for a in actions or ()}
    segments = _shorthand_segments(text, vocabulary, known_actions, table, diagnostics)
    return UserTurn(
        chats=[UserChat(type="C", segments=chat) for chat in _one_emotion_each(segments, table)],
        diagnostics=diagnostics,
    )


def _unsendable_replaced(text: str) -> tuple[str, list[Diagnostic]]:
    """``text`` with each character that cannot be sent replaced by U+FFFD, and a ``CF402`` for each."""
    diagnostics: list[Diagnostic] = []
    for m in _BAD_VALUE.finditer(text):
        message = f"character U+{ord(m.group()):04X} cannot be sent; replaced by U+FFFD"
        diagnostics.append(Diagnostic.at(text, "CF402", message, m.start(), m.end(), severity="warning"))
    return _BAD_VALUE.sub("\ufffd", text), diagnostics


def _shorthand_segments(
    text: str,
    vocabulary: Vocabulary | None,
    known_actions: dict[str, str],
    table: TagTable,
    diagnostics: list[Diagnostic],
) -> list[Segment]:
    """The segments of typed shorthand, in order (see ``parse_shorthand``); ``CF401`` for words kept as text."""
    segments: list[Segment] = []
    pos = 0
    pending = ""

    def flush(upto: str) -> None:
        words = upto.strip()
        if words:
            segments.append(Segment(tag=table.speech.name, text=words))

    for m in _SHORTHAND_WORD.finditer(text):
        if m.group("star") is not None:  # *waves*: an action, as roleplay writes one (the table's action tag)
            if table.action is None:
                continue
            star = m.group("star")
            flush(pending + text[pos : m.start()])
            pending = ""
            pos = m.end()
            segments.append(Segment(tag=table.action.name, text=known_actions.get(star.casefold(), star)))
            continue
        paren = m.group("paren") is not None
        word = (m.group("square") or m.group("lenticular") or m.group("paren")).strip()
        resolved = _resolve_word(word, vocabulary, known_actions, table, bare_is_emotion=not paren)
        if resolved is None:
            if not paren or _has_prefix(word, table):
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
    return segments


def _one_emotion_each(segments: list[Segment], tags: TagTable) -> list[list[Segment]]:
    """Cut the segments into chats: an emotion after an emotion or a message starts a new chat."""
    chats: list[list[Segment]] = []
    current: list[Segment] = []
    emotion, speech = tags.emotion.name, tags.speech.name
    for seg in segments:
        if seg.tag == emotion and any(s.tag in (emotion, speech) for s in current):
            chats.append(current)
            current = []
        current.append(seg)
    if current:
        chats.append(current)
    return chats


def _has_prefix(word: str, tags: TagTable) -> bool:
    prefix, sep, _ = word.partition(":")
    return bool(sep) and prefix.strip().casefold() in tags.prefixes


def _resolve_word(
    word: str, vocabulary: Vocabulary | None, actions: dict[str, str], tags: TagTable, *, bare_is_emotion: bool
) -> tuple[str, str] | None:
    """The ``(tag, content)`` a shorthand word stands for, or ``None`` (kept as text)."""
    emotion, action = tags.emotion.name, tags.action.name if tags.action is not None else None
    prefix, sep, rest = word.partition(":")
    if sep:
        name, value = prefix.strip().casefold(), rest.strip()
        spec = tags.get(tags.prefixes.get(name, ""))
        if spec is None or not value:
            return None
        if spec.name == emotion:
            word = value
            bare_is_emotion = True
        elif spec.name == action:
            return (spec.name, actions.get(value.casefold(), value))
        elif spec.values is not None:
            return (spec.name, value) if value in spec.values else None
        else:
            return (spec.name, value)
    if vocabulary is not None:
        key = vocabulary.resolve(word)
        if key is not None:
            return (emotion, key)
    if action is not None and word.casefold() in actions:
        return (action, actions[word.casefold()])
    if vocabulary is None and bare_is_emotion and _KEYLIKE.fullmatch(word):
        return (emotion, word)
    return None


_KEYLIKE: Final = re.compile(r"[^\s<>&\x00-\x1f\x7f](?:[^<>&\x00-\x1f\x7f]*[^\s<>&\x00-\x1f\x7f])?")
