"""What the stream reader remembers of the chats: each open chat's progress, and the orders seen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(slots=True)
class OpenChat:
    """A chat the reader has begun: its header, and how far its events went."""

    index: int
    kind: str
    order: int
    speaker: str | None = None
    segment: int = -1
    closed_segments: int = 0
    tag: str = ""
    had_text: bool = False
    started: bool = False
    key_start: int = 0


NO_CHAT: Final = OpenChat(-1, "", 0)
"""Stands for "no chat" between chats (never read there: the states say where a chat is open)."""


class Orders:
    """The chat orders seen: ``1..run`` as one number, the others in a set.

    A long stream numbers its chats 1, 2, 3...: its memory stays flat however many chats it
    has (a set of every order grew by about 75 bytes a chat). Orders are at least 1.
    """

    __slots__ = ("count", "rest", "run", "top")

    def __init__(self) -> None:
        self.run = 0  # 1..run were all seen
        self.rest: set[int] = set()  # the others seen
        self.count = 0  # how many distinct orders
        self.top = 0  # the largest

    def __contains__(self, order: int) -> bool:
        return 1 <= order <= self.run or order in self.rest

    def __len__(self) -> int:
        return self.count

    def add(self, order: int) -> None:
        if order in self:
            return
        self.count += 1
        self.top = max(self.top, order)
        if order != self.run + 1:
            self.rest.add(order)
            return
        self.run = order
        while self.run + 1 in self.rest:
            self.run += 1
            self.rest.discard(self.run)

    def missing(self, most: int) -> list[int]:
        """The first ``most`` orders below the largest that were not seen."""
        found: list[int] = []
        k = 1
        while len(found) < most and k < self.top:
            if k not in self:
                found.append(k)
            k += 1
        return found
