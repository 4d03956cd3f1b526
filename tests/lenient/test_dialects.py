"""The dialect table (charfmt/dialects.py): every entry is read, the order decides, the readers read roles."""

from __future__ import annotations

import json
import random
import re
import typing

import pytest
from conftest import CASES, ROOT, load_cases

import charfmt
from charfmt import dialects
from charfmt._lenient import table
from charfmt._lenient.recovery import read_body, recover
from charfmt.cli import main
from charfmt.dialects import DIALECT_NAMES, DIALECTS, DialectName
from charfmt.fuzz import DAMAGE, DIALECT_MUTATIONS, MUTATIONS, check, random_reply
from charfmt.prompt.userinput import UserChat, UserTurn
from charfmt.tags import DEFAULT_TAGS, TagSpec, TagTable
from charfmt.writer import dumps

LENIENT_FILES = sorted(CASES.glob("lenient_*.txt"))
DIALECT_CASES = [
    (case, line.split(":", 1)[1].strip())
    for path in LENIENT_FILES
    for case in load_cases(path.name)
    for line in case.expected
    if line.startswith("dialect:")
]

SFX = TagSpec("sfx", "cue", "a sound effect", values=("door_slam", "chime"), synonyms=("sound", "se"))
WITH_SFX = DEFAULT_TAGS.extend(SFX)


def _chats(reply: charfmt.Reply) -> list[tuple[str, int, list[tuple[str, str]]]]:
    return [(c.type, c.order, [(s.tag, s.text) for s in c.segments]) for c in reply.chats]


# --- the table -------------------------------------------------------------------------------


def test_the_names_are_the_literal_and_reply_dialect_is_typed_by_it() -> None:
    assert typing.get_args(DialectName) == DIALECT_NAMES == tuple(entry.name for entry in DIALECTS)
    assert len(set(DIALECT_NAMES)) == len(DIALECT_NAMES)
    annotation = charfmt.Reply.model_fields["dialect"].annotation
    literal = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    assert typing.get_args(literal) == DIALECT_NAMES
    with pytest.raises(ValueError, match="dialect"):
        charfmt.Reply.model_validate({"chats": [], "dialect": "klingon"})


def test_every_entry_but_canonical_detects_something_and_runs_in_a_chain() -> None:
    assert DIALECTS[0].name == "canonical" and DIALECTS[0].detect is None
    for entry in DIALECTS[1:]:
        assert entry.detect is not None and entry.chains, entry.name
        assert entry.description


def test_every_entry_but_canonical_reads_what_it_detects() -> None:
    # Adding a dialect is one row: its detector and its reader, walked by the chains it names.
    assert DIALECTS[0].read is None
    for entry in DIALECTS[1:]:
        assert callable(entry.read), entry.name
        for name in entry.chains:
            assert table.reader(entry, name) is entry.read, (entry.name, name)
    assert all(entry.pattern for entry in dialects.chain("prose"))


@pytest.mark.parametrize("name", DIALECT_NAMES)
def test_every_dialect_has_a_case_file_input_that_reads_as_it(name: str) -> None:
    cases = [case for case, dialect in DIALECT_CASES if dialect == name]
    assert cases, f"no case in {[p.name for p in LENIENT_FILES]} says 'dialect: {name}'"
    for case in cases:
        assert charfmt.parse(case.input, lenient=True).dialect == name, case.name


@pytest.mark.parametrize(
    ("found", "wins"),
    [
        ([], "canonical"),
        (["prose", "bracket"], "bracket"),
        (["plain-text", "roleplay", "bracket"], "bracket"),
        (["json-fields", "single-chat"], "single-chat"),
        (["attribute-xml", "user-chats"], "user-chats"),
        (["bare-tags", "front-matter"], "front-matter"),
    ],
)
def test_the_first_entry_in_table_order_wins(found: list[str], wins: str) -> None:
    assert dialects.winner(found) == wins


def test_table_order_not_reading_order_names_the_reply() -> None:
    # The body's stray text is met before its bracket tag; the table puts bracket first.
    body = "Well then. [joy] Hello!"
    reply = charfmt.parse(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}), lenient=True)
    assert reply.dialect == "bracket"
    # A chat in pattern A after a hybrid chat, and the other way round: hybrid stands first.
    hybrid = {"type": "C", "order": 1, "chat_body": "<msg>a</msg>", "emotion_summary": "joy"}
    fields = {"type": "C", "order": 2, "emotion": "sad", "message": "b"}
    for chats in ([hybrid, fields], [fields, hybrid]):
        assert charfmt.parse(json.dumps({"chats": chats}), lenient=True).dialect == "hybrid"


