"""Lenient parsing: the damaged cases in tests/cases/lenient_*.txt, and its promises as properties."""

from __future__ import annotations

import json
import random

import pytest
from conftest import Case, load_cases
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt.cli import main
from charfmt.testing import replies

CASES = [c for name in ("lenient_envelope.txt", "lenient_body.txt", "lenient_dialects.txt") for c in load_cases(name)]
DIRECTIVES = ("!", "dialect:", "vocabulary:", "aliases:", "policy:", "fallback:")


def _vocabulary(case: Case) -> charfmt.Vocabulary | None:
    lines = {
        line.split(":", 1)[0]: line.split(":", 1)[1].strip()
        for line in case.expected
        if ":" in line and not line.startswith("[")
    }
    if "vocabulary" not in lines:
        return None
    aliases: dict[str, list[str]] = {}
    for pair in filter(None, (p.strip() for p in lines.get("aliases", "").split(","))):
        word, key = pair.split("=")
        aliases.setdefault(key.strip(), []).append(word.strip())
    keys = [k.strip() for k in lines["vocabulary"].split(",")]
    return charfmt.Vocabulary.model_validate(
        {
            "emotions": [{"key": k, "aliases": aliases.get(k, [])} for k in keys],
            "policy": lines.get("policy", "alias"),
            "fallback": lines.get("fallback"),
        }
    )


def test_there_are_at_least_150_damaged_cases() -> None:
    assert len(CASES) >= 150


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lenient_case(case: Case) -> None:
    reply = charfmt.parse(case.input, lenient=True, vocabulary=_vocabulary(case))
    got = [[c.type, c.order, [[s.tag, s.text] for s in c.segments]] for c in reply.chats]
    want = [json.loads(line) for line in case.expected if not line.startswith(DIRECTIVES)]
    assert got == want
    codes = [d.code for d in reply.diagnostics]
    for line in case.expected:
        if line.startswith("!"):
            assert line[1:].strip() in codes, f"{line[1:].strip()} not in {codes}"
        if line.startswith("dialect:"):
            assert reply.dialect == line.split(":", 1)[1].strip()
    for d in reply.diagnostics:
        assert 0 <= d.offset <= d.end <= len(case.input)
        assert d.code in charfmt.diagnostics.CODES
    assert "CF999" not in codes


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lenient_result_writes_back_canonically(case: Case) -> None:
    reply = charfmt.parse(case.input, lenient=True, vocabulary=_vocabulary(case))
    known = all(s.tag in {t.name for t in charfmt.TAGS} or s.tag == "text" for c in reply.chats for s in c.segments)
    if known and not any(d.code == "CF301" for d in reply.diagnostics):
        again = charfmt.parse(charfmt.dumps(reply))  # canonical: strictly valid (intensity is not written)
        assert _plain(again) == _plain(reply)


def _plain(reply: charfmt.Reply) -> list[object]:
    return [[c.type, c.order, [(s.tag, s.text) for s in c.segments]] for c in reply.chats]


# --- promises ----------------------------------------------------------------------------


@given(st.text(max_size=300))
def test_never_raises_on_random_text(text: str) -> None:
    reply = charfmt.parse(text, lenient=True)
    assert "CF999" not in [d.code for d in reply.diagnostics]


@given(st.binary(max_size=300))
def test_never_raises_on_random_bytes(data: bytes) -> None:
    reply = charfmt.parse(data, lenient=True)
    assert "CF999" not in [d.code for d in reply.diagnostics]


JUNK = [
    "Sure! ",
    "```json\n",
    "\n```",
    "<think>plan {x}</think>",
    "<|eot_id|>",
    "</s>",
    "###Thinking\nhmm\n",
    " I hope this helps.",
]


def _mutate(text: str, rnd: random.Random) -> str:
    ops = [
        lambda t: t[: rnd.randint(0, len(t))],  # truncation
        lambda t: t.replace('"', "'"),  # single quotes
        lambda t: t.replace("}]", "},]"),  # trailing comma
        lambda t: t.replace("\\n", ""),  # missing newlines
        lambda t: t.replace("<msg>", "<MSG>").replace("</msg>", "</MSG>"),
        lambda t: t.replace("</msg>", "</act>"),
        lambda t: t.replace("<emo>", '<emotion type="').replace("</emo>", '">'),
        lambda t: t.replace('"type":"C"', '"type":"chat"'),
        lambda t: t.replace('"order":1', '"order":2'),
        lambda t: t.replace("&amp;", "&").replace("&lt;", "<"),
        lambda t: rnd.choice(JUNK) + t,
        lambda t: t + rnd.choice(JUNK),
        lambda t: t.replace('{"chats":', "", 1),
        lambda t: t[: (i := rnd.randint(0, len(t)))] + rnd.choice('"{}[],:<>\\&*\n') + t[i:],
    ]
    for _ in range(rnd.randint(1, 3)):
        text = rnd.choice(ops)(text)
    return text


