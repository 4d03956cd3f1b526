"""charfmt.interop and ``charfmt convert`` after a new user's report: compact payloads that read
back, edits by other tools taken (never silently overridden), Python edits reaching the visible
text, lossless JSON Lines, native fields across formats, reasoning where each format wants it,
deterministic ids, no invalid JSON, the Python API's types, and the smaller points."""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, TESTS

import charfmt
from charfmt import interop
from charfmt.cli import main
from charfmt.diagnostics import CharfmtError
from charfmt.prompt.character import Character, Exchange, history_from_jsonl, history_line, load_history
from charfmt.prompt.userinput import UserTurn

HERE = TESTS / "interop"
CHARACTER = ROOT / "examples" / "characters" / "mio.toml"
HISTORY = ROOT / "examples" / "history.jsonl"
FORMATS = list(interop.FORMATS)


def _sample(fmt: str) -> str:
    return (HERE / "samples" / f"{fmt}.json").read_text(encoding="utf-8")


def _messages(fmt: str, doc: Any) -> list[dict[str, Any]]:
    return doc if fmt == "ailoy" else doc["conversation_list" if fmt == "groupchat" else "messages"]


def _text(fmt: str, message: dict[str, Any]) -> str | None:
    """The text a reader of the format sees in one message."""
    if fmt == "pam":
        content = message.get("content")
        return content.get("text") if isinstance(content, dict) else None
    if fmt == "groupchat":
        return message.get("content")
    parts = message["contents" if fmt == "ailoy" else "content"]
    texts = [p["text"] for p in parts if p.get("type") == "text"]
    return "\n".join(texts) if texts else None


def _set(fmt: str, message: dict[str, Any], text: str) -> None:
    if fmt == "pam":
        message["content"]["text"] = text
    elif fmt == "groupchat":
        message["content"] = text
    else:
        next(p for p in message["contents" if fmt == "ailoy" else "content"] if p.get("type") == "text")["text"] = text


def _codes(history: list[Exchange]) -> list[str]:
    return [d.code for ex in history for d in [*ex.user.diagnostics, *ex.reply.diagnostics]]


def _mio() -> Character:
    return Character.load(CHARACTER)


def _reply(body: str, reasoning: str | None = None) -> charfmt.Reply:
    reply = charfmt.parse(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}))
    return reply.model_copy(update={"reasoning": reasoning}) if reasoning else reply


def _history() -> list[Exchange]:
    return [
        Exchange(user=UserTurn.say("こんにちは"), reply=_reply("<emo>joy</emo>\n<msg>ようこそ！</msg>")),
        Exchange(user=UserTurn.say("元気？"), reply=_reply("<emo>shy</emo>\n<msg>うん</msg>", "answer shyly")),
        Exchange(user=UserTurn.say("またね"), reply=_reply("<emo>sad</emo>\n<msg>またね…</msg>")),
    ]


def _big_ailoy(n: int) -> str:
    roles = ["user", "assistant"]
    return json.dumps(
        [
            {"role": roles[i % 2], "contents": [{"type": "text", "text": f"line {i} " + "hello there " * 8}]}
            for i in range(n)
        ]
    )


# --- 1. compact payloads, and what convert writes reads back ---------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_visible_text_is_stored_once_and_big_documents_are_compact(fmt: str) -> None:
    text = _big_ailoy(2000)
    history = interop.read("ailoy", text)
    out = interop.dumps(fmt, history, indent=None)
    assert out.count("line 1234 hello") == 1  # shown once, not again in the payload
    assert len(out) < 5 * len(text)
    assert interop.read(fmt, out) == history
    assert "\n  " in interop.dumps(fmt, history, indent=2)


@pytest.mark.long
def test_a_large_conversion_reads_back_with_default_settings(tmp_path: Path) -> None:
    src = tmp_path / "big.json"  # (not big.ailoy.json: the ailoy output below would name it, and OUT may not be IN)
    src.write_text(_big_ailoy(10_000), encoding="utf-8")
    for fmt in FORMATS:
        out = tmp_path / f"big.{fmt}.json"
        assert main(["convert", "--from", "ailoy", "--to", fmt, str(src), str(out)]) == 0
        assert out.stat().st_size < 8 * 1024 * 1024
        assert out.read_bytes()[:2] in (b"[{", b'{"')  # a big document is not indented
        back = tmp_path / f"back.{fmt}.json"
        assert main(["convert", "--from", fmt, "--to", "ailoy", str(out), str(back)]) == 0


