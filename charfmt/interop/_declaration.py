"""What an interop format is, as data: the ``Format`` each format module declares, and its parts.

A format is declared once (``pam.PAM``, ``uacs.UACS``...) and read by the shared walks
(``_export``, ``_read``): where its document keeps the messages and the header, who sent a
message, where its text is, where charfmt's payload goes, where the model's reasoning goes,
which of its ids, times and names other formats have a place for, and how a chat of an
exchange becomes one of its messages (a ``Line`` written by ``message``). The parts a
declaration is built of (``RoleField``, ``Parts``, ``Extension``...) are in ``_shapes``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from charfmt._strict.envelope import Path
from charfmt.diagnostics import Diagnostic
from charfmt.interop._document import Source, member, need

MessageRole = Literal["user", "assistant", "system"]
Side = Literal["u", "r"]
Names = tuple[str, str]
"""The user's and the character's display names."""
Message = dict[str, Any]
Found = tuple[dict[str, Any], Path]
"""charfmt's entry in a message, and where it is."""
Dropped = list[tuple[str, Path]]
"""What a foreign message holds that charfmt keeps only in ``Exchange.foreign``, and where."""
Reasoned = tuple[str | None, str | None, Path | None]
"""A foreign message's text, the model's reasoning in it, and where that is."""
Shown = tuple[Literal["u", "r", "R"], int] | None
"""The chat a message shows: ``(side, index)``, ``("R", 0)`` for the reasoning, ``None`` for none."""


@dataclass(frozen=True, slots=True)
class Line:
    """One message an exporter writes: who says it and the text a reader of the format sees."""

    role: MessageRole
    text: str
    chat_type: str
    """``C``, ``I`` or ``E``: an I/E chat is written as a system message."""
    side: Side = "r"
    index: int = 0
    """Which chat it shows: ``side`` (``u`` the user's, ``r`` the reply's) and its index there."""
    speaker: str | None = None
    """The chat's speaker in a scene: the message's sender name (group chat, UACS actor)."""


@dataclass(frozen=True, slots=True)
class Native:
    """What a message says in a format's own fields that another format has a place for too."""

    id: str | None = None
    time: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Writing:
    """What writing a message knows of its document: the two names, and the senders its header names."""

    names: Names
    senders: dict[str, str | None]
    """Each sender's full name in the document's header (group chat ``user_details``); empty elsewhere."""


@dataclass
class Draft:
    """An exchange's messages being written, and what each shows."""

    writing: Writing
    messages: list[Message] = field(default_factory=list)
    shown: list[Shown] = field(default_factory=list)
    same: dict[int, int] = field(default_factory=dict)
    """Foreign link index -> the message that is its original (same-format passthrough)."""


# --- the parts of a declaration -----------------------------------------------------------------


class Who(Protocol):
    """Who sent a message: checked in two steps, as the readers check them (before and after the payload)."""

    def check(self, source: Source, message: Message, path: Path, header: Message) -> tuple[str, list[Diagnostic]]:
        """The sender or role as written, checked; and notes about it for the foreign reader."""

    def role(self, source: Source, message: Message, path: Path, found: str, header: Message) -> str:
        """The role charfmt reads the message as: user, assistant, system or tool."""


class Text(Protocol):
    """Where a message's visible text is."""

    def of(self, message: Message) -> str | None:
        """The text a reader of the format sees in ``message`` (``None``: it has none)."""

    def path(self, message: Message) -> Path:
        """Where that text is, relative to the message."""

    def set(self, message: Message, text: str | None) -> Message | None:
        """``message`` showing ``text`` instead; ``None`` removes its text (and the message, if nothing is left)."""

    def read(self, source: Source, message: Message, path: Path) -> tuple[str | None, Path | None, Dropped]:
        """A foreign message's text, where it is, and the parts of it that are not text."""


class Payload(Protocol):
    """Where charfmt's entry goes in a message."""

    def attach(self, message: Message, entry: Message) -> Message:
        """``message`` with charfmt's entry."""

    def strip(self, message: Message) -> Message:
        """``message`` without charfmt's entry (what ``attach`` added)."""

    def find(self, source: Source, message: Message, path: Path) -> Found | None:
        """charfmt's entry in a message, checked (CF902), and where; ``None`` if the message is foreign."""


