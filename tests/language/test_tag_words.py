"""Custom tags as a new user writes them: words a new tag takes, values lenient parsing keeps or drops.

The character is the one a user tried (``hana.toml``): a cue ``<sfx>`` with a closed list
of values, synonyms ``sound``/``se`` and prefixes ``sfx``/``sound``, and a cue ``<anim>``.
"""

from __future__ import annotations

import collections
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt import DEFAULT_TAGS, TagSpec
from charfmt._lenient.recovery import read_body
from charfmt.prompt.character import CharacterError
from charfmt.prompt.userinput import parse_shorthand
from charfmt.tags import TagError
from charfmt.testing import damaged_replies, replies, segments
from charfmt.writer import canonical_form, dumps, is_canonical

SFX = TagSpec(
    "sfx",
    "cue",
    "a sound effect",
    values=("anvil", "door_slam", "thunder"),
    synonyms=("sound", "se"),
    prefixes=("sfx", "sound"),
)
ANIM = TagSpec("anim", "cue", "a Live2D motion to play", prefixes=("mot",))
TAGS = DEFAULT_TAGS.extend(SFX, ANIM)
VOCAB = charfmt.Vocabulary.of("joy", "angry")

HANA = """\
name = "Hana"
persona = "You are Hana, a cheerful blacksmith."

[[emotions]]
key = "joy"

[[tags]]
name = "sfx"
role = "cue"
description = "a sound effect"
values = ["anvil", "door_slam", "thunder"]
synonyms = ["sound", "se"]
prefixes = ["sfx", "sound"]
"""


