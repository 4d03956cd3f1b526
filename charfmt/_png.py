"""PNG text chunks, read and written with the standard library (the carrier of character cards).

A PNG is a signature and chunks (length, type, data, CRC-32). Character cards keep their JSON,
base64-encoded, in a ``tEXt`` chunk: ``chara`` (V2) or ``ccv3`` (V3). ``text_chunks`` reads the
text chunks (``tEXt``, ``zTXt``, ``iTXt``) of the keywords asked for; ``with_text_chunks`` writes a
PNG with the given chunks in place of any of the same keywords, before ``IEND``. Every malformed
file is a ``PngError``.

A PNG from a stranger may be a bomb: compressed chunks that inflate a thousandfold. So only the
chunks of the keywords asked for are inflated (the first of each keyword; any other chunk is
skipped unread), and what all of them inflate to together is bounded by ``limit``: the inflation
stops at the first byte past it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Final

SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
CARD_KEYWORDS: Final = ("chara", "ccv3")
"""The keywords of the text chunks a character card is kept in (V2 and V3)."""
_TEXT_KINDS: Final = frozenset({b"tEXt", b"zTXt", b"iTXt"})
_STEP: Final = 1 << 20
"""Bytes inflated at most per step."""
_MAX_KEYWORD: Final = 79
"""A keyword is 1 to 79 bytes (PNG specification, 11.3.4.2)."""


class PngError(ValueError):
    """Not a PNG, or a damaged one: the message says what and at which byte."""


def _chunks(data: bytes) -> Iterator[tuple[bytes, memoryview, int]]:
    """Each chunk as (type, data, offset of its length field), checked (bounds, CRC) up to ``IEND``.

    The data is a view into ``data``: a chunk that is skipped costs no copy.
    """
    if not data.startswith(SIGNATURE):
        raise PngError("not a PNG file (no PNG signature)")
    view = memoryview(data)
    i = len(SIGNATURE)
    while True:
        if i + 8 > len(data):
            raise PngError(f"cut off at byte {i}: no IEND chunk")
        length, kind = struct.unpack_from(">I4s", data, i)
        end = i + 8 + length
        if end + 4 > len(data):
            raise PngError(f"chunk {kind!r} at byte {i} runs past the end of the file")
        body = view[i + 8 : end]
        (crc,) = struct.unpack_from(">I", data, end)
        if zlib.crc32(body, zlib.crc32(kind)) != crc:
            raise PngError(f"chunk {kind!r} at byte {i}: CRC mismatch (damaged file)")
        yield kind, body, i
        i = end + 4
        if kind == b"IEND":
            return


def _keyword(body: memoryview) -> tuple[str, int] | None:
    """A text chunk's keyword and where its text starts; ``None`` where it has no keyword (1-79 bytes, NUL)."""
    head = bytes(body[: _MAX_KEYWORD + 1])
    end = head.find(b"\0")
    if end < 1:
        return None
    return head[:end].decode("latin-1"), end + 1


