"""``Character``: who the model plays, loaded from TOML (see ``examples/characters/``)."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from charfmt._strict.diagnosis import BodyError
from charfmt._strict.elements import parse_body
from charfmt._strict.envelope import json_cut_off, json_error
from charfmt.diagnostics import CharfmtError, ParseError
from charfmt.models import (
    Chat,
    EmotionKey,
    Reply,
    Segment,
    Vocabulary,
    dotted_path,
    error_message,
    vocabulary_clashes,
)
from charfmt.parser import parse
from charfmt.prompt.cards import CardError, CardInfo, is_card, is_generated, read_card
from charfmt.prompt.userinput import UserTurn, parse_shorthand, read_turn
from charfmt.stagemap import Expression, Motion, StageMap, Voice, closest
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, ROLES, TEXT_TAG, TagError, TagField, TagSpec, TagTable
from charfmt.writer import canonical_form, dumps, is_canonical

if TYPE_CHECKING:
    from charfmt.diagnostics import Diagnostic
    from charfmt.prompt.scene import Scene

MAX_FILE_SIZE: Final = 16 * 1024 * 1024
"""The largest character or history file ``Character.load`` and ``load_history`` read (``max_size=``)."""


class CharacterError(CharfmtError):
    """A character file is invalid; the message names the file, the key and the line."""

    def __init__(
        self, file: str, key: str, line: int | None, message: str, more: Sequence[CharacterError] = ()
    ) -> None:
        self.file, self.key, self.line, self.detail = file, key, line, message
        self.errors: list[CharacterError] = [self, *more]
        """Every problem found, in file order (this one first); one line each in the message."""
        where = f"{file}:{line}" if line else file
        text = f"{where}: {key}: {message}" if key else f"{where}: {message}"
        super().__init__("\n".join([text, *(str(e) for e in more)]))


class Exchange(BaseModel):
    """One exchange: what the user sent, and how the character answered (history or few-shot)."""

    model_config = ConfigDict(frozen=True)

    user: UserTurn
    """The user's turn."""
    reply: Reply
    """The character's answer, in the wire format."""
    foreign: dict[str, Any] | None = None
    """What another format said that charfmt has no place for (ids, timestamps, actors, media and
    tool parts), kept by ``charfmt.interop`` so that exporting again writes it back; ``None`` for
    exchanges charfmt wrote."""


def _action(text: str) -> str:
    Segment(tag=TEXT_TAG, text=text)  # the same rules as any text the model writes
    return text


_TAG_KEYS: Final = ("name", "role", "description", "values", "synonyms", "prefixes")
"""What a ``[[tags]]`` table of a character file holds."""


def tag_spec(row: Any) -> TagSpec:
    """One ``[[tags]]`` entry (a mapping, or a ``TagSpec``) as a ``TagSpec``; raises ``TagError``."""
    if isinstance(row, TagSpec):
        return row
    if not isinstance(row, dict):
        raise TagError("a tag is a table with name, role and description")
    fields: tuple[TagField, ...] = ("name", "role", "description")
    for key in fields:
        if not isinstance(row.get(key), str):
            raise TagError(f'a tag needs {key} = "..." (a string)', None, key)
    if row["role"] not in ROLES:
        raise TagError(f"tag {row['name']!r}: role {row['role']!r} is not one of {', '.join(ROLES)}", None, "role")
    lists: dict[str, tuple[str, ...]] = {}
    words: tuple[TagField, ...] = ("values", "synonyms", "prefixes")
    for key in words:
        value = row.get(key)
        if value is None:
            continue
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise TagError(f"tag {row['name']!r}: {key} is a list of strings", row["name"], key)
        lists[key] = tuple(value)
    return TagSpec(row["name"], row["role"], row["description"], **lists)


def tag_table(value: Any) -> TagTable:
    """A character's tags: a ``TagTable`` as it is; a list of tags extends ``DEFAULT_TAGS``.

    A list that declares the emotion tag (of a role a table has exactly one of: ``RoleSpec.single``)
    is a whole table of its own (what ``model_dump`` writes for a table that does not start with
    the default tags).
    """
    if isinstance(value, TagTable):
        return value
    if not isinstance(value, (list, tuple)):
        raise ValueError("tags is a list of [[tags]] tables")
    specs = [tag_spec(row) for row in value]
    if any(spec.row.single for spec in specs):
        return TagTable(tuple(specs))
    return DEFAULT_TAGS.extend(*specs)