def envelope(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


def lenient(text: str, tags: charfmt.TagTable = TAGS) -> charfmt.Reply:
    return charfmt.parse(text, lenient=True, tags=tags, vocabulary=VOCAB)


def segs(reply: charfmt.Reply) -> list[tuple[str, str]]:
    return [(s.tag, s.text) for c in reply.chats for s in c.segments]


# --- 2. a new tag takes a word that is only a synonym or prefix of a built-in tag ----------


@pytest.mark.parametrize(
    ("name", "older"),
    [("motion", "act"), ("face", "emo"), ("mood", "emo"), ("say", "msg"), ("think", "thought"), ("gesture", "act")],
)
def test_a_tag_may_take_a_builtin_synonym_as_its_name(name: str, older: str) -> None:
    tags = DEFAULT_TAGS.extend(TagSpec(name, "cue", "d"))
    assert tags.synonyms[name] == name
    assert name not in tags[older].synonyms and name not in tags[older].prefixes
    assert tags.prefixes.get(name) != older  # [motion:x] no longer means <act>
    assert DEFAULT_TAGS[older].synonyms != tags[older].synonyms  # the default table is left alone
    reply = lenient(envelope(f"<emo>joy</emo>\n<{name.upper()}>wave</{name.upper()}>"), tags)
    assert (name, "wave") in segs(reply)
    strict = charfmt.parse(envelope(f"<emo>joy</emo>\n<{name}>wave</{name}>"), tags=tags)
    assert [e.text for e in strict.events(tags) if isinstance(e, charfmt.Cue)] == ["wave"]


def test_a_character_file_may_name_a_tag_motion_as_the_readme_suggests() -> None:
    text = HANA + '\n[[tags]]\nname = "motion"\nrole = "cue"\ndescription = "a motion"\nsynonyms = ["move"]\n'
    character = charfmt.Character.from_toml(text)
    assert character.tags.synonyms["motion"] == "motion" and character.tags.synonyms["move"] == "motion"
    assert "motion" not in character.tags["act"].synonyms
    # the table survives a dump and a load
    assert charfmt.Character.model_validate(character.model_dump()).tags == character.tags


def test_a_word_taken_from_a_builtin_tag_is_given_to_the_new_one_as_a_prefix_too() -> None:
    tags = DEFAULT_TAGS.extend(TagSpec("sfx", "cue", "d", prefixes=("emotion",)))
    assert tags.prefixes["emotion"] == "sfx" and tags.synonyms["emotion"] == "emo"  # <emotion> is still <emo>
    assert "emotion" not in tags["emo"].prefixes


@pytest.mark.parametrize(
    ("specs", "message", "tag", "field"),
    [
        ((TagSpec("msg", "speech", "d"),), "'msg' is a built-in tag", "msg", "name"),
        (
            (TagSpec("sfx", "cue", "d", synonyms=("msg",)),),
            "tag 'sfx': synonym 'msg' is a built-in tag",
            "sfx",
            "synonyms",
        ),
        (
            (TagSpec("sfx", "cue", "d", prefixes=("act",)),),
            "tag 'sfx': prefix 'act' is a built-in tag",
            "sfx",
            "prefixes",
        ),
        (
            (TagSpec("sfx", "cue", "d", synonyms=("se",)), TagSpec("bgm", "cue", "d", synonyms=("se",))),
            "tag 'bgm': synonym 'se' is already a synonym of 'sfx'",
            "bgm",
            "synonyms",
        ),
        (
            (TagSpec("sfx", "cue", "d", prefixes=("x",)), TagSpec("bgm", "cue", "d", prefixes=("x",))),
            "tag 'bgm': prefix 'x' is already a prefix of 'sfx'",
            "bgm",
            "prefixes",
        ),
        (
            (TagSpec("sfx", "cue", "d"), TagSpec("bgm", "cue", "d", synonyms=("sfx",))),
            "tag 'bgm': synonym 'sfx' is already the tag 'sfx'",
            "bgm",
            "synonyms",
        ),
        (
            (TagSpec("sfx", "cue", "d", prefixes=("mot",)), TagSpec("mot", "cue", "d")),
            "'mot' is already a prefix of 'sfx'",
            "mot",
            "name",
        ),
        ((TagSpec("sfx", "cue", "d"), TagSpec("sfx", "cue", "e")), "tag 'sfx' is declared twice", "sfx", "name"),
    ],
)
def test_a_clash_with_a_real_name_or_between_new_tags_says_what_clashes(
    specs: tuple[TagSpec, ...], message: str, tag: str, field: str
) -> None:
    with pytest.raises(TagError) as info:
        DEFAULT_TAGS.extend(*specs)
    assert str(info.value) == message
    assert (info.value.tag, info.value.field) == (tag, field)
    assert isinstance(info.value, charfmt.CharfmtError)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            'name = "sfx2"\nsynonyms = ["sound"]',
            "<character>:17: tags[1].synonyms: tag 'sfx2': synonym 'sound' is already a synonym of 'sfx'",
        ),
        (
            'name = "bgm"\nsynonyms = ["msg"]',
            "<character>:17: tags[1].synonyms: tag 'bgm': synonym 'msg' is a built-in tag",
        ),
        (
            'name = "bgm"\nprefixes = ["sound"]',
            "<character>:17: tags[1].prefixes: tag 'bgm': prefix 'sound' is already a prefix of 'sfx'",
        ),
        (
            'name = "msg"',
            "<character>:16: tags[1].name: 'msg' is a built-in tag (the built-in tags are emo, act, msg, thought)",
        ),
    ],
)
def test_a_clash_in_a_character_file_points_at_the_key_that_clashes(extra: str, expected: str) -> None:
    text = HANA + f'\n[[tags]]\n{extra}\nrole = "cue"\ndescription = "d"\n'
    # line 16 is the second entry's name, line 17 the key after it
    with pytest.raises(CharacterError) as info:
        charfmt.Character.from_toml(text)
    assert str(info.value) == expected


# --- 3. prefixes: checked like synonyms; shorthand and lenient parsing agree ---------------


@pytest.mark.parametrize(
    "specs",
    [
        (SFX, ANIM),
        (TagSpec("sfx", "cue", "d", prefixes=("emotion", "say")),),  # a synonym of msg as a prefix
        (TagSpec("motion", "cue", "d", prefixes=("motion", "action")),),
    ],
)
def test_shorthand_and_lenient_parsing_read_a_prefix_as_the_same_tag(specs: tuple[TagSpec, ...]) -> None:
    tags = DEFAULT_TAGS.extend(*specs)
    for prefix, tag in tags.prefixes.items():
        spec = tags[tag]
        value = spec.values[0] if spec.values else "joy" if spec.role == "emotion" else "wave"
        turn = parse_shorthand(f"[{prefix}:{value}] hi", vocabulary=VOCAB, tags=tags)
        assert (tag, value) in [(s.tag, s.text) for c in turn.chats for s in c.segments], prefix
        reply = lenient(envelope(f"[{prefix}:{value}] hi"), tags)
        assert (tag, value) in segs(reply), prefix


