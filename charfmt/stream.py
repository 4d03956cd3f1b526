"""Streaming: events as model output arrives, never a partial tag, identical to the batch result.

``StreamParser`` (the reader itself lives in ``charfmt._scanner``; its docstring says how it
works) takes chunks of ``str`` or ``bytes``; ``iter_events`` and ``aiter_events`` wrap it for
iterables and async iterables; ``collect`` rebuilds the ``Reply`` a sequence of events describes.

Where the package was built with a C compiler, ``charfmt._scanner`` also exists compiled with
mypyc (``charfmt._scanner_c``, made by ``hatch_build.py`` at install): the same source, the same
events, about twice as fast. It is used only while it was compiled from the very
``_scanner.py`` installed next to it (a digest of the source is compiled in), so an edited
source never runs stale code; ``CHARFMT_PURE_PYTHON=1`` in the environment turns it off.
``COMPILED`` says which one runs.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Final

from charfmt import _scanner
from charfmt.events import Event
from charfmt.models import Vocabulary
from charfmt.tags import TagTable

__all__ = ["COMPILED", "StreamParser", "aiter_events", "collect", "iter_events", "source_digest"]


def source_digest(source: bytes) -> str:
    """The digest ``hatch_build.py`` compiles into ``charfmt._scanner_c`` (SHA-256 of ``_scanner.py``)."""
    return hashlib.sha256(source).hexdigest()


def _compiled_twin() -> ModuleType | None:
    """``charfmt._scanner_c`` if it was compiled from the ``_scanner.py`` next to it, else ``None``."""
    if os.environ.get("CHARFMT_PURE_PYTHON"):
        return None
    try:
        twin = importlib.import_module("charfmt._scanner_c")
        source = Path(_scanner.__file__).read_bytes()
    except (ImportError, OSError):  # not built (no compiler), or no source to compare with
        return None
    return twin if getattr(twin, "SOURCE_DIGEST", None) == source_digest(source) else None


_IMPL: Final = _compiled_twin() or _scanner
COMPILED: Final = _IMPL is not _scanner
"""Whether the mypyc-compiled reader runs (``False``: the pure-Python one, same events)."""

if TYPE_CHECKING:
    from charfmt._scanner import StreamParser, collect
else:
    StreamParser = _IMPL.StreamParser
    collect = _IMPL.collect


def iter_events(
    chunks: Iterable[str | bytes],
    *,
    lenient: bool = True,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
) -> Iterator[Event]:
    """Events from an iterable of chunks, yielded as each chunk arrives."""
    parser = StreamParser(lenient=lenient, vocabulary=vocabulary, tags=tags)
    for chunk in chunks:
        yield from parser.feed(chunk)
    yield from parser.close()


async def aiter_events(
    chunks: AsyncIterable[str | bytes],
    *,
    lenient: bool = True,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
) -> AsyncIterator[Event]:
    """Events from an async iterable of chunks (an SDK stream), yielded as each chunk arrives."""
    parser = StreamParser(lenient=lenient, vocabulary=vocabulary, tags=tags)
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.close():
        yield event
