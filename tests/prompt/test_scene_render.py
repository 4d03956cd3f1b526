"""``Scene.render_turn`` and ``charfmt render --scene``: a scene's whole request for one turn, as a character's is
rendered (providers, structured output, a token budget, lore before/after the cast and at a depth)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

import charfmt
from charfmt.cli import main
from charfmt.prompt._token_fit import count_messages
from charfmt.prompt.lorebook import Lorebook
from charfmt.prompt.render import ESTIMATE, BudgetError
from charfmt.prompt.scene import Scene

SCENE_FILE = ROOT / "examples" / "scenes" / "mars_shrine.toml"
BOOK = Lorebook.from_json(
    {
        "name": "Mars",
        "entries": [
            {"keys": ["bell"], "content": "The bell was cast on Earth in 1907.", "position": "before_char",
             "insertion_order": 10},
            {"keys": ["bell"], "content": "The shop smells of ozone.", "position": "after_char",
             "insertion_order": 20},
            {"keys": ["dust"], "content": "[Dust storms last a week.]", "insertion_order": 5,
             "extensions": {"position": 4, "depth": 1, "role": 0}},
        ],
    },
    "Mars",
)  # fmt: skip


@pytest.fixture(scope="module")
def scene() -> Scene:
    return Scene.load(SCENE_FILE)


def _exchange(scene: Scene, n: int) -> charfmt.Exchange:
    reply = scene.parse(json.dumps({"chats": [
        {"type": "C", "order": 1, "speaker": "rex", "body": f"<emo>neutral</emo>\n<msg>Answer number {n}.</msg>"},
        {"type": "E", "order": 2, "body": "The lamp hums."},
    ]}))  # fmt: skip
    return charfmt.Exchange(user=scene.shorthand(f"question {n}"), reply=reply)


def test_without_lore_or_budget_the_request_is_render_messages(scene: Scene) -> None:
    history = [_exchange(scene, n) for n in range(3)]
    turn = scene.shorthand("[joy] Is it fixed?")
    rendered = scene.render_turn(history, turn)
    assert rendered.request == scene.render_messages(history, turn)
    assert rendered.lore is None and rendered.diagnostics == []
    assert scene.render_turn(history, "[joy] Is it fixed?").request == rendered.request  # a line: shorthand


def test_the_lore_goes_before_and_after_the_cast_and_at_its_depth(scene: Scene) -> None:
    history = [_exchange(scene, 0)]
    rendered = scene.render_turn(history, "The bell rings in the dust.", lorebooks=[BOOK], seed=1)
    messages = rendered.request["messages"]
    system = messages[0]["content"]
    assert system.index("The bell was cast on Earth") < system.index("## Cast") < system.index("smells of ozone")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "system", "user"]
    assert messages[3]["content"] == "[Dust storms last a week.]"  # depth 1: before the new turn
    assert {d.code for d in rendered.diagnostics} == {"CF940"}
    assert rendered.lore is not None and len(rendered.lore.placed) == 3


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_another_provider_gets_the_depth_lore_after_the_cast(scene: Scene, provider: str) -> None:
    rendered = scene.render_turn([], "dust everywhere", provider=provider, lorebooks=[BOOK], structured=True)
    request = rendered.request
    system = request["system"] if provider == "anthropic" else request["system_instruction"]["parts"][0]["text"]
    assert system.index("## Cast") < system.index("[Dust storms last a week.]")
    assert [d.message for d in rendered.diagnostics if d.code == "CF945"] == [
        f"lore at a depth placed after the cast ({provider})"
    ]
    schema = json.dumps(request["output_config"] if provider == "anthropic" else request["generation_config"])
    assert '"rex"' in schema and '"mio"' in schema  # the scene's schema: its speakers


def test_structured_openai_holds_the_scenes_schema(scene: Scene) -> None:
    rendered = scene.render_turn([], "hi", structured=True)
    assert rendered.request["response_format"]["json_schema"]["schema"] == scene.json_schema("openai")


def test_a_budget_leaves_out_the_oldest_exchanges_then_cuts_lore(scene: Scene) -> None:
    history = [_exchange(scene, n) for n in range(12)]
    whole = scene.render_turn(history, "the bell")

    def count(messages: list[dict[str, str]]) -> int:
        return count_messages(ESTIMATE, messages)

    need = count(whole.request["messages"])
    fitted = scene.render_turn(history, "the bell", budget=need - 1)
    kept = [m["content"] for m in fitted.request["messages"] if m["role"] == "assistant"]
    assert 0 < len(kept) < 12 and "Answer number 11." in kept[-1] and "Answer number 0." not in kept[0]
    assert count(fitted.request["messages"]) <= need - 1
    alone = scene.render_turn([], "the bell", lorebooks=[BOOK], seed=1)
    bare = scene.render_turn([], "the bell", seed=1)
    tight = count(bare.request["messages"]) + 5  # room for no lore entry: each is cut, said in CF947
    cut = scene.render_turn([], "the bell", lorebooks=[BOOK], seed=1, budget=tight)
    assert alone.lore is not None and len(alone.lore.placed) == 2
    assert "CF947" in {d.code for d in cut.diagnostics}
    assert "The bell was cast" not in cut.request["messages"][0]["content"]
    with pytest.raises(BudgetError, match="the budget is 50"):
        scene.render_turn([], "the bell", budget=50)


def test_wrong_arguments_are_named(scene: Scene) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'budgett'"):
        scene.render_turn([], "hi", budgett=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"history\[0\] is a str"):
        scene.render_turn(["hi"], "hi")  # type: ignore[list-item]
    with pytest.raises(TypeError, match="or a str, not int"):
        scene.render_turn([], 3)  # type: ignore[arg-type]
    with pytest.raises(charfmt.CharfmtError, match="unknown provider 'claude'"):
        scene.render_turn([], "hi", provider="claude")


def test_cli_render_scene(capsys: pytest.CaptureFixture[str], tmp_path: Path, scene: Scene) -> None:
    history = tmp_path / "history.jsonl"
    reply = {"chats": [{"type": "C", "order": 1, "speaker": "mio", "body": "<emo>joy</emo>\n<msg>はい！</msg>"}]}
    history.write_text(json.dumps({"user": "[joy] hello", "reply": reply}, ensure_ascii=False) + "\n", "utf-8")
    book = tmp_path / "mars.json"
    book.write_text(json.dumps({"entries": [{"keys": ["bell"], "content": "The bell is cracked.", "order": 1}]}))
    args = ["render", "--scene", str(SCENE_FILE), "--say", "[angry] The bell!", "--history", str(history),
            "--lorebook", str(book), "--structured", "--explain", "--seed", "3"]  # fmt: skip
    assert main(args) == 0
    out, err = capsys.readouterr()
    request: dict[str, Any] = json.loads(out)
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert '"speaker":"mio"' in request["messages"][2]["content"] and "The bell is cracked." in out
    assert "<emo>" in request["messages"][-1]["content"]  # [angry]: an emotion of the first cast member's
    assert request["response_format"]["json_schema"]["schema"] == scene.json_schema("openai")
    assert "lore: 1 fired" in err
    assert main(["render", "--scene", str(SCENE_FILE), "--say", "hi", "--provider", "anthropic"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"system", "messages"}


@pytest.mark.parametrize(
    ("extra", "code", "said"),
    [
        (["--format", "text"], 2, "a scene is rendered as a chat request"),
        (["--greeting", "1"], 2, "a scene has no greeting"),
        (["--character", "examples/characters/rex.toml"], 2, "not allowed with argument --scene"),
        (["--budget", "40"], 1, "the budget is 40"),
    ],
)
def test_cli_render_scene_errors(extra: list[str], code: int, said: str) -> None:
    args = ["render", "--scene", str(SCENE_FILE), "--say", "hi", *extra]
    run = [sys.executable, "-m", "charfmt", *args]
    done = subprocess.run(run, check=False, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == code and said in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stdout == ""


@pytest.mark.parametrize("command", ["render", "chat"])
def test_a_missing_or_unreadable_scene_file_is_exit_2(tmp_path: Path, command: str) -> None:
    for path, said in ((tmp_path / "nope.toml", "No such file"), (tmp_path, "Is a directory"), ("-", "cast files")):
        args = [command, "--scene", str(path), "--say", "hi"]
        if command == "chat":
            args += ["--endpoint", "http://127.0.0.1:9"]
        run = [sys.executable, "-m", "charfmt", *args]
        done = subprocess.run(run, check=False, capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


def test_the_players_words_are_the_whole_casts(
    scene: Scene, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a newcomer's trial: a scene read the player's ``[sad]`` with its first member's words only (Rex's),
    so another member's emotion (Mio's ``sad``) was text with ``CF401``, in every door."""

    def emotions(turn: charfmt.UserTurn) -> list[str]:
        return [s.text for chat in turn.chats for s in chat.segments if s.tag == "emo"]

    assert emotions(scene.shorthand("[sad] The bell is broken.")) == ["sad"]  # Mio's key
    assert emotions(scene.shorthand("[grumpy] Fix it.")) == ["annoyed"]  # Rex's alias: his key
    assert emotions(scene.shorthand("[angry] Now!")) == ["angry"]  # Rex's alias, Mio's key: the key
    assert [d.code for d in scene.shorthand("[bogus] hi").diagnostics] == ["CF401"]
    block = '<user_chats>\n<chat type="C">\n<emo>shy</emo>\n<msg>hi</msg>\n</chat>\n</user_chats>'
    read = scene.read_turn(block, context={"mood": "tired"})
    assert emotions(read) == ["shy"] and read.diagnostics == []
    assert "<emo>sad</emo>" in scene.render_turn([], "[sad] hi").request["messages"][-1]["content"]
    history = tmp_path / "h.jsonl"
    reply = {"chats": [{"type": "C", "order": 1, "speaker": "mio", "body": "<emo>sad</emo>\n<msg>はい</msg>"}]}
    history.write_text(json.dumps({"user": "[sad] hello", "reply": reply}) + "\n", encoding="utf-8")
    (past,) = charfmt.load_history(history, scene)
    assert emotions(past.user) == ["sad"]
    assert main(["render", "--scene", str(SCENE_FILE), "--say", "[sad] hi", "--history", str(history)]) == 0
    out, err = capsys.readouterr()
    assert "<emo>sad</emo>\\n<msg>hi</msg>" in json.loads(out)["messages"][-1]["content"].replace("\n", "\\n")
    assert "CF401" not in err


