"""Character cards: V1/V2/V3 (PNG, JSON, CHARX) read as characters; characters written as V3 cards and read back."""

from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

import charfmt
from charfmt._png import blank_png, text_chunks, with_text_chunks
from charfmt.cli import main
from charfmt.prompt import cards
from charfmt.prompt.cards import export_card

EXAMPLES = ROOT / "examples" / "characters"
# Extensions as another tool wrote them: odd spacing, escapes and number forms must survive byte for byte.
EXTENSIONS = (
    '{ "depth_prompt" : {"prompt":"x","depth":4}, "fav":false,"num":1.50e2, "uni":"\\u00e9\\n", '
    '"deep": [1, {"a": null}] }'
)
DATA: dict[str, Any] = {
    "name": "Seraphina",
    "description": "{{char}} guards the forest and speaks gently to {{user}}.",
    "personality": "caring, wise",
    "scenario": "{{User}} wakes up in <BOT>'s glade.",
    "first_mes": "*kneels beside you* You're awake! How do you feel?",
    "mes_example": "<START>\n{{user}}: Where am I?\n{{char}}: *smiles softly* You're in my glade.\nYou are safe.\n"
    "<START>\n{{user}}: Who are you?\n{{char}}: I am {{char}}.\n<START>\n{{user}}: hello?",
    "creator_notes": "notes",
    "system_prompt": "Be kind.",
    "post_history_instructions": "",
    "alternate_greetings": ["Hello again."],
    "character_book": {"entries": [{"keys": ["glade"], "content": "A magic glade.", "extensions": {}}]},
    "tags": ["fantasy"],
    "creator": "me",
    "character_version": "1",
}


def _card(spec: str, data: dict[str, Any], extensions: str = EXTENSIONS) -> str:
    body = json.dumps(
        {"spec": spec, "spec_version": "3.0" if spec.endswith("v3") else "2.0", "data": {**data, "extensions": "@"}}
    )
    return body.replace('"@"', extensions)


def _png(**chunks: str) -> bytes:
    return with_text_chunks(blank_png(), {k: base64.b64encode(v.encode()).decode() for k, v in chunks.items()})


V3_DATA = {
    **DATA,
    "group_only_greetings": [],
    "assets": [
        {"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"},
        {"type": "emotion", "uri": "embeded://assets/emotion/joy.png", "name": "joy", "ext": "png"},
        {"type": "emotion", "uri": "embeded://assets/emotion/sad.png", "name": "sad", "ext": "png"},
        {"type": "emotion", "uri": "x", "name": "bad <key>", "ext": "png"},
    ],
}


def _charx() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("card.json", _card("chara_card_v3", V3_DATA))
        z.writestr("assets/emotion/joy.png", blank_png())
        z.writestr("assets/emotion/sad.png", blank_png())
    return buf.getvalue()


CARDS = {
    "v2.png": lambda: _png(chara=_card("chara_card_v2", DATA)),
    "v3.png": lambda: _png(chara=_card("chara_card_v2", {**DATA, "name": "Old"}), ccv3=_card("chara_card_v3", V3_DATA)),
    "v3.json": lambda: _card("chara_card_v3", V3_DATA).encode(),
    "v3.charx": _charx,
    "v1.json": lambda: json.dumps(DATA).encode(),
}


