"""Macros (``prompt.macros``): SillyTavern's macros as data, draws a seed makes reproducible, and the output bound.

Every expansion in charfmt goes through one bound (``MAX_MACRO_OUTPUT`` per render or card
greeting): a card that would multiply into hundreds of megabytes is one clear error, and the
child process that renders it stays small (its peak RSS measured from the operating system).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, TESTS

from charfmt.prompt.macros import MAX_MACRO_OUTPUT, MacroError, Macros, expand

CASES = json.loads((TESTS / "lore" / "macro_cases.json").read_text(encoding="utf-8"))["cases"]
NOW = dt.datetime(2026, 11, 28, 15, 4)


def _macros(seed: int | str | None = 1, **kw: Any) -> Macros:
    return Macros("Seraphina", "Alex", seed=seed, now=NOW, **kw)


@pytest.mark.parametrize("case", CASES, ids=[c["text"][:40] for c in CASES])
def test_macro(case: dict[str, Any]) -> None:
    out, notes = expand(case["text"], _macros(), original=case.get("original", ""))
    assert out == case["out"]
    assert [d.message for d in notes] == case.get("unknown", [])
    assert all(d.code == "CF928" and d.severity == "warning" for d in notes)


def test_an_unknown_macro_is_said_once_where_it_first_stands() -> None:
    text = "ok " + "{{mystery}} " * 100_000
    out, notes = expand(text, _macros())
    assert out == text and len(notes) == 1
    assert (notes[0].offset, notes[0].end) == (3, 14) and "(100,000 times)" in notes[0].message


def test_random_draws_from_its_items_and_a_seed_repeats_them() -> None:
    text = "{{random:a, b,c}} {{random::x,y::z}} {{random:p\\,q,r}}"
    outs = [expand(text, _macros(seed))[0] for seed in range(60)]
    assert outs == [expand(text, _macros(seed))[0] for seed in range(60)]
    firsts = {o.split(" ")[0] for o in outs}
    seconds = {o.split(" ")[1] for o in outs}
    thirds = {o.split(" ")[2] for o in outs}
    assert firsts == {"a", "b", "c"} and seconds == {"x,y", "z"} and thirds == {"p,q", "r"}


def test_pick_is_the_same_on_every_turn_random_is_not() -> None:
    text = "{{pick:a,b,c,d,e,f}}"
    assert len({expand(text, _macros("chat-7"))[0] for _ in range(20)}) == 1  # a pick stays, turn after turn
    assert len({expand(text, _macros(f"chat-{n}"))[0] for n in range(40)}) > 1  # another chat, another pick
    one = _macros("chat-7")
    assert len({expand("{{random:a,b,c,d,e,f}}", one)[0] for _ in range(40)}) > 1  # each random draws anew


@pytest.mark.parametrize(("formula", "low", "high"), [("1d6", 1, 6), ("d20", 1, 20), ("2d6+3", 5, 15), ("6", 1, 6)])
def test_roll_stays_within_its_dice(formula: str, low: int, high: int) -> None:
    rolls = {int(expand(f"{{{{roll:{formula}}}}}", _macros(seed))[0]) for seed in range(200)}
    assert min(rolls) == low and max(rolls) == high


@pytest.mark.parametrize("formula", ["1001d6", "1d0", "d", "2d6*3", "99999999999999d6"])
def test_a_roll_that_is_not_a_formula_is_left_as_written(formula: str) -> None:
    text = f"{{{{roll:{formula}}}}}"
    out, notes = expand(text, _macros())
    assert out == text and [d.code for d in notes] == ["CF928"]


def test_without_a_seed_or_clock_each_use_draws_and_reads_the_clock() -> None:
    outs = {expand("{{random:1,2,3,4,5,6,7,8,9,10}}", Macros("c", "u"))[0] for _ in range(40)}
    assert len(outs) > 1
    year = expand("{{isodate}}", Macros("c", "u"))[0][:4]
    assert year == str(dt.date.today().year)


def test_the_output_bound_is_shared_by_every_expansion_of_a_use() -> None:
    macros = _macros(limit=1000)
    expand("x" * 600, macros)
    with pytest.raises(MacroError, match="CF929 macro expansion in persona would write more than 1,000 characters"):
        expand("{{char}}" * 50, macros, where="persona")  # under the bound alone, over it with the first


def test_a_name_multiplied_stops_at_the_bound_before_it_is_built() -> None:
    macros = Macros("n" * 4096, "u")
    with pytest.raises(MacroError):
        expand("{{char}} " * 200_000, macros)
    assert macros.left > -(4096 + 10)  # it stopped at the first piece past the bound
    assert MAX_MACRO_OUTPUT < 200_000 * 4096 // 100


@pytest.mark.parametrize(
    "text",
    ["{{" * 200_000, "}}" * 200_000, "{{a}}" * 80_000, "{{" * 30 + "x" * 400_000 + "}}" * 30, "{" * 400_001],
    ids=["openings", "closings", "unknowns", "nested", "braces"],
)
def test_hostile_texts_expand_in_one_pass(text: str) -> None:
    macros = _macros(limit=len(text))
    out, notes = expand(text, macros)
    assert out == text and len(notes) <= 1 and macros.left == 0  # (nothing known: as written, counted once)


def test_a_macro_inside_another_counts_what_it_holds() -> None:
    macros = _macros(limit=100_000)
    with pytest.raises(MacroError):  # 200,000 names inside a random's arguments: stopped while they pile up
        expand("{{random:" + "{{char}}," * 200_000 + "}}", macros)


CARD_BOMB = textwrap.dedent(
    """
    import json, sys
    name = "N" * 4096
    data = {"name": name, "description": "{{char}} " * 200_000, "first_mes": "Hi {{user}}.", "mes_example": ""}
    card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
    open(sys.argv[1], "w").write(json.dumps(card))
    """
)


PEAK_OF_CLI = textwrap.dedent(
    """
    import os, re, sys
    from charfmt.cli import main
    status = main(sys.argv[1:])
    sys.stdout.flush()
    peak = re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())  # this process's own peak
    open(os.environ["PEAK"], "w").write(peak.group(1))
    sys.exit(status)
    """
)
"""``charfmt`` in a child that writes its peak RSS (kB, from ``/proc``: a forked child's ``ru_maxrss`` counts
the parent's pages it started with) to the file ``$PEAK``."""


@pytest.mark.parametrize("what", ["persona", "lore entry", "greeting"])
def test_a_macro_bomb_card_is_one_clear_error_in_bounded_memory(tmp_path: Path, what: str) -> None:
    """A 1.6 MB card with 200,000 ``{{char}}`` and a 4 KB name (800 MB expanded) in its persona, a lore entry
    or its greeting: ``charfmt render`` exits 1 with one error line; the child's peak RSS (``wait4``) stays small."""
    path = tmp_path / "bomb.json"
    subprocess.run([sys.executable, "-c", CARD_BOMB, str(path)], check=True, timeout=60)
    card = json.loads(path.read_text())
    bomb = card["data"]["description"]
    if what != "persona":
        card["data"]["description"] = "A short persona."
    if what == "lore entry":
        card["data"]["character_book"] = {"entries": [{"keys": ["hi"], "content": bomb}]}
    if what == "greeting":
        card["data"]["first_mes"] = bomb
    path.write_text(json.dumps(card))
    assert 1_500_000 < path.stat().st_size < 2_000_000
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PEAK": str(tmp_path / "peak")}
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        child = subprocess.run(
            [sys.executable, "-c", PEAK_OF_CLI, "render", "--character", str(path), "--say", "hi"],
            stdout=out, stderr=err, env=env, timeout=120, check=False,
        )  # fmt: skip
    said = (tmp_path / "err").read_text()
    assert child.returncode == 1, said
    lines = [line for line in said.splitlines() if "error" in line]
    assert len(lines) == 1 and "CF929 macro expansion in" in lines[0] and "4,194,304 characters" in lines[0]
    assert (tmp_path / "out").read_bytes() == b""
    peak_mb = int((tmp_path / "peak").read_text()) / 1024
    assert peak_mb < 200, f"peak RSS {peak_mb:.0f} MB (expanded in full it is over 800 MB)"
