"""The export walk: a history as a document of any declared format, each exchange's payload on its first message.

``export_document(fmt, history, ...)`` reads everything it needs of the format from its
declaration: the document's header and where its messages go (``Document``), the messages
each exchange becomes (``_messages``), and where the payload goes (``Format.payload``). The
payload is compact (see ``_payload``): a segment whose text a message shows refers to that
message, and a foreign message that is the document's own again refers to it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.interop._declaration import Draft, Format, Names, Writing
from charfmt.interop._formats import DECLARED
from charfmt.interop._messages import Exporting, build, foreign_of
from charfmt.interop._payload import PAYLOAD_VERSION, digest, short_diagnostic
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

UNKNOWN_TIME: Final = "1970-01-01T00:00:00Z"
"""The timestamp of a message whose time nobody knows (an exchange charfmt wrote; ``created_at=`` sets another)."""
_NAMESPACE: Final = uuid.UUID("6f1c2a0e-8b4d-5c1e-9a57-3d2f0c7e4b91")
"""The uuid5 namespace of conversation ids (fixed: the same history gives the same id)."""


def export_document(
    fmt: Format,
    history: Any,
    character: Character | None = None,
    *,
    tags: TagTable = DEFAULT_TAGS,
    created_at: str | None = None,
) -> Any:
    """``history`` as a document of ``fmt``: its header (the foreign one it came from, or a new one) and messages."""
    history = check_history(history)
    names = display_names(character)
    stamp = created_at or UNKNOWN_TIME
    cid = conversation_id(history)
    header = None
    if fmt.document.header is not None:
        header = document_of(history, fmt.name) or fmt.document.header(names, cid, stamp)
    senders = fmt.document.senders(header) if fmt.document.senders is not None and header is not None else {}
    job = Exporting(fmt, tags, Writing(names, senders), stamp)
    return fmt.document.write(header, export_messages(job, history, base=cid.hex[:8], header=header))


def export_messages(
    job: Exporting, history: Sequence[Exchange], *, base: str, header: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Every message of ``history``, each exchange's payload on its first message.

    ``base`` prefixes the message ids charfmt makes (``{base}-{exchange}-{message}``);
    ``header`` is the document's header, which a foreign exchange's ``document`` refers to.
    """
    fmt = job.fmt
    out: list[dict[str, Any]] = []
    for n, exchange in enumerate(history):
        eid = f"{base}-{n}"
        draft = build(job, exchange, eid)
        texts = [fmt.text.of(m) for m in draft.messages]
        entry: dict[str, Any] = {
            "v": PAYLOAD_VERSION,
            "id": eid,
            "x": _compact(fmt, exchange, draft, texts, header),
            "shown": [None if s is None else [s[0], s[1], digest(texts[k])] for k, s in enumerate(draft.shown)],
        }
        for k, message in enumerate(draft.messages):
            out.append(fmt.payload.attach(message, entry if k == 0 else {"v": PAYLOAD_VERSION, "of": eid, "m": k}))
    return out


def conversation_id(history: Sequence[Exchange]) -> uuid.UUID:
    """A uuid5 over a digest of the whole history: the same history, the same id."""
    h = hashlib.sha256()
    for exchange in history:
        h.update(_canonical(exchange.model_dump(mode="json", exclude_defaults=True)))
        h.update(b"\n")
    return uuid.uuid5(_NAMESPACE, h.hexdigest())


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8", "surrogatepass")


def check_history(history: Any) -> Sequence[Exchange]:
    """``history`` if it is a sequence of ``Exchange``; a clear ``TypeError`` otherwise."""
    from charfmt.character import Exchange  # noqa: PLC0415

    if isinstance(history, (str, bytes, dict)) or not isinstance(history, Sequence):
        raise TypeError(
            f"history must be a list of charfmt.Exchange (e.g. load_history(...)), not {type(history).__name__}"
        )
    for n, item in enumerate(history):
        if not isinstance(item, Exchange):
            raise TypeError(f"history[{n}] is a {type(item).__name__}, not a charfmt.Exchange")
    return history


def display_names(character: Character | None) -> Names:
    """The user's and the character's display names."""
    if character is None:
        return "User", "Character"
    return character.user_name, character.name


def document_of(history: Sequence[Exchange], fmt: str) -> dict[str, Any] | None:
    """The header of the foreign document of ``fmt`` the history came from, if any."""
    for exchange in history:
        foreign = foreign_of(exchange, fmt)
        if foreign is not None and isinstance(foreign.get("document"), dict):
            return dict(foreign["document"])
    return None


# --- the payload's exchange, compact ------------------------------------------------------------


def _compact(
    fmt: Format, exchange: Exchange, draft: Draft, texts: list[str | None], header: dict[str, Any] | None
) -> dict[str, Any]:
    """The exchange as the payload holds it: defaults left out, shown texts and same-format messages referred to."""
    x = exchange.model_dump(mode="json", exclude_defaults=True)
    for part in (x.get("user"), x.get("reply")):
        if isinstance(part, dict) and part.get("diagnostics"):
            part["diagnostics"] = [short_diagnostic(d) for d in part["diagnostics"]]
    sides = {"u": x.get("user", {}).get("chats", []), "r": x.get("reply", {}).get("chats", [])}
    for k, shown in enumerate(draft.shown):
        text = texts[k]
        if shown is None or shown[0] == "R" or not text:
            continue
        for segment in sides[shown[0]][shown[1]].get("segments", []):
            if segment.get("text") == text:
                segment["text"] = {"m": k}
                break
    foreign = x.get("foreign")
    if not isinstance(foreign, dict) or not isinstance(foreign.get("messages"), list):
        return x
    if foreign.get("format") == fmt.name:
        _same_links(fmt, foreign, draft, header)
    else:
        _blank_links(foreign, draft, texts)
    return x


def _same_links(fmt: Format, foreign: dict[str, Any], draft: Draft, header: dict[str, Any] | None) -> None:
    """A foreign message the document holds again as it was becomes ``{"same": k}``; its header ``"same"``."""
    links = []
    for i, link in enumerate(foreign["messages"]):
        same = draft.same.get(i)
        if same is not None and fmt.payload.strip(fmt.payload.attach(draft.messages[same], {})) == link["message"]:
            links.append({key: v for key, v in link.items() if key != "message"} | {"same": same})
        else:
            links.append(link)
    foreign["messages"] = links
    if header is not None and foreign.get("document") == header:
        foreign["document"] = "same"


def _blank_links(foreign: dict[str, Any], draft: Draft, texts: list[str | None]) -> None:
    """A message of another format whose text a message shows is kept without it: ``{"blank": k}``."""
    source = DECLARED.get(str(foreign.get("format")))
    if source is None:
        return
    by_chat: dict[tuple[str, int], int] = {(s[0], s[1]): k for k, s in enumerate(draft.shown) if s is not None}
    links = []
    for link in foreign["messages"]:
        side = "u" if link.get("side") == "user" else "r"
        at = by_chat.get((side, link["chat"])) if isinstance(link.get("chat"), int) else None
        text = texts[at] if at is not None else None
        original = link.get("message")
        if text and isinstance(original, dict):
            blank = source.text.set(original, "")
            if blank is not None and source.text.set(blank, text) == original:
                links.append({**link, "message": blank, "blank": at})
                continue
        links.append(link)
    foreign["messages"] = links
