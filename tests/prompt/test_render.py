"""Characters, shorthand, templates and provider requests; symmetry and injection safety."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import ROOT, TESTS, mypy_strict
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt import Character, CharacterError, UserContext, UserTurn
from charfmt.cli import main
from charfmt.testing import replies, user_texts, user_turns

CHARACTERS = ROOT / "examples" / "characters"
GOLDEN = TESTS / "golden"
MIO = Character.load(CHARACTERS / "mio.toml")
REX = Character.load(CHARACTERS / "rex.toml")
HISTORY = charfmt.load_history(ROOT / "examples" / "history.jsonl", MIO)

# --- symmetry and safety -------------------------------------------------------


@given(user_turns())
def test_parse_input_reads_back_every_rendered_turn(turn: UserTurn) -> None:
    assert charfmt.parse_input(charfmt.render_user_block(turn)) == turn


def _tags(text: str) -> list[str]:
    return re.findall(r"<[^<>]*>", text)


def _structure(turn: UserTurn) -> list[str]:
    """The tags a turn's block must hold: exactly those of its structure, nothing more."""
    tags = ["<user_chats>"]
    for chat in turn.chats:
        tags.append(f'<chat type="{chat.type}">')
        if chat.type == "C":
            for seg in chat.segments:
                tags += [f"<{seg.tag}>", f"</{seg.tag}>"]
        tags.append("</chat>")
    return [*tags, "</user_chats>"]


@given(user_turns())
def test_no_user_string_creates_or_closes_a_tag(turn: UserTurn) -> None:
    block = charfmt.render_user_block(turn)
    assert _tags(block) == _structure(turn)
    context = block.split("<user_chats>")[0]
    assert "\n\n" not in context.strip("\n"), "a context value must not start a new block"
    if turn.context:
        assert len(context.strip("\n").split("\n")) == 1 + len(turn.context.lines())


@given(user_texts(min_size=1), user_texts(min_size=1))
def test_character_strings_cannot_inject_tags_into_the_system_prompt(name: str, persona: str) -> None:
    plain = MIO.model_copy(update={"name": "Mio", "persona": "A shrine maiden."})
    hostile = MIO.model_copy(update={"name": name, "persona": persona})
    assert _tags(charfmt.render_system(hostile)) == _tags(charfmt.render_system(plain))


def test_template_syntax_in_user_text_is_not_evaluated() -> None:
    turn = UserTurn.say("{{ 7*7 }} {% if true %}yes{% endif %} {# c #}")
    block = charfmt.render_user_block(turn)
    assert "{{ 7*7 }} {% if true %}yes{% endif %} {# c #}" in block
    assert "49" not in block


def test_nothing_html_escapes_japanese_or_quotes() -> None:
    turn = UserTurn.say("「こんにちは」\"quoted\" 'single' é", emotion="joy")
    block = charfmt.render_user_block(turn)
    assert "「こんにちは」\"quoted\" 'single' é" in block
    assert "&#34;" not in block and "&quot;" not in block and "&#39;" not in block
    system = charfmt.render_system(MIO)
    assert "満面の笑み" in system and '"type"' in system


def test_context_block_is_pattern_b() -> None:
    turn = UserTurn(
        chats=UserTurn.say("なんでそんなことをしたの？").chats,
        context=UserContext(emotion="angry", action="kicking the ground", environment="raining", extra={"HP": "12"}),
    )
    block = charfmt.render_user_block(turn)
    assert block.startswith(
        "[User Context]\nEmotion: angry\nAction: kicking the ground\nEnvironment: raining\nHP: 12\n\n<user_chats>\n"
    )
    assert charfmt.parse_input(block) == turn


def test_parse_input_rejects_what_it_did_not_render() -> None:
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse_input('<user_chats>\n<chat type="C">\n<msg>hi</msg>\n</chat>\n<msg>stray</msg>\n</user_chats>')
    assert info.value.diagnostics[0].code == "CF501"
    assert info.value.diagnostics[0].line == 5


