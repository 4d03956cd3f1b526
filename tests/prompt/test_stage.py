"""The stage reader: expressions, motions and voiced sentences, in order, the same streamed or whole."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, TESTS
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lenient import CASES as LENIENT_CASES

import charfmt
from charfmt.cli import main
from charfmt.stage import PlayMotion, SetExpression, Speak, StageReader, stage_cues
from charfmt.stagemap import Voice
from charfmt.testing import replies

AOI_PATH = TESTS / "stage" / "aoi.toml"
AOI = charfmt.Character.load(AOI_PATH)
REPLY = (
    '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<act>wave</act>\\n'
    '<msg>やっほー！今日も来てくれたんだね。</msg>\\n<motion>nod</motion>\\n<emo>sad</emo>\\n<msg>…寂しかった。</msg>"},'
    '{"type":"E","order":2,"body":"Aoi waves."}]}'
)


def _chunks(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def _streamed(chunks: list[str], character: charfmt.Character, **kwargs: Any) -> list[dict[str, Any]]:
    parser = charfmt.StreamParser(lenient=True, vocabulary=character.vocabulary, tags=character.tags)
    reader = StageReader(character, **kwargs)
    cues = []
    for chunk in chunks:
        for event in parser.feed(chunk):
            cues += reader.feed(event)
    for event in parser.close():
        cues += reader.feed(event)
    cues += reader.close()
    dicts = [c.to_dict() for c in cues]
    resets = [i for i, c in enumerate(dicts) if c["kind"] == "reset"]
    return dicts[resets[-1] + 1 :] if resets else dicts


def _whole(reply: charfmt.Reply, character: charfmt.Character, **kwargs: Any) -> list[dict[str, Any]]:
    return [c.to_dict() for c in stage_cues(reply, character, **kwargs)]


def _cues_precede_their_sentences(cues: list[dict[str, Any]]) -> None:
    """Each sentence is spoken after the expression and the action it carries were fired, for its chat."""
    emotion: dict[int, str | None] = {}
    action: dict[int, str | None] = {}
    for cue in cues:
        chat = cue["chat"]
        if cue["kind"] == "expression":
            emotion[chat] = cue["emotion"]
        elif cue["kind"] == "motion" and "tag" not in cue:
            action[chat] = cue["word"]
        elif cue["kind"] == "speak":
            assert cue.get("emotion") == emotion.get(chat)
            assert cue.get("action") == action.get(chat)


def test_the_cues_of_a_reply_in_order() -> None:
    cues = list(
        stage_cues(charfmt.parse(REPLY, vocabulary=AOI.vocabulary, tags=AOI.tags), AOI, narrator=Voice(speaker=9))
    )
    assert cues == [
        SetExpression(0, "joy", 0.8, None, "aoi_smile", "happy", ["smile"], "Happy", "Smile", True),
        PlayMotion(0, "wave", None, "wave.vrma", "Wave", mapped=True),
        Speak(0, 2, "やっほー！", "joy", "wave", None, {"style": "happy", "speaker": 3, "rate": 1.1}),
        Speak(0, 2, "今日も来てくれたんだね。", "joy", "wave", None, {"style": "happy", "speaker": 3, "rate": 1.1}),
        PlayMotion(0, "nod", "motion", live2d="Nod", mapped=True),
        SetExpression(0, "sad", 1.0, vrm="neutral"),  # the fallback; sad has no sprite
        Speak(0, 5, "…寂しかった。", "sad", "wave", None, {"speaker": 3}),  # the character's voice
        Speak(1, 0, "Aoi waves.", None, None, "narrator", {"speaker": 9}),
    ]
    # without a narrator voice, I/E chats are not spoken
    assert [c.kind for c in stage_cues(charfmt.parse(REPLY, tags=AOI.tags), AOI)][-1] == "speak"
    assert len(list(stage_cues(charfmt.parse(REPLY, tags=AOI.tags), AOI))) == 7


def test_intensity_scales_the_weight() -> None:
    reply = charfmt.parse("[joy:0.5] Hello there!", lenient=True)
    (expression, speak) = stage_cues(reply, AOI)
    assert isinstance(expression, SetExpression) and expression.weight == 0.4 and expression.intensity == 0.5
    assert isinstance(speak, Speak) and speak.text == "Hello there!"


def test_an_alias_reads_as_its_key_and_a_character_without_a_stage_gets_its_sprites() -> None:
    rex = charfmt.Character.load(ROOT / "examples" / "characters" / "rex.toml")
    reply = charfmt.parse(
        '{"chats":[{"type":"C","order":1,"body":"<emo>happy</emo>\\n<msg>Fine.</msg>"}]}', lenient=True
    )
    cues = [c.to_dict() for c in stage_cues(reply, rex)]
    assert cues == [
        {
            "kind": "expression",
            "chat": 0,
            "emotion": "pleased",
            "weight": 1.0,
            "sprite": "rex_pleased",
            "mapped": False,
        },
        {"kind": "speak", "chat": 0, "segment": 1, "text": "Fine.", "emotion": "pleased"},
    ]


@settings(max_examples=60, deadline=None)
@given(
    replies(tags=AOI.tags, vocabulary=AOI.vocabulary),
    st.lists(st.integers(0, 10_000), max_size=30),
    st.sampled_from([None, 6]),
    st.sampled_from([None, Voice(speaker="n")]),
)
def test_stream_cues_equal_whole_reply_cues(
    reply: charfmt.Reply, cuts: list[int], max_length: int | None, narrator: Voice | None
) -> None:
    text = charfmt.dumps(reply)
    options = {"max_length": max_length, "narrator": narrator}
    whole = _whole(reply, AOI, **options)
    assert _streamed(_chunks(text, cuts), AOI, **options) == whole
    assert _streamed(list(text), AOI, **options) == whole
    _cues_precede_their_sentences(whole)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([c.input for c in LENIENT_CASES]), st.lists(st.integers(0, 10_000), max_size=20))
def test_damaged_stream_cues_equal_the_lenient_batch(text: str, cuts: list[int]) -> None:
    batch = charfmt.parse(text, lenient=True, vocabulary=AOI.vocabulary, tags=AOI.tags)
    whole = _whole(batch, AOI, max_length=8)
    streamed = _streamed(_chunks(text, cuts), AOI, max_length=8)
    if any(d.code == "CF113" for d in batch.diagnostics):
        # chats listed out of order: a stream shows them as they arrive, a whole reply sorted
        # (docs/FORMAT.md, Streaming); each chat's cues are the same, in the same order
        assert _per_chat(streamed) == _per_chat(whole)
        _cues_precede_their_sentences(streamed)
    else:
        assert streamed == whole
    _cues_precede_their_sentences(whole)


def _per_chat(cues: list[dict[str, Any]]) -> list[str]:
    """Each chat's cues (without its index), as a sorted list: the same cues whatever order the chats come in."""
    chats: dict[Any, list[dict[str, Any]]] = {}
    for cue in cues:
        chats.setdefault(cue.get("chat"), []).append({k: v for k, v in cue.items() if k != "chat"})
    return sorted(json.dumps(c, sort_keys=True, ensure_ascii=False) for c in chats.values())


