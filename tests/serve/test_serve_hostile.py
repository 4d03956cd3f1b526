"""A hostile client against a real ``charfmt serve`` process: huge and slow requests, too many connections, HTTP/1.0.

Each server runs as the CLI runs it (a subprocess on 127.0.0.1, in front of a scripted upstream), with each of
uvicorn's HTTP parsers: the transport guard's bounds must hold whichever parses. Memory is the server's own,
read from ``/proc/PID/status`` (``VmHWM``, the peak resident size, started again before each attack). The
quick checks run with short deadlines; the attacks at full size (a 256 MB header line, 100 connections at a
byte a second) are behind the ``long`` marker.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, TESTS

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("aiohttp")

sys.path.insert(0, str(Path(__file__).parents[1]))
import contextlib

from scripted_upstream import Scripted, loopback
from serve_process import Served, raw, read_all, served, status_of

PARSERS = ("httptools", "h11")
QUICK = ("--header-timeout", "1", "--body-timeout", "1.5", "--keep-alive", "1", "--max-connections", "60")
"""Short deadlines: the quick checks see each bound at work within seconds."""

CASES = tomllib.loads((TESTS / "serve_hostile_requests.toml").read_text(encoding="utf-8"))["case"]

if not Path("/proc/self/status").exists():
    pytest.skip("the server's memory is read from /proc (Linux)", allow_module_level=True)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base + "/v1"


@pytest.fixture(scope="module", params=PARSERS)
def quick(request: pytest.FixtureRequest, upstream: tuple[Scripted, str]) -> Iterator[Served]:
    """A server with short deadlines, one per HTTP parser."""
    with served(upstream[1], "--http", request.param, *QUICK) as server:
        yield server


def _request(case: dict[str, Any]) -> bytes:
    fill = case.get("fill_with", "a") * case.get("fill", 0)
    lines = case.get("line", "").replace("{FILL}", fill) * case.get("times", 0)
    return case["request"].replace("{LINES}", lines).replace("{FILL}", fill).encode()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_hostile_request_gets_its_status(case: dict[str, Any], quick: Served) -> None:
    """The table's requests, each answered with its status (OpenAI-shaped JSON) and the words that say why."""
    answer = raw(quick.port, _request(case))
    assert status_of(answer) == case["status"], answer[:300]
    body = answer.partition(b"\r\n\r\n")[2].decode()
    assert case["says"] in body, body[:300]
    if case["status"] >= 400:
        assert json.loads(body)["error"]["code"] == case["status"]


def test_a_huge_header_line_is_refused_before_the_parser_holds_it(quick: Served) -> None:
    """32 MB in one header line: a 431 as soon as the line passes its limit, the server's peak memory flat."""
    _huge_header(quick, 32 << 20)


def _huge_header(server: Served, size: int) -> float:
    """Send a ``size``-byte header line; the 431 read back; the server's peak memory growth (MB) returned."""
    before = server.status("VmRSS")
    server.reset_peak()
    answer = bytearray()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        reader = threading.Thread(target=lambda: answer.extend(read_all(s)), daemon=True)
        reader.start()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nX-Huge: ")
        piece = b"a" * (1 << 20)
        try:
            for _ in range(size >> 20):
                s.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed while still sending: what a server should do
        reader.join(30)
    grown = (server.status("VmHWM") - before) / 1024
    assert status_of(bytes(answer)) == 431, bytes(answer[:200])
    assert grown < 50, f"the server's peak memory grew by {grown:.0f} MB"
    return grown


def _trickle(port: int, head: bytes, then: bytes, interval: float, limit: float) -> tuple[float, bytes]:
    """Send ``head`` at once, then ``then`` a byte every ``interval`` s; when the server cut it (s) and what it said."""
    start = time.monotonic()
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as s:
        s.sendall(head)
        s.settimeout(interval)
        for byte in then * 1000:
            try:
                s.send(bytes([byte]))
                chunk = s.recv(4096)
            except TimeoutError:
                if time.monotonic() - start > limit:
                    return float("inf"), got
                continue
            except OSError:
                break
            got += chunk
            break  # (answered, or closed: cut)
        else:
            return float("inf"), got
        s.settimeout(2)
        with contextlib.suppress(OSError):
            got += read_all(s)
    return time.monotonic() - start, got


