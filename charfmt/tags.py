"""The tag table: the one place that says which tags a chat body may use, and what each one is.

The grammar (``grammars/body.lark``), the models, the writer and every later
consumer (renderer, streamer, strategies, exported grammars, lenient readers) read
this table; nothing else keeps a list of tag names or decides a tag's role by its name.

A tag's *role* says what it is:

``emotion``
    the character's emotion: one whole key, checked against the character's emotion
    vocabulary, announced once complete (``Emotion`` event). Exactly one tag has it.
``action``
    what the character does: whole text, announced once complete (``Action`` event);
    where lenient parsing puts narration such as ``*waves*``. At most one tag has it.
``cue``
    any other whole value a game acts on (a sound effect, a motion, background music, a
    camera cue), announced once complete (``Cue`` event); its values may be a closed list.
``speech``
    what the character says, streamed as text deltas (``TextDelta``); what text-to-speech
    reads. The first speech tag is where lenient parsing puts untagged text.
``hidden``
    inner voice (``thought``), streamed as text deltas but not meant for the player.

The default table is exactly the design study's: ``emo``, ``act``, ``msg``, ``thought``.
``DEFAULT_TAGS.extend(TagSpec("sfx", "cue", "a sound effect", values=("door_slam",)))``
makes a table with one more tag; pass it as ``tags=`` to parsing, streaming, rendering,
exporting and the strategies, or declare it in a character file (``[[tags]]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final, Literal

Role = Literal["emotion", "action", "cue", "speech", "hidden"]

ROLES: Final[dict[Role, str]] = {
    "emotion": "the character's emotion: one key from its emotion vocabulary, announced once complete",
    "action": "what the character does: whole text, announced once complete",
    "cue": "a value the game acts on (sound, motion, music, camera), announced once complete",
    "speech": "what the character says: streamed as it arrives, read by text-to-speech",
    "hidden": "inner voice: streamed, never shown to the player",
}
"""Every role and what it means; the order documentation lists them in."""

ContentKind = Literal["key", "text"]

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class TagSpec:
    """One element of the ``C`` body language."""

    name: str
    """The tag name as written between the brackets: ``emo`` in ``<emo>joy</emo>``."""
    role: Role
    """What the tag is: ``emotion``, ``action``, ``cue``, ``speech`` or ``hidden`` (see ``ROLES``)."""
    description: str
    """One line for documentation and system prompts."""
    values: tuple[str, ...] | None = None
    """A closed list of values (``cue`` tags only): the content is then a key from it."""
    synonyms: tuple[str, ...] = ()
    """Other names (lower case) models write for this tag; lenient parsing reads them as it."""
    prefixes: tuple[str, ...] = ()
    """Words that mark a shorthand value as this tag: ``[emotion:angry]`` (lower case)."""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(
                f"tag name {self.name!r} must be lower-case letters, digits and '_', starting with a letter"
            )
        if self.role not in ROLES:
            raise ValueError(f"tag {self.name!r}: role {self.role!r} is not one of {', '.join(ROLES)}")
        if self.values is not None:
            if self.role != "cue":
                raise ValueError(f"tag {self.name!r}: only a cue tag has a closed list of values")
            if not self.values:
                raise ValueError(f"tag {self.name!r}: an empty list of values allows nothing")
            if len(set(self.values)) != len(self.values):
                raise ValueError(f"tag {self.name!r}: a value is listed twice")
            from charfmt._tables import terminal_regex  # noqa: PLC0415 (the grammar's KEY; tags load first)

            key = terminal_regex("KEY")
            for value in self.values:
                if not isinstance(value, str) or not key.fullmatch(value):
                    raise ValueError(
                        f"tag {self.name!r}: value {value!r} is not a key (non-empty, no surrounding "
                        "whitespace, markup or control characters)"
                    )
        for word in (*self.synonyms, *self.prefixes):
            if not isinstance(word, str) or not word or word != word.lower():
                raise ValueError(f"tag {self.name!r}: synonyms and prefixes are non-empty lower-case words")

    @property
    def content(self) -> ContentKind:
        """``key``: one identifier (an emotion, or a value of a closed list); ``text``: escaped free text."""
        return "key" if self.role == "emotion" or self.values is not None else "text"

    @property
    def shown(self) -> bool:
        """Whether the content is meant for the player (a ``hidden`` tag's is not)."""
        return self.role != "hidden"

    @property
    def streamed(self) -> bool:
        """Whether the content arrives as text deltas (speech, hidden) or as one whole value (emotion, action, cue)."""
        return self.role in ("speech", "hidden")

    @property
    def open(self) -> str:
        """The opening tag, e.g. ``<emo>``."""
        return f"<{self.name}>"

    @property
    def close(self) -> str:
        """The closing tag, e.g. ``</emo>``."""
        return f"</{self.name}>"

    @property
    def terminal(self) -> str:
        """Stem of the grammar's terminal names: ``EMO`` gives ``EMO_OPEN``/``EMO_CLOSE``."""
        return self.name.upper()


TEXT_TAG: Final = "text"
"""The segment tag of an untagged ``I``/``E`` body."""

RESERVED_NAMES: Final[frozenset[str]] = frozenset(
    {TEXT_TAG, "chat", "chats", "user_chats", "context", "body", "element", "c_body", "text_body", "bodies"}
)
"""Names a tag may not take: they mean something else in the envelope, the request or the grammar."""


@dataclass(frozen=True)
class TagTable:
    """An ordered set of tags; immutable and hashable, so parsers built for it can be cached."""

    specs: tuple[TagSpec, ...]
    _by_name: dict[str, TagSpec] = field(init=False, repr=False, compare=False, hash=False)
    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    def __hash__(self) -> int:
        # Parsers are cached by table and looked up on every parse: hash once.
        return self._hash

    def __post_init__(self) -> None:
        specs = tuple(self.specs)
        if not all(isinstance(s, TagSpec) for s in specs):
            raise TypeError("a TagTable holds TagSpec entries")
        object.__setattr__(self, "specs", specs)
        by_name: dict[str, TagSpec] = {}
        for spec in self.specs:
            if spec.name in by_name:
                raise ValueError(f"tag {spec.name!r} is declared twice")
            if spec.name in RESERVED_NAMES:
                raise ValueError(f"{spec.name!r} cannot be a tag name: it is reserved")
            by_name[spec.name] = spec
        roles = [s.role for s in self.specs]
        if roles.count("emotion") != 1:
            raise ValueError("a tag table has exactly one emotion tag")
        if roles.count("action") > 1:
            raise ValueError("a tag table has at most one action tag")
        if "speech" not in roles:
            raise ValueError("a tag table has at least one speech tag")
        seen: dict[str, str] = {}
        for spec in self.specs:
            for word in (spec.name, *spec.synonyms):
                other = seen.setdefault(word, spec.name)
                if other != spec.name:
                    raise ValueError(f"{word!r} cannot name both {other!r} and {spec.name!r}")
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_hash", hash(specs))

    def __iter__(self) -> Iterator[TagSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> TagSpec | None:
        """The tag called ``name``, or ``None``."""
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> TagSpec:
        return self._by_name[name]

    @property
    def names(self) -> tuple[str, ...]:
        """Tag names in table order."""
        return tuple(s.name for s in self.specs)

    def with_role(self, *roles: Role) -> tuple[TagSpec, ...]:
        """The tags with any of ``roles``, in table order."""
        return tuple(s for s in self.specs if s.role in roles)

    @cached_property
    def emotion(self) -> TagSpec:
        """The emotion tag."""
        return self.with_role("emotion")[0]

    @cached_property
    def action(self) -> TagSpec | None:
        """The action tag, if the table has one."""
        found = self.with_role("action")
        return found[0] if found else None

    @cached_property
    def speech(self) -> TagSpec:
        """The first speech tag: where lenient parsing puts untagged text; what TTS reads by default."""
        return self.with_role("speech")[0]

    @cached_property
    def synonyms(self) -> dict[str, str]:
        """Every name a model may write (lower case), mapped to the tag it means."""
        return {word: s.name for s in self.specs for word in (s.name, *s.synonyms)}

    @cached_property
    def prefixes(self) -> dict[str, str]:
        """Shorthand prefix words (lower case), mapped to the tag they mark."""
        return {word: s.name for s in self.specs for word in s.prefixes}

    def extend(self, *specs: TagSpec) -> TagTable:
        """A new table: this one's tags, then ``specs``."""
        return TagTable((*self.specs, *specs))


DEFAULT_TAGS: Final = TagTable(
    (
        TagSpec(
            "emo", "emotion", "the character's emotion, a key from its vocabulary",
            synonyms=("emotion", "emotions", "expression", "mood", "face", "feeling", "feel"),
            prefixes=("emo", "emotion", "emotions", "expression", "mood", "face", "feeling", "feel"),
        ),
        TagSpec(
            "act", "action", "what the character does",
            synonyms=("action", "actions", "motion", "gesture", "move"),
            prefixes=("act", "action", "actions", "motion", "gesture", "move"),
        ),
        TagSpec(
            "msg", "speech", "what the character says",
            synonyms=(
                "message", "speak", "speech", "say", "said", "dialogue", "dialog", "line", "content", "text",
                "saying", "reply", "response", "talk",
            ),
        ),
        TagSpec(
            "thought", "hidden", "the character's inner voice, not shown to the player",
            synonyms=("thoughts", "thinking", "think", "inner", "inner_voice", "monologue", "mind"),
        ),
    )
)  # fmt: skip
"""The design study's tags, in the order documentation lists them."""

TAGS: Final[tuple[TagSpec, ...]] = DEFAULT_TAGS.specs
"""The default table's tags (kept for code that iterates the default set)."""

TAG_BY_NAME: Final[dict[str, TagSpec]] = {t.name: t for t in TAGS}

CHAT_TYPES: Final[dict[str, str]] = {
    "C": "chat: the character's turn, a body of tag elements",
    "I": "info: a system log line, plain text",
    "E": "event: something that happened in the game, plain text",
}
"""Chat types and what their bodies hold."""

TAGGED_TYPES: Final[frozenset[str]] = frozenset({"C"})
"""Chat types whose bodies are tag elements; the others hold plain text."""

ELEMENT_SEPARATOR: Final = "\n"
"""What stands between two elements of a ``C`` body."""

# --- what models write instead (lenient parsing) ---------------------------------------
# One table per question, each the only place that answers it.

TAG_SYNONYMS: Final[dict[str, str]] = DEFAULT_TAGS.synonyms
"""Tag names (lower case) models use, mapped to the canonical tag of the default table. Also
the JSON field names of the design study's pattern A (``{"emotion": ..., "content": ...}``)."""

TYPE_ALIASES: Final[dict[str, str]] = {
    "c": "C", "chat": "C", "character": "C", "assistant": "C", "say": "C", "dialogue": "C", "message": "C",
    "i": "I", "info": "I", "information": "I", "system": "I", "log": "I", "narration": "I", "narrator": "I",
    "e": "E", "event": "E", "events": "E", "game": "E",
}  # fmt: skip
"""Chat type spellings (lower case) mapped to ``C``, ``I`` or ``E``."""

REASONING_TAGS: Final[frozenset[str]] = frozenset(
    {"think", "thinking", "thought", "reasoning", "reflection", "analysis"}
)
"""Tags that wrap a model's reasoning when they stand outside the reply (``Reply.reasoning``)."""
