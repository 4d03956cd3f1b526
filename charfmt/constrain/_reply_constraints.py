"""The keywords that constrain a reply, defined once: which tags and emotion keys it holds, and how long it may be.

Also the defaults the bound engine (``charfmt.constrain.export.plan_bounds``) takes where a keyword is not given.

``charfmt.grammar``, ``charfmt.json_schema``, ``charfmt.constrain.export.resolve_bounds`` and the
engine recipes (``request_fields``, ``structural_tag``) each take them as
``**constraints: Unpack[ReplyConstraints]`` and hand them on; ``values`` refuses any other
keyword as Python refuses an unknown one. ``@constrains`` gives each of them the signature
``help()`` and ``inspect.signature`` show: the keywords themselves, read from ``ReplyConstraints``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeVar

from charfmt._arguments import check_count, check_flag, check_tags, check_vocabulary
from charfmt.constrain._regex_ir import ExportError
from charfmt.models import Reply, Vocabulary
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Character
    from charfmt.prompt.scene import Scene

DEFAULT_TOKENS_PER_CHAR: Final = 1.0
"""Tokens per character of text where neither the model's tokenizer nor the character's speech is known.

Every token holds at least one byte, so this is exact for ASCII text: an English reply the bounds
allow always fits the budget. Text in another script may take more tokens (a tokenizer without
kana takes up to three per kana, any takes up to four per emoji), and then the longest reply the
bounds allow may pass the budget: give ``tokens_per_char`` (``measure_tokens_per_char``) or the
``character`` (its speech's UTF-8 bytes per character are then counted, which no tokenizer exceeds
on text in the same script)."""

DEFAULT_MAX_ELEMENTS: Final = 3
"""The fewest elements per body the engine tries first: an emotion, an action and a message."""

ELEMENTS_WITHOUT_EXAMPLES: Final = 4
"""Elements per ``C`` body where no examples show a shape: an emotion, an action, a thought, speech."""

SPEECH_SHARE: Final = 0.7
"""The least speech of a chat, as a share of the most (``Bounds.min_speech``): a sentence, not a word
(small models otherwise close a message after a few words: Gemma 3 270M said 53 characters, six
turns running, where 94 were allowed)."""

MOST_REQUIRED_SPEECH: Final = 64
"""The most characters of speech a chat must say: ``SPEECH_SHARE`` of a long bound would make a model
ramble (nearly 600 characters at 2048 tokens); 64 is a sentence or two."""

MIN_SPEECH_CHARS: Final = 80
"""The speech length the engine aims for: below it, it allows fewer chats, then fewer elements."""

EXAMPLE_MARGIN: Final = 1.25
"""A role's length is its longest example content times this (at least ``SHORT_ROLES``' length):
a model that writes an action a little longer than the examples' is not cut mid-word."""


Speakers = Sequence[str] | Mapping[str, Vocabulary | None]
"""A scene's cast as a grammar sees it: the speaker ids, or each id with its own vocabulary
(its ``C`` chats' emotion is then one of that speaker's keys)."""


class ReplyConstraints(TypedDict, total=False):
    """What a constrained reply may hold (every keyword optional, ``None`` by default)."""

    vocabulary: Vocabulary | None
    """The emotion tag holds only these keys."""
    tags: TagTable | None
    """The tag table (``None``: ``DEFAULT_TAGS``); a cue with values holds one of them."""
    max_tokens: int | None
    """A token budget the longest allowed reply fits in (``Bounds.for_tokens``)."""
    max_chars: int | None
    """Characters per element content (and per ``I``/``E`` body)."""
    max_chats: int | None
    """Chats per reply."""
    max_elements: int | None
    """Elements per ``C`` body (with ``max_tokens``: the shape, in place of the examples')."""
    character: Character | Scene | None
    """Whose reply it is: a character's (or a scene's) vocabulary and tags where those are not given,
    a scene's cast as the speakers (each with its own emotions), and for ``max_tokens`` its examples:
    the reply's shape, each role's length and the script its speech is written in (``plan_bounds``)."""
    tokens_per_char: float | None
    """For ``max_tokens``: the model's tokens per character (``measure_tokens_per_char`` on its tokenizer);
    ``None``: ``plan_bounds``' default, which says what it assumes."""
    require_speech: bool | None
    """For ``max_tokens``: every ``C`` chat says something, and the reply opens with one (``None``: yes)."""


