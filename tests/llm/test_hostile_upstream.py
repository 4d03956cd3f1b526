"""``charfmt chat --endpoint`` (and ``charfmt serve``'s upstream) against a scripted hostile server on 127.0.0.1.

Every class of malformation a broken or malicious OpenAI-compatible server can send —
malformed SSE shapes, deep JSON, bad status lines and headers, huge and newline-free
bodies, broken chunking, endless streams (fast and slow), silence — ends with one
``charfmt: error:`` line (exit 1, as the README says) or a clean reply, within a wall
bound. The ``long`` variants run each in a child process and measure its peak memory.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from conftest import ROOT

from charfmt.cli import main

pytest.importorskip("httpx", reason="chat --endpoint needs httpx (pip install 'charfmt[http]')")

REX = str(ROOT / "examples" / "characters" / "rex.toml")
REPLY = json.dumps({"chats": [{"type": "C", "order": 1, "body": "<emo>joy</emo>\n<msg>Forty bolts. Deal?</msg>"}]})
WALL = 20.0
"""Seconds any scenario may take, in this process or a child."""
PEAK_MB = 300
"""Peak resident memory of the chat process, at most."""

Script = Callable[[socket.socket], None]

SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"


def chunk(text: str) -> bytes:
    return json.dumps({"choices": [{"delta": {"content": text}, "finish_reason": None}]}).encode()


def event(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


def reply_events(text: str = REPLY) -> bytes:
    body = b"".join(event(chunk(text[i : i + 4])) for i in range(0, len(text), 4))
    return body + event(b'{"choices": [{"delta": {}, "finish_reason": "stop"}]}') + event(b"[DONE]")


HALF_REPLY = b"".join(event(chunk(REPLY[i : i + 4])) for i in range(0, len(REPLY) // 2, 4))
"""The first half of the reply's events, whole: no finish reason, no ``[DONE]``."""

_ESCAPED = json.dumps(REPLY.replace("bolts.", "bolts\U0001f600"))[1:-1]  # the emoji as \\ud83d\\ude00
_HIGH, _LOW = _ESCAPED.split("\\ude00")
SPLIT_EMOJI = b"".join([
    event(b'{"choices": [{"delta": {"content": "%s"}}]}' % _HIGH.encode()),
    event(b'{"choices": [{"delta": {"content": "\\ude00%s"}, "finish_reason": "stop"}]}' % _LOW.encode()),
    event(b"[DONE]"),
])  # fmt: skip
"""A reply whose emoji comes as two events: its high half escaped ends one, its low half is the last one's."""
PAUSE = b""
"""A part of ``send`` that is a pause (50 ms): what follows comes in a later packet, after the headers are read."""


def send(*parts: bytes) -> Script:
    def script(conn: socket.socket) -> None:
        for part in parts:
            if part is PAUSE:
                time.sleep(0.05)
            conn.sendall(part)

    return script


def forever(head: bytes, each: bytes, pause: float = 0.0) -> Script:
    def script(conn: socket.socket) -> None:
        conn.sendall(head)
        end = time.monotonic() + WALL * 2  # the server gives up too, well after the client must have
        while time.monotonic() < end:
            conn.sendall(each)
            if pause:
                time.sleep(pause)

    return script


