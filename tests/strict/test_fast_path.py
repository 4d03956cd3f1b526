"""The strict fast path (one regular expression per body, trusted models) against the full path.

``charfmt.parse`` first tries ``charfmt._strict.fast.read_reply``, which accepts only input that needs
no diagnostic at all; everything else goes to the full path (the envelope checks and the
LALR body parser), which explains what is wrong. These tests hold the two to one result:
for every input the strategies and the case files produce, valid or damaged, strict and
lenient, ``parse`` with the fast path equals ``parse`` without it (the ``Reply``,
diagnostics included, or the ``ParseError`` and its diagnostics), and the fast path takes
an input exactly when the full path finds nothing to say about it.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import CASES, MARK, load_cases
from hypothesis import example, given
from hypothesis import strategies as st

from charfmt import ParseError, Reply, Vocabulary, dumps
from charfmt._strict.diagnosis import BodyError
from charfmt._strict.elements import _widened, fast_reader, parse_body
from charfmt._strict.fast import read_reply
from charfmt.models import Chat, Segment
from charfmt.parser import DEFAULT_MAX_SIZE, _parse
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, TAGGED_TYPES, TAGS, TEXT_TAG, TagSpec
from charfmt.testing import bodies, damaged_replies, keys, replies, texts

KEY_TAGS = [t.name for t in TAGS if t.content == "key"]


def outcome(text: str | bytes, *, lenient: bool, fast: bool, vocabulary: Vocabulary | None = None, **kw: Any) -> Any:
    """What a caller observes: the reply (with its diagnostics), or the error and its diagnostics."""
    max_size = kw.get("max_size", DEFAULT_MAX_SIZE)
    try:
        reply = _parse(text, lenient, vocabulary, max_size, fast=fast)
    except ParseError as e:
        return ("error", e.diagnostics, str(e))
    return ("reply", reply, repr(reply), reply.model_dump())


def check(text: str | bytes, vocabulary: Vocabulary | None = None, max_size: int = DEFAULT_MAX_SIZE) -> bool:
    """Fast path == full path, strict and lenient; returns whether the fast path took the input."""
    for lenient in (False, True):
        fast = outcome(text, lenient=lenient, fast=True, vocabulary=vocabulary, max_size=max_size)
        full = outcome(text, lenient=lenient, fast=False, vocabulary=vocabulary, max_size=max_size)
        assert fast == full
    taken = read_reply(text, vocabulary, max_size)
    strict = outcome(text, lenient=False, fast=False, vocabulary=vocabulary, max_size=max_size)
    clean = strict[0] == "reply" and not strict[1].diagnostics
    assert (taken is not None) == clean, "the fast path takes exactly the input that needs no diagnostic"
    if taken is not None:
        assert taken == strict[1]
        assert [type(c) for c in taken.chats] == [Chat] * len(taken.chats)
        assert all(type(s) is Segment for c in taken.chats for s in c.segments)
        assert Reply.model_validate(taken.model_dump()) == taken  # equal to the validated models
    return taken is not None


def wrap(*chats: tuple[Any, Any, Any]) -> str:
    return json.dumps({"chats": [{"type": k, "order": o, "body": b} for k, o, b in chats]}, ensure_ascii=False)


# --- valid replies, written several ways ----------------------------------------------


def written(reply: Reply, way: int, rnd: random.Random) -> str | bytes:
    """``reply`` as JSON text: canonical, pretty, ASCII-escaped, keys shuffled, or UTF-8 bytes."""
    if way == 0:
        return dumps(reply)
    if way == 1:
        return dumps(reply, indent=2)
    doc = json.loads(dumps(reply))
    if way == 2:
        return " \n" + json.dumps(doc, ensure_ascii=True) + "\n\t"
    if way == 3:
        shuffled = []
        for chat in doc["chats"]:
            items = list(chat.items())
            rnd.shuffle(items)
            shuffled.append(dict(items))
        return json.dumps({"chats": shuffled}, ensure_ascii=False)
    return dumps(reply).encode("utf-8")


@given(replies(), st.integers(0, 4), st.randoms(use_true_random=False))
def test_valid_replies_take_the_fast_path(reply: Reply, way: int, rnd: random.Random) -> None:
    assert check(written(reply, way, rnd)), "a valid reply with orders 1..n is read by the fast path"


@given(replies(), st.data())
def test_vocabulary(reply: Reply, data: st.DataObject) -> None:
    """Keys the vocabulary lists as written stay on the fast path; any other key is the full path's decision."""
    used = sorted({s.text for c in reply.chats for s in c.segments if s.tag in KEY_TAGS})
    extra = data.draw(st.lists(keys(), max_size=2))
    dropped = data.draw(st.sets(st.sampled_from(used))) if used else set()
    listed = [k for k in dict.fromkeys([*used, *extra]) if k not in dropped]
    folded = [k.strip().casefold() for k in listed]
    if not listed or len(set(folded)) != len(folded):
        return
    policy = data.draw(st.sampled_from(["error", "alias", "nearest", "keep"]))
    vocabulary = Vocabulary.of(*listed, policy=policy)
    assert check(dumps(reply), vocabulary) == (not dropped)


