"""A real ``charfmt serve`` on 127.0.0.1 for the hostile-client tests: started, watched through ``/proc``, stopped.

``served(upstream, *flags)`` runs ``python -m charfmt serve --port 0`` in front of an upstream URL, waits
for its "listening on" line and yields a :class:`Served` (its port, its pid, what it wrote); the process
is stopped when the block ends (SIGTERM, then SIGKILL), within seconds. ``raw(port, data)`` speaks HTTP
on a bare socket, so that a test sends exactly the bytes it means (a 256 MB header line, a byte a second).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REX = ROOT / "examples" / "characters" / "rex.toml"


@dataclass
class Served:
    """A running server: its port and pid, and its console (stdout and stderr) as read so far."""

    port: int
    pid: int
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def console(self) -> str:
        """What the server wrote so far (both streams)."""
        return "".join(self.lines)

    def status(self, key: str) -> int:
        """A ``/proc/PID/status`` value in KiB (``VmRSS``, ``VmHWM``: the peak resident size)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def reset_peak(self) -> None:
        """Start ``VmHWM`` again from the current resident size (``clear_refs`` 5)."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")


def _pump(stream: object, lines: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.append(line)


@contextlib.contextmanager
def served(upstream: str, *flags: str, timeout: float = 30.0) -> Iterator[Served]:
    """``charfmt serve`` on 127.0.0.1 in front of ``upstream`` with ``flags``; stopped when the block ends."""
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream", upstream,
           "--port", "0", *flags]  # fmt: skip
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert process.stderr is not None and process.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        first = ""
        while "listening on" not in first:
            first = process.stderr.readline()
            if not first or time.monotonic() > deadline:
                raise RuntimeError(f"charfmt serve did not start: {first}{process.stderr.read()}")
        lines.append(first)
        port = int(first.split("http://127.0.0.1:")[1].split()[0])
        for stream in (process.stdout, process.stderr):
            threading.Thread(target=_pump, args=(stream, lines), daemon=True).start()
        wait_until_answering(port, deadline)
        yield Served(port, process.pid, process, lines)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def wait_until_answering(port: int, deadline: float) -> None:
    """Return once ``GET /v1/models`` is answered (uvicorn's start, after the "listening on" line)."""
    while True:
        try:
            if raw(port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 2.0):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("charfmt serve did not answer")
        time.sleep(0.05)


def raw(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """``data`` sent on a new connection; everything the server sends back until it closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_all(s)


def read_all(s: socket.socket) -> bytes:
    """What ``s`` receives until the server closes it (a reset ends it too; a timeout raises)."""
    got = b""
    while True:
        try:
            chunk = s.recv(1 << 16)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk


def status_of(answer: bytes) -> int:
    """The status code of an HTTP answer's first line (0 where there is none)."""
    parts = answer.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
