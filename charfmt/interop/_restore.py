"""An exchange back from its payload, with what other tools did to its messages taken.

The payload's compact exchange is expanded (diagnostics, texts referred to by message,
foreign messages that are the document's own, or that were kept without their text); then
each message whose text changed since charfmt wrote it becomes a plain chat (``CF907``),
and each message that is gone drops the chat it showed (``CF908``): a payload never silently
wins over what a reader of the format sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from charfmt._strict.envelope import Path
from charfmt.diagnostics import Diagnostic
from charfmt.interop._declaration import Format
from charfmt.interop._document import Source, as_dict, as_list, where
from charfmt.interop._foreign import plain_chat
from charfmt.interop._formats import DECLARED
from charfmt.interop._payload import digest, exchange_of, long_diagnostic
from charfmt.tags import TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Exchange

Edit = tuple[str | None, Diagnostic]
"""A message's text as edited (``None``: the message is gone) and the diagnostic saying so."""
Got = dict[int, tuple[dict[str, Any], Path]]
"""The messages of an exchange found in the document, by index, without charfmt's entry, and where."""


@dataclass
class Open:
    """A version 2 exchange being read: its payload and the messages of it found so far."""

    entry: dict[str, Any]
    at: Path
    messages: dict[int, tuple[dict[str, Any], Path]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Restorer:
    """Restores the exchanges of one document."""

    fmt: Format
    source: Source
    tags: TagTable
    header: dict[str, Any]

    def restore(self, current: Open) -> Exchange:
        """The exchange of ``current``'s payload, edits by other tools taken."""
        fmt = self.fmt
        got = {k: (fmt.payload.strip(m), p) for k, (m, p) in current.messages.items()}
        texts = {k: fmt.text.of(m) for k, (m, _) in got.items()}
        changed, reasoning = self._edits(current, got, texts)
        exchange = exchange_of(self.source, self._expand(current.entry["x"], got, texts), (*current.at, "x"))
        if not changed and reasoning is None:
            return exchange
        return self._apply(exchange, changed, reasoning)

    def _edits(
        self, current: Open, got: Got, texts: dict[int, str | None]
    ) -> tuple[dict[tuple[str, int], Edit], Edit | None]:
        """Each chat whose message's text changed or is gone; and the reasoning's, if its message did."""
        changed: dict[tuple[str, int], Edit] = {}
        reasoning: Edit | None = None
        for k, item in enumerate(current.entry["shown"]):
            if not (isinstance(item, list) and len(item) == 3):
                continue
            side, index, sum_ = item
            if k not in got:
                d = self.source.diagnostic(
                    "CF908",
                    f"{where(current.at)}: message {k} of this exchange is missing (deleted?);"
                    " what it showed was dropped",
                    current.at,
                )
                text: str | None = None
            elif digest(texts[k]) != sum_:
                message, path = got[k]
                text = texts[k]
                at = (*path, *self.fmt.text.path(message)) if text is not None else path
                d = self.source.diagnostic(
                    "CF907",
                    f"{where(path)}: the message's text was edited after charfmt wrote it; the visible text"
                    " was read as a plain chat",
                    at,
                )
            else:
                continue
            if side == "R":
                reasoning = (text, d)
            else:
                changed[(side, index)] = (text, d)
        return changed, reasoning

    def _expand(self, x: Any, got: Got, texts: dict[int, str | None]) -> Any:
        """The payload's exchange whole again: diagnostics, texts by message, foreign messages."""
        for part in (x.get("user"), x.get("reply")):
            if isinstance(part, dict) and isinstance(part.get("diagnostics"), list):
                part["diagnostics"] = [long_diagnostic(d) for d in part["diagnostics"]]
        for chat in [*as_list(as_dict(x.get("user")).get("chats")), *as_list(as_dict(x.get("reply")).get("chats"))]:
            for segment in as_list(as_dict(chat).get("segments")):
                ref = segment.get("text") if isinstance(segment, dict) else None
                if isinstance(ref, dict):
                    m = ref.get("m")
                    segment["text"] = (texts.get(m) or "") if isinstance(m, int) else ref
        foreign = x.get("foreign")
        if isinstance(foreign, dict) and isinstance(foreign.get("messages"), list):
            self._resolve_foreign(foreign, got, texts)
        return x

    def _resolve_foreign(self, foreign: dict[str, Any], got: Got, texts: dict[int, str | None]) -> None:
        """Foreign messages whole again: the document's own (``same``), their text put back (``blank``)."""
        if foreign.get("document") == "same":
            foreign["document"] = self.header
        source = DECLARED.get(str(foreign.get("format")))
        links = []
        for link in foreign["messages"]:
            same = link.get("same") if isinstance(link, dict) else None
            blank = link.get("blank") if isinstance(link, dict) else None
            if isinstance(same, int):
                if same in got:
                    links.append({key: v for key, v in link.items() if key != "same"} | {"message": got[same][0]})
            elif isinstance(blank, int) and isinstance(link.get("message"), dict) and source is not None:
                original = source.text.set(link["message"], texts.get(blank) or "")
                links.append({key: v for key, v in link.items() if key != "blank"} | {"message": original})
            else:
                links.append(link)
        foreign["messages"] = links

    def _apply(self, exchange: Exchange, changed: dict[tuple[str, int], Edit], reasoning: Edit | None) -> Exchange:
        """``exchange`` with the edits: an edited chat a plain one, a gone one dropped, the links renumbered."""
        from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

        user_chats, user_diags, user_map = self._apply_side(exchange.user.chats, "u", changed, user=True)
        reply_chats, reply_diags, reply_map = self._apply_side(exchange.reply.chats, "r", changed, user=False)
        update: dict[str, Any] = {"chats": reply_chats, "diagnostics": [*exchange.reply.diagnostics, *reply_diags]}
        if reasoning is not None:
            update["reasoning"] = reasoning[0] or None
            update["diagnostics"].append(reasoning[1])
        new_foreign = exchange.foreign
        if new_foreign is not None and isinstance(new_foreign.get("messages"), list):
            links = []
            for link in new_foreign["messages"]:
                if isinstance(link, dict) and isinstance(link.get("chat"), int):
                    mapping = user_map if link.get("side") == "user" else reply_map
                    new = mapping.get(link["chat"])
                    links.append(
                        {k: v for k, v in link.items() if k != "chat"} | ({"chat": new} if new is not None else {})
                    )
                else:
                    links.append(link)
            new_foreign = {**new_foreign, "messages": links}
        user = UserTurn(
            chats=user_chats, context=exchange.user.context, diagnostics=[*exchange.user.diagnostics, *user_diags]
        )
        return exchange.model_copy(
            update={"user": user, "reply": exchange.reply.model_copy(update=update), "foreign": new_foreign}
        )

    def _apply_side(
        self, chats: Sequence[Any], side: str, changed: dict[tuple[str, int], Edit], *, user: bool
    ) -> tuple[list[Any], list[Diagnostic], dict[int, int]]:
        out: list[Any] = []
        diags: list[Diagnostic] = []
        mapping: dict[int, int] = {}
        for n, chat in enumerate(chats):
            edit = changed.get((side, n))
            if edit is None:
                mapping[n] = len(out)
                out.append(chat if user else chat.model_copy(update={"order": len(out) + 1}))
                continue
            text, d = edit
            diags.append(d)
            if text:
                mapping[n] = len(out)
                out.append(plain_chat(chat.type, text, len(out) + 1, self.tags, user=user))
        return out, diags, mapping
