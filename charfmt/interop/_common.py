"""What the four format modules share: the versioned payload, visible text, foreign import, errors.

An exporter turns each exchange into *lines* (one per chat that has something to show: the
user's C chats as ``user``, the character's C chats as ``assistant``, I/E chats as
``system``) and puts the exact ``Exchange`` under ``{"charfmt": {"v": 1, "exchange": ...}}``
in the format's extension point of the exchange's first message; the other messages of the
exchange carry ``{"charfmt": {"v": 1, "continued": true}}``. An importer that finds the
payload rebuilds the exchange from it alone; a message without one is foreign (see
``ForeignReader``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import ValidationError

from charfmt.diagnostics import Diagnostic, ParseError
from charfmt.envelope import JSONError, Locator, Path, decode
from charfmt.models import Chat, Reply, Segment, validation_message
from charfmt.tags import DEFAULT_TAGS, TEXT_TAG, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

KEY: Final = "charfmt"
"""The key charfmt's data sits under in every format's extension point."""
VERSION: Final = 1
"""The payload version; an importer refuses a version it does not know (CF902)."""

Role = Literal["user", "assistant", "system"]


class InteropError(ParseError):
    """A document is not what its format says, or charfmt's payload in it is unreadable.

    ``diagnostics`` point into the document's raw text (line, column, offset).
    """


@dataclass(frozen=True, slots=True)
class Line:
    """One message an exporter writes: who says it and the text a reader of the format sees."""

    role: Role
    text: str
    chat_type: str
    """``C``, ``I`` or ``E``: an I/E chat is written as a system message."""


def now() -> str:
    """The current time in UTC, ISO 8601 with seconds (what every format here accepts)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def visible_text(chat_type: str, segments: Sequence[Segment], tags: TagTable = DEFAULT_TAGS) -> str:
    """What a reader that ignores charfmt should see of one chat.

    Speech, line by line; with no speech, the actions as ``*bows*``; an I/E chat's text as is.
    Emotions, cues and hidden text (inner voice) are not shown: they live in the payload.
    """
    if chat_type != "C":
        return "\n".join(s.text for s in segments if s.tag == TEXT_TAG)
    speech = {s.name for s in tags.with_role("speech")}
    spoken = [s.text for s in segments if s.tag in speech and s.text]
    if spoken:
        return "\n".join(spoken)
    action = tags.action
    return "\n".join(f"*{s.text}*" for s in segments if action is not None and s.tag == action.name and s.text)


def lines(exchange: Exchange, tags: TagTable = DEFAULT_TAGS) -> list[Line]:
    """The messages of one exchange as a reader of another format sees them (empty texts left out)."""
    out: list[Line] = []
    for chat in exchange.user.chats:
        role: Role = "user" if chat.type == "C" else "system"
        out.append(Line(role, visible_text(chat.type, chat.segments, tags), chat.type))
    for reply_chat in exchange.reply.chats:
        role = "assistant" if reply_chat.type == "C" else "system"
        out.append(Line(role, visible_text(reply_chat.type, reply_chat.segments, tags), reply_chat.type))
    return [line for line in out if line.text]


def payload(exchange: Exchange) -> dict[str, Any]:
    """The exact exchange, JSON-ready, under the versioned key."""
    return {KEY: {"v": VERSION, "exchange": exchange.model_dump(mode="json")}}


CONTINUED: Final[dict[str, Any]] = {KEY: {"v": VERSION, "continued": True}}
"""The marker on the second and later messages of an exchange (their content is in the payload)."""


@dataclass
class Source:
    """The raw document text, for positions; every diagnostic and error is built here."""

    text: str
    _locator: Locator | None = None

    def span(self, path: Path) -> tuple[int, int]:
        """Raw ``(start, end)`` of the value at ``path``."""
        if self._locator is None:
            self._locator = Locator(self.text)
        return self._locator.value(path)

    def diagnostic(self, code: str, message: str, path: Path, *, chat: int | None = None) -> Diagnostic:
        """A diagnostic pointing at the value at ``path``."""
        start, end = self.span(path)
        return Diagnostic.at(self.text, code, message, start, end, chat=chat)

    def fail(self, code: str, message: str, path: Path) -> InteropError:
        """The error for a document that cannot be read, pointing at ``path``."""
        return InteropError([self.diagnostic(code, message, path)], self.text)


