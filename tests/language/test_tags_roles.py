"""The role table (``charfmt.tags.ROLE_TABLE``): every role has one row, and a tag does what its row says."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal, get_args

import pytest
from hypothesis import find

import charfmt
from charfmt._strategies import contents
from charfmt._stream.language import language
from charfmt.constrain._grammar_bounds import Bounds
from charfmt.constrain._reply_rules import reply_grammar
from charfmt.events import WHOLE_EVENTS, WholeValue, _SegmentEvent, segment_events
from charfmt.models import Segment
from charfmt.prompt.character import tag_table
from charfmt.serve.formats import REPLY_FORMATS, read_answer, whole
from charfmt.tags import DEFAULT_TAGS, ROLE_TABLE, ROLES, Role, TagError, TagSpec, TagTable


def test_every_role_has_a_row() -> None:
    assert list(ROLE_TABLE) == list(get_args(Role))
    assert all(name == row.name for name, row in ROLE_TABLE.items())
    assert {name: row.description for name, row in ROLE_TABLE.items()} == ROLES


@pytest.mark.parametrize("role", get_args(Role))
def test_a_tag_does_what_its_row_says(role: Role) -> None:
    row = ROLE_TABLE[role]
    spec = TagSpec("x", role, "a tag")
    assert (spec.content, spec.streamed, spec.shown) == (row.content, row.streamed, row.shown)
    if row.closed_values:
        assert TagSpec("x", role, "a tag", values=("a",)).content == "key"
    else:
        with pytest.raises(TagError, match="closed list of values"):
            TagSpec("x", role, "a tag", values=("a",))


def test_the_default_table_keeps_every_rows_count() -> None:
    for role, row in ROLE_TABLE.items():
        count = len(DEFAULT_TAGS.with_role(role))
        assert count >= row.least and (row.most is None or count <= row.most), role


def test_a_table_breaking_a_rows_count_is_refused() -> None:
    emo, msg = TagSpec("emo", "emotion", "e"), TagSpec("msg", "speech", "m")
    with pytest.raises(TagError, match="exactly one emotion tag"):
        TagTable((msg,))
    with pytest.raises(TagError, match="at most one action tag: 'a' and 'b'"):
        TagTable((emo, msg, TagSpec("a", "action", "a"), TagSpec("b", "action", "b")))
    with pytest.raises(TagError, match="at least one speech tag"):
        TagTable((emo,))


# --- the columns code reads instead of a role's name: each one checked for every role ------


def _table_with(role: Role, values: tuple[str, ...] | None = None) -> tuple[TagTable, str]:
    """A table holding a tag of ``role`` (the default table's own where it already has its most), and its name."""
    row = ROLE_TABLE[role]
    have = DEFAULT_TAGS.with_role(role)
    if have and row.most is not None and len(have) >= row.most:
        return DEFAULT_TAGS, have[0].name
    return DEFAULT_TAGS.extend(TagSpec("x", role, "a tag", values=values)), "x"


def _reply(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


@pytest.mark.parametrize("role", get_args(Role))
def test_a_whole_value_is_announced_by_the_rows_event(role: Role) -> None:
    row = ROLE_TABLE[role]
    assert (row.event is None) == row.streamed
    table, name = _table_with(role)
    value = "joy" if row.content == "key" else "door"
    elements = ["<emo>joy</emo>", f"<{name}>{value}</{name}>", "<msg>hi</msg>"] if name != "emo" else ["<emo>joy</emo>"]
    body, at = "\n".join(elements), len(elements) // 2
    kind = "text" if row.event is None else row.event
    if row.event is not None:
        assert row.event in WHOLE_EVENTS
    batch = [(e.kind, e.text) for e in segment_events(0, 1, Segment(tag=name, text=value), table)[1:-1]]
    assert batch == [(kind, value)]
    for chunks in ([_reply(body)], list(_reply(body))):  # in one chunk, and character by character
        parser = charfmt.StreamParser(tags=table)
        events = [e for chunk in chunks for e in parser.feed(chunk)] + list(parser.close())
        shown = [e for e in events if getattr(e, "chat", None) == 0 and getattr(e, "segment", None) == at]
        texts = [e.text for e in shown if e.kind == kind]
        assert "".join(texts) == value, (chunks[:1], shown)
        if row.event is not None:
            assert len(texts) == 1


@pytest.mark.parametrize("role", get_args(Role))
def test_the_rows_spoken_says_what_speech_bounds_count(role: Role) -> None:
    row = ROLE_TABLE[role]
    table, name = _table_with(role)
    bounds = Bounds.for_tokens(400, tags=table, short=dict.fromkeys(get_args(Role), 8))
    assert (role in dict(bounds.role_chars)) == (not row.spoken)
    spoken = [s for s in table if s.row.spoken]
    bounded = Bounds(max_chars=40, max_chats=1, max_elements=3, max_ws=1, max_speech=1, require_speech=True)
    rules = reply_grammar(tags=table, bounds=bounded).rules
    assert (f"{name}_said" in rules) == row.spoken, name
    assert all(f"{s.name}_said" in rules for s in spoken)


@pytest.mark.parametrize("role", get_args(Role))
def test_the_rows_short_is_its_texts_length_in_a_planned_budget(role: Role) -> None:
    row = ROLE_TABLE[role]
    table, _ = _table_with(role)
    assert (row.short is None) == row.spoken  # (speech takes the rest of the budget)
    lengths = dict(Bounds.for_tokens(4000, tags=table).role_chars)
    assert lengths.get(role) == row.short, lengths


@pytest.mark.parametrize("role", get_args(Role))
def test_the_rows_prose_says_whether_an_emotion_inside_splits_it(role: Role) -> None:
    row = ROLE_TABLE[role]
    assert row.prose == (row.content == "text" and not row.closed_values)
    table, name = _table_with(role)
    if name == "emo":
        return  # (the emotion itself)
    body = f"<emo>joy</emo>\n<{name}>waves <emo>sadness</emo> then bows</{name}>"
    segments = [
        (s.tag, s.text.strip()) for s in charfmt.parse(_reply(body), tags=table, lenient=True).chats[0].segments
    ]
    assert ((name, "then bows") in segments) == row.prose, segments


@pytest.mark.parametrize("role", get_args(Role))
def test_the_rows_value_noun_names_a_value_in_diagnostics(role: Role) -> None:
    row = ROLE_TABLE[role]
    if row.content != "key" and not row.closed_values:
        assert row.value_noun is None  # a text value is never named: nothing to check
        return
    table, name = _table_with(role, values=("door",) if row.closed_values else None)
    value = "joy" if name == "emo" else "door"
    body = f"<emo>joy</emo>\n<{name}> {value} </{name}>" if name != "emo" else f"<emo> {value} </emo>"
    messages = [d.message for d in charfmt.parse(_reply(body), tags=table, lenient=True).diagnostics]
    what = f"a <{name}> value" if row.value_noun is None else f"an? {row.value_noun}"
    assert re.search(f"spaces around {what} removed", " ".join(messages)), messages
    empty = f"<emo>joy</emo>\n<{name}> </{name}>" if name != "emo" else "<emo> </emo>\n<msg>hi</msg>"
    messages = [d.message for d in charfmt.parse(_reply(empty), tags=table, lenient=True).diagnostics]
    what = f"<{name}>" if row.value_noun is None else row.value_noun
    assert f"an empty {what} is dropped" in " ".join(messages), messages


@pytest.mark.parametrize("role", get_args(Role))
def test_a_list_declaring_a_single_roles_tag_is_a_table_of_its_own(role: Role) -> None:
    row = ROLE_TABLE[role]
    assert row.single == (row.least == row.most == 1)
    rows = [{"name": "x", "role": role, "description": "a tag"}, {"name": "m", "role": "speech", "description": "m"}]
    if row.single:
        assert tag_table(rows).names == ("x", "m")
    elif row.most is not None and len(DEFAULT_TAGS.with_role(role)) >= row.most:
        with pytest.raises(TagError, match=f"at most one {role} tag"):
            tag_table(rows)
    else:
        assert tag_table(rows).names == (*DEFAULT_TAGS.names, "x", "m")


@pytest.mark.parametrize("role", get_args(Role))
def test_the_rows_vocabulary_draws_a_key_from_the_vocabulary(role: Role) -> None:
    row = ROLE_TABLE[role]
    vocabulary = charfmt.Vocabulary.of("joy")
    drawn = find(contents(TagSpec("x", role, "a tag"), vocabulary=vocabulary), lambda _: True)
    if row.vocabulary:
        assert drawn == "joy"
    hidden = {s.name for s in DEFAULT_TAGS if not s.row.shown}
    assert language(DEFAULT_TAGS).hidden == hidden


# --- a role added: what code dispatching on ``WholeValue`` does with it, no other edit -----------------


@dataclass(slots=True)
class Gesture(_SegmentEvent, WholeValue):
    """A new role's event exactly as the recipe has a maintainer write it (``charfmt/events.py``, modelled on
    ``Action``): a whole value that carries no ``tag`` (the table's one tag of the role is its tag)."""

    text: str
    kind: Literal["gesture"] = field(default="gesture", init=False)


@pytest.fixture
def gesture(monkeypatch: pytest.MonkeyPatch) -> TagTable:
    """A table with a ``<gst>`` tag of a new role ``gesture``: its row (an action's, as the recipe's ``gesture``
    is "announced whole like ``action``") and its event added as the docs say."""
    row = ROLE_TABLE["action"]._replace(name="gesture", description="a gesture, announced once complete",
                                         event="gesture")  # fmt: skip
    monkeypatch.setitem(ROLE_TABLE, "gesture", row)  # type: ignore[index]  # (a role the ``Role`` literal lacks)
    monkeypatch.setitem(ROLES, "gesture", row.description)  # type: ignore[index]
    monkeypatch.setitem(WHOLE_EVENTS, "gesture", lambda chat, n, tag, text, intensity: Gesture(chat, n, text))
    return DEFAULT_TAGS.extend(TagSpec("gst", "gesture", "a gesture"))  # type: ignore[arg-type]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_new_roles_value_reaches_the_streamed_reply(gesture: TagTable, chunked: bool) -> None:
    body = "<emo>joy</emo>\n<gst>bows deeply</gst>\n<msg>hi</msg>"
    text = _reply(body)
    parser = charfmt.StreamParser(tags=gesture)
    events = [e for chunk in (list(text) if chunked else [text]) for e in parser.feed(chunk)] + list(parser.close())
    assert [(e.tag_in(gesture), e.text) for e in events if isinstance(e, Gesture)] == [("gst", "bows deeply")]
    reply = parser.reply
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [("emo", "joy"), ("gst", "bows deeply"), ("msg", "hi")]
    assert reply == charfmt.parse(text, tags=gesture)


@pytest.mark.parametrize("fmt", list(REPLY_FORMATS))
def test_a_new_roles_value_is_shown_and_read_back_by_each_reply_format(gesture: TagTable, fmt: str) -> None:
    reply = charfmt.parse(_reply("<emo>joy</emo>\n<gst>bows [deeply]</gst>\n<msg>hi</msg>"), tags=gesture)
    shown = whole(fmt, reply, gesture)
    assert "None" not in shown, shown  # (the tag of an event that carries none: found by a newcomer's trial)
    back = read_answer(fmt, shown, gesture) or charfmt.parse(shown, tags=gesture, lenient=True)
    segments = [(s.tag, s.text) for s in back.chats[0].segments] if back.chats else []
    if REPLY_FORMATS[fmt].marker is None and REPLY_FORMATS[fmt].from_reply is None:  # (``speech``: speech only)
        assert segments == [("msg", "hi")], shown
    else:
        assert segments == [(s.tag, s.text) for s in reply.chats[0].segments], shown


def test_a_new_roles_row_says_how_long_its_text_is_and_whether_it_splits(gesture: TagTable) -> None:
    """Found by a newcomer's trial: a new role's text was planned as long as speech (``SHORT_ROLES`` named the roles)
    and an emotion inside it did not split it (the lenient reader named ``speech``, ``hidden``, ``action``)."""
    row = ROLE_TABLE["gesture"]  # type: ignore[index]
    assert dict(Bounds.for_tokens(4000, tags=gesture).role_chars).get("gesture") == row.short == 24  # type: ignore[call-overload]
    body = "<emo>joy</emo>\n<gst>waves <emo>sadness</emo> then bows</gst>"
    segments = [
        (s.tag, s.text.strip()) for s in charfmt.parse(_reply(body), tags=gesture, lenient=True).chats[0].segments
    ]
    assert segments == [("emo", "joy"), ("gst", "waves"), ("emo", "sadness"), ("gst", "then bows")]
