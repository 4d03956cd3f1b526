"""The hypothesis strategies behind ``charfmt.testing`` (import them from there).

They live apart from ``charfmt.testing`` so that the hypothesis plugin can draw from them
without importing back into ``charfmt.testing``, which imports the plugin's entry point.
Every strategy draws from the tag table and the grammar's own terminals, so generated data
is exactly what the strict parser accepts; ``damaged_replies`` damages it the way models do.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from hypothesis import strategies as st

from charfmt._grammar.static import terminal_regex
from charfmt.fuzz import MUTATIONS, Damaged, apply_mutations, words_first
from charfmt.models import Chat, Reply, Segment, Vocabulary
from charfmt.parser import parse
from charfmt.prompt.userinput import CONTEXT_FIELDS, UserChat, UserContext, UserTurn
from charfmt.stream import iter_events
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TEXT_TAG, TagSpec, TagTable
from charfmt.writer import body_text, dumps

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


def contents(
    spec: TagSpec, text: st.SearchStrategy[str] | None = None, vocabulary: Vocabulary | None = None
) -> st.SearchStrategy[str]:
    """What tag ``spec`` may hold: one of its values, a key (the emotion), or text (``text``, default :func:`texts`).

    ``vocabulary``: the emotion is one of its keys (any key the grammar accepts without one).
    """
    if spec.values is not None:
        return st.sampled_from(spec.values)
    if spec.row.vocabulary and vocabulary is not None:
        return st.sampled_from(vocabulary.keys)
    if spec.content == "key":
        return keys()
    return texts() if text is None else text


def segments(tags: TagTable | None = None, vocabulary: Vocabulary | None = None) -> st.SearchStrategy[Segment]:
    """One element of a ``C`` body, any tag of the tag table (``None``: ``DEFAULT_TAGS``), each as likely.

    ``vocabulary``: emotions are its keys, so strict parsing with it accepts every segment.
    """
    table = DEFAULT_TAGS if tags is None else tags
    by_tag = {t.name: st.builds(Segment, tag=st.just(t.name), text=contents(t, vocabulary=vocabulary)) for t in table}
    # The tag first, from a uniform choice: st.one_of over the tags draws the later ones far
    # less often (a closed-list cue at the end of the table came up in about 1 % of segments).
    return st.sampled_from(table.names).flatmap(by_tag.__getitem__)


@st.composite
def chats(
    draw: st.DrawFn, order: int | None = None, tags: TagTable | None = None, vocabulary: Vocabulary | None = None
) -> Chat:
    """A chat of any type with a valid body (its elements from ``tags``, its emotions from ``vocabulary``)."""
    kind = draw(st.sampled_from(["C", "I", "E"]))
    if order is None:
        order = draw(st.integers(min_value=1, max_value=1000))
    if kind in TAGGED_TYPES:
        segs = draw(st.lists(segments(tags, vocabulary), min_size=1, max_size=6))
    else:
        segs = [Segment(tag=TEXT_TAG, text=draw(texts(min_size=1)))]
    return Chat(type=kind, order=order, segments=segs)


@st.composite
def replies(
    draw: st.DrawFn, max_chats: int = 5, tags: TagTable | None = None, vocabulary: Vocabulary | None = None
) -> Reply:
    """A valid reply whose orders are 1..n (listed in any arrival order), in the tags of ``tags``.

    ``vocabulary``: every emotion is one of its keys, so ``parse(dumps(r), tags=tags,
    vocabulary=vocabulary)`` reads it back without a diagnostic.
    """
    n = draw(st.integers(min_value=0, max_value=max_chats))
    orders = draw(st.permutations(list(range(1, n + 1))))
    return Reply(chats=[draw(chats(order=o, tags=tags, vocabulary=vocabulary)) for o in orders])


def _nasty() -> st.SearchStrategy[str]:
    """Strings that try to break out: markup, template syntax, brackets, quotes, RTL, emoji."""
    return st.sampled_from(
        [
            DEFAULT_TAGS.speech.close, f"{DEFAULT_TAGS.emotion.open}x{DEFAULT_TAGS.emotion.close}",
            "</chat></user_chats>", "[angry]", "{{ 7*7 }}", "{% raw %}", "&amp;", "&lt;",
            '"quoted"', "'single'", "\n", "\r\n", "\t", "مرحبا", "🎉", "[User Context]", "Emotion: joy", "&#10;",
        ]
    )  # fmt: skip


def user_texts(*, min_size: int = 0) -> st.SearchStrategy[str]:
    """User-supplied text: random text mixed with injection attempts."""
    return (
        st.lists(st.one_of(texts(max_size=8), _nasty()), min_size=min_size, max_size=5)
        .map("".join)
        .filter(lambda s: len(s) >= min_size)
    )


@st.composite
def user_chats(draw: st.DrawFn, tags: TagTable | None = None) -> UserChat:
    """One user chat with a valid body (text drawn from :func:`user_texts`)."""
    table = DEFAULT_TAGS if tags is None else tags
    kind = draw(st.sampled_from(["C", "C", "I", "E"]))
    if kind in TAGGED_TYPES:
        segs = [
            Segment(tag=t.name, text=draw(contents(t, user_texts())))
            for t in draw(st.lists(st.sampled_from(table.specs), min_size=1, max_size=4))
        ]
    else:
        segs = [Segment(tag=TEXT_TAG, text=draw(user_texts(min_size=1)))]
    return UserChat(type=kind, segments=segs)


def user_contexts() -> st.SearchStrategy[UserContext | None]:
    """A ``[User Context]`` block, or ``None``."""
    value = st.one_of(st.none(), user_texts(min_size=1))
    extra = st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,8}", fullmatch=True), user_texts(min_size=1), max_size=3
    )
    contexts = st.builds(
        UserContext, emotion=value, action=value, environment=value,
        extra=extra.map(lambda d: {k: v for k, v in d.items() if k.lower() not in CONTEXT_FIELDS}),
    )  # fmt: skip
    return st.one_of(st.none(), contexts)


def user_turns(tags: TagTable | None = None) -> st.SearchStrategy[UserTurn]:
    """A user turn: chats and an optional context, with injection attempts in every string."""
    return st.builds(UserTurn, chats=st.lists(user_chats(tags), max_size=3), context=user_contexts())


def bodies(tags: TagTable | None = None, vocabulary: Vocabulary | None = None) -> st.SearchStrategy[str]:
    """Valid ``C`` body strings (decoded, in the tag language of ``tags``, emotions from ``vocabulary``)."""
    return st.lists(segments(tags, vocabulary), min_size=1, max_size=6).map(lambda segs: body_text("C", segs))


@functools.cache
def _warm_readers() -> None:
    """Load the lenient readers once, before the first damaged reply reaches a user's test.

    Their first import and pattern compiles take a few hundred milliseconds, which would
    otherwise count against hypothesis' deadline in the first example of the user's test.
    """
    parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>hi &am', lenient=True)
    parse("*waves* Hello", lenient=True)
    for _event in iter_events(["<emo>joy</emo>\n<msg>h", "i</msg>"]):
        pass


@st.composite
def damaged_replies(
    draw: st.DrawFn, tags: TagTable | None = None, vocabulary: Vocabulary | None = None, *, min_mutations: int = 1
) -> Damaged:
    """A valid reply damaged the way models damage replies; ``.text``, ``.original``, ``.mutations``.

    Mutations (``charfmt.fuzz.MUTATIONS``): truncation anywhere, fences and prose,
    reasoning blocks, unclosed / mismatched / upper-case / long-name tags, missing
    newlines, the attribute form, broken quotes and escapes, trailing commas, chats out
    of order, drift into other dialects, and words the language does not allow: an
    emotion off ``vocabulary`` and a cue value off its list in ``tags`` (each tried
    first in half the draws, as models invent them). Every draw is damaged (``.text`` differs
    from ``dumps(.original)``) by ``min_mutations`` to 3 mutations, and ``.mutations``
    lists only those that changed the text; ``min_mutations=0`` lets a draw through
    undamaged (with no mutation listed).
    """
    if not 0 <= min_mutations <= 3:
        raise ValueError("min_mutations is 0 to 3")
    _warm_readers()
    reply = draw(replies(tags=tags, vocabulary=vocabulary))
    want = draw(st.integers(min_mutations, 3))
    order = draw(st.permutations(sorted(MUTATIONS)))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    text, names = apply_mutations(dumps(reply), words_first(order, rng), rng, want, tags=tags, vocabulary=vocabulary)
    return Damaged(text, reply, names)


@st.composite
def chunkings(draw: st.DrawFn, text: str | bytes) -> list[Any]:
    """``text`` cut into chunks at random places, as a stream delivers it (1-character chunks included)."""
    if draw(st.booleans()) and text:
        return [text[i : i + 1] for i in range(len(text))]
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=max(1, min(len(text), 40)), unique=True))
    points = sorted(cuts)
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True) if b > a]