# --- 4. is_canonical and canonical_form know a cue's values --------------------------------


def test_a_value_outside_its_list_is_not_canonical_and_is_left_out_of_the_canonical_form() -> None:
    reply = lenient(envelope("<emo>joy</emo>\n<sfx>explosion</sfx>\n<msg>x</msg>"))
    assert ("sfx", "explosion") in segs(reply)
    assert not is_canonical(reply, TAGS)
    with pytest.raises(charfmt.ParseError, match="CF131"):
        charfmt.parse(dumps(reply), tags=TAGS)
    shown = canonical_form(reply, TAGS)
    assert segs(shown) == [("emo", "joy"), ("msg", "x")]
    assert charfmt.parse(dumps(shown), tags=TAGS).chats == shown.chats


_SFX_WORDS = st.sampled_from(["anvil", "thunder", "Thunder", " door_slam ", "boom", "anv", "a<b", ""])
_TAG_FORMS = st.sampled_from(["<{t}>{v}</{t}>", "<{T}>{v}</{T}>", '<{t} type="{v}"/>', "<{t}>{v}", "[{t}:{v}]"])


@st.composite
def messy_replies(draw: st.DrawFn) -> str:
    """Lenient input full of custom-tag values: in and out of the list, in every form, sometimes cut."""
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        tag = draw(st.sampled_from(["sfx", "sound", "anim", "emo", "msg", "mood"]))
        value = draw(_SFX_WORDS if tag in ("sfx", "sound", "emo", "mood") else st.text(max_size=6))
        parts.append(draw(_TAG_FORMS).format(t=tag, T=tag.upper(), v=value))
    text = envelope(draw(st.sampled_from(["\n", "", " "])).join(parts))
    if draw(st.booleans()):
        text = text[: draw(st.integers(1, len(text)))]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(messy_replies(), damaged_replies(tags=TAGS).map(lambda d: d.text)))
def test_a_canonical_lenient_reply_is_strictly_valid(text: str) -> None:
    reply = lenient(text)
    if is_canonical(reply, TAGS):
        assert charfmt.parse(dumps(reply), tags=TAGS).chats == reply.chats
    shown = canonical_form(reply, TAGS)
    assert is_canonical(shown, TAGS)
    assert charfmt.parse(dumps(shown), tags=TAGS).chats == shown.chats


# --- 5. a cue value written as an attribute -------------------------------------------------


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ('<sfx type="thunder"></sfx>', 'attribute form <sfx type="thunder"> read as <sfx>thunder</sfx>'),
        ('<sfx name="thunder"></sfx>', 'attribute form <sfx name="thunder"> read as <sfx>thunder</sfx>'),
        ('<sfx value="thunder" />', 'attribute form <sfx value="thunder" /> read as <sfx>thunder</sfx>'),
        ('<Sound type="thunder"/>', 'attribute form <Sound type="thunder"/> read as <sfx>thunder</sfx>'),
        (
            '<sfx type="anvil">thunder</sfx>',
            'attribute form <sfx type="anvil"> read as <sfx>: its text is the value, the attribute dropped',
        ),
    ],
)
def test_a_cue_value_written_as_an_attribute_is_its_value(element: str, message: str) -> None:
    reply = lenient(envelope(f"<emo>joy</emo>\n{element}\n<msg>x</msg>"))
    assert segs(reply) == [("emo", "joy"), ("sfx", "thunder"), ("msg", "x")]
    assert [d.message for d in reply.diagnostics if d.code == "CF705"] == [message]


def test_an_attribute_value_outside_the_list_is_reported_like_any_other() -> None:
    reply = lenient(envelope('<emo>joy</emo>\n<sfx type="boom"/>'))
    assert ("sfx", "boom") in segs(reply)
    assert "CF132" in [d.code for d in reply.diagnostics]


def test_other_attributes_are_dropped_in_words_that_read() -> None:
    reply = lenient(envelope('<emo>joy</emo>\n<msg class="x">hi</msg>'))
    assert [d.message for d in reply.diagnostics if d.code == "CF705"] == [
        'attribute form <msg class="x"> read as <msg>: its attributes dropped'
    ]