def _tag_rows(table: TagTable) -> list[dict[str, Any]]:
    """What ``model_dump`` writes: the tags beyond the defaults (or every tag of another table)."""
    n = len(DEFAULT_TAGS)
    extended = table.names[:n] == DEFAULT_TAGS.names and DEFAULT_TAGS.extend(*table.specs[n:]) == table
    start = n if extended else 0
    rows = []
    for spec in table.specs[start:]:
        row: dict[str, Any] = {"name": spec.name, "role": spec.role, "description": spec.description}
        if spec.values is not None:
            row["values"] = list(spec.values)
        for key, words in (("synonyms", spec.synonyms), ("prefixes", spec.prefixes)):
            if words:
                row[key] = list(words)
        rows.append(row)
    return rows


_Tags = Annotated[TagTable, PlainValidator(tag_table), PlainSerializer(_tag_rows)]


_BOM: Final = "\ufeff"
_LINE_BREAK: Final = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _valid_one_line(text: str) -> str:
    """A name or tag printed inside a prompt line (a turn header): one line, no control characters."""
    if m := _LINE_BREAK.search(text):
        raise ValueError(f"must be one line without control characters; found U+{ord(m.group()):04X}")
    if text != text.strip():
        raise ValueError("must not start or end with whitespace")
    return text