def test_convert_refuses_to_write_what_it_could_not_read_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.json"
    src.write_text(_big_ailoy(50), encoding="utf-8")
    out = tmp_path / "out.json"
    size = src.stat().st_size
    assert main(["convert", "--max-size", str(size + 10), "--from", "ailoy", "--to", "pam", str(src), str(out)]) == 1
    assert "--max-size" in capsys.readouterr().err
    assert not out.exists()


# --- 2. edits made by other tools ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_edited_message_is_taken_with_a_warning(fmt: str) -> None:
    doc = interop.export(fmt, _history())
    message = next(m for m in _messages(fmt, doc) if _text(fmt, m) == "うん")
    _set(fmt, message, "ううん、ちがう")
    back = interop.read(fmt, json.dumps(doc, ensure_ascii=False))
    reply = back[1].reply
    assert [s.text for c in reply.chats for s in c.segments] == ["ううん、ちがう"]
    warning = next(d for d in reply.diagnostics if d.code == "CF907")
    assert warning.severity == "warning"
    index = _messages(fmt, doc).index(message)
    assert f"[{index}]" in warning.message
    assert back[0] == _history()[0] and back[2] == _history()[2]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_deleted_first_message_does_not_drop_the_rest_of_its_exchange(fmt: str) -> None:
    doc = interop.export(fmt, _history())
    messages = _messages(fmt, doc)
    first = next(n for n, m in enumerate(messages) if _text(fmt, m) == "元気？")
    del messages[first]
    back = interop.read(fmt, json.dumps(doc, ensure_ascii=False))
    spoken = [s.text for ex in back for c in ex.reply.chats for s in c.segments]
    assert "うん" in spoken
    assert "CF908" in _codes(back)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_deleted_later_message_drops_its_chat_with_a_warning(fmt: str) -> None:
    doc = interop.export(fmt, _history())
    messages = _messages(fmt, doc)
    del messages[next(n for n, m in enumerate(messages) if _text(fmt, m) == "ようこそ！")]
    back = interop.read(fmt, json.dumps(doc, ensure_ascii=False))
    assert back[0].reply.chats == []
    assert "CF908" in [d.code for d in back[0].reply.diagnostics]


def test_a_continuation_without_a_payload_reads_its_text() -> None:
    doc = [
        {
            "role": "assistant",
            "contents": [
                {"type": "text", "text": "hi"},
                {"type": "value", "value": {"charfmt": {"v": 1, "continued": True}}},
            ],
        }
    ]
    back = interop.read("ailoy", json.dumps(doc))
    assert [s.text for ex in back for c in ex.reply.chats for s in c.segments] == ["hi"]
    assert "CF908" in _codes(back)


# --- 3. Python edits reach the visible text ---------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_removed_chats_leave_the_visible_messages(fmt: str) -> None:
    history = interop.read(fmt, _sample(fmt))
    target = next(n for n, ex in enumerate(history) if ex.reply.chats)
    gone = {s.text for c in history[target].reply.chats for s in c.segments}
    edited = list(history)
    edited[target] = history[target].model_copy(
        update={"reply": history[target].reply.model_copy(update={"chats": []})}
    )
    doc = interop.export(fmt, edited)
    seen = {_text(fmt, m) for m in _messages(fmt, doc)}
    assert not gone & seen
    assert interop.read(fmt, json.dumps(doc, ensure_ascii=False))[target].reply.chats == []


def test_an_added_chat_gets_a_message() -> None:
    history = interop.read("pam", _sample("pam"))
    reply = history[0].reply
    more = reply.model_copy(update={"chats": [*reply.chats, *_reply("<msg>Tea?</msg>").chats]})
    doc = interop.export("pam", [history[0].model_copy(update={"reply": more}), *history[1:]])
    assert "Tea?" in [_text("pam", m) for m in doc["messages"]]


