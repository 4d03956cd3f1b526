"""What the lenient readers produce: pieces of segments being read, repairs, the dialects met.

Offsets are into the string that was read; whoever called the reader maps them to the input.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Piece:
    """A segment being read: its tag, text, optional intensity, and where it came from."""

    tag: str
    text: str
    start: int
    end: int
    intensity: float | None = None
    implicit: bool = False  # opened by charfmt (speech wrapped by an emotion tag, a split message)
    attribute: Attribute | None = None  # <sfx type="thunder"></sfx>: a value written as an attribute


@dataclass(frozen=True, slots=True)
class Attribute:
    """A value written as an attribute of a tag (``type=``, ``name=``, ``value=``) and where the tag stands."""

    value: str
    written: str
    """The opening tag as written, for the repair's message."""
    start: int
    end: int


@dataclass(slots=True)
class Repair:
    """One repair, with offsets into the string that was read."""

    code: str
    message: str
    start: int
    end: int


@dataclass(slots=True)
class Result:
    """What a text turned into."""

    pieces: list[Piece] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    dialects: list[str] = field(default_factory=list)
    """Every entry of the dialect table met while reading (the table's ``winner`` picks the reply's)."""

    def note(self, code: str, message: str, start: int, end: int) -> None:
        self.repairs.append(Repair(code, message, start, end))

    def dialect(self, name: str) -> None:
        if name not in self.dialects:
            self.dialects.append(name)

    def extend(self, other: Result, shift: int) -> None:
        """Add what ``other`` holds, its offsets moved by ``shift`` (it read a part of this result's text)."""
        for d in other.dialects:
            self.dialect(d)
        for r in other.repairs:
            r.start += shift
            r.end += shift
            self.repairs.append(r)
        for p in other.pieces:
            p.start += shift
            p.end += shift
            self.pieces.append(p)