# --- templates -------------------------------------------------------------------


@pytest.mark.parametrize("character", [MIO, REX], ids=["mio", "rex"])
def test_every_example_in_the_system_prompt_parses_back(character: Character) -> None:
    examples = charfmt.render_system(character).split("## Examples")[1]
    replies_shown = [line for line in examples.splitlines() if line.startswith('{"chats"')]
    blocks = re.findall(r"<user_chats>\n.*?</user_chats>", examples, re.S)
    assert len(replies_shown) == len(blocks) == len(character.examples)
    for line, block, example in zip(replies_shown, blocks, character.examples, strict=True):
        assert charfmt.parse(line, vocabulary=character.vocabulary) == example.reply
        assert charfmt.parse_input(block) == example.user


def test_system_prompt_lists_every_tag_and_emotion() -> None:
    system = charfmt.render_system(MIO)
    for tag in charfmt.TAGS:
        assert f"<{tag.name}>...</{tag.name}>: {tag.description}" in system
    for emotion in MIO.emotions:
        assert f"- {emotion.key}: {emotion.description}" in system


def test_missing_variable_names_the_variable_and_template(tmp_path: Path) -> None:
    (tmp_path / "user.j2").write_text("{{ turn.chats }} {{ nickname }}")
    with pytest.raises(charfmt.TemplateError, match=r"user\.j2.*'nickname' is undefined"):
        charfmt.render_user_block(UserTurn.say("hi"), templates=tmp_path)


def test_own_templates_override_one_template_and_run_sandboxed(tmp_path: Path) -> None:
    (tmp_path / "system.j2").write_text("I am {{ character.name }}; {{ character.persona | length }} chars.")
    assert charfmt.render_system(REX, templates=tmp_path) == f"I am Rex; {len(REX.persona)} chars."
    request = charfmt.render_messages(REX, [], UserTurn.say("hi"), templates=tmp_path)
    assert request["messages"][1]["content"].startswith("<user_chats>")  # user.j2 from the defaults
    (tmp_path / "system.j2").write_text("{{ character.__class__.__init__.__globals__ }}")
    with pytest.raises(charfmt.TemplateError):
        charfmt.render_system(REX, templates=tmp_path)
    (tmp_path / "system.j2").write_text("{% for x in range(10**9) %}{% endfor %}")
    with pytest.raises(charfmt.TemplateError, match="sandbox"):
        charfmt.render_system(REX, templates=tmp_path)


# -- issue 22.9: the templates folder is read as it is now, not as it was at first use --

_OWN = {
    "system.j2": "OWN SYSTEM {{ character.name }}",
    "user.j2": "OWN USER",
    "text.j2": "OWN TEXT {{ character.name }}",
}


def _rendered(name: str, folder: Path) -> str:
    if name == "system.j2":
        return charfmt.render_system(REX, templates=folder)
    if name == "user.j2":
        return charfmt.render_user_block(UserTurn.say("hi"), templates=folder)
    return charfmt.render_text(REX, [], UserTurn.say("hi"), templates=folder)


@pytest.mark.parametrize("name", list(_OWN))
def test_a_template_added_changed_or_removed_later_is_used_at_once(tmp_path: Path, name: str) -> None:
    default = _rendered(name, tmp_path)  # the folder's first use: the template is not there yet
    assert "OWN" not in default
    (tmp_path / name).write_text(_OWN[name])
    assert _rendered(name, tmp_path).startswith(_OWN[name].split(" {{")[0])
    (tmp_path / name).write_text("CHANGED")
    assert _rendered(name, tmp_path) == "CHANGED"
    (tmp_path / name).unlink()
    assert _rendered(name, tmp_path) == default


def test_template_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "user.j2").write_text("line one\n{% if %}")
    with pytest.raises(charfmt.TemplateError, match=r"user\.j2, line 2"):
        charfmt.render_user_block(UserTurn.say("hi"), templates=tmp_path)