class _Inflater:
    """Inflates compressed text chunks: together at most ``limit`` bytes for the whole file."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.limit = limit

    def inflate(self, data: memoryview, what: str) -> bytearray:
        """``data`` (a zlib stream) inflated; a ``PngError`` naming ``what`` if damaged, cut off or past the limit.

        In steps of ``_STEP`` bytes at most, never a byte past the limit (one step of the whole
        limit would hold it twice: zlib's pieces and the bytes joined from them).
        """
        d = zlib.decompressobj()
        out = bytearray()
        tail: bytes | memoryview = data
        while not d.eof:
            try:
                piece = d.decompress(tail, min(_STEP, self.left + 1 - len(out)))
            except zlib.error as e:
                raise PngError(f"{what}: the compressed text is damaged ({_zlib_reason(e)})") from None
            out += piece
            if len(out) > self.left:
                raise PngError(
                    f"{what}: the compressed text chunks inflate to more than {self.limit:,} bytes (a PNG bomb?)"
                )
            if not piece and len(d.unconsumed_tail) == len(tail):  # no input left, and no end of stream
                raise PngError(f"{what}: the compressed text is cut off")
            tail = d.unconsumed_tail
        self.left -= len(out)
        return out


def _zlib_reason(e: zlib.error) -> str:
    """zlib's words without its error number (``Error -3 while decompressing data: invalid distance``)."""
    return str(e).rpartition(": ")[2] or str(e)


def _text(kind: bytes, body: memoryview, key: str, start: int, *, offset: int, inflater: _Inflater) -> str:
    """The text of one chunk (``start``: where it follows the keyword's NUL)."""
    what = f"the {key!r} {kind.decode('ascii')} chunk at byte {offset}"
    if kind == b"tEXt":
        return bytes(body[start:]).decode("latin-1")
    if kind == b"zTXt":
        if len(body) <= start or body[start] != 0:
            raise PngError(f"{what}: unknown compression method (PNG knows 0, zlib)")
        return inflater.inflate(body[start + 1 :], what).decode("latin-1")
    # iTXt: compression flag, method, language tag, NUL, translated keyword, NUL, text (UTF-8)
    if len(body) < start + 2:
        raise PngError(f"{what} is cut off")
    compressed, method = body[start], body[start + 1]
    rest = bytes(body[start + 2 :])
    language_end = rest.find(b"\0")
    translated_end = rest.find(b"\0", language_end + 1) if language_end >= 0 else -1
    if translated_end < 0:
        raise PngError(f"{what} is cut off")
    if compressed and method != 0:
        raise PngError(f"{what}: unknown compression method (PNG knows 0, zlib)")
    text = memoryview(rest)[translated_end + 1 :]
    raw = inflater.inflate(text, what) if compressed else bytes(text)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PngError(f"{what}: its text is not UTF-8 (byte 0x{raw[e.start]:02X} at offset {e.start})") from None


@dataclass(frozen=True)
class Texts:
    """What ``read_texts`` found: each keyword's text (the first chunk of it), and how many chunks each had."""

    texts: dict[str, str]
    """Keyword → the text of its first chunk."""
    counts: dict[str, int]
    """Keyword → how many text chunks carry it (more than one: the later ones were skipped unread)."""


def read_texts(data: bytes, *, limit: int, keywords: Collection[str] = CARD_KEYWORDS) -> Texts:
    """The text chunks of a PNG under ``keywords``; see ``Texts``.

    Chunks of other keywords, and later chunks of a keyword already read, are skipped without
    being inflated; ``limit`` bounds the bytes all the compressed chunks read inflate to together.
    """
    texts: dict[str, str] = {}
    counts: dict[str, int] = {}
    inflater = _Inflater(limit)
    for kind, body, offset in _chunks(data):
        if kind not in _TEXT_KINDS:
            continue
        found = _keyword(body)
        if found is None:  # no keyword: not one of ours, whatever another tool meant by it
            continue
        key, start = found
        if key not in keywords:
            continue
        counts[key] = counts.get(key, 0) + 1
        if key not in texts:
            texts[key] = _text(kind, body, key, start, offset=offset, inflater=inflater)
    return Texts(texts, counts)


def text_chunks(data: bytes, *, limit: int, keywords: Collection[str] = CARD_KEYWORDS) -> dict[str, str]:
    """The text chunks of a PNG under ``keywords``: keyword → text, the first of a keyword winning (``read_texts``)."""
    return read_texts(data, limit=limit, keywords=keywords).texts


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def blank_png() -> bytes:
    """A 1x1 transparent PNG (the image of a card exported without one)."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)  # 1x1, 8-bit RGBA
    pixels = zlib.compress(b"\x00\x00\x00\x00\x00")  # filter byte, one transparent pixel
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixels) + _chunk(b"IEND", b"")


def with_text_chunks(image: bytes, texts: dict[str, str]) -> bytes:
    """``image`` with one ``tEXt`` chunk per entry of ``texts`` (ASCII text), replacing chunks of those keywords."""
    keep = []
    for kind, body, _offset in _chunks(image):
        if kind in _TEXT_KINDS and (found := _keyword(body)) is not None and found[0] in texts:
            continue
        if kind != b"IEND":
            keep.append(_chunk(kind, bytes(body)))
    added = [_chunk(b"tEXt", key.encode("latin-1") + b"\0" + text.encode("ascii")) for key, text in texts.items()]
    return SIGNATURE + b"".join(keep) + b"".join(added) + _chunk(b"IEND", b"")
