"""The allowed hosts (DNS rebinding) and the origin checks, on every route and the WebSocket.

A page of another site that points a name of its own at 127.0.0.1 sends its requests with ``Host: its-name``
and, being same-origin to itself, an ``Origin`` that agrees: only the ``Host`` tells the server. Every door
refuses it (421) before any route, token check or CORS answer; loopback names, the address a request came in
on and ``--allow-host`` names are answered; CORS and the WebSocket's ``Origin`` check work as before.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402
from serve_process import read_all, status_of  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
T = 10.0
EVIL = "rebind.evil.example"
CHAT = {"messages": [{"role": "user", "content": "hi"}]}
HANDSHAKE = ("GET /v1/turn/ws{query} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\n"
             "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")  # fmt: skip
ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/", {}),
    ("GET", "/v1/info", {}),
    ("GET", "/v1/models", {}),
    ("POST", "/v1/chat/completions", {"json": CHAT}),
    ("POST", "/v1/chat/completions", {"json": {**CHAT, "stream": True}}),
    ("POST", "/v1/turn", {"json": {"say": "hi"}}),
    ("GET", "/v1/turn", {"params": {"say": "hi"}}),
    ("OPTIONS", "/v1/turn", {"headers": {"Access-Control-Request-Method": "POST"}}),
    ("GET", "/no/such/route", {}),
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    up = Scripted()
    with loopback(up.app) as base:
        yield base + "/v1"


def serve(upstream: str, **kw: Any) -> Any:
    return loopback(create_app(Settings(character=Character.load(REX), upstream_url=upstream, **kw)))


def handshake(port: int, host: str, origin: str, query: str = "") -> bytes:
    """A WebSocket handshake on a bare socket (a client library would not let its ``Host`` be chosen): the
    answer's head and what came with it."""
    with socket.create_connection(("127.0.0.1", port), timeout=T) as s:
        s.sendall(HANDSHAKE.format(query=query, host=host, origin=origin).encode())
        got = b""
        while b"\r\n\r\n" not in got and (chunk := s.recv(4096)):
            got += chunk
        if not got.startswith(b"HTTP/1.1 101"):
            got += read_all(s)
    return got


@pytest.mark.parametrize(("method", "path", "extra"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_every_route_refuses_a_rebinding_host(method: str, path: str, extra: dict[str, Any], upstream: str) -> None:
    """Host and Origin agreeing on the attacker's name: 421, an OpenAI-shaped error naming the host, no CORS
    header, whatever the route (a token set changes nothing: the Host is checked first, so nothing is revealed)."""
    for kw in ({"cors": (f"http://{EVIL}",)}, {"token": "s3cret"}):
        with serve(upstream, **kw) as base:
            headers = {"Host": f"{EVIL}:8000", "Origin": f"http://{EVIL}:8000", **extra.pop("headers", {})}
            r = httpx.request(method, base + path, headers=headers, timeout=T, **extra)
            extra["headers"] = {k: v for k, v in headers.items() if k not in ("Host", "Origin")}
            assert r.status_code == 421, (kw, r.text)
            error = r.json()["error"]
            assert error["code"] == 421 and f"'{EVIL}'" in error["message"] and "--allow-host" in error["message"]
            assert "access-control-allow-origin" not in r.headers


def test_a_rebinding_websocket_handshake_is_refused_and_the_origin_check_kept(upstream: str) -> None:
    """The WebSocket: a foreign Host is refused (421) though its Origin agrees; a loopback Host with a foreign
    Origin is still refused (403, as before); the server's own origin is accepted (101)."""
    with serve(upstream) as base:
        port = int(base.rsplit(":", 1)[1])
        refused = handshake(port, EVIL, f"http://{EVIL}")
        assert status_of(refused) == 421 and b"DNS rebinding" in refused, refused[:300]
        other = handshake(port, f"127.0.0.1:{port}", f"http://{EVIL}")
        assert status_of(other) == 403 and b"--cors" in other
        assert status_of(handshake(port, f"localhost:{port}", f"http://localhost:{port}")) == 101


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "LOCALHOST.", "[::1]", "127.0.0.2", "game.localhost", "localhost:1"],
)
def test_loopback_hosts_are_answered(host: str, upstream: str) -> None:
    """Any loopback name or address, any port, in any case, a trailing dot or not: answered as before."""
    with serve(upstream) as base:
        r = httpx.get(base + "/v1/info", headers={"Host": host}, timeout=T)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("allowed", "host", "status"),
    [
        (("game.lan",), "game.lan:8000", 200),
        (("game.lan",), "other.lan", 421),
        (("*.lan",), "pc-3.lan", 200),
        (("*.lan",), "lan", 421),
        (("*",), EVIL, 200),
        ((), "a b", 400),
        ((), "[::1", 400),
        ((), "localhost:port", 400),
    ],
)
def test_allow_host_adds_names_and_a_malformed_host_is_a_400(
    allowed: tuple[str, ...], host: str, status: int, upstream: str
) -> None:
    """``--allow-host``: a name, ``*.domain`` (its names, not itself), ``*`` (the check off); a Host that is no
    host name is a 400 that says so."""
    with serve(upstream, allowed_hosts=allowed) as base:
        r = httpx.get(base + "/v1/info", headers={"Host": host}, timeout=T)
        assert r.status_code == status, r.text
        if status == 400:
            assert "is not a host name" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("server", "host", "status"),
    [("192.168.1.5", "192.168.1.5:8000", 200), ("192.168.1.5", "192.168.1.6", 421), ("192.168.1.5", EVIL, 421)],
)
def test_the_address_a_request_came_in_on_is_answered(server: str, host: str, status: int) -> None:
    """On a LAN, a player's browser names the server by its address: that Host is the address the connection
    came in on (the ASGI scope's ``server``), so it is answered; another address or a name is not."""
    app = create_app(Settings(character=Character.load(REX), upstream_url="http://127.0.0.1:9/v1"))

    async def ask() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{server}:8000") as client:
            r = await client.get("/v1/info", headers={"Host": host})
            return r.status_code

    assert asyncio.run(ask()) == status


