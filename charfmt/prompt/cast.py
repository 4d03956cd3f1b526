"""``Cast``: who answers a turn, one character (a cast of one) or a scene, as one value every door asks.

``Character`` and ``Scene`` both meet it: the reply's tags and vocabularies, its speakers, the
members who speak, how a reply is read and checked, and the stage that plays it. A door holds one
``cast`` and calls it, instead of asking which of the two it was given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from charfmt.stage import StageReader

if TYPE_CHECKING:
    from charfmt.diagnostics import Diagnostic
    from charfmt.models import Reply, Vocabulary
    from charfmt.prompt.character import Character
    from charfmt.prompt.userinput import UserTurn
    from charfmt.stagemap import Voice
    from charfmt.tags import TagTable


class Cast(Protocol):
    """Who answers a turn: a ``Character`` (a cast of one) or a ``Scene`` (a cast and a narrator)."""

    @property
    def name(self) -> str:
        """The character's or the scene's name (what front ends see as the model, by default)."""
        ...

    @property
    def tags(self) -> TagTable:
        """The tags a reply's bodies are read with (a scene's: every member's)."""
        ...

    @property
    def vocabulary(self) -> Vocabulary:
        """The emotion keys a reply may hold (what a grammar lets the emotion tag hold)."""
        ...

    @property
    def reading_vocabulary(self) -> Vocabulary:
        """What a lenient read is told (a scene's: every member's emotion words, each its own key)."""
        ...

    @property
    def speakers(self) -> list[str] | None:
        """The speaker ids a reply's chats name (``None``: one character, its chats name none)."""
        ...

    @property
    def members(self) -> Mapping[str, Character]:
        """Who speaks, by speaker id, in order (a character: itself, by its name; a scene: its cast)."""
        ...

    @property
    def narrator(self) -> Voice | None:
        """The voice ``I``/``E`` chats are spoken with (``None``: they are not spoken)."""
        ...

    def parse(
        self, text: str | bytes, *, lenient: bool = False, turn: UserTurn | str | Sequence[str] | None = None,
        prompt: str | Sequence[str | Mapping[str, Any]] | None = None,
    ) -> Reply:  # fmt: skip
        """A reply read as this cast's (strict: ``ParseError``; lenient: every problem a diagnostic)."""
        ...

    def shorthand(self, text: str) -> UserTurn:
        """The player's shorthand (``[joy] *waves* hi``) read with the cast's words (a scene's: every member's)."""
        ...

    def read_turn(self, say: str, *, context: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> UserTurn:
        """The player's turn (shorthand or a user block) read with the cast's words, as ``charfmt.read_turn``."""
        ...

    def check(self, reply: Reply, source: str = "", *, lenient: bool = False) -> list[Diagnostic]:
        """The cast's own problems in ``reply`` beyond the format's (a scene's speakers and emotions)."""
        ...


def stage_reader(cast: Cast, *, max_length: int | None = None, bound: int | None = None) -> StageReader:
    """The stage reader of ``cast``: each speaker's stage map and voice (one character: its own, whoever a chat
    names), and the narrator's voice (``StageReader``'s ``max_length`` and ``bound``)."""
    members = cast.members
    only = next(iter(members.values())) if cast.speakers is None else None  # (a cast of one: every chat its)
    return StageReader(only, cast=members, narrator=cast.narrator, max_length=max_length, bound=bound)
