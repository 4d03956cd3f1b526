"""The dialect table as the readers walk it: its entries, the samples they detect, what their readers are given.

The table itself is ``charfmt.dialects.DIALECTS``: each entry names a dialect, the chains of
the readers it runs in, the rule that detects it and the reader that reads it. The readers
never import the table (it imports them): they are handed it, in the ``Reading`` they are
given, as markdown-it-py's rules are handed their parser in its state.

What an entry's reader takes is its chain's:

``text``, ``body``, ``stray``
    ``SpanRead``: a ``Span`` (a text, and the result it reads into); returns how many
    characters it read (the chain goes on after it with the rest).
``prose``
    ``MarkRead``: a match of the entry's ``pattern`` in the ``Span`` being read; returns the
    mark's ``(tag, text, intensity)``, or ``None`` to keep it as text.
``tag``
    ``TagRead``: one tag as written, its meaning, and the result; whether it is written in
    this dialect (``False``: the chain goes on to the next entry).
``json``
    ``ShapeRead``: the whole reply as JSON; the chat objects it holds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args, overload

from charfmt._dialect_names import DialectName
from charfmt._lenient.pieces import Result
from charfmt.models import Vocabulary
from charfmt.tags import TagTable

if TYPE_CHECKING:
    from charfmt._lenient.json import JNode
    from charfmt._lenient.state import Recovery
    from charfmt._lenient.tag_soup import Tag

Chain = Literal["text", "json", "body", "tag", "prose", "stray"]


@dataclass(frozen=True, slots=True)
class Sample:
    """What a reader shows the table: some text, or (JSON) the keys of an object."""

    text: str = ""
    """``text``: the reply; ``body``: a body; ``tag``: one tag as written."""
    keys: frozenset[str] = frozenset()
    """``json``: the object's keys, lower case (empty for an array)."""
    array: bool = False
    """``json``: the value is an array."""
    top: bool = False
    """``json``: the value is the whole reply, not one chat of it."""


Detect = Callable[[Sample, TagTable], bool]


class Reading:
    """How a reply is read: by the roles of a tag table, with a vocabulary, walking a dialect table."""

    __slots__ = ("table", "tags", "tags_read", "vocabulary")

    def __init__(self, tags: TagTable, vocabulary: Vocabulary | None, table: Dialects) -> None:
        self.tags = tags
        self.vocabulary = vocabulary
        self.table = table
        self.tags_read: dict[str, Tag | None] = {}
        """What each tag as written means in this reading (``tag_soup``'s ``Tag``, or ``None`` for plain text), by its
        text: a reply writes the same few tags thousands of times, and their meaning depends on nothing else."""


class Span:
    """What a reader of the ``text``, ``body`` or ``stray`` chain is given: a text, and where what it reads goes.

    ``offset``: where ``text`` starts, in the offsets of ``out``. ``cut_off``: ``text`` runs to where
    the input was cut (what it ends inside is cut in half). ``state``: the whole read, where the span
    is a reply (the ``text`` chain), else ``None``. ``at_start``: nothing of the reply's text was read
    before this span. ``own_chats``: set by a reader that added chats of its own to ``state`` (the
    request form): no chat is made of ``out``.
    """

    __slots__ = ("at_start", "cut_off", "offset", "out", "own_chats", "reading", "state", "text")

    def __init__(
        self,
        text: str,
        offset: int,
        out: Result,
        reading: Reading,
        *,
        cut_off: bool = False,
        state: Recovery | None = None,
        at_start: bool = True,
    ) -> None:
        self.text = text
        self.offset = offset
        self.out = out
        self.reading = reading
        self.cut_off = cut_off
        self.state = state
        self.at_start = at_start
        self.own_chats = False


SpanRead = Callable[[Span], int]
MarkRead = Callable[[re.Match[str], Span], "tuple[str, str, float | None] | None"]
TagRead = Callable[["Tag", re.Match[str], Result], bool]
ShapeRead = Callable[["Recovery", "JNode"], "list[JNode]"]
Read = SpanRead | MarkRead | TagRead | ShapeRead


@dataclass(frozen=True, slots=True)
class DialectRule:
    """One entry of the dialect table."""

    name: DialectName
    """What ``Reply.dialect`` says when this entry names the reply."""
    description: str
    """What the model wrote, in one line (documentation, ``charfmt fuzz`` output)."""
    chains: tuple[Chain, ...]
    """The readers' chains this entry runs in (markdown-it-py's ``alt``)."""
    detect: Detect | None = None
    """Whether a sample is written in this dialect; ``None`` for ``canonical``, which detects nothing."""
    pattern: str | None = None
    """``prose`` entries: the (verbose) regex the reader matches, with named groups its reader reads."""
    read: Read | None = None
    """What reads a text written in this dialect (its signature is its chains': see the module docstring)."""


class Dialects:
    """An ordered dialect table: its chains, the first entry of one that detects a sample, the winner."""

    def __init__(self, rules: tuple[DialectRule, ...]) -> None:
        self.rules = rules
        self.names: tuple[DialectName, ...] = tuple(rule.name for rule in rules)
        self._rank: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self._chains = {name: tuple(r for r in rules if name in r.chains) for name in get_args(Chain)}

    def rank(self, name: str) -> int:
        """Where entry ``name`` stands in the table."""
        return self._rank[name]

    def chain(self, name: Chain) -> tuple[DialectRule, ...]:
        """The entries that run in chain ``name``, in table order."""
        return self._chains[name]

    def first(self, name: Chain, sample: Sample, tags: TagTable, *, after: str | None = None) -> DialectRule | None:
        """The first entry of chain ``name`` that detects ``sample`` (only those after entry ``after``), or ``None``."""
        floor = self._rank[after] if after is not None else -1
        rank = self._rank
        for entry in self._chains[name]:
            if rank[entry.name] > floor and entry.detect is not None and entry.detect(sample, tags):
                return entry
        return None

    def winner(self, found: Iterable[str]) -> DialectName:
        """The dialect that names a reply in which the readers met ``found``: the first in table order."""
        ranks = [self._rank[name] for name in found]
        return self.names[min(ranks)] if ranks else "canonical"


@overload
def reader(entry: DialectRule, chain: Literal["text", "body", "stray"]) -> SpanRead: ...
@overload
def reader(entry: DialectRule, chain: Literal["prose"]) -> MarkRead: ...
@overload
def reader(entry: DialectRule, chain: Literal["tag"]) -> TagRead: ...
@overload
def reader(entry: DialectRule, chain: Literal["json"]) -> ShapeRead: ...
def reader(entry: DialectRule, chain: Chain) -> Read:
    """The reader of ``entry``, typed as chain ``chain`` calls it."""
    if entry.read is None or chain not in entry.chains:
        raise LookupError(f"dialect {entry.name!r} has no reader in the {chain!r} chain")
    return entry.read
