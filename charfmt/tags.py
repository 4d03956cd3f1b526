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
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Final, Literal, NamedTuple

from charfmt._control_strings import CONTROL_STRINGS
from charfmt._grammar.static import terminal_regex
from charfmt.diagnostics import CharfmtError

Role = Literal["emotion", "action", "cue", "speech", "hidden"]

ContentKind = Literal["key", "text"]


class RoleSpec(NamedTuple):
    """What a tag of one role is and does: one row of :data:`ROLE_TABLE`.

    (A named tuple: a dataclass costs ten times as much to define, at every start.)
    """

    name: Role
    description: str
    """One line for documentation."""
    content: ContentKind
    """What the tag holds: ``key`` (one whole identifier) or ``text`` (escaped free text);
    a tag with a closed list of values holds a key whatever its role."""
    streamed: bool
    """Its text arrives as text deltas; otherwise the value is announced once complete."""
    shown: bool
    """Meant for the player."""
    vocabulary: bool
    """Its key is one of the character's emotion vocabulary."""
    closed_values: bool
    """It may declare a closed list of values."""
    least: int
    """How many tags of a table have the role, at least..."""
    most: int | None
    """...and at most (``None``: any number)."""
    event: str | None
    """The ``kind`` of the event that announces a whole value (``emotion``: ``charfmt.events.Emotion``);
    ``None``: the text streams as ``TextDelta`` events (then ``streamed`` is true)."""
    spoken: bool
    """Its text is what the character says: what text-to-speech reads, what a bound on speech
    counts (``Bounds.max_speech``, ``require_speech``), the rest of a token budget goes to."""
    value_noun: str | None
    """What a diagnostic calls a value of the role's tags (``spaces around an emotion removed``);
    ``None``: it names the tag (``a <sfx> value``)."""
    short: int | None
    """How long (characters) a tag of the role's text is at most where a token budget is planned and nothing
    longer is known (``Bounds.for_tokens``, ``constrain.SHORT_ROLES``): short, like an emotion key or an action;
    ``None``: as long as speech (what is spoken takes the rest of the budget)."""

    @property
    def single(self) -> bool:
        """A table has exactly one tag of the role: a list of tags declaring one is a table of its own."""
        return self.least == 1 and self.most == 1

    @property
    def prose(self) -> bool:
        """Its tags hold free prose (speech, the inner voice, an action), not a key or a value a game acts on: an
        emotion a model writes inside one splits it in two, its text going on after the emotion (lenient reading)."""
        return self.content == "text" and not self.closed_values


ROLE_TABLE: Final[dict[Role, RoleSpec]] = {
    row.name: row
    for row in (
        RoleSpec(
            "emotion", "the character's emotion: one key from its emotion vocabulary, announced once complete",
            content="key", streamed=False, shown=True, vocabulary=True, closed_values=False, least=1, most=1,
            event="emotion", spoken=False, value_noun="emotion", short=16,
        ),
        RoleSpec(
            "action", "what the character does: whole text, announced once complete",
            content="text", streamed=False, shown=True, vocabulary=False, closed_values=False, least=0, most=1,
            event="action", spoken=False, value_noun=None, short=24,
        ),
        RoleSpec(
            "cue", "a value the game acts on (sound, motion, music, camera), announced once complete",
            content="text", streamed=False, shown=True, vocabulary=False, closed_values=True, least=0, most=None,
            event="cue", spoken=False, value_noun=None, short=16,
        ),
        RoleSpec(
            "speech", "what the character says: streamed as it arrives, read by text-to-speech",
            content="text", streamed=True, shown=True, vocabulary=False, closed_values=False, least=1, most=None,
            event=None, spoken=True, value_noun=None, short=None,
        ),
        RoleSpec(
            "hidden", "inner voice: streamed, never shown to the player",
            content="text", streamed=True, shown=False, vocabulary=False, closed_values=False, least=0, most=None,
            event=None, spoken=False, value_noun=None, short=24,
        ),
    )
}  # fmt: skip
"""Every role, one row each, in the order documentation lists them: what a tag of the role does.

Code reads a tag's row (``TagSpec.row``), never its role's name. A new role needs only:

1. a row here (and its name in ``Role``): every column, ``short`` (its text's length in a planned budget) too;
2. if its value is announced whole (``event``), the event class in ``charfmt/events.py`` (a
   ``WholeValue`` subclass, in the ``Event`` union) and its entry in ``events.WHOLE_EVENTS``;
3. its lines in the system prompt (``prompts/system.j2``) and the spec (``docs/FORMAT.md``, tag roles).

``tests/language/test_tags_roles.py`` checks every column of every row against what the code does."""

ROLES: Final[dict[Role, str]] = {name: row.description for name, row in ROLE_TABLE.items()}
"""Every role and what it means; the order documentation lists them in."""

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*")

