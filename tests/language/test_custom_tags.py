"""Your own tags: one ``TagSpec`` added through the public API, and every path agrees on it.

A test-local table extends the default one with ``<sfx>`` (a cue with a closed list of values)
and ``<whisper>`` (a second speech tag). For those tags: strict parsing (a value outside the
list is ``CF131``), lenient parsing, ``Reply.events(tags)``, the ``dumps`` round trip, the
system prompt, ``json_schema(tags=)``, every ``grammar()`` target (through llguidance, as
``tests/constrain/test_export.py`` checks the default grammar), the strategies, the sentence splitter,
shorthand and user blocks, and a character file with ``[[tags]]``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
from conftest import ROOT
from hypothesis import find, given, settings

import charfmt
from charfmt import DEFAULT_TAGS, TagSpec, TagTable
from charfmt.events import Action, Cue, Emotion, TextDelta
from charfmt.parser import _parse
from charfmt.prompt.character import CharacterError
from charfmt.testing import bodies, damaged_replies, replies, segments, user_turns

SFX = TagSpec("sfx", "cue", "a sound effect the game plays at once", values=("door_slam", "thunder"), prefixes=("sfx",))
WHISPER = TagSpec("whisper", "speech", "what the character whispers")
TAGS = DEFAULT_TAGS.extend(SFX, WHISPER)
VOCAB = charfmt.Vocabulary.of("joy", "sad")

BODY = "<emo>joy</emo>\n<sfx>door_slam</sfx>\n<msg>Who's there?</msg>\n<whisper>Stay close.</whisper>"


def reply_text(*bodies: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": n, "body": b} for n, b in enumerate(bodies, 1)]})


def codes(e: charfmt.ParseError) -> list[str]:
    return [d.code for d in e.diagnostics]


# --- the table ------------------------------------------------------------------------


def test_the_default_table_is_the_design_studys_set() -> None:
    assert [(t.name, t.role, t.content, t.values) for t in DEFAULT_TAGS] == [
        ("emo", "emotion", "key", None),
        ("act", "action", "text", None),
        ("msg", "speech", "text", None),
        ("thought", "hidden", "text", None),
    ]
    assert DEFAULT_TAGS.specs == charfmt.TAGS
    assert (DEFAULT_TAGS.emotion.name, DEFAULT_TAGS.speech.name) == ("emo", "msg")


def test_extend_makes_a_new_table_and_leaves_the_default_alone() -> None:
    assert TAGS.names == (*DEFAULT_TAGS.names, "sfx", "whisper")
    assert "sfx" not in DEFAULT_TAGS
    assert DEFAULT_TAGS.extend(SFX, WHISPER) == TAGS and hash(TAGS) == hash(DEFAULT_TAGS.extend(SFX, WHISPER))
    assert TAGS.prefixes["sfx"] == "sfx"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (lambda: TagSpec("Sfx", "cue", "d"), "lower-case"),
        (lambda: TagSpec("sfx", "sound", "d"), "role"),  # type: ignore[arg-type]
        (lambda: TagSpec("sfx", "speech", "d", values=("a",)), "only a cue tag"),
        (lambda: TagSpec("sfx", "cue", "d", values=("door slam ",)), "is not a key"),
        (lambda: TagSpec("sfx", "cue", "d", values=("a", "a")), "twice"),
        (lambda: DEFAULT_TAGS.extend(TagSpec("msg", "speech", "d")), "'msg' is a built-in tag"),
        (lambda: DEFAULT_TAGS.extend(TagSpec("element", "cue", "d")), "reserved"),
        # found by a newcomer's trial: <s>, </s>, <eos> in the prompt and the grammar end a model's sequence
        (lambda: DEFAULT_TAGS.extend(TagSpec("s", "cue", "d")), "<s> is a chat template's control string"),
        (lambda: DEFAULT_TAGS.extend(TagSpec("eos", "speech", "d")), "<eos> is a chat template's control string"),
        (lambda: DEFAULT_TAGS.extend(TagSpec("bos", "action", "d")), "<bos> is a chat template's control string"),
        (lambda: DEFAULT_TAGS.extend(TagSpec("face", "emotion", "d")), "exactly one emotion tag"),
        (
            lambda: DEFAULT_TAGS.extend(TagSpec("sound", "cue", "d", synonyms=("msg",))),
            "tag 'sound': synonym 'msg' is a built-in tag",
        ),
    ],
)
def test_a_bad_tag_is_refused_with_a_reason(spec: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec()


# --- strict parsing -----------------------------------------------------------------------


def test_strict_parse_reads_a_custom_tag() -> None:
    reply = charfmt.parse(reply_text(BODY), tags=TAGS, vocabulary=VOCAB)
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [
        ("emo", "joy"),
        ("sfx", "door_slam"),
        ("msg", "Who's there?"),
        ("whisper", "Stay close."),
    ]
    # the full path (no fast reader) gives the same reply
    assert _parse(reply_text(BODY), False, VOCAB, 10**6, fast=False, tags=TAGS) == reply


def test_the_default_table_does_not_know_the_custom_tag() -> None:
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(reply_text(BODY))
    assert codes(info.value) == ["CF204"]


def test_a_value_outside_the_list_is_cf131_at_the_value() -> None:
    text = reply_text("<emo>joy</emo>\n<sfx>explosion</sfx>")
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text, tags=TAGS)
    (d,) = info.value.diagnostics
    assert d.code == "CF131" and "door_slam, thunder" in d.message
    assert text[d.offset : d.end] == "explosion"


def test_lenient_keeps_a_value_outside_the_list_with_a_warning() -> None:
    reply = charfmt.parse(reply_text("<emo>joy</emo>\n<sfx>explosion</sfx>"), tags=TAGS, lenient=True)
    assert [(d.code, d.severity) for d in reply.diagnostics] == [("CF132", "warning")]
    assert reply.chats[0].segments[1].text == "explosion"


def test_a_bad_value_is_cf208_naming_the_tag() -> None:
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(reply_text("<sfx> thunder</sfx>"), tags=TAGS)
    assert codes(info.value) == ["CF208"] and "sfx value" in info.value.diagnostics[0].message


def test_the_vocabulary_checks_the_emotion_role_not_other_key_tags() -> None:
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(
            reply_text("<emo>furious</emo>\n<sfx>thunder</sfx>"),
            tags=TAGS,
            vocabulary=VOCAB.model_copy(update={"policy": "error"}),
        )
    assert codes(info.value) == ["CF301"]


def test_the_emotion_is_whatever_tag_has_the_role() -> None:
    table = TagTable((TagSpec("face", "emotion", "the face"), TagSpec("say", "speech", "what is said")))
    text = reply_text("<face>happy</face>\n<say>hi</say>")
    reply = charfmt.parse(
        text, tags=table, vocabulary=charfmt.Vocabulary(emotions=[{"key": "joy", "aliases": ["happy"]}])
    )
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [("face", "joy"), ("say", "hi")]
    assert [type(e).__name__ for e in reply.events(table) if e.kind in ("emotion", "text")] == ["Emotion", "TextDelta"]
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(reply_text("hello"), tags=table)
    assert "<face>, <say>" in info.value.diagnostics[0].message


# --- lenient parsing ------------------------------------------------------------------------


def test_lenient_parse_repairs_a_reply_with_a_custom_tag() -> None:
    damaged = (
        '```json\n{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo><sfx>thunder</sfx>\\n<msg>Oh!</msg>"}]}\n```'
    )
    reply = charfmt.parse(damaged, tags=TAGS, lenient=True)
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [("emo", "joy"), ("sfx", "thunder"), ("msg", "Oh!")]
    assert [e for e in reply.events(TAGS) if isinstance(e, Cue)] == [Cue(0, 1, "sfx", "thunder")]


# --- events ------------------------------------------------------------------------------------


def test_reply_events_give_one_cue_for_the_custom_tag() -> None:
    reply = charfmt.parse(reply_text(BODY), tags=TAGS)
    events = list(reply.events(TAGS))
    assert [e for e in events if isinstance(e, Cue)] == [Cue(0, 1, "sfx", "door_slam")]
    assert [e for e in events if isinstance(e, Emotion)] == [Emotion(0, 0, "joy")]
    assert [(e.tag, e.text) for e in events if isinstance(e, TextDelta)] == [
        ("msg", "Who's there?"),
        ("whisper", "Stay close."),
    ]
    # without the table, the unknown tag is text (what a reader that does not know it can do)
    assert not [e for e in reply.events() if isinstance(e, (Cue, Action))]


def test_events_and_models_do_not_import_each_other_and_models_skip_the_parser() -> None:
    code = (
        "import sys, charfmt.events; a = 'charfmt.models' in sys.modules; import charfmt.models;"
        "print(a, 'charfmt._strict.elements' in sys.modules, any(m.split('.')[0] == 'lark' for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == ["False", "False", "False"]


# --- writing ---------------------------------------------------------------------------------


@given(replies(tags=TAGS))
def test_dumps_round_trips_a_reply_with_custom_tags(reply: charfmt.Reply) -> None:
    assert charfmt.writer.is_canonical(reply, TAGS)
    assert charfmt.parse(charfmt.dumps(reply), tags=TAGS) == reply


def test_canonical_form_keeps_the_tables_tags() -> None:
    reply = charfmt.parse(reply_text(BODY), tags=TAGS)
    assert charfmt.writer.canonical_form(reply, TAGS) == reply
    kept = [s.tag for s in charfmt.writer.canonical_form(reply).chats[0].segments]
    assert kept == ["emo", "msg"]  # the default table does not write them


# --- prompts -----------------------------------------------------------------------------------


def _character(**extra: Any) -> charfmt.Character:
    return charfmt.Character(
        name="Yuki", persona="A narrator.", emotions=[{"key": "joy"}, {"key": "sad"}], tags=[SFX, WHISPER], **extra
    )


def test_the_system_prompt_teaches_the_custom_tags_by_role() -> None:
    system = charfmt.render_system(_character())
    assert "<sfx>...</sfx>: a sound effect the game plays at once (one of: door_slam, thunder)" in system
    assert (
        "## Cues" in system
        and "- <sfx>: a sound effect the game plays at once; only these values: door_slam, thunder" in system
    )
    assert "<whisper>...</whisper>: what the character whispers" in system
    assert "## Also spoken aloud (like <msg>)\n- <whisper>" in system
    plain = charfmt.render_system(charfmt.Character(name="Yuki", persona="A narrator.", emotions=[{"key": "joy"}]))
    assert "sfx" not in plain and "## Cues" not in plain


def test_history_and_structured_requests_keep_the_custom_tags() -> None:
    character = _character()
    reply = charfmt.parse(reply_text(BODY), tags=TAGS)
    history = [charfmt.Exchange(user=charfmt.UserTurn.say("Hello"), reply=reply)]
    request = charfmt.render_messages(character, history, charfmt.UserTurn.say("Again"), structured=True)
    assert "<sfx>door_slam</sfx>" in request["messages"][2]["content"]
    pattern = request["response_format"]["json_schema"]["schema"]["properties"]["chats"]["items"]["anyOf"][0]
    assert "door_slam" in pattern["properties"]["body"]["pattern"]
    assert "<sfx>door_slam</sfx>" in charfmt.render_text(character, history, charfmt.UserTurn.say("Again"))


# --- json_schema and grammars ---------------------------------------------------------------------


@pytest.mark.parametrize("provider", [None, "openai", "anthropic", "gemini"])
def test_json_schema_with_tags_accepts_the_custom_tag(provider: str | None) -> None:
    schema = charfmt.json_schema(provider, tags=TAGS)
    jsonschema.validate(json.loads(reply_text(BODY)), schema)
    assert "<sfx>…</sfx> (a sound effect the game plays at once; one of: door_slam, thunder)" in json.dumps(
        schema, ensure_ascii=False
    )


@pytest.mark.parametrize("body", ["<sfx>explosion</sfx>", "<sfx></sfx>", "<boom>x</boom>"])
def test_json_schema_with_tags_rejects_what_strict_parsing_rejects(body: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(reply_text(body)), charfmt.json_schema(tags=TAGS))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(reply_text(BODY)), charfmt.json_schema())  # default: no <sfx>


def test_the_regex_target_follows_the_table() -> None:
    pattern = re.compile(charfmt.grammar("regex", tags=TAGS))
    assert pattern.match(BODY)
    assert not pattern.match("<sfx>explosion</sfx>")
    assert not re.match(charfmt.grammar("regex"), BODY)


@pytest.fixture(scope="module")
def engines() -> dict[str, Any]:
    pytest.importorskip("llguidance", reason="llguidance is not installed (pip install charfmt[engines])")
    from llguidance.gbnf_to_lark import gbnf_to_lark
    from test_export import Engine

    return {
        "lark": Engine(charfmt.grammar("lark", tags=TAGS, vocabulary=VOCAB)),
        "gbnf": Engine(gbnf_to_lark(charfmt.grammar("gbnf", tags=TAGS, vocabulary=VOCAB))),
        "default": Engine(charfmt.grammar("lark")),
    }


@pytest.mark.parametrize("target", ["lark", "gbnf"])
def test_every_grammar_target_allows_the_custom_tag_and_only_its_values(engines: dict[str, Any], target: str) -> None:
    engine = engines[target]
    assert engine.accepts(reply_text(BODY))
    assert not engine.accepts(reply_text("<sfx>explosion</sfx>"))
    assert not engine.accepts(reply_text("<emo>furious</emo>"))  # the vocabulary still holds the emotion tag
    assert not engines["default"].accepts(reply_text(BODY))


def _joyful(reply: charfmt.Reply) -> charfmt.Reply:
    """``reply`` with every emotion key replaced by one of ``VOCAB``'s."""
    return reply.model_copy(
        update={
            "chats": [
                c.model_copy(
                    update={
                        "segments": [s.model_copy(update={"text": "joy"}) if s.tag == "emo" else s for s in c.segments]
                    }
                )
                for c in reply.chats
            ]
        }
    )