def test_cli_stream_stage_prints_cues_as_json_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    path.write_text(REPLY, encoding="utf-8")
    args = ["stream", "--replay", str(path), "--chunk", "3", "--stage", "--character", str(AOI_PATH)]
    assert main(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == _whole(charfmt.parse(REPLY, tags=AOI.tags), AOI)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(REPLY.encode())))
    assert main(["stream", "--stage", "--max-length", "4", "--character", str(AOI_PATH)]) == 0
    texts = [c["text"] for c in map(json.loads, capsys.readouterr().out.splitlines()) if c["kind"] == "speak"]
    assert texts == ["やっほー！", "今日も来てくれたんだね。", "…寂しかった。"]


def test_charfmt_chat_shows_the_stage_cues_before_the_speech() -> None:
    from charfmt.chat import run

    def model(messages: list[dict[str, str]]) -> Any:
        assert messages[0]["role"] == "system"
        return iter([REPLY[i : i + 4] for i in range(0, len(REPLY), 4)])

    out = io.StringIO()
    assert run(AOI, generate=model, says=["hi"], out=out, stats=[], stage=StageReader(AOI)) == 0
    lines = out.getvalue().splitlines()
    staged = [json.loads(line.removeprefix("  (stage) ")) for line in lines if line.startswith("  (stage) ")]
    assert staged == _whole(charfmt.parse(REPLY, tags=AOI.tags), AOI)
    first_speech = next(i for i, line in enumerate(lines) if line.startswith("Aoi: "))
    assert lines.index("  (stage) " + json.dumps(staged[0], ensure_ascii=False)) < first_speech


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: list(stage_cues(REPLY, AOI)), "raw text"),  # type: ignore[arg-type]
        (lambda: list(stage_cues(charfmt.parse(REPLY, lenient=True), "aoi.toml")), "charfmt.Character"),  # type: ignore[arg-type]
        (lambda: StageReader(AOI).feed("hello"), "charfmt event"),  # type: ignore[arg-type]
        (lambda: StageReader(AOI, max_length="10"), "max_length"),  # type: ignore[arg-type]
        (lambda: charfmt.Character.from_card("aoi.png"), "Character.load"),  # type: ignore[arg-type]
        (lambda: charfmt.Character.from_card({"name": "x"}), "bytes"),  # type: ignore[arg-type]
    ],
)
def test_wrong_types_are_a_clear_type_error(call: Any, needle: str) -> None:
    with pytest.raises(TypeError, match=needle):
        call()


