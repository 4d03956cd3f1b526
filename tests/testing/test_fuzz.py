"""charfmt survives hostile input: crash-freedom properties, the strategies users get, the fuzz CLI."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from typing import Final

import pytest
from conftest import Case, load_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

import charfmt
from charfmt._grammar.rules import grammar_text
from charfmt.cli import main
from charfmt.fuzz import MUTATIONS, Damaged, apply_mutations, check, damage, fuzz_cases, random_reply
from charfmt.testing import bodies, chunkings, damaged_replies, user_turns

REGRESSIONS = load_cases("fuzz_regressions.txt")


@pytest.mark.parametrize("case", REGRESSIONS, ids=[c.name for c in REGRESSIONS])
def test_regression(case: Case) -> None:
    text = json.loads(case.input)
    for chunk in (1, 2, 5):
        check(text, chunk)
        check(text.encode("utf-8", "surrogatepass"), chunk)


@given(st.text(max_size=400))
def test_random_unicode(text: str) -> None:
    check(text)


@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    check(data)


@given(damaged_replies(), st.integers(1, 8))
def test_damaged_replies(damaged: object, chunk: int) -> None:
    assert hasattr(damaged, "text")
    check(damaged.text, chunk)  # type: ignore[attr-defined]


_LARK = __import__("lark").Lark(grammar_text(), start="c_body")


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(from_lark(_LARK, start="c_body"))
def test_grammar_generated_bodies_parse(body: str) -> None:
    text = json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, ensure_ascii=False)
    reply = charfmt.parse(text)  # what the grammar generates, strict parsing accepts
    assert reply.chats
    check(text)


@given(bodies())
def test_bodies_strategy_gives_valid_bodies(body: str) -> None:
    charfmt.parse(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}))


@given(st.data())
def test_chunkings_rebuild_the_text(data: st.DataObject) -> None:
    text = data.draw(st.text(max_size=50))
    chunks = data.draw(chunkings(text))
    assert "".join(chunks) == text


@given(user_turns(), st.text(max_size=50))
def test_rendering_raises_only_charfmt_errors(turn: charfmt.UserTurn, junk: str) -> None:
    charfmt.render_user_block(turn)
    with contextlib.suppress(charfmt.CharfmtError):  # anything else fails the test
        charfmt.parse_input(junk)
    with contextlib.suppress(charfmt.CharfmtError):
        charfmt.Character.from_toml(junk, "junk.toml")


def test_from_type_works_through_the_plugin() -> None:
    @settings(max_examples=10)
    @given(st.from_type(charfmt.Reply))
    def inner(reply: charfmt.Reply) -> None:
        assert charfmt.parse(charfmt.dumps(reply)) == reply

    inner()


def test_every_mutation_changes_or_keeps_a_reply_without_breaking_anything() -> None:
    rng = random.Random(5)
    for name, mutate in MUTATIONS.items():
        for _ in range(20):
            reply = random_reply(rng)
            text = mutate(charfmt.dumps(reply), rng)
            assert isinstance(text, str), name
            check(text)


def test_damage_is_reproducible() -> None:
    assert [d.to_dict() for d in fuzz_cases(42, 20)] == [d.to_dict() for d in fuzz_cases(42, 20)]
    assert fuzz_cases(42, 5) != fuzz_cases(43, 5)
    d = damage(random_reply(random.Random(1)), random.Random(2), count=2)
    assert len(d.mutations) == 2


def test_cli_fuzz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cases.jsonl"
    assert main(["fuzz", "--seed", "7", "--count", "25", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 25
    assert set(rows[0]) == {"seed", "index", "damaged", "original", "mutations"}
    assert all(set(r["mutations"]) <= set(MUTATIONS) for r in rows)
    assert main(["fuzz", "--seed", "7", "--count", "25"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == rows
    for row in rows:
        assert charfmt.parse(row["original"]).chats
        check(row["damaged"])


def test_max_size_is_a_clear_error_and_deep_nesting_does_not_recurse() -> None:
    with pytest.raises(charfmt.ParseError, match="CF002"):
        charfmt.parse("x" * 101, max_size=100)
    reply = charfmt.parse("[" * 200_000, lenient=True)
    assert "CF999" not in [d.code for d in reply.diagnostics]


# -- issue 22.7: every damaged reply is damaged, and lists only the mutations that changed it --


def test_cli_fuzz_seed_1_count_1500_damages_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--seed", "1", "--count", "1500"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1500
    assert sum(row["damaged"] == row["original"] for row in rows) == 0
    assert all(1 <= len(row["mutations"]) <= 3 for row in rows)


@pytest.mark.parametrize("seed", range(6))
def test_damage_lists_only_mutations_that_changed_the_text(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        reply = random_reply(rng)
        count = rng.randint(1, 3)
        state = rng.getstate()
        d = damage(reply, rng, count=count)
        assert d.text != charfmt.dumps(reply) and len(d.mutations) == count
        # Replay the listed mutations from the same random state: each one changed the text it met.
        rng2 = random.Random()
        rng2.setstate(state)
        assert d.mutations == damage(reply, rng2, count=count).mutations


@settings(max_examples=300, deadline=None)
@given(damaged_replies())
def test_the_strategy_damages_every_draw(damaged: Damaged) -> None:
    assert damaged.text != charfmt.dumps(damaged.original)
    assert 1 <= len(damaged.mutations) <= 3


@settings(max_examples=100, deadline=None)
@given(damaged_replies(min_mutations=0))
def test_the_strategy_may_leave_a_draw_undamaged_when_asked(damaged: Damaged) -> None:
    assert (damaged.text == charfmt.dumps(damaged.original)) == (damaged.mutations == ())


_QUIET_TEXTS = (
    '{"chats":[]}',
    '{"chats":[{"type":"E","order":1,"body":"Rain."}]}',
    "just words",
)
NO_OPS = [
    (name, text)
    for name in sorted(MUTATIONS)
    for text in _QUIET_TEXTS
    if MUTATIONS[name](text, random.Random(0)) == text
]


def test_there_are_mutations_that_change_nothing_on_some_texts() -> None:
    assert len({name for name, _text in NO_OPS}) >= 5


@pytest.mark.parametrize(("name", "text"), NO_OPS)
def test_a_mutation_that_changes_nothing_is_not_listed(name: str, text: str) -> None:
    others = sorted(set(MUTATIONS) - {name})
    for want in (1, 2, 3):
        damaged, names = apply_mutations(text, [name, *others], random.Random(0), want)
        assert name not in names and damaged != text and len(names) == want


# -- trial 7, finding 6: damage writes what real models write off a character's language --

_LED: Final = charfmt.DEFAULT_TAGS.extend(charfmt.TagSpec("led", "cue", "the LED", values=("red", "green", "blue")))
_FOUR: Final = charfmt.Vocabulary.of("joy", "sad", "angry", "neutral")
OFF_LANGUAGE: Final = {"CF301": "an emotion off the vocabulary", "CF132": "a cue value off its list"}


def _off_language_shares(texts: list[str]) -> dict[str, float]:
    """The share of ``texts`` whose lenient reading in ``_LED`` and ``_FOUR`` notes each code of ``OFF_LANGUAGE``."""
    seen = [{d.code for d in charfmt.parse(t, lenient=True, tags=_LED, vocabulary=_FOUR).diagnostics} for t in texts]
    return {code: sum(code in codes for codes in seen) / len(texts) for code in OFF_LANGUAGE}


def test_the_strategy_writes_emotions_off_the_vocabulary_and_cue_values_off_their_list() -> None:
    texts: list[str] = []

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(damaged_replies(tags=_LED, vocabulary=_FOUR))
    def draw(damaged: Damaged) -> None:
        texts.append(damaged.text)

    draw()
    shares = _off_language_shares(texts)
    assert all(share >= 0.05 for share in shares.values()), shares


def test_charfmt_fuzz_writes_emotions_off_the_vocabulary_and_cue_values_off_their_list() -> None:
    texts = [case.text for case in fuzz_cases(7, 300, tags=_LED, vocabulary=_FOUR)]
    shares = _off_language_shares(texts)
    assert all(share >= 0.05 for share in shares.values()), shares


@pytest.mark.parametrize("name", ["emotion-off-vocabulary", "cue-value-off-list"])
def test_a_word_mutation_writes_a_word_the_language_does_not_allow(name: str) -> None:
    clean = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<led>red</led>\\n<msg>Hi</msg>"}]}'
    for seed in range(20):
        text, names = apply_mutations(clean, [name], random.Random(seed), 1, tags=_LED, vocabulary=_FOUR)
        assert names == (name,)
        reply = charfmt.parse(text, lenient=True, tags=_LED, vocabulary=_FOUR)
        assert [d.code for d in reply.diagnostics] == [{"emotion-off-vocabulary": "CF301"}.get(name, "CF132")]