_OneLine = Annotated[str, AfterValidator(_valid_one_line)]


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a name a prompt prints (``user_name``: the player's), or ``None`` where it can."""
    if not name:
        return "must not be empty"
    try:
        _valid_one_line(name)
    except ValueError as e:
        return str(e)
    return None


class Character(BaseModel):
    """A character definition: persona, emotion vocabulary, actions, examples."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: _OneLine = Field(min_length=1)
    """The character's name, as the system prompt introduces them."""
    persona: str
    """Who they are and how they talk, in their own language."""
    language: _OneLine = "en"
    """Language tag of the replies (``ja``, ``en``); the prompt asks for it."""
    user_name: _OneLine = Field("User", min_length=1)
    """What the prompt calls the player."""
    emotions: list[EmotionKey] = Field(min_length=1)
    """The emotion vocabulary: keys with descriptions, sprites and aliases."""
    actions: list[Annotated[str, AfterValidator(_action)]] = Field(default_factory=list)
    """Suggested actions for the action tag (``<act>``; the model may use others)."""
    tags: _Tags = DEFAULT_TAGS
    """The tags the character writes: ``DEFAULT_TAGS`` plus the file's ``[[tags]]`` (sound
    effects, motions...). Parsing, prompts, grammars and schemas for this character use them."""
    examples: list[Exchange] = Field(default_factory=list)
    """Few-shot exchanges shown in the system prompt."""
    stage: StageMap | None = None
    """What front ends do per emotion, action and cue (``[stage]``; see ``charfmt.stagemap``)."""
    card: CardInfo | None = None
    """For a character read from a SillyTavern / TavernAI card: what the card holds beyond these
    fields (lorebook, system prompt, greetings, ``extensions``...), written back on export."""

    @model_validator(mode="after")
    def _examples_use_the_vocabulary(self) -> Character:
        vocab = self.vocabulary
        emotion = self.tags.emotion.name
        for n, example in enumerate(self.examples):
            for side, chats in (("user", example.user.chats), ("reply", example.reply.chats)):
                for chat in chats:
                    for seg in chat.segments:
                        if seg.tag == emotion and vocab.resolve(seg.text) is None:
                            raise ValueError(f"example {n} ({side}): emotion {seg.text!r} is not in emotions")
        if self.stage is not None:
            check = self.stage.check(self.vocabulary.keys, _cue_values(self.tags), self.actions, vocab.resolve)
            for where, message in check:
                raise ValueError(f"{dotted_path(('stage', *where))}: {message}")
        return self

    @property
    def vocabulary(self) -> Vocabulary:
        """The emotion vocabulary, for ``parse(..., vocabulary=)``."""
        return Vocabulary(emotions=self.emotions)

    # --- a cast of one (``charfmt.prompt.cast.Cast``, as ``Scene`` is a cast of several) ------------------

    @property
    def reading_vocabulary(self) -> Vocabulary:
        """What a lenient read of its reply is told: its vocabulary (``Scene.reading_vocabulary``: the cast's)."""
        return self.vocabulary

    @property
    def speakers(self) -> None:
        """A character's chats name no speaker (``Scene.speakers``: the cast's ids)."""
        return None

    @property
    def members(self) -> dict[str, Character]:
        """Who speaks: the character itself, by its name (``Scene.members``: the cast)."""
        return {self.name: self}

    @property
    def narrator(self) -> None:
        """A character has no narrator's voice (``Scene.narrator``)."""
        return None

    def parse(
        self, text: str | bytes, *, lenient: bool = False, turn: UserTurn | str | Sequence[str] | None = None,
        prompt: str | Sequence[str | Mapping[str, Any]] | None = None,
    ) -> Reply:  # fmt: skip
        """``charfmt.parse`` with this character's vocabulary and tags (``Scene.parse``: each speaker's)."""
        return parse(text, lenient=lenient, vocabulary=self.vocabulary, tags=self.tags, turn=turn, prompt=prompt)

    def check(self, reply: Reply, source: str = "", *, lenient: bool = False) -> list[Diagnostic]:
        """A character's reply has no problem beyond the format's (``Scene.check``: speakers and emotions)."""
        return []

    def shorthand(self, text: str) -> UserTurn:
        """``parse_shorthand`` with this character's vocabulary, actions and tags."""
        return parse_shorthand(text, vocabulary=self.vocabulary, actions=self.actions, tags=self.tags)

    def read_turn(self, say: str, *, context: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> UserTurn:
        """``read_turn`` with this character's words: shorthand or a user block, ``context`` its ``[User Context]``."""
        return read_turn(say, vocabulary=self.vocabulary, actions=self.actions, tags=self.tags, context=context)

    @classmethod
    def load(cls, path: str | Path, *, max_size: int = MAX_FILE_SIZE, user_name: str | None = None) -> Character:
        """Load a character from a TOML file or a character card (PNG, CHARX, JSON); raises ``CharacterError``.

        ``user_name``: the player's name (a card's ``{{user}}``; ``None``: the file's, or ``User``).
        """
        data = read_bytes(Path(path), max_size)
        return cls.from_bytes(data, str(path), max_size=max_size, user_name=user_name)

    @classmethod
    def from_bytes(
        cls, data: bytes, file: str = "<character>", *, max_size: int = MAX_FILE_SIZE, user_name: str | None = None
    ) -> Character:
        """A character from a file's bytes: a card (PNG, CHARX zip, JSON; see ``charfmt.prompt.cards``) or TOML."""
        if user_name is not None and (why := name_problem(user_name)) is not None:
            raise CharacterError(file, "user_name", None, why)  # (as a card's or a TOML file's own would be)
        suffix = Path(file).suffix.lower()
        if suffix in _CARD_SUFFIXES or is_card(data):
            return cls.from_card(data, file, max_size=max_size, user_name=user_name)
        if not data.strip():  # (not a missing key of a TOML table: nothing at all, as for an empty card)
            raise CharacterError(file, "", None, "empty file")
        character = cls.from_toml(decode_file(data, file), file)
        return character if user_name is None else character.model_copy(update={"user_name": user_name})

    @classmethod
    def from_card(
        cls, data: bytes, file: str = "<card>", *, max_size: int = MAX_FILE_SIZE, user_name: str | None = None
    ) -> Character:
        """A character from a SillyTavern / TavernAI card's bytes; raises ``CharacterError`` naming the field."""
        if not isinstance(data, (bytes, bytearray)):
            hint = "Character.load(path) reads a file" if isinstance(data, (str, Path)) else "json.dumps(card).encode()"
            raise TypeError(f"Character.from_card takes the card file's bytes, not {type(data).__name__} ({hint})")
        data = bytes(data)
        with character_errors(file):
            try:
                fields, info, at = read_card(data, limit=max_size, user_name=user_name)
            except CardError as e:
                binary = not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")
                message = f"not UTF-8 TOML, and not a readable character card: {e}" if binary else str(e)
                suffix = Path(file).suffix.lower()
                if not data.strip():
                    message = "empty file"
                elif suffix in _SIGNATURES and not data.startswith(_SIGNATURES[suffix][0]):
                    message = f"not {_SIGNATURES[suffix][1]}: the file does not start with its signature"
                elif suffix in _CARD_SUFFIXES:
                    message = f"not a character card: {e}" if binary else str(e)
                raise CharacterError(file, e.key, None, message) from None
            try:
                character = cls.model_validate(fields)
            except ValidationError as e:
                err = e.errors()[0]
                raise CharacterError(file, dotted_path((*at, *err["loc"])), None, _validation_message(err)) from None
            if is_generated(character, info):  # charfmt's own export, untouched: nothing foreign to keep
                return character
            return character.model_copy(update={"card": info})

    @classmethod
    def from_toml(cls, text: str, file: str = "<character>") -> Character:
        """Build a character from TOML text; ``file`` names it in errors. Raises ``CharacterError``."""
        text = text.removeprefix(_BOM)  # Windows editors start files with a byte order mark
        with character_errors(file):
            data, fail = toml_data(text, file)
            if "cast" in data and "persona" not in data:  # (one line, not a line per key a character lacks)
                raise fail(("cast",), "a scene file ([[cast]]), not a character: load it with Scene.load (--scene)")
            _check_keys(data, fail)
            try:
                emotions = _EMOTION_KEYS_ADAPTER.validate_python(data.get("emotions", []))
            except ValidationError as e:
                err = e.errors()[0]
                raise fail(("emotions", *err["loc"]), _validation_message(err)) from None
            for where, message in vocabulary_clashes(emotions):
                raise fail(("emotions", *where), message)
            if "tags" in data:
                data["tags"] = _toml_tags(data["tags"], fail)
            if "stage" in data:
                _toml_stage(data["stage"], emotions, data.get("tags", DEFAULT_TAGS), fail, data.get("actions"))
            try:
                # Examples are read with the character's own vocabulary and actions.
                base = cls.model_validate({**data, "examples": []})
                data["examples"] = [_example(n, ex, base, fail) for n, ex in enumerate(data.get("examples", []))]
                return cls.model_validate(data)
            except ValidationError as e:
                err = e.errors()[0]
                raise fail(tuple(err["loc"]), _validation_message(err)) from None


def toml_data(text: str, file: str) -> tuple[dict[str, Any], Fail]:
    """A TOML file's data and the function that builds its errors (naming ``file``, the key and its line)."""
    try:
        data = tomllib.loads(text.removeprefix(_BOM))  # Windows editors start files with a byte order mark
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+)", str(e))
        raise CharacterError(file, "", int(m.group(1)) if m else None, f"invalid TOML: {e}") from None
    lines = _TomlLines(text.removeprefix(_BOM))  # one pass over the file, however many errors it has

    def fail(loc: tuple[Any, ...], message: str) -> CharacterError:
        return CharacterError(file, dotted_path(loc), lines.line(loc), message)

    return data, fail


_EMOTION_KEYS_ADAPTER: Final = TypeAdapter(list[EmotionKey])

_FRIENDLY: Final = {
    ("emotions", "missing"): "a character needs at least one [[emotions]] table",
    ("emotions", "too_short"): "a character needs at least one [[emotions]] table",
}
"""Messages in the author's words where pydantic's would name its own types."""


def _validation_message(err: Any) -> str:
    loc = tuple(err["loc"])
    friendly = _FRIENDLY.get((loc[0] if loc else "", err["type"]))
    return friendly or error_message(err)


def _toml_tags(rows: Any, fail: Fail) -> TagTable:
    """The ``[[tags]]`` of a character file as its tag table; errors point at the key of the entry at fault."""
    if not isinstance(rows, list):
        raise fail(("tags",), "tags are [[tags]] tables (name, role, description)")

    def at(i: int, key: str) -> tuple[Any, ...]:
        return ("tags", i, key) if isinstance(rows[i], dict) and key in rows[i] else ("tags", i)

    specs: list[TagSpec] = []
    for i, row in enumerate(rows):
        try:
            specs.append(tag_spec(row))
        except TagError as e:
            raise fail(at(i, e.field), str(e)) from None
        if specs[-1].row.single:
            taken = DEFAULT_TAGS.with_role(specs[-1].role)[0]
            raise fail(at(i, "role"), f"tag {specs[-1].name!r}: the {taken.role} tag is <{taken.name}>")
        try:
            DEFAULT_TAGS.extend(*specs)
        except TagError as e:
            message = str(e)
            if e.field == "name" and "built-in" in message:
                message += f" (the built-in tags are {', '.join(DEFAULT_TAGS.names)})"
            raise fail(at(i, e.field), message) from None
    return DEFAULT_TAGS.extend(*specs)


_CARD_SUFFIXES: Final = frozenset({".png", ".charx", ".json"})
"""Card file names: such a file is read as a card, never as TOML."""
_SIGNATURES: Final = {".png": (b"\x89PNG", "a PNG"), ".charx": (b"PK\x03\x04", "a CHARX (zip) file")}
"""The bytes a PNG and a CHARX file start with, and what to call a file that does not."""

Fail = Callable[[tuple[Any, ...], str], CharacterError]
"""Builds the error for a location in the file (``("emotions", 1, "key")``) and a message."""


def _cue_values(tags: TagTable) -> dict[str, tuple[str, ...] | None]:
    """Each cue tag of a table with its closed list of values (``None``: any value)."""
    return {spec.name: spec.values for spec in tags.with_role("cue")}


# The keys of each table under [stage] (a misspelt one gets a "did you mean"); the tables
# holding a name per entry (emotion keys, action words, cue tags) map to their entries' keys.
_VOICE_KEYS: Final = tuple(Voice.model_fields)
_EXPRESSION_KEYS: Final = tuple(Expression.model_fields)
_MOTION_KEYS: Final = tuple(Motion.model_fields)


def _toml_stage(stage: Any, emotions: Any, tags: TagTable, fail: Fail, actions: Any = None) -> None:
    """Check a ``[stage]`` table: known keys, emotion keys and cue values the character has, valid values."""
    if not isinstance(stage, dict):
        raise fail(("stage",), "stage is a table ([stage.emotions.KEY], [stage.actions.WORD], ...)")
    check_table(stage, tuple(StageMap.model_fields), ("stage",), fail)
    named: tuple[tuple[str, tuple[str, ...]], ...] = (("emotions", _EXPRESSION_KEYS), ("actions", _MOTION_KEYS))
    for name, fields in named:
        for word, entry in (stage.get(name) or {}).items() if isinstance(stage.get(name), dict) else ():
            check_table(entry, fields, ("stage", name, word), fail)
            if isinstance(entry, dict) and isinstance(entry.get("voice"), dict):
                check_table(entry["voice"], _VOICE_KEYS, ("stage", name, word, "voice"), fail)
    cues = stage.get("cues")
    for tag, values in cues.items() if isinstance(cues, dict) else ():
        for value, entry in values.items() if isinstance(values, dict) else ():
            check_table(entry, _MOTION_KEYS, ("stage", "cues", tag, value), fail)
    for name, fields in (("voice", _VOICE_KEYS), ("fallback", _EXPRESSION_KEYS), ("fallback_action", _MOTION_KEYS)):
        check_table(stage.get(name), fields, ("stage", name), fail)
    try:
        stage_map = StageMap.model_validate(stage)
    except ValidationError as e:
        err = e.errors()[0]
        raise fail(("stage", *err["loc"]), _validation_message(err)) from None
    keys = [e.key for e in emotions]
    words = [a for a in actions if isinstance(a, str)] if isinstance(actions, list) else []
    resolve = Vocabulary(emotions=emotions).resolve
    for where, message in stage_map.check(keys, _cue_values(tags), words, resolve):
        raise fail(("stage", *where), message)


def _unknown_keys(table: Any, known: Sequence[str], loc: tuple[Any, ...], fail: Fail) -> Iterator[CharacterError]:
    """An error for each unknown key of one table (none where it is no table), naming the closest known key."""
    if not isinstance(table, dict):
        return
    for key in table:
        if key not in known:
            close = closest(key, known)
            hint = f"did you mean {close!r}?" if close is not None else f"the keys here are {', '.join(known)}"
            yield fail((*loc, key), f"unknown key {key!r}; {hint}")


def check_table(table: Any, known: tuple[str, ...], loc: tuple[Any, ...], fail: Fail) -> None:
    """Reject an unknown key of one table, naming the closest known key."""
    for error in _unknown_keys(table, known, loc, fail):
        raise error


# Keys a character file may hold, table by table; anything else is a misspelling.
_EXAMPLE_KEYS: Final = ("user", "reply")
_REPLY_KEYS: Final = ("type", "body")


def _check_keys(data: dict[str, Any], fail: Fail) -> None:
    """Reject unknown keys (``aliasses``, ``exmaples``), naming the closest known key: every one, in file order."""
    found: list[CharacterError] = []

    def check(table: Any, known: Sequence[str], loc: tuple[Any, ...]) -> None:
        found.extend(_unknown_keys(table, known, loc, fail))

    check(data, list(Character.model_fields), ())
    for name, keys in (("emotions", list(EmotionKey.model_fields)), ("examples", _EXAMPLE_KEYS), ("tags", _TAG_KEYS)):
        rows = data.get(name)
        for i, row in enumerate(rows if isinstance(rows, list) else ()):
            check(row, keys, (name, i))
            replies = row.get("reply") if name == "examples" and isinstance(row, dict) else None
            for j, chat in enumerate(replies if isinstance(replies, list) else ()):
                check(chat, _REPLY_KEYS, (name, i, "reply", j))
    if found:
        first, *more = sorted(found, key=lambda e: e.line or 0)  # stable: same line, order found
        raise CharacterError(first.file, first.key, first.line, first.detail, more)


def read_file(path: Path, max_size: int) -> str:
    """A file's text, at most ``max_size`` bytes of UTF-8; every failure is a ``CharacterError``."""
    return decode_file(read_bytes(path, max_size), str(path))


def read_bytes(path: Path, max_size: int) -> bytes:
    """A file's bytes, at most ``max_size``; every failure is a ``CharacterError``."""
    file = str(path)
    try:
        with path.open("rb") as f:
            data = f.read(max_size + 1)
    except (OSError, MemoryError, ValueError) as e:  # ValueError: a NUL in the path
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        raise CharacterError(file, "", None, f"cannot read: {reason}") from None
    if len(data) > max_size:
        raise CharacterError(file, "", None, f"larger than {max_size:,} bytes (max_size)")
    return data


def decode_file(data: bytes, file: str) -> str:
    """UTF-8 text of a file's bytes; a ``CharacterError`` naming the line of a bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise CharacterError(file, "", line, f"not UTF-8: byte 0x{data[e.start]:02X} at offset {e.start}") from None


@contextmanager
def character_errors(file: str, line: int | None = None) -> Iterator[None]:
    """The one place foreign errors become ``CharacterError`` (hostile or absurd input, never a traceback)."""
    try:
        yield
    except CharacterError:
        raise
    except RecursionError:
        raise CharacterError(file, "", line, "nested too deeply") from None
    except MemoryError:
        raise CharacterError(file, "", line, "too large to load") from None
    except ValidationError as e:
        raise CharacterError(file, "", line, _validation_message(e.errors()[0])) from None
    except ValueError as e:  # ParseError, JSON errors, UnicodeError, CPython's limit on integer digits
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "integer string conversion" in message:
            message = "a number is too long (more than 4,300 digits)"
        raise CharacterError(file, "", line, message) from None


def _example(n: int, raw: Any, character: Character, fail: Fail) -> Any:
    """Turn a TOML example (shorthand user, reply as type/body tables) into model data.

    A character file is authored, so what the shorthand would only warn about (an
    unknown ``[furious]``) is an error here.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("user"), str) or not isinstance(raw.get("reply"), list):
        raise fail(("examples", n), 'an example has user = "..." and [[examples.reply]] tables')
    user = character.shorthand(raw["user"])
    for d in user.diagnostics:
        raise fail(("examples", n, "user"), f"{d.code} {d.message.removesuffix('; kept as text')}")
    chats = []
    for i, chat in enumerate(raw["reply"]):
        loc = ("examples", n, "reply", i, "body")
        if not isinstance(chat, dict):
            raise fail(("examples", n, "reply", i), "a reply chat is a table with type and body")
        kind, body = chat.get("type", "C"), chat.get("body")
        if not isinstance(kind, str) or kind not in CHAT_TYPES:
            raise fail(("examples", n, "reply", i, "type"), f"type must be one of {', '.join(CHAT_TYPES)}")
        if not isinstance(body, str):
            raise fail(loc, "body must be a string")
        try:
            elements = parse_body(kind, body, character.tags)
        except BodyError as e:
            raise fail(loc, f"{e.code} {e.message}") from None
        for tag, key in elements:
            spec = character.tags.get(tag)
            if tag == character.tags.emotion.name and character.vocabulary.resolve(key) is None:
                raise fail(loc, f"emotion {key!r} is not one of {', '.join(character.vocabulary.keys)}")
            if spec is not None and spec.values is not None and key not in spec.values:
                raise fail(loc, f"CF131 <{tag}> value {key!r} is not one of {', '.join(spec.values)}")
        chats.append(Chat(type=kind, order=i + 1, segments=[Segment(tag=t, text=s) for t, s in elements]))
    return {"user": user.model_dump(), "reply": Reply(chats=chats).model_dump()}