def where(path: Path) -> str:
    """A JSON path as messages write it: ``messages[2].role``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "the document"


def read_json(text: str) -> tuple[Any, Source]:
    """Decode a document; invalid JSON is an ``InteropError`` at the offending character."""
    source = Source(text.removeprefix("\ufeff"))
    try:
        decoded = decode(source.text)
    except JSONError as e:
        raise InteropError([Diagnostic.at(source.text, e.code, e.message, e.pos)], source.text) from None
    return decoded.value, source


def need(source: Source, value: Any, path: Path, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is a ``kind``, else CF901 naming the path and what was expected."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise source.fail("CF901", f"{where(path)}: expected {what}", path)
    return value


def member(
    source: Source, obj: dict[str, Any], path: Path, key: str, *, kind: type | tuple[type, ...], what: str
) -> Any:
    """The required member ``key`` of ``obj``, of ``kind``; CF901 if missing or of another type."""
    if key not in obj:
        raise source.fail("CF901", f"{where(path)}: missing required key {key!r} ({what})", path)
    return need(source, obj[key], (*path, key), kind, what)


def marker(source: Source, ext: Any, path: Path) -> dict[str, Any] | None:
    """charfmt's entry in an extension object, checked: ``None`` if the message is foreign."""
    if not isinstance(ext, dict) or KEY not in ext:
        return None
    entry = ext[KEY]
    at = (*path, KEY)
    if not isinstance(entry, dict) or entry.get("v") != VERSION:
        version = entry.get("v") if isinstance(entry, dict) else None
        raise source.fail(
            "CF902", f"{where(at)}: charfmt payload version {version!r}; this charfmt reads {VERSION}", at
        )
    if "exchange" not in entry and entry.get("continued") is not True:
        raise source.fail("CF902", f"{where(at)}: charfmt payload holds neither an exchange nor a continuation", at)
    return entry


def exchange_of(source: Source, entry: dict[str, Any], path: Path) -> Exchange:
    """The exchange in a payload; CF902 naming the field if it does not validate."""
    from charfmt.character import Exchange  # noqa: PLC0415 (character loads prompts machinery)

    at = (*path, KEY, "exchange")
    try:
        return Exchange.model_validate(entry["exchange"])
    except ValidationError as e:
        raise source.fail(
            "CF902", f"{where(at)}: charfmt payload is not an exchange: {validation_message(e)}", at
        ) from None


# --- foreign documents -----------------------------------------------------------------------

_BAD_TEXT: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


@dataclass
class _Side:
    chats: list[tuple[str, str]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)


@dataclass
class _Pending:
    user: _Side = field(default_factory=_Side)
    reply: _Side = field(default_factory=_Side)
    reasoning: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.messages


class ForeignReader:
    """Builds exchanges from messages charfmt did not write.

    A user message that follows anything else starts a new exchange. Text becomes plain chats
    (user: a ``C`` chat of speech; assistant: a ``C`` chat of speech; system and tool: an ``I``
    chat), each with a diagnostic saying what could not be typed. Every original message is kept
    whole in ``Exchange.foreign`` (with the chat it became), so exporting to the same format
    writes it back: ids, timestamps, actors, media and tool parts included.
    """

    def __init__(self, fmt: str, source: Source, tags: TagTable = DEFAULT_TAGS) -> None:
        self.fmt = fmt
        self.source = source
        self.tags = tags
        self.out: list[Exchange] = []
        self._pending = _Pending()
        self._seen_reply = False

    def message(
        self,
        original: dict[str, Any],
        path: Path,
        role: str,
        text: str | None,
        *,
        text_path: Path | None = None,
        dropped: Iterable[tuple[str, Path]] = (),
        reasoning: str | None = None,
        reasoning_path: Path | None = None,
    ) -> None:
        """One foreign message: its role (user, assistant, system, tool), its text, what was not read.

        ``reasoning`` is the model's own reasoning (PAM ``is_thought``, Ailoy ``thinking``): it
        becomes ``Reply.reasoning``, never the character's inner voice.
        """
        if role == "user" and self._seen_reply:
            self.flush()
        if role != "user":
            self._seen_reply = True
        pending = self._pending
        side = pending.user if role == "user" else pending.reply
        link: dict[str, Any] = {"message": original, "side": "user" if role == "user" else "reply"}
        for what, at in dropped:
            side.diagnostics.append(
                self.source.diagnostic("CF904", f"{where(at)}: {what} kept only in Exchange.foreign", at)
            )
        if reasoning:
            at = reasoning_path or path
            pending.reasoning.append(reasoning)
            pending.reply.diagnostics.append(
                self.source.diagnostic("CF905", f"{where(at)}: model reasoning read as Reply.reasoning", at)
            )
        at = text_path or path
        if text:
            if _BAD_TEXT.search(text):
                text = _BAD_TEXT.sub("\ufffd", text)
                side.diagnostics.append(
                    self.source.diagnostic(
                        "CF714", f"{where(at)}: control characters or lone surrogates replaced by U+FFFD", at
                    )
                )
            kind = "C" if role in ("user", "assistant") else "I"
            link["chat"] = len(side.chats)
            side.chats.append((kind, text))
            if kind == "C":
                message = f"{where(at)}: foreign text has no emotion or action; read as speech"
            else:
                message = f"{where(at)}: {role} message read as an I (info) chat"
            side.diagnostics.append(self.source.diagnostic("CF903", message, at))
        elif not reasoning:
            side.diagnostics.append(
                self.source.diagnostic(
                    "CF906", f"{where(path)}: message without text kept only in Exchange.foreign", path
                )
            )
        pending.messages.append(link)

    def flush(self) -> None:
        """Close the exchange being built."""
        from charfmt.character import Exchange  # noqa: PLC0415
        from charfmt.userinput import UserChat, UserTurn  # noqa: PLC0415

        pending = self._pending
        if pending.empty():
            return
        speech = self.tags.speech.name
        user_chats = [
            UserChat(type="C", segments=[Segment(tag=speech, text=t)])
            if k == "C"
            else UserChat(type="I", segments=[Segment(tag=TEXT_TAG, text=t)])
            for k, t in pending.user.chats
        ]
        chats = [
            Chat(type="C", order=n, segments=[Segment(tag=speech, text=t)])
            if k == "C"
            else Chat(type="I", order=n, segments=[Segment(tag=TEXT_TAG, text=t)])
            for n, (k, t) in enumerate(pending.reply.chats, 1)
        ]
        foreign: dict[str, Any] = {"format": self.fmt, "messages": pending.messages}
        reply = Reply(
            chats=chats, diagnostics=pending.reply.diagnostics, reasoning="\n".join(pending.reasoning) or None
        )
        self.out.append(
            Exchange(
                user=UserTurn(chats=user_chats, diagnostics=pending.user.diagnostics), reply=reply, foreign=foreign
            )
        )
        self._pending = _Pending()
        self._seen_reply = False


