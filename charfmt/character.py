"""``Character``: who the model plays, loaded from TOML (see ``examples/characters/``)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from charfmt.body import BodyError, parse_body
from charfmt.diagnostics import CharfmtError
from charfmt.models import Chat, EmotionKey, Reply, Segment, Vocabulary
from charfmt.parser import parse
from charfmt.tags import CHAT_TYPES
from charfmt.userinput import UserTurn, parse_shorthand


class CharacterError(CharfmtError):
    """A character file is invalid; the message names the file, the key and the line."""

    def __init__(self, file: str, key: str, line: int | None, message: str) -> None:
        self.file, self.key, self.line = file, key, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


class Exchange(BaseModel):
    """One exchange: what the user sent, and how the character answered (history or few-shot)."""

    model_config = ConfigDict(frozen=True)

    user: UserTurn
    """The user's turn."""
    reply: Reply
    """The character's answer, in the wire format."""


def _action(text: str) -> str:
    Segment(tag="act", text=text)  # the same rules as an <act> the model writes
    return text


class Character(BaseModel):
    """A character definition: persona, emotion vocabulary, actions, examples."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    """The character's name, as the system prompt introduces them."""
    persona: str
    """Who they are and how they talk, in their own language."""
    language: str = "en"
    """Language tag of the replies (``ja``, ``en``); the prompt asks for it."""
    user_name: str = "User"
    """What the prompt calls the player."""
    emotions: list[EmotionKey] = Field(min_length=1)
    """The emotion vocabulary: keys with descriptions, sprites and aliases."""
    actions: list[Annotated[str, AfterValidator(_action)]] = Field(default_factory=list)
    """Suggested actions for ``<act>`` (the model may use others)."""
    examples: list[Exchange] = Field(default_factory=list)
    """Few-shot exchanges shown in the system prompt."""

    @model_validator(mode="after")
    def _examples_use_the_vocabulary(self) -> Character:
        vocab = self.vocabulary
        for n, example in enumerate(self.examples):
            for chat in example.reply.chats:
                for seg in chat.segments:
                    if seg.tag == "emo" and vocab.resolve(seg.text) is None:
                        raise ValueError(f"example {n}: emotion {seg.text!r} is not in emotions")
        return self

    @property
    def vocabulary(self) -> Vocabulary:
        """The emotion vocabulary, for ``parse(..., vocabulary=)``."""
        return Vocabulary(emotions=self.emotions)

    def shorthand(self, text: str) -> UserTurn:
        """``parse_shorthand`` with this character's vocabulary and actions."""
        return parse_shorthand(text, vocabulary=self.vocabulary, actions=self.actions)

    @classmethod
    def load(cls, path: str | Path) -> Character:
        """Load a character from a TOML file; raises ``CharacterError``."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CharacterError(str(path), "", None, f"cannot read: {e}") from None
        return cls.from_toml(text, str(path))

    @classmethod
    def from_toml(cls, text: str, file: str = "<character>") -> Character:
        """Build a character from TOML text; ``file`` names it in errors."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            m = re.search(r"\(at line (\d+)", str(e))
            raise CharacterError(file, "", int(m.group(1)) if m else None, f"invalid TOML: {e}") from None
        try:
            # Examples are read with the character's own vocabulary and actions.
            base = cls.model_validate({**data, "examples": []})
            data["examples"] = [_example(text, file, n, ex, base) for n, ex in enumerate(data.get("examples", []))]
            return cls.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            loc = tuple(err["loc"])
            raise CharacterError(file, _dotted(loc), _toml_line(text, loc), err["msg"]) from None


def _example(text: str, file: str, n: int, raw: Any, character: Character) -> Any:
    """Turn a TOML example (shorthand user, reply as type/body tables) into model data."""

    def fail(loc: tuple[Any, ...], message: str) -> CharacterError:
        return CharacterError(file, _dotted(loc), _toml_line(text, loc), message)

    if not isinstance(raw, dict) or not isinstance(raw.get("user"), str) or not isinstance(raw.get("reply"), list):
        raise fail(("examples", n), 'an example has user = "..." and [[examples.reply]] tables')
    chats = []
    for i, chat in enumerate(raw["reply"]):
        loc = ("examples", n, "reply", i, "body")
        kind, body = chat.get("type", "C"), chat.get("body")
        if kind not in CHAT_TYPES:
            raise fail(("examples", n, "reply", i, "type"), f"type must be one of {', '.join(CHAT_TYPES)}")
        if not isinstance(body, str):
            raise fail(loc, "body must be a string")
        try:
            elements = parse_body(kind, body)
        except BodyError as e:
            raise fail(loc, f"{e.code} {e.message}") from None
        for tag, key in elements:
            if tag == "emo" and character.vocabulary.resolve(key) is None:
                raise fail(loc, f"emotion {key!r} is not one of {', '.join(character.vocabulary.keys)}")
        chats.append(Chat(type=kind, order=i + 1, segments=[Segment(tag=t, text=s) for t, s in elements]))
    return {"user": character.shorthand(raw["user"]).model_dump(), "reply": Reply(chats=chats).model_dump()}


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_HEADER: Final = re.compile(r"^\s*\[\[\s*([\w.-]+)\s*\]\]")
_TABLE: Final = re.compile(r"^\s*\[\s*([\w.-]+)\s*\]")
_KEY: Final = re.compile(r"^\s*([\w-]+)\s*=")


def _toml_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """The line where the value at ``loc`` (``("emotions", 2, "key")``) is written, or nearest above."""
    lines: dict[tuple[Any, ...], int] = {}
    counts: dict[tuple[Any, ...], int] = {}
    current: tuple[Any, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        if m := _HEADER.match(line):
            path: tuple[Any, ...] = ()
            names = m.group(1).split(".")
            for depth, name in enumerate(names):
                path = (*path, name)
                if depth == len(names) - 1:
                    counts[path] = counts.get(path, 0) + 1
                index = counts.get(path, 1) - 1
                path = (*path, index)
            current = path
            lines.setdefault(current, number)
        elif m := _TABLE.match(line):
            current = tuple(m.group(1).split("."))
            lines.setdefault(current, number)
        elif m := _KEY.match(line):
            lines.setdefault((*current, m.group(1)), number)
    for size in range(len(loc), 0, -1):
        if loc[:size] in lines:
            return lines[loc[:size]]
    return None


def load_history(path: str | Path, character: Character) -> list[Exchange]:
    """Read a conversation from JSON Lines: ``{"user": ..., "reply": ...}`` per line, oldest first.

    ``user`` is shorthand text (``"[angry] なんで？"``) or a ``UserTurn`` object;
    ``reply`` is the character's reply in the wire format, as an object or a string,
    parsed strictly with the character's vocabulary.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise CharacterError(str(path), "", None, f"cannot read: {e}") from None
    history = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or set(row) != {"user", "reply"}:
                raise ValueError('each line is an object {"user": ..., "reply": ...}')
            user = row["user"]
            turn = character.shorthand(user) if isinstance(user, str) else UserTurn.model_validate(user)
            reply = row["reply"] if isinstance(row["reply"], str) else json.dumps(row["reply"], ensure_ascii=False)
            history.append(Exchange(user=turn, reply=parse(reply, vocabulary=character.vocabulary)))
        except (ValueError, ValidationError) as e:  # ParseError and JSONDecodeError are ValueErrors
            raise CharacterError(str(path), "", number, str(e).splitlines()[0]) from None
    return history