TagField = Literal["name", "role", "description", "values", "synonyms", "prefixes"]


class TagError(CharfmtError):
    """A tag, or a table of tags, that cannot be: ``tag`` and ``field`` say which entry and which of its keys."""

    def __init__(self, message: str, tag: str | None = None, field: TagField = "name") -> None:
        super().__init__(message)
        self.tag = tag
        """The tag the error is about (the later of two that clash), if it has a name."""
        self.field: TagField = field
        """Which of its keys is wrong: ``name``, ``role``, ``values``, ``synonyms``, ``prefixes``."""


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
        name = self.name
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise TagError(
                f"tag name {name!r} must be lower-case letters, digits and '_', starting with a letter", None
            )
        if self.role not in ROLES:
            raise TagError(f"tag {name!r}: role {self.role!r} is not one of {', '.join(ROLES)}", name, "role")
        if self.values is not None:
            if not ROLE_TABLE[self.role].closed_values:
                which = " or ".join(role for role, row in ROLE_TABLE.items() if row.closed_values)
                raise TagError(f"tag {name!r}: only a {which} tag has a closed list of values", name, "values")
            if not self.values:
                raise TagError(f"tag {name!r}: an empty list of values allows nothing", name, "values")
            if len(set(self.values)) != len(self.values):
                raise TagError(f"tag {name!r}: a value is listed twice", name, "values")
            key = terminal_regex("KEY")
            for value in self.values:
                if not isinstance(value, str) or not key.fullmatch(value):
                    raise TagError(
                        f"tag {name!r}: value {value!r} is not a key (non-empty, no surrounding "
                        "whitespace, markup or control characters)",
                        name,
                        "values",
                    )
        lists: tuple[tuple[TagField, tuple[str, ...]], ...] = (("synonyms", self.synonyms), ("prefixes", self.prefixes))
        for kind, words in lists:
            for word in words:
                if not isinstance(word, str) or not word or word != word.lower():
                    raise TagError(f"tag {name!r}: {kind} are non-empty lower-case words", name, kind)
            if len(set(words)) != len(words):
                raise TagError(f"tag {name!r}: a word is listed twice in {kind}", name, kind)

    @property
    def row(self) -> RoleSpec:
        """What a tag of its role does: its row of :data:`ROLE_TABLE`."""
        return ROLE_TABLE[self.role]

    @property
    def content(self) -> ContentKind:
        """``key``: one identifier (an emotion, or a value of a closed list); ``text``: escaped free text."""
        return "key" if self.values is not None else ROLE_TABLE[self.role].content

    @property
    def shown(self) -> bool:
        """Whether the content is meant for the player (a ``hidden`` tag's is not)."""
        return ROLE_TABLE[self.role].shown

    @property
    def streamed(self) -> bool:
        """Whether the content arrives as text deltas (speech, hidden) or as one whole value (emotion, action, cue)."""
        return ROLE_TABLE[self.role].streamed

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


def _control_string(name: str) -> str | None:
    """``<name>`` or ``</name>`` where it is one of ``CONTROL_STRINGS`` (``<s>``, ``<eos>``), else ``None``."""
    for written in (f"<{name}>", f"</{name}>"):
        if written in CONTROL_STRINGS:
            return written
    return None


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
            if spec.name in RESERVED_NAMES:
                raise TagError(f"{spec.name!r} cannot be a tag name: it is reserved", spec.name)
            if (written := _control_string(spec.name)) is not None:
                raise TagError(
                    f"{spec.name!r} cannot be a tag name: {written} is a chat template's control string (a prompt "
                    "or a grammar holding it would end the model's turn or sequence)",
                    spec.name,
                )
            by_name.setdefault(spec.name, spec)
        _check_words(specs)
        for row in ROLE_TABLE.values():
            _check_count(row, [s.name for s in specs if s.role == row.name])
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
        """A new table: this one's tags, then ``specs``.

        A word that ``specs`` declare (as a name, a synonym or a prefix) and that is only a
        synonym or a prefix of one of this table's tags goes to the new tag: it is taken out
        of the older tag's synonyms and prefixes (``TagSpec("motion", "cue", ...)`` makes
        ``<motion>`` and ``[motion:...]`` the new tag, no longer ``<act>``). A word that is the
        *name* of one of this table's tags, or that two of ``specs`` both declare, is an error
        (``TagError``).
        """
        named = {word for spec in specs for word in (spec.name, *spec.synonyms)}
        marked = {word for spec in specs for word in spec.prefixes}
        older = []
        for old in self.specs:
            synonyms = tuple(w for w in old.synonyms if w not in named)
            prefixes = tuple(w for w in old.prefixes if w not in named and w not in marked)
            if (synonyms, prefixes) != (old.synonyms, old.prefixes):
                old = replace(old, synonyms=synonyms, prefixes=prefixes)  # noqa: PLW2901 (the spec kept, its words trimmed)
            older.append(old)
        return TagTable((*older, *specs))


