"""charfmt.interop: exact round trips through PAM, UACS, group chat and Ailoy; every export valid;
foreign documents keep their ids, timestamps and actors; ``charfmt convert``; streaming deltas."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, TESTS

import charfmt
from charfmt import interop
from charfmt.cli import main
from charfmt.fuzz import iter_fuzz_cases
from charfmt.interop import groupchat
from charfmt.models import Reply
from charfmt.prompt.character import Character, Exchange, load_history
from charfmt.prompt.userinput import UserContext, UserTurn
from charfmt.stream import collect
from charfmt.writer import dumps

HERE = TESTS / "interop"
CHARACTER = ROOT / "examples" / "characters" / "mio.toml"
HISTORY = ROOT / "examples" / "history.jsonl"
FORMATS = list(interop.FORMATS)

# Replies the fuzz mutations do not make: intensities, unknown tags, reasoning, empty ones.
EXTRA_REPLIES = [
    "[surprised:0.6] えっ？ *steps back*",
    "<emo>joy</emo><sfx>bell</sfx><msg>ようこそ</msg>",
    '{"chats":[{"type":"C","order":1,"body":"<emo>sad</emo>\\n<camera>close</camera>\\n<msg>…</msg>"}]}',
    "<think>stay in character</think>\n[joy:0.9] Hello!",
    "",
    "{}",
    '{"chats":[{"type":"E","order":1,"body":"The bell rings."},{"type":"I","order":2,"body":"Mio joins."}]}',
    '{"chats":[{"type":"C","order":1,"body":"<emo>angry</emo>\\n<act>stamp</act>"}]}',
    '{"chats":[{"type":"C","order":1,"body":"<emo>shy</emo>\\n<thought>(he noticed?)</thought>"}]}',
]


def _user(rng: random.Random, n: int) -> UserTurn:
    options = [
        UserTurn.say("こんにちは", emotion="joy"),
        UserTurn.say("What is <this> & that?", action="points"),
        UserTurn(chats=[], context=UserContext(emotion="angry", environment="raining", extra={"Mood": "tired"})),
        UserTurn(),
        UserTurn.model_validate(
            {"chats": [{"type": "E", "segments": [{"tag": "text", "text": "The player opens the door."}]}]}
        ),
    ]
    return options[n % len(options)] if rng.random() < 0.8 else options[rng.randrange(len(options))]


@cache
def corpus() -> tuple[Exchange, ...]:
    """The example history, then fuzz replies and the extra ones parsed leniently: over 1,000 exchanges."""
    character = Character.load(CHARACTER)
    out = list(load_history(HISTORY, character))
    rng = random.Random(16)
    texts = [case.text for case in iter_fuzz_cases(16, 1000)] + EXTRA_REPLIES * 3
    for n, text in enumerate(texts):
        out.append(Exchange(user=_user(rng, n), reply=charfmt.parse(text, lenient=True)))
    # Model reasoning as Reply.reasoning holds it (set directly: this branch's lenient parser may not fill it yet).
    thinking = charfmt.parse(EXTRA_REPLIES[0], lenient=True).model_copy(update={"reasoning": "be kind\n{plan}"})
    out.append(Exchange(user=UserTurn(), reply=thinking))
    return tuple(out)


def test_corpus_has_what_the_acceptance_asks_for() -> None:
    history = corpus()
    assert len(history) >= 1000
    segments = [s for ex in history for c in ex.reply.chats for s in c.segments]
    assert any(s.intensity is not None for s in segments)
    assert any(s.tag not in ("emo", "act", "msg", "thought", "text") for s in segments)
    assert any(not ex.reply.chats for ex in history)
    assert any(ex.reply.diagnostics for ex in history)
    assert any(ex.reply.dialect for ex in history)
    assert any(ex.reply.reasoning for ex in history)
    assert any(ex.user.context for ex in history)


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_is_exact(fmt: str) -> None:
    history = list(corpus())
    character = Character.load(CHARACTER)
    back = interop.read(fmt, interop.dumps(fmt, history, character), character)
    assert len(back) == len(history)
    for n, (before, after) in enumerate(zip(history, back, strict=True)):
        assert after == before, n


# --- every export validates ----------------------------------------------------------------


def _pam_valid(doc: Any) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("portable_ai_memory")
    from portable_ai_memory.models.conversation import Conversation
    from portable_ai_memory.schemas import load_schema

    schema = load_schema("conversation")
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(doc)
    Conversation.model_validate(doc)


def _schema_valid(name: str, doc: Any) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((HERE / name).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(doc)


def validate(fmt: str, doc: Any) -> None:
    """Raise unless ``doc`` is a valid document of ``fmt``."""
    if fmt == "pam":
        _pam_valid(doc)
    elif fmt == "uacs":
        _schema_valid("uacs.schema.json", doc)
    elif fmt == "ailoy":
        _schema_valid("ailoy.schema.json", doc)
    else:
        assert groupchat.validate(doc) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_export_validates(fmt: str) -> None:
    validate(fmt, interop.export(fmt, list(corpus()), Character.load(CHARACTER)))


def test_the_uacs_schema_rejects_what_the_seed_let_through() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((HERE / "uacs.schema.json").read_text(encoding="utf-8"))
    check = jsonschema.Draft7Validator(schema)
    assert not check.is_valid({"anything": 1})  # the seed's root accepted any object
    good = json.loads((HERE / "samples" / "uacs.json").read_text(encoding="utf-8"))
    assert check.is_valid(good)
    bad_part = json.loads(json.dumps(good))
    bad_part["messages"][0]["content"][0] = {"type": "text"}  # no text: no branch of ContentPart
    assert not check.is_valid(bad_part)
    bad_id = {**good, "conversation_id": "not-a-uuid"}
    assert not check.is_valid(bad_id)


def _visible(fmt: str, doc: Any) -> list[str]:
    """The text a reader that ignores charfmt's extension point sees, message by message."""
    if fmt == "pam":
        return [m["content"]["text"] for m in doc["messages"] if m.get("content")]
    if fmt == "uacs":
        return [p["text"] for m in doc["messages"] for p in m["content"] if p["type"] == "text"]
    if fmt == "groupchat":
        return [m["content"] for m in doc["conversation_list"]]
    return [p["text"] for m in doc for p in m["contents"] if p["type"] == "text"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_reader_ignoring_the_extension_sees_every_spoken_line(fmt: str) -> None:
    history = list(corpus())
    seen = {line for text in _visible(fmt, interop.export(fmt, history)) for line in text.split("\n")}
    speech = {"msg"}
    for ex in history:
        for chat in [*ex.user.chats, *ex.reply.chats]:
            for seg in chat.segments:
                if seg.text and (seg.tag in speech or chat.type != "C"):
                    for line in seg.text.split("\n"):
                        assert line in seen, (fmt, line)


# --- foreign documents -------------------------------------------------------------------------

_EXTENSION = {"pam": "raw_metadata", "uacs": "metadata", "groupchat": "extra"}


def _without_ours(fmt: str, message: dict[str, Any]) -> dict[str, Any]:
    """A message as the foreign document had it: charfmt's marker and payload part taken out."""
    message = dict(message)
    if fmt == "ailoy":
        message["contents"] = [p for p in message["contents"] if not (p["type"] == "value" and "charfmt" in p["value"])]
        return message
    if fmt == "uacs":
        message["content"] = [p for p in message["content"] if p["type"] != "structured_data"]
    key = _EXTENSION[fmt]
    rest = {k: v for k, v in message.get(key, {}).items() if k != "charfmt"}
    if rest:
        message[key] = rest
    else:
        message.pop(key, None)
    return message


def _messages(fmt: str, doc: Any) -> list[dict[str, Any]]:
    return doc if fmt == "ailoy" else doc["conversation_list" if fmt == "groupchat" else "messages"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_foreign_document_keeps_ids_timestamps_and_actors(fmt: str) -> None:
    text = (HERE / "samples" / f"{fmt}.json").read_text(encoding="utf-8")
    original = json.loads(text)
    first = interop.read(fmt, text)
    assert all(ex.foreign is not None for ex in first)
    exported = interop.export(fmt, first)
    validate(fmt, exported)
    assert [_without_ours(fmt, m) for m in _messages(fmt, exported)] == _messages(fmt, original)
    if fmt != "ailoy":
        header = {k: v for k, v in exported.items() if k not in ("messages", "conversation_list")}
        assert header == {k: v for k, v in original.items() if k not in ("messages", "conversation_list")}
    second = interop.read(fmt, json.dumps(exported))
    assert second == first
    assert interop.export(fmt, second) == exported


@pytest.mark.parametrize("fmt", FORMATS)
def test_foreign_text_becomes_plain_chats_with_diagnostics(fmt: str) -> None:
    text = (HERE / "samples" / f"{fmt}.json").read_text(encoding="utf-8")
    history = interop.read(fmt, text)
    codes = {d.code for ex in history for d in [*ex.user.diagnostics, *ex.reply.diagnostics]}
    assert {"CF903", "CF904"} <= codes
    messages = {d.message for ex in history for d in [*ex.user.diagnostics, *ex.reply.diagnostics]}
    assert not any(" a image " in m or " a audio " in m for m in messages)  # (was "a image message")
    if fmt == "groupchat":
        assert "conversation_list[1].content: an image message kept only in Exchange.foreign" in messages
    spoken = [s.text for ex in history for c in ex.reply.chats for s in c.segments]
    assert spoken
    for ex in history:
        for d in [*ex.user.diagnostics, *ex.reply.diagnostics]:
            assert 0 <= d.offset <= d.end <= len(text)
            assert text.count("\n", 0, d.offset) + 1 == d.line


def test_model_reasoning_is_never_the_characters_thought() -> None:
    for fmt in ("pam", "ailoy"):
        history = interop.read(fmt, (HERE / "samples" / f"{fmt}.json").read_text(encoding="utf-8"))
        assert any(ex.reply.reasoning for ex in history)
        assert not [s for ex in history for c in ex.reply.chats for s in c.segments if s.tag == "thought"]


def test_edited_foreign_exchange_writes_the_new_text_back() -> None:
    history = interop.read("pam", (HERE / "samples" / "pam.json").read_text(encoding="utf-8"))
    reply = charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>Hi!</msg>"}]}')
    edited = [history[0].model_copy(update={"reply": reply}), *history[1:]]
    doc = interop.export("pam", edited)
    assert [m["content"]["text"] for m in doc["messages"] if m["id"] == "msg-003"] == ["Hi!"]


# --- bad input ---------------------------------------------------------------------------------

BAD = [
    (
        "pam",
        '{"schema": "portable-ai-memory-conversation", "messages": [{"role": "robot"}]}',
        "CF901",
        "messages[0].role",
    ),
    ("pam", '{"schema": "nope", "messages": []}', "CF901", "schema"),
    ("uacs", '{"messages": [{"actor": {"id": "a"}, "content": []}]}', "CF901", "messages[0].actor"),
    (
        "groupchat",
        '{"version": "1", "conversation_meta": {"user_details": {}}, "conversation_list": [{"sender": "x"}]}',
        "CF901",
        "sender",
    ),
    ("ailoy", '[{"role": "user", "contents": [{"type": "audio"}]}]', "CF901", "contents[0].type"),
    (
        "ailoy",
        '[{"role": "user", "contents": [{"type": "value", "value": {"charfmt": {"v": 9}}}]}]',
        "CF902",
        "version 9",
    ),
    (
        "ailoy",
        '[{"role": "user", "contents": [{"type": "value", "value": {"charfmt": {"v": 1, "exchange": {"user": 3}}}}]}]',
        "CF902",
        "not an exchange",
    ),
    ("uacs", '{"messages": [', "CF101", "invalid JSON"),
]


@pytest.mark.parametrize(("fmt", "text", "code", "words"), BAD)
def test_bad_documents_are_positioned_errors(fmt: str, text: str, code: str, words: str) -> None:
    with pytest.raises(interop.InteropError) as info:
        interop.read(fmt, text)
    assert info.value.first.code == code
    assert words in info.value.first.message
    assert info.value.first.offset <= len(text)


@pytest.mark.parametrize(("fmt", "text", "code", "words"), BAD[::2])
def test_convert_reports_bad_input_and_exits_1(fmt: str, text: str, code: str, words: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "charfmt", "convert", "--from", fmt, "--to", "jsonl", "-", "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 1
    assert "<stdin>:1:" in done.stderr and code in done.stderr and "^" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_convert_needs_the_character_to_read_jsonl(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "--from", "jsonl", "--to", "pam", str(HISTORY), "-"]) == 2
    assert "--character" in capsys.readouterr().err


def test_convert_round_trip_through_every_format(tmp_path: Path) -> None:
    character = Character.load(CHARACTER)
    expected = load_history(HISTORY, character)
    previous, fmt_prev = HISTORY, "jsonl"
    for fmt in [*FORMATS, "jsonl"]:
        out = tmp_path / f"h.{fmt}"
        args = ["convert", "--from", fmt_prev, "--to", fmt, "--character", str(CHARACTER), str(previous), str(out)]
        assert main(args) == 0
        previous, fmt_prev = out, fmt
    assert load_history(previous, character) == expected


def test_convert_stdin_to_stdout(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    text = (HERE / "samples" / "groupchat.json").read_text(encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["convert", "--from", "groupchat", "--to", "groupchat", "-", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["message_id"] for m in doc["conversation_list"]] == [f"msg_00{n}" for n in range(1, 6)]


# --- streaming ---------------------------------------------------------------------------------


def test_ailoy_message_deltas_stream_into_the_parser() -> None:
    reply = corpus()[1].reply
    text = dumps(reply)
    deltas: list[Any] = [{"delta": {"role": "assistant", "contents": [], "thinking": "hmm"}, "finish_reason": None}]
    deltas += [{"delta": {"contents": [{"type": "text", "text": text[i : i + 5]}]}} for i in range(0, len(text), 5)]
    deltas.append({"delta": {"contents": [{"type": "null"}]}, "finish_reason": {"type": "stop"}})
    assert "".join(interop.text_deltas(deltas)) == text
    events = list(charfmt.iter_events(interop.text_deltas(deltas)))
    assert collect(events).chats == reply.chats
    assert _merged(events) == _merged(list(Reply(chats=reply.chats).events()))
    assert len(events) > len(list(Reply(chats=reply.chats).events()))  # speech arrived in pieces


def _merged(events: list[Any]) -> list[tuple[str, str]]:
    """Event kinds with text deltas of one segment joined (what a user observes)."""
    out: list[tuple[str, str]] = []
    for e in events:
        text = getattr(e, "text", "") or ""
        if out and e.kind == "text" and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + text)
        else:
            out.append((e.kind, text))
    return out
