"""Lorebooks (``charfmt.prompt.lorebook``): every activation rule of SillyTavern's World Info as data, and bad books.

The rules are the cases of ``tests/lore/activation_cases.json``, each checked against what
SillyTavern's ``checkWorldInfo`` does (``public/scripts/world-info.js``): which entries fire, in
prompt order, and which the budget cuts. Then: reading World Info files and card books, what
cannot be read said once, probability rolls that a seed makes reproducible, a book of 10,000
entries and regex keys that backtrack catastrophically, each bounded.
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS

from charfmt.prompt.lorebook import REGEX_TIME, Lorebook, LorebookError
from charfmt.prompt.macros import Macros

CASES = json.loads((TESTS / "lore" / "activation_cases.json").read_text(encoding="utf-8"))["cases"]
HAS_REGEX = importlib.util.find_spec("regex") is not None


def _activate(book: dict[str, Any], messages: list[str], *, budget: int = 1000, seed: int = 0) -> Any:
    lorebook = Lorebook.from_json(book, name="")
    return lorebook.activate(
        messages, counter=len, budget=budget, rng=random.Random(seed), macros=Macros("Seraphina", "User", seed=seed)
    )


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_activation_rule(case: dict[str, Any]) -> None:
    if case.get("needs_regex") and not HAS_REGEX:
        pytest.skip("regex keys need the regex package (charfmt[lorebook])")
    active = _activate(case["book"], case["messages"], budget=case.get("budget", 1000), seed=case.get("seed", 0))
    assert [p.entry.uid for p in active.placed] == case["fired"]
    assert [e.uid for e in active.cut] == case.get("cut", [])
    texts = case.get("texts", {})
    for position in ("before", "after"):
        if position in texts:
            assert active.texts(position) == texts[position]
    if "depth" in texts:
        assert [list(d) for d in active.at_depth()] == texts["depth"]
    codes = [d.code for d in active.diagnostics]
    assert ("CF940" in codes) == bool(case["fired"]) and ("CF941" in codes) == bool(case.get("cut"))


def test_what_fired_and_what_was_cut_is_reported() -> None:
    book = {"entries": {"0": {"key": ["a"], "content": "xxxx", "order": 2, "comment": "First"},
                        "1": {"key": ["a"], "content": "yyyy", "order": 1}}}  # fmt: skip
    active = _activate(book, ["User: a"], budget=8)
    report = active.report()
    assert report["fired"] == [
        {"book": "", "uid": "0", "comment": "First", "order": 2, "position": "before", "tokens": 5}
    ]
    assert [e["uid"] for e in report["cut"]] == ["1"] and report["budget"] == 8 and report["tokens"] == 5
    messages = {d.code: d.message for d in active.diagnostics}
    assert messages["CF940"] == "lore: 1 entry active: 0 (First)"
    assert messages["CF941"] == "lore: token budget 8 reached; left out: 1"


def test_probability_rolls_are_reproducible_with_a_seed() -> None:
    book = {"entries": {str(i): {"key": ["a"], "content": f"e{i}", "probability": 50} for i in range(40)}}
    runs = [[p.entry.uid for p in _activate(book, ["User: a"], seed=seed).placed] for seed in range(30)]
    again = [[p.entry.uid for p in _activate(book, ["User: a"], seed=seed).placed] for seed in range(30)]
    assert runs == again  # the same seed, the same turn
    assert len({tuple(r) for r in runs}) > 20  # and the seeds differ
    kept = sum(len(r) for r in runs) / (40 * 30)
    assert 0.4 < kept < 0.6  # about half of them, as probability 50 says


def test_world_info_file_and_a_whole_card_read_as_books(tmp_path: Path) -> None:
    world = {"entries": {"3": {"uid": 3, "key": ["moon"], "content": "M", "comment": "Moon", "order": 5}}}
    book = Lorebook.from_bytes(json.dumps(world).encode(), "moons")
    assert book.name == "moons" and book.entries[0].uid == "3" and book.entries[0].comment == "Moon"
    card = {"spec": "chara_card_v2", "data": {"name": "X", "character_book": {"name": "Book", "entries": []}}}
    assert Lorebook.from_bytes(json.dumps(card).encode()).name == "Book"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "not a lorebook"),
        (b'{"entries": 5}', "not a lorebook"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_a_file_that_is_not_a_lorebook_is_one_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(LorebookError, match=message):
        Lorebook.from_bytes(data)


def test_unreadable_entries_are_skipped_and_said_features_not_applied_said_once() -> None:
    world = {"entries": {
        "0": {"key": ["a"], "content": "fine", "group": "g", "sticky": 2},
        "1": {"key": "a", "content": 5},
        "2": ["not", "an", "entry"],
        "3": {"key": ["a"], "content": "also fine", "position": 42},
        "4": {"key": ["a"], "content": "x", "order": {"no": 1}},
        "5": {"key": ["a"], "content": "y", "cooldown": 3, "vectorized": True},
    }}  # fmt: skip
    book = Lorebook.from_json(world, "w")
    assert [e.uid for e in book.entries] == ["0", "5"]
    notes = [(d.code, d.message) for d in book.diagnostics]
    assert [code for code, _ in notes] == ["CF943"] * 4 + ["CF944"]
    assert notes[-1][1] == "lorebook 'w': not applied by charfmt: cooldown, inclusion groups, sticky, vector matching"


def test_merged_books_keep_each_books_settings_and_the_character_lore_first() -> None:
    card = Lorebook.from_json({"scan_depth": 3, "entries": [{"keys": ["far"], "content": "C", "insertion_order": 1}]})
    world = Lorebook.from_json({"entries": {"0": {"key": ["far"], "content": "W", "order": 900}}})
    merged = card.merged(world)
    active = merged.activate(["User: hi", "Char: hm", "User: far"], counter=len)
    assert [p.text for p in active.placed] == ["C"]  # the world's entry scans 2 messages, the card's 3
    both = merged.activate(["User: far"], counter=len, budget=3)
    assert [p.text for p in both.placed] == ["C"] and [e.content for e in both.cut] == ["W"]  # character first


def test_ten_thousand_entries_activate_in_bounded_time() -> None:
    """A lorebook of 10,000 entries, every one matching: read and activated in a child, bounded in time."""
    code = textwrap.dedent(
        """
        import json, re, time
        from charfmt.prompt.lorebook import Lorebook
        words = [f"w{i:05d}" for i in range(10_000)]
        book = {"entries": {str(i): {"key": [w], "content": "lore " * 20, "order": i} for i, w in enumerate(words)}}
        start = time.process_time()
        lore = Lorebook.from_bytes(json.dumps(book).encode())
        active = lore.activate(["User: " + " ".join(words)], counter=len, budget=50_000)
        peak = re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())  # (this process's own peak)
        print(json.dumps([len(active.placed), len(active.cut), time.process_time() - start, int(peak.group(1))]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    placed, cut, seconds, rss_kb = json.loads(out.stdout)
    assert placed + cut == 10_000 and placed == 50_000 // 101 and cut > 9_000
    assert seconds < 30 and rss_kb < 400_000


@pytest.mark.skipif(not HAS_REGEX, reason="regex keys need the regex package (charfmt[lorebook])")
def test_a_regex_key_that_backtracks_catastrophically_is_cut_off_and_said() -> None:
    book = {"entries": {"0": {"key": ["/(a+)+$/"], "content": "A"}, "1": {"key": ["/(x|x)*y/"], "content": "X"},
                        "2": {"key": ["/safe/"], "content": "S"}}}  # fmt: skip
    lorebook = Lorebook.from_json(book)
    code = textwrap.dedent(
        """
        import json, sys, time
        from charfmt.prompt.lorebook import Lorebook
        book = Lorebook.model_validate_json(sys.stdin.read())
        start = time.perf_counter()
        active = book.activate(["User: " + "a" * 20_000 + "! safe", "x" * 20_000], counter=len)
        print(json.dumps([[p.entry.uid for p in active.placed], [d.message for d in active.diagnostics],
                          time.perf_counter() - start]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=lorebook.model_dump_json(), capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    fired, messages, seconds = json.loads(out.stdout)
    assert fired == ["2"] and seconds < REGEX_TIME + 5
    assert "lore: regex key '/(a+)+$/' not used: its search took over 0.05 s (a pattern that backtracks)" in messages


def test_regex_keys_without_the_regex_package_are_said_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "regex", None)  # (import regex: ImportError; a new book compiles its keys anew)
    active = _activate({"entries": {"0": {"key": ["/a/"], "content": "A"}, "1": {"key": ["/a/"], "content": "B"}}},
                       ["User: a"])  # fmt: skip
    assert active.placed == []
    said = [d.message for d in active.diagnostics if d.code == "CF942"]
    assert said == ["lore: regex key '/a/' not used: needs the regex package (pip install 'charfmt[lorebook]'):"
                    " Python's re cannot be stopped"]  # fmt: skip


def test_an_invalid_regex_key_is_said_once() -> None:
    if not HAS_REGEX:
        pytest.skip("regex keys need the regex package (charfmt[lorebook])")
    book = {"entries": {"0": {"key": ["/a(/"], "content": "A"}, "1": {"key": ["/a(/"], "content": "B"}}}
    active = _activate(book, ["User: a("])
    assert active.placed == []
    said = [d.message for d in active.diagnostics if d.code == "CF942"]
    assert len(said) == 1 and said[0].startswith("lore: regex key '/a(/' is not a valid pattern (")