# --- provider requests -----------------------------------------------------------


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("CHARFMT_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; CHARFMT_UPDATE_GOLDEN=1 rewrites it"


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_golden_request_shapes(provider: str) -> None:
    turn = MIO.shorthand("[angry] なんで教えてくれないの？ [look_away] もういい")
    request = charfmt.render_messages(MIO, HISTORY, turn, provider=provider, structured=True)
    _golden(f"mio.{provider}.json", json.dumps(request, ensure_ascii=False, indent=2) + "\n")


def test_golden_text_prompt() -> None:
    _golden("rex.text.txt", charfmt.render_text(REX, [], REX.shorthand("[joy] Is my drone ready?")) + "\n")


def test_roles_alternate_and_history_goes_back_canonical() -> None:
    turn = UserTurn.say("hi")
    openai = charfmt.render_messages(MIO, HISTORY, turn)["messages"]
    assert [m["role"] for m in openai] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert openai[2]["content"] == charfmt.dumps(HISTORY[0].reply)
    anthropic = charfmt.render_messages(MIO, HISTORY, turn, provider="anthropic")
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant"] * 2 + ["user"]
    assert anthropic["system"] == charfmt.render_system(MIO)
    gemini = charfmt.render_messages(MIO, HISTORY, turn, provider="gemini")
    assert [c["role"] for c in gemini["contents"]] == ["user", "model"] * 2 + ["user"]
    assert gemini["system_instruction"]["parts"][0]["text"] == charfmt.render_system(MIO)


@given(st.lists(replies(max_chats=2).filter(lambda r: bool(r.chats)), min_size=1, max_size=4))
def test_any_history_reply_goes_back_exactly(history_replies: list[charfmt.Reply]) -> None:
    history = [charfmt.Exchange(user=UserTurn.say("x"), reply=r) for r in history_replies]
    messages = charfmt.render_messages(REX, history, UserTurn.say("y"))["messages"]
    assert [charfmt.parse(m["content"]) for m in messages[2::2][: len(history)]] == history_replies


def test_budget_drops_oldest_whole_exchanges_first() -> None:
    turn = UserTurn.say("hi")
    full = charfmt.render_messages(MIO, HISTORY, turn, counter=len)["messages"]
    total = sum(len(m["content"]) for m in full)
    newest_cost = len(full[3]["content"]) + len(full[4]["content"])
    trimmed = charfmt.render_messages(MIO, HISTORY, turn, budget=total - 1, counter=len)["messages"]
    assert trimmed == [full[0], full[3], full[4], full[5]]
    assert sum(len(m["content"]) for m in trimmed) <= total - 1
    tight = total - newest_cost - 1
    assert charfmt.render_messages(MIO, HISTORY, turn, budget=tight, counter=len)["messages"] == [full[0], full[5]]
    with pytest.raises(charfmt.BudgetError, match="budget"):
        charfmt.render_messages(MIO, HISTORY, turn, budget=10, counter=len)


def test_budget_applies_to_text_prompts_too() -> None:
    turn = UserTurn.say("hi")
    full = charfmt.render_text(MIO, HISTORY, turn)
    cut = charfmt.render_text(MIO, HISTORY, turn, budget=charfmt.estimate_tokens(full) - 5)
    assert "ようこそ" not in cut and "裏山ですか" in cut


def test_estimate_tokens_counts_wide_characters_more() -> None:
    assert charfmt.estimate_tokens("abcd" * 10) < charfmt.estimate_tokens("あいうえ" * 10)
    assert charfmt.estimate_tokens("") == 0


# --- characters and shorthand ------------------------------------------------------


def test_example_characters_load() -> None:
    assert MIO.language == "ja" and MIO.vocabulary.resolve("喜び") == "joy"
    assert REX.language == "en" and REX.emotions[1].sprite == "rex_annoyed"
    assert MIO.examples[0].user.chats[0].segments[0].text == "joy"


def test_history_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"user": "hi", "reply": {"chats": []}}\n{"user": "hi", "reply": "<msg>x</msg>"}\n')
    with pytest.raises(CharacterError, match=r"h\.jsonl:2: CF101"):
        charfmt.load_history(path, MIO)


