"""A card in full, through every door: its system prompt, post-history instructions, greeting and lorebook
in ``render_turn``, ``charfmt render`` (``--lorebook``, ``--greeting``, ``--explain``), ``charfmt chat``
and ``charfmt serve`` (a scripted upstream sees them; ``/v1/turn`` sends the greeting and the lore).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

import charfmt
from charfmt import Character, greeting_exchange
from charfmt.cli import main
from charfmt.prompt.render import render_text, render_text_turn, render_turn

BOOK: dict[str, Any] = {
    "name": "Coast",
    "entries": [
        {"keys": ["storm"], "content": "Storms wreck ships on the reef.", "position": "before_char",
         "insertion_order": 10, "comment": "Storms"},
        {"keys": ["storm"], "content": "{{char}} fears storms since her father drowned.", "position": "after_char",
         "insertion_order": 20},
        {"keys": ["lamp"], "content": "[The lamp is older than the town.]", "insertion_order": 5,
         "extensions": {"position": 4, "depth": 1, "role": 0}},
        {"keys": ["gull"], "content": "Gulls nest on the tower.", "enabled": False},
    ],
}  # fmt: skip
CARD: dict[str, Any] = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Mira",
        "description": "{{char}} keeps the lighthouse. {{user}} is her oldest friend.",
        "personality": "", "scenario": "", "mes_example": "",
        "first_mes": "*waves from the gallery* Welcome back, {{user}}!",
        "alternate_greetings": ["*trims the wick* Oh. It's you, {{user}}."],
        "system_prompt": "{{original}} Write like a sea shanty.",
        "post_history_instructions": "Keep {{char}}'s answer under three sentences.",
        "character_book": BOOK,
    },
}  # fmt: skip
WORLD = {"entries": {"0": {"uid": 0, "key": ["reef"], "content": "The reef is called the Teeth.", "order": 1}}}


@pytest.fixture
def card_file(tmp_path: Path) -> Path:
    path = tmp_path / "mira.json"
    path.write_text(json.dumps(CARD), encoding="utf-8")
    return path


@pytest.fixture
def mira(card_file: Path) -> Character:
    return Character.load(card_file, user_name="Alex")


def test_a_turn_holds_the_cards_prompt_greeting_lore_and_post_history(mira: Character) -> None:
    greeting = greeting_exchange(mira)
    assert greeting is not None
    rendered = render_turn(mira, [greeting], mira.shorthand("a storm is coming, check the lamp"), seed=1)
    messages = rendered.request["messages"]
    assert [m["role"] for m in messages] == ["system", "assistant", "system", "user"]
    system = messages[0]["content"]
    assert system.startswith("You are Mira. Stay in character at all times. Write like a sea shanty.")
    lore_at, persona_at = system.index("## Lore\nStorms wreck ships"), system.index("## Persona")
    assert lore_at < persona_at < system.index("## More lore\nMira fears storms since her father drowned.")
    assert "Mira keeps the lighthouse. Alex is her oldest friend." in system
    assert "Welcome back, Alex!" in messages[1]["content"]  # the greeting: the model's first line
    assert messages[2]["content"] == "[The lamp is older than the town.]"  # depth 1: before the newest message
    said = messages[3]["content"]  # after the history, closing the turn's message (no late system message)
    assert said.index("a storm is coming") < said.index("\n\nKeep Mira's answer under three sentences.")
    assert said.endswith("Keep Mira's answer under three sentences.")
    assert rendered.lore is not None
    assert [e["comment"] or e["uid"] for e in rendered.lore.report()["fired"]] == ["2", "Storms", "1"]
    assert "{{" not in json.dumps(rendered.request)


def test_another_provider_gets_the_depth_lore_and_post_history_in_its_system_prompt(mira: Character) -> None:
    rendered = render_turn(mira, [], mira.shorthand("the lamp"), provider="anthropic", seed=1)
    assert [m["role"] for m in rendered.request["messages"]] == ["user"]
    system = rendered.request["system"]
    assert "## More lore\n[The lamp is older than the town.]" in system
    assert system.rstrip().endswith("Keep Mira's answer under three sentences.")
    assert [d.code for d in rendered.diagnostics if d.code == "CF945"] == ["CF945"]


def test_a_text_prompt_shows_the_greeting_as_the_characters_line(mira: Character) -> None:
    greeting = greeting_exchange(mira, 1)
    assert greeting is not None
    text = render_text(mira, [greeting], mira.shorthand("hello"))
    first_header = text.index("### ")
    assert text[first_header:].startswith("### Mira\n") and "It's you, Alex." in text


def test_the_original_of_a_system_prompt_is_charfmts_opening_line(card_file: Path) -> None:
    card = json.loads(card_file.read_text())
    card["data"]["system_prompt"] = "Narrate in the second person."
    replaced = Character.from_bytes(json.dumps(card).encode(), "c.json")
    system = charfmt.render_system(replaced)
    assert system.startswith("Narrate in the second person.") and "You are Mira." not in system


def test_lore_that_does_not_fit_the_budget_is_cut_and_reported(mira: Character, card_file: Path) -> None:
    turn = mira.shorthand("a storm and the lamp")
    rendered = render_turn(mira, [], turn, budget=2000, counter=len)
    assert rendered.lore is not None
    assert rendered.lore.report()["budget"] == 500  # a quarter of the prompt's budget, where the book sets none
    assert len(rendered.lore.placed) == 3
    card = json.loads(card_file.read_text())
    card["data"]["character_book"]["token_budget"] = 60
    tight = Character.from_bytes(json.dumps(card).encode(), "c.json", user_name="Alex")
    rendered = render_turn(tight, [], turn, budget=2000, counter=len)
    assert rendered.lore is not None
    report = rendered.lore.report()
    assert report["budget"] == 60 and [e["uid"] for e in report["fired"]] == ["1"]  # the highest order first
    assert [e["uid"] for e in report["cut"]] == ["0", "2"]
    assert [d.code for d in rendered.diagnostics] == ["CF940", "CF941"]
    assert "Storms wreck" not in json.dumps(rendered.request) and "Mira fears storms" in json.dumps(rendered.request)


def test_the_same_seed_renders_the_same_turn(mira: Character) -> None:
    card = mira.card
    assert card is not None
    data = {**card.data, "description": "{{char}} hums {{random:a jig,a reel,a hymn,a dirge,a march}}."}
    moody = mira.model_copy(update={"card": card.model_copy(update={"data": data}), "persona": data["description"]})
    turn = moody.shorthand("hi")
    once = [render_turn(moody, [], turn, seed=s).request for s in range(12)]
    assert once == [render_turn(moody, [], turn, seed=s).request for s in range(12)]
    assert len({json.dumps(r) for r in once}) > 1


# --- charfmt render -------------------------------------------------------------------------


def test_render_shows_the_greeting_and_explains_the_lore(
    card_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = tmp_path / "coast_world.json"
    world.write_text(json.dumps(WORLD))
    argv = ["render", "--character", str(card_file), "--user-name", "Alex", "--say", "a storm near the reef",
            "--lorebook", str(world), "--explain", "--seed", "3"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    messages = json.loads(captured.out)["messages"]
    assert [m["role"] for m in messages] == ["system", "assistant", "user"]
    assert messages[2]["content"].endswith("Keep Mira's answer under three sentences.")
    assert "Welcome back, Alex!" in messages[1]["content"] and "The reef is called the Teeth." in messages[0]["content"]
    assert "lore: 3 fired, 0 cut;" in captured.err
    assert "  fired coast_world:0 (order 1, before, " in captured.err and "'Storms'" in captured.err
    assert main([*argv[:-3], "--greeting", "1"]) == 0
    assert "It's you, Alex." in json.loads(capsys.readouterr().out)["messages"][1]["content"]
    assert main([*argv[:-3], "--greeting", "none"]) == 0
    assert [m["role"] for m in json.loads(capsys.readouterr().out)["messages"]][:2] == ["system", "user"]


@pytest.mark.parametrize(
    ("content", "status", "said"),
    [
        ("not json", 1, "not JSON"),
        ('{"entries": "x"}', 1, "not a lorebook"),
        (None, 2, "No such file or directory"),
    ],
)
def test_a_bad_lorebook_file_is_one_error_line(
    card_file: Path, tmp_path: Path, content: str | None, status: int, said: str
) -> None:
    world = tmp_path / "world.json"
    if content is not None:
        world.write_text(content)
    argv = ["render", "--character", str(card_file), "--say", "hi", "--lorebook", str(world)]
    out = subprocess.run(
        [sys.executable, "-m", "charfmt", *argv], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == status and out.stdout == ""
    errors = [line for line in out.stderr.splitlines() if line.startswith("charfmt: error:")]
    assert len(errors) == 1 and said in errors[0], out.stderr


def test_a_lorebook_entry_that_cannot_be_read_is_said_on_stderr(
    card_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = tmp_path / "w.json"
    world.write_text(json.dumps({"entries": {"0": {"key": ["a"], "content": 5}}}))
    assert main(["render", "--character", str(card_file), "--say", "hi", "--lorebook", str(world)]) == 0
    assert (
        f"{world}:1:1: CF943 warning: lorebook 'w': entry 0: content is not a string: skipped"
        in capsys.readouterr().err
    )


# --- charfmt chat ---------------------------------------------------------------------------


def test_chat_opens_with_the_greeting_and_the_model_sees_it_and_the_lore(mira: Character) -> None:
    import io

    from charfmt import chat

    seen: list[list[dict[str, str]]] = []

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        seen.append(messages)
        yield '{"chats":[{"type":"C","order":1,"body":"<emo>neutral</emo>\\n<msg>Aye.</msg>"}]}'

    out = io.StringIO()
    status = chat.run(mira, generate=generate, says=["a storm!"], out=out, stats=[], seed=1)  # type: ignore[arg-type]
    assert status == 0
    shown = out.getvalue()
    assert shown.index("Welcome back, Alex!") < shown.index("you> a storm!")
    assert [m["role"] for m in seen[0]] == ["system", "assistant", "user"]  # (no late system message: chat templates)
    assert seen[0][2]["content"].endswith("Keep Mira's answer under three sentences.")
    assert "Storms wreck ships" in seen[0][0]["content"]


def test_the_lorebook_docs_python_runs() -> None:
    """docs/LOREBOOK.md's Python blocks run as written (their asserts are the docs' claims)."""
    import re

    doc = (ROOT / "docs" / "LOREBOOK.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/LOREBOOK.md", "exec"), {})


# --- scenes ---------------------------------------------------------------------------------


def _scene(tmp_path: Path) -> Any:
    from charfmt.prompt.scene import Scene

    examples = ROOT / "examples"
    text = (examples / "scenes" / "mars_shrine.toml").read_text(encoding="utf-8")
    folder = (examples / "characters").as_posix()
    text = text.replace('"../characters/', f'"{folder}/')
    rex = f'character = "{folder}/rex.toml"'
    text = text.replace(rex, f'{rex}\nlorebook = "rex_lore.json"')
    text = 'lorebook = "shrine.json"\n' + text
    (tmp_path / "rex_lore.json").write_text(json.dumps(
        {"entries": {"0": {"key": ["bolts"], "content": "{{char}} counts every bolt twice."}}}))  # fmt: skip
    (tmp_path / "shrine.json").write_text(json.dumps(
        {"entries": {"0": {"key": ["bell"], "content": "The bell was cast on Earth.", "position": 1}}}))  # fmt: skip
    path = tmp_path / "scene.toml"
    path.write_text(text, encoding="utf-8")
    return Scene.load(path)


def test_a_scene_has_a_lorebook_per_cast_member_and_its_own(tmp_path: Path) -> None:
    scene = _scene(tmp_path)
    assert scene.lorebook is not None and set(scene.cast_lorebooks) == {"rex"}
    turn = scene.cast["rex"].shorthand("how many bolts for the bell?")
    lore = scene.lore([], turn, seed=1)
    assert lore is not None
    assert {(p.entry.book, p.text) for p in lore.placed} == {
        ("rex_lore", "Rex counts every bolt twice."),  # {{char}}: the member whose book it is
        ("shrine", "The bell was cast on Earth."),
    }
    messages = scene.render_messages([], turn, lore=lore)["messages"]
    system = messages[0]["content"]
    assert system.index("## Lore\nRex counts every bolt twice.") < system.index("## Cast")
    assert system.index("## Cast") < system.index("## More lore\nThe bell was cast on Earth.")
    assert scene.lore([], scene.cast["rex"].shorthand("hello"), seed=1).placed == []  # type: ignore[union-attr]


def test_a_scene_lorebook_that_cannot_be_read_names_the_scene_and_key(tmp_path: Path) -> None:
    from charfmt.prompt.scene import Scene

    _scene(tmp_path)
    (tmp_path / "shrine.json").write_text("[]")
    with pytest.raises(charfmt.CharacterError, match=r"scene.toml:1: lorebook: .*shrine.json: not a lorebook"):
        Scene.load(tmp_path / "scene.toml")


def test_the_cards_own_book_given_again_is_read_once_with_a_warning(mira: Character, card_file: Path) -> None:
    """Found by a newcomer's trial: the card given again as ``--lorebook`` fired every entry twice, silently."""
    again = charfmt.Lorebook.from_json(json.loads(card_file.read_text()))  # (named "Coast", as the card's own is)
    copy = charfmt.Lorebook.from_json({**BOOK, "name": "Coast copy"})  # (a copy under another name)
    turn = mira.shorthand("a storm is coming")
    once = render_turn(mira, [], turn, seed=1)
    for books in ([again], [again, copy]):
        rendered = render_turn(mira, [], turn, seed=1, lorebooks=books)
        assert rendered.request == once.request
        assert rendered.lore is not None and once.lore is not None
        assert [p.text for p in rendered.lore.placed] == [p.text for p in once.lore.placed]
        twice = [d for d in rendered.diagnostics if d.code == "CF946"]
        assert len(twice) == len(books) and all("read once" in d.message for d in twice), rendered.diagnostics
    other = charfmt.Lorebook.from_json({**BOOK, "entries": BOOK["entries"][:1]})  # (not the same: fewer entries)
    assert not [d for d in render_turn(mira, [], turn, lorebooks=[other]).diagnostics if d.code == "CF946"]


