"""The read walk: a document of any declared format, message by message, into exchanges.

``read_document(fmt, data)`` reads everything it needs of the format from its declaration:
the document's messages and header (``Document``), who sent each message (``Format.who``),
charfmt's entry (``Format.payload``), and for a message charfmt did not write its text,
reasoning and what is kept only in ``Exchange.foreign``. Exchanges charfmt wrote and foreign
ones may be interleaved; each comes back in document order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from charfmt._strict.envelope import Path
from charfmt.diagnostics import Diagnostic
from charfmt.interop._declaration import Format
from charfmt.interop._document import Source, check_arguments, need, read_json, where
from charfmt.interop._foreign import ForeignReader
from charfmt.interop._payload import PAYLOAD_KEY, exchange_of
from charfmt.interop._restore import Open, Restorer
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Character, Exchange


def read_document(
    fmt: Format, data: Any, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS
) -> list[Exchange]:
    """The exchanges of a document of ``fmt``; ``InteropError`` with a positioned diagnostic if it is not one."""
    check_arguments(character=character, tags=tags)
    doc, source = read_json(data)
    messages, header, notes = fmt.document.open(source, doc)
    reader = DocumentReader(fmt, source, tags, header)
    reader.notes.extend(notes)
    skipped = fmt.skipped(source, messages) if fmt.skipped is not None else {}
    for i, message in enumerate(messages):
        _message(reader, message, fmt.document.at(i), skipped.get(i))
    return reader.done(header)


def _message(reader: DocumentReader, message: Any, path: Path, skipped: Diagnostic | None) -> None:
    """One message: charfmt's (its exchange, or a continuation of it), or a foreign one."""
    fmt, source = reader.fmt, reader.source
    need(source, message, path, dict, "a message object")
    found, notes = fmt.who.check(source, message, path, reader.header)
    ours = fmt.payload.find(source, message, path)
    role = fmt.who.role(source, message, path, found, reader.header)
    if ours is not None:
        reader.ours(ours[0], ours[1], message, path, role)
        return
    text, text_path, dropped = fmt.text.read(source, message, path)
    dropped.extend((what, (*path, key)) for key, what in fmt.dropped if message.get(key))
    if skipped is not None:
        notes.append(skipped)
        text = None
    text, reasoning, reasoning_path = fmt.reasoning.read(message, path, text, text_path)
    reader.foreign.message(
        message,
        path,
        role,
        text,
        text_path=text_path,
        dropped=dropped,
        reasoning=reasoning,
        reasoning_path=reasoning_path,
        notes=notes,
    )


@dataclass
class DocumentReader:
    """A document's messages, read in order: payload exchanges and foreign ones interleaved."""

    fmt: Format
    source: Source
    tags: TagTable = DEFAULT_TAGS
    header: dict[str, Any] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)
    notes: list[Diagnostic] = field(default_factory=list)
    """Diagnostics about reading the document as a foreign one (they go with its first foreign message)."""
    _foreign: ForeignReader | None = None
    _open: Open | None = None
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
                self.exchanges.append(exchange_of(self.source, entry["exchange"], (*at, PAYLOAD_KEY, "exchange")))
                self._v1_open = True
                return
            if self._v1_open:
                return
        elif "x" in entry:
            self._close()
            self._flush_foreign()
            self._open = Open(entry, (*at, PAYLOAD_KEY), {0: (message, path)})
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
        self._orphan(message, path, role, (*at, PAYLOAD_KEY))

    def _orphan(self, message: dict[str, Any], path: Path, role: str, at: Path) -> None:
        stripped = self.fmt.payload.strip(message)
        text = self.fmt.text.of(stripped)
        note = self.source.diagnostic(
            "CF908",
            f"{where(path)}: a continuation of an exchange whose first message (the payload) is missing;"
            " its text read as plain chats",
            at,
        )
        text_path = (*path, *self.fmt.text.path(stripped)) if text else None
        self.foreign.message(stripped, path, role, text, text_path=text_path, notes=[note])

    def _close(self) -> None:
        self._v1_open = False
        current, self._open = self._open, None
        if current is not None:
            self.exchanges.append(Restorer(self.fmt, self.source, self.tags, self.header).restore(current))

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
