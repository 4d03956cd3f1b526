"""Lenient parsing: the damaged cases in tests/cases/lenient_*.txt, and its promises as properties."""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable

import pytest
from conftest import CASES as CASE_DIR
from conftest import MARK, Case, load_cases
from hypothesis import assume, example, given
from hypothesis import strategies as st

import charfmt
from charfmt._grammar.static import terminal_regex
from charfmt._lenient.recovery import recover
from charfmt._lenient.tag_soup import INLINE_MARKUP, LINE_BREAKS
from charfmt._lenient.words import is_sentence
from charfmt.cli import main
from charfmt.fuzz import Damaged, revalidate
from charfmt.models import Chat, Reply, Segment
from charfmt.tags import DEFAULT_TAGS, REASONING_TAGS
from charfmt.testing import bodies, damaged_replies, keys, replies
from charfmt.writer import is_canonical

KEY = terminal_regex("KEY")
KEY_TAGS = {t.name for t in charfmt.TAGS if t.content == "key"}

CASE_FILES = ("lenient_envelope.txt", "lenient_body.txt", "lenient_dialects.txt", "lenient_repairs.txt")
CASES = [c for name in CASE_FILES for c in load_cases(name)]
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
    written = charfmt.dumps(reply)
    assert charfmt.parse(written, lenient=True).chats == reply.chats
    if is_canonical(reply):
        assert charfmt.parse(written).chats == reply.chats  # canonical: strictly valid
    else:
        with pytest.raises(charfmt.ParseError):
            charfmt.parse(written)


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


def _act(text: str) -> Segment:
    return Segment(tag="act", text=text)


@given(replies().filter(lambda r: bool(r.chats)))
@example(Reply(chats=[Chat(type="C", order=1, segments=[Segment(tag="emo", text="joy"), _act("[A_0]")])]))  # CF622
@example(Reply(chats=[Chat(type="C", order=1, segments=[_act("\\n"), Segment(tag="msg", text="hi")])]))  # CF711
def test_lossless_every_character_of_a_damaged_body_survives(reply: charfmt.Reply) -> None:
    # Strip the separators and upper-case the tags: all text must still come through.
    doc = json.loads(charfmt.dumps(reply))
    for chat in doc["chats"]:
        if chat["type"] == "C":
            chat["body"] = chat["body"].replace("\n<", "<").replace("<msg>", "<MSG>")
    raw = json.dumps(doc, ensure_ascii=False)
    result = charfmt.parse(raw, lenient=True)
    texts = "".join(s.text for c in result.chats for s in c.segments)
    spans = [(d.offset, d.end) for d in result.diagnostics]
    for chat in reply.chats:
        for seg in chat.segments:
            if seg.text.strip() in texts:
                continue
            # Not kept: then dropped or rewritten by a rule that says so where it stands (a placeholder-shaped
            # ``[A_0]`` is chat-template scaffolding, CF622; a literal ``\n`` is a line break, CF711): never silently.
            written = json.dumps(seg.text, ensure_ascii=False)[1:-1]
            at = raw.find(written)
            assert at >= 0 and any(a <= at < b or at <= a < at + len(written) for a, b in spans), (
                seg,
                [str(d) for d in result.diagnostics],
            )


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


# --- hostile JSON (issue 12.1, 12.2): repaired through the lenient slow path, never raised ------------

HOSTILE = load_cases("lenient_hostile.txt")


def _check_case(case: Case, reply: charfmt.Reply) -> None:
    got = [[c.type, c.order, [[s.tag, s.text] for s in c.segments]] for c in reply.chats]
    assert got == [json.loads(line) for line in case.expected if not line.startswith(DIRECTIVES)]
    codes = [d.code for d in reply.diagnostics]
    for line in case.expected:
        if line.startswith("!"):
            assert line[1:].strip() in codes, f"{line[1:].strip()} not in {codes}"
    assert "CF999" not in codes
    for d in reply.diagnostics:
        assert 0 <= d.offset <= d.end <= len(case.input)


@pytest.mark.parametrize("case", HOSTILE, ids=[c.name for c in HOSTILE])
def test_hostile_json_is_repaired(case: Case) -> None:
    # recover() is what parse(text, lenient=True) runs for anything strict parsing rejects;
    # a CF999 would mean recovery crashed and the crash was caught, not repaired.
    _check_case(case, recover(case.input, None, []))


HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("text", "chats", "codes"),
    [
        ('{"chats":[{"type":"C","order":' + HUGE + ',"body":"<msg>x</msg>"}]}', [["C", 1, "x"]], ["CF617", "CF614"]),
        ('{"chats":[{"type":"C","order":-' + HUGE + ',"body":"<msg>x</msg>"}]}', [["C", 1, "x"]], ["CF617", "CF614"]),
        ('{"chats":[{"type":"C","order":"' + HUGE + '","body":"<msg>x</msg>"}]}', [["C", 1, "x"]], ["CF614"]),
        (
            '{"chats":[{"type":"C","order":1,"x":' + HUGE + ',"body":"<msg>x</msg>"}]}',
            [["C", 1, "x"]],
            ["CF617", "CF615"],
        ),
        ('{"chats":[{"type":' + HUGE + ',"order":1,"body":"<msg>x</msg>"}]}', [["C", 1, "x"]], ["CF617", "CF613"]),
        ('{"chats":[{"type":"I","order":1,"body":' + HUGE + "}]}", [["I", 1, HUGE]], ["CF617", "CF619"]),
        ('{"emotion": ' + HUGE + ', "content": "x"}', None, ["CF617", "CF619"]),
    ],
    ids=["order", "negative order", "order string", "unknown key", "type", "body", "pattern A field"],
)
def test_integers_longer_than_python_converts_are_read(
    text: str, chats: list[list[object]] | None, codes: list[str]
) -> None:
    reply = recover(text, None, [])
    if chats is not None:
        assert [[c.type, c.order, c.segments[-1].text] for c in reply.chats] == chats
    found = [d.code for d in reply.diagnostics]
    assert set(codes) <= set(found) and "CF999" not in found
    for d in reply.diagnostics:
        assert len(d.message) < 200  # a 5,000-digit number is not quoted whole


# --- every lenient result passes its own validators (issue 11.11) -------------------------------------

ALL_CASE_INPUTS = [
    c.input.replace(MARK, "")
    for path in sorted(CASE_DIR.glob("*.txt"))
    if path.name != "lenient_hostile.txt"
    for c in load_cases(path.name)
]


def _revalidates(text: str | bytes) -> charfmt.Reply:
    reply = charfmt.parse(text, lenient=True)
    _check_valid(reply)
    return reply


def _check_valid(reply: charfmt.Reply) -> None:
    for chat in reply.chats:
        for seg in chat.segments:
            assert Segment.model_validate(seg.model_dump()) == seg
            if seg.tag in KEY_TAGS:
                assert KEY.fullmatch(seg.text), seg
    assert Reply.model_validate(reply.model_dump()).chats == reply.chats
    revalidate(reply)


def test_every_case_file_input_gives_a_result_that_revalidates() -> None:
    assert len(ALL_CASE_INPUTS) > 300
    for text in ALL_CASE_INPUTS:
        _revalidates(text)
    for case in HOSTILE:  # strict parsing's own errors for these are parser.py's; the repair is recover()'s
        _check_valid(recover(case.input, None, []))


@given(st.text(max_size=300))
def test_random_text_gives_a_result_that_revalidates(text: str) -> None:
    _revalidates(text)


@given(st.text(alphabet="<>/&;#emosgactuhwx0123 \n\t【】[]:{}\"'lt", max_size=80))
def test_markup_soup_gives_a_result_that_revalidates(text: str) -> None:
    _revalidates(text)


@given(damaged_replies())
def test_damaged_replies_give_a_result_that_revalidates(damaged: Damaged) -> None:
    _revalidates(damaged.text)


