"""A character's own tags through the tools: ``charfmt report``, ``charfmt.batch``, ``charfmt fuzz`` (issue 22.4).

Yuki (``examples/characters/yuki.toml``) adds ``<sfx>`` (a cue with a closed list of values)
and ``<whisper>`` (a second speech tag). Her valid replies must count as valid and be kept
by every path that takes ``--character`` / ``tags=`` / ``vocabulary=``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings

import charfmt
from charfmt.cli import main
from charfmt.fuzz import fuzz_cases, iter_fuzz_cases
from charfmt.testing import replies

pa = pytest.importorskip("pyarrow", reason="charfmt.batch needs pyarrow (extra charfmt[arrow])")

from charfmt import batch, report  # noqa: E402 (after the skip)

YUKI_FILE = ROOT / "examples" / "characters" / "yuki.toml"
YUKI = charfmt.Character.load(YUKI_FILE)
SFX = next(t for t in YUKI.tags if t.name == "sfx")


def sfx_reply(n: int) -> str:
    body = f"<emo>eerie</emo>\n<sfx>{SFX.values[n % len(SFX.values)]}</sfx>\n<whisper>Did you hear that?</whisper>"
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


SFX_REPLIES = [sfx_reply(n) for n in range(30)]


def write_log(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "model": "m"}) + "\n" for t in texts), encoding="utf-8")
    return path


def test_the_replies_are_valid_for_yuki_and_not_for_the_default_tags() -> None:
    for text in SFX_REPLIES:
        charfmt.parse(text, tags=YUKI.tags, vocabulary=YUKI.vocabulary)
    with pytest.raises(charfmt.ParseError):
        charfmt.parse(SFX_REPLIES[0])


def test_report_with_character_counts_sfx_replies_valid_and_keeps_them(tmp_path: Path, capsys: Any) -> None:
    log = write_log(tmp_path / "log.jsonl", SFX_REPLIES)
    out = tmp_path / "out"
    argv = ["report", str(log), "--format", "json", "--character", str(YUKI_FILE), "--out", str(out)]
    assert main(argv) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    assert (total["count"], total["valid_pct"], total["keep"], total["keep_pct"]) == (30, 100.0, 30, 100.0)
    kept = [json.loads(line) for line in (out / "keep.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(kept) == 30
    for row, text in zip(kept, SFX_REPLIES, strict=True):
        assert charfmt.parse(row["text"], tags=YUKI.tags) == charfmt.parse(text, tags=YUKI.tags)
    # The same log without the character: its tags are unknown there.
    assert main(["report", str(log), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["valid"] == 0


def test_report_character_errors_are_usage_or_invalid(tmp_path: Path, capsys: Any) -> None:
    log = write_log(tmp_path / "log.jsonl", SFX_REPLIES[:2])
    assert main(["report", str(log), "--character", str(tmp_path / "missing.toml")]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n', encoding="utf-8")
    assert main(["report", str(log), "--character", str(bad)]) == 1
    assert "charfmt: error:" in capsys.readouterr().err


def test_report_jobs_carry_the_character_to_worker_processes(tmp_path: Path, capsys: Any) -> None:
    log = write_log(tmp_path / "log.jsonl", SFX_REPLIES * 3)
    assert main(["report", str(log), "--format", "json", "--character", str(YUKI_FILE), "--jobs", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["valid"] == 90


def test_batch_takes_tags_and_vocabulary() -> None:
    table = pa.table({"text": SFX_REPLIES})
    rows = batch.parse_table(table, tags=YUKI.tags, vocabulary=YUKI.vocabulary).to_pylist()
    assert all(r["valid"] and r["keep"] for r in rows)
    assert {s["tag"] for r in rows for c in r["chats"] for s in c["segments"]} == {"emo", "sfx", "whisper"}
    assert batch.parse_array(SFX_REPLIES, tags=YUKI.tags).field("valid").to_pylist() == [True] * 30
    (first,) = batch.parse_batches(table.to_batches(), tags=YUKI.tags)
    assert first.column("keep").to_pylist() == [True] * 30
    assert not any(r["valid"] for r in batch.parse_table(table).to_pylist())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies(tags=YUKI.tags, vocabulary=YUKI.vocabulary))
def test_every_valid_reply_in_a_characters_tags_is_valid_and_kept(reply: charfmt.Reply) -> None:
    text = charfmt.dumps(reply)
    (row,) = batch.rows([text], vocabulary=YUKI.vocabulary, tags=YUKI.tags)
    assert row is not None and row["valid"] and row["keep"] and not row["empty"]
    assert charfmt.parse(row["canonical"], tags=YUKI.tags, vocabulary=YUKI.vocabulary).chats == reply.chats
    job = report.Job(tags=YUKI.tags, vocabulary=YUKI.vocabulary)
    summary = report.Summary(job)
    summary.add(report.parse_lines(job, 1, [json.dumps({"text": text}).encode() + b"\n"]))
    assert summary.to_dict("x")["total"]["keep"] == 1


def test_fuzz_cases_take_tags_and_vocabulary() -> None:
    cases = fuzz_cases(3, 200, tags=YUKI.tags, vocabulary=YUKI.vocabulary)
    assert [c.to_dict() for c in cases] == [
        c.to_dict() for c in iter_fuzz_cases(3, 200, tags=YUKI.tags, vocabulary=YUKI.vocabulary)
    ]
    tags = {s.tag for c in cases for chat in c.original.chats for s in chat.segments}
    assert {"sfx", "whisper"} <= tags
    for case in cases:
        assert charfmt.parse(charfmt.dumps(case.original), tags=YUKI.tags, vocabulary=YUKI.vocabulary) == case.original
        assert case.text != charfmt.dumps(case.original)


def test_cli_fuzz_character(capsys: Any) -> None:
    assert main(["fuzz", "--seed", "5", "--count", "60", "--character", str(YUKI_FILE)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 60 and any("<sfx>" in r["original"] for r in rows)
    for r in rows:
        charfmt.parse(r["original"], tags=YUKI.tags, vocabulary=YUKI.vocabulary)  # strict: raises if not valid