def test_the_docs_list_the_table_in_order() -> None:
    text = (ROOT / "docs" / "LENIENT.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \d+ \| `([a-z-]+)` \|", text, re.M)
    assert tuple(rows) == DIALECT_NAMES


# --- the echoed request form -------------------------------------------------------------------


def test_a_reply_that_echoes_the_rendered_request_reads_as_its_chats() -> None:
    c_segments = [charfmt.Segment(tag="emo", text="joy"), charfmt.Segment(tag="msg", text="Hi <3 & bye")]
    i_segments = [charfmt.Segment(tag="text", text="A bell rings.")]
    turn = UserTurn(chats=[UserChat(type="C", segments=c_segments), UserChat(type="I", segments=i_segments)])
    reply = charfmt.parse(charfmt.render_user_block(turn), lenient=True)
    assert reply.dialect == "user-chats"
    assert [(c.type, c.order, c.segments) for c in reply.chats] == [("C", 1, c_segments), ("I", 2, i_segments)]
    assert not any("\n" in s.text for c in reply.chats for s in c.segments)
    assert "CF708" not in [d.code for d in reply.diagnostics]


ECHO = '<user_chats>\n<chat type="C">\n<emo>joy</emo>\n<msg>Hello there, friend</msg>\n</chat>\n<chat type="I">Bell.'


@pytest.mark.parametrize("cut", range(len("<user_chats>"), len(ECHO) + 1, 5))
def test_an_echoed_request_cut_anywhere_keeps_what_arrived(cut: int) -> None:
    reply = charfmt.parse(ECHO[:cut], lenient=True)
    assert reply.dialect == "user-chats"
    assert "CF999" not in [d.code for d in reply.diagnostics]
    for chat in reply.chats:
        for segment in chat.segments:
            assert segment.tag in ("emo", "msg", "text"), segment
            assert "<" not in segment.text, segment  # a tag cut in half is markup, not text
    check(ECHO[:cut])


# --- roles, not names ---------------------------------------------------------------------------


def test_a_custom_cue_tag_is_a_known_tag_only_with_its_table() -> None:
    text = "<emo>joy</emo>\n<sfx>door_slam</sfx>\n<msg>Who's there?</msg>"
    default = charfmt.parse(text, lenient=True)
    assert "CF708" in [d.code for d in default.diagnostics]  # unknown with the default table, as before
    custom = recover(text, None, [], WITH_SFX)
    assert _chats(custom) == [("C", 1, [("emo", "joy"), ("sfx", "door_slam"), ("msg", "Who's there?")])]
    assert "CF708" not in [d.code for d in custom.diagnostics]


@pytest.mark.parametrize(
    ("text", "value", "code"),
    [
        ("<emo>joy</emo>\n<Sound>chime</Sound>", "chime", "CF704"),  # a synonym, any case
        ("<emo>joy</emo>\n<se> Door_Slam </se>", "door_slam", "CF704"),  # spaces and case of a listed value
        ("<emo>joy</emo>\n<sfx>thunder</sfx>", "thunder", "CF132"),  # not in the list: kept, reported
        ('{"emotion": "joy", "sound": "chime", "content": "hi"}', "chime", "CF612"),  # a JSON field
        ("[sfx:chime] [joy] hi", "chime", "CF713"),  # a bracket tag
    ],
)
def test_a_custom_cue_is_read_by_its_synonyms_and_values(text: str, value: str, code: str) -> None:
    reply = recover(text, None, [], WITH_SFX)
    assert ("sfx", value) in [(s.tag, s.text) for c in reply.chats for s in c.segments]
    assert code in [d.code for d in reply.diagnostics]


def test_body_reading_takes_the_table() -> None:
    assert [(p.tag, p.text) for p in read_body("<sound>chime</sound>", tags=WITH_SFX).pieces] == [("sfx", "chime")]
    assert [(p.tag, p.text) for p in read_body("<sound>chime</sound>").pieces] == [("sound", "chime")]


