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
import re
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.diagnostics import CharfmtError
from charfmt.interop._declaration import Draft, Format, Names, Writing
from charfmt.interop._document import InteropError, check_arguments, not_json, where
from charfmt.interop._formats import DECLARED
from charfmt.interop._messages import Exporting, build, foreign_of
from charfmt.interop._payload import PAYLOAD_VERSION, digest, short_diagnostic
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Character, Exchange

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
    names: Names | None = None,
) -> Any:
    """``history`` as a document of ``fmt``: its header (the foreign one it came from, or a new one) and messages.

    ``names``: the user's and the character's display names where no ``character`` is given
    (``interop.speaker_names`` reads them from a document).

    ``TypeError`` for arguments of the wrong type; ``CharfmtError`` naming the field for an
    ``Exchange.foreign`` that is not what the reader of its format writes (``check_foreign``).
    """
    history = [check_foreign(n, exchange) for n, exchange in enumerate(check_history(history))]
    check_arguments(character=character, tags=tags, created_at=created_at)
    names = display_names(character, history, _checked_names(names))
    stamp = created_at or UNKNOWN_TIME
    cid = conversation_id(history)
    header = None
    if fmt.document.header is not None:
        header = document_of(history, fmt.name)
        _check_header(fmt, history, header)
        header = header or fmt.document.header(names, cid, stamp)
    messages = _messages(fmt, history, header, Exporting(fmt, tags, Writing(names, {}), stamp), cid.hex[:8])
    if header is not None and fmt.document.complete is not None:
        completed = fmt.document.complete(header, messages)
        if completed != header:  # written again under it: a payload refers to the header it is written under
            header = completed
            messages = _messages(fmt, history, header, Exporting(fmt, tags, Writing(names, {}), stamp), cid.hex[:8])
    _check_originals(fmt, history, header)
    return fmt.document.write(header, messages)


def _messages(
    fmt: Format, history: Sequence[Exchange], header: dict[str, Any] | None, job: Exporting, base: str
) -> list[dict[str, Any]]:
    """The messages of ``history`` under ``header`` (whose senders' names they take)."""
    if header is not None and fmt.document.senders is not None:
        job = Exporting(fmt, job.tags, Writing(job.writing.names, fmt.document.senders(header)), job.stamp)
    return export_messages(job, history, base=base, header=header)


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
    from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

    if isinstance(history, (str, bytes, dict)) or not isinstance(history, Sequence):
        raise TypeError(
            f"history must be a list of charfmt.Exchange (e.g. load_history(...)), not {type(history).__name__}"
        )
    for n, item in enumerate(history):
        if not isinstance(item, Exchange):
            raise TypeError(f"history[{n}] is a {type(item).__name__}, not a charfmt.Exchange")
    return history


# --- Exchange.foreign, as the readers write it ------------------------------------------------

LINK_KEYS: Final[dict[str, tuple[Callable[[Any], bool], str]]] = {
    "message": (lambda v: v is None or isinstance(v, dict), "an object (the original message) or null (none)"),
    "side": (lambda v: v in ("user", "reply"), "'user' or 'reply' (whose message it was)"),
    "chat": (lambda v: type(v) is int and v >= 0, "a whole number of 0 or more (the chat it became)"),
    "reasoning": (lambda v: isinstance(v, bool), "true or false (whether it held the model's reasoning)"),
}
"""The keys of a link in ``Exchange.foreign["messages"]``, what each holds (``message`` always; no ``side``: reply)."""
_REQUIRED: Final = ("message",)


def check_foreign(n: int, exchange: Exchange) -> Exchange:
    """``history[n]`` with its ``foreign`` checked and as JSON (tuples as lists), or ``CharfmtError`` naming the field.

    ``foreign`` is what a reader kept: JSON, and for a declared format (``format``) its
    ``messages`` (links: the original ``message``, its ``side``, the ``chat`` it became,
    ``reasoning``) and its ``document`` header as that format's reader checks a document.
    Anything else in it is passed through untouched.
    """
    foreign = exchange.foreign
    if foreign is None:
        return exchange
    at = f"history[{n}].foreign"
    problem = not_json(foreign)
    if problem is not None:
        raise CharfmtError(f"{at}{_dot(where(problem[0]))}: {problem[1]}")
    foreign = json.loads(json.dumps(foreign, ensure_ascii=False))
    fmt = DECLARED.get(foreign["format"]) if isinstance(foreign.get("format"), str) else None
    if "format" in foreign and not isinstance(foreign["format"], str):
        raise CharfmtError(f"{at}.format: expected a string (the format the exchange was read from)")
    if fmt is not None:
        _check_links(at, foreign)
        if not isinstance(foreign.get("document", {}), dict):
            found = _kind(foreign["document"])
            raise CharfmtError(f"{at}.document: expected an object (the document's header), found {found}")
    return exchange.model_copy(update={"foreign": foreign})


