"""Typed models of a reply: ``Reply`` → ``Chat`` → ``Segment``, and the ``Vocabulary``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from charfmt._dialect_names import DialectName
from charfmt._grammar import lexical
from charfmt._grammar.static import terminal_regex
from charfmt.diagnostics import CharfmtError, Diagnostic
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TEXT_TAG, TagTable

if TYPE_CHECKING:
    from charfmt.events import Event

ChatType = Literal["C", "I", "E"]

_M = TypeVar("_M", bound=BaseModel)
_set = object.__setattr__


def dotted_path(loc: Sequence[int | str]) -> str:
    """A location as written in messages: ``("emotions", 1, "aliases")`` is ``emotions[1].aliases``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def error_message(err: Mapping[str, Any]) -> str:
    """One pydantic error's message (its ``msg`` entry, the one key named so), without pydantic's prefixes."""
    return str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")


def validation_message(error: ValidationError) -> str:
    """The first problem of a pydantic error in plain words: ``emotions[1].key: ...``, without pydantic's prefixes."""
    first = error.errors()[0]
    where = dotted_path(first["loc"])
    message = error_message(first)
    return f"{where}: {message}" if where else message


def construct_trusted(cls: type[_M], values: dict[str, Any]) -> _M:
    """Build a model from values the parser already checked (no validation).

    ``model_construct`` does the same but spends most of a parse's time on
    defaults bookkeeping; the parser knows every field is present and valid.
    The result equals the validated model (same class, fields, no extra, no private state).
    """
    obj: _M = _new(cls)
    _set_dict(obj, values)
    _set_fields_set(obj, set(values))
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


def _slot_setter(name: str) -> Callable[[Any, Any], None]:
    """The setter of one of ``BaseModel``'s instance slots, called directly (no ``__setattr__`` lookup)."""
    slot = BaseModel.__dict__.get(name)
    setter = getattr(slot, "__set__", None)
    if setter is None:  # a pydantic that keeps these elsewhere: the generic way
        return lambda obj, value: _set(obj, name, value)
    return cast("Callable[[Any, Any], None]", setter)


class TrustedWrite(NamedTuple):
    """How :func:`construct_trusted` writes a model: ``object.__new__``, then ``BaseModel``'s four instance slots.

    For a reader that writes it out in its own loop (``charfmt._strict.fast``: a typical reply
    builds a dozen models, and a call per model would be a tenth of its parse).
    """

    new: Callable[[type[Any]], Any]
    set_dict: Callable[[Any, dict[str, Any]], None]
    """``__dict__``: the field values."""
    set_fields_set: Callable[[Any, set[str]], None]
    """``__pydantic_fields_set__``: the names of the fields given (every one)."""
    set_extra: Callable[[Any, None], None]
    """``__pydantic_extra__``: ``None`` (no extra fields)."""
    set_private: Callable[[Any, None], None]
    """``__pydantic_private__``: ``None`` (no private state)."""


TRUSTED_WRITE: Final = TrustedWrite(
    object.__new__,
    _slot_setter("__dict__"),
    _slot_setter("__pydantic_fields_set__"),
    _slot_setter("__pydantic_extra__"),
    _slot_setter("__pydantic_private__"),
)
_new, _set_dict, _set_fields_set, _set_extra, _set_private = TRUSTED_WRITE


