"""The lore's rules the same at every door: a card's book from any card file (``--lorebook`` a PNG or CHARX as
``--character`` reads one), depth entries in a prompt without system turns (``CF945`` for a text prompt as for
Anthropic), an entry that lost its probability roll shown by ``--explain``, and a ``lorebooks`` list that holds
something else refused, never ignored."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from charfmt import Character
from charfmt.cli import main
from charfmt.prompt.cards import export_card
from charfmt.prompt.lorebook import Lorebook, LorebookError
from charfmt.prompt.render import render_messages, render_text, render_text_turn, render_turn
from charfmt.prompt.scene import Scene

sys.path.insert(0, str(Path(__file__).parents[1]))
from hostile_files import zip_of

REX = ROOT / "examples" / "characters" / "rex.toml"
BOOK: dict[str, Any] = {
    "name": "Saltmere",
    "entries": [
        {"keys": ["dragon"], "content": "A red dragon sleeps under the mountain.", "position": "before_char",
         "insertion_order": 10, "comment": "dragon"},
        {"keys": ["king"], "content": "The king is dead.", "insertion_order": 30, "comment": "depth",
         "extensions": {"position": 4, "depth": 1, "role": 0}},
        {"keys": ["gold"], "content": "Gold is scarce.", "insertion_order": 20, "comment": "rare",
         "extensions": {"probability": 0, "useProbability": True}},
    ],
}  # fmt: skip
CARD: dict[str, Any] = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {"name": "Kira", "description": "{{char}} forges blades.", "first_mes": "Welcome.", "character_book": BOOK},
}


@pytest.fixture(scope="module")
def rex() -> Character:
    return Character.load(REX)


def _card_files(folder: Path) -> dict[str, Path]:
    card = json.dumps(CARD).encode()
    kira = Character.from_bytes(card, "kira.json")
    files = {"json": card, "png": export_card(kira, "png"), "charx": zip_of(("card.json", card))}
    for kind, data in files.items():
        (folder / f"kira.{kind}").write_bytes(data)
    return {kind: folder / f"kira.{kind}" for kind in files}


# --- a card's book from any card file ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["json", "png", "charx"])
def test_a_whole_card_of_any_kind_is_a_lorebook(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _card_files(tmp_path)[kind]
    book = Lorebook.from_bytes(path.read_bytes(), "kira")
    assert book.name == "Saltmere" and [e.comment for e in book.entries] == ["dragon", "depth", "rare"]
    argv = ["render", "--character", str(REX), "--lorebook", str(path), "--say", "the dragon!", "--explain"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "A red dragon sleeps under the mountain." in json.loads(captured.out)["messages"][0]["content"]
    assert "fired Saltmere:0 'dragon'" in captured.err


def test_a_card_without_a_book_or_a_damaged_png_is_one_clear_error(tmp_path: Path) -> None:
    bare = {**CARD, "data": {k: v for k, v in CARD["data"].items() if k != "character_book"}}
    with pytest.raises(LorebookError, match="a character card without a lorebook"):
        Lorebook.from_bytes(json.dumps(bare).encode())
    png = _card_files(tmp_path)["png"]
    png.write_bytes(png.read_bytes()[:-20])  # cut before its end
    done = subprocess.run([sys.executable, "-m", "charfmt", "render", "--character", str(REX), "--lorebook", str(png),
                           "--say", "hi"], capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1 and done.stderr.startswith(f"charfmt: error: {png}: not a readable character card: ")
    assert done.stderr.count("\n") == 1 and "not UTF-8" not in done.stderr


# --- depth lore where a prompt has no system turns ------------------------------------------------------------


def test_a_text_prompt_places_depth_lore_after_the_character_with_cf945(rex: Character) -> None:
    book = Lorebook.from_json(BOOK)
    turn = rex.shorthand("the king is here")
    for rendered, where in (
        (render_turn(rex, [], turn, provider="anthropic", lorebooks=[book], seed=1), "anthropic"),
        (render_text_turn(rex, [], turn, lorebooks=[book], seed=1), "text"),
    ):
        notes = [d.message for d in rendered.diagnostics if d.code == "CF945"]
        assert notes == [f"lore at a depth placed after the character ({where})"]
    text = render_text_turn(rex, [], turn, lorebooks=[book], seed=1)
    assert text.request["prompt"] == render_text(rex, [], turn, lorebooks=[book], seed=1)
    assert "## More lore\nThe king is dead." in text.request["prompt"]


def test_render_format_text_says_cf945_as_the_json_request_for_anthropic_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    book = tmp_path / "world.json"
    book.write_text(json.dumps(BOOK))
    base = ["render", "--character", str(REX), "--lorebook", str(book), "--say", "the king", "--seed", "1"]
    assert main([*base, "--provider", "anthropic"]) == 0
    assert "CF945 warning: lore at a depth placed after the character (anthropic)" in capsys.readouterr().err
    assert main([*base, "--format", "text"]) == 0
    captured = capsys.readouterr()
    assert "CF945 warning: lore at a depth placed after the character (text)" in captured.err
    assert "The king is dead." in captured.out


# --- a probability roll lost ----------------------------------------------------------------------------------


def test_an_entry_that_matched_but_lost_its_roll_is_reported_and_explained(
    rex: Character, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rendered = render_turn(rex, [], rex.shorthand("gold and a dragon"), lorebooks=[Lorebook.from_json(BOOK)], seed=2)
    assert rendered.lore is not None
    report = rendered.lore.report()
    assert [e["comment"] for e in report["fired"]] == ["dragon"]
    assert [(e["comment"], e["probability"]) for e in report["lost"]] == [("rare", 0)]
    assert "Gold is scarce." not in json.dumps(rendered.request)
    book = tmp_path / "world.json"
    book.write_text(json.dumps(BOOK))
    argv = ["render", "--character", str(REX), "--lorebook", str(book), "--say", "gold", "--explain"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "lore: 0 fired, 0 cut, 1 matched but lost the probability roll; 0 of 1024 tokens" in err
    assert "  lost  Saltmere:2 'rare' (order 20, after; matched, lost its roll: probability 0 %)" in err
    unmatched = render_turn(rex, [], rex.shorthand("silver"), lorebooks=[Lorebook.from_json(BOOK)], seed=2)
    assert unmatched.lore is not None and unmatched.lore.report()["lost"] == []  # (not matched: not rolled)


# --- lorebooks that hold something else ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ([None], "lorebooks[0] is NoneType, not a Lorebook"),
        (["world.json"], "lorebooks[0] is str, not a Lorebook"),
        ("world.json", "lorebooks must be a list of Lorebook, not str"),
    ],
    ids=["none", "a-file-name", "a-string"],
)
def test_lorebooks_holding_something_else_is_a_type_error_at_every_door(rex: Character, given: Any, said: str) -> None:
    turn = rex.shorthand("hi")
    for render in (render_turn, render_messages, render_text):
        with pytest.raises(TypeError, match=re.escape(said)):
            render(rex, [], turn, lorebooks=given)
    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    with pytest.raises(TypeError, match=re.escape(said)):
        scene.lore([], turn, lorebooks=given)
    book = Lorebook.from_json(BOOK)
    assert render_turn(rex, [], rex.shorthand("dragon"), lorebooks=(book,)).lore is not None  # a tuple is a list