def _check_count(row: RoleSpec, names: list[str]) -> None:
    """Refuse a table with fewer or more tags of the role of ``row`` than it allows (``names``: those it has)."""
    if row.least == row.most and len(names) != row.least:
        raise TagError(
            f"a tag table has exactly {_few(row.least)} {row.name} tag", names[-1] if names else None, "role"
        )
    if row.most is not None and len(names) > row.most:
        raise TagError(
            f"a tag table has at most {_few(row.most)} {row.name} tag: {names[0]!r} and {names[1]!r}", names[-1], "role"
        )
    if len(names) < row.least:
        raise TagError(f"a tag table has at least {_few(row.least)} {row.name} tag", None, "role")


def _few(n: int) -> str:
    return "one" if n == 1 else str(n)


def _check_words(specs: tuple[TagSpec, ...]) -> None:
    """Refuse a word that would mean two tags, naming the later tag and what the word already is.

    Names and synonyms are one space of words (``<word>``, a JSON field); prefixes another
    (``[word:value]``), in which a word may not be another tag's prefix or name.
    """
    named: dict[str, tuple[TagSpec, str]] = {}  # word -> (tag, "name" | "synonym")
    marked: dict[str, TagSpec] = {}  # prefix -> tag

    def what(word: str, owner: TagSpec, kind: str) -> str:
        if kind == "name":
            return "a built-in tag" if _builtin(owner) else f"already the tag {word!r}"
        return f"already a {kind} of {owner.name!r}"

    for spec in specs:
        words: tuple[tuple[TagField, str, tuple[str, ...]], ...] = (
            ("name", "name", (spec.name,)),
            ("synonyms", "synonym", spec.synonyms),
        )
        for key, kind, group in words:
            for word in group:
                seen = named.get(word)
                if seen is not None and seen[0] is not spec:
                    owner, how = seen
                    if key == "name" and how == "name" and not _builtin(owner):
                        raise TagError(f"tag {word!r} is declared twice", spec.name)
                    subject = f"{word!r}" if key == "name" else f"tag {spec.name!r}: synonym {word!r}"
                    raise TagError(f"{subject} is {what(word, owner, how)}", spec.name, key)
                if word in marked and marked[word] is not spec and key == "name":
                    raise TagError(f"{word!r} is already a prefix of {marked[word].name!r}", spec.name, key)
                named.setdefault(word, (spec, kind))
        for word in spec.prefixes:
            seen = named.get(word)
            if seen is not None and seen[1] == "name" and seen[0] is not spec:
                raise TagError(f"tag {spec.name!r}: prefix {word!r} is {what(word, *seen)}", spec.name, "prefixes")
            if word in marked and marked[word] is not spec:
                raise TagError(
                    f"tag {spec.name!r}: prefix {word!r} is already a prefix of {marked[word].name!r}",
                    spec.name,
                    "prefixes",
                )
            marked[word] = spec


def _builtin(spec: TagSpec) -> bool:
    """Whether ``spec`` is one of the default table's tags (or one of them less a word a new tag took)."""
    default: TagTable | None = globals().get("DEFAULT_TAGS")
    if default is None:
        return True  # building the default table itself
    known = default.get(spec.name)
    return known is not None and known.role == spec.role


DEFAULT_TAGS: Final = TagTable(
    (
        TagSpec(
            "emo", "emotion", "the character's emotion, a key from its vocabulary",
            synonyms=(
                "emotion", "emotions", "expression", "mood", "face", "feeling", "feel",
                "感情", "表情", "気持ち", "情绪", "情緒", "心情", "감정", "표정",
            ),
            prefixes=("emo", "emotion", "emotions", "expression", "mood", "face", "feeling", "feel"),
        ),
        TagSpec(
            "act", "action", "what the character does",
            synonyms=(
                "action", "actions", "motion", "gesture", "move",
                "行動", "動作", "仕草", "しぐさ", "アクション", "动作", "行动", "행동", "동작",
            ),
            prefixes=("act", "action", "actions", "motion", "gesture", "move"),
        ),
        TagSpec(
            "msg", "speech", "what the character says",
            synonyms=(
                "message", "speak", "speech", "say", "said", "dialogue", "dialog", "line", "content", "text",
                "saying", "reply", "response", "talk",
                "セリフ", "せりふ", "台詞", "発言", "会話", "台词", "对白", "對白", "说话", "대사",
            ),
        ),
        TagSpec(
            "thought", "hidden", "the character's inner voice, not shown to the player",
            synonyms=(
                "thoughts", "thinking", "think", "inner", "inner_voice", "monologue", "mind",
                "心の声", "心情描写", "思考", "内心", "想法", "心声", "생각", "속마음",
            ),
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