class ReasoningPlace(Protocol):
    """Where the model's reasoning (``Reply.reasoning``) goes."""

    def write(self, fmt: Format, draft: Draft, text: str, native: Native) -> None:
        """Write ``text`` into the messages of an exchange being written."""

    def read(self, message: Message, path: Path, text: str | None, text_path: Path | None) -> Reasoned:
        """A foreign message's text, its reasoning and where that is."""


class NoReasoning:
    """A format without a place for reasoning: only the payload holds it."""

    def write(self, fmt: Format, draft: Draft, text: str, native: Native) -> None:
        """Nothing: the payload holds it."""

    def read(self, message: Message, path: Path, text: str | None, text_path: Path | None) -> Reasoned:
        """The text as it is, no reasoning."""
        return text, None, None


NO_REASONING: Final = NoReasoning()


@dataclass(frozen=True, slots=True)
class NativeFields:
    """Where a message keeps the id, time and speaker name other formats have a place for too."""

    id: str
    time: str | None = None
    name: tuple[str, ...] = ()
    """The path to the name (``("actor", "name")``); empty: the format has none."""

    def of(self, message: Message) -> Native:
        """The id, time and speaker name ``message`` has in these fields."""
        name: Any = message
        for key in self.name:
            name = name.get(key) if isinstance(name, dict) else None
        found = [message.get(self.id), message.get(self.time) if self.time else None, name if self.name else None]
        return Native(*(v if isinstance(v, str) else None for v in found))


@dataclass(frozen=True, slots=True)
class Document:
    """What a whole document is: an object with the messages under ``messages``, or the array of them."""

    what: str
    """What the document must be, for CF901: ``a PAM conversation object``."""
    messages: str | None = None
    """The key of the array of messages; ``None``: the document is that array (and has no header)."""
    check: Callable[[Source, Message], list[Diagnostic]] | None = None
    """The format's own checks of the document before its messages; notes for its first foreign message."""
    header: Callable[[Names, uuid.UUID, str], Message] | None = None
    """A new document's header (everything but the messages) from the names, conversation id and time."""
    senders: Callable[[Message], dict[str, str | None]] | None = None
    """Each sender's full name in a header (group chat)."""
    complete: Callable[[Message, list[Message]], Message] | None = None
    """The header with what the messages written under it need of it (group chat: each sender a user)."""
    names: Callable[[Message], Names | None] | None = None
    """The user's and the character's display names a header gives (PAM's participants, group chat's
    ``user_details``), where it gives both: what another format is written with when no character is given."""

    def open(self, source: Source, doc: Any) -> tuple[list[Any], Message, list[Diagnostic]]:
        """The messages of a decoded document, its header and the format's notes."""
        need(source, doc, (), list if self.messages is None else dict, self.what)
        notes = self.check(source, doc) if self.check is not None else []
        if self.messages is None:
            return doc, {}, notes
        messages = member(source, doc, (), self.messages, kind=list, what="an array of messages")
        return messages, {k: v for k, v in doc.items() if k != self.messages}, notes

    def at(self, n: int) -> Path:
        """The path of message ``n``."""
        return (n,) if self.messages is None else (self.messages, n)

    def write(self, header: Message | None, messages: list[Message]) -> Any:
        """The document of ``messages`` under ``header``."""
        return messages if self.messages is None else {**(header or {}), self.messages: messages}


@dataclass(frozen=True, slots=True)
class Format:
    """One interop format, declared: everything the shared export and read walks need of it."""

    name: str
    document: Document
    """Where the messages and the header are."""
    who: Who
    """Who sent a message (``RoleField``), and the role charfmt reads it as."""
    text: Text
    """Where a message's text is (``Parts``, or a field of the format's own)."""
    payload: Payload
    """Where charfmt's entry goes (``Extension``, ``InPart``)."""
    native: NativeFields
    message: Callable[[Line, Native, Writing], Message]
    """A new message showing ``line``."""
    empty: Callable[[Native, Writing], Message]
    """The one message of an exchange with nothing to show."""
    reasoning: ReasoningPlace = NO_REASONING
    """Where the model's reasoning goes (``ThinkingField``, ``ThoughtMessage``); by default the payload only."""
    dropped: Sequence[tuple[str, str]] = ()
    """Message keys (and what they hold) that, when set, a foreign reading keeps only in ``Exchange.foreign``."""
    skipped: Callable[[Source, list[Any]], dict[int, Diagnostic]] | None = None
    """Messages not read as chats (PAM's later branches), each with the note saying so."""