@settings(max_examples=40, deadline=None)
@given(replies(tags=TAGS))
def test_the_grammars_accept_every_reply_of_the_table(engines: dict[str, Any], reply: charfmt.Reply) -> None:
    text = charfmt.dumps(_joyful(reply))
    assert engines["lark"].accepts(text) and engines["gbnf"].accepts(text)
    custom = any(s.tag in ("sfx", "whisper") for c in reply.chats for s in c.segments)
    assert engines["default"].accepts(text) == (not custom)


# --- strategies -----------------------------------------------------------------------------------


def test_the_strategies_generate_the_custom_tags_and_their_values() -> None:
    assert find(segments(TAGS), lambda s: s.tag == "sfx").text in SFX.values
    assert find(segments(TAGS), lambda s: s.tag == "whisper").tag == "whisper"
    assert "<sfx>" in find(bodies(TAGS), lambda b: "<sfx>" in b)
    turn = find(user_turns(TAGS), lambda t: any(s.tag == "sfx" for c in t.chats for s in c.segments))
    assert charfmt.parse_input(charfmt.render_user_block(turn), tags=TAGS) == turn.model_copy(
        update={"diagnostics": []}
    )


@given(damaged_replies(tags=TAGS))
def test_damaged_replies_start_from_replies_in_the_table(damaged: Any) -> None:
    assert charfmt.parse(charfmt.dumps(damaged.original), tags=TAGS) == damaged.original


