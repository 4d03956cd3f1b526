"""Length bounds on a reply (``Bounds``): picking them for a token budget, and the longest reply they allow.

A grammar alone guarantees syntax, not that a reply ends. ``Bounds`` are written into the
reply grammar (``_reply_rules.bounded_body``); ``max_length`` walks the bounded grammar for
its longest text, and ``Bounds.for_tokens`` picks the bounds whose longest reply fits a
token budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Unpack

from charfmt._regex_ir import Alt, Cls, ExportError, Lit, Node, Ref, Rep, Seq
from charfmt._reply_constraints import ReplyConstraints, constrains, values
from charfmt._reply_rules import Grammar, reply_grammar
from charfmt.models import Vocabulary
from charfmt.tags import DEFAULT_TAGS, ROLE_TABLE, ROLES, Role, TagTable


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
    ) -> Bounds:
        """Bounds whose longest reply fits in ``max_tokens`` tokens, with the most room for speech.

        The budget goes where speech is: each role in ``short`` (default ``SHORT_ROLES``: an
        emotion key, an action, a cue, the inner voice) gets at most that many characters, at
        most ``max_speech`` elements of a ``C`` body are speech (``None``: any), and speech gets
        the rest: ``max_chars`` (which also bounds ``I``/``E`` bodies) is the largest that fits.
        Where the budget is too small for the short roles' lengths, they shrink with speech.
        ``require_speech``: every ``C`` body says something, at least ``min_speech`` (a share of
        ``max_chars``, 0 to 1) of the speech length.

        How it is computed: every token a model emits holds at least one byte, so a reply of
        ``n`` bytes takes at most ``n`` tokens. ``max_reply_tokens`` walks the bounded grammar
        and adds up the longest path: each literal counts its UTF-8 bytes, each character from
        a class counts the most bytes a character of that class takes in UTF-8 (4 for free
        text), or ``tokens_per_char`` where given (``measure_tokens_per_char`` measures it
        on the model's own tokenizer: an estimate, not a guarantee). One token is kept for the
        end-of-sequence token.
        """
        wanted = dict(SHORT_ROLES if short is None else short)
        table = DEFAULT_TAGS if tags is None else tags
        # A text's length, and a vocabulary key's where no vocabulary makes the keys literals of known length.
        roles = {spec.role for spec in table if spec.content == "text" or (spec.row.vocabulary and vocabulary is None)}
        speech = max_speech if max_speech is None else min(max_speech, max_elements)

        def make(n: int) -> Bounds:
            role_chars = tuple((r, min(c, n)) for r, c in wanted.items() if r in roles and not ROLE_TABLE[r].spoken)
            least = max(1, int(n * min_speech)) if require_speech and not max_entities else 1
            return cls(n, max_chats, max_elements, max_entities, max_ws, role_chars, speech, require_speech, least)

        def fits(n: int) -> bool:
            b = make(n)
            return (
                max_reply_tokens(b, vocabulary=vocabulary, tags=tags, tokens_per_char=tokens_per_char) + 1 <= max_tokens
            )

        if not fits(1):
            need = max_reply_tokens(make(1), vocabulary=vocabulary, tags=tags, tokens_per_char=tokens_per_char)
            raise ExportError(
                f"max_tokens={max_tokens} is too small for {max_chats} chat(s) of {max_elements} element(s): "
                f"the shortest bound (1 character per element) needs {need + 1} tokens"
            )
        low, high = 1, max(1, max_tokens)
        while low < high:  # the largest n that fits
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return make(low)


SHORT_ROLES: Final[dict[Role, int]] = {"emotion": 16, "action": 24, "cue": 16, "hidden": 24}
"""``Bounds.for_tokens``' default lengths (characters) of the roles that are not speech."""


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
) -> int:
    """The most tokens a reply the bounded grammar allows can take (end token not counted).

    An upper bound for any tokenizer whose tokens each hold at least one byte (every
    byte-level BPE, and SentencePiece with byte fallback): the reply's longest length in
    bytes. ``tokens_per_char`` replaces the per-character byte count of text classes
    (an assumption about the tokenizer, not a guarantee).
    """
    if not bounds.closed:
        raise ExportError("max_reply_tokens needs max_chars, max_chats, max_elements and max_ws all set")
    g = reply_grammar(vocabulary, tags, bounds=bounds)

    def cost(c: Cls) -> float:
        most = _utf8_max(c)
        return most if tokens_per_char is None or most == 1 else tokens_per_char

    if tokens_per_char is None:
        return max_length(Ref(g.start), g, cost)
    # A JSON escape ("\\n") is one character of text too: counted as one, at most its two bytes.
    return max_length(Ref(g.start), g, cost, lambda escape: min(len(escape.text), tokens_per_char))


@constrains
def resolve_bounds(**constraints: Unpack[ReplyConstraints]) -> Bounds | None:
    """The ``Bounds`` the keyword arguments of ``grammar``/``json_schema`` ask for (``None``: none).

    ``max_tokens``: ``Bounds.for_tokens`` (``max_chats`` defaults to 1 there), lowered to
    ``max_chars`` where that is smaller; otherwise ``max_chars`` and ``max_chats`` as given.
    """
    vocabulary, tags, max_tokens, max_chars, max_chats = values("resolve_bounds", constraints)
    if max_tokens is not None:
        found = Bounds.for_tokens(max_tokens, max_chats=max_chats or 1, vocabulary=vocabulary, tags=tags)
        if max_chars is not None and max_chars < (found.max_chars or 0):
            found = Bounds(max_chars, found.max_chats, found.max_elements, found.max_entities, found.max_ws)
        return found
    if max_chars is None and max_chats is None:
        return None
    return Bounds(max_chars=max_chars, max_chats=max_chats)