def test_render_reads_a_cards_own_book_given_as_lorebook_once(
    card_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["render", "--character", str(card_file), "--say", "a storm", "--lorebook", str(card_file), "--explain"]
    assert main(args) == 0
    captured = capsys.readouterr()
    system = json.loads(captured.out)["messages"][0]["content"]
    assert system.count("Storms wreck ships on the reef.") == 1, system
    assert "CF946" in captured.err and captured.err.count("fired ") == 2, captured.err


def _needs(character: Character, turn: str, **options: Any) -> tuple[int, int]:
    """The tokens (``counter=len``, or the default estimate) a turn's request needs with its lore and without."""
    from charfmt.prompt._token_fit import count_messages
    from charfmt.prompt.render import ESTIMATE

    counter = options.get("counter", ESTIMATE)
    with_lore = render_turn(character, [], turn, seed=1, **options).request["messages"]
    bare = render_turn(character, [], turn, seed=1, lorebooks=None, **options).request["messages"]
    return count_messages(counter, with_lore), count_messages(counter, bare)


def test_lore_is_cut_lowest_priority_first_before_a_budget_refuses_the_turn(mira: Character) -> None:
    """Found by a newcomer's trial: lore that fit its own share made a budget that fits a hard error."""
    from charfmt.prompt._token_fit import count_messages

    turn = "a storm is coming, check the lamp"
    whole, bare = _needs(mira, turn, counter=len)
    assert whole > bare
    for budget in range(bare, whole, max(1, (whole - bare) // 7)):
        rendered = render_turn(mira, [], turn, seed=1, budget=budget, counter=len)
        assert count_messages(len, rendered.request["messages"]) <= budget
        assert rendered.lore is not None
        kept, cut = [p.entry.order for p in rendered.lore.placed], [e.order for e in rendered.lore.cut]
        assert cut and kept == sorted(kept) and (not kept or min(kept) > max(cut))  # the lowest orders cut
        notes = [d for d in rendered.diagnostics if d.code == "CF947"]
        assert len(notes) == 1 and f"token budget {budget} reached" in notes[0].message, rendered.diagnostics
        assert all(f":{e.uid}" in notes[0].message for e in rendered.lore.cut)
        assert [d.code for d in rendered.diagnostics if d.code == "CF940"] == (["CF940"] if kept else [])
    fits = render_turn(mira, [], turn, seed=1, budget=whole, counter=len)
    assert fits.lore is not None and not fits.lore.cut and "CF947" not in [d.code for d in fits.diagnostics]
    with pytest.raises(charfmt.BudgetError, match=f"need {whole} tokens, {whole - bare} of them lore") as e:
        render_turn(mira, [], turn, seed=1, budget=bare - 1, counter=len)
    assert f"they still need {bare}); the budget is {bare - 1}" in str(e.value)
    for provider in ("anthropic", "gemini"):  # (every provider, and the text prompt, cut lore the same way)
        other = render_turn(mira, [], turn, seed=1, budget=bare + 40, counter=len, provider=provider)
        assert "CF947" in [d.code for d in other.diagnostics], provider
    text = render_text_turn(mira, [], turn, seed=1, budget=bare + 40, counter=len)
    assert "CF947" in [d.code for d in text.diagnostics] and len(text.request["prompt"]) <= bare + 40


def test_render_cuts_lore_to_fit_its_budget_and_says_how_much_was_lore(card_file: Path) -> None:
    turn = "a storm is coming, check the lamp"
    whole, bare = _needs(Character.load(card_file), turn)
    argv = ["render", "--character", str(card_file), "--say", turn, "--seed", "1", "--explain"]
    for budget, status in ((bare, 0), (bare - 1, 1)):
        out = subprocess.run([sys.executable, "-m", "charfmt", *argv, "--budget", str(budget)],
                             check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == status, out.stderr
        if status == 0:
            assert "CF947" in out.stderr and "cut " in out.stderr, out.stderr
        else:
            assert f"need {whole} tokens, {whole - bare} of them lore" in out.stderr, out.stderr


# --- the card's Character's Note (SillyTavern's extensions.depth_prompt) ----------------------------------------


def _noted(tmp_path: Path, note: Any, *, book: bool = True) -> Path:
    data = {**CARD["data"], "extensions": {"depth_prompt": note, "fav": False}}
    if not book:
        del data["character_book"]
    path = tmp_path / "noted.json"
    path.write_text(json.dumps({**CARD, "data": data}), encoding="utf-8")
    return path


@pytest.mark.parametrize("book", [True, False], ids=["with a book", "without a book"])
def test_a_cards_characters_note_is_sent_every_turn_at_its_depth_and_role(tmp_path: Path, book: bool) -> None:
    note = {"prompt": "[{{char}} hides a letter from {{user}}.]", "depth": 2, "role": "user"}
    mira = Character.load(_noted(tmp_path, note, book=book), user_name="Alex")
    greeting = greeting_exchange(mira)
    assert greeting is not None
    rendered = render_turn(mira, [greeting], mira.shorthand("hello there"), seed=1)
    messages = rendered.request["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]  # depth 2: before the greeting
    assert messages[1]["content"] == "[Mira hides a letter from Alex.]"
    assert any(d.code == "CF940" and "Character's Note" in d.message for d in rendered.diagnostics)
    text = render_text_turn(mira, [greeting], mira.shorthand("hello there"), seed=1)  # no system turns: CF945
    assert "[Mira hides a letter from Alex.]" in text.request["prompt"]
    assert any(d.code == "CF945" for d in text.diagnostics)


def test_the_characters_note_is_the_last_lore_cut_and_written_back_as_it_was(tmp_path: Path) -> None:
    from charfmt.prompt._token_fit import count_messages
    from charfmt.prompt.cards import export_card

    mira = Character.load(_noted(tmp_path, {"prompt": "Note.", "depth": 0}), user_name="Alex")
    turn = "a storm is coming, check the lamp"
    whole, bare = _needs(mira, turn, counter=len)
    note = len("Note.") + 10  # (room for the note's message and a little more, not for the book's entries)
    rendered = render_turn(mira, [], turn, seed=1, budget=bare + note, counter=len)
    assert count_messages(len, rendered.request["messages"]) <= bare + note < whole
    assert rendered.request["messages"][-1] == {"role": "system", "content": "Note."}  # depth 0: after the turn
    assert rendered.lore is not None and rendered.lore.cut  # the book's entries were cut, the note kept
    assert [p.entry.uid for p in rendered.lore.placed] == ["depth_prompt"]
    assert any(d.code == "CF947" for d in rendered.diagnostics)
    again = Character.from_card(export_card(mira), user_name="Alex")  # (the note is not put in the book)
    assert again.card is not None and mira.card is not None
    assert again.card.data["character_book"] == mira.card.data["character_book"]
    assert json.loads(again.card.extensions)["depth_prompt"] == {"prompt": "Note.", "depth": 0}


NOTES = [
    ({"prompt": "x", "depth": -1}, "has depth -1, not a whole number from 0 to 1000"),
    ({"prompt": "x", "depth": "4"}, "has depth '4', not a whole number"),
    ({"prompt": "x", "role": "narrator"}, "has role 'narrator', not system, user or assistant"),
    ({"prompt": 5}, "has a prompt that is not text"),
    ("note", "is str, not an object"),
]


@pytest.mark.parametrize(("note", "said"), NOTES, ids=[n[1].split(",")[0] for n in NOTES])
def test_a_characters_note_charfmt_cannot_read_is_skipped_with_a_warning(
    tmp_path: Path, note: Any, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _noted(tmp_path, note)
    assert main(["render", "--character", str(path), "--say", "a storm", "--seed", "1"]) == 0
    captured = capsys.readouterr()
    assert "CF943 warning" in captured.err and f"(extensions.depth_prompt) {said}" in captured.err
    assert "Storms wreck ships on the reef." in json.loads(captured.out)["messages"][0]["content"]  # (the book read)


def test_an_empty_characters_note_adds_nothing(tmp_path: Path) -> None:
    mira = Character.load(_noted(tmp_path, {"prompt": "  ", "depth": 1}, book=False), user_name="Alex")
    rendered = render_turn(mira, [], mira.shorthand("hi"), seed=1)
    assert [m["role"] for m in rendered.request["messages"]] == ["system", "user"] and rendered.lore is None


# --- found by a newcomer's trial of cards (trial13) -------------------------------------------------------------


def test_a_card_given_as_its_own_lorebook_is_read_once_though_it_has_a_characters_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _noted(tmp_path, {"prompt": "Note.", "depth": 1})
    argv = ["render", "--character", str(path), "--lorebook", str(path), "--say", "a storm", "--explain"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "CF946" in captured.err and captured.out.count("Storms wreck ships on the reef.") == 1
    assert captured.out.count("Note.") == 1


BOOKS_OF_NOTHING = [
    ({"entries": [{"keys": ["a"], "content": 42}]}, None, "entry 0: content is not a string: skipped"),
    ({"entries": "none"}, None, "the card's character_book"),
    (None, "just a string", "(extensions.depth_prompt) is str, not an object: skipped"),
]


@pytest.mark.parametrize(("book", "note", "said"), BOOKS_OF_NOTHING, ids=["entries skipped", "no list", "note"])
def test_a_cards_lore_of_which_nothing_can_be_read_is_said_not_dropped_in_silence(
    tmp_path: Path, book: Any, note: Any, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {**CARD["data"], "character_book": book} if book is not None else dict(CARD["data"])
    if book is None:
        del data["character_book"]
    if note is not None:
        data["extensions"] = {"depth_prompt": note}
    path = tmp_path / "empty_lore.json"
    path.write_text(json.dumps({**CARD, "data": data}), encoding="utf-8")
    mira = Character.load(path, user_name="Alex")
    rendered = render_turn(mira, [], mira.shorthand("hi"), seed=1)
    assert any(d.code == "CF943" and said in d.message for d in rendered.diagnostics), rendered.diagnostics
    assert main(["render", "--character", str(path), "--say", "hi", "--explain"]) == 0
    err = capsys.readouterr().err
    assert "CF943 warning" in err and said in err and "lore: no entry to scan" in err


def test_a_card_book_entry_with_no_position_goes_after_the_character_as_in_sillytavern(tmp_path: Path) -> None:
    book = {"entries": [{"keys": ["storm"], "content": "Storms come from the west.", "insertion_order": 1}]}
    path = tmp_path / "nopos.json"
    path.write_text(json.dumps({**CARD, "data": {**CARD["data"], "character_book": book}}), encoding="utf-8")
    mira = Character.load(path, user_name="Alex")
    system = render_turn(mira, [], mira.shorthand("a storm"), seed=1).request["messages"][0]["content"]
    assert system.index("## Persona") < system.index("## More lore\nStorms come from the west.")


def test_a_cards_linked_world_and_regex_scripts_are_said_to_be_unused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extensions = {"world": "Coast World", "regex_scripts": [{"scriptName": "trim", "findRegex": "/x/g"}], "fav": True}
    path = tmp_path / "linked.json"
    path.write_text(json.dumps({**CARD, "data": {**CARD["data"], "extensions": extensions}}), encoding="utf-8")
    mira = Character.load(path)
    assert mira.card is not None
    said = [d.message for d in mira.card.diagnostics if d.code == "CF926"]
    assert len(said) == 1 and "'Coast World': give it with --lorebook" in said[0]
    assert "1 of SillyTavern's regex" in said[0]
    assert main(["render", "--character", str(path), "--say", "hi"]) == 0
    assert "CF926 info" in capsys.readouterr().err