# --- history files: pretty-printed exchanges read, broken ones said in charfmt's words ----------

EXCHANGE = {"user": "hi", "reply": {"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\n<msg>yo</msg>"}]}}
ONE = json.dumps(EXCHANGE)
PRETTY = json.dumps(EXCHANGE, indent=2)

NOT_EXCHANGE = 'each exchange is an object {"user": ..., "reply": ...}, one per line (or spread over lines)'
BROKEN_HISTORIES: dict[str, tuple[str, str]] = {
    # name: (file text, the error line after "charfmt: error: FILE:")
    "pretty, a bracket missing": (
        PRETTY.replace('"chats": [', '"chats": ', 1) + "\n",
        "10: not JSON at column 5: expected ',' or the end of the object or array"
        " (in the exchange that opens on line 1)",
    ),
    "pretty, cut off": (ONE + "\n" + PRETTY[:40], "2: not JSON: the exchange that opens on this line is cut off"),
    "a key without quotes": (
        ONE + "\n" + ONE.replace('"user"', "user"),
        "2: not JSON at column 2: expected a key in double quotes",
    ),
    "a trailing comma": (ONE[:-1] + ",}\n", "1: not JSON at column 104: trailing comma"),
    "two on one line": (
        ONE + " " + ONE,
        f"1: {NOT_EXCHANGE}; more text follows one on its line",
    ),
    "a reply, not an exchange": (
        json.dumps(EXCHANGE["reply"], indent=2),
        f"1: {NOT_EXCHANGE}; found an object with keys 'chats'",
    ),
    "an array of exchanges": (
        json.dumps([EXCHANGE], indent=1),
        f"1: {NOT_EXCHANGE}; found an array",
    ),
}


