"""Text characters strict parsing rejects, as lenient reading keeps them: `<` and `&` noted, cut entities dropped."""

from __future__ import annotations

import re
from html.entities import html5
from typing import Final

from charfmt._grammar.lexical import ENTITY, decode_entities
from charfmt._lenient.pieces import Result

_ANY_AMP: Final = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31};|#[0-9]{1,7};|#[xX][0-9a-fA-F]{1,6};)?")
_CUT_ENTITY: Final = re.compile(r"&(?:#[0-9]{0,7}|#[xX][0-9a-fA-F]{0,6}|[A-Za-z][A-Za-z0-9]{0,31})?\Z")


def ampersands(text: str) -> list[tuple[int, int, str]]:
    """Each ``&`` in ``text`` that strict parsing would reject, with what lenient reading does."""
    found = []
    for m in _ANY_AMP.finditer(text):
        if ENTITY.fullmatch(m.group()) and decode_entities(m.group()) != m.group():
            continue
        if m.group()[1:] in html5 and len(m.group()) > 1:
            found.append((m.start(), m.end(), f"HTML entity {m.group()} decoded"))
        else:
            found.append((m.start(), m.end(), f"{m.group() or '&'!r} is not an entity: kept as text"))
    return found


def note_literals(chunk: str, offset: int, out: Result) -> None:
    """Note each '<' and '&' in text that strict parsing would reject (kept as text, or decoded)."""
    if "<" in chunk or "＜" in chunk:
        at = offset + min(i for i in (chunk.find("<"), chunk.find("＜")) if i >= 0)
        out.note("CF707", "a '<' that starts no tag is kept as text", at, at + 1)
    if "&" in chunk:
        for a, b, message in ampersands(chunk):
            out.note("CF707", message, offset + a, offset + b)


def drop_cut_entity(text: str, out: Result, offset: int = 0) -> str:
    """``text`` without an entity cut off at its very end (``&am``), noted: half an entity is not text."""
    m = _CUT_ENTITY.search(text, max(0, len(text) - 40))
    if m is None:
        return text
    name = m.group()[1:]
    if name[:1].isalpha() and not any(known.startswith(name) for known in html5):
        return text  # "&xyz" at the end can never become an entity: it is text
    out.note("CF716", f"an entity cut off at the end is dropped: {m.group()!r}", offset + m.start(), offset + len(text))
    return text[: m.start()]
