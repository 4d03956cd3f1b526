"""Exchange conversations with four neighbouring formats, losslessly: PAM, UACS, group chat, Ailoy.

``export(fmt, history, character)`` writes a JSON-ready document: the text a reader of the
format expects where it expects it (I/E chats as system messages), and the exact exchange
under ``{"charfmt": {"v": 2, ...}}`` in the format's extension point (PAM ``raw_metadata``,
UACS a ``structured_data`` part, group chat ``extra``, Ailoy a ``value`` part).
``read(fmt, text)`` reads it back exactly; a document charfmt did not write becomes plain
chats with diagnostics, and what charfmt has no place for stays in ``Exchange.foreign``.
``text_deltas`` turns Ailoy ``MessageDelta``s (or any text parts) into chunks for ``StreamParser``.

Each format is a declaration (``pam.PAM``, ``uacs.UACS``, ``groupchat.GROUPCHAT``,
``ailoy.AILOY``: see ``_declaration``), listed in ``_formats``, and read by the shared walks
``_export`` and ``_read``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal

from charfmt.interop._document import InteropError, dumps_document
from charfmt.interop._export import export_document
from charfmt.interop._formats import DECLARED
from charfmt.interop._read import read_document
from charfmt.interop.ailoy import text_deltas
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Character, Exchange

__all__ = ["CONVERTERS", "FORMATS", "InteropError", "dumps", "export", "read", "speaker_names", "text_deltas"]

Exporter = Callable[..., Any]
Reader = Callable[..., "list[Exchange]"]

CONVERTERS: Final[dict[str, tuple[Exporter, Reader]]] = {
    name: (partial(export_document, fmt), partial(read_document, fmt)) for name, fmt in DECLARED.items()
}
"""Every format by name: its exporter ``(history, character=None, *, tags=, created_at=, names=)`` and its reader
``(data, character=None, *, tags=)``."""

FORMATS: Final = CONVERTERS
"""The old name of ``CONVERTERS`` (public API, kept: ``FORMATS`` also named serve's reply formats and the
command line's output formats, each now named for its job)."""


def _format(fmt: str) -> tuple[Exporter, Reader]:
    try:
        return CONVERTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; the formats are {', '.join(CONVERTERS)}") from None


def export(
    fmt: str,
    history: Sequence[Exchange],
    character: Character | None = None,
    *,
    tags: TagTable = DEFAULT_TAGS,
    created_at: str | None = None,
    names: tuple[str, str] | None = None,
) -> Any:
    """``history`` as a document of ``fmt`` (a JSON-ready dict, or a list for Ailoy).

    Deterministic: the same history gives the same document (ids are derived from it);
    ``created_at`` is the time written where none is known. ``TypeError`` if ``history``
    is not a sequence of ``Exchange``. The speakers are named by ``character``; without one, by
    ``names`` (the user's, the character's: ``speaker_names`` reads a document's), else ``User``
    and ``Character``.
    """
    return _format(fmt)[0](history, character, tags=tags, created_at=created_at, names=names)


def dumps(
    fmt: str,
    history: Sequence[Exchange],
    character: Character | None = None,
    *,
    indent: int | Literal["auto"] | None = "auto",
    tags: TagTable = DEFAULT_TAGS,
    created_at: str | None = None,
    names: tuple[str, str] | None = None,
) -> str:
    """``export`` as JSON text: indented when small (``"auto"``), else compact; ``indent=`` decides."""
    document = export(fmt, history, character, tags=tags, created_at=created_at, names=names)
    return dumps_document(document, indent=indent)


def read(fmt: str, data: Any, character: Character | None = None, *, tags: TagTable = DEFAULT_TAGS) -> list[Exchange]:
    """The exchanges in a document of ``fmt``: JSON text (``str``), ``bytes``, or the decoded ``dict``/``list``.

    Raises ``InteropError`` (a ``CharfmtError``) with positioned diagnostics for bad content
    (for a decoded value, positions are in its JSON text as ``json.dumps`` writes it), and
    ``TypeError`` for data of another type.
    """
    return _format(fmt)[1](data, character, tags=tags)


def speaker_names(fmt: str, data: Any) -> tuple[str, str] | None:
    """The user's and the character's display names a document of ``fmt`` gives, or ``None``.

    PAM's ``participants`` (``user`` and ``assistant``) and a group chat's ``user_details``
    (``user`` and ``character``) name both; UACS and Ailoy documents have no such header. What
    to write another format with when no character is given: ``export(..., names=...)``
    (``charfmt convert`` does). ``data`` as ``read`` takes it; a document that is not JSON
    names nobody (``read`` says why).
    """
    _format(fmt)  # (an unknown format: the error naming the formats)
    declared = DECLARED[fmt]
    doc = data
    if isinstance(data, (str, bytes)):
        try:
            doc = json.loads(data.removeprefix("\ufeff") if isinstance(data, str) else data)
        except ValueError:
            return None
    if declared.document.names is None or declared.document.messages is None or not isinstance(doc, dict):
        return None
    return declared.document.names({k: v for k, v in doc.items() if k != declared.document.messages})