@given(replies(), st.randoms(use_true_random=False))
def test_never_raises_on_damaged_replies(reply: charfmt.Reply, rnd: random.Random) -> None:
    damaged = _mutate(charfmt.dumps(reply), rnd)
    result = charfmt.parse(damaged, lenient=True)
    assert "CF999" not in [d.code for d in result.diagnostics]
    charfmt.parse(damaged.encode("utf-8", "surrogatepass")[:-1] if damaged else b"", lenient=True)


@given(replies())
def test_valid_input_gives_exactly_the_strict_result(reply: charfmt.Reply) -> None:
    text = charfmt.dumps(reply)
    assert charfmt.parse(text, lenient=True) == charfmt.parse(text)
    assert charfmt.parse(text, lenient=True).diagnostics == []


@given(replies().filter(lambda r: bool(r.chats)), st.sampled_from(JUNK), st.sampled_from(JUNK), st.booleans())
def test_lossless_junk_is_kept_or_reported_dropped(reply: charfmt.Reply, before: str, after: str, fence: bool) -> None:
    body = charfmt.dumps(reply)
    head = before + ("```json\n" if fence else "")
    text = head + body + ("\n```" if fence else "") + after
    result = charfmt.parse(text, lenient=True)
    assert result.chats == reply.chats
    junk = [*range(len(head)), *range(len(head) + len(body), len(text))]
    spans = [(d.offset, d.end) for d in result.diagnostics]
    for i in junk:
        if not text[i].isspace():
            assert any(a <= i < b for a, b in spans), (i, text[i], [str(d) for d in result.diagnostics])


@given(replies().filter(lambda r: bool(r.chats)))
def test_lossless_every_character_of_a_damaged_body_survives(reply: charfmt.Reply) -> None:
    # Strip the separators and upper-case the tags: all text must still come through.
    doc = json.loads(charfmt.dumps(reply))
    for chat in doc["chats"]:
        if chat["type"] == "C":
            chat["body"] = chat["body"].replace("\n<", "<").replace("<msg>", "<MSG>")
    result = charfmt.parse(json.dumps(doc, ensure_ascii=False), lenient=True)
    texts = "".join(s.text for c in result.chats for s in c.segments)
    for chat in reply.chats:
        for seg in chat.segments:
            assert seg.text.strip() in texts


# --- CLI ---------------------------------------------------------------------------------


def test_cli_fix_prints_the_repaired_reply_and_the_log(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "r.txt"
    path.write_text(
        'Sure!\n```json\n{"chats": [{"type": "chat", "body": "<EMO>joy</EMO><msg>Hi"}]}\n```', encoding="utf-8"
    )
    assert main(["fix", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hi</msg>"}]}'
    assert "CF601" in err and "CF602" in err and "CF613" in err
    assert main(["fix", str(path), "--diff"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("---") and '+{"chats"' in out


def test_cli_check_lenient_reports_warnings(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "r.txt"
    path.write_text('```json\n{"chats": []}\n```', encoding="utf-8")
    assert main(["check", str(path)]) == 1
    capsys.readouterr()
    assert main(["check", "--lenient", str(path)]) == 0
    assert "CF602" in capsys.readouterr().out


def test_invalid_utf8_is_one_replacement_per_byte_and_one_diagnostic_per_run() -> None:
    data = b'{"chats":[{"type":"I","order":1,"body":"a\xe3\x81b\xff"}]}'
    reply = charfmt.parse(data, lenient=True)
    assert reply.chats[0].segments[0].text == "a\ufffd\ufffdb\ufffd"
    runs = [(d.offset, d.end) for d in reply.diagnostics if d.code == "CF001"]
    source = charfmt.parser.lenient_text(data)
    assert [source[a:b] for a, b in runs] == ["\ufffd\ufffd", "\ufffd"]