# --- 4. lossless JSON Lines ----------------------------------------------------------------------


def test_jsonl_lines_keep_reasoning_dialect_and_diagnostics() -> None:
    mio = _mio()
    reply = charfmt.parse(
        '<think>plan</think>Sure!```json\n{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo><msg>ok"}]}',
        lenient=True,
    )
    reply = reply.model_copy(update={"reasoning": "plan"})  # what the reasoning-aware parser fills
    assert reply.dialect and reply.diagnostics
    history = [Exchange(user=UserTurn.say("hi"), reply=reply), *load_history(HISTORY, mio)]
    text = "".join(history_line(ex) for ex in history)
    assert history_from_jsonl(text, mio) == history


def test_old_jsonl_lines_still_read() -> None:
    mio = _mio()
    assert history_from_jsonl(HISTORY.read_text(encoding="utf-8"), mio) == load_history(HISTORY, mio)


def test_convert_to_jsonl_keeps_foreign_reasoning_and_diagnostics(tmp_path: Path) -> None:
    src = tmp_path / "pam.json"
    src.write_text(_sample("pam"), encoding="utf-8")
    out = tmp_path / "h.jsonl"
    assert main(["convert", "--from", "pam", "--to", "jsonl", str(src), str(out)]) == 0
    assert history_from_jsonl(out.read_text(encoding="utf-8"), _mio()) == interop.read("pam", _sample("pam"))


# --- 5. native fields across formats ---------------------------------------------------------------


def test_groupchat_to_uacs_keeps_ids_times_and_names() -> None:
    doc = interop.export("uacs", interop.read("groupchat", _sample("groupchat")))
    rows = [(m["message_id"], m["timestamp"], m["actor"]["name"]) for m in doc["messages"]]
    assert ("msg_001", "2025-02-01T02:00:00+00:00", "Alex") in rows
    assert ("msg_005", "2025-02-01T02:02:00+00:00", "Betty") in rows


@pytest.mark.parametrize("fmt", ["uacs", "groupchat", "ailoy"])
def test_pam_ids_reach_other_formats(fmt: str) -> None:
    doc = interop.export(fmt, interop.read("pam", _sample("pam")))
    ids = [m.get("message_id", m.get("id")) for m in _messages(fmt, doc)]
    assert "msg-001" in ids and "msg-007" in ids


# --- 6. reasoning where the format expects it ----------------------------------------------------


def test_reasoning_is_ailoy_thinking_and_a_pam_thought_message() -> None:
    ailoy = interop.export("ailoy", _history())
    assert [m.get("thinking") for m in ailoy if m.get("thinking")] == ["answer shyly"]
    pam = interop.export("pam", _history())
    thoughts = [m for m in pam["messages"] if m.get("is_thought")]
    assert [m["content"]["text"] for m in thoughts] == ["answer shyly"]
    assert thoughts[0]["role"] == "assistant"
    assert interop.read("pam", json.dumps(pam, ensure_ascii=False)) == _history()
    uacs = json.dumps(interop.export("uacs", _history()))
    assert uacs.count("answer shyly") == 1  # the payload only


# --- 7. deterministic ids ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_exporting_twice_gives_the_same_document(fmt: str) -> None:
    assert interop.dumps(fmt, _history()) == interop.dumps(fmt, copy.deepcopy(_history()))


def test_conversation_ids_are_uuids_and_differ_by_content() -> None:
    one, two = interop.export("pam", _history()), interop.export("pam", _history()[:2])
    assert uuid.UUID(one["id"]) and uuid.UUID(two["id"])
    assert one["id"] != two["id"]
    assert interop.export("uacs", _history())["conversation_id"] == one["id"]
    ids = [m["id"] for m in one["messages"]]
    assert len(ids) == len(set(ids))
    assert not set(ids) & {m["id"] for m in two["messages"]}


# --- 8. never invalid JSON -------------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_positioned_errors(literal: str) -> None:
    text = '[{"role": "user", "contents": [{"type": "value", "value": {"x": ' + literal + "}}]}]"
    with pytest.raises(interop.InteropError) as info:
        interop.read("ailoy", text)
    first = info.value.first
    assert first.code == "CF909"
    assert text[first.offset : first.end] == literal


