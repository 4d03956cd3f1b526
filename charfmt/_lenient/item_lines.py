"""The lines of an imitated list item: the prompt imitated too (issue 39, the fifteenth round's #71 and #81).

Gemma 3 270M imitates the prompt's spec list and writes elements inside it, on the lines of an
item it began (``- "type": "C" = a character speaks`` then, indented, ``<act>unleash</act>``,
``<thought>…``), or begins an item of an imitated section with a request form whose lines go on
below it (``- <user_chats>`` then ``  <chat type="C">``, ``    <emo>grinning</emo>``). ``turns``
drops the item's own line (``CF631``: a list item of the prompt's, a section written as the
prompt's); ``item_lines`` drops what goes on below it as the same item: the lines after it indented
deeper than the first such item's mark, up to a blank line or a line not indented so (``CF631``).

A reply that writes its own elements after the list ended (after a blank line, or at the list's
own indentation and not dropped) keeps them, as before.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient.words import LETTER

_ITEM: Final = re.compile(r"([ \t]*+)[-*•][ \t]")
_TAG: Final = re.compile(r"<[^<>\n]*+>?")
"""A tag: a line with no letter (``words.LETTER``) outside its tags, only markup and the spec's placeholder
(``<msg>...</``), is left to the reading as before (``CF628``)."""
_IMITATED: Final = "CF631"
Span = tuple[int, int, str, str]
"""A span to blank: start, end, code, message (``told.Span``; ``turns.foreign`` calls ``item_lines``)."""


def item_lines(text: str, dropped: list[Span]) -> list[Span]:
    """The spans of ``text`` that go on an item of the prompt's list imitated (``dropped``: the spans already
    found, merged, in order), each a line's words."""
    spans: list[Span] = []
    indent: int | None = None  # the mark's indentation of the first imitated item of the run, while one runs
    pos = 0
    for line in text.split("\n"):
        a, pos = pos, pos + len(line) + 1
        b = a + len(line)
        lead = len(line) - len(line.lstrip(" \t"))
        item = _ITEM.match(line)
        if not line.strip():
            indent = None
        elif item is not None and any(s[2] == _IMITATED and s[0] <= a + item.end() < s[1] for s in dropped):
            indent = lead if indent is None else indent
        elif indent is not None and lead > indent:
            if LETTER.search(_TAG.sub("", line)) is not None and not any(s[0] < b and a + lead < s[1] for s in dropped):
                said = "a line going on an item of the prompt's list imitated: the prompt imitated, dropped"
                spans.append((a + lead, b, _IMITATED, said))
        else:
            indent = None
    return spans
