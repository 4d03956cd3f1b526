"""A reply written with no JSON around it, read as the dialect table's ``text`` chain says.

``read_text`` walks the chain: the entry that detects the text reads what it is written
in, and the chain goes on after that entry with the rest (front matter, then bare tags
or plain text). What they read is one chat; the request form's reader adds its chats itself.
"""

from __future__ import annotations

from charfmt._lenient import front_matter
from charfmt._lenient.pieces import Result
from charfmt._lenient.prose import read_prose
from charfmt._lenient.state import RawChat, Recovery
from charfmt._lenient.table import DialectRule, Sample, Span, reader
from charfmt._lenient.tag_soup import read_elements


def read_text(state: Recovery, text: str, offset: int, entry: DialectRule | None, *, cut_off: bool = True) -> None:
    """``text`` (at ``offset``), which entry ``entry`` of the ``text`` chain detected, read into ``state.chats``.

    ``cut_off``: ``text`` runs to the end of the input (what it ends inside is cut in half).
    """
    chat = RawChat(len(state.chats), None, "C")
    pos = 0
    while entry is not None:
        span = Span(text[pos:], offset + pos, Result(), state.reading, cut_off=cut_off, state=state, at_start=pos == 0)
        pos += reader(entry, "text")(span)
        if span.own_chats:
            return
        state.take(chat, span.out)
        if pos >= len(text):
            break
        entry = state.walk("text", Sample(text[pos:]), after=entry.name)
    state.chats.append(chat)


def read_tags(span: Span) -> int:
    """Tag elements with no JSON around them: read as a body is (the ``bare-tags`` entry's reader)."""
    rest = span.text
    lead = len(rest) - len(rest.lstrip())
    # The text runs to the end of the input: a tag or an entity begun there is cut in half.
    span.out.extend(read_elements(rest.strip(), span.reading, cut_off=span.cut_off), span.offset + lead)
    return len(rest)


def read_plain(span: Span) -> int:
    """A reply that is only text (the ``plain-text`` entry's reader): prose, or front matter the input ends inside."""
    if span.cut_off and span.at_start and (taken := front_matter.read_cut(span)):
        return taken
    if (taken := front_matter.read_labels(span)) and taken < len(span.text):
        rest = Span(span.text[taken:], span.offset + taken, span.out, span.reading, cut_off=span.cut_off,
                    state=span.state, at_start=False)  # fmt: skip
        return taken + read_prose(rest)
    return taken or read_prose(span)
