"""Exchange conversations with four neighbouring formats, losslessly: PAM, UACS, group chat, Ailoy.

``export(fmt, history, character)`` writes a JSON-ready document: the text a reader of the
format expects where it expects it (I/E chats as system messages), and the exact exchange
under ``{"charfmt": {"v": 1, ...}}`` in the format's extension point (PAM ``raw_metadata``,
UACS a ``structured_data`` part, group chat ``extra``, Ailoy a ``value`` part).
``read(fmt, text)`` reads it back exactly; a document charfmt did not write becomes plain
chats with diagnostics, and what charfmt has no place for stays in ``Exchange.foreign``.
``text_deltas`` turns Ailoy ``MessageDelta``s (or any text parts) into chunks for ``StreamParser``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from charfmt.interop import ailoy, groupchat, pam, uacs
from charfmt.interop._common import InteropError, dumps_document
from charfmt.interop.ailoy import text_deltas
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange

__all__ = ["FORMATS", "InteropError", "dumps", "export", "read", "text_deltas"]

Exporter = Callable[..., Any]
Reader = Callable[..., "list[Exchange]"]

FORMATS: Final[dict[str, tuple[Exporter, Reader]]] = {
    "pam": (pam.export, pam.read),
    "uacs": (uacs.export, uacs.read),
    "groupchat": (groupchat.export, groupchat.read),
    "ailoy": (ailoy.export, ailoy.read),
}
"""Every format by name: its exporter and its reader."""


def _format(fmt: str) -> tuple[Exporter, Reader]:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; the formats are {', '.join(FORMATS)}") from None


def export(
    fmt: str, history: Sequence[Exchange], character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS
) -> Any:
    """``history`` as a document of ``fmt`` (a JSON-ready dict, or a list for Ailoy)."""
    return _format(fmt)[0](history, character, tags=tags)


def dumps(
    fmt: str, history: Sequence[Exchange], character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS
) -> str:
    """``export`` as JSON text."""
    return dumps_document(export(fmt, history, character, tags=tags))


def read(fmt: str, text: str, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges in a document of ``fmt``; raises ``InteropError`` with positioned diagnostics."""
    return _format(fmt)[1](text, character, tags=tags)