@pytest.mark.parametrize("layout", ["pretty", "pretty, blank lines and CRLF", "mixed"])
def test_render_reads_a_pretty_printed_history(layout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    texts = {
        "pretty": PRETTY + "\n" + PRETTY + "\n",
        "pretty, blank lines and CRLF": ("\n" + PRETTY + "\n\n\n" + PRETTY).replace("\n", "\r\n"),
        "mixed": ONE + "\n" + PRETTY + "\n" + ONE + "\n",
    }
    (tmp_path / "lines.jsonl").write_text(ONE + "\n" + ONE + "\n" + (ONE + "\n" if layout == "mixed" else ""))
    (tmp_path / "pretty.jsonl").write_text(texts[layout], newline="")
    args = ["render", "--character", str(CHARACTERS / "mio.toml"), "--say", "again", "--history"]
    assert main([*args, str(tmp_path / "lines.jsonl")]) == 0
    expected = capsys.readouterr().out
    assert main([*args, str(tmp_path / "pretty.jsonl")]) == 0
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize("name", BROKEN_HISTORIES)
def test_a_broken_history_is_said_in_charfmts_words(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, said = BROKEN_HISTORIES[name]
    path = tmp_path / "h.jsonl"
    path.write_text(text, encoding="utf-8")
    assert main(["render", "--character", str(CHARACTERS / "mio.toml"), "--say", "hi", "--history", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"charfmt: error: {path}:{said}\n"
    assert "Expecting" not in err and "(char " not in err  # no message of Python's json module


def test_convert_reads_a_pretty_printed_history_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "h.jsonl").write_text(PRETTY + "\n", encoding="utf-8")
    out = tmp_path / "h.pam.json"
    assert (
        main(
            [
                "convert",
                "--from",
                "jsonl",
                "--to",
                "pam",
                "--character",
                str(CHARACTERS / "mio.toml"),
                str(tmp_path / "h.jsonl"),
                str(out),
            ]
        )
        == 0
    )
    assert charfmt.interop.read("pam", out.read_text(encoding="utf-8"), MIO)[0].reply.chats[0].segments[1].text == "yo"


# --- CLI ---------------------------------------------------------------------------


def test_cli_render_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["render", "--character", str(CHARACTERS / "mio.toml"), "--say", "[angry] なんで？"]
    assert main([*args, "--provider", "anthropic", "--history", str(ROOT / "examples" / "history.jsonl")]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["messages"][-1]["content"].endswith("<emo>angry</emo>\n<msg>なんで？</msg>\n</chat>\n</user_chats>")


@pytest.mark.parametrize(
    ("provider", "path"),
    [
        ("openai", ["response_format", "json_schema", "schema"]),
        ("anthropic", ["output_config", "format", "schema"]),
        ("gemini", ["generation_config", "response_schema"]),
    ],
)
def test_cli_render_structured_carries_the_characters_vocabulary(
    provider: str, path: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["render", "--character", str(CHARACTERS / "rex.toml"), "--say", "hi", "--structured"]
    assert main([*args, "--provider", provider]) == 0
    schema = json.loads(capsys.readouterr().out)
    for name in path:
        schema = schema[name]
    assert schema == charfmt.json_schema(provider, vocabulary=REX.vocabulary)
    assert schema != charfmt.json_schema(provider)
    assert "The only keys allowed in <emo>: " + ", ".join(REX.vocabulary.keys) + "." in json.dumps(schema)


def test_cli_render_text_for_both_example_characters(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("mio", "rex"):
        assert main(["render", "--character", str(CHARACTERS / f"{name}.toml"), "--say", "hi", "--format", "text"]) == 0
        assert capsys.readouterr().out.rstrip().endswith(("### ミオ", "### Rex"))


def test_cli_render_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n')
    assert main(["render", "--character", str(bad), "--say", "hi"]) == 1
    assert capsys.readouterr().err.startswith(f"charfmt: error: {bad}")
    assert main(["render", "--character", str(CHARACTERS / "mio.toml"), "--say", "[sigh] hi"]) == 0
    assert "CF401" in capsys.readouterr().err


# --- one keyword list (issue 41 item 2): render_messages/render_turn and render_text/render_text_turn -------

_RENDERERS = ("render_messages", "render_turn", "render_text", "render_text_turn")


@pytest.mark.parametrize("name", _RENDERERS)
def test_a_keyword_the_renderer_does_not_take_is_a_type_error(name: str) -> None:
    from charfmt.prompt import render

    function = getattr(render, name)
    with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'budgett'$"):
        function(MIO, HISTORY, "hi", budgett=100)
    if name.startswith("render_text"):  # (a chat provider's keywords are no text prompt's)
        with pytest.raises(TypeError, match="unexpected keyword argument 'provider'"):
            function(MIO, HISTORY, "hi", provider="openai")


@pytest.mark.parametrize("name", _RENDERERS)
def test_each_keyword_reaches_the_renderer(name: str) -> None:
    from charfmt.prompt import render

    function = getattr(render, name)
    with pytest.raises(charfmt.BudgetError):  # the budget taken...
        function(MIO, HISTORY, "hi", budget=1)
    assert "hi" in str(function(MIO, HISTORY, "hi", budget=1, counter=lambda text: 0))  # ...and the counter
    if not name.startswith("render_text"):
        assert "system" in str(function(MIO, HISTORY, "hi", provider="anthropic"))
        assert "response_format" in str(function(MIO, HISTORY, "hi", structured=True))


USER_CALLS = """
import charfmt
from charfmt.prompt.render import render_text, render_turn

mio = charfmt.Character.load("mio.toml")
charfmt.render_messages(mio, [], "hi", budget=100, provider="anthropic", structured=True)
render_turn(mio, [], "hi", budgett=100)
render_text(mio, [], "hi", provider="openai")
render_turn(mio, [], "hi", budget="many")
"""


@pytest.mark.long
def test_mypy_strict_checks_a_users_keywords(tmp_path: Path) -> None:
    result = mypy_strict(tmp_path, USER_CALLS)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["7", "8", "9"], result.stdout
    assert '"budgett"' in errors[0] and '"provider"' in errors[1] and '"budget"' in errors[2]