def test_export_card_of_an_unknown_format_is_a_value_error() -> None:
    from charfmt.prompt.cards import export_card

    with pytest.raises(ValueError, match='"json" or "png"'):
        export_card(AOI, "webp")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "intensity"), [("1.5", 1.0), ("2", 1.0), ("150", 1.0), ("-1", None), ("0.6", 0.6)]
)
def test_an_out_of_range_intensity_is_clamped_or_dropped_never_spoken(value: str, intensity: float | None) -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"[joy:' + value + '] hello there."}]}'
    reply = charfmt.parse(text, lenient=True)
    cues = [c.to_dict() for c in stage_cues(reply, AOI)]
    expression = next(c for c in cues if c["kind"] == "expression")
    assert expression["emotion"] == "joy"
    assert expression.get("intensity") == intensity
    assert [c["text"] for c in cues if c["kind"] == "speak"] == ["hello there."]
    codes = [d.code for d in reply.diagnostics]
    assert ("CF930" in codes) == (value != "0.6")
    assert _streamed([text[:9], text[9:]], AOI) == cues


def test_cli_stream_stage_keeps_warnings_as_diagnostic_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<motion>jump</motion>\\n<msg>Hi.</msg>"}]}'
    path = tmp_path / "r.json"
    path.write_text(text, encoding="utf-8")
    base = ["stream", "--replay", str(path), "--character", str(AOI_PATH)]
    assert main(base) == 0
    plain = [line for line in map(json.loads, capsys.readouterr().out.splitlines()) if line["kind"] == "diagnostic"]
    assert main([*base, "--stage"]) == 0
    staged = [line for line in map(json.loads, capsys.readouterr().out.splitlines()) if line["kind"] == "diagnostic"]
    assert staged == plain and "CF132" in [line["diagnostic"]["code"] for line in plain]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [(["--max-length", "8"], "--max-length"), (["--sentences", "--stage"], "--sentences")],
)
def test_cli_stream_flags_that_do_nothing_together_are_a_usage_error(flags: list[str], needle: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "charfmt", "stream", "--replay", str(AOI_PATH.parent / "missing.json"), *flags],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2 and needle in run.stderr


@pytest.mark.parametrize(("body", "silent"), [("……", True), ("...", True), ("！？", True), ("こんにちは。……", False)])
def test_a_message_of_punctuation_only_is_not_spoken(body: str, silent: bool) -> None:
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>' + body + '</msg>"}]}'
    speaks = [c for c in stage_cues(charfmt.parse(text, tags=AOI.tags), AOI) if isinstance(c, Speak)]
    assert [c.text for c in speaks] == [body]
    assert speaks[0].to_dict().get("silent", False) is silent
    assert _streamed([text[:30], text[30:]], AOI) == [c.to_dict() for c in stage_cues(charfmt.parse(text), AOI)]


def test_charfmt_chat_max_length_splits_the_tts_lines_and_cues_do_not_break_the_typed_line() -> None:
    from charfmt.chat import run

    def model(messages: list[dict[str, str]]) -> Any:
        return iter([REPLY[i : i + 4] for i in range(0, len(REPLY), 4)])

    out = io.StringIO()
    stage = StageReader(AOI, max_length=4)
    assert run(AOI, generate=model, says=["hi"], out=out, stats=[], stage=stage, max_length=4) == 0
    lines = out.getvalue().splitlines()
    typed = [line for line in lines if line.startswith("Aoi: ")]
    assert typed == ["Aoi: やっほー！今日も来てくれたんだね。", "Aoi: …寂しかった。"]
    # with a stage, each sentence is shown once: as its speak cue (no "(tts)" line beside it)
    assert not [line for line in lines if line.startswith("  (tts) ")]
    cues = [json.loads(line.removeprefix("  (stage) ")) for line in lines if line.startswith("  (stage) ")]
    assert [c["text"] for c in cues if c["kind"] == "speak"] == [
        "やっほー！",
        "今日も来てくれたんだね。",
        "…寂しかった。",
    ]
