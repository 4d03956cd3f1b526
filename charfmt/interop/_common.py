"""What the four format modules share: the versioned payload, visible text, foreign import, errors.

An exporter turns each exchange into *lines* (one per chat that has something to show: the
user's C chats as ``user``, the character's C chats as ``assistant``, I/E chats as
``system``) and puts the exchange under ``{"charfmt": {"v": 2, "id": ..., "x": ..., "shown": ...}}``
in the format's extension point of the exchange's first message; the other messages of the
exchange carry ``{"charfmt": {"v": 2, "of": <id>, "m": <index>}}``.

The payload is compact: the exchange without its default values, a segment whose text is
exactly what a message shows stored as ``{"m": k}`` (a reference to message ``k``), a foreign
message that is the document's own message stored as ``{"same": k}``. ``shown`` says, per
message, which chat it shows and a digest of the text it showed; an importer that finds a
message's text changed takes the visible edit (a plain chat, ``CF907``) and one that finds a
message gone drops its chat (``CF908``): a payload never silently wins over what a reader of
the format sees. Version 1 payloads (the whole exchange under ``"exchange"``) still read.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import ValidationError

from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.envelope import HugeInteger, JSONError, Locator, NonFinite, Path, decode
from charfmt.models import Chat, Reply, Segment, validation_message
from charfmt.tags import DEFAULT_TAGS, TEXT_TAG, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

KEY: Final = "charfmt"
"""The key charfmt's data sits under in every format's extension point."""
VERSION: Final = 2
"""The payload version written; an importer reads 1 and 2 and refuses any other (CF902)."""
READS: Final = (1, 2)
UNKNOWN_TIME: Final = "1970-01-01T00:00:00Z"
"""The timestamp of a message whose time nobody knows (an exchange charfmt wrote; ``created_at=`` sets another)."""
DOCUMENT_DEPTH: Final = 256
"""The deepest nesting a conversation document may have (charfmt's own need fewer than 20 levels)."""
INDENT_LIMIT: Final = 1 << 20
"""``dumps`` indents a document up to this many characters; a bigger one is written compact."""
_NAMESPACE: Final = uuid.UUID("6f1c2a0e-8b4d-5c1e-9a57-3d2f0c7e4b91")
"""The uuid5 namespace of conversation ids (fixed: the same history gives the same id)."""

Role = Literal["user", "assistant", "system"]
Side = Literal["u", "r"]


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
    for n, chat in enumerate(exchange.user.chats):
        role: Role = "user" if chat.type == "C" else "system"
        out.append(Line(role, visible_text(chat.type, chat.segments, tags), chat.type, "u", n))
    for n, reply_chat in enumerate(exchange.reply.chats):
        role = "assistant" if reply_chat.type == "C" else "system"
        text = visible_text(reply_chat.type, reply_chat.segments, tags)
        out.append(Line(role, text, reply_chat.type, "r", n, reply_chat.speaker))
    return [line for line in out if line.text]


def digest(text: str | None) -> str:
    """A short digest of the text a message shows (what ``shown`` records)."""
    return hashlib.blake2b((text or "").encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8", "surrogatepass")


# --- formats ------------------------------------------------------------------------------------


class Format:
    """What the shared exporter and reader need of one format (each module has one, ``SPEC``)."""

    name: str = ""
    extension: str = ""
    """The key of the message's extension object (``raw_metadata``, ``metadata``, ``extra``); Ailoy has none."""

    def new_message(self, line: Line, native: Native) -> dict[str, Any]:
        """A message of this format showing ``line``."""
        raise NotImplementedError

    def empty_message(self, native: Native) -> dict[str, Any]:
        """The one message of an exchange with nothing to show."""
        raise NotImplementedError

    def text_of(self, message: dict[str, Any]) -> str | None:
        """The text a reader of the format sees in ``message`` (``None``: it has none)."""
        raise NotImplementedError

    def text_path(self, message: dict[str, Any]) -> Path:
        """Where that text is, relative to the message."""
        raise NotImplementedError

    def set_text(self, message: dict[str, Any], text: str | None) -> dict[str, Any] | None:
        """``message`` showing ``text`` instead.

        ``None`` removes its text (and the whole message, if nothing else is left in it).
        """
        raise NotImplementedError

    def native_of(self, message: dict[str, Any]) -> Native:
        """The id, time and speaker name ``message`` has in this format's own fields."""
        raise NotImplementedError

    def attach(self, message: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
        """``message`` with charfmt's entry in its extension point."""
        ext = as_dict(message.get(self.extension))
        return {**message, self.extension: {**ext, KEY: entry}}

    def strip(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` without charfmt's entry (what ``attach`` added)."""
        ext = message.get(self.extension)
        if not isinstance(ext, dict) or KEY not in ext:
            return message
        rest = {k: v for k, v in ext.items() if k != KEY}
        out = {k: v for k, v in message.items() if k != self.extension}
        if rest:
            out[self.extension] = rest
        return out

    def add_reasoning(self, messages: list[dict[str, Any]], shown: list[Any], text: str, native: Native) -> None:
        """Write the model's reasoning where the format expects it; by default only the payload holds it."""


def spec(name: str) -> Format:
    """The ``Format`` of a format by name (imported lazily: the modules import this one)."""
    import importlib  # noqa: PLC0415

    module = importlib.import_module(f"charfmt.interop.{name}")
    found: Format = module.SPEC
    return found


# --- export -------------------------------------------------------------------------------------


@dataclass
class _Built:
    messages: list[dict[str, Any]]
    shown: list[tuple[Side | Literal["R"], int] | None]
    same: dict[int, int] = field(default_factory=dict)
    """Foreign link index -> the message that is its original (same-format passthrough)."""


def conversation_id(history: Sequence[Exchange]) -> uuid.UUID:
    """A uuid5 over a digest of the whole history: the same history, the same id."""
    h = hashlib.sha256()
    for exchange in history:
        h.update(_canonical(exchange.model_dump(mode="json", exclude_defaults=True)))
        h.update(b"\n")
    return uuid.uuid5(_NAMESPACE, h.hexdigest())


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


def export_messages(
    fmt: Format,
    history: Sequence[Exchange],
    tags: TagTable,
    *,
    names: tuple[str, str],
    base: str,
    stamp: str,
    header: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every message of ``history`` in ``fmt``, each exchange's payload on its first message.

    ``base`` prefixes the message ids charfmt makes (``{base}-{exchange}-{message}``);
    ``header`` is the document's header, which a foreign exchange's ``document`` refers to.
    """
    out: list[dict[str, Any]] = []
    for n, exchange in enumerate(history):
        eid = f"{base}-{n}"
        built = _build(fmt, exchange, tags, eid=eid, names=names, stamp=stamp)
        texts = [fmt.text_of(m) for m in built.messages]
        entry: dict[str, Any] = {
            "v": VERSION,
            "id": eid,
            "x": _compact(fmt, exchange, built, texts, header),
            "shown": [None if s is None else [s[0], s[1], digest(texts[k])] for k, s in enumerate(built.shown)],
        }
        for k, message in enumerate(built.messages):
            out.append(fmt.attach(message, entry if k == 0 else {"v": VERSION, "of": eid, "m": k}))
    return out


def _build(fmt: Format, exchange: Exchange, tags: TagTable, *, eid: str, names: tuple[str, str], stamp: str) -> _Built:
    foreign = exchange.foreign
    if foreign_of(exchange, fmt.name) is not None:
        assert foreign is not None
        return _rewritten(fmt, exchange, foreign, tags, eid=eid, names=names, stamp=stamp)
    natives = _natives(exchange)
    built = _Built([], [])
    for k, line in enumerate(lines(exchange, tags)):
        built.messages.append(fmt.new_message(line, _native(natives, line, f"{eid}-{k}", names, stamp)))
        built.shown.append((line.side, line.index))
    if exchange.reply.reasoning:
        native = natives.get(("R", 0)) or Native(f"{eid}-r", stamp, names[1])
        fmt.add_reasoning(built.messages, built.shown, exchange.reply.reasoning, native)
    if not built.messages:
        built.messages.append(fmt.empty_message(Native(f"{eid}-0", stamp, None)))
        built.shown.append(None)
    return built


def _native(natives: dict[tuple[str, int], Native], line: Line, mid: str, names: tuple[str, str], stamp: str) -> Native:
    found = natives.get((line.side, line.index))
    name = _name(line, names)
    if found is None:
        return Native(mid, stamp, name)
    return Native(found.id or mid, found.time or stamp, found.name or name)


def _name(line: Line, names: tuple[str, str]) -> str | None:
    """Who a message is from: the user's or the character's name, a scene's speaker, none for the system."""
    if line.speaker is not None:
        return line.speaker
    return names[0] if line.role == "user" else names[1] if line.role == "assistant" else None


def _natives(exchange: Exchange) -> dict[tuple[str, int], Native]:
    """Ids, times and speakers of a foreign exchange's messages, by the chat each became."""
    foreign = exchange.foreign
    if not isinstance(foreign, dict) or not isinstance(foreign.get("messages"), list):
        return {}
    try:
        source = spec(str(foreign.get("format")))
    except (ImportError, AttributeError):
        return {}
    out: dict[tuple[str, int], Native] = {}
    for link in foreign["messages"]:
        message = link.get("message") if isinstance(link, dict) else None
        if not isinstance(message, dict):
            continue
        side = "u" if link.get("side") == "user" else "r"
        if isinstance(link.get("chat"), int):
            out.setdefault((side, link["chat"]), source.native_of(message))
        elif link.get("reasoning"):
            out.setdefault(("R", 0), source.native_of(message))
    return out


def _rewritten(
    fmt: Format,
    exchange: Exchange,
    foreign: dict[str, Any],
    tags: TagTable,
    *,
    eid: str,
    names: tuple[str, str],
    stamp: str,
) -> _Built:
    """The original messages of a foreign exchange, each showing its chat as the exchange has it now.

    A message whose chat was removed or emptied loses its text (and goes, if nothing else is
    left in it); a chat with no message (added in Python) gets a new message after the others
    of its side.
    """
    built = _Built([], [])
    chats: dict[str, Sequence[Any]] = {"u": exchange.user.chats, "r": exchange.reply.chats}
    linked: set[tuple[str, int]] = set()
    last = {"u": -1, "r": -1}
    for i, link in enumerate(foreign["messages"]):
        message: dict[str, Any] | None = link["message"]
        side: Side = "u" if link.get("side") == "user" else "r"
        k = link.get("chat")
        shown: tuple[Side, int] | None = None
        if isinstance(k, int) and message is not None:
            have: Sequence[Any] = chats[side]
            text = visible_text(have[k].type, have[k].segments, tags) if k < len(have) else ""
            linked.add((side, k))
            if text:
                message = fmt.set_text(message, text)
                shown = (side, k)
            else:
                message = fmt.set_text(message, None)
        if message is None:
            continue
        if fmt.text_of(message) is None:
            shown = None
        built.same[i] = len(built.messages)
        built.messages.append(message)
        built.shown.append(shown)
        last[side] = len(built.messages)
    added = [line for line in lines(exchange, tags) if (line.side, line.index) not in linked]
    for n, line in enumerate(added):
        at = last[line.side] if last[line.side] >= 0 else len(built.messages)
        built.messages.insert(at, fmt.new_message(line, Native(f"{eid}-n{n}", stamp, _name(line, names))))
        built.shown.insert(at, (line.side, line.index))
        built.same = {i: (m + 1 if m >= at else m) for i, m in built.same.items()}
        last = {s: (v + 1 if v >= at else v) for s, v in last.items()}
        last[line.side] = at + 1
    if not built.messages:
        built.messages.append(fmt.empty_message(Native(f"{eid}-0", stamp, None)))
        built.shown.append(None)
    return built


def _compact(
    fmt: Format, exchange: Exchange, built: _Built, texts: list[str | None], header: dict[str, Any] | None
) -> dict[str, Any]:
    x = exchange.model_dump(mode="json", exclude_defaults=True)
    for part in (x.get("user"), x.get("reply")):
        if isinstance(part, dict) and part.get("diagnostics"):
            part["diagnostics"] = [_short(d) for d in part["diagnostics"]]
    sides = {"u": x.get("user", {}).get("chats", []), "r": x.get("reply", {}).get("chats", [])}
    for k, shown in enumerate(built.shown):
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
        links = []
        for i, link in enumerate(foreign["messages"]):
            same = built.same.get(i)
            if same is not None and fmt.strip(fmt.attach(built.messages[same], {})) == link["message"]:
                links.append({key: v for key, v in link.items() if key != "message"} | {"same": same})
            else:
                links.append(link)
        foreign["messages"] = links
        if header is not None and foreign.get("document") == header:
            foreign["document"] = "same"
        return x
    try:
        source = spec(str(foreign.get("format")))
    except (ImportError, AttributeError):
        return x
    by_chat: dict[tuple[str, int], int] = {(s[0], s[1]): k for k, s in enumerate(built.shown) if s is not None}
    links = []
    for link in foreign["messages"]:
        side = "u" if link.get("side") == "user" else "r"
        at = by_chat.get((side, link["chat"])) if isinstance(link.get("chat"), int) else None
        text = texts[at] if at is not None else None
        original = link.get("message")
        if text and isinstance(original, dict):
            blank = source.set_text(original, "")
            if blank is not None and source.set_text(blank, text) == original:
                links.append({**link, "message": blank, "blank": at})
                continue
        links.append(link)
    foreign["messages"] = links
    return x


_DIAGNOSTIC_FIELDS: Final = ("code", "message", "line", "column", "offset", "end")


def _short(d: dict[str, Any]) -> list[Any]:
    """A diagnostic as ``[code, message, line, column, offset, end]`` (+ an object of the rest)."""
    from charfmt.diagnostics import CODES  # noqa: PLC0415

    out: list[Any] = [d.get(k) for k in _DIAGNOSTIC_FIELDS]
    rest = {k: v for k, v in d.items() if k not in _DIAGNOSTIC_FIELDS}
    if rest.get("severity", "error") == CODES.get(str(d.get("code")), ("error",))[0]:
        rest.pop("severity", None)
    else:
        rest.setdefault("severity", "error")
    return [*out, rest] if rest else out


def _long(d: Any) -> Any:
    """What ``_short`` wrote, as a diagnostic's fields again (anything else as it is, for validation to judge)."""
    from charfmt.diagnostics import CODES  # noqa: PLC0415

    if not isinstance(d, list) or len(d) not in (6, 7) or (len(d) == 7 and not isinstance(d[6], dict)):
        return d
    out = dict(zip(_DIAGNOSTIC_FIELDS, d, strict=False))
    out["severity"] = CODES.get(str(out["code"]), ("error",))[0]
    if len(d) == 7:
        out.update(d[6])
    return out


def dumps_document(doc: Any, *, indent: int | Literal["auto"] | None = "auto") -> str:
    """A document as JSON text (UTF-8 kept readable); ``"auto"`` indents only a small one.

    Never writes ``NaN`` or ``Infinity`` (``ValueError``: nothing charfmt reads holds one).
    """
    compact = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if indent == "auto":
        indent = 2 if len(compact) <= INDENT_LIMIT else None
    if indent is None:
        return compact + "\n"
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=indent) + "\n"


# --- reading ------------------------------------------------------------------------------------


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


_TOO_DEEP: Final = (
    f"JSON nested too deeply: more than {DOCUMENT_DEPTH} levels (level {DOCUMENT_DEPTH + 1} opens here);"
    " a conversation document needs far fewer"
)
_BRACKET: Final = re.compile(r'[\[\]{}]|"(?:[^"\\]|\\.)*+"')


def _level_at(text: str, level: int) -> int:
    depth = 0
    for m in _BRACKET.finditer(text):
        ch = m.group()[0]
        if ch in "[{":
            depth += 1
            if depth > level:
                return m.start()
        elif ch in "]}":
            depth -= 1
    return 0


def as_text(data: Any) -> str:
    """A document given as ``str`` or ``bytes`` (UTF-8, or UTF-16/32 with a BOM) as text."""
    if isinstance(data, str):
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        encoding = "utf-8"
        if raw.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
            encoding = "utf-32"
        elif raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            encoding = "utf-16"
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as e:
            good = raw[: e.start].decode(encoding, "replace")
            diag = Diagnostic.at(good + "\ufffd", "CF901", f"the document is not valid {encoding.upper()}", len(good))
            raise InteropError([diag], good + "\ufffd") from None
    raise TypeError(f"a document is str, bytes or an already decoded dict/list, not {type(data).__name__}")


def read_json(data: Any) -> tuple[Any, Source]:
    """Decode a document (text, bytes, or a decoded dict/list); bad JSON is an ``InteropError`` where it broke.

    A decoded value is written out again for positions. ``NaN``, ``Infinity``, numbers too
    big for a float and nesting deeper than ``DOCUMENT_DEPTH`` are errors (CF909, CF110).
    """
    if isinstance(data, (dict, list)):
        try:
            text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        except ValueError:
            raise CharfmtError("the document holds NaN or Infinity, which JSON cannot say") from None
        except TypeError as e:
            raise TypeError(f"the document holds a value JSON cannot say: {e}") from None
    else:
        text = as_text(data)
    source = Source(text.removeprefix("\ufeff"))
    try:
        decoded = decode(source.text)
    except JSONError as e:
        if e.code == "CF110":
            at = _level_at(source.text, DOCUMENT_DEPTH)
            message = _TOO_DEEP
            raise InteropError([Diagnostic.at(source.text, "CF110", message, at)], source.text) from None
        raise InteropError([Diagnostic.at(source.text, e.code, e.message, e.pos)], source.text) from None
    _check_values(decoded.value, source)
    return decoded.value, source


def _check_values(value: Any, source: Source) -> None:
    """CF909 at the first number JSON cannot carry; CF110 past ``DOCUMENT_DEPTH`` levels."""
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            children: Iterable[tuple[Any, Any]] = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            bad = None
            if isinstance(item, NonFinite) or (isinstance(item, float) and not math.isfinite(item)):
                bad = f"{where(path)}: {source.text[slice(*source.span(path))]} is not a finite number"
            elif isinstance(item, HugeInteger):
                bad = f"{where(path)}: an integer of {len(item.digits)} digits"
            if bad is not None:
                raise source.fail("CF909", f"{bad}; a conversation document holds none", path)
            continue
        if len(path) >= DOCUMENT_DEPTH:
            raise source.fail("CF110", _TOO_DEEP, path)
        stack.extend((child, (*path, key)) for key, child in children)


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
    if not isinstance(entry, dict) or entry.get("v") not in READS:
        version = entry.get("v") if isinstance(entry, dict) else None
        raise source.fail(
            "CF902",
            f"{where(at)}: charfmt payload version {version!r}; this charfmt reads {' and '.join(map(str, READS))}",
            at,
        )
    if entry["v"] == 1:
        if "exchange" not in entry and entry.get("continued") is not True:
            raise source.fail("CF902", f"{where(at)}: charfmt payload holds neither an exchange nor a continuation", at)
    elif not (
        (isinstance(entry.get("x"), dict) and isinstance(entry.get("shown"), list) and isinstance(entry.get("id"), str))
        or (isinstance(entry.get("of"), str) and isinstance(entry.get("m"), int))
    ):
        raise source.fail("CF902", f"{where(at)}: charfmt payload holds neither an exchange nor a continuation", at)
    return entry


def exchange_of(source: Source, value: Any, at: Path) -> Exchange:
    """The exchange in a payload; CF902 naming the field if it does not validate."""
    from charfmt.character import Exchange  # noqa: PLC0415 (character loads prompts machinery)

    try:
        return Exchange.model_validate(value)
    except ValidationError as e:
        raise source.fail(
            "CF902", f"{where(at)}: charfmt payload is not an exchange: {validation_message(e)}", at
        ) from None


# --- foreign documents -----------------------------------------------------------------------

_BAD_TEXT: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
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
    from charfmt.userinput import UserChat  # noqa: PLC0415

    segment = Segment(tag=tags.speech.name, text=text) if kind == "C" else Segment(tag=TEXT_TAG, text=text)
    if user:
        return UserChat(type=kind, segments=[segment])
    return Chat(type=kind, order=order, segments=[segment])


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
        from charfmt.userinput import UserTurn  # noqa: PLC0415

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


_Edit = tuple[str | None, Diagnostic]
"""A message's text as edited (``None``: the message is gone) and the diagnostic saying so."""


@dataclass
class _Open:
    """A version 2 exchange being read: its payload and the messages of it found so far."""

    entry: dict[str, Any]
    at: Path
    messages: dict[int, tuple[dict[str, Any], Path]] = field(default_factory=dict)


@dataclass
class Reader:
    """A document's messages, read in order: payload exchanges and foreign ones interleaved."""

    fmt: Format
    source: Source
    tags: TagTable = DEFAULT_TAGS
    header: dict[str, Any] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)
    notes: list[Diagnostic] = field(default_factory=list)
    """Diagnostics about reading the document as a foreign one (they go with its first foreign message)."""
    _foreign: ForeignReader | None = None
    _open: _Open | None = None
    _v1_open: bool = False

    @property
    def foreign(self) -> ForeignReader:
        """The reader of foreign messages (closing an exchange of charfmt's before the first)."""
        self._close()
        if self._foreign is None:
            self._foreign = ForeignReader(self.fmt.name, self.source, self.tags)
            self._foreign.notes = self.notes
        return self._foreign

    def _flush_foreign(self) -> None:
        if self._foreign is not None:
            self._foreign.flush()
            self.exchanges.extend(self._foreign.out)
            self._foreign.out = []

    def ours(self, entry: dict[str, Any], at: Path, message: dict[str, Any], path: Path, role: str = "user") -> None:
        """A message with charfmt's entry (at ``at``): a new exchange from its payload, or a continuation.

        A continuation whose exchange is not the one open (its first message deleted, or moved)
        is read as a foreign message, with CF908.
        """
        if entry["v"] == 1:
            if "exchange" in entry:
                self._close()
                self._flush_foreign()
                self.exchanges.append(exchange_of(self.source, entry["exchange"], (*at, KEY, "exchange")))
                self._v1_open = True
                return
            if self._v1_open:
                return
        elif "x" in entry:
            self._close()
            self._flush_foreign()
            self._open = _Open(entry, (*at, KEY), {0: (message, path)})
            return
        else:
            current = self._open
            if (
                current is not None
                and entry["of"] == current.entry["id"]
                and 0 < entry["m"] < len(current.entry["shown"])
                and entry["m"] not in current.messages
            ):
                current.messages[entry["m"]] = (message, path)
                return
        self._orphan(message, path, role, (*at, KEY))

    def _orphan(self, message: dict[str, Any], path: Path, role: str, at: Path) -> None:
        stripped = self.fmt.strip(message)
        text = self.fmt.text_of(stripped)
        note = self.source.diagnostic(
            "CF908",
            f"{where(path)}: a continuation of an exchange whose first message (the payload) is missing;"
            " its text read as plain chats",
            at,
        )
        text_path = (*path, *self.fmt.text_path(stripped)) if text else None
        self.foreign.message(stripped, path, role, text, text_path=text_path, notes=[note])

    def _close(self) -> None:
        self._v1_open = False
        current, self._open = self._open, None
        if current is not None:
            self.exchanges.append(self._rebuild(current))

    def _rebuild(self, current: _Open) -> Exchange:
        from charfmt.userinput import UserTurn  # noqa: PLC0415

        fmt, entry = self.fmt, current.entry
        got = {k: (fmt.strip(m), p) for k, (m, p) in current.messages.items()}
        texts = {k: fmt.text_of(m) for k, (m, _) in got.items()}
        shown: list[Any] = entry["shown"]
        changed: dict[tuple[str, int], _Edit] = {}
        reasoning: _Edit | None = None
        for k, item in enumerate(shown):
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
                at = (*path, *fmt.text_path(message)) if text is not None else path
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
        x = entry["x"]
        for part in (x.get("user"), x.get("reply")):
            if isinstance(part, dict) and isinstance(part.get("diagnostics"), list):
                part["diagnostics"] = [_long(d) for d in part["diagnostics"]]
        for chat in [*as_list(as_dict(x.get("user")).get("chats")), *as_list(as_dict(x.get("reply")).get("chats"))]:
            for segment in as_list(as_dict(chat).get("segments")):
                ref = segment.get("text") if isinstance(segment, dict) else None
                if isinstance(ref, dict):
                    m = ref.get("m")
                    segment["text"] = (texts.get(m) or "") if isinstance(m, int) else ref
        foreign = x.get("foreign")
        if isinstance(foreign, dict) and isinstance(foreign.get("messages"), list):
            self._resolve_foreign(foreign, got, texts)
        exchange = exchange_of(self.source, x, (*current.at, "x"))
        if not changed and reasoning is None:
            return exchange
        user_chats, user_diags, user_map = self._apply(exchange.user.chats, "u", changed, user=True)
        reply_chats, reply_diags, reply_map = self._apply(exchange.reply.chats, "r", changed, user=False)
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

    def _apply(
        self, chats: Sequence[Any], side: str, changed: dict[tuple[str, int], _Edit], *, user: bool
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

    def _resolve_foreign(
        self, foreign: dict[str, Any], got: dict[int, tuple[dict[str, Any], Path]], texts: dict[int, str | None]
    ) -> None:
        if foreign.get("document") == "same":
            foreign["document"] = self.header
        links = []
        for link in foreign["messages"]:
            same = link.get("same") if isinstance(link, dict) else None
            blank = link.get("blank") if isinstance(link, dict) else None
            if isinstance(same, int):
                if same in got:
                    links.append({key: v for key, v in link.items() if key != "same"} | {"message": got[same][0]})
            elif isinstance(blank, int) and isinstance(link.get("message"), dict):
                original = spec(str(foreign.get("format"))).set_text(link["message"], texts.get(blank) or "")
                links.append({key: v for key, v in link.items() if key != "blank"} | {"message": original})
            else:
                links.append(link)
        foreign["messages"] = links

    def done(self, document: dict[str, Any]) -> list[Exchange]:
        """Every exchange, in document order."""
        self._close()
        if self._foreign is not None:
            self._flush_foreign()
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