# --- bodies, valid and damaged character by character -------------------------------

NASTY = ["<", ">", "&", ";", "/", "\n", "\r", " ", "\t", "\x00", "\x1c", "\x7f", "\ud800", "#", "x", "A", "é", "🎉"]


@st.composite
def damaged_bodies(draw: st.DrawFn) -> str:
    """A valid body with a few characters inserted, deleted or replaced (markup and controls favoured)."""
    body = draw(bodies())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(body)))
        what = draw(st.sampled_from(["insert", "delete", "replace"]))
        ch = draw(st.one_of(st.sampled_from(NASTY), st.sampled_from([t.open for t in TAGS] + [t.close for t in TAGS])))
        if what == "insert":
            body = body[:at] + ch + body[at:]
        elif what == "delete":
            body = body[:at] + body[at + 1 :]
        else:
            body = body[:at] + ch + body[at + 1 :]
    return body


@given(bodies())
def test_valid_bodies(body: str) -> None:
    assert fast_reader()("C", body) == parse_body("C", body)
    assert check(wrap(("C", 1, body)))


@given(st.one_of(damaged_bodies(), texts(max_size=30)), st.sampled_from(sorted(CHAT_TYPES)))
@example("<emo>joy</emo>\n", "C")
@example("<msg>a &#0; b</msg>", "C")
@example("<msg>&#x110000;</msg>", "C")
@example("<msg>&#0000065;&#x00041;</msg>", "C")
@example("<msg>&#127;</msg>", "C")
@example("<msg>&#55296;</msg>", "C")
@example("<msg>&#xdfff;</msg>", "C")
@example("<msg>&#8;&#9;</msg>", "C")
@example("<msg>&#1114112;</msg>", "C")
@example("&#" + "0" * 5000 + "65;", "I")
@example("&#" + "1" * 5000 + ";", "E")
@example("<msg>&#12a;</msg>", "C")
@example("<msg>&#;</msg>", "C")
@example("<msg>&#x;</msg>", "C")
@example("<emo> joy</emo>", "C")
@example("<msg></msg>", "C")
@example("", "E")
@example("a\nb &amp; c", "I")
@example("<act>waves</msg>", "C")
@example("<msg>hi</act>\n<emo>joy</emo>", "C")
@example("<emo>joy</emo>\n<thought>hm</msg>", "C")
@example("<msg></thought>", "C")
@example("<emo>joy </emo>", "C")
@example("<emo>slightly happy</emo>", "C")
@example("<emo>\u3000joy</emo>", "C")
@example("<emo>j</emo>", "C")
def test_any_body(body: str, kind: str) -> None:
    """On any body the reader accepts exactly what the LALR parser accepts, with the same elements."""
    read = fast_reader()(kind, body)
    try:
        expected = parse_body(kind, body)
    except BodyError:
        assert read is None
    else:
        assert read == expected
    check(wrap((kind, 1, body)))


# --- the envelope: shapes, keys, orders, types ----------------------------------------

VALUES: list[Any] = [1, 2, 0, -1, 1.0, True, None, "1", "C", "c", "I", "E", "X", [], {}, [1], 10**30]


