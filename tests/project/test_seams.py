"""Tests at the seams: the design study's own examples, and one public function's output fed to the next.

Each function is tested on its own elsewhere; these tests check what a new user does in
the first hour: paste the study's examples, parse leniently and store the result with
``dumps``, put that reply into a history and render the next request, stream the same
text, read a rendered user block back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import CASES, MARK, Case, load_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.constrain.schema import PROVIDERS
from charfmt.testing import chunkings, damaged_replies
from charfmt.writer import canonical_form, is_canonical

STUDY = load_cases("design_study.txt")

# The player's character for the study's shorthand: its vocabulary holds the words the
# study uses (怒り is an alias of angry, ため息 a listed action).
PLAYER = charfmt.Vocabulary.model_validate(
    {
        "emotions": [
            {"key": "joy", "aliases": ["喜び"]},
            {"key": "sad", "aliases": ["悲しい"]},
            {"key": "angry", "aliases": ["怒り"]},
            {"key": "surprise"},
        ]
    }
)
PLAYER_ACTIONS = ["ため息", "sigh", "glare"]


def _study(via: str) -> list[Case]:
    return [c for c in STUDY if f" {via}" in " " + _via(c)]


def _via(case: Case) -> str:
    line = next(x for x in case.expected if x.startswith("via:"))
    return line.removeprefix("via:").strip()


def _reply_rows(reply: charfmt.Reply) -> list[list[object]]:
    return [[c.type, c.order, [[s.tag, s.text] for s in c.segments]] for c in reply.chats]


def _turn_rows(turn: charfmt.UserTurn) -> list[list[object]]:
    return [[c.type, [[s.tag, s.text] for s in c.segments]] for c in turn.chats]


def _expected_rows(case: Case) -> list[object]:
    return [json.loads(x) for x in case.expected if x.startswith("[")]


def _expected(case: Case, prefix: str) -> list[str]:
    return [x.removeprefix(prefix).strip() for x in case.expected if x.startswith(prefix)]


# --- the design study's own examples ------------------------------------------------


@pytest.mark.parametrize("case", _study("strict"), ids=lambda c: c.name)
def test_study_reply_parses_strictly(case: Case) -> None:
    assert _reply_rows(charfmt.parse(case.input)) == _expected_rows(case)


@pytest.mark.parametrize("case", _study("lenient"), ids=lambda c: c.name)
def test_study_reply_parses_leniently(case: Case) -> None:
    reply = charfmt.parse(case.input, lenient=True)
    assert _reply_rows(reply) == _expected_rows(case)
    for dialect in _expected(case, "dialect:"):
        assert reply.dialect == dialect
    codes = [d.code for d in reply.diagnostics]
    for code in _expected(case, "!"):
        assert code in codes
    if "strict" not in _via(case):
        assert reply.diagnostics, "a repaired reply says what was repaired"


@pytest.mark.parametrize("case", _study("stream"), ids=lambda c: c.name)
def test_study_reply_streams_like_the_batch(case: Case) -> None:
    batch = charfmt.parse(case.input, lenient=True)
    for size in (1, 3, 64, len(case.input)):
        chunks = [case.input[i : i + size] for i in range(0, len(case.input), size)]
        assert charfmt.collect(charfmt.iter_events(chunks)) == batch, size


@pytest.mark.parametrize("case", _study("shorthand"), ids=lambda c: c.name)
def test_study_shorthand(case: Case) -> None:
    turn = charfmt.parse_shorthand(case.input, vocabulary=PLAYER, actions=PLAYER_ACTIONS)
    assert _turn_rows(turn) == _expected_rows(case)
    assert [d.code for d in turn.diagnostics] == _expected(case, "!")
    # What the player typed goes to the model and comes back unchanged.
    assert charfmt.parse_input(charfmt.render_user_block(turn)).chats == turn.chats


@pytest.mark.parametrize("case", _study("input"), ids=lambda c: c.name)
def test_study_user_block(case: Case) -> None:
    turn = charfmt.parse_input(case.input)
    assert _turn_rows(turn) == _expected_rows(case)
    assert charfmt.parse_input(charfmt.render_user_block(turn)) == turn
    # The same block with Windows line ends and a trailing newline reads the same.
    assert charfmt.parse_input(case.input.replace("\n", "\r\n") + "\r\n") == turn


# --- one function's output into the next ---------------------------------------------


def _case_inputs() -> Iterator[tuple[str, str]]:
    for path in sorted(CASES.glob("*.txt")):
        if path.name == "shorthand.txt":
            continue
        for case in load_cases(path.name):
            yield f"{path.stem}: {case.name}", case.input.replace(MARK, "")


CASE_INPUTS = list(_case_inputs())


def _check_dumps_chain(text: str) -> None:
    reply = charfmt.parse(text, lenient=True)
    written = charfmt.dumps(reply)
    assert charfmt.parse(written, lenient=True).chats == reply.chats
    if is_canonical(reply):
        assert charfmt.parse(written).chats == reply.chats
    else:
        with pytest.raises(charfmt.ParseError):
            charfmt.parse(written)


def _character() -> charfmt.Character:
    from conftest import ROOT

    return charfmt.Character.load(ROOT / "examples" / "characters" / "mio.toml")


def _check_history_chain(text: str, character: charfmt.Character) -> None:
    reply = charfmt.parse(text, lenient=True)
    history = [charfmt.Exchange(user=charfmt.UserTurn.say("ねえ"), reply=reply)]
    turn = character.shorthand("[joy] つぎは？")
    for provider in PROVIDERS:
        request = charfmt.render_messages(character, history, turn, provider=provider)
        # The stored reply goes back to the model as the character's earlier turn, in the
        # format it must write (strictly valid; unknown tags and intensities left out).
        (past,) = _assistant_texts(request)
        assert charfmt.parse(past).chats == canonical_form(reply).chats
    prompt = charfmt.render_text(character, history, turn)
    assert prompt.rstrip().endswith(character.name)


def _assistant_texts(request: dict[str, object]) -> list[str]:
    """The texts of the character's (assistant / model) turns of a provider request."""
    turns = request.get("messages") or request.get("contents") or []
    out = []
    for t in turns:  # type: ignore[attr-defined]
        if t["role"] in ("assistant", "model"):
            out.append(t["content"] if "content" in t else t["parts"][0]["text"])
    return out


