"""Pattern C, front matter: a ``---`` block of ``key: value`` lines before a reply's text or a body's elements.

Each key the tag table knows (``tags.synonyms``) gives a piece of its tag; any other key,
or one with no value, is reported dropped (``CF615``). Front matter the input ends inside
keeps its whole lines.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._grammar.lexical import decode_entities
from charfmt._lenient.marks import FRONT_MATTER
from charfmt._lenient.pieces import Piece, Result
from charfmt._lenient.table import Span
from charfmt.tags import TagTable

_LINE: Final = re.compile(r"^[ \t]*([\w-]+)[ \t]*:[ \t]*(.*?)[ \t]*$", re.M)
_CUT: Final = re.compile(
    r"\A\s*(?P<open>-{1,3})(?:[ \t]*\n(?P<lines>(?:[ \t]*[\w-]+[ \t]*:[^\n]*\n)*)"
    r"(?P<partial>[ \t]*[\w-]*[ \t]*(?::[^\n]*)?|-{1,3}[ \t]*))?\s*\Z"
)
"""Front matter the input ends inside: ``-``, ``---\nemotion: joy\n-``, ``---\nemo``."""


def read(span: Span) -> int:
    """The dialect table's reader of front matter (the ``text`` and ``body`` chains)."""
    return read_block(span.text, span.offset, span.out, span.reading.tags)


def read_block(text: str, offset: int, out: Result, tags: TagTable) -> int:
    """Pattern C at the start of ``text``: ``---\\nemotion: joy\\naction: jump\\n---``; how many characters it took."""
    fm = FRONT_MATTER.match(text)
    if fm is None:
        return 0
    block = offset + fm.start(1)
    for m in _LINE.finditer(fm.group(1)):
        tag = tags.synonyms.get(m.group(1).lower())
        if tag is None or not m.group(2):
            out.note("CF615", f"front matter key {m.group(1)!r} dropped", block + m.start(), block + m.end())
            continue
        out.note("CF713", f"front matter {m.group(1)!r} read as <{tag}>", block + m.start(), block + m.end())
        out.pieces.append(Piece(tag, decode_entities(m.group(2)), block + m.start(2), block + m.end(2)))
    return fm.end()


_LABELLED: Final = re.compile(
    r"[ \t]*+(?:\*\*)?([^\W\d_][\w-]{0,19})(?:\*\*)?[ \t]*+[:：](?:\*\*)?[ \t]*+(\S[^\n]*?)[ \t]*+(?:\n|\Z)"
)
"""A line a field label opens: ``Emotion: annoyed``, ``**Message:** Forty bolts.``."""


def read_labels(span: Span) -> int:
    """Front matter written without its ``---`` lines: the reply's first lines each a field label of the tag table
    (``Emotion: annoyed`` / ``Action: crosses arms`` / ``Message: Forty bolts.``), each read as its tag's piece
    (``CF713``), never spoken; how many characters it took (0: the text does not open so)."""
    if not span.at_start:
        return 0
    text, pos, tags = span.text, 0, span.reading.tags
    lead = len(text) - len(text.lstrip())
    pos = lead
    while (m := _LABELLED.match(text, pos)) is not None and (tag := tags.synonyms.get(m.group(1).lower())):
        start, end = span.offset + m.start(), span.offset + m.end(2)
        span.out.note("CF713", f"field label {m.group(1)!r} read as <{tag}>", start, end)
        span.out.pieces.append(Piece(tag, decode_entities(m.group(2)), span.offset + m.start(2), end))
        pos = m.end()
    return 0 if pos == lead else pos


def read_cut(span: Span) -> int:
    """Front matter the input ends inside (``---\nemotion: jo``): its whole lines read, the rest dropped.

    Returns how many characters it took (0: the span is no such beginning). Only a reply's
    text (``span.state``) is read so.
    """
    m = _CUT.match(span.text)
    state = span.state
    if m is None or state is None:
        return 0
    text, offset, tags = span.text, span.offset, span.reading.tags
    partial = m.group("partial") or ""
    name = partial.split(":", 1)[0].strip().lower()
    if ":" not in partial and partial.strip("-") and not any(k.startswith(name) for k in tags.synonyms):
        return 0  # "---\nHello": a rule, then text
    if m.group("lines"):
        block = text[: m.start("partial")] + "---\n"
        read_block(block, offset, span.out, tags)
        state.dialect("front-matter")
    start = m.start("partial") if m.group("lines") else m.start("open")
    message = "the reply was cut off inside front matter: the unfinished line dropped"
    state.note("CF610", message, offset + start, offset + len(text))
    return len(text)
