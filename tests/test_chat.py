"""``charfmt chat`` without a model: the terminal view, history, an OpenAI-compatible endpoint, errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from conftest import ROOT

import charfmt
from charfmt.character import Character, Exchange
from charfmt.chat import TerminalView, TurnStats, take_turn
from charfmt.cli import main

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
    assert shown[0] == "! info CF302: chat 0 body: emotion 'joy' is an alias of 'pleased'"
    assert shown[1] == "[sprite: rex_pleased]"  # the sprite of the key the alias names
    assert shown[2] == "*taps the counter*"
    assert shown[3] == "Rex: Forty bolts. Not one less! Deal?"  # typed on one line, chunk by chunk
    assert shown[4:] == ["  (tts) Forty bolts.", "  (tts) Not one less!", "  (tts) Deal?"]
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


def test_turn_stats() -> None:
    stats = TurnStats(tokens=11, first_token_seconds=2.0, seconds=5.0, finished=True)
    assert stats.tokens_per_second == 2.0
    assert TurnStats(1, 0.5, 0.0, False).tokens_per_second == 0.0


# --- an OpenAI-compatible endpoint (a local stand-in server) -------------------------------------


class _Server(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    status: ClassVar[int] = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body})
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b'{"error": "grammar too large"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(0, len(TEXT), 5):
            chunk = {"choices": [{"delta": {"content": TEXT[i : i + 5]}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Server.requests = []
    _Server.status = 200
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


def test_missing_model_is_a_clear_message() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install charfmt[local])")
    done = _run(
        "import sys\nfrom charfmt.cli import main\n"
        f"sys.exit(main(['chat', '--character', {REX!r}, '--model', '/nonexistent/m.gguf', '--say', 'hi']))"
    )
    assert done.returncode == 1
    assert done.stderr == "charfmt: error: model file not found: /nonexistent/m.gguf\n"


def test_a_budget_too_small_for_a_reply_is_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--character", REX, "--max-tokens", "50", "--say", "hi", "--model", "/x.gguf"]) == 1
    err = capsys.readouterr().err
    assert "max_tokens=50 is too small" in err or "not installed" in err or "not found" in err
    assert main(["chat", "--character", REX, "--max-tokens", "0", "--say", "hi"]) == 1
    assert "--max-tokens must be 1 or more" in capsys.readouterr().err