_TOML_ARRAY_HEADER: Final = re.compile(r"^\s*\[\[\s*([\w.-]+)\s*\]\]")
_TOML_TABLE_HEADER: Final = re.compile(r"^\s*\[\s*([\w.-]+)\s*\]")
_TOML_KEY: Final = re.compile(r"^\s*([\w-]+)\s*=")


class _TomlLines:
    """Where each value of a TOML text is written: the lines are found on first use, once."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def _lines(self) -> dict[tuple[Any, ...], int]:
        return _toml_lines(self.text)

    def line(self, loc: tuple[Any, ...]) -> int | None:
        """The line where the value at ``loc`` (``("emotions", 2, "key")``) is written, or nearest above."""
        for size in range(len(loc), 0, -1):
            if loc[:size] in self._lines:
                return self._lines[loc[:size]]
        return None


def _toml_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Each place of a TOML text (table, array entry, key) and the line it is first written on."""
    lines: dict[tuple[Any, ...], int] = {}
    counts: dict[tuple[Any, ...], int] = {}
    current: tuple[Any, ...] = ()
    for number, line in enumerate(text.split("\n"), 1):
        if m := _TOML_ARRAY_HEADER.match(line):
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
            lines.setdefault(current[:-1], number)  # the array itself: its first table
        elif m := _TOML_TABLE_HEADER.match(line):
            current = tuple(m.group(1).split("."))
            for size in range(1, len(current) + 1):  # [stage.cues.sfx.nod] is where stage.cues.sfx begins
                lines.setdefault(current[:size], number)
        elif m := _TOML_KEY.match(line):
            lines.setdefault((*current, m.group(1)), number)
    return lines