def test_convert_exits_1_on_nan_and_writes_nothing() -> None:
    text = '[{"role": "user", "contents": [{"type": "value", "value": NaN}]}]'
    done = subprocess.run(
        [sys.executable, "-m", "charfmt", "convert", "--from", "ailoy", "--to", "pam", "-", "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 1
    assert "CF909" in done.stderr and "^" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


# --- 9. the Python API's types ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_takes_text_bytes_and_decoded_values(fmt: str) -> None:
    text = _sample(fmt)
    expected = interop.read(fmt, text)
    assert interop.read(fmt, text.encode("utf-8")) == expected
    decoded = interop.read(fmt, json.loads(text))
    assert [[c.segments for c in ex.reply.chats] for ex in decoded] == [
        [c.segments for c in ex.reply.chats] for ex in expected
    ]
    assert [ex.foreign["messages"] if ex.foreign else None for ex in decoded] == [
        ex.foreign["messages"] if ex.foreign else None for ex in expected
    ]


def test_read_rejects_other_types_and_bad_bytes() -> None:
    with pytest.raises(TypeError, match="str, bytes"):
        interop.read("pam", 42)
    with pytest.raises(CharfmtError):
        interop.read("ailoy", b'[{"role": "user", "contents": [{"type": "text", "text": "\xff"}]}]')
    with pytest.raises(CharfmtError):
        interop.read("ailoy", [{"role": "user", "contents": [{"type": "value", "value": float("nan")}]}])


@pytest.mark.parametrize("bad", ["hello", [{"user": "hi"}], {"a": 1}, 3])
def test_export_rejects_what_is_not_a_history(bad: Any) -> None:
    with pytest.raises(TypeError, match="Exchange"):
        interop.export("pam", bad)


# --- 10. the smaller points -----------------------------------------------------------------------


def test_convert_from_jsonl_on_a_json_document_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "doc.json"
    src.write_text(json.dumps(json.loads(_sample("pam")), indent=2), encoding="utf-8")
    assert main(["convert", "--from", "jsonl", "--to", "pam", "--character", str(CHARACTER), str(src), "-"]) == 1
    err = capsys.readouterr().err
    assert "CF910" in err and "not JSON Lines" in err and "^" in err
    assert "pam, uacs or groupchat" in err


def test_convert_from_jsonl_on_one_model_reply_points_to_parse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "reply.json"
    reply = {"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\n<msg>Hi</msg>"}]}
    src.write_text(json.dumps(reply, indent=2), encoding="utf-8")
    assert main(["convert", "--from", "jsonl", "--to", "pam", "--character", str(CHARACTER), str(src), "-"]) == 1
    err = capsys.readouterr().err
    assert "CF910" in err and "one model reply" in err and "charfmt parse" in err
    assert "pam, uacs or groupchat" not in err


@pytest.mark.parametrize("link", [False, True], ids=["same-path", "a-link-to-it"])
def test_convert_refuses_to_write_over_its_own_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], link: bool
) -> None:
    """Found by a newcomer's trial: OUT naming IN replaced the history with its conversion (exit 0)."""
    src = tmp_path / "h.jsonl"
    src.write_bytes(HISTORY.read_bytes())
    out = src
    if link:
        out = tmp_path / "link.jsonl"
        out.symlink_to(src)
    argv = ["convert", "--from", "jsonl", "--to", "pam", "--character", str(CHARACTER), str(src), str(out)]
    assert main(argv) == 2
    assert "OUT is IN" in capsys.readouterr().err
    assert src.read_bytes() == HISTORY.read_bytes()
    command = [sys.executable, "-m", "charfmt", *argv]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr and src.read_bytes() == HISTORY.read_bytes()


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "jsonl"])
def test_a_document_format_read_from_json_lines_points_to_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    argv = ["convert", "--from", fmt, "--to", "jsonl", "--character", str(CHARACTER), str(HISTORY), "-"]
    assert main(argv) == 1
    assert "--from jsonl reads it" in capsys.readouterr().err
    src = tmp_path / "doc.json"  # a real document of another format gets no such hint
    src.write_text(_sample("groupchat" if fmt != "groupchat" else "pam"), encoding="utf-8")
    main(["convert", "--from", fmt, "--to", "jsonl", "--character", str(CHARACTER), str(src), "-"])
    assert "--from jsonl" not in capsys.readouterr().err