# --- speech ----------------------------------------------------------------------------------------


def test_sentences_read_the_tables_speech_tags_when_asked() -> None:
    reply = charfmt.parse(reply_text(BODY), tags=TAGS)
    assert [s.text for s in charfmt.sentences(reply)] == ["Who's there?"]
    assert [s.text for s in charfmt.sentences(reply, tags=TAGS)] == ["Who's there?", "Stay close."]
    assert [s.text for s in charfmt.sentences(reply, tags=["whisper"])] == ["Stay close."]
    assert [s.emotion for s in charfmt.sentences(reply, tags=TAGS)] == ["joy", "joy"]
    assert charfmt.SentenceSplitter().tags == frozenset({"msg"})


# --- user input -------------------------------------------------------------------------------------


def test_shorthand_reads_a_custom_tags_prefix() -> None:
    turn = charfmt.parse_shorthand("[sfx:thunder] [joy] Eek!", tags=TAGS)
    assert [(s.tag, s.text) for c in turn.chats for s in c.segments] == [
        ("sfx", "thunder"),
        ("emo", "joy"),
        ("msg", "Eek!"),
    ]
    unknown = charfmt.parse_shorthand("[sfx:explosion] Eek!", tags=TAGS)
    assert [d.code for d in unknown.diagnostics] == ["CF401"]
    assert [d.code for d in charfmt.parse_shorthand("[sfx:thunder] Eek!").diagnostics] == ["CF401"]