def test_the_readers_ask_roles_not_names() -> None:
    # A table whose tags have other names: the emotion, the speech and the action are found by role.
    table = TagTable(
        (
            TagSpec("feel", "emotion", "emotion", synonyms=("emotion",)),
            TagSpec("do", "action", "action"),
            TagSpec("say", "speech", "speech", synonyms=("message",)),
        )
    )
    reply = recover('Hello! *waves* <emotion type="joy">Hi</emotion>', None, [], table)
    assert _chats(reply) == [("C", 1, [("say", "Hello!"), ("do", "waves"), ("feel", "joy"), ("say", "Hi")])]
    fields = recover('{"emotion": "calm", "message": "ok"}', None, [], table)
    assert _chats(fields) == [("C", 1, [("feel", "calm"), ("say", "ok")])]
    assert recover("<feel>a&lt;b</feel>", None, [], table).chats[0].segments[0].tag == "do"  # CF718: kept as action


def test_no_lenient_module_names_a_tag() -> None:
    lenient = sorted((ROOT / "charfmt" / "_lenient").glob("*.py"))
    for path in [*lenient, *(ROOT / "charfmt" / name for name in ("fuzz.py", "dialects.py"))]:
        source = path.read_text(encoding="utf-8")
        assert not re.findall(r"[\"'](emo|act|msg|thought)[\"']", source), path.name


# --- reasoning kept apart -----------------------------------------------------------------------

BODY = '{"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\\n<msg>Hi</msg>"}]}'


@pytest.mark.parametrize(
    ("text", "reasoning"),
    [
        ("<think>The player is back.</think>\n" + BODY, "The player is back."),
        ("<think>one</think><reasoning>two</reasoning>" + BODY, "one\n\ntwo"),
        ("<think>\nnever closed\n" + BODY, "never closed"),
        ("The player is happy.\n</think>\n" + BODY, "The player is happy."),
        ("### Thinking\nThey want the amulet.\n" + BODY, "They want the amulet."),
        ("**Thinking**\nplan it\n**Answer**\n" + BODY, "plan it"),
        ("<|channel|>analysis<|message|>be kind<|end|><|start|>assistant<|channel|>final<|message|>" + BODY, "be kind"),
        ("<think>plan</think>\n<emo>joy</emo>\n<msg>Hi</msg>", "plan"),
        (BODY, None),
        ("<emo>joy</emo>\n<msg>Hi</msg>\n<thought>mine</thought>", None),  # the format's own element
    ],
)
def test_reasoning_before_the_reply_is_kept_apart(text: str, reasoning: str | None) -> None:
    reply = charfmt.parse(text, lenient=True)
    assert reply.reasoning == reasoning
    assert ("emo", "joy") in [(s.tag, s.text) for c in reply.chats for s in c.segments]
    if reasoning is not None:
        notes = [d for d in reply.diagnostics if d.code == "CF603"]
        assert notes and all("kept apart" in d.message for d in notes)
        assert reasoning.split()[0] not in [s.text for c in reply.chats for s in c.segments]


# --- fuzz: one mutation per dialect ---------------------------------------------------------------


def test_there_is_one_dialect_mutation_per_dialect_in_table_order() -> None:
    produced = [rule.dialect for rule in DIALECT_MUTATIONS]
    assert produced == list(DIALECT_NAMES[1:])
    assert all(rule.dialect is None for rule in DAMAGE)
    assert set(MUTATIONS) == {rule.name for rule in (*DAMAGE, *DIALECT_MUTATIONS)}


@pytest.mark.parametrize("rule", DIALECT_MUTATIONS, ids=[rule.name for rule in DIALECT_MUTATIONS])
def test_each_dialect_mutation_produces_its_dialect(rule: object) -> None:
    assert isinstance(rule, type(DIALECT_MUTATIONS[0]))
    applied = 0
    for seed in range(60):
        rng = random.Random(seed)
        text = dumps(random_reply(rng))
        damaged = rule.mutate(text, rng)
        if damaged == text:
            continue  # nothing to drift from (no C chat, no element of that kind)
        applied += 1
        reply = charfmt.parse(damaged, lenient=True)
        assert reply.dialect == rule.dialect, (damaged, reply.dialect)
        check(damaged)
    assert applied >= 20, f"{rule.name} changed only {applied} of 60 replies"


def test_fuzz_output_names_the_new_mutations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--seed", "3", "--count", "200"]) == 0
    seen = {name for line in capsys.readouterr().out.splitlines() for name in json.loads(line)["mutations"]}
    assert {"dialect-user-chats", "dialect-front-matter", "dialect-plain-text"} <= seen
