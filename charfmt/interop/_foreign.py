"""Exchanges from messages charfmt did not write: plain chats, diagnostics, and every original kept.

A user message that follows anything else starts a new exchange. Text becomes plain chats
(user: a ``C`` chat of speech; assistant: a ``C`` chat of speech; system and tool: an ``I``
chat), each with a diagnostic saying what could not be typed. Every original message is kept
whole in ``Exchange.foreign`` (with the chat it became), so exporting to the same format
writes it back: ids, timestamps, actors, media and tool parts included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from charfmt._grammar.lexical import NOT_TEXT_CHAR
from charfmt._strict.envelope import Path
from charfmt.diagnostics import Diagnostic
from charfmt.interop._document import Source, where
from charfmt.models import Chat, Reply, Segment
from charfmt.tags import DEFAULT_TAGS, TEXT_TAG, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange

_BAD_TEXT: Final = NOT_TEXT_CHAR
_MARKUP: Final = re.compile(r"\*[^*\n]+\*|\[[^\]\n]+\]|<[A-Za-z][\w-]*>")


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


def plain_chat(kind: str, text: str, order: int, tags: TagTable, *, user: bool) -> Any:
    """Foreign text as a chat: speech in a ``C`` chat, the text of an ``I`` (or ``E``) chat."""
    from charfmt.prompt.userinput import UserChat  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

    segment = Segment(tag=tags.speech.name, text=text) if kind == "C" else Segment(tag=TEXT_TAG, text=text)
    if user:
        return UserChat(type=kind, segments=[segment])
    return Chat(type=kind, order=order, segments=[segment])


class ForeignReader:
    """Builds exchanges from messages charfmt did not write (see the module's docstring)."""

    def __init__(self, fmt: str, source: Source, tags: TagTable = DEFAULT_TAGS) -> None:
        self.fmt = fmt
        self.source = source
        self.tags = tags
        self.out: list[Exchange] = []
        self._pending = _Pending()
        self._seen_reply = False
        self.notes: list[Diagnostic] = []
        """Diagnostics for the first message read (the document's own, such as an unknown version)."""

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
        notes: Iterable[Diagnostic] = (),
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
        side.diagnostics.extend([*self.notes, *notes])
        self.notes = []
        for what, at in dropped:
            side.diagnostics.append(
                self.source.diagnostic("CF904", f"{where(at)}: {what} kept only in Exchange.foreign", at)
            )
        if reasoning:
            at = reasoning_path or path
            pending.reasoning.append(reasoning)
            link["reasoning"] = True
            pending.reply.diagnostics.append(
                self.source.diagnostic("CF905", f"{where(at)}: model reasoning read as Reply.reasoning", at)
            )
        if text:
            self._text(side, link, role, text, text_path or path)
        elif not reasoning:
            side.diagnostics.append(
                self.source.diagnostic(
                    "CF906", f"{where(path)}: message without text kept only in Exchange.foreign", path
                )
            )
        pending.messages.append(link)

    def _text(self, side: _Side, link: dict[str, Any], role: str, text: str, at: Path) -> None:
        """A message's text as a plain chat, with the diagnostic saying what it was read as (CF903)."""
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
        if kind != "C":
            message = f"{where(at)}: {role} message read as an I (info) chat"
        elif _MARKUP.search(text):
            message = (
                f"{where(at)}: foreign text read as speech; its *…*, […] or <…> were not interpreted"
                " as actions, emotions or tags"
            )
        else:
            message = f"{where(at)}: foreign text read as speech (a plain chat)"
        side.diagnostics.append(self.source.diagnostic("CF903", message, at))

    def flush(self) -> None:
        """Close the exchange being built."""
        from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)
        from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

        pending = self._pending
        if pending.empty():
            return
        user_chats = [plain_chat(k, t, 0, self.tags, user=True) for k, t in pending.user.chats]
        chats = [plain_chat(k, t, n, self.tags, user=False) for n, (k, t) in enumerate(pending.reply.chats, 1)]
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