def _slow_clients(port: int, count: int, interval: float, limit: float) -> list[tuple[str, float, bytes]]:
    """``count`` clients trickling a head and ``count`` trickling a body, at once: (which, when cut, what said)."""
    body_head = (b"POST /v1/turn HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000\r\n\r\n")  # fmt: skip
    kinds = {"head": (b"POST /v1/turn HTTP/1.1\r\n", b"X-Slow: aaaaaaaa\r\n"), "body": (body_head, b'{"say":"a')}
    results: list[tuple[str, float, bytes]] = []
    threads = []
    for kind, (head, then) in kinds.items():
        for _ in range(count):

            def run(kind: str = kind, head: bytes = head, then: bytes = then) -> None:
                results.append((kind, *_trickle(port, head, then, interval, limit)))

            threads.append(threading.Thread(target=run, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(limit + 10)
    return results


def test_slow_clients_are_cut_and_others_still_answered(quick: Served) -> None:
    """20 clients trickling a head and 20 a body, a byte every 0.2 s: each cut (408) at its deadline, while a
    client that sends its request whole is answered meanwhile."""
    results: list[tuple[str, float, bytes]] = []
    attack = threading.Thread(target=lambda: results.extend(_slow_clients(quick.port, 20, 0.2, 15)))
    attack.start()
    time.sleep(0.3)
    answer = raw(quick.port, b"GET /v1/info HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    attack.join(30)
    assert status_of(answer) == 200
    assert len(results) == 40
    for kind, cut, said in results:
        deadline = 1.0 if kind == "head" else 1.5
        assert deadline - 0.1 < cut < deadline + 3, (kind, cut)
        assert status_of(said) == 408 and f"request's {kind} did not arrive".encode() in said, said[:200]


def test_connections_beyond_the_cap_get_503(upstream: tuple[Scripted, str]) -> None:
    """--max-connections 5: a sixth connection is answered 503 with Retry-After; once they close, all is well."""
    with served(upstream[1], "--max-connections", "5") as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(5)]
        try:
            time.sleep(0.2)
            answer = raw(server.port, b"GET /v1/info HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert status_of(answer) == 503 and b"retry-after: 1" in answer.lower(), answer[:300]
            assert b"--max-connections" in answer
        finally:
            for s in held:
                s.close()
        time.sleep(0.3)
        answer = raw(server.port, b"GET /v1/info HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        assert status_of(answer) == 200


def test_an_idle_connection_is_closed_after_keep_alive(quick: Served) -> None:
    """After its answer, a connection that sends nothing more is closed --keep-alive (1 s) later; a silent new
    connection at its head's deadline, without an answer (nothing was asked)."""
    with socket.create_connection(("127.0.0.1", quick.port), timeout=10) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
        start = time.monotonic()
        got = read_all(s)
        waited = time.monotonic() - start
    assert status_of(got) == 200 and 0.9 < waited < 3, waited
    with socket.create_connection(("127.0.0.1", quick.port), timeout=10) as s:
        start = time.monotonic()
        got = read_all(s)
        waited = time.monotonic() - start
    assert got == b"" and 0.9 < waited < 3, (got, waited)


def test_requests_in_a_row_and_continue_pass_the_guard(quick: Served) -> None:
    """Two requests in one write are both answered; a body sent after ``100 Continue`` is read."""
    two = b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\nGET /v1/info HTTP/1.1\r\nHost: localhost\r\n\r\n"
    answers = raw(quick.port, two)
    assert answers.count(b"HTTP/1.1 200 OK") == 2 and b'"object":"list"' in answers and b'"emotions"' in answers
    body = b'{"say":"hi"}'
    with socket.create_connection(("127.0.0.1", quick.port), timeout=10) as s:
        s.sendall(b"POST /v1/turn HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body))  # fmt: skip
        assert s.recv(1024).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        got = read_all(s)
    assert status_of(got) == 200 and b'"kind":"reply"' in got


@pytest.mark.parametrize(
    ("path", "body", "last"),
    [
        ("/v1/turn", {"say": "hi"}, b'"kind":"reply"'),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}, b"[DONE]"),
    ],
)
def test_an_http_1_0_client_gets_its_stream_without_chunks(path: str, body: dict[str, Any], last: bytes,
                                                          quick: Served) -> None:  # fmt: skip
    """HTTP/1.0 has no chunked framing: the streamed answer is the events as they are, ended by the close."""
    data = json.dumps(body).encode()
    request = (f"POST {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
               .encode() + data)  # fmt: skip
    answer = raw(quick.port, request)
    head, _, stream = answer.partition(b"\r\n\r\n")
    assert status_of(answer) == 200 and b"transfer-encoding" not in head.lower(), head
    assert b"connection: close" in head.lower()
    events = [e for e in stream.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events), stream[:300]  # (no chunk-size line among them)
    assert last in events[-1]


def test_a_websocket_turn_passes_the_guard_and_a_rebinding_handshake_is_refused(quick: Served) -> None:
    """The WebSocket (the connection handed to another protocol behind the guard) works; with a foreign Host
    it is refused (421) even where its Origin agrees."""
    ws_client = pytest.importorskip("websockets.sync.client")
    url = f"ws://127.0.0.1:{quick.port}/v1/turn/ws"
    with ws_client.connect(url, open_timeout=10) as ws:
        ws.send(json.dumps({"say": "hi"}))
        kinds = [json.loads(ws.recv(timeout=10))["kind"]]
        while kinds[-1] not in ("reply", "error"):
            kinds.append(json.loads(ws.recv(timeout=10))["kind"])
    assert kinds[-1] == "reply"
    handshake = (b"GET /v1/turn/ws HTTP/1.1\r\nHost: rebind.evil.example\r\nOrigin: http://rebind.evil.example\r\n"
                 b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")  # fmt: skip
    answer = raw(quick.port, handshake)
    assert status_of(answer) == 421 and b"DNS rebinding" in answer, answer[:300]


# --- the attacks at full size ----------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize("parser", PARSERS)
def test_a_256_mb_header_line_leaves_the_servers_memory_flat(parser: str, upstream: tuple[Scripted, str]) -> None:
    """The issue's attack: 256 MB in one header line. Refused (431), the server's peak RSS grows < 50 MB."""
    with served(upstream[1], "--http", parser) as server:
        _huge_header(server, 256 << 20)
        answer = raw(server.port, b"GET /v1/info HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        assert status_of(answer) == 200


@pytest.mark.long
@pytest.mark.parametrize("parser", PARSERS)
def test_100_slow_connections_are_all_cut_within_30_s(parser: str, upstream: tuple[Scripted, str]) -> None:
    """The issue's attack with the default deadlines: 100 connections trickling a head and 100 a body at a byte
    a second. Every one is cut within 30 s (heads at 10 s, bodies 15 s after their head), with a 408."""
    with served(upstream[1], "--http", parser) as server:
        results = _slow_clients(server.port, 100, 1.0, 30)
    assert len(results) == 200
    late = [(kind, cut) for kind, cut, _ in results if cut >= 30]
    assert not late, late[:5]
    assert all(status_of(said) == 408 for _, _, said in results)


@pytest.mark.long
def test_a_client_that_reads_nothing_is_dropped(upstream: tuple[Scripted, str]) -> None:
    """A long answer (the flooding upstream) to a client that reads none of it: once the buffers are full, the
    server drops the connection after 30 s of it reading nothing (and the upstream request is closed)."""
    up = upstream[0]
    up.mode, cancelled = "flood", up.cancelled
    try:
        flags = ("--reply-format", "tags", "--n-ctx", "110000", "--max-tokens", "100000")  # (3 MB of speech)
        with served(upstream[1], *flags) as server:
            body = b'{"messages":[{"role":"user","content":"hi"}],"stream":true}'
            s = socket.create_connection(("127.0.0.1", server.port), timeout=90)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
            deadline = time.monotonic() + 90
            while "dropped: the client read nothing" not in server.console() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert "dropped: the client read nothing for 30 s" in server.console(), server.console()[-2000:]
            s.close()
            while up.cancelled == cancelled and time.monotonic() < deadline:  # the turn ended with the connection
                time.sleep(0.1)
            assert up.cancelled == cancelled + 1
    finally:
        up.mode = "ok"


def test_the_security_page_states_the_guards_defaults_and_flags() -> None:
    """docs/SECURITY.md's table of bounds says the code's defaults; each flag it names is serve's."""
    import re
    import subprocess

    from charfmt.serve.guard import Limits

    page = (ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")
    rows = {cells[0]: cells[1:] for line in page.splitlines() if line.startswith("| ") and not line.startswith("|--")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}  # fmt: skip
    d = Limits()
    said = {
        "request line": f"{d.head.request_line:,} bytes", "one header line": f"{d.head.header_line:,} bytes",
        "header lines": f"{d.head.headers}", "all header lines together": f"{d.head.head_bytes:,} bytes",
        "a request's head, from its first byte": f"{d.header_seconds:g} s",
        "a request's body, from its head": f"{d.body_seconds:g} s",
        "an idle connection, after an answer": f"{d.idle_seconds:g} s",
        "a client reading nothing of an answer": f"{d.send_seconds:g} s",
        "connections open at once": f"{d.max_connections:,}",
    }  # fmt: skip
    for row, value in said.items():
        assert rows[row][0] == value, (row, rows[row])
    usage = subprocess.run([sys.executable, "-m", "charfmt", "serve", "--help"], capture_output=True, text=True,
                           timeout=60, check=True).stdout  # fmt: skip
    flags = {f for cells in rows.values() for f in re.findall(r"`(--[a-z-]+)`", cells[1])} | {"--allow-host", "--http"}
    assert len(flags) == 7  # (the table's five, the hosts', the parser's)
    for flag in flags:
        assert flag in usage, flag