def test_a_user_block_with_a_custom_tag_reads_back_with_the_table() -> None:
    turn = charfmt.UserTurn(chats=[charfmt.UserChat(segments=[charfmt.Segment(tag="sfx", text="thunder")])])
    block = charfmt.render_user_block(turn)
    assert charfmt.parse_input(block, tags=TAGS) == turn
    with pytest.raises(charfmt.ParseError):
        charfmt.parse_input(block)


# --- characters ---------------------------------------------------------------------------------------

TOML = """
name = "Yuki"
persona = "A narrator."

[[emotions]]
key = "joy"

[[tags]]
name = "sfx"
role = "cue"
description = "a sound effect"
values = ["door_slam", "thunder"]
prefixes = ["sfx"]
"""


def test_a_character_file_declares_its_tags() -> None:
    character = charfmt.Character.from_toml(TOML)
    assert character.tags == DEFAULT_TAGS.extend(
        TagSpec("sfx", "cue", "a sound effect", values=("door_slam", "thunder"), prefixes=("sfx",))
    )
    assert character.shorthand("[sfx:thunder] hi").chats[0].segments[0].tag == "sfx"
    assert charfmt.Character.model_validate(character.model_dump()) == character
    assert charfmt.Character(name="A", persona="p", emotions=[{"key": "joy"}]).tags is DEFAULT_TAGS


