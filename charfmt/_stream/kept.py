"""The raw text a stream keeps for its rereads and ``close()``: chunks as fed, ``str`` and ``bytes``.

A list of model tokens costs about 15 bytes a character (an object each): ``compact`` joins
runs of short chunks, so that the kept text costs about what it weighs.
"""

from __future__ import annotations

import codecs
from typing import Final

KEPT_RUN: Final = 256
"""The chunks kept for ``close()`` are joined every this many (``compact``)..."""
_KEPT_SMALL: Final = 64
"""... when the first and the last are at most this long on average (a join costs their size for a moment)."""


def _joined(chunks: list[str | bytes]) -> str | bytes:
    """Chunks of one type joined (``TypeError`` if both types are there)."""
    return "".join(chunks) if isinstance(chunks[0], str) else b"".join(chunks)  # type: ignore[arg-type]


def compact(kept: list[str | bytes], mark: int) -> int:
    """Join the chunks kept since ``mark`` into one (each type on its own: str and bytes may mix); the new mark.

    ``kept[:mark]`` are joined runs already. Each character is copied once more.
    """
    if len(kept[mark]) + len(kept[-1]) > 2 * _KEPT_SMALL:  # long chunks: their objects cost little
        return len(kept)
    tail = kept[mark:]
    del kept[mark:]
    try:
        kept.append(_joined(tail))
    except TypeError:  # str and bytes chunks both: one run of each type at a time
        start = 0
        for k in range(1, len(tail) + 1):
            if k == len(tail) or type(tail[k]) is not type(tail[start]):
                kept.append(_joined(tail[start:k]))
                start = k
    return len(kept)


def raw(kept: list[str | bytes], as_bytes: bool) -> str | bytes:
    """The text kept, as fed: ``str``, or ``bytes`` (``as_bytes``: once any chunk was bytes)."""
    if not as_bytes:
        return "".join(c for c in kept if isinstance(c, str))
    return b"".join(c if isinstance(c, bytes) else c.encode("utf-8", "surrogatepass") for c in kept)


def byte_offset(kept: list[str | bytes], offset: int) -> int:
    """How many bytes the first ``offset`` characters of the kept text hold, counted chunk by chunk (no copy)."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    chars = size = 0
    for chunk in kept:
        text = decoder.decode(chunk if isinstance(chunk, bytes) else chunk.encode("utf-8", "surrogatepass"))
        if chars + len(text) >= offset:
            return size + len(text[: offset - chars].encode("utf-8", "surrogateescape"))
        chars += len(text)
        size += len(text.encode("utf-8", "surrogateescape"))
    return size