def _dot(path: str) -> str:
    return "" if path == "the document" else path if path.startswith("[") else f".{path}"


def _check_links(at: str, foreign: dict[str, Any]) -> None:
    """``foreign["messages"]``: an array of links, each key holding what ``LINK_KEYS`` says."""
    links = foreign.get("messages", [])
    if not isinstance(links, list):
        raise CharfmtError(f"{at}.messages: expected an array of links to the original messages (message, side...)")
    for i, link in enumerate(links):
        if not isinstance(link, dict):
            raise CharfmtError(f"{at}.messages[{i}]: expected an object with message, side..., found {_kind(link)}")
        for key in _REQUIRED:
            if key not in link:
                raise CharfmtError(f"{at}.messages[{i}]: missing required key {key!r} ({LINK_KEYS[key][1]})")
        for key, (good, what) in LINK_KEYS.items():
            if key in link and not good(link[key]):
                raise CharfmtError(f"{at}.messages[{i}].{key}: expected {what}, found {_kind(link[key])}")


def _check_header(fmt: Format, history: Sequence[Exchange], header: dict[str, Any] | None) -> None:
    """The header of the document an exchange came from, as ``fmt``'s reader checks one; else ``CharfmtError``."""
    from charfmt.interop._read import read_document  # noqa: PLC0415 (the read walk, run on what export writes)

    if not header:
        return
    try:
        read_document(fmt, fmt.document.write(header, []))
    except InteropError as e:
        n = next(n for n, ex in enumerate(history) if (foreign_of(ex, fmt.name) or {}).get("document") == header)
        raise _named(f"history[{n}].foreign", fmt, e) from None


def _check_originals(fmt: Format, history: Sequence[Exchange], header: dict[str, Any] | None) -> None:
    """The original messages ``fmt``'s document holds again, read under ``header`` as its reader reads them.

    So an export writes back only what reads back: a hand-edited original message is a
    ``CharfmtError`` naming its field of ``Exchange.foreign`` (``history[0].foreign.messages[2].message.role``).
    """
    from charfmt.interop._read import read_document  # noqa: PLC0415 (a cycle: importing charfmt.interop._read imports this module)

    for n, exchange in enumerate(history):
        foreign = foreign_of(exchange, fmt.name)
        links = [(i, link["message"]) for i, link in enumerate(foreign["messages"] if foreign else [])]
        kept = [(i, message) for i, message in links if message is not None]
        if not kept:
            continue
        try:
            read_document(fmt, fmt.document.write(header, [message for _, message in kept]))
        except InteropError as e:
            raise _named(f"history[{n}].foreign", fmt, e, [i for i, _ in kept]) from None


def _named(at: str, fmt: Format, error: InteropError, links: Sequence[int] = ()) -> CharfmtError:
    """A reader's error about a document export would write, as the field of ``foreign`` it is about.

    ``links``: the link each message of that document is the original message of.
    """
    said = error.first.message
    found = re.match(rf"{re.escape(fmt.document.messages or '')}\[(\d+)\](.*)", said, re.S)
    if found is not None and int(found[1]) < len(links):  # "messages[2].role: ..." -> that message's link
        return CharfmtError(f"{at}.messages[{links[int(found[1])]}].message{found[2]}")
    place, _, why = said.partition(": ")  # the header's own checks: "conversation_meta: missing ..."
    return CharfmtError(f"{at}.document{_dot(place)}: {why}")


def _kind(value: Any) -> str:
    """A JSON value's kind in a few words: ``a string ('x')``, ``a number (3)``, ``null``."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    names = {str: "a string", int: "a number", float: "a number", list: "an array", dict: "an object"}
    shown = f" ({json.dumps(value, ensure_ascii=False)[:40]})" if isinstance(value, (str, int, float)) else ""
    return names.get(type(value), type(value).__name__) + shown


def _checked_names(names: Any) -> Names | None:
    """``names`` if it is two strings (``TypeError`` if not)."""
    if names is None or (isinstance(names, tuple) and len(names) == 2 and all(isinstance(n, str) for n in names)):
        return names
    raise TypeError(f"names must be a tuple of two strings (the user's, the character's), not {names!r:.60}")


def display_names(character: Character | None, history: Sequence[Exchange] = (), names: Names | None = None) -> Names:
    """The user's and the character's display names: the character's, else ``names``, else those of the first
    foreign document in ``history`` that names both (a group chat's ``user_details``), else ``User`` and
    ``Character``."""
    if character is not None:
        return character.user_name, character.name
    if names is not None:
        return names
    for exchange in history:
        foreign = exchange.foreign if isinstance(exchange.foreign, dict) else {}
        fmt = DECLARED.get(str(foreign.get("format")))
        header = foreign.get("document")
        if fmt is not None and fmt.document.names is not None and isinstance(header, dict):
            found = fmt.document.names(header)
            if found is not None:
                return found
    return "User", "Character"


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