@st.composite
def envelopes(draw: st.DrawFn) -> str:
    """Reply-like JSON text with the envelope's every way to go wrong: keys missing, extra,
    repeated or reordered; orders out of line; types and bodies of the wrong kind; other tops."""
    n = draw(st.integers(0, 4))
    chats = []
    for i in range(n):
        kind = draw(st.sampled_from(sorted(CHAT_TYPES)))
        body = draw(bodies()) if kind in TAGGED_TYPES else draw(texts(min_size=1, max_size=10)).replace("<", "")
        fields: list[tuple[str, Any]] = [("type", kind), ("order", i + 1), ("body", body)]
        for _ in range(draw(st.integers(0, 2))):
            what = draw(st.sampled_from(["drop", "extra", "repeat", "swap", "value"]))
            if what == "drop" and fields:
                fields.pop(draw(st.integers(0, len(fields) - 1)))
            elif what == "extra":
                fields.append((draw(st.sampled_from(["note", "Type", "bodies", "order "])), 1))
            elif what == "repeat" and fields:
                fields.append(draw(st.sampled_from(fields)))
            elif what == "swap" and len(fields) > 1:
                a, b = draw(st.permutations(range(len(fields))))[:2]
                fields[a], fields[b] = fields[b], fields[a]
            elif what == "value" and fields:
                at = draw(st.integers(0, len(fields) - 1))
                fields[at] = (fields[at][0], draw(st.sampled_from(VALUES)))
        chats.append("{" + ",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=False)}" for k, v in fields) + "}")
    if draw(st.booleans()):
        chats = draw(st.permutations(chats))
    array = "[" + ",".join(chats) + "]"
    top = draw(
        st.sampled_from(
            [
                '{"chats":%s}',
                '{"chats":%s,"chats":[]}',
                '{"chats":%s,"extra":1}',
                '{"other":1,"chats":%s}',
                "%s",
                '{"chats":{"0":%s}}',
                ' {"chats" : %s} ',
                '{"chats":%s}\n{}',
                '\ufeff{"chats":%s}',
                '{"chats":%s} NaN',
            ]
        )
    )
    return top.replace("%s", array)


@given(envelopes())
def test_envelopes(text: str) -> None:
    check(text)


# --- damaged replies and the case files ----------------------------------------------


@given(damaged_replies())
def test_damaged_replies(damaged: Any) -> None:
    check(damaged.text)


@given(damaged_replies())
def test_damaged_replies_as_bytes(damaged: Any) -> None:
    check(damaged.text.encode("utf-8", errors="surrogatepass"))


CASE_INPUTS = [
    pytest.param(case.input.replace(MARK, ""), id=f"{path.stem}:{case.name}")
    for path in sorted(Path(CASES).glob("*.txt"))
    for case in load_cases(path.name)
]


@pytest.mark.parametrize("text", CASE_INPUTS)
def test_case_files(text: str) -> None:
    check(text)


@pytest.mark.parametrize(
    "text",
    [
        b'{"chats":[{"type":"E","order":1,"body":"caf\xc3\xa9 \xff"}]}',
        "",
        "   ",
        "null",
        "[" * 5000,
        '{"chats":[{"type":"E","order":1,"body":"x"}]}' + " " * 3,
        '{"chats":[{"type":"E","order":1,"body":"x"}]} x',
        '{"chats":[{"type":"E","order":1,"body":"\\ud800"}]}',
        '{"chats":[{"type":"E","order":' + "9" * 5000 + ',"body":"x"}]}',
        '{"chats":[{"type":"E","order":NaN,"body":"x"}]}',
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>"},{"type":"C","order":1,"body":"<emo>joy</emo>"}]}',
        '{"chats":[{"type":"C","order":2,"body":"<emo>joy</emo>"},{"type":"C","order":1,"body":"<emo>joy</emo>"}]}',
    ],
)
def test_edges(text: str | bytes) -> None:
    check(text)


def test_max_size_is_the_full_paths_decision() -> None:
    text = wrap(("E", 1, "hello"))
    assert check(text, max_size=len(text))
    assert not check(text, max_size=len(text) - 1)
    assert not check(text.encode(), max_size=len(text.encode()) - 1)


def test_text_bodies_decode_entities_once() -> None:
    body = "a &amp;lt; b &#x3C; c &gt; d &#10;e"
    reply = read_reply(wrap(("I", 1, body)), None, DEFAULT_MAX_SIZE)
    assert reply is not None
    assert reply.chats[0].segments == [Segment(tag=TEXT_TAG, text="a &lt; b < c > d \ne")]


