"""The body grammar's own promises: TEXT accepts exactly the entities strict parsing decodes."""

from __future__ import annotations

import re

from charfmt.body import terminal_regex

ALLOWED = ((0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x7E), (0x80, 0xD7FF), (0xE000, 0x10FFFF))


def _allowed(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ALLOWED)


def test_numeric_references_name_exactly_the_characters_text_allows() -> None:
    text = terminal_regex("TEXT")
    for cp in range(0x110000 + 5):
        want = _allowed(cp)
        assert (text.fullmatch(f"&#x{cp:x};") is not None) == want, hex(cp)
        if cp % 7 == 0 or (cp < 0x10000 and cp % 97 == 0) or cp in (0x110000, 0x10FFFF, 0xD800, 0xDFFF):
            assert (text.fullmatch(f"&#{cp};") is not None) == want, cp
            assert (text.fullmatch(f"&#000{cp};") is not None) == want, cp


def test_text_is_runs_between_entities() -> None:
    text = terminal_regex("TEXT")
    for good in ("a", "&amp;", "a&lt;b&gt;c", "&#x1F600;&#65;", "x\ny\tz", "&amp;&amp;"):
        assert text.fullmatch(good), good
    for bad in ("", "<", "a&b", "&nbsp;", "&#0;", "&#xD800;", "a\x07", "&#1114112;"):
        assert not text.fullmatch(bad), bad
    assert re.compile(text.pattern).groups == text.groups