def test_dot_notation_is_reported_once_per_element() -> None:
    reply = lenient("<emotion.joy>えっ！？</emotion.joy>\n<speak>まさか</speak>")
    assert segs(reply)[:2] == [("emo", "joy"), ("msg", "えっ！？")]
    assert [d.code for d in reply.diagnostics].count("CF705") == 1
    assert "</emotion.joy> read as </emo>" in [d.message for d in reply.diagnostics]


# --- 6. a cut-off value that is not one of the list ----------------------------------------


@pytest.mark.parametrize(
    ("tail", "cue"),
    [
        ("<sfx>anv", None),
        ("<sfx>anvil", "anvil"),
        ("<sfx>Thund", None),
        ("<sfx>THUNDER", "thunder"),
        ("<anim>wa", "wa"),
    ],
)
def test_a_cut_off_value_outside_the_list_never_reaches_the_game(tail: str, cue: str | None) -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n' + tail
    reply = lenient(text)
    assert [e.text for e in reply.events(TAGS) if isinstance(e, charfmt.Cue)] == ([cue] if cue else [])
    dropped = [d for d in reply.diagnostics if d.code == "CF133"]
    assert len(dropped) == (cue is None)
    if dropped:
        assert "cut off" in dropped[0].message and "dropped" in dropped[0].message
        assert text[dropped[0].offset :].startswith(tail[5:])  # it points at the value in the raw input


def test_a_closed_body_keeps_an_off_list_value_as_written() -> None:
    reply = lenient(envelope("<emo>joy</emo>\n<sfx>anv"))  # closed JSON: the body is whole, not cut
    assert ("sfx", "anv") in segs(reply)
    assert "CF132" in [d.code for d in reply.diagnostics]


# --- 7. one code for a value outside its list ------------------------------------------------


@pytest.mark.parametrize(
    "body", ["<emo>joy</emo>\n<sfx>boom</sfx>", "<EMO>joy</EMO><SFX>boom</SFX>", "<emo>joy</emo>\n<se> boom </se>"]
)
def test_a_value_outside_its_list_is_cf132_whatever_the_body_looks_like(body: str) -> None:
    reply = lenient(envelope(body))
    found = [d for d in reply.diagnostics if d.code == "CF132"]
    assert len(found) == 1
    assert found[0].message.endswith("<sfx> value 'boom' is not one of anvil, door_slam, thunder; kept as written")
    assert "CF719" not in charfmt.diagnostics.CODES


def test_body_reading_reports_cf132() -> None:
    result = read_body("<sfx>boom</sfx>", tags=TAGS)
    assert [r.code for r in result.repairs] == ["CF132"]


# --- 8. the strategies: a vocabulary, and cues drawn often ----------------------------------


@settings(max_examples=60, deadline=None)
@given(replies(tags=TAGS, vocabulary=VOCAB))
def test_replies_draw_emotions_from_the_vocabulary(reply: charfmt.Reply) -> None:
    assert charfmt.parse(dumps(reply), tags=TAGS, vocabulary=VOCAB).diagnostics == []
    assert all(s.text in VOCAB.keys for c in reply.chats for s in c.segments if s.tag == "emo")


@settings(max_examples=60, deadline=None)
@given(st.lists(segments(TAGS, vocabulary=VOCAB), min_size=1))
def test_segments_draw_emotions_from_the_vocabulary(drawn: list[charfmt.Segment]) -> None:
    assert all(s.text in VOCAB.keys for s in drawn if s.tag == "emo")


def test_every_tag_is_drawn_about_as_often() -> None:
    counts: collections.Counter[str] = collections.Counter()

    @settings(max_examples=400, deadline=None, database=None)
    @given(replies(tags=TAGS))
    def count(reply: charfmt.Reply) -> None:
        counts.update(s.tag for c in reply.chats if c.type == "C" for s in c.segments)

    count()
    total = sum(counts.values())
    share = {tag: counts[tag] / total for tag in TAGS.names}
    assert min(share.values()) > 0.5 / len(TAGS), share  # uniform would be 1/6 each
    assert share["sfx"] > 0.08, share