@pytest.mark.parametrize("name", list(CARDS))
def test_cards_import(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(CARDS[name]())
    c = charfmt.Character.load(path)
    assert c.name == "Seraphina"  # v3.png: the ccv3 chunk wins over chara
    assert c.persona == (  # the card's macros kept (TavernAI's <BOT> too): a render expands them
        "{{char}} guards the forest and speaks gently to {{user}}.\n\n"
        "{{char}}'s personality: caring, wise\n\nScenario: {{User}} wakes up in <BOT>'s glade."
    )
    assert (
        "Seraphina guards the forest and speaks gently to User.\n\n"
        "Seraphina's personality: caring, wise\n\nScenario: User wakes up in Seraphina's glade."
    ) in charfmt.render_system(c)
    greeting = cards.greeting(c, 0, str)  # first_mes: the opening reply, no longer a few-shot
    assert greeting is not None and charfmt.dumps(greeting) == (
        '{"chats":[{"type":"C","order":1,"body":"<act>kneels beside you</act>\\n'
        "<msg>You're awake! How do you feel?</msg>\"}]}"
    )
    assert cards.greeting_count(c) == 2 and cards.greeting(c, 1, str) is not None
    where, who = c.examples
    assert [s.text for s in where.user.chats[0].segments] == ["Where am I?"]
    assert [(s.tag, s.text) for s in where.reply.chats[0].segments] == [
        ("act", "smiles softly"),
        ("msg", "You're in my glade.\nYou are safe."),
    ]
    assert who.reply.chats[0].segments[-1].text == "I am {{char}}."
    assert c.card is not None
    codes = [d.code for d in c.card.diagnostics]
    assert "CF921" in codes  # the block without a line of Seraphina
    if name.startswith("v3"):
        assert [(e.key, e.sprite) for e in c.emotions] == [
            ("joy", "embeded://assets/emotion/joy.png"),
            ("sad", "embeded://assets/emotion/sad.png"),
        ]
        assert "CF922" in codes and "CF920" not in codes
    else:
        assert "CF920" in codes and c.vocabulary.keys[0] == "neutral"
    assert c.card.data["system_prompt"] == "Be kind." and c.card.data["character_book"] == DATA["character_book"]
    assert c.card.data["alternate_greetings"] == ["Hello again."]
    assert c.card.extensions == (EXTENSIONS if name != "v1.json" else "{}")


@pytest.mark.parametrize("name", list(CARDS))
@pytest.mark.parametrize("fmt", ["json", "png"])
def test_a_card_read_and_written_reads_back_the_same(name: str, fmt: str) -> None:
    c = charfmt.Character.from_bytes(CARDS[name](), name)
    out = export_card(c, fmt)  # type: ignore[arg-type]
    again = charfmt.Character.from_bytes(out, f"out.{fmt}")
    assert again == c
    text = out.decode() if fmt == "json" else base64.b64decode(text_chunks(out, limit=10**7)["ccv3"]).decode()
    if name != "v1.json":
        assert EXTENSIONS.rstrip("} ") in text  # the card's own extensions, byte for byte
    assert json.loads(text)["data"]["extensions"]["charfmt"]["version"] == 1
    assert export_card(again, fmt) == out  # (type: ignore) and a second round changes nothing  # type: ignore[arg-type]


@pytest.mark.parametrize("toml", ["rex.toml", "mio.toml", "../../tests/stage/aoi.toml"])
@pytest.mark.parametrize("fmt", ["json", "png"])
def test_a_charfmt_character_exported_as_a_card_reads_back_the_same(toml: str, fmt: str) -> None:
    c = charfmt.Character.load(EXAMPLES / toml)
    out = export_card(c, fmt)  # type: ignore[arg-type]
    assert charfmt.Character.from_bytes(out, "card") == c
    card = json.loads(out if fmt == "json" else base64.b64decode(text_chunks(out, limit=10**7)["ccv3"]))
    assert card["spec"] == "chara_card_v3" and card["data"]["name"] == c.name
    assert card["data"]["description"] == c.persona
    if fmt == "png":  # older readers get a V2 chunk
        v2 = json.loads(base64.b64decode(text_chunks(out, limit=10**7)["chara"]))
        assert v2["spec"] == "chara_card_v2" and "assets" not in v2["data"]


def test_a_card_edited_elsewhere_keeps_what_the_editor_added() -> None:
    rex = charfmt.Character.load(EXAMPLES / "rex.toml")
    card = json.loads(export_card(rex))
    card["data"]["system_prompt"] = "Stay gruff."
    card["data"]["extensions"]["talkativeness"] = "0.4"
    edited = charfmt.Character.from_bytes(json.dumps(card).encode(), "edited.json")
    assert edited.model_copy(update={"card": None}) == rex
    assert edited.card is not None and edited.card.data["system_prompt"] == "Stay gruff."
    assert json.loads(edited.card.extensions) == {"talkativeness": "0.4"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (blank_png(), "a PNG without a character card"),
        (blank_png()[:-6], "no IEND chunk"),
        (with_text_chunks(blank_png(), {"chara": "not base64!"}), "'chara' chunk is not base64"),
        (_png(chara="[1]"), "the card is not a JSON object"),
        (_png(chara='{"spec": "chara_card_v9", "data": {}}'), "unknown card spec 'chara_card_v9'"),
        (b'{"spec": "chara_card_v2", "data": {"name": ""}}', "data.name: the card has no name"),
        (b'{"spec": "chara_card_v2", "data": {"name": "A", "tags": "x"}}', "data.tags: tags is not a list"),
        (b"PK\x03\x04broken", "not a readable CHARX (zip) file"),
        (b'{"name": "A", "first_mes": "hi"', "the card is not JSON"),
    ],
)
def test_a_bad_card_is_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(charfmt.CharacterError) as e:
        charfmt.Character.from_bytes(data, "bad.card")
    assert str(e.value).startswith("bad.card: ") and message in str(e.value)