class Segment(BaseModel):
    """One element of a chat body: an emotion, an action, speech, inner voice or plain text."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    tag: str
    """A tag name of the tag table (or of your own table), or ``text`` for an untagged I/E body."""
    text: str
    """Decoded content: the key of a key tag (the emotion, a cue with a list of values), otherwise the text as shown."""
    intensity: float | None = None
    """How strong the emotion is, 0 to 1, when a lenient read found one (``[surprised:0.6]``)."""

    @model_validator(mode="after")
    def _check(self) -> Segment:
        # A segment does not know which table it belongs to: the default table's tags are
        # checked by their content kind, any other name must look like a tag name (a
        # custom tag, or an unknown tag lenient parsing kept); the parser checks the rest.
        spec = DEFAULT_TAGS.get(self.tag)
        if spec is None and self.tag != TEXT_TAG and not re.fullmatch(_UNKNOWN_TAG, self.tag):
            raise ValueError(f"segment tag {self.tag!r} is not a tag name")
        if spec is not None and spec.content == "key":
            if not terminal_regex("KEY").fullmatch(self.text):
                raise ValueError(
                    f"{self.tag} key {self.text!r} must be non-empty, without surrounding "
                    "whitespace, markup or control characters"
                )
        elif self.text and not _text_ok(self.text):
            raise ValueError(f"{self.tag} text holds a control character or lone surrogate")
        return self


_UNKNOWN_TAG: Final = r"[a-z_][a-z0-9_\-]*"
"""Lenient parsing keeps tags it does not know under their own (lower-case) name. (Compiled where
used, by ``re``'s cache: validation only, never a parse of valid input.)"""


def _text_ok(text: str) -> bool:
    # TEXT allows '<' and '&' only escaped; the writer escapes them, so check the rest.
    return lexical.NOT_TEXT_CHAR.search(text) is None


def check_body(kind: str, segments: list[Segment]) -> None:
    """Raise ``ValueError`` unless ``segments`` is a valid body for chat type ``kind``."""
    if kind in TAGGED_TYPES:
        if not segments:
            raise ValueError("a C chat has at least one segment")
        for s in segments:
            if s.tag == TEXT_TAG:
                raise ValueError(f"a C chat cannot hold a {s.tag!r} segment")
    elif len(segments) != 1 or segments[0].tag != TEXT_TAG or not segments[0].text:
        raise ValueError(f"an {kind} chat holds exactly one non-empty 'text' segment")


class Chat(BaseModel):
    """One entry of the reply's ``chats`` array."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    type: ChatType
    """``C`` chat (tag elements), ``I`` info / system log, ``E`` event (plain text)."""
    order: int = Field(ge=1)
    """Display order, 1-based; ``Reply.chats`` is sorted by it."""
    segments: list[Segment]
    """The body, element by element (one ``text`` segment for I and E)."""
    speaker: str | None = None
    """Who speaks this chat in a scene of several characters (the ``"speaker"`` key); ``None``
    for a single character's reply, or a narrator's ``I``/``E`` chat."""

    @model_validator(mode="after")
    def _check(self) -> Chat:
        check_body(self.type, self.segments)
        if self.speaker is not None and not terminal_regex("KEY").fullmatch(self.speaker):
            raise ValueError(f"speaker {self.speaker!r} must be a name without markup or surrounding whitespace")
        return self

    def texts(self, tag: str) -> list[str]:
        """The texts of every segment with ``tag``, in order."""
        return [s.text for s in self.segments if s.tag == tag]


class Reply(BaseModel):
    """A parsed model reply: chats in display order, and what the parser had to say."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    chats: list[Chat] = Field(default_factory=list)
    """Chats sorted by ``order`` (stable: equal orders keep their arrival order)."""
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    """Problems and repairs, in input order; empty for clean input."""
    reasoning: str | None = None
    """Lenient parsing only: the model's own reasoning written before the reply (``<think>``...),
    kept apart from the chats; never the character's inner voice."""
    dialect: DialectName | None = None
    """Lenient parsing only: the format the model actually wrote (``canonical``,
    ``json-fields``, ``attribute-xml``, ``bracket``...); ``None`` for input that was valid."""

    @field_validator("chats")
    @classmethod
    def _sorted(cls, chats: list[Chat]) -> list[Chat]:
        return sorted(chats, key=lambda c: c.order)

    def events(self, tags: TagTable | None = None) -> Iterator[Event]:
        """The reply as the event stream a streaming parse would emit (roles from ``tags``).

        ``tags``: the table the reply was read with (``None``: ``DEFAULT_TAGS``). A reply keeps
        no table of its own, so a reply read with a character's pass it again:
        ``charfmt.parse(text, tags=aoi.tags).events(aoi.tags)`` (a ``<motion>`` cue is text otherwise).
        """
        from charfmt.events import reply_events  # noqa: PLC0415 (import time: a parse builds no event classes)

        return reply_events(self, DEFAULT_TAGS if tags is None else tags)


class EmotionKey(BaseModel):
    """One emotion key of a character's vocabulary."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    key: str
    """The key written in ``<emo>``, e.g. ``joy``."""
    description: str = ""
    """When the character shows it; goes into the system prompt."""
    aliases: list[str] = Field(default_factory=list)
    """Other words that mean this key (``happy``, ``喜び``); resolved to ``key``."""
    sprite: str | None = None
    """Optional sprite / expression id the game shows for it."""

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        if not terminal_regex("KEY").fullmatch(key):
            raise ValueError(f"emotion key {key!r} is not a valid key")
        return key


def vocabulary_clashes(emotions: Sequence[EmotionKey]) -> Iterator[tuple[tuple[int | str, ...], str]]:
    """Each word (key or alias, any case) that names a second key: its place in ``emotions`` and why.

    The place is ``(index, "key")`` or ``(index, "aliases", n)``, so a caller can point at the line.
    """
    owner: dict[str, str] = {}
    for i, e in enumerate(emotions):
        if e.key.casefold() in owner and owner[e.key.casefold()] == e.key:
            yield (i, "key"), f"emotion {e.key!r} is listed twice"
        for n, word in enumerate((e.key, *e.aliases)):
            folded = word.strip().casefold()
            if owner.get(folded, e.key) != e.key:
                where: tuple[int | str, ...] = (i, "key") if n == 0 else (i, "aliases", n - 1)
                yield where, f"{word!r} names both {owner[folded]!r} and {e.key!r}"
            owner.setdefault(folded, e.key)


Policy = Literal["error", "alias", "nearest", "fallback", "keep"]
"""What a vocabulary does with an emotion key it does not know (see ``Vocabulary.policy``)."""


class Vocabulary(BaseModel):
    """The emotion keys a character may use; strict parsing rejects any other key.

    ``Vocabulary(emotions=["joy", {"key": "sad", "aliases": ["悲しい"]}, EmotionKey(key="calm")])``:
    each emotion is a bare key, a mapping of ``EmotionKey`` fields, or an ``EmotionKey``.
    A vocabulary holds at least one key.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    emotions: list[EmotionKey]
    """Known emotions, in the order prompts list them."""
    policy: Policy = "alias"
    """What an unknown key becomes: ``error`` (keys only), ``alias`` (keys and aliases,
    the default), ``nearest`` (the closest key), ``fallback`` (the ``fallback`` key),
    ``keep`` (as written, with a warning). Every decision is a diagnostic."""
    fallback: str | None = None
    """The key ``policy="fallback"`` uses; must be one of the keys."""
    _lookup: dict[str, str] = PrivateAttr(default_factory=dict)

    if TYPE_CHECKING:
        # What callers may pass (the validator below turns keys and mappings into
        # EmotionKey); pydantic would otherwise type the argument as list[EmotionKey].
        def __init__(
            self,
            *,
            emotions: Sequence[str | EmotionKey | Mapping[str, Any]],
            policy: Policy = "alias",
            fallback: str | None = None,
        ) -> None: ...

    else:

        def __init__(self, **data: Any) -> None:
            # A wrong policy or key is a CharfmtError, as ``Vocabulary.of``'s (not pydantic's own error).
            try:
                super().__init__(**data)
            except ValidationError as e:
                raise CharfmtError(validation_message(e)) from None

    @field_validator("emotions", mode="before")
    @classmethod
    def _from_keys(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [{"key": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _index(self) -> Vocabulary:
        if not self.emotions:
            raise ValueError("a vocabulary needs at least one emotion key; got none")
        for where, message in vocabulary_clashes(self.emotions):
            raise ValueError(f"{dotted_path(('emotions', *where))}: {message}")
        self._lookup = {word.strip().casefold(): e.key for e in self.emotions for word in (e.key, *e.aliases)}
        if self.policy == "fallback" and self.fallback not in self.keys:
            raise ValueError(f"policy 'fallback' needs fallback= one of {self.keys}")
        return self

    @classmethod
    def of(cls, *keys: str, policy: Policy = "alias", fallback: str | None = None) -> Vocabulary:
        """A vocabulary of bare keys: ``Vocabulary.of("joy", "sad")``; raises ``CharfmtError``."""
        try:
            return cls.model_validate({"emotions": list(keys), "policy": policy, "fallback": fallback})
        except ValidationError as e:
            raise CharfmtError(validation_message(e)) from None

    @property
    def keys(self) -> list[str]:
        """The canonical keys, in order."""
        return [e.key for e in self.emotions]

    def resolve(self, word: str) -> str | None:
        """The canonical key ``word`` names (key or alias, any case), or ``None``."""
        return self._lookup.get(word.strip().casefold())
