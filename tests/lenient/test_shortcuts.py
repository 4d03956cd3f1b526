"""The lenient reader's shortcuts: a cheap test or scan in place of an expensive one must answer as it would.

Each shortcut makes a read faster only (``docs/PERFORMANCE.md``, the A/B section): sound only if it
never answers otherwise than what it stands in for, whatever the text.

- ``marks.SCAFFOLDING_HINT`` lets a reader skip ``SCAFFOLDING``'s scan (a dozen alternatives
  tried at every character) over text that holds none of what every marker holds: each match
  of ``SCAFFOLDING`` must hold a match of the hint, and ``scaffolding`` (which tests it first) drops each;
- ``turns._TAG_OR_WORD`` finds a word outside tags in one scan that stops at the first, where
  ``TAG_MARKUP.sub`` rewrote the whole text first.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from charfmt import _control_strings as cs
from charfmt._lenient.marks import SCAFFOLDING, SCAFFOLDING_HINT
from charfmt._lenient.scaffolding import scaffolding
from charfmt._lenient.told import TAG_MARKUP
from charfmt._lenient.turns import _TAG_OR_WORD
from charfmt._lenient.words import LETTER_OR_DIGIT

_PIECES = (
    *cs.CONTROL_STRINGS,
    *(s[:n] for s in cs.CONTROL_STRINGS for n in (1, 2, 3)),  # the starts of markers, cut
    "<", "<<", ">", ">>", "＜", "＞", "[", "]", "/", "／", "|", " ", "\t", "\n", "-", "_",
    "SYS", "S", "USER", "ASSISTANT", "SYSTEM", "A", "Z", "9", "a", "user", "model", "im_start", "word",
)  # fmt: skip
"""What scaffolding is made of, and the text around it: drawn in any order, so mangled markers come out too."""


@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
@example("< SYS]")
@example("< / SYS >>")
@example("<\tSYS>")
@example("[/USER-CONTEXT]")
@example("＜USER_ID＞")
@example("<start_of_turn>model\n")
@example("<end_of_turn>")
@example(">> SYS")
def test_every_scaffolding_match_holds_a_match_of_the_hint(text: str) -> None:
    for m in SCAFFOLDING.finditer(text):
        assert SCAFFOLDING_HINT.search(m.group()) is not None, m.group()


@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
@example("<SYS >")  # (the scan's own pre-test, a list of hints, missed it: the body reader kept what turns drops)
@example("<\tSYS>")
def test_the_scan_drops_every_scaffolding_match(text: str) -> None:
    spans = scaffolding(text, turns=False)
    for m in SCAFFOLDING.finditer(text):
        assert any(a <= m.start() and m.end() <= b for a, b, _ in spans), (m.group(), spans)


def test_the_hint_misses_ordinary_text_and_tags() -> None:
    # (what makes it worth running first: a reply's own markup does not trip it)
    text = '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo><msg>Hi, [smiles] I am Rex.</msg>"}]}'
    assert SCAFFOLDING_HINT.search(text) is None


@given(st.text(st.sampled_from("<>＜＞\n a_1é"), max_size=30))
@example("<a>")
@example("<a><")
@example("a<b>")
@example("<<a>")
@example("<a\n>b")
@example("<a\n>")
@example("＜a>")
@example("_ <_>")
def test_a_word_outside_tags_is_found_as_the_tags_removed_would_show_it(text: str) -> None:
    scanned = any(m.group("word") is not None for m in _TAG_OR_WORD.finditer(text))
    assert scanned == (LETTER_OR_DIGIT.search(TAG_MARKUP.sub(" ", text)) is not None)