@dataclass(frozen=True, slots=True)
class Constraints:
    """The keywords as the grammar, schema and bounds use them: the character's parts filled in."""

    vocabulary: Vocabulary | None
    tags: TagTable
    """The tag table given, else the character's, else ``DEFAULT_TAGS``."""
    max_tokens: int | None
    max_chars: int | None
    max_chats: int | None
    max_elements: int | None
    tokens_per_char: float | None
    require_speech: bool
    speakers: Speakers | None
    """A scene's cast, each with its vocabulary (``None``: not a scene)."""
    examples: tuple[Reply, ...]
    """The character's (or scene's) example replies."""
    actions: tuple[str, ...]
    """The actions the character lists (a scene: its cast's)."""


def constraints_of(function: str, constraints: Mapping[str, Any], speakers: Speakers | None = None) -> Constraints:
    """The keywords ``function`` was called with, the ``character``'s parts filled in (``speakers`` given win)."""
    vocabulary, tags, max_tokens, max_chars, max_chats = values(function, constraints)
    who = constraints.get("character")
    examples: tuple[Reply, ...] = ()
    actions: tuple[str, ...] = ()
    if who is not None:
        cast: Mapping[str, Any] | None = getattr(who, "cast", None)  # a Scene (duck-typed: no import circle)
        if vocabulary is None and cast is None:
            vocabulary = who.vocabulary
        tags = who.tags if tags is None else tags
        examples = tuple(ex.reply for ex in who.examples)
        members = list(cast.values()) if cast is not None else [who]
        actions = tuple(dict.fromkeys(a for c in members for a in c.actions))
        if cast is not None and speakers is None:
            speakers = {name: c.vocabulary for name, c in cast.items()} if vocabulary is None else list(cast)
    tokens_per_char = constraints.get("tokens_per_char")
    if tokens_per_char is not None and not tokens_per_char >= 1:
        raise ExportError(f"{function}(): tokens_per_char is at least 1 (a character, a token), not {tokens_per_char}")
    require = constraints.get("require_speech")
    elements = constraints.get("max_elements")
    table = DEFAULT_TAGS if tags is None else tags
    return Constraints(
        vocabulary, table, max_tokens, max_chars, max_chats, elements, tokens_per_char,
        True if require is None else bool(require), speakers, examples, actions,
    )  # fmt: skip


Values = tuple[Vocabulary | None, TagTable | None, int | None, int | None, int | None]


def values(function: str, constraints: Mapping[str, Any]) -> Values:
    """``(vocabulary, tags, max_tokens, max_chars, max_chats)`` from the keywords ``function`` was called with."""
    for name in constraints:
        if name not in ReplyConstraints.__optional_keys__:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
    get = constraints.get
    check_vocabulary(get("vocabulary"))
    check_tags(get("tags"))
    for name in ("max_tokens", "max_chars", "max_chats", "max_elements"):  # (a TypeError naming a wrong type)
        check_count(get(name), name, optional=True)
    who = get("character")
    if who is not None and not hasattr(who, "vocabulary"):
        hint = " (Character.load(path) reads one)" if isinstance(who, str) else ""
        raise TypeError(f"character must be a Character or a Scene, not {type(who).__name__}{hint}")
    if get("require_speech") is not None:
        check_flag(get("require_speech"), "require_speech")
    for name in ("tokens_per_char", "require_speech"):  # (they shape a budget: alone they would be dropped)
        if get(name) is not None and get("max_tokens") is None:
            raise TypeError(f"{function}(): {name} only applies with max_tokens (a token budget)")
    return get("vocabulary"), get("tags"), get("max_tokens"), get("max_chars"), get("max_chats")


F = TypeVar("F", bound=Callable[..., Any])


def constrains(function: F) -> F:
    """``function``'s signature with the keywords of ``ReplyConstraints`` in place of ``**constraints``.

    What ``help()`` and ``inspect.signature`` show: ``vocabulary=None, tags=None, max_tokens=None...``,
    keyword-only, each annotated as ``ReplyConstraints`` declares it (one definition for every function).
    """
    signature = inspect.signature(function)
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    # (a TypedDict holds its annotations as ForwardRefs; the signature shows the text they are)
    hints = {name: getattr(hint, "__forward_arg__", hint) for name, hint in ReplyConstraints.__annotations__.items()}
    keywords = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
        for name, hint in hints.items()
    ]
    setattr(function, "__signature__", signature.replace(parameters=[*kept, *keywords]))  # noqa: B010 (mypy)
    return function