def test_a_charx_without_card_json_or_too_large() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("other.json", "{}")
    with pytest.raises(charfmt.CharacterError, match=r"a CHARX file without card\.json"):
        charfmt.Character.from_bytes(buf.getvalue(), "x.charx")
    with pytest.raises(charfmt.CharacterError, match=r"card\.json is larger than 100 bytes"):
        charfmt.Character.from_bytes(_charx(), "x.charx", max_size=100)


def test_render_grammar_and_stream_take_a_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sera.png"
    path.write_bytes(CARDS["v3.png"]())
    assert main(["render", "--character", str(path), "--say", "[joy] hi", "--format", "text"]) == 0
    out = capsys.readouterr().out
    # the card's system_prompt opens the prompt in place of charfmt's line ({{original}} would keep it)
    assert out.startswith("Be kind.") and "Seraphina guards the forest" in out and "- joy" in out
    assert main(["grammar", "--target", "gbnf", "--character", str(path)]) == 0
    assert '"sad"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("x.png", b"", "x.png: empty file"),
        ("x.json", b"", "x.json: empty file"),
        ("x.charx", b"", "x.charx: empty file"),
        ("junk.png", b'name = "A"\npersona = "p"\n', "junk.png: not a PNG"),
        ("junk.charx", b"hello", "junk.charx: not a CHARX (zip) file"),
        ("x.json", b"hello", "x.json: not a character card: the card is not JSON"),
        ("package.json", b'{"name":"my-npm-package","version":"1.0.0"}', "package.json: spec: not a character card"),
    ],
)
def test_a_file_that_is_not_a_card_says_what_it_is(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(charfmt.CharacterError) as e:
        charfmt.Character.load(path)
    assert str(e.value).startswith(str(tmp_path / message))


def test_nulls_in_a_card_read_as_empty_and_a_broken_ccv3_falls_back_to_chara() -> None:
    data = {**DATA, "description": None, "alternate_greetings": None}
    text = _card("chara_card_v2", data, "[]")
    ch = charfmt.Character.from_bytes(text.encode(), "null.json")
    assert ch.card is not None
    assert ch.card.data["description"] == "" and ch.card.data["alternate_greetings"] == []
    codes = [d.code for d in ch.card.diagnostics]
    assert codes.count("CF923") == 2 and "CF924" in codes
    png = _png(chara=_card("chara_card_v2", DATA), ccv3="{broken")
    fallback = charfmt.Character.from_bytes(png, "x.png")
    assert fallback.name == DATA["name"] and fallback.card is not None
    assert "CF925" in [d.code for d in fallback.card.diagnostics]


def test_an_item_of_a_list_field_that_is_not_text_is_said_and_kept() -> None:
    data = {**DATA, "alternate_greetings": ["*waves* Hello again.", 7, None], "tags": ["ok", {"x": 1}]}
    ch = charfmt.Character.from_bytes(_card("chara_card_v2", data).encode(), "odd.json")
    assert ch.card is not None and ch.card.data["alternate_greetings"] == ["*waves* Hello again.", 7, None]
    said = [d.message for d in ch.card.diagnostics if d.code == "CF934"]
    assert len(said) == 2
    assert "data.alternate_greetings[1], data.alternate_greetings[2]" in said[0] and "data.tags[1]" in said[1]


def test_an_unknown_macro_in_a_greeting_is_said_when_the_card_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {**DATA, "first_mes": "Hi {{user}}, {{wether}} is fine.", "alternate_greetings": [
        "{{random:a,b}} {{char}}", "Hey {{nonesuch}} and {{nonesuch}}"]}  # fmt: skip
    ch = charfmt.Character.from_bytes(_card("chara_card_v2", data).encode(), "macro.json")
    assert ch.card is not None
    said = [d.message for d in ch.card.diagnostics if d.code == "CF928"]
    assert len(said) == 2  # the known macros of the first alternate greeting are not reported
    assert said[0].startswith("data.first_mes:") and "{{wether}}" in said[0]
    assert said[1].startswith("data.alternate_greetings[1]:") and "{{nonesuch}} (2 times)" in said[1]
    path = tmp_path / "macro.json"
    path.write_text(_card("chara_card_v2", data), encoding="utf-8")
    assert main(["render", "--character", str(path), "--say", "hi"]) == 0
    assert "CF928 warning: data.first_mes: unknown macro" in capsys.readouterr().err


def test_what_reading_a_card_noted_reaches_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.json"
    path.write_text(_card("chara_card_v2", DATA), encoding="utf-8")
    assert main(["render", "--character", str(path), "--say", "hi", "--format", "text"]) == 0
    assert f"{path}:1:1: CF920 info: the card names no emotions" in capsys.readouterr().err


def test_user_name_and_nickname_replace_user_and_char(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sera.json"
    path.write_text(_card("chara_card_v3", {**V3_DATA, "nickname": "Sera"}), encoding="utf-8")
    ch = charfmt.Character.load(path, user_name="Alex")
    assert ch.user_name == "Alex" and ch.name == "Seraphina"
    system = charfmt.render_system(ch)
    assert "Sera guards the forest and speaks gently to Alex." in system
    assert "{{" not in system and "User" not in system.split("## How to answer")[0]
    assert main(["render", "--character", str(path), "--user-name", "Alex", "--say", "hi", "--format", "text"]) == 0
    assert "speaks gently to Alex" in capsys.readouterr().out
    # issue 40: a card charfmt exported, loaded with another user_name, says the new name (not the exporter's)
    exported = charfmt.Character.from_bytes(export_card(ch), "again.json", user_name="Kim")
    assert exported.user_name == "Kim"
    again = charfmt.render_system(exported)
    assert "speaks gently to Kim." in again and "Alex" not in again


def test_card_fields_kept_but_unused_are_said_once() -> None:
    ch = charfmt.Character.from_bytes(_card("chara_card_v2", DATA).encode(), "sera.json")
    assert ch.card is not None
    assert [d for d in ch.card.diagnostics if d.code == "CF926"] == []  # lorebook, prompts, greetings: all used
    card = _card("chara_card_v3", {**V3_DATA, "group_only_greetings": ["Hi all"]})
    grouped = charfmt.Character.from_bytes(card.encode())
    assert grouped.card is not None
    notes = [d.message for d in grouped.card.diagnostics if d.code == "CF926"]
    assert notes == ["kept in the card but not used in prompts: group_only_greetings"]


def test_a_card_edited_in_sillytavern_reads_with_the_edits() -> None:
    rex = charfmt.Character.load(EXAMPLES / "rex.toml")
    card = json.loads(export_card(rex))
    assert set(card["data"]["extensions"]["charfmt"]["fields"]) >= {"description", "first_mes"}
    card["data"]["description"] = "{{char}} runs a repair shop on Mars and haggles with {{user}}."
    card["data"]["first_mes"] = "*looks up* What now?"
    edited = charfmt.Character.from_bytes(json.dumps(card).encode(), "edited.json")
    assert f"Rex runs a repair shop on Mars and haggles with {rex.user_name}." in charfmt.render_system(edited)
    assert edited.emotions == rex.emotions and edited.tags == rex.tags
    greeting = cards.greeting(edited, 0, str)
    assert greeting is not None and [s.text for s in greeting.chats[0].segments] == ["looks up", "What now?"]
    assert edited.card is not None
    notes = [d.message for d in edited.card.diagnostics if d.code == "CF927"]
    assert notes == ["card fields edited since charfmt wrote them (description, first_mes): read from the card"]


def test_a_character_whose_persona_changed_exports_the_new_description() -> None:
    c = charfmt.Character.from_bytes(CARDS["v3.json"](), "v3.json")
    changed = c.model_copy(update={"persona": "A new persona."})
    card = json.loads(export_card(changed))
    assert card["data"]["description"] == "A new persona." and card["data"]["personality"] == ""
    again = charfmt.Character.from_bytes(json.dumps(card).encode(), "again.json")
    assert again.persona == "A new persona." and again.examples == c.examples
    assert json.loads(export_card(c))["data"]["description"] == c.card.data["description"]  # type: ignore[union-attr]


def test_v3_emotion_assets_named_by_sillytaverns_labels_take_their_aliases() -> None:
    """A V3 card's sprites named ``anger``/``sad`` (SillyTavern's labels): the player's ``[angry]`` and
    ``[sadness]`` find them, and an alias another asset holds as its own name is left to that asset."""
    card = {
        "spec": "chara_card_v3",
        "spec_version": "3.0",
        "data": {
            "name": "Oskar",
            "first_mes": "Hello.",
            "assets": [
                {"type": "emotion", "uri": "embeded://a.png", "name": name, "ext": "png"}
                for name in ("anger", "sad", "joy", "happy", "owlish")
            ],
        },
    }
    c = charfmt.Character.from_card(json.dumps(card).encode())
    by_key = {e.key: e for e in c.emotions}
    assert list(by_key) == ["anger", "sad", "joy", "happy", "owlish"]
    assert list(by_key["anger"].aliases) == ["angry", "annoyance", "annoyed"]
    assert "sadness" in by_key["sad"].aliases and by_key["sad"].description == "Sad, hurt, lonely."
    assert "happy" not in by_key["joy"].aliases and not by_key["owlish"].aliases
    def emotion(say: str) -> str:
        return next(s.text for s in c.shorthand(say).chats[0].segments if s.tag == "emo")

    assert emotion("[angry] Where are my gloves?") == "anger" and emotion("[sadness] He never came.") == "sad"
