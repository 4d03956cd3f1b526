"""The body grammar's promises: TEXT accepts exactly the entities strict parsing decodes; the regex export agrees."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt._grammar.static import terminal_regex
from charfmt._strict.diagnosis import BodyError
from charfmt._strict.elements import parse_body
from charfmt.constrain._grammar_writers import PYTHON as _PY
from charfmt.constrain.export import Rep, Seq, _body_grammar, _write, body_regex, lexeme_friendly
from charfmt.models import Segment
from charfmt.tags import TEXT_TAG
from charfmt.testing import bodies, texts
from charfmt.writer import body_text

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


# --- the exported regex: anchored, so re.match / re.fullmatch / re.search and strict parsing agree ---

_REGEX = re.compile(charfmt.grammar("regex"))
_TEXT_REGEX = re.compile(body_regex("I"))
SUFFIXES = ("", "\n", "\r\n", "\n\n", "\r", " ", "\t", "x", "<", "&", "\n<msg>hi</msg>", "\n<msg>hi</msg>\n")


def _strict_ok(kind: str, body: str) -> bool:
    try:
        parse_body(kind, body)
    except BodyError:
        return False
    return True


def _agree(regex: re.Pattern[str], kind: str, body: str) -> None:
    want = _strict_ok(kind, body)
    assert (regex.match(body) is not None) == want, repr(body)
    assert (regex.fullmatch(body) is not None) == want, repr(body)
    assert (regex.search(body) is not None) == want, repr(body)


@given(body=bodies(), suffix=st.sampled_from(SUFFIXES))
def test_regex_match_agrees_with_strict_parsing(body: str, suffix: str) -> None:
    _agree(_REGEX, "C", body + suffix)


@given(text=texts(min_size=1), suffix=st.sampled_from(SUFFIXES))
def test_plain_body_regex_agrees_with_strict_parsing(text: str, suffix: str) -> None:
    _agree(_TEXT_REGEX, "I", body_text("I", [Segment(tag=TEXT_TAG, text=text)]) + suffix)


def test_regex_rejects_a_trailing_newline() -> None:
    body = "<emo>joy</emo>\n<msg>hi</msg>"
    assert _REGEX.match(body)
    for tail in ("\n", "\r\n"):
        assert not _strict_ok("C", body + tail)
        assert _REGEX.match(body + tail) is None


# --- the engine-friendly rewrite of TEXT and KEY keeps their language ---------------------------

_PY_TERMINALS = {
    name: (terminal_regex(name), re.compile(_write(lexeme_friendly(node), _PY, str)))
    for name, node in _body_grammar()[1].items()
    if name in ("TEXT", "KEY")
}
_PIECES = ("a", " ", "\u3000", "\t", "\n", "<", ">", "&", "&amp;", "&lt;", "&#10;", "&#0;", "&x", ";", "é", "\x07")


@given(name=st.sampled_from(sorted(_PY_TERMINALS)), parts=st.lists(st.sampled_from(_PIECES), max_size=8))
def test_lexeme_friendly_terminals_match_the_same_strings(name: str, parts: list[str]) -> None:
    original, friendly = _PY_TERMINALS[name]
    text = "".join(parts)
    assert (friendly.fullmatch(text) is not None) == (original.fullmatch(text) is not None), repr(text)


def test_lexeme_friendly_shapes() -> None:
    _, terminals = _body_grammar()
    text = lexeme_friendly(terminals["TEXT"])
    assert isinstance(text, Rep) and (text.low, text.high) == (1, None)  # (c | e)+: one repeated item
    key = lexeme_friendly(terminals["KEY"])
    assert isinstance(key, Seq) and isinstance(key.items[0], Rep)  # n+ (w m* n)?
    assert set(_PY_TERMINALS) == {"TEXT", "KEY"}
