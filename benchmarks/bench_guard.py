"""Benchmark: what the transport guard of ``charfmt serve`` costs, per chunk of a stream and per connection.

Run: .venv/bin/python benchmarks/bench_guard.py [--rounds 7]

The guard (``charfmt.serve.guard``) stands between the socket and uvicorn's HTTP protocol: every
chunk the server writes passes its response reader, every request its request reader. Measured in
this process, with a stand-in for uvicorn's protocol and for the socket, in CPU time
(``time.process_time``), interleaved rounds, the median over rounds:

- a chunk of a streamed chat completion (a ``chat.completion.chunk`` event in its chunked framing)
  written through the guard, against the same write straight to the socket's stand-in;
- a connection: made, one request (a chat-completions ``POST`` and its body) read, lost.

``benchmarks/bench_serve.py`` measures the whole server (``--ab`` against a checkout without the
guard); on a loaded machine its noise is larger than what the guard adds, which this says exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from charfmt.serve.guard import Limits, protocol_class

REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
           b"User-Agent: bench\r\nAccept: */*\r\nContent-Length: 80\r\n\r\n" + b"x" * 80)  # fmt: skip
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENT = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"Rex","choices":'
         b'[{"index":0,"delta":{"content":" sai"},"finish_reason":null}]}\n\n')  # fmt: skip
FRAME = b"%x\r\n" % len(EVENT) + EVENT + b"\r\n"


class Inner(asyncio.Protocol):
    """uvicorn's protocol, standing: it keeps the transport it is given and reads nothing."""

    def __init__(self, **_: Any) -> None:
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport


class Socket:
    """The socket's transport, standing: writes go nowhere."""

    def write(self, data: bytes) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    loop = asyncio.new_event_loop()
    guarded = protocol_class(Inner, Limits())
    guard = guarded(None, None, {}, _loop=loop)
    guard.connection_made(Socket())
    guard.data_received(REQUEST)
    through = guard.inner.transport
    through.write(HEAD)
    bare = Socket()
    chunk, connection = [], []
    for _ in range(args.rounds):
        n = 50_000
        start = time.process_time()
        for _ in range(n):
            through.write(FRAME)
        mid = time.process_time()
        for _ in range(n):
            bare.write(FRAME)
        chunk.append(((mid - start) - (time.process_time() - mid)) / n * 1e6)
        n = 5_000
        start = time.process_time()
        for _ in range(n):
            one = guarded(None, None, {}, _loop=loop)
            one.connection_made(Socket())
            one.data_received(REQUEST)
            one.connection_lost(None)
        connection.append((time.process_time() - start) / n * 1e6)
    print(f"the guard adds {statistics.median(chunk):.2f} µs of CPU a chunk written (median of {args.rounds} rounds)")
    print(f"and {statistics.median(connection):.1f} µs a connection (made, one request read, lost)")


if __name__ == "__main__":
    main()
