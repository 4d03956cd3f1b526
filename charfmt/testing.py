"""Hypothesis strategies for charfmt's data, for your tests and ours.

Install with ``pip install charfmt[testing]``. Every strategy draws from the tag
table and the grammar's own terminals, so generated data is exactly what the
strict parser accepts.
"""

from __future__ import annotations

from hypothesis import strategies as st

from charfmt.body import terminal_regex
from charfmt.models import Chat, Reply, Segment
from charfmt.tags import TAGGED_TYPES, TAGS, TEXT_TAG

_CONTROLS_ALLOWED = "\t\n\r"


def texts(*, min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Decoded text content: any printable Unicode plus tab/newline, markup characters included."""
    chars = st.one_of(
        st.characters(exclude_categories=("Cs", "Cc")),
        st.sampled_from("<>&\"'\\" + _CONTROLS_ALLOWED),
    )
    return st.text(chars, min_size=min_size, max_size=max_size)


def keys() -> st.SearchStrategy[str]:
    """Emotion keys the grammar accepts (drawn from its ``KEY`` terminal)."""
    word = st.text(
        st.characters(exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), exclude_characters="<>&"),
        min_size=1,
        max_size=10,
    )
    generated = st.lists(word, min_size=1, max_size=3).map(" ".join)
    key = terminal_regex("KEY")
    return st.one_of(
        st.sampled_from(["joy", "sad", "angry", "surprise", "喜び", "slightly happy"]),
        generated.filter(lambda k: key.fullmatch(k) is not None),
    )


def segments() -> st.SearchStrategy[Segment]:
    """One element of a ``C`` body, any tag of the tag table."""
    return st.one_of(
        *(st.builds(Segment, tag=st.just(t.name), text=keys() if t.content == "key" else texts()) for t in TAGS)
    )


@st.composite
def chats(draw: st.DrawFn, order: int | None = None) -> Chat:
    """A chat of any type with a valid body."""
    kind = draw(st.sampled_from(["C", "I", "E"]))
    if order is None:
        order = draw(st.integers(min_value=1, max_value=1000))
    if kind in TAGGED_TYPES:
        segs = draw(st.lists(segments(), min_size=1, max_size=6))
    else:
        segs = [Segment(tag=TEXT_TAG, text=draw(texts(min_size=1)))]
    return Chat(type=kind, order=order, segments=segs)


@st.composite
def replies(draw: st.DrawFn, max_chats: int = 5) -> Reply:
    """A valid reply whose orders are 1..n (listed in any arrival order)."""
    n = draw(st.integers(min_value=0, max_value=max_chats))
    orders = draw(st.permutations(list(range(1, n + 1))))
    return Reply(chats=[draw(chats(order=o)) for o in orders])
