"""Length bounds on a reply (``Bounds``) and the one engine that plans them for a token budget (``plan_bounds``).

A grammar alone guarantees syntax, not that a reply ends. ``Bounds`` are written into the
reply grammar (``_reply_rules.bounded_body``); ``max_length`` walks the bounded grammar for
its longest text, ``Bounds.for_tokens`` picks the bounds of one shape whose longest reply fits a
token budget, and ``plan_bounds`` (what every door calls: ``grammar``, ``json_schema``,
``charfmt chat``, ``charfmt serve``, scenes) chooses the shape, each role's length and the
tokens per character from the character, its examples and the model (docs/CONSTRAIN.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Unpack

from charfmt.constrain._regex_ir import Alt, Cls, ExportError, Lit, Node, Ref, Rep, Seq
from charfmt.constrain._reply_constraints import (
    DEFAULT_MAX_ELEMENTS,
    DEFAULT_TOKENS_PER_CHAR,
    ELEMENTS_WITHOUT_EXAMPLES,
    EXAMPLE_MARGIN,
    MIN_SPEECH_CHARS,
    MOST_REQUIRED_SPEECH,
    SPEECH_SHARE,
    ReplyConstraints,
    Speakers,
    constrains,
    constraints_of,
)
from charfmt.constrain._reply_rules import Grammar, reply_grammar
from charfmt.models import Reply, Vocabulary
from charfmt.tags import DEFAULT_TAGS, ROLE_TABLE, ROLES, TAGGED_TYPES, Role, TagTable


@dataclass(frozen=True, slots=True)
class Bounds:
    """Length bounds written into an exported grammar or schema (``None``: unbounded).

    A grammar alone guarantees syntax, not that a reply ends: a model may repeat inside
    ``<msg>`` until the token budget runs out and the reply is cut mid-string. With bounds
    every path through the grammar is finite, so the longest reply it allows has a known
    length; ``Bounds.for_tokens`` picks them so that length fits a token budget.
    """

    max_chars: int | None = None
    """Characters of each element's content (and of an ``I``/``E`` body) between two character
    references; a reference (``&amp;``) counts as one character."""
    max_chats: int | None = None
    """Chats in the reply (JSON Schema ``maxItems``)."""
    max_elements: int | None = None
    """Elements in a ``C`` body."""
    max_entities: int = 0
    """Character references per element content when ``max_chars`` is set (0: none; ``< & >``
    are then unavailable, which keeps the longest content ``max_chars`` characters)."""
    max_ws: int | None = None
    """Whitespace characters between two JSON tokens."""
    role_chars: tuple[tuple[Role, int], ...] = ()
    """Characters of the content of a tag of each role listed, in place of ``max_chars``
    (``(("action", 24), ("hidden", 24))``): a short action, the rest to speech."""
    max_speech: int | None = None
    """Speech elements (a tag of the ``speech`` role) in a ``C`` body (needs ``max_elements``)."""
    require_speech: bool = False
    """Every ``C`` body holds a speech element with text (a chat is never an emotion alone), and
    the reply opens with a ``C`` chat (it is never only log lines, nor empty)."""
    min_speech: int = 1
    """With ``require_speech``: the fewest characters of that speech element (at most ``max_chars``),
    so a reply says at least a sentence rather than a word (needs ``max_entities`` 0)."""

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_chats", "max_elements", "max_ws", "max_speech"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ExportError(f"{name} must be at least 1, not {value}")
        if self.max_entities < 0:
            raise ExportError(f"max_entities must be at least 0, not {self.max_entities}")
        for role, n in self.role_chars:
            if role not in ROLES or n < 1:
                raise ExportError(f"role_chars: {role!r} must be a role and {n} at least 1")
        if self.max_speech is not None and self.max_elements is None:
            raise ExportError("max_speech needs max_elements")
        if not 1 <= self.min_speech <= (self.max_chars or self.min_speech) or (
            self.min_speech > 1 and self.max_entities
        ):
            raise ExportError(f"min_speech {self.min_speech} must be 1 to max_chars, with max_entities 0")

    def chars(self, role: Role) -> int | None:
        """The most characters of the content of a tag of ``role``."""
        return dict(self.role_chars).get(role, self.max_chars)

    @property
    def closed(self) -> bool:
        """Whether every length is bounded (the longest reply is finite)."""
        return None not in (self.max_chars, self.max_chats, self.max_elements, self.max_ws)

    @classmethod
    def for_tokens(
        cls,
        max_tokens: int,
        *,
        max_chats: int = 1,
        max_elements: int = 4,
        max_entities: int = 0,
        max_ws: int = 1,
        tokens_per_char: float | None = None,
        vocabulary: Vocabulary | None = None,
        tags: TagTable | None = None,
        short: dict[Role, int] | None = None,
        max_speech: int | None = 1,
        require_speech: bool = False,
        min_speech: float = 0,
        speakers: Speakers | None = None,
        most_required: int | None = None,
    ) -> Bounds:
        """Bounds whose longest reply fits in ``max_tokens`` tokens, with the most room for speech.

        The budget goes where speech is: each role in ``short`` (default: each row's ``short``, ``SHORT_ROLES``: an
        emotion key, an action, a cue, the inner voice) gets at most that many characters, at
        most ``max_speech`` elements of a ``C`` body are speech (``None``: any), and speech gets
        the rest: ``max_chars`` (which also bounds ``I``/``E`` bodies) is the largest that fits.
        Where the budget is too small for the short roles' lengths, they shrink with speech.
        ``require_speech``: every ``C`` body says something, at least ``min_speech`` (a share of
        ``max_chars``, 0 to 1) of the speech length, and at most ``most_required`` characters.

        How it is computed: every token a model emits holds at least one byte, so a reply of
        ``n`` bytes takes at most ``n`` tokens. ``max_reply_tokens`` walks the bounded grammar
        and adds up the longest path: each literal counts its UTF-8 bytes, each character from
        a class counts the most bytes a character of that class takes in UTF-8 (4 for free
        text), or ``tokens_per_char`` where given (``measure_tokens_per_char`` measures it
        on the model's own tokenizer: an estimate, not a guarantee). One token is kept for the
        end-of-sequence token. ``speakers``: a scene's cast, as ``reply_grammar`` takes it (the
        ``speaker`` member and each speaker's emotions are counted).

        This is the low-level step; ``plan_bounds`` is the engine every door of charfmt uses.
        """
        wanted = dict(short_roles() if short is None else short)
        table = DEFAULT_TAGS if tags is None else tags
        # A text's length, and a vocabulary key's where no vocabulary makes the keys literals of known length.
        keyed = vocabulary is not None or (isinstance(speakers, Mapping) and None not in speakers.values())
        roles = {spec.role for spec in table if spec.content == "text" or (spec.row.vocabulary and not keyed)}
        speech = max_speech if max_speech is None else min(max_speech, max_elements)

        def make(n: int) -> Bounds:
            role_chars = tuple((r, min(c, n)) for r, c in wanted.items() if r in roles and not ROLE_TABLE[r].spoken)
            least = max(1, int(n * min_speech)) if require_speech and not max_entities else 1
            least = least if most_required is None else max(1, min(least, most_required))
            return cls(n, max_chats, max_elements, max_entities, max_ws, role_chars, speech, require_speech, least)

        def cost(b: Bounds) -> int:
            per_char = tokens_per_char
            return max_reply_tokens(b, vocabulary=vocabulary, tags=tags, tokens_per_char=per_char, speakers=speakers)

        def fits(n: int) -> bool:
            return cost(make(n)) + 1 <= max_tokens

        if not fits(1):
            need = cost(make(1))
            raise ExportError(
                f"max_tokens={max_tokens} is too small for {max_chats} chat(s) of {max_elements} element(s): "
                f"the shortest bound (1 character per element) needs {need + 1} tokens"
            )
        low, high = 1, max(1, max_tokens)
        while low < high:  # the largest n that fits
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return make(low)


MIN_SCENE_SPEECH_CHARS: Final = 12
"""The least speech per chat for which a scene's plan keeps two chats (two speakers) before one chat
with more to say: a short sentence (``Ready when you are.``)."""


def short_roles() -> dict[Role, int]:
    """Each role's ``short`` length (characters) where its row has one: the roles that are not as long as speech."""
    return {name: row.short for name, row in ROLE_TABLE.items() if row.short is not None}


SHORT_ROLES: Final[dict[Role, int]] = short_roles()
"""``Bounds.for_tokens``' default lengths (characters) of the roles that are not speech: each row's ``short``
(the rows as charfmt defines them; ``Bounds.for_tokens`` reads the table itself)."""


def measure_tokens_per_char(count: Callable[[str], int], texts: Iterable[str]) -> float:
    """The most tokens per character ``count`` (a model's tokenizer) takes on ``texts``, at least 1.

    Derived from the model's own vocabulary for the language a character speaks (a model whose
    vocabulary holds Japanese takes about one token per kana or kanji, one without it up to
    three, one per byte); pass it to ``Bounds.for_tokens``. An estimate from those texts: a
    reply in another script may take more. At least 1, which is exact for ASCII text.
    """
    ratios = [count(t) / len(t) for t in texts if t]
    return max([1.0, *ratios])


def _utf8_max(cls: Cls) -> int:
    top = 0x10FFFF if cls.negated else max(hi for _lo, hi in cls.ranges)
    return 1 if top < 0x80 else 2 if top < 0x800 else 3 if top < 0x10000 else 4


def _is_json_char(n: Alt) -> bool:
    """Whether ``n`` is one character of text written in a JSON string (``json_encoded``): a class or escapes."""
    return isinstance(n.items[0], Cls) and all(isinstance(i, Lit) and i.text[:1] == "\\" for i in n.items[1:])


def max_length(
    node: Node,
    g: Grammar,
    char_cost: Callable[[Cls], float],
    char_cost_of_escape: Callable[[Lit], float] | None = None,
) -> int:
    """The longest text ``node`` allows: literals by UTF-8 bytes, class characters by ``char_cost``
    (the total rounded up); with ``char_cost_of_escape``, a JSON escape of a text character by it.

    Raises ``ExportError`` if some repetition is unbounded (the longest text is infinite).
    """
    memo: dict[str, float] = {}

    def walk(n: Node, seen: tuple[str, ...]) -> float:
        if isinstance(n, Lit):
            return len(n.text.encode())
        if isinstance(n, Cls):
            return char_cost(n)
        if isinstance(n, Seq):
            return sum(walk(i, seen) for i in n.items)
        if isinstance(n, Alt):
            if char_cost_of_escape is not None and _is_json_char(n):
                # one character of text in a JSON string: the character, or its JSON escape
                return max(char_cost(n.items[0]), *(char_cost_of_escape(i) for i in n.items[1:]))  # type: ignore[arg-type]
            return max(walk(i, seen) for i in n.items)
        if isinstance(n, Rep):
            if n.high is None:
                raise ExportError("the grammar has an unbounded repetition: set every bound")
            return n.high * walk(n.item, seen) if n.high else 0
        if n.name not in memo:
            if n.name in seen:
                raise ExportError(f"rule {n.name} is recursive: its longest text is unbounded")
            target = g.rules.get(n.name) or g.terminals[n.name]
            memo[n.name] = walk(target, (*seen, n.name))
        return memo[n.name]

    return math.ceil(walk(node, ()) - 1e-9)


def max_reply_tokens(
    bounds: Bounds,
    *,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
    tokens_per_char: float | None = None,
    speakers: Speakers | None = None,
) -> int:
    """The most tokens a reply the bounded grammar allows can take (end token not counted).

    An upper bound for any tokenizer whose tokens each hold at least one byte (every
    byte-level BPE, and SentencePiece with byte fallback): the reply's longest length in
    bytes. ``tokens_per_char`` replaces the per-character byte count of text classes
    (an assumption about the tokenizer, not a guarantee).
    """
    if not bounds.closed:
        raise ExportError("max_reply_tokens needs max_chars, max_chats, max_elements and max_ws all set")
    g = reply_grammar(vocabulary, tags, bounds=bounds, speakers=speakers)

    def cost(c: Cls) -> float:
        most = _utf8_max(c)
        return most if tokens_per_char is None or most == 1 else tokens_per_char

    if tokens_per_char is None:
        return max_length(Ref(g.start), g, cost)
    # A JSON escape ("\\n") is one character of text too: counted as one, at most its two bytes.
    return max_length(Ref(g.start), g, cost, lambda escape: min(len(escape.text), tokens_per_char))


# --- the engine: the bounds every door uses ------------------------------------------------------


def bytes_per_char(texts: Iterable[str]) -> float:
    """The most UTF-8 bytes per character of ``texts`` (at least 1): the tokens per character no
    tokenizer whose tokens hold a byte or more exceeds on text written like them."""
    return measure_tokens_per_char(lambda text: len(text.encode()), texts)


def speech_of(examples: Iterable[Reply], tags: TagTable | None = None) -> list[str]:
    """The speech of ``examples`` (the text of their speech elements): the script a character speaks."""
    table = DEFAULT_TAGS if tags is None else tags
    spoken = {spec.name for spec in table if spec.row.spoken}
    return [seg.text for reply in examples for chat in reply.chats for seg in chat.segments if seg.tag in spoken]


def learned_lengths(
    examples: Iterable[Reply], tags: TagTable | None = None, actions: Iterable[str] = ()
) -> dict[Role, int]:
    """Each role's length that is not speech: ``SHORT_ROLES``' or, where longer, the longest content of
    that role in ``examples`` (``actions``: the character's own, counted as actions) times ``EXAMPLE_MARGIN``."""
    table = DEFAULT_TAGS if tags is None else tags
    longest: dict[Role, int] = {}
    for reply in examples:
        for chat in reply.chats:
            for seg in chat.segments:
                spec = table.get(seg.tag)
                if spec is not None and not spec.row.spoken:
                    longest[spec.role] = max(longest.get(spec.role, 0), len(seg.text))
    for action in actions:
        longest["action"] = max(longest.get("action", 0), len(action))
    lengths = short_roles()
    for role, n in longest.items():
        lengths[role] = max(lengths.get(role, 0), math.ceil(n * EXAMPLE_MARGIN))
    return lengths


def example_shape(examples: Iterable[Reply]) -> tuple[int, int] | None:
    """(chats, elements): the most chats of one example reply and the most elements of one example ``C``
    body (at least ``DEFAULT_MAX_ELEMENTS``), the shape the prompt shows the model; ``None`` without examples."""
    replies = list(examples)
    if not replies:
        return None
    chats = max(len(r.chats) for r in replies)
    elements = max((len(c.segments) for r in replies for c in r.chats if c.type in TAGGED_TYPES), default=0)
    return max(1, chats), max(DEFAULT_MAX_ELEMENTS, elements)


def plan_bounds(
    max_tokens: int,
    *,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
    speakers: Speakers | None = None,
    examples: Sequence[Reply] = (),
    actions: Sequence[str] = (),
    tokens_per_char: float | None = None,
    max_chats: int | None = None,
    max_elements: int | None = None,
    max_chars: int | None = None,
    require_speech: bool = True,
) -> Bounds:
    """The bounds of a reply within ``max_tokens``: the one engine ``grammar``, ``json_schema``,
    ``charfmt chat``, ``charfmt serve`` and scenes all use.

    - The shape the examples show (their most chats, their longest ``C`` body, at least
      ``DEFAULT_MAX_ELEMENTS`` elements; without examples one chat of ``ELEMENTS_WITHOUT_EXAMPLES``).
    - Each role that is not speech as long as the examples' longest (``learned_lengths``), speech
      the rest of the budget (``Bounds.for_tokens``), at most one speech element per chat.
    - A scene (two speakers or more, no ``max_chats``): two chats or more while each can say
      ``MIN_SCENE_SPEECH_CHARS`` (``_several_speak``): shorter elements before fewer chats.
    - Where that leaves less than ``MIN_SPEECH_CHARS`` of speech: fewer chats first, then fewer
      elements (3, then 2), before shorter elements; the first shape that reaches it, else the one
      with the most speech. ``max_chats``/``max_elements`` fix the shape, ``max_chars`` caps speech.
    - ``require_speech`` (default): every ``C`` chat says at least ``SPEECH_SHARE`` of the speech
      length (at most ``MOST_REQUIRED_SPEECH`` characters), and the reply opens with one.
    - ``tokens_per_char``: the model's (``measure_tokens_per_char`` on its tokenizer); ``None``: the
      UTF-8 bytes per character of the examples' speech (``bytes_per_char``: a bound for text in
      their script on any tokenizer), without examples ``DEFAULT_TOKENS_PER_CHAR``.

    Raises ``ExportError`` where even one chat of two one-character elements does not fit.
    """
    if tokens_per_char is None:
        speech = speech_of(examples, tags)
        tokens_per_char = bytes_per_char(speech) if speech else DEFAULT_TOKENS_PER_CHAR
    shape = example_shape(examples)
    chats, elements = shape if shape is not None else (1, ELEMENTS_WITHOUT_EXAMPLES)
    chat_counts = [max_chats] if max_chats is not None else list(range(chats, 0, -1))
    fewer = [elements, min(elements, DEFAULT_MAX_ELEMENTS), 2]
    element_counts = [max_elements] if max_elements is not None else list(dict.fromkeys(fewer))
    short = learned_lengths(examples, tags, actions)
    best: Bounds | None = None
    error: ExportError | None = None

    def planned(c: int, e: int) -> Bounds | None:
        nonlocal error
        try:
            return Bounds.for_tokens(
                max_tokens, max_chats=c, max_elements=e, vocabulary=vocabulary, tags=tags, short=short,
                tokens_per_char=tokens_per_char, require_speech=require_speech,
                min_speech=SPEECH_SHARE if require_speech else 0, speakers=speakers,
                most_required=MOST_REQUIRED_SPEECH,
            )  # fmt: skip
        except ExportError as exc:
            error = exc  # (the last: the smallest shape, one chat of two elements)
            return None

    if max_chats is None and speakers is not None and len(speakers) >= 2:  # a scene: two members speak
        several = _several_speak(planned, range(max(chats, 2), 1, -1), element_counts)
        if several is not None:
            return _capped(several, max_chars)
    for e in element_counts:
        for c in chat_counts:
            found = planned(c, e)
            if found is None:
                continue
            if best is None or (found.max_chars or 0) > (best.max_chars or 0):
                best = found
            if (found.max_chars or 0) >= MIN_SPEECH_CHARS:
                return _capped(found, max_chars)
    if best is None:
        assert error is not None
        raise error
    return _capped(best, max_chars)


def _several_speak(
    shape: Callable[[int, int], Bounds | None], chat_counts: Iterable[int], element_counts: Sequence[int]
) -> Bounds | None:
    """A scene's shape of two chats or more: the first (most chats, then most elements) whose speech
    reaches ``MIN_SPEECH_CHARS``; else, of two chats, the one with the most speech where it holds
    ``MIN_SCENE_SPEECH_CHARS`` (shorter elements before fewer chats: a scene's point is its several
    speakers); else ``None`` (one chat, planned as a character's)."""
    two: Bounds | None = None
    for c in chat_counts:
        for e in element_counts:
            found = shape(c, e)
            if found is None:
                continue
            if (found.max_chars or 0) >= MIN_SPEECH_CHARS:
                return found
            if c == 2 and (two is None or (found.max_chars or 0) > (two.max_chars or 0)):
                two = found
    return two if two is not None and (two.max_chars or 0) >= MIN_SCENE_SPEECH_CHARS else None


def _capped(bounds: Bounds, max_chars: int | None) -> Bounds:
    """``bounds`` with speech (and every role) at most ``max_chars`` characters."""
    if max_chars is None or max_chars >= (bounds.max_chars or 0):
        return bounds
    roles = tuple((role, min(n, max_chars)) for role, n in bounds.role_chars)
    least = max(1, min(bounds.min_speech, int(max_chars * SPEECH_SHARE), MOST_REQUIRED_SPEECH))
    least = least if bounds.require_speech else 1
    return replace(bounds, max_chars=max_chars, role_chars=roles, min_speech=least)


@constrains
def resolve_bounds(*, speakers: Speakers | None = None, **constraints: Unpack[ReplyConstraints]) -> Bounds | None:
    """The ``Bounds`` the keyword arguments of ``grammar``/``json_schema`` ask for (``None``: none).

    ``max_tokens``: ``plan_bounds`` (the shape, role lengths and script of ``character`` where
    given, ``max_chats`` and ``max_chars`` as limits); otherwise ``max_chars`` and ``max_chats`` as given.
    """
    c = constraints_of("resolve_bounds", constraints, speakers)
    if c.max_tokens is not None:
        return plan_bounds(
            c.max_tokens, vocabulary=c.vocabulary, tags=c.tags, speakers=c.speakers, examples=c.examples,
            actions=c.actions, tokens_per_char=c.tokens_per_char, max_chats=c.max_chats, max_chars=c.max_chars,
            max_elements=c.max_elements, require_speech=c.require_speech,
        )  # fmt: skip
    if c.max_chars is None and c.max_chats is None and c.max_elements is None:
        return None
    return Bounds(max_chars=c.max_chars, max_chats=c.max_chats, max_elements=c.max_elements)