def load_history(path: str | Path, character: Character | Scene, *, max_size: int = MAX_FILE_SIZE) -> list[Exchange]:
    """Read a conversation from a JSON Lines file (see ``history_from_jsonl``); raises ``CharacterError``."""
    return history_from_jsonl(read_file(Path(path), max_size), character, str(path))


def history_from_jsonl(text: str, character: Character | Scene, file: str = "<history>") -> list[Exchange]:
    """Read a conversation from JSON Lines text: ``{"user": ..., "reply": ...}`` per line, oldest first.

    ``character`` may be a ``Scene``: each reply is then read as the scene reads one (each speaker's
    emotions against its own vocabulary), and shorthand turns with the whole cast's words (``Scene.shorthand``).

    An exchange may also span several lines (pretty-printed, as ``json.dump(..., indent=2)`` or
    ``jq .`` write it): the exchanges are the JSON objects of the text, one after another.

    ``user`` is shorthand text (``"[angry] なんで？"``) or a ``UserTurn`` object;
    ``reply`` is the character's reply in the wire format, as an object or a string,
    parsed strictly with the character's vocabulary; what ``dumps`` writes for a lenient
    result (an unknown tag kept, an emotion's intensity) reads back exactly too. Optional keys
    (what ``history_line`` writes, so nothing is lost): ``reasoning``, ``dialect`` and
    ``diagnostics`` are the reply's (the user's diagnostics are inside ``user``), ``foreign``
    is ``Exchange.foreign``. Errors are ``CharacterError`` naming ``file`` and the line (where an
    exchange opens; for text that is not JSON, where it broke).
    """
    history = []
    for number, row in _json_values(text.removeprefix(_BOM), file):
        with character_errors(file, number):
            if not isinstance(row, dict) or set(row) - _LINE_EXTRAS != {"user", "reply"}:
                raise CharacterError(file, "", number, f"{_NOT_EXCHANGE}; found {_found(row)}")
            user = row["user"]
            turn = character.shorthand(user) if isinstance(user, str) else UserTurn.model_validate(user)
            reply = row["reply"] if isinstance(row["reply"], str) else json.dumps(row["reply"], ensure_ascii=False)
            extra = {k: row[k] for k in ("reasoning", "dialect", "diagnostics") if row.get(k) is not None}
            stored = _stored_reply(reply, character)
            if extra:
                stored = Reply.model_validate({**stored.model_dump(), **extra})
            history.append(Exchange(user=turn, reply=stored, foreign=row.get("foreign")))
    return history