@pytest.mark.parametrize(("name", "text"), CASE_INPUTS, ids=[n for n, _ in CASE_INPUTS])
def test_case_file_lenient_parse_survives_dumps(name: str, text: str) -> None:
    _check_dumps_chain(text)


@pytest.mark.parametrize(("name", "text"), CASE_INPUTS, ids=[n for n, _ in CASE_INPUTS])
def test_case_file_lenient_reply_renders_in_a_history(name: str, text: str) -> None:
    _check_history_chain(text, _character())


@pytest.mark.parametrize(("name", "text"), CASE_INPUTS, ids=[n for n, _ in CASE_INPUTS])
def test_case_file_stream_collects_to_the_batch_result(name: str, text: str) -> None:
    batch = charfmt.parse(text, lenient=True)
    chunks = [text[i : i + 4] for i in range(0, len(text), 4)]
    assert charfmt.collect(charfmt.iter_events(chunks)) == batch
    assert charfmt.collect(batch.events()) == batch


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(damaged=damaged_replies(), data=st.data())
def test_damaged_reply_through_every_public_step(damaged: object, data: st.DataObject) -> None:
    text: str = damaged.text  # type: ignore[attr-defined]
    _check_dumps_chain(text)
    _check_history_chain(text, _character())
    batch = charfmt.parse(text, lenient=True)
    assert charfmt.collect(charfmt.iter_events(data.draw(chunkings(text)))) == batch


def test_lenient_fix_of_an_unknown_tag_round_trips() -> None:
    reply = charfmt.parse("<wink>hi</wink>", lenient=True)
    assert charfmt.parse(charfmt.dumps(reply), lenient=True).chats == reply.chats


def test_empty_and_oversize_replies_have_a_dialect_attribute() -> None:
    for text in ("", "   \n", "x" * 20):
        reply = charfmt.parse(text, lenient=True, max_size=10)
        assert reply.dialect is None or isinstance(reply.dialect, str)
        assert charfmt.Reply.model_validate(reply.model_dump()) == reply