@given(keys(), st.sampled_from(["\n", "\t", " \r\n ", "\x01", "&lt;", "&amp;", "<", "&", "&gt;&gt;"]), st.booleans())
def test_damaged_emotion_keys_are_repaired_or_kept_as_text(key: str, damage: str, field: bool) -> None:
    word = key[: len(key) // 2] + damage + key[len(key) // 2 :]
    if field:
        text = json.dumps({"emotion": word, "content": "hi"})
    else:
        text = json.dumps({"chats": [{"type": "C", "order": 1, "body": f"<emo>{word}</emo>\n<msg>hi</msg>"}]})
    reply = _revalidates(text)
    segs = reply.chats[0].segments
    assert segs[-1] == Segment(tag="msg", text="hi")
    # Nothing is lost silently: the emotion is there (as a key or kept as an action), and the
    # repair is a diagnostic.
    assert len(segs) == 2, segs
    assert segs[0].tag in ("emo", "act")
    assert {"CF717", "CF718", "CF704"} & {d.code for d in reply.diagnostics}


# --- a reply cut anywhere shows no piece of an escape or entity (issue 11.9) ---------------------------


@given(replies().filter(lambda r: bool(r.chats)), st.data())
def test_a_reply_cut_anywhere_shows_only_whole_characters(reply: charfmt.Reply, data: st.DataObject) -> None:
    text = json.dumps(json.loads(charfmt.dumps(reply)))  # ASCII only: every other character is a \u escape
    first_body = text.index('"body": "') + len('"body": "')
    cut = data.draw(st.integers(first_body, len(text)), label="cut")
    result = charfmt.parse(text[:cut], lenient=True)
    originals = {c.order: c for c in reply.chats}
    for chat in result.chats:
        original = originals[chat.order]
        assert chat.type == original.type
        want = [(s.tag, s.text) for s in original.segments]
        got = [(s.tag, s.text) for s in chat.segments]
        assert got[:-1] == want[: len(got) - 1]
        tag, last = got[-1]
        assert (tag, last) in want or (tag == want[len(got) - 1][0] and want[len(got) - 1][1].startswith(last)), (
            f"{last!r} is not a prefix of {want[len(got) - 1]!r}"
        )


# --- inline markup inside text (issue 11.8) ------------------------------------------------------------


@given(
    st.lists(st.sampled_from(sorted(INLINE_MARKUP - LINE_BREAKS)), min_size=1, max_size=3),
    st.lists(
        # (no backslash: a literal '\\n' in a repaired element is read as a newline, CF711, its own rule)
        st.text(st.characters(exclude_categories=("Cs", "Cc"), exclude_characters="<>&\\"), max_size=8),
        min_size=4,
        max_size=4,
    ),
    st.sampled_from([t.name for t in charfmt.TAGS if t.content == "text"]),
)
def test_inline_markup_inside_text_is_removed_and_its_words_kept(names: list[str], words: list[str], tag: str) -> None:
    inner = words[1]
    for name in names:
        inner = f"<{name}>{inner}</{name}>"
    body = f'<emo>joy</emo>\n<{tag}>{words[0]}{inner}{words[2]}<{names[0]} class="x">{words[3]}</{names[0]}></{tag}>'
    text = json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, ensure_ascii=False)
    reply = charfmt.parse(text, lenient=True)
    assert [(s.tag, s.text) for s in reply.chats[0].segments] == [("emo", "joy"), (tag, "".join(words))]
    removed = [d for d in reply.diagnostics if d.code == "CF715"]
    assert len(removed) == 2 * len(names) + 2
    for d in removed:
        assert d.severity == "info"
        assert text[d.offset] == "<" and text[d.end - 1] == ">"  # positioned at the markup


# --- reasoning tags inside a reply (issue 11.5) --------------------------------------------------------


# Text a reply without JSON sets aside wherever it stands (reported): fences, special tokens, headings.
SET_ASIDE = ("```", "~~~", "<|", "<s>", "</s>", "[INST]", "[/INST]", "<eos>", "<bos>", "#", "**")


# A literal \n or \" in an element written without JSON is read as JSON writes it, by rule and
# reported (CF711): that body does not read as itself, so the property leaves the two out.
JSON_ESCAPES = ("\\n", '\\"')


@given(
    bodies().filter(
        lambda b: not ({"{", "["} & set(b)) and not any(s in b for s in SET_ASIDE + JSON_ESCAPES)
    )
)
@example(body="<act>*\n0</act>")  # a list mark the model wrote alone on its line is its text (found by a random run)
def test_a_valid_body_written_without_json_reads_as_itself(body: str) -> None:
    segments = charfmt.parse(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})).chats[0].segments
    # Without JSON there is no valid form to agree with: an emotion that reads as a sentence
    # ('0 ?', ten CJK characters) is speech there, by rule and reported (CF722; see LENIENT.md).
    assume(not any(s.tag == DEFAULT_TAGS.emotion.name and is_sentence(s.text) for s in segments))
    reply = charfmt.parse(body, lenient=True)
    assert [c.segments for c in reply.chats] == [segments]