_LINE_EXTRAS: Final = frozenset({"foreign", "reasoning", "dialect", "diagnostics"})
_NOT_EXCHANGE: Final = 'each exchange is an object {"user": ..., "reply": ...}, one per line (or spread over lines)'
_NEXT: Final = re.compile(r"\S")
"""The start of the next value: only blank lines and indentation stand between two exchanges."""
_DECODER: Final = json.JSONDecoder()


def _json_values(text: str, file: str) -> Iterator[tuple[int, Any]]:
    """Each JSON value of ``text``, one after another, with the line it opens on (JSON Lines, or pretty-printed)."""
    at = _skip(text, 0)
    line = 1 + text.count("\n", 0, at)
    while at < len(text):
        with character_errors(file, line):
            try:
                value, end = _DECODER.raw_decode(text, at)
            except json.JSONDecodeError as e:
                raise _not_json(file, text, e, line) from None
        yield line, value
        after = _skip(text, end)
        if after < len(text) and "\n" not in text[end:after]:  # "{...} {...}": one exchange per line
            where = line + text.count("\n", at, end)
            raise CharacterError(file, "", where, f"{_NOT_EXCHANGE}; more text follows one on its line")
        line += text.count("\n", at, after)
        at = after


def _skip(text: str, at: int) -> int:
    """Where the next value of ``text`` starts at or after ``at`` (its length if none does)."""
    found = _NEXT.search(text, at)
    return len(text) if found is None else found.start()


