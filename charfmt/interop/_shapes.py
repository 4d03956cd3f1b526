"""The parts declarations are built of: where a message keeps its role, text, charfmt's entry, reasoning.

Each is a small frozen value with the field names of one way of keeping a thing, used by any
format that keeps it that way: a role in a field (``RoleField``), text in an array of typed
parts (``Parts``), charfmt's entry in an extension object (``Extension``) or as a part of its
own (``InPart``), reasoning in a field (``ThinkingField``) or as a flagged message
(``ThoughtMessage``). A way only one format has lives in that format's module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from charfmt._strict.envelope import Path
from charfmt.diagnostics import Diagnostic
from charfmt.interop._declaration import Draft, Dropped, Format, Found, Line, Message, Native, Reasoned
from charfmt.interop._document import Source, a_kind, as_dict, member, need, one_of
from charfmt.interop._payload import PAYLOAD_KEY, PAYLOAD_VERSION, marker


def either(names: Mapping[str, Any] | tuple[str, ...]) -> str:
    """``a, b, c or d``: what a field may hold, for CF901."""
    listed = list(names)
    return f"{', '.join(listed[:-1])} or {listed[-1]}"


def as_written(*roles: str) -> dict[str, str]:
    """Roles a format writes as charfmt reads them (``user``, ``assistant``, ``system``, ``tool``)."""
    return {role: role for role in roles}


@dataclass(frozen=True, slots=True)
class RoleField:
    """The role in a message field (``role``), or in a field of an object (UACS ``actor.role``)."""

    roles: Mapping[str, str]
    """The roles the format has, each with the role charfmt reads it as."""
    key: str = "role"
    within: tuple[str, str] | None = None
    """The object holding the field, and what it is, for CF901: ``("actor", "an actor object {id, role}")``."""

    def check(self, source: Source, message: Message, path: Path, header: Message) -> tuple[str, list[Diagnostic]]:
        """The role as written; CF901 if it is missing or not one of ``roles``."""
        holder, at = message, path
        if self.within is not None:
            holder = member(source, message, path, self.within[0], kind=dict, what=self.within[1])
            at = (*path, self.within[0])
        role = member(source, holder, at, self.key, kind=str, what=either(self.roles))
        return one_of(source, role, self.roles, (*at, self.key)), []

    def role(self, source: Source, message: Message, path: Path, found: str, header: Message) -> str:
        """The role charfmt reads ``found`` as."""
        return self.roles[found]


@dataclass(frozen=True, slots=True)
class Parts:
    """Text in an array of typed parts (``{"type": "text", "text": ...}``) beside parts of other types."""

    key: str
    what: str
    """What the array is, for CF901."""
    new: Mapping[str, str] = field(default_factory=dict)
    """The fields a text part charfmt adds has besides ``type`` and ``text`` (UACS ``format``)."""
    keeps: tuple[str, ...] = ()
    """Message fields that keep a message whose text is removed (Ailoy ``tool_calls``, ``thinking``)."""
    types: tuple[str, ...] = ()
    """The part types a reader accepts, each part checked (Ailoy's closed set); empty: any part."""

    def _texts(self, message: Message) -> list[int]:
        parts = message.get(self.key)
        if not isinstance(parts, list):
            return []
        return [n for n, p in enumerate(parts) if isinstance(p, dict) and p.get("type") == "text"]

    def of(self, message: Message) -> str | None:
        """The text parts' texts, a line each."""
        found = [message[self.key][n].get("text") for n in self._texts(message)]
        texts = [t for t in found if isinstance(t, str)]
        return "\n".join(texts) if texts else None

    def path(self, message: Message) -> Path:
        """The one text part's text, or the whole array."""
        texts = self._texts(message)
        return (self.key, texts[0], "text") if len(texts) == 1 else (self.key,)

    def set(self, message: Message, text: str | None) -> Message | None:
        """The one text part showing ``text`` (a new part if there is none; as it is if there are several)."""
        if text is not None and text == self.of(message):
            return message
        parts = message.get(self.key)
        if not isinstance(parts, list):
            return message
        texts = self._texts(message)
        if text is None:
            rest = [p for n, p in enumerate(parts) if n not in texts]
            if not rest and not any(message.get(k) for k in self.keeps):
                return None
            return {**message, self.key: rest}
        changed = list(parts)
        if len(texts) == 1:
            changed[texts[0]] = {**changed[texts[0]], "text": text}
        elif not texts:
            changed.append({"type": "text", "text": text, **self.new})
        else:
            return message
        return {**message, self.key: changed}

    def each(self, source: Source, message: Message, path: Path) -> Iterator[tuple[Path, Any]]:
        """Every part and its path; CF901 if the array is missing, or a part is not one of ``types``."""
        parts = member(source, message, path, self.key, kind=list, what=self.what)
        for j, part in enumerate(parts):
            at = (*path, self.key, j)
            if self.types:
                need(source, part, at, dict, "a part object")
                kind = member(source, part, at, "type", kind=str, what=either(self.types))
                one_of(source, kind, self.types, (*at, "type"))
            yield at, part

    def read(self, source: Source, message: Message, path: Path) -> tuple[str | None, Path | None, Dropped]:
        """The text parts' texts; every other part dropped (kept in ``Exchange.foreign``)."""
        texts: list[str] = []
        dropped: Dropped = []
        text_path: Path | None = None
        for at, part in self.each(source, message, path):
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
                text_path = (*at, "text") if text_path is None else (*path, self.key)
            else:
                kind = part.get("type") if isinstance(part, dict) else None
                dropped.append((f"{a_kind(kind or 'malformed')} part", at))
        return "\n".join(texts) or None, text_path, dropped


@dataclass(frozen=True, slots=True)
class Extension:
    """charfmt's entry under ``"charfmt"`` in an object the format keeps whole (PAM ``raw_metadata``)."""

    key: str

    def attach(self, message: Message, entry: Message) -> Message:
        """``message`` with the entry in its extension object."""
        ext = as_dict(message.get(self.key))
        return {**message, self.key: {**ext, PAYLOAD_KEY: entry}}

    def strip(self, message: Message) -> Message:
        """``message`` without the entry (and without the extension object, if nothing else is in it)."""
        ext = message.get(self.key)
        if not isinstance(ext, dict) or PAYLOAD_KEY not in ext:
            return message
        rest = {k: v for k, v in ext.items() if k != PAYLOAD_KEY}
        out = {k: v for k, v in message.items() if k != self.key}
        if rest:
            out[self.key] = rest
        return out

    def find(self, source: Source, message: Message, path: Path) -> Found | None:
        """The entry in the extension object, checked."""
        at = (*path, self.key)
        entry = marker(source, message.get(self.key), at)
        return None if entry is None else (entry, at)


@dataclass(frozen=True, slots=True)
class InPart:
    """charfmt's entry as a part of its own among a message's ``parts`` (Ailoy ``value``, UACS ``structured_data``).

    With ``marks``, only an exchange goes in a part: the extension object ``marks`` names says
    which part, and holds the entry of each continuation message.
    """

    parts: Parts
    type: str
    field: str
    """The part's field that holds ``{"charfmt": entry}``."""
    schema_id: str | None = None
    """The part's ``schema_id``; a part is charfmt's if its ``schema_id`` starts with ``family``."""
    family: str = ""
    marks: str | None = None

    def owns(self, part: Any) -> bool:
        """Whether ``part`` is one charfmt wrote."""
        if not isinstance(part, dict) or part.get("type") != self.type:
            return False
        if self.schema_id is not None:
            return str(part.get("schema_id", "")).startswith(self.family)
        return isinstance(part.get(self.field), dict) and PAYLOAD_KEY in part[self.field]

    def attach(self, message: Message, entry: Message) -> Message:
        """``message`` with the entry as a new last part (a continuation's in ``marks``, if set)."""
        if self.marks is not None and "x" not in entry:
            return Extension(self.marks).attach(message, entry)
        found = message.get(self.parts.key)
        parts = found if isinstance(found, list) else []
        tag = {} if self.schema_id is None else {"schema_id": self.schema_id}
        out = {**message, self.parts.key: [*parts, {"type": self.type, **tag, self.field: {PAYLOAD_KEY: entry}}]}
        if self.marks is not None:
            out[self.marks] = {
                **as_dict(message.get(self.marks)),
                PAYLOAD_KEY: {"v": PAYLOAD_VERSION, "exchange_part": len(parts)},
            }
        return out

    def strip(self, message: Message) -> Message:
        """``message`` without charfmt's parts (and marks)."""
        if self.marks is not None:
            message = Extension(self.marks).strip(message)
        parts = message.get(self.parts.key)
        if not isinstance(parts, list):
            return message
        kept = [p for p in parts if not self.owns(p)]
        return message if len(kept) == len(parts) else {**message, self.parts.key: kept}

    def find(self, source: Source, message: Message, path: Path) -> Found | None:
        """The entry in the first of charfmt's parts that holds one (every part checked), or in ``marks``."""
        found: Found | None = None
        for at, part in self.parts.each(source, message, path):
            if found is None and self.owns(part):
                entry = marker(source, part.get(self.field), (*at, self.field))
                found = None if entry is None else (entry, (*at, self.field))
        if found is not None or self.marks is None:
            return found
        meta = message.get(self.marks)
        mark = meta.get(PAYLOAD_KEY) if isinstance(meta, dict) else None
        if not (isinstance(mark, dict) and ("continued" in mark or "of" in mark)):
            return None
        return Extension(self.marks).find(source, message, path)


@dataclass(frozen=True, slots=True)
class ThinkingField:
    """Reasoning in a field of the first assistant message (Ailoy ``thinking``)."""

    key: str

    def write(self, fmt: Format, draft: Draft, text: str, native: Native) -> None:
        """On the first assistant message, or a new empty one."""
        for n, message in enumerate(draft.messages):
            if message.get("role") == "assistant":
                draft.messages[n] = {**message, self.key: text}
                return
        draft.messages.append({**fmt.empty(native, draft.writing), self.key: text})
        draft.shown.append(None)

    def read(self, message: Message, path: Path, text: str | None, text_path: Path | None) -> Reasoned:
        """The field's text, beside the message's own."""
        thinking = message.get(self.key)
        return text, thinking if isinstance(thinking, str) else None, (*path, self.key)


@dataclass(frozen=True, slots=True)
class ThoughtMessage:
    """Reasoning as an assistant message of its own, flagged (PAM ``is_thought``)."""

    flag: str

    def write(self, fmt: Format, draft: Draft, text: str, native: Native) -> None:
        """A flagged message before the first assistant message."""
        at = next((n for n, m in enumerate(draft.messages) if m.get("role") == "assistant"), len(draft.messages))
        thought = fmt.message(Line("assistant", text, "C"), native, draft.writing)
        draft.messages.insert(at, {**thought, self.flag: True})
        draft.shown.insert(at, ("R", 0))

    def read(self, message: Message, path: Path, text: str | None, text_path: Path | None) -> Reasoned:
        """A flagged message's text is reasoning, not speech."""
        if message.get(self.flag) is True:
            return None, text, text_path
        return text, None, text_path