def test_the_example_character_with_sfx_loads_and_drives_every_path() -> None:
    character = charfmt.Character.load(ROOT / "examples" / "characters" / "yuki.toml")
    assert [t.name for t in character.tags.with_role("cue")] == ["sfx"]
    reply = character.examples[0].reply
    assert [e.text for e in reply.events(character.tags) if isinstance(e, Cue)] == ["wind_howl"]
    assert "## Cues" in charfmt.render_system(character)
    assert charfmt.parse(charfmt.dumps(reply), tags=character.tags, vocabulary=character.vocabulary) == reply


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (('role = "cue"', 'role = "sound"'), "<character>:10: tags[0].role: tag 'sfx': role 'sound' is not one of"),
        (('name = "sfx"', 'name = "Sfx"'), "<character>:9: tags[0].name: tag name 'Sfx' must be lower-case"),
        (('name = "sfx"', 'name = "msg"'), "<character>:9: tags[0].name: 'msg' is a built-in tag (the built-in"),
        (('name = "sfx"', 'name = "text"'), "<character>:9: tags[0].name: 'text' cannot be a tag name"),
        (('role = "cue"', 'role = "speech"'), "<character>:12: tags[0].values: tag 'sfx': only a cue tag"),
        (
            (
                'role = "cue"\ndescription = "a sound effect"\nvalues = ["door_slam", "thunder"]',
                'role = "emotion"\ndescription = "d"',
            ),
            "<character>:10: tags[0].role: tag 'sfx': the emotion tag is <emo>",
        ),
        (('"thunder"]', '"thunder", " x"]'), "<character>:12: tags[0].values: tag 'sfx': value ' x' is not a key"),
        (('description = "a sound effect"\n', ""), "<character>:8: tags[0]: a tag needs description"),
        (('prefixes = ["sfx"]', 'prefixes = "sfx"'), "<character>:13: tags[0].prefixes: tag 'sfx': prefixes is a list"),
        (('prefixes = ["sfx"]', "volume = 3"), "<character>:13: tags[0].volume: unknown key 'volume'"),
    ],
)
def test_a_bad_tags_entry_is_a_character_error_at_its_line(edit: tuple[str, str], expected: str) -> None:
    with pytest.raises(CharacterError) as info:
        charfmt.Character.from_toml(TOML.replace(*edit))
    assert str(info.value).startswith(expected), str(info.value)


def test_a_duplicate_tags_entry_is_a_character_error() -> None:
    twice = TOML + '\n[[tags]]\nname = "sfx"\nrole = "cue"\ndescription = "again"\n'
    with pytest.raises(CharacterError, match=r"tags\[1\]\.name: tag 'sfx' is declared twice"):
        charfmt.Character.from_toml(twice)


def test_an_example_reply_must_use_a_cue_value_from_the_list() -> None:
    text = TOML + '\n[[examples]]\nuser = "hi"\n[[examples.reply]]\nbody = "<emo>joy</emo>\\n<sfx>boom</sfx>"\n'
    with pytest.raises(CharacterError, match="CF131 <sfx> value 'boom' is not one of door_slam, thunder"):
        charfmt.Character.from_toml(text)


def test_the_grammar_command_uses_a_characters_tags(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from charfmt.cli import main

    path = tmp_path / "yuki.toml"
    path.write_text(TOML, encoding="utf-8")
    assert main(["grammar", "--target", "regex", "--character", str(path)]) == 0
    pattern = capsys.readouterr().out.strip()
    assert re.match(pattern, "<emo>joy</emo>\n<sfx>thunder</sfx>") and not re.match(pattern, "<sfx>boom</sfx>")