def test_cors_still_answers_its_origin_for_an_allowed_host(upstream: str) -> None:
    """CORS is untouched: a preflight from a --cors origin to a loopback Host is allowed; another origin is not."""
    with serve(upstream, cors=("http://game.example",)) as base:
        ask = {"Access-Control-Request-Method": "POST"}
        ok = httpx.options(base + "/v1/turn", headers={"Origin": "http://game.example", **ask}, timeout=T)
        assert ok.headers["access-control-allow-origin"] == "http://game.example"
        other = httpx.options(base + "/v1/turn", headers={"Origin": "http://evil.example", **ask}, timeout=T)
        assert "access-control-allow-origin" not in other.headers


def test_cli_answers_for_the_machines_names_where_it_listens_beyond_loopback() -> None:
    """``--host 0.0.0.0`` (a LAN): the machine's names are answered too, besides ``--allow-host``'s; ``--host NAME``
    answers for NAME; an ``--allow-host`` that is no host name is a usage error (exit 2)."""
    import subprocess

    from charfmt.cli import _parser
    from charfmt.cli.serve import settings_from

    base = ["serve", "--character", str(REX), "--upstream", "http://127.0.0.1:9/v1"]
    lan = settings_from(_parser().parse_args([*base, "--host", "0.0.0.0", "--allow-host", "Game.LAN"]))
    assert {"game.lan", socket.gethostname().lower(), socket.gethostname().lower() + ".local"} <= set(lan.allowed_hosts)
    assert "0.0.0.0" not in lan.allowed_hosts
    named = settings_from(_parser().parse_args([*base, "--host", "mybox.lan"]))
    assert named.allowed_hosts == ("mybox.lan",)
    assert settings_from(_parser().parse_args(base)).allowed_hosts == ()
    cmd = [sys.executable, "-m", "charfmt", *base, "--allow-host", "a b"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2 and "argument --allow-host: 'a b' is not a host name" in p.stderr, p.stderr


def test_localhost_is_not_listed_twice_where_the_machine_is_called_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a newcomer's trial: on a machine whose fully qualified name is 'localhost', the start line said
    'answering requests for localhost, its addresses, vm, vm.local, localhost'."""
    from charfmt.cli import _parser
    from charfmt.cli.serve import settings_from

    monkeypatch.setattr(socket, "getfqdn", lambda *_: "localhost")
    base = ["serve", "--character", str(REX), "--upstream", "http://127.0.0.1:9/v1", "--host", "0.0.0.0"]
    lan = settings_from(_parser().parse_args([*base, "--allow-host", "LOCALHOST"]))
    assert "localhost" not in lan.allowed_hosts and socket.gethostname().lower() in lan.allowed_hosts


def test_an_allowed_websocket_still_carries_a_turn(upstream: str) -> None:
    """The check lets the server's own WebSocket through: a turn's objects arrive, ending with the reply."""
    ws_client = pytest.importorskip("websockets.sync.client")
    with serve(upstream) as base, ws_client.connect(base.replace("http://", "ws://") + "/v1/turn/ws") as ws:
        ws.send(json.dumps({"say": "hi"}))
        kinds = [json.loads(ws.recv(timeout=T))["kind"]]
        while kinds[-1] not in ("reply", "error"):
            kinds.append(json.loads(ws.recv(timeout=T))["kind"])
    assert kinds[-1] == "reply"
