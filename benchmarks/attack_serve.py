"""Attacks on ``charfmt serve`` as a hostile client makes them, measured: memory, time, what leaks.

Run: .venv/bin/python benchmarks/attack_serve.py [--root DIR] [--http auto|httptools|h11] [--slow 100]

Each attack runs against a real ``charfmt serve`` (the checkout ``--root``, default this one: give
another checkout to measure it before a change) on loopback, in front of the scripted upstream of
``tests/scripted_upstream.py``, and prints what it found:

- a 256 MB header line, sent in 1 MB writes: the answer, and the server's resident memory before,
  at its peak (``VmHWM``, started again before the attack) and after, from ``/proc/PID/status``;
- ``--slow`` connections trickling a head and as many trickling a body at a byte a second: how many
  the server cut within 45 s, and when the last one was cut;
- a request for another ``Host`` (DNS rebinding) and an HTTP/1.0 client's stream;
- an upstream whose 401 quotes the key it was sent: whether the key reaches the client or the console.

The tests (``tests/serve/test_serve_hostile.py``, ``tests/serve/test_serve_secrets.py``) hold the bounds; this
script says the figures ``docs/SECURITY.md`` quotes. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
from scripted_upstream import Scripted, loopback  # noqa: E402

KEY = "sk-proj-LEAKME0123456789abcdef"


@contextlib.contextmanager
def serve(
    root: Path, upstream: str, flags: list[str], env: dict[str, str] | None = None
) -> Iterator[tuple[int, int, list[str]]]:
    """``charfmt serve`` of ``root``: its pid, its port, its console lines (read as they come)."""
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(root / "examples/characters/rex.toml"),
           "--upstream", upstream, "--port", "0", *flags]  # fmt: skip
    app = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
                           env={**os.environ, "PYTHONPATH": str(root), **(env or {})})  # fmt: skip
    assert app.stderr is not None and app.stdout is not None
    try:
        first = app.stderr.readline()
        port = int(first.split("http://127.0.0.1:")[1].split()[0])
        lines: list[str] = []
        for stream in (app.stdout, app.stderr):
            threading.Thread(target=lambda s=stream: lines.extend(s), daemon=True).start()
        for _ in range(200):  # (uvicorn's start, after the line)
            with contextlib.suppress(OSError):
                if ask(port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"):
                    break
            time.sleep(0.05)
        yield app.pid, port, lines
    finally:
        app.terminate()
        app.wait(10)


def kib(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` value in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def read_all(s: socket.socket) -> bytes:
    got = b""
    while True:
        try:
            chunk = s.recv(1 << 16)
        except (ConnectionResetError, TimeoutError):
            return got
        if not chunk:
            return got
        got += chunk


def first_line(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode("latin-1")


def ask(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        return read_all(s)


def huge_header(pid: int, port: int) -> None:
    before = kib(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak starts again from here
    answer = bytearray()
    start, sent = time.monotonic(), 0
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        reader = threading.Thread(target=lambda: answer.extend(read_all(s)), daemon=True)
        reader.start()
        with contextlib.suppress(OSError):
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nX-Huge: ")
            for _ in range(256):
                s.sendall(b"a" * (1 << 20))
                sent += 1
            s.sendall(b"\r\n\r\n")
        reader.join(300)
    peak, took = kib(pid, "VmHWM"), time.monotonic() - start
    time.sleep(1)
    print(f"256 MB header line: {sent} MB sent, answered {first_line(bytes(answer)) or '(nothing)'};"
          f" RSS {before / 1024:.0f} MB before, peak {peak / 1024:.0f} MB (+{(peak - before) / 1024:.1f} MB),"
          f" {kib(pid, 'VmRSS') / 1024:.0f} MB after; {took:.1f} s")  # fmt: skip


def slow_clients(port: int, count: int) -> None:
    cuts: list[float] = []
    body = (b"POST /v1/turn HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n")  # fmt: skip

    def trickle(head: bytes, then: bytes) -> None:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(head)
            s.settimeout(1.0)
            for byte in then * 100:
                try:
                    s.send(bytes([byte]))
                    s.recv(4096)  # (an answer, or the close)
                except TimeoutError:
                    if time.monotonic() - start > 45:
                        return
                    continue
                except OSError:
                    pass
                cuts.append(time.monotonic() - start)
                return

    kinds = [(b"POST /v1/turn HTTP/1.1\r\n", b"X-Slow: aaaa\r\n"), (body, b'{"say":"a')]
    threads = [threading.Thread(target=trickle, args=kind, daemon=True) for kind in kinds for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    last = f"the last at {max(cuts):.1f} s" if cuts else "none"
    print(f"{2 * count} slow connections (a byte a second): {len(cuts)} cut within 45 s, {last}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE, help="the checkout whose charfmt serve is attacked")
    ap.add_argument("--http", choices=("auto", "httptools", "h11"), help="the HTTP parser (a --root that has --http)")
    ap.add_argument("--slow", type=int, default=100, help="slow connections of each kind (head, body)")
    args = ap.parse_args()
    root: Path = args.root.resolve()
    flags = ["--http", args.http] if args.http else []
    up = Scripted()
    with loopback(up.app) as base:
        with serve(root, base + "/v1", flags) as (pid, port, _):
            huge_header(pid, port)
            rebound = ask(port, b"GET /v1/info HTTP/1.1\r\nHost: rebind.evil.example\r\nConnection: close\r\n\r\n")
            print(f"Host: rebind.evil.example: {first_line(rebound)}")
            turn = b'{"say":"hi"}'
            old = ask(port, b"POST /v1/turn HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(turn), turn))  # fmt: skip
            chunked = b"transfer-encoding: chunked" in old.partition(b"\r\n\r\n")[0].lower()
            print(f"an HTTP/1.0 client's stream: {'chunked' if chunked else 'close-delimited, no chunked framing'}")
            slow_clients(port, args.slow)
        up.mode = "leak401"
        with serve(root, base + "/v1", flags, {"OPENAI_API_KEY": KEY}) as (_, port, lines):
            chat = b'{"messages":[{"role":"user","content":"hi"}]}'
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            answer = ask(port, head + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(chat), chat))
            time.sleep(0.5)
            shown = "".join(lines)
            print(f"a key the upstream quotes: in the answer {KEY.encode() in answer}, in the console {KEY in shown}")


if __name__ == "__main__":
    main()