def test_deep_documents_say_so_without_mentioning_replies() -> None:
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(interop.InteropError) as info:
        interop.read("ailoy", deep)
    assert info.value.first.code == "CF110"
    assert "reply" not in info.value.first.message
    nested: Any = "x"
    for _ in range(150):
        nested = [nested]
    ok = [{"role": "user", "contents": [{"type": "value", "value": nested}]}]
    assert interop.read("ailoy", json.dumps(ok))[0].foreign is not None


def test_an_unknown_option_points_to_the_convert_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "--from", "pam", "--to", "ailoy", "--bogus", "a", "b"]) == 2
    assert "charfmt convert --help" in capsys.readouterr().err


def test_foreign_markup_is_said_not_to_be_interpreted() -> None:
    doc = [{"role": "assistant", "contents": [{"type": "text", "text": "[joy] *waves* hi"}]}]
    (ex,) = interop.read("ailoy", json.dumps(doc))
    message = next(d.message for d in ex.reply.diagnostics if d.code == "CF903")
    assert "has no emotion or action" not in message
    assert "not interpreted" in message


def test_pam_branches_keep_one_and_say_so() -> None:
    doc = json.loads(_sample("pam"))
    doc["messages"] = [
        {
            "id": "a",
            "role": "user",
            "created_at": "2025-01-01T00:00:00Z",
            "content": {"type": "text", "text": "hi"},
            "children_ids": ["b", "c"],
        },
        {
            "id": "b",
            "role": "assistant",
            "created_at": "2025-01-01T00:00:01Z",
            "content": {"type": "text", "text": "one"},
            "parent_id": "a",
        },
        {
            "id": "c",
            "role": "assistant",
            "created_at": "2025-01-01T00:00:02Z",
            "content": {"type": "text", "text": "two"},
            "parent_id": "a",
        },
    ]
    history = interop.read("pam", json.dumps(doc))
    assert [s.text for ex in history for c in ex.reply.chats for s in c.segments] == ["one"]
    assert "CF911" in _codes(history)
    again = interop.export("pam", history)
    assert [m["id"] for m in again["messages"]] == ["a", "b", "c"]  # the other branch kept


def _groupchat(version: str, sender: str) -> str:
    doc = json.loads(_sample("groupchat"))
    doc["version"] = version
    doc["conversation_list"][0]["sender"] = sender
    return json.dumps(doc)


def test_groupchat_unknown_version_and_system_sender_are_warnings() -> None:
    history = interop.read("groupchat", _groupchat("2.0.0", "system"))
    diagnostics = [d for ex in history for d in [*ex.user.diagnostics, *ex.reply.diagnostics]]
    assert {"CF912", "CF913"} <= {d.code for d in diagnostics}
    assert all(d.severity == "warning" for d in diagnostics if d.code in ("CF912", "CF913"))
    first = history[0]
    assert next(c.type for c in [*first.user.chats, *first.reply.chats]) == "I"
    assert interop.read("groupchat", interop.dumps("groupchat", history)) == history


def test_the_ailoy_schema_accepts_the_seeds_tool_response() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((HERE / "ailoy.schema.json").read_text(encoding="utf-8"))
    tool = {
        "role": "tool",
        "tool_call_id": "call_01HZX2...",
        "name": "get_weather",
        "contents": [{"type": "text", "text": "12.3"}],
    }
    jsonschema.Draft202012Validator(schema).validate([tool])


def test_the_readme_convert_commands_use_paths_that_exist(tmp_path: Path) -> None:
    section = (ROOT / "docs" / "INTEROP.md").read_text(encoding="utf-8")
    commands = re.findall(r"^\s*(charfmt convert .*)$", section, re.MULTILINE)
    assert commands
    for command in commands:
        words = command.split("#")[0].split("<")[0].split()[1:]  # standard input: the test reads none
        for word in words:
            if word.endswith((".toml", ".jsonl")) and not word.startswith("-") and word != words[-1]:
                assert (ROOT / word).is_file(), word
        if words[-1] != "-":
            words[-1] = str(tmp_path / Path(words[-1]).name)
            words = [str(ROOT / w) if (ROOT / w).is_file() else w for w in words]
            assert main(words) == 0, command