def _cpu(run: Any, arg: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        run(arg)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize(
    "shape",
    [
        lambda n: "<emo>joy</emo>\n" * n + "x",  # fails at the very end
        lambda n: ("<msg>" + "a" * 50 + "</msg>\n") * n + "<msg>unclosed",
        lambda n: "<msg>" + "a &amp; " * n + "&bogus;</msg>",
        lambda n: "<emo>joy</emo>\n" * n,  # a trailing newline
        lambda n: "<msg>" + "&#12345" * n + "</msg>",  # numeric references never closed
    ],
)
def test_a_failing_body_costs_linear_time(shape: Any) -> None:
    """Atomic elements: the reader gives up on an invalid body without backtracking through it."""
    read = fast_reader()
    small, large = shape(2_000), shape(20_000)
    assert read("C", small) is None and read("C", large) is None
    assert _cpu(lambda b: read("C", b), large) <= 30 * max(_cpu(lambda b: read("C", b), small), 1e-5)


def test_the_shipped_grammar_gets_the_patterns_that_compile_fast() -> None:
    """The cold start's first parse compiles ``TEXT`` and ``KEY`` with one character class each and any
    number as a numeric reference (the decoder checks it): that needs ``body.lark``'s ``TEXT`` and
    ``KEY`` written as shipped; an edited grammar gets its own terminals (``_widened``), only slower."""
    from charfmt._grammar.lexical import NUMERIC_REFERENCE, NUMREF, fast_key, fast_text
    from charfmt._grammar.static import static_terminals

    assert fast_text(NUMERIC_REFERENCE) is not None and fast_key() is not None
    assert NUMREF in static_terminals()["TEXT"]
    assert NUMERIC_REFERENCE in _widened(static_terminals()["TEXT"])
    assert NUMREF not in _widened(static_terminals()["TEXT"])


PIECES = ["a", " ", "\u3000", "\t", "\n", "\r", "<", ">", "&", ";", "#", "x", "9", "é", "🎉", "\x00", "\x7f", "\ud800"]
PIECES += ["&amp;", "&lt;", "&#65;", "&#0;", "&#x41;", "&#xD800;", "&#1114112;", "&bogus;", "&#;"]


@given(st.lists(st.sampled_from(PIECES), max_size=8).map("".join))
@example("")
@example(" joy")
@example("joy ")
@example("j")
@example("&#0009;")
def test_the_fast_patterns_accept_what_the_grammars_terminals_accept(text: str) -> None:
    """``lexical.fast_text`` (with the grammar's own numeric reference) is ``TEXT``, ``fast_key`` is ``KEY``."""
    from charfmt._grammar.lexical import NUMREF, fast_key, fast_text
    from charfmt._grammar.static import terminal_regex

    fast_text_, fast_key_ = fast_text(NUMREF), fast_key()
    assert fast_text_ is not None and fast_key_ is not None
    assert (re.fullmatch(fast_text_, text) is None) == (terminal_regex("TEXT").fullmatch(text) is None)
    assert (re.fullmatch(fast_key_, text) is None) == (terminal_regex("KEY").fullmatch(text) is None)


CUES = DEFAULT_TAGS.extend(
    TagSpec("sfx", "cue", "a sound", values=("door", "bell")), TagSpec("sfxx", "cue", "another", values=("door",))
)


@pytest.mark.parametrize(
    "body",
    [
        "<sfx>door</sfx>\n<sfxx>door</sfxx>\n<msg>hi</msg>",
        "<sfx>door</sfxx>",
        "<sfxx>door</sfx>",
        "<emo>joy</sfx>",
        "<sfx>door</emo>",
        "<msg>hi</act>\n<sfx>bell</sfx>",
        "<sfx>bell</sfx>\n<act>waves</thought>",
        "<sfx> door</sfx>",
        "<sfxx>&amp;</sfxx>",
    ],
)
def test_a_closing_tag_of_another_element_of_the_same_kind_is_not_read(body: str) -> None:
    """Tags of one content kind (two cues with lists of values) hold the same content: each still closes its own."""
    read = fast_reader(CUES)("C", body)
    try:
        expected = parse_body("C", body, CUES)
    except BodyError:
        assert read is None
    else:
        assert read == expected


def test_a_new_tag_table_for_every_reply_is_read_in_its_own_table_and_few_plans_are_kept() -> None:
    """The fast path keeps what it built for a table by its identity: never another table's, never without bound."""
    from charfmt._strict import fast

    for i in range(3 * fast._MAX_PLANS):
        table = DEFAULT_TAGS.extend(TagSpec(f"sfx{i}", "cue", "a sound", values=(f"v{i}",)))
        reply = read_reply(wrap(("C", 1, f"<sfx{i}>v{i}</sfx{i}>")), None, DEFAULT_MAX_SIZE, table)
        assert reply is not None and [(s.tag, s.text) for s in reply.chats[0].segments] == [(f"sfx{i}", f"v{i}")]
        assert read_reply(wrap(("C", 1, f"<sfx{i}>v0</sfx{i}>")), None, DEFAULT_MAX_SIZE, table) is None or i == 0
        assert read_reply(wrap(("C", 1, f"<sfx{i}>v{i}</sfx{i}>")), None, DEFAULT_MAX_SIZE) is None  # not the default's
        assert len(fast._PLANS) <= fast._MAX_PLANS
