"""One chat written with no JSON around it, read as the dialect table's ``text`` chain says.

Front matter (whole, or cut off by the end of the input), then the elements of a body
(bare tags) or prose (plain text).
"""

from __future__ import annotations

import re
from typing import Final

from charfmt import dialects
from charfmt._lenient.state import RawChat, Recovery
from charfmt.dialects import Sample
from charfmt.soup import Result, read_body, read_front_matter, read_prose

_CUT_FRONT_MATTER: Final = re.compile(
    r"\A\s*(?P<open>-{1,3})(?:[ \t]*\n(?P<lines>(?:[ \t]*[\w-]+[ \t]*:[^\n]*\n)*)"
    r"(?P<partial>[ \t]*[\w-]*[ \t]*(?::[^\n]*)?|-{1,3}[ \t]*))?\s*\Z"
)
"""Front matter the input ends inside: ``-``, ``---\nemotion: joy\n-``, ``---\nemo``."""


def read_text(
    state: Recovery,
    chat: RawChat,
    text: str,
    offset: int,
    entry: dialects.DialectRule | None,
    *,
    cut_off: bool = True,
) -> None:
    """One chat written with no JSON around it: front matter, then tags or prose, as the ``text`` chain says.

    ``cut_off``: ``text`` runs to the end of the input (what it ends inside is cut in half).
    """
    pos = 0
    if cut_off and (entry is None or entry.name == "plain-text"):
        pos = _cut_front_matter(state, chat, text, offset)
        if pos:
            entry = state.walk("text", Sample(text[pos:]), after="front-matter")
    if entry is not None and entry.name == "front-matter":
        found = Result()
        pos = read_front_matter(text, 0, found, state.tags)
        state.take(chat, found, lambda i: offset + i)
        entry = state.walk("text", Sample(text[pos:]), after="front-matter")
    rest = text[pos:]
    if entry is not None and entry.name == "bare-tags":
        inner = offset + pos + len(rest) - len(rest.lstrip())
        # The text runs to the end of the input: a tag or an entity begun there is cut in half.
        result = read_body(rest.strip(), state.vocabulary, cut_off=cut_off, tags=state.tags)
    else:
        inner = offset + pos
        result = Result()
        read_prose(rest, state.vocabulary, result, tags=state.tags, cut_off=cut_off)
    state.take(chat, result, lambda i: inner + i)


def _cut_front_matter(state: Recovery, chat: RawChat, text: str, offset: int) -> int:
    """Front matter the input ends inside (``---\nemotion: jo``): its whole lines read, the rest dropped.

    Returns how many characters it took (0: ``text`` is no such beginning).
    """
    m = _CUT_FRONT_MATTER.match(text)
    if m is None:
        return 0
    partial = m.group("partial") or ""
    name = partial.split(":", 1)[0].strip().lower()
    if ":" not in partial and partial.strip("-") and not any(k.startswith(name) for k in state.tags.synonyms):
        return 0  # "---\nHello": a rule, then text
    found = Result()
    if m.group("lines"):
        block = text[: m.start("partial")] + "---\n"
        read_front_matter(block, 0, found, state.tags)
        state.dialect("front-matter")
    state.take(chat, found, lambda i: offset + i)
    start = m.start("partial") if m.group("lines") else m.start("open")
    message = "the reply was cut off inside front matter: the unfinished line dropped"
    state.note("CF610", message, offset + start, offset + len(text))
    return len(text)