def test_stdin_bytes_with_a_bom_read(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = ("\ufeff" + _sample("ailoy")).encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    assert main(["convert", "--from", "ailoy", "--to", "ailoy", "-", "-"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == "sys-0"


# -- the speakers' names cross formats without a character (a newcomer's trial: PAM -> group chat wrote
# "User" and "Character" though the PAM file's participants named 旅人 and ミオ) ------------------------


def _written(fmt: str) -> str:
    mio = Character.load(CHARACTER)
    return interop.dumps(fmt, load_history(HISTORY, mio), mio)


@pytest.mark.parametrize(
    ("fmt", "source", "names"),
    [
        ("pam", "written", ("旅人", "ミオ")),
        ("groupchat", "written", ("旅人", "ミオ")),
        ("pam", "sample", ("Traveller", "Mio")),
        ("groupchat", "sample", ("Alex", "Mio")),  # (user_101..., each with its role: the first of each)
        ("uacs", "written", None),
        ("ailoy", "written", None),
    ],
)
def test_speaker_names_reads_the_names_a_document_gives(fmt: str, source: str, names: tuple[str, str] | None) -> None:
    text = _written(fmt) if source == "written" else _sample(fmt)
    assert interop.speaker_names(fmt, text) == names
    assert interop.speaker_names(fmt, json.loads(text)) == names
    assert interop.speaker_names(fmt, text.encode()) == names


def test_speaker_names_of_what_is_no_document() -> None:
    assert interop.speaker_names("pam", "not json") is None
    assert interop.speaker_names("pam", '{"participants": [{"role": "user", "name": "A"}]}') is None
    with pytest.raises(ValueError, match="unknown format"):
        interop.speaker_names("nope", "{}")


def test_export_takes_names_where_no_character_is_given() -> None:
    history = interop.read("pam", _written("pam"))
    doc = interop.export("groupchat", history, names=("旅人", "ミオ"))
    details = doc["conversation_meta"]["user_details"]
    assert (details["user"]["full_name"], details["character"]["full_name"]) == ("旅人", "ミオ")
    assert {m["sender_name"] for m in doc["conversation_list"]} == {"旅人", "ミオ"}
    with pytest.raises(TypeError, match="names must be a tuple of two strings"):
        interop.export("groupchat", history, names=("only one",))  # type: ignore[arg-type]


def test_a_foreign_documents_names_go_on_to_another_format() -> None:
    doc = interop.export("groupchat", interop.read("pam", _sample("pam")))
    details = doc["conversation_meta"]["user_details"]
    assert (details["user"]["full_name"], details["character"]["full_name"]) == ("Traveller", "Mio")


@pytest.mark.parametrize("target", ["groupchat", "uacs", "pam"])
def test_convert_keeps_the_speakers_names_without_character(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    source = tmp_path / "history.pam.json"
    source.write_text(_written("pam"), encoding="utf-8")
    assert main(["convert", "--from", "pam", "--to", target, str(source), "-"]) == 0
    out = capsys.readouterr().out
    assert "ミオ" in out and "旅人" in out
    assert '"Character"' not in out and '"User"' not in out


def test_convert_names_the_speakers_of_a_foreign_group_chat(capsys: pytest.CaptureFixture[str]) -> None:
    """A group chat keyed as the format's own documents are (``user_101``, ``robot_001``, each with its role): PAM's
    participants are its first user and its assistant, not "User" and "Character" (a newcomer's trial)."""
    assert main(["convert", "--from", "groupchat", "--to", "pam", str(HERE / "samples" / "groupchat.json"), "-"]) == 0
    participants = json.loads(capsys.readouterr().out)["participants"]
    assert participants == [{"role": "user", "name": "Alex"}, {"role": "assistant", "name": "Mio"}]