def big(head: bytes, size: int, fill: bytes = b"x", lead: bytes = b"") -> Script:
    block = fill * max(1, (1 << 16) // len(fill))  # about 64 KiB, sent again and again

    def script(conn: socket.socket) -> None:
        conn.sendall(head + lead)
        for _ in range(size // len(block)):
            conn.sendall(block)

    return script


def silence(conn: socket.socket) -> None:
    conn.settimeout(WALL * 2)
    conn.recv(1)  # until the client hangs up


def headers_then_silence(conn: socket.socket) -> None:
    conn.sendall(SSE + event(chunk("{")))
    silence(conn)


def chunked(*pieces: bytes) -> Script:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return send(head, *pieces)


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


@dataclass(frozen=True)
class Case:
    script: Script
    status: int
    says: str
    """A fragment of the error line (exit 1) or of the reply shown (exit 0)."""
    args: tuple[str, ...] = ()
    heavy: bool = False
    reply: str = REPLY
    """What a clean case's server sends as the reply's text (its deltas joined)."""


E = 1  # the README's exit status for a failed request: invalid input, one error line
CASES: dict[str, Case] = {
    # a clean reply, streamed and whole: the scripted server itself works
    "clean stream": Case(send(SSE, reply_events()), 0, "Rex: Forty bolts. Deal?"),
    "clean completion": Case(
        send(JSON_HEAD, json.dumps({"choices": [{"message": {"content": REPLY}, "finish_reason": "stop"}]}).encode()),
        0,
        "Rex: Forty bolts. Deal?",
    ),
    "crlf lines": Case(send(SSE, reply_events().replace(b"\n", b"\r\n")), 0, "Rex: Forty bolts. Deal?"),
    # malformed SSE shapes
    "choices[0] a number": Case(send(SSE, event(b'{"choices": [5]}')), E, "not an OpenAI chat completion stream"),
    "delta a string": Case(send(SSE, event(b'{"choices": [{"delta": "hi"}]}')), E, "delta is not an object"),
    "content a number": Case(send(SSE, event(b'{"choices": [{"delta": {"content": 5}}]}')), E, "content is not text"),
    "choices a string": Case(send(SSE, event(b'{"choices": "x"}')), E, "not an OpenAI chat completion stream"),
    "event an array": Case(send(SSE, event(b"[1, 2]")), E, "not an OpenAI chat completion stream"),
    "event not JSON": Case(send(SSE, event(b"{nope")), E, "not an OpenAI chat completion stream"),
    "NaN content": Case(send(SSE, event(b'{"choices": [{"delta": {"content": NaN}}]}')), E, "NaN is not JSON"),
    "4301-digit index": Case(
        send(SSE, event(b'{"choices": [{"index": ' + b"9" * 4301 + b', "delta": {"content": "a"}}]}')),
        E,
        "not an OpenAI chat completion stream",
    ),
    "error event": Case(send(SSE, event(b'{"error": {"message": "boom"}}')), E, "error in the stream: boom"),
    "not SSE": Case(send(SSE, b"hello\n\n"), E, "not an OpenAI-compatible chat completion (text/event-stream)"),
    "html page": Case(send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>502</html>\n"), E, "(text/html)"),
    "empty body": Case(send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), E, "answer was empty"),
    "only comments": Case(send(SSE, b": ping\n\n: ping\n\n"), E, "ended before its first event"),
    "completion content a list": Case(
        send(JSON_HEAD, b'{"choices": [{"message": {"content": [1]}}]}'), E, "content is not text"
    ),
    "completion choices[0] a number": Case(send(JSON_HEAD, b'{"choices": [1]}'), E, "not an OpenAI chat completion"),
    # deep JSON
    "deep SSE event": Case(send(SSE, event(deep(100_000))), E, "nested deeper than 64"),
    "deep body": Case(send(JSON_HEAD, b'{"choices": ' + deep(100_000) + b"}"), E, "nested deeper than 64"),
    "deep error body": Case(
        send(b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\n\r\n", b'{"error": ' + deep(100_000) + b"}"),
        E,
        "HTTP 500",
    ),
    "error body NaN message": Case(
        send(b"HTTP/1.1 400 Bad\r\nContent-Type: application/json\r\n\r\n", b'{"error": {"message": NaN}}'),
        E,
        "HTTP 400",
    ),
    "error message with controls": Case(
        send(b"HTTP/1.1 400 Bad\r\n\r\n", b'{"error": {"message": "x\\u001b[2J\\u009b31m\\u202eevil"}}'),
        E,
        "HTTP 400: x\\x1b[2J\\x9b31m\\u202eevil",
    ),
    # status line and headers
    "bad status line": Case(send(b"HTTP/1.1 abc\r\n\r\n"), E, "broke the HTTP protocol"),
    "not HTTP": Case(send(b"garbage garbage\r\n\r\n"), E, "broke the HTTP protocol"),
    "closed at once": Case(send(b""), E, "broke the HTTP protocol"),
    "150 headers": Case(
        send(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n" + reply_events()),
        E,
        "150 headers (at most 100)",
    ),
    "64 KB header line": Case(
        send(b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * 65_536 + b"\r\n\r\n" + reply_events()), E, "header line of 65,"
    ),
    "1 MB of headers": Case(
        send(b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"y" * (1 << 20) + b"\r\n\r\n"), E, "broke the HTTP protocol"
    ),
    "401, no key sent": Case(
        send(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n\r\n", b'{"error": {"message": "no"}}'),
        E,
        "HTTP 401: charfmt sent no API key (--api-key-env names the variable that holds it): no",
    ),
    "redirect": Case(
        send(b"HTTP/1.1 302 Found\r\nLocation: http://example.com/\r\nContent-Length: 0\r\n\r\n"), E, "302"
    ),
    "gzip body": Case(
        send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\r\n", b"\x1f\x8b"),
        E,
        "'gzip'-encoded body",
    ),
    # broken transfers: never an empty reply
    "cut inside a data line (HTTP/1.0)": Case(
        send(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", event(chunk("{")), b'data: {"choi'),
        E,
        "the stream was cut off inside an event",
    ),
    "chunk cut": Case(chunked(b"40\r\n" + event(chunk("{"))[:20]), E, "broke the HTTP protocol"),
    "bad chunk size": Case(chunked(b"zz\r\nhello\r\n"), E, "broke the HTTP protocol"),
    "bad chunk size, in a later packet": Case(chunked(PAUSE, b"zz\r\nhello\r\n"), E, "broke the HTTP protocol"),
    "chunk cut, in a later packet": Case(
        chunked(PAUSE, b"40\r\n" + event(chunk("{"))[:20]), E, "broke the HTTP protocol"
    ),
    "short content-length": Case(
        send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 5000\r\n\r\n", reply_events()[:300]
        ),
        E,
        "broke the HTTP protocol",
    ),
    # an emoji sent as its two UTF-16 halves, escaped, in two events (the JSON is valid; each half is no character)
    "an emoji split into two escaped halves": Case(
        send(SSE, SPLIT_EMOJI), 0, "Rex: Forty bolts\U0001f600 Deal?", reply=REPLY.replace("bolts.", "bolts\U0001f600")
    ),
    # a body that simply ends, whole in its framing, before the reply does: a half reply is no answer
    "ends without finishing (connection closed)": Case(
        send(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", HALF_REPLY),
        E,
        "the stream ended before the reply did (no finish_reason, no [DONE])",
    ),
    "ends without finishing (chunked end)": Case(
        chunked(b"%x\r\n" % len(HALF_REPLY) + HALF_REPLY + b"\r\n0\r\n\r\n"),
        E,
        "the stream ended before the reply did (no finish_reason, no [DONE])",
    ),
    "a finish reason, no [DONE]": Case(
        send(SSE, reply_events().removesuffix(event(b"[DONE]"))), 0, "Rex: Forty bolts. Deal?"
    ),
    # huge bodies and lines
    "50 MB without a newline (SSE)": Case(big(SSE, 50 << 20, lead=b"data: "), E, "longer than 4,194,304 bytes"),
    "50 MB without a newline (JSON)": Case(
        big(JSON_HEAD, 50 << 20, lead=b'{"choices": "'), E, "longer than 16,777,216 bytes", heavy=True
    ),
    "50 MB streamed reply": Case(
        big(SSE, 50 << 20, fill=event(chunk("word "))), E, "more than the 2048 tokens asked for", heavy=True
    ),
    "50 MB of blank lines": Case(big(SSE, 50 << 20, fill=b"\n"), E, "past 17,408 lines", heavy=True),
    # endless, fast and slow, and silence
    "endless tokens": Case(forever(SSE, event(chunk("bla "))), E, "more than the 64 tokens", ("--max-tokens", "64")),
    "endless speech": Case(  # speech shown as it comes, then the error: on a line of its own
        forever(SSE + event(chunk('{"chats": [{"type": "C", "order": 1, "body": "<msg>')), event(chunk("la "))),
        E,
        "more than the 64 tokens",
        ("--max-tokens", "64"),
    ),
    "endless long tokens": Case(
        forever(SSE, event(chunk("x" * 4096))), E, "more than the 64 tokens", ("--max-tokens", "64")
    ),
    "endless empty deltas": Case(
        forever(SSE, event(b'{"choices": [{"delta": {}}]}')), E, "past 1,536 lines", ("--max-tokens", "64")
    ),
    "endless comments": Case(forever(SSE, b": ping\n"), E, "past 1,536 lines", ("--max-tokens", "64")),
    "endless slow": Case(
        forever(SSE, event(chunk("bla ")), pause=0.1), E, "more than the 5 tokens", ("--max-tokens", "5")
    ),
    "comments for ever, slowly": Case(  # bytes keep coming, no event: silence all the same
        forever(SSE + event(chunk("{")), b": ping\n\n", pause=0.1), E, "sent no event for 0.5 s (only comments)",
        ("--timeout", "0.5"),
    ),
    "an event for ever, slowly": Case(
        forever(SSE + event(chunk("{")) + b"data: ", b" ", pause=0.1), E, "sent no whole event for 0.5 s",
        ("--timeout", "0.5"),
    ),
    "silence": Case(silence, E, "sent nothing for 0.5 s", ("--timeout", "0.5")),
    "silence after the headers": Case(headers_then_silence, E, "sent nothing for 0.5 s", ("--timeout", "0.5")),
}


def _request(conn: socket.socket) -> bytes:
    """Read the client's request (headers and a Content-Length body) before answering; its body."""
    conn.settimeout(WALL)
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return b""
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        more = conn.recv(65536)
        if not more:
            return body
        body += more
    return body


REQUESTS: list[bytes] = []
"""The bodies of the requests the servers of the running test got, in order."""


@pytest.fixture
def upstream() -> Iterator[Callable[[Script], str]]:
    """Start a one-script server on 127.0.0.1; the URL is returned."""
    servers: list[socket.socket] = []
    REQUESTS.clear()

    def start(script: Script) -> str:
        sock = socket.create_server(("127.0.0.1", 0))
        servers.append(sock)

        def serve() -> None:
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        def handle(conn: socket.socket) -> None:
            with conn:
                try:
                    REQUESTS.append(_request(conn))
                    script(conn)
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the client hung up: what a bounded client does

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"

    yield start
    for sock in servers:
        sock.close()


def _args(url: str, case: Case) -> list[str]:
    free = [] if case.status == 0 else ["--free"]  # --free: no grammar, so any --max-tokens fits
    return ["chat", "--character", REX, "--endpoint", url, *free, *case.args, "--say", "hi"]


def _check(case: Case, status: int, out: str, err: str, seconds: float) -> None:
    assert seconds < WALL, f"took {seconds:.1f} s"
    assert status == case.status, err
    if case.status == 0:
        assert err == "" and case.says in out
    else:
        assert err.startswith("charfmt: error: ") and err.count("\n") == 1, err[:2000]
        assert case.says in err, err[:2000]
        assert "Traceback" not in err and "says nothing" not in out
        assert out == "" or out.endswith("\n"), out[-200:]  # what was shown ended: the error line on its own


LIGHT = [name for name, case in CASES.items() if not case.heavy]


@pytest.mark.parametrize("name", LIGHT)
def test_each_malformation_is_one_error_line_or_a_clean_reply(
    name: str, upstream: Callable[[Script], str], capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[name]
    url = upstream(case.script)
    start = time.monotonic()
    status = main(_args(url, case))
    seconds = time.monotonic() - start
    captured = capsys.readouterr()
    _check(case, status, captured.out, captured.err, seconds)


_PEAK: Final = (
    "import os, sys\n"
    "from charfmt.cli import main\n"
    "try:\n"
    "    status = main(sys.argv[1:])\n"
    "finally:\n"
    "    with open('/proc/self/status') as f:\n"
    "        peak = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
    "    with open(os.environ['CHARFMT_TEST_PEAK'], 'w') as f:\n"
    "        f.write(peak)\n"
    "sys.exit(status)\n"
)
"""The chat process, writing its peak resident memory (VmHWM, this process's own, in kB) at exit."""


def _child(args: list[str], tmp_path: Path) -> tuple[int, str, str, float, float]:
    """Run ``charfmt ARGS`` in a child process: status, stdout, stderr, seconds, peak memory in MB."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("peak memory is read from /proc/self/status (Linux)")
    peak_file = tmp_path / "peak"
    env = {**os.environ, "CHARFMT_TEST_PEAK": str(peak_file)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, timeout=WALL * 2, check=False, env=env
    )
    seconds = time.monotonic() - start
    return done.returncode, done.stdout, done.stderr, seconds, int(peak_file.read_text()) / 1024


def test_a_50_mb_body_without_a_newline_keeps_memory_flat(upstream: Callable[[Script], str], tmp_path: Path) -> None:
    case = CASES["50 MB without a newline (SSE)"]
    status, out, err, seconds, peak = _child(_args(upstream(case.script), case), tmp_path)
    _check(case, status, out, err, seconds)
    assert peak < PEAK_MB, f"peak {peak:.0f} MB"


@pytest.mark.long
@pytest.mark.parametrize("name", list(CASES))
def test_each_malformation_in_a_child_process_within_the_memory_bound(
    name: str, upstream: Callable[[Script], str], tmp_path: Path
) -> None:
    case = CASES[name]
    status, out, err, seconds, peak = _child(_args(upstream(case.script), case), tmp_path)
    _check(case, status, out, err, seconds)
    assert peak < PEAK_MB, f"peak {peak:.0f} MB"
    print(f"{name}: exit {status} in {seconds:.2f} s, peak {peak:.0f} MB")


SERVE_SAYS: Final = {
    "html page": "answered with an HTML page",  # serve refuses an HTML page by its type, before reading it
    # chat's terminal view escapes the controls; serve's JSON answer escapes them itself
    "error message with controls": "HTTP 400: x\x1b[2J\x9b31m\u202eevil",
    "401, no key sent": "HTTP 401: charfmt sent no API key (set --api-key-env): no",  # (serve's own flag)
}
"""Where serve's message says it otherwise than ``chat``'s error line."""


@pytest.mark.parametrize("name", LIGHT)
def test_serve_reads_each_malformation_as_chat_does(name: str, upstream: Callable[[Script], str]) -> None:
    """serve's upstream reads through the same readers (one event assembly): the same reply or the same error."""
    pytest.importorskip("starlette")
    import asyncio

    from charfmt.llm._replies import endpoint_url
    from charfmt.serve.upstreams import UpstreamFailure
    from charfmt.serve.upstreams.openai import HTTPUpstream

    case = CASES[name]
    flags = dict(zip(case.args[::2], case.args[1::2], strict=True))
    url = endpoint_url(upstream(case.script))
    client = HTTPUpstream(url, timeout=float(flags.get("--timeout", 120)))

    async def reply() -> str:
        try:
            deltas = client.chat({"messages": []}, max_tokens=int(flags.get("--max-tokens", 2048)))
            return "".join([delta.text async for delta in deltas])
        finally:
            await client.aclose()

    start = time.monotonic()
    if case.status == 0:
        assert asyncio.run(reply()) == case.reply
    else:
        with pytest.raises(UpstreamFailure) as failed:
            asyncio.run(reply())
        message = str(failed.value)
        assert message.startswith("the upstream: ") and "\n" not in message and url not in message
        assert SERVE_SAYS.get(name, case.says) in message, message
    assert time.monotonic() - start < WALL


def test_serve_says_a_connection_reset_mid_reply_once_and_logs_no_stray_error(
    upstream: Callable[[Script], str], caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream resets the connection (RST) half-way: one error; asyncio logs no error never retrieved."""
    pytest.importorskip("starlette")
    import asyncio
    import gc
    import struct

    from charfmt.llm._replies import endpoint_url
    from charfmt.serve.upstreams import UpstreamFailure
    from charfmt.serve.upstreams.openai import HTTPUpstream

    def reset(conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        conn.sendall(head + b"%x\r\n" % len(HALF_REPLY) + HALF_REPLY + b"\r\n")
        time.sleep(0.05)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset (RST), mid-body

    url = endpoint_url(upstream(reset))

    async def main() -> list[str]:
        client = HTTPUpstream(url, timeout=5)
        errors = []
        for _ in range(3):
            try:
                async for _delta in client.chat({"messages": []}, max_tokens=300):
                    pass
            except UpstreamFailure as e:
                errors.append(str(e))
        await client.aclose()
        gc.collect()
        await asyncio.sleep(0.05)
        return errors

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        errors = asyncio.run(main())
        gc.collect()
    assert errors == ["the upstream: the connection was reset before the reply ended"] * 3
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_serve_ends_the_reply_at_done_whatever_follows(upstream: Callable[[Script], str]) -> None:
    """After ``[DONE]`` the reply is whole at once; what the upstream sends after it is read within bounds, then cut."""
    pytest.importorskip("starlette")
    import asyncio

    from charfmt.llm._replies import endpoint_url
    from charfmt.serve.upstreams.openai import DRAIN_SECONDS, HTTPUpstream

    client = HTTPUpstream(endpoint_url(upstream(forever(SSE + reply_events(), b": more after the end\n"))))

    async def run() -> tuple[str, float, float]:
        start = time.monotonic()
        text = "".join([delta.text async for delta in client.chat({"messages": []}, max_tokens=64)])
        ended = time.monotonic() - start
        await client.aclose()  # waits for the connection after the reply to be closed
        return text, ended, time.monotonic() - start

    text, ended, closed = asyncio.run(run())
    assert text == REPLY and ended < 1.0 and closed < DRAIN_SECONDS + 2


def test_missing_httpx_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['httpx'] = None\nfrom charfmt.cli import main\n"
        f"sys.exit(main(['chat', '--character', {REX!r}, '--endpoint', 'http://127.0.0.1:9/v1', '--say', 'hi']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert done.returncode == 1
    assert done.stderr.startswith("charfmt: error: --endpoint needs httpx") and "charfmt[http]" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_chat_shows_the_models_control_and_bidi_characters_escaped(
    upstream: Callable[[Script], str], capsys: pytest.CaptureFixture[str]
) -> None:
    body = "<emo>joy</emo>\n<msg>Deal\u009b2J \u202eevil</msg>"
    text = json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]}, ensure_ascii=False)
    url = upstream(send(SSE, reply_events(text)))
    assert main(["chat", "--character", REX, "--endpoint", url, "--say", "hi"]) == 0
    out = capsys.readouterr().out
    assert "\u009b" not in out and "\u202e" not in out
    assert "Rex: Deal\\x9b2J \\u202eevil" in out


def _events_of(*deltas: dict[str, object], reason: str) -> bytes:
    body = b"".join(event(json.dumps({"choices": [{"delta": d, "finish_reason": None}]}).encode()) for d in deltas)
    return body + event(json.dumps({"choices": [{"delta": {}, "finish_reason": reason}]}).encode()) + event(b"[DONE]")


_CALL = {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "lookup", "arguments": ""}}]}
_ARGS = {"tool_calls": [{"index": 0, "function": {"arguments": '{"q": 1}'}}]}
_COMPLETION_CALL = {"role": "assistant", "content": None, "tool_calls": [{**_CALL["tool_calls"][0], "index": None}]}


@pytest.mark.parametrize(
    ("script", "says"),
    [
        (send(SSE, _events_of({"refusal": "I can"}, {"refusal": "not help."}, reason="stop")),
         'CF821: the model refused to answer: "I cannot help."'),
        (send(SSE, _events_of(_CALL, _ARGS, reason="tool_calls")), 'CF822: the model called the tool "lookup"'),
        (send(JSON_HEAD, json.dumps({"choices": [{"message": {"content": None, "refusal": "No."},
                                                   "finish_reason": "stop"}]}).encode()),
         'CF821: the model refused to answer: "No."'),
        (send(JSON_HEAD, json.dumps({"choices": [{"message": _COMPLETION_CALL,
                                                   "finish_reason": "tool_calls"}]}).encode()),
         'CF822: the model called the tool "lookup"'),
    ],
    ids=["streamed refusal", "streamed tool call", "completion refusal", "completion tool call"],
)  # fmt: skip
def test_a_refusal_or_tool_call_is_reported_as_iter_events_does(
    upstream: Callable[[Script], str], capsys: pytest.CaptureFixture[str], script: Script, says: str
) -> None:
    import charfmt

    url = upstream(script)
    assert main(["chat", "--character", REX, "--endpoint", url, "--free", "--say", "hi"]) == 0
    out = capsys.readouterr().out
    assert says in out, out
    assert out.count("CF822") <= 1  # the call is named once, not once per argument chunk
    code = says.partition(":")[0]
    # the same chunks through iter_events give the same diagnostic
    conn_chunks = [json.loads(line[6:]) for line in _sse_lines(script) if line.startswith("data: {")]
    events = list(charfmt.iter_events(conn_chunks))
    assert any(e.kind == "diagnostic" and e.diagnostic.code == code for e in events)


def _sse_lines(script: Script) -> list[str]:
    """What ``script`` sends, its body's lines (a whole completion is one ``data:`` line here)."""
    a, b = socket.socketpair()
    with a, b:
        script(a)
        a.shutdown(socket.SHUT_WR)
        data = b""
        while more := b.recv(1 << 16):
            data += more
    body = data.partition(b"\r\n\r\n")[2].decode()
    return body.splitlines() if body.startswith("data:") else ["data: " + body]


def in_turn(*scripts: Script) -> Script:
    """Each request answered by the next script (the last one again once all were used)."""
    left = list(scripts)

    def script(conn: socket.socket) -> None:
        (left.pop(0) if len(left) > 1 else left[0])(conn)

    return script


_OOM = b'{"error": "out of memory"}'
# the script closes the connection after each answer: say so, or the client may reuse it for the next turn
ERROR_500 = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
) % (
    len(_OOM),
    _OOM,
)


def test_an_http_error_in_a_chat_is_one_line_and_the_chat_goes_on(
    upstream: Callable[[Script], str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    url = upstream(in_turn(send(ERROR_500), send(SSE, reply_events())))
    monkeypatch.setattr(sys, "stdin", io.StringIO("first\nsecond\n"))
    assert main(["chat", "--character", REX, "--endpoint", url, "--free", "--timeout", "5"]) == 1
    out, err = capsys.readouterr()
    assert "Forty bolts. Deal?" in out  # the second turn was answered
    assert err.count("\n") == 1 and err.startswith("charfmt: error: ") and "HTTP 500: out of memory" in err
    second = json.loads(REQUESTS[1])["messages"]
    assert "first" not in json.dumps(second) and "second" in json.dumps(second)  # the failed turn is not history
    REQUESTS.clear()
    url = upstream(in_turn(send(ERROR_500), send(SSE, reply_events())))
    assert main(["chat", "--character", REX, "--endpoint", url, "--free", "--say", "a", "--say", "b"]) == 1
    assert "Forty bolts. Deal?" in capsys.readouterr().out
    url = upstream(send(ERROR_500))
    assert main(["chat", "--character", REX, "--endpoint", url, "--free", "--say", "only"]) == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "HTTP 500" in err and "chat goes on" not in err


@pytest.mark.parametrize("whole", [False, True], ids=["stream", "completion"])
def test_invalid_utf8_from_the_server_is_a_diagnostic_never_silent(
    upstream: Callable[[Script], str], capsys: pytest.CaptureFixture[str], whole: bool
) -> None:
    if whole:
        body = b'{"choices": [{"message": {"content": ' + json.dumps(REPLY).encode().replace(b"Forty", b"F\xf6rty")
        script = send(JSON_HEAD, body + b'}, "finish_reason": "stop"}]}')
    else:
        piece = json.dumps({"choices": [{"delta": {"content": REPLY}, "finish_reason": None}]}).encode()
        script = send(SSE, event(piece.replace(b"Forty", b"F\xf6rty")), event(b"[DONE]"))
    url = upstream(script)
    assert main(["chat", "--character", REX, "--endpoint", url, "--free", "--say", "hi"]) == 0
    out = capsys.readouterr().out
    assert "F\ufffdrty" in out and "CF961: the server sent invalid UTF-8" in out and "\\xf6" in out
