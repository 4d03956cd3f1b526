"""The patterns of ``charfmt._lenient.marks``: a cheap test before an expensive scan must never miss a match.

``SCAFFOLDING_HINT`` lets a reader skip ``SCAFFOLDING``'s scan (a dozen alternatives tried at
every character) over text that holds none of what every marker holds: sound only if each
match of ``SCAFFOLDING`` holds a match of the hint, whatever the text around it.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from charfmt import _control_strings as cs
from charfmt._lenient.marks import SCAFFOLDING, SCAFFOLDING_HINT

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


def test_the_hint_misses_ordinary_text_and_tags() -> None:
    # (what makes it worth running first: a reply's own markup does not trip it)
    text = '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo><msg>Hi, [smiles] I am Rex.</msg>"}]}'
    assert SCAFFOLDING_HINT.search(text) is None