@dataclass
class Reader:
    """A document's messages, read in order: payload exchanges and foreign ones interleaved."""

    fmt: str
    source: Source
    tags: TagTable = DEFAULT_TAGS
    exchanges: list[Exchange] = field(default_factory=list)
    _foreign: ForeignReader | None = None

    @property
    def foreign(self) -> ForeignReader:
        if self._foreign is None:
            self._foreign = ForeignReader(self.fmt, self.source, self.tags)
        return self._foreign

    def ours(self, entry: dict[str, Any], path: Path) -> None:
        """A message with charfmt's marker: a new exchange from its payload, or a continuation."""
        if "exchange" in entry:
            if self._foreign is not None:
                self._foreign.flush()
                self.exchanges.extend(self._foreign.out)
                self._foreign.out = []
            self.exchanges.append(exchange_of(self.source, entry, path))

    def done(self, document: dict[str, Any]) -> list[Exchange]:
        """Every exchange, in document order."""
        if self._foreign is not None:
            self._foreign.flush()
            self.exchanges.extend(self._foreign.out)
            first = next((n for n, ex in enumerate(self.exchanges) if ex.foreign is not None), None)
            if first is not None:
                ex = self.exchanges[first]
                assert ex.foreign is not None
                if "document" not in ex.foreign:
                    self.exchanges[first] = ex.model_copy(update={"foreign": {**ex.foreign, "document": document}})
        return self.exchanges


def foreign_of(exchange: Exchange, fmt: str) -> dict[str, Any] | None:
    """The exchange's passthrough if it came from a document of ``fmt``."""
    foreign = exchange.foreign
    if isinstance(foreign, dict) and foreign.get("format") == fmt and isinstance(foreign.get("messages"), list):
        return foreign
    return None


def document_of(history: Sequence[Exchange], fmt: str) -> dict[str, Any] | None:
    """The header of the foreign document of ``fmt`` the history came from, if any."""
    for exchange in history:
        foreign = foreign_of(exchange, fmt)
        if foreign is not None and isinstance(foreign.get("document"), dict):
            return dict(foreign["document"])
    return None


def rewritten(
    exchange: Exchange,
    foreign: dict[str, Any],
    set_text: Callable[[dict[str, Any], str], dict[str, Any]],
    tags: TagTable,
) -> list[dict[str, Any]]:
    """The original messages of a foreign exchange, each read chat's text taken from the exchange now."""
    out = []
    for link in foreign["messages"]:
        message = dict(link["message"])
        k = link.get("chat")
        if isinstance(k, int):
            chats: Sequence[Any] = exchange.user.chats if link.get("side") == "user" else exchange.reply.chats
            if k < len(chats):
                text = visible_text(chats[k].type, chats[k].segments, tags)
                if text:
                    message = set_text(message, text)
        out.append(message)
    return out


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one (an extension point that is absent or odd)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is an array, else an empty one."""
    return value if isinstance(value, list) else []


def names(character: Character | None) -> tuple[str, str]:
    """The user's and the character's display names."""
    if character is None:
        return "User", "Character"
    return character.user_name, character.name


def dumps_document(doc: Any, *, indent: int | None = 2) -> str:
    """A document as JSON text (UTF-8 kept readable)."""
    return json.dumps(doc, ensure_ascii=False, indent=indent) + "\n"