@pytest.mark.parametrize("name", sorted(REASONING_TAGS))
def test_a_reasoning_tag_after_a_bare_reply_loses_nothing(name: str) -> None:
    text = f"<emo>joy</emo>\n<msg>hi</msg>\n<{name}>secret</{name}>"
    reply = charfmt.parse(text, lenient=True)
    segs = [(s.tag, s.text) for s in reply.chats[0].segments]
    assert segs[:2] == [("emo", "joy"), ("msg", "hi")] and segs[2][1] == "secret"
    assert "CF603" not in [d.code for d in reply.diagnostics]


@pytest.mark.parametrize("name", sorted(REASONING_TAGS))
def test_a_reasoning_tag_before_the_json_is_reasoning_and_prose_before_it_is_reported(name: str) -> None:
    reply_text = '{"chats":[{"type":"C","order":1,"body":"<msg>x</msg>"}]}'
    text = f"Sure!\n<{name}>plan</{name}>\n{reply_text}"
    reply = charfmt.parse(text, lenient=True)
    assert [[s.text for s in c.segments] for c in reply.chats] == [["x"]]
    spans = [(d.offset, d.end) for d in reply.diagnostics if d.code in ("CF601", "CF603")]
    for i, ch in enumerate(text[: text.index("{")]):
        assert ch.isspace() or any(a <= i < b for a, b in spans), (i, ch)


# --- linear time (issue 12.6, 12.7): a guard at small sizes ------------------------------------------


def _cpu(fn: Callable[[], object], repeat: int) -> float:
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - start) / repeat


def _ratio(make: Callable[[int], str], n: int) -> float:
    """CPU time of a lenient parse of ``make(10 n)`` over ``make(n)``: interleaved rounds, the median."""
    small, large = make(n), make(10 * n)
    small_times, large_times = [], []
    for _ in range(5):
        small_times.append(_cpu(lambda: charfmt.parse(small, lenient=True), 10))
        large_times.append(_cpu(lambda: charfmt.parse(large, lenient=True), 1))
    return statistics.median(large_times) / max(statistics.median(small_times), 1e-6)


def _wrap(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


LINEAR_SHAPES: dict[str, Callable[[int], str]] = {
    # Each was quadratic: x59, x44 and x68 at these sizes (x62, x93 and 17.8 s at the issue's).
    "padded keys (OffsetMap)": lambda n: _wrap("\n".join("\u3042<EMO> joy </EMO>" for _ in range(n))),
    "<think> after the JSON": lambda n: '{"chats":[]}' + "<think>" * (3 * n),
    "bare tags with <thought>": lambda n: "<emo>joy</emo>\n" + "<msg>hi</msg>\n<thought>x</thought>\n" * n,
}


@pytest.mark.parametrize("shape", sorted(LINEAR_SHAPES))
def test_lenient_time_grows_linearly(shape: str) -> None:
    ratio = _ratio(LINEAR_SHAPES[shape], 300)
    assert ratio < 25, f"10x the input took {ratio:.1f}x the CPU time"


def test_offsets_of_repairs_noted_out_of_order_point_at_the_raw_text() -> None:
    # Escapes before every key: a diagnostic's raw span must skip each "\u3042" as 6 characters.
    text = _wrap("\n".join("\u3042<EMO> joy </EMO>" for _ in range(50)))
    reply = charfmt.parse(text, lenient=True)
    tags = [d for d in reply.diagnostics if d.code == "CF704" and "read as" in d.message]
    pads = [d for d in reply.diagnostics if d.code == "CF704" and "spaces" in d.message]
    assert len(tags) == 100 and len(pads) == 50
    assert {text[d.offset : d.end] for d in tags} == {"<EMO>", "</EMO>"}
    assert {text[d.offset : d.end] for d in pads} == {" joy "}
    assert [s.text for s in reply.chats[0].segments] == ["\u3042", "joy"] * 50