def _not_json(file: str, text: str, e: json.JSONDecodeError, opened: int) -> CharacterError:
    """The error for an exchange that is not JSON: where it broke, in charfmt's words (``envelope.json_error``)."""
    words, pos = json_error(text, e)
    line = 1 + text.count("\n", 0, pos)
    column = pos - text.rfind("\n", 0, pos)
    if json_cut_off(text, e):
        return CharacterError(file, "", opened, "not JSON: the exchange that opens on this line is cut off")
    where = "" if line == opened else f" (in the exchange that opens on line {opened})"
    return CharacterError(file, "", line, f"not JSON at column {column}: {words}{where}")


def _found(value: Any) -> str:
    """What stands where an exchange should, in a few words (an object's keys named)."""
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:6]) + (", ..." if len(value) > 6 else "")
        return f"an object with keys {keys}" if value else "an empty object"
    kinds = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
    return kinds.get(type(value), "a number")


def history_line(exchange: Exchange) -> str:
    """One line of a JSON Lines history (``history_from_jsonl`` reads it back exactly), newline included."""
    row: dict[str, Any] = {"user": exchange.user.model_dump(mode="json"), "reply": json.loads(dumps(exchange.reply))}
    reply = exchange.reply
    if reply.reasoning is not None:
        row["reasoning"] = reply.reasoning
    if reply.dialect is not None:
        row["dialect"] = reply.dialect
    if reply.diagnostics:
        row["diagnostics"] = [d.model_dump(mode="json") for d in reply.diagnostics]
    if exchange.foreign is not None:
        row["foreign"] = exchange.foreign
    return json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"


