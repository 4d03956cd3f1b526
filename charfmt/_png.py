"""PNG text chunks, read and written with the standard library (the carrier of character cards).

A PNG is a signature and chunks (length, type, data, CRC-32). Character cards keep their JSON,
base64-encoded, in a ``tEXt`` chunk: ``chara`` (V2) or ``ccv3`` (V3). ``text_chunks`` reads every
text chunk (``tEXt``, ``zTXt``, ``iTXt``); ``with_text_chunks`` writes a PNG with the given chunks
in place of any of the same keywords, before ``IEND``. Every malformed file is a ``PngError``.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


class PngError(ValueError):
    """Not a PNG, or a damaged one: the message says what and at which byte."""


def _chunks(data: bytes) -> list[tuple[bytes, bytes, int]]:
    """Each chunk as (type, data, offset of its length field), checked (bounds, CRC) up to ``IEND``."""
    if not data.startswith(SIGNATURE):
        raise PngError("not a PNG file (no PNG signature)")
    out: list[tuple[bytes, bytes, int]] = []
    i = len(SIGNATURE)
    while True:
        if i + 8 > len(data):
            raise PngError(f"cut off at byte {i}: no IEND chunk")
        length, kind = struct.unpack_from(">I4s", data, i)
        end = i + 8 + length
        if end + 4 > len(data):
            raise PngError(f"chunk {kind!r} at byte {i} runs past the end of the file")
        body = data[i + 8 : end]
        (crc,) = struct.unpack_from(">I", data, end)
        if zlib.crc32(kind + body) != crc:
            raise PngError(f"chunk {kind!r} at byte {i}: CRC mismatch (damaged file)")
        out.append((kind, body, i))
        i = end + 4
        if kind == b"IEND":
            return out


def _inflate(data: bytes, limit: int) -> bytes:
    """zlib data, at most ``limit`` bytes of output (a compressed chunk cannot be a bomb)."""
    d = zlib.decompressobj()
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise PngError(f"a compressed text chunk is larger than {limit:,} bytes")
    return out


def text_chunks(data: bytes, *, limit: int) -> dict[str, str]:
    """The text chunks of a PNG: keyword → text (the first of a keyword wins); ``limit`` bounds a chunk."""
    out: dict[str, str] = {}
    for kind, body, offset in _chunks(data):
        if kind not in (b"tEXt", b"zTXt", b"iTXt"):
            continue
        keyword, sep, rest = body.partition(b"\0")
        if not sep:
            raise PngError(f"text chunk at byte {offset} has no keyword separator")
        key = keyword.decode("latin-1")
        if kind == b"tEXt":
            text = rest.decode("latin-1")
        elif kind == b"zTXt":
            text = _inflate(rest[1:], limit).decode("latin-1")
        else:  # iTXt: compression flag, method, language tag, translated keyword, text (UTF-8)
            if len(rest) < 2:
                raise PngError(f"iTXt chunk at byte {offset} is cut off")
            compressed, parts = rest[0], rest[2:].split(b"\0", 2)
            if len(parts) != 3:
                raise PngError(f"iTXt chunk at byte {offset} is cut off")
            raw = _inflate(parts[2], limit) if compressed else parts[2]
            text = raw.decode("utf-8", errors="strict")
        out.setdefault(key, text)
    return out


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def blank_png() -> bytes:
    """A 1x1 transparent PNG (the image of a card exported without one)."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)  # 1x1, 8-bit RGBA
    pixels = zlib.compress(b"\x00\x00\x00\x00\x00")  # filter byte, one transparent pixel
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixels) + _chunk(b"IEND", b"")


def with_text_chunks(image: bytes, texts: dict[str, str]) -> bytes:
    """``image`` with one ``tEXt`` chunk per entry of ``texts`` (ASCII text), replacing chunks of those keywords."""
    chunks = _chunks(image)
    keep = []
    for kind, body, _offset in chunks:
        if kind in (b"tEXt", b"zTXt", b"iTXt") and body.partition(b"\0")[0].decode("latin-1") in texts:
            continue
        if kind != b"IEND":
            keep.append(_chunk(kind, body))
    added = [_chunk(b"tEXt", key.encode("latin-1") + b"\0" + text.encode("ascii")) for key, text in texts.items()]
    return SIGNATURE + b"".join(keep) + b"".join(added) + _chunk(b"IEND", b"")