def test_a_scene_files_example_with_a_word_no_member_knows_is_an_error(tmp_path: Path) -> None:
    text = SCENE_FILE.read_text(encoding="utf-8").replace('user = "[joy] ', 'user = "[furious] ', 1)
    assert "[furious]" in text
    (tmp_path / "s.toml").write_text(text.replace("../characters/", str(SCENE_FILE.parent.parent / "characters") + "/"))
    with pytest.raises(charfmt.CharacterError, match=r"examples\[0\]\.user: CF401"):
        Scene.load(tmp_path / "s.toml")


def test_a_members_card_book_given_again_is_read_once() -> None:
    """Found by a newcomer's trial: a cast member's card book given again (``--lorebook``) fired each entry twice
    in a scene (its copy names the member in ``{{char}}``), where a character reads it once with ``CF946``."""
    folder = ROOT / "tests" / "data" / "new_characters"
    scene = Scene.load(folder / "mountain_hut.toml")
    again = Lorebook.from_bytes((folder / "oskar.json").read_bytes(), "oskar.json")
    once = scene.render_turn([], "The dog Birgit hates this storm.", seed=1)
    twice = scene.render_turn([], "The dog Birgit hates this storm.", lorebooks=[again], seed=1)
    assert once.lore is not None and twice.lore is not None and len(once.lore.placed) == 3
    assert [p.text for p in twice.lore.placed] == [p.text for p in once.lore.placed]
    assert [d.code for d in twice.diagnostics] == ["CF946", "CF940", "CF933"] and "CF946" not in str(once.diagnostics)
    (unsent,) = [d for d in once.diagnostics if d.code == "CF933"]  # the Oskar card's own instructions: not sent
    assert "cast 'oskar': its card's system_prompt and post_history_instructions not sent" in unsent.message
    assert "Answer as Oskar alone" not in str(once.request)
    assert "Oskar believes a storm" in twice.request["messages"][0]["content"]  # {{char}}: the member's name


def test_a_scenes_body_regex_holds_only_the_casts_emotion_keys(scene: Scene) -> None:
    """Found by a newcomer's trial: ``grammar --target regex --scene`` let the emotion tag hold any key (a body has
    no speaker, so it now holds any of the cast's keys, as a character's holds its own)."""
    import re

    body = re.compile(scene.grammar("regex"))
    assert body.fullmatch("<emo>shy</emo>\n<msg>hi</msg>") and body.fullmatch("<emo>annoyed</emo>\n<msg>hi</msg>")
    assert not body.fullmatch("<emo>bogus</emo>\n<msg>hi</msg>")