def _stored_reply(text: str, character: Character | Scene) -> Reply:
    """A reply as ``dumps`` stored it: strictly valid, or ``dumps``'s form for what the canonical
    form cannot say (an unknown tag a lenient read kept, an emotion's intensity).

    Anything else is the strict ``ParseError``: a history file is data charfmt wrote, not a
    model's reply to repair. The character's vocabulary applies as in strict parsing (a scene's:
    each speaker's own, as ``Scene.parse`` reads).
    """
    tags, emotion = character.tags, character.tags.emotion.name

    try:
        return character.parse(text)
    except ParseError:
        reply = parse(text, lenient=True, tags=tags)
        if is_canonical(reply, tags) or json.loads(dumps(reply)) != _json_or_none(text):
            raise
    # The canonical part, strictly, with the vocabulary (its own errors if a key is unknown);
    # its keys, in order, are the stored reply's emotion keys as the vocabulary reads them.
    keys = iter(
        seg.text
        for chat in character.parse(dumps(canonical_form(reply, tags))).chats
        for seg in chat.segments
        if seg.tag == emotion
    )
    chats = [
        chat.model_copy(
            update={
                "segments": [
                    s.model_copy(update={"text": next(keys)}) if s.tag == emotion else s for s in chat.segments
                ]
            }
        )
        for chat in reply.chats
    ]
    return reply.model_copy(update={"chats": chats, "diagnostics": [], "reasoning": None, "dialect": None})


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