def test_a_lenient_reply_stored_with_dumps_loads_back_from_a_history_file(tmp_path: object) -> None:
    from pathlib import Path

    character = _character()
    stored = Path(str(tmp_path)) / "history.jsonl"
    replies = [
        charfmt.parse(text, lenient=True, vocabulary=character.vocabulary)  # as the game reads its model
        for text in ("<wink>hi</wink>", "[surprised:0.6] wow", '{"emotion": "joy", "content": "やった"}')
    ]
    lines = [json.dumps({"user": "[joy] ねえ", "reply": charfmt.dumps(r)}, ensure_ascii=False) for r in replies]
    stored.write_text("\n".join(lines) + "\n", encoding="utf-8")
    history = charfmt.load_history(stored, character)
    assert [ex.reply.chats for ex in history] == [r.chats for r in replies]
    request = charfmt.render_messages(character, history, character.shorthand("[joy] つぎは？"))
    assert [charfmt.parse(t).chats for t in _assistant_texts(request)] == [canonical_form(r).chats for r in replies]


def test_a_history_reply_that_is_not_what_dumps_writes_is_an_error(tmp_path: object) -> None:
    from pathlib import Path

    stored = Path(str(tmp_path)) / "history.jsonl"
    line = {"user": "hi", "reply": {"chats": [{"type": "C", "order": 1, "body": "<wink>hi"}]}}  # unclosed: damage
    stored.write_text(json.dumps(line) + "\n", encoding="utf-8")
    with pytest.raises(charfmt.CharacterError, match=r"history\.jsonl:1"):
        charfmt.load_history(stored, _character())


# --- files as editors write them ------------------------------------------------------

BOM = "\ufeff"


def test_a_byte_order_mark_is_ignored_by_every_reader(tmp_path: object) -> None:
    from pathlib import Path

    from conftest import ROOT

    reply_text = next(c.input for c in STUDY if c.name == "3 the final format")
    expected = charfmt.parse(reply_text)
    for data in (BOM + reply_text, (BOM + reply_text).encode()):
        assert charfmt.parse(data) == expected
        assert charfmt.parse(data, lenient=True) == expected
        assert charfmt.collect(charfmt.iter_events([data])) == expected
    assert [d.code for d in charfmt.parse(BOM, lenient=True).diagnostics] == ["CF003"]
    folder = Path(str(tmp_path))
    toml = (ROOT / "examples" / "characters" / "mio.toml").read_text(encoding="utf-8")
    (folder / "mio.toml").write_text(BOM + toml, encoding="utf-8")
    character = charfmt.Character.load(folder / "mio.toml")
    assert character == _character()
    line = json.dumps({"user": "[joy] ねえ", "reply": charfmt.dumps(expected)}, ensure_ascii=False)
    (folder / "history.jsonl").write_text(BOM + line + "\r\n", encoding="utf-8")
    assert [ex.reply for ex in charfmt.load_history(folder / "history.jsonl", character)] == [expected]


@pytest.mark.parametrize("field", ["name", "user_name", "language"])
@pytest.mark.parametrize("value", ["Mio\\n### 旅人", "ja\\u2028x", " Mio", "a\\u0085b"])
def test_names_printed_in_prompt_lines_are_one_line(field: str, value: str) -> None:
    from conftest import ROOT

    toml = (ROOT / "examples" / "characters" / "mio.toml").read_text(encoding="utf-8")
    toml = f'{field} = "{value}"\n' + "\n".join(line for line in toml.splitlines() if not line.startswith(f"{field} ="))
    with pytest.raises(charfmt.CharacterError, match=f"{field}: must"):
        charfmt.Character.from_toml(toml, "mio.toml")


def test_a_stored_reply_with_an_alias_and_an_intensity_loads_with_the_characters_key(tmp_path: object) -> None:
    from pathlib import Path

    character = _character()  # "surprised" is an alias of "surprise"
    reply = charfmt.parse("[surprised:0.6] wow <wink>;)</wink>", lenient=True)  # read without a vocabulary
    stored = Path(str(tmp_path)) / "history.jsonl"
    stored.write_text(json.dumps({"user": "[joy] hi", "reply": charfmt.dumps(reply)}) + "\n", encoding="utf-8")
    (loaded,) = charfmt.load_history(stored, character)
    emotions = [(s.text, s.intensity) for c in loaded.reply.chats for s in c.segments if s.tag == "emo"]
    assert emotions == [("surprise", 0.6)]
    assert [s.tag for c in loaded.reply.chats for s in c.segments] == [s.tag for c in reply.chats for s in c.segments]
