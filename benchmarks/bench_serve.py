"""Benchmark: what ``charfmt serve`` adds between a front end and the model, with 50 concurrent sessions.

Run: .venv/bin/python benchmarks/bench_serve.py [--sessions 50] [--rounds 5] [--delay-ms 20]
     [--formats canonical,tags,speech,airi] [--starts burst,staggered] [--ab DIR] [--floor] [--profile DIR]

- A scripted OpenAI-compatible upstream streams each reply in 4-character chunks, one every
  ``--delay-ms`` (a model at 50 tokens/s by default): the reply and chunks of
  ``tests/scripted_upstream.py``, written on bare asyncio streams, as is the client (no HTTP
  library), so that the benchmark's own process stays light and what is measured is the
  server. The upstream notes when it sent each chunk and what it wrote; it runs on the client's
  event loop, so the two share one monotonic clock.
- ``charfmt serve`` runs as the CLI does, one process per ``--reply-format`` measured, each on
  loopback in front of the upstream.
- Each round, for each start: ``burst`` (every session starts at the same instant, so their
  chunks, and their ends, arrive together and queue) and ``staggered`` (session i starts i/N of
  one chunk interval later: real sessions are not synchronised), the sessions stream a turn
  directly from the upstream, then the same through each server (``/v1/chat/completions``,
  streamed), interleaved round after round.
- Latency: ``canonical`` streams the repaired JSON whole at the end, so a reply's latency is the
  arrival of its last content chunk at the client minus the upstream's sending of its last text
  chunk. ``tags``, ``speech`` and ``airi`` stream as the reply is read: each content chunk's
  arrival minus the upstream's sending of the chunk that completed it (found by reading the
  reply the upstream wrote, chunk by chunk, through the ``StreamParser`` and ``Formatter`` the
  server runs: the first upstream chunk after which the formatted text is as long as what the
  client has). Direct: each chunk's arrival minus its sending, and the last one's. The added
  latency is the server's p50/p99 minus the direct p50/p99 of the same round and start, the
  median over rounds.
- Nothing lost or mixed: each session's streamed text must be the reply the upstream wrote for
  that session (it repeats the session's tag) in the server's format, every chunk accounted
  for, and its next turn's prompt must hold its own turns only.
- The answer's beginning: from the request's sending to the arrival of the model's first text
  (through the server: its first chunk, which it sends the moment that text reaches it), through
  the server minus directly: the request's reading, the prompt's rendering and the upstream
  request, which a burst of turns queues (their starts paced so that streaming replies go first).
- Server CPU per reply: the server process's user + system time over a phase, per reply.
- Memory per session: the canonical server's RSS growth over 2,000 sessions of one exchange
  each (``/v1/turn``, instant upstream), and ``tracemalloc`` of one session's history here.
- ``--ab DIR``: also run each format's server from the checkout ``DIR`` (another commit), measured
  interleaved with this one's (``canonical@DIR``...): the fair comparison on a busy machine.
- ``--floor``: also measure a plain pass-through proxy on the same stack (Starlette, uvicorn, an
  ``aiohttp.ClientSession`` upstream; ``proxy``, per chunk): what any server written this way adds,
  before charfmt does anything.
- ``--profile DIR``: each server runs under ``cProfile`` (its event loop's thread) and writes
  ``DIR/serve-<format>.prof`` when stopped (``python -m pstats`` reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import re
import statistics
import subprocess
import sys
import time
import tracemalloc
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from scripted_upstream import CHUNK, chunk_event, free_port, reply_for  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
FORMATS = ("canonical", "tags", "speech", "airi")
STARTS = ("burst", "staggered")

# Runs a server under cProfile; uvicorn re-raises SIGTERM once it has stopped, so a handler ends it cleanly.
PROFILED = (
    "import cProfile, signal, sys\n"
    "from charfmt.cli import main\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "p = cProfile.Profile()\n"
    "p.enable()\n"
    "try:\n    main(sys.argv[2:])\n"
    "finally:\n    p.disable()\n    p.dump_stats(sys.argv[1])\n"
)

PROXY = (
    "import sys, aiohttp, uvicorn\n"
    "from starlette.applications import Starlette\n"
    "from starlette.responses import StreamingResponse\n"
    "from starlette.routing import Route\n"
    "pool = {}\n"
    "async def chat(request):\n"
    "    if not pool:\n"
    "        pool['s'] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))\n"
    "    body = await request.body()\n"
    "    r = await pool['s'].post(sys.argv[1], data=body, headers={'content-type': 'application/json'})\n"
    "    async def chunks():\n"
    "        try:\n"
    "            async for chunk in r.content.iter_any():\n"
    "                yield chunk\n"
    "        finally:\n"
    "            r.release()\n"
    "    return StreamingResponse(chunks(), media_type='text/event-stream')\n"
    "app = Starlette(routes=[Route('/v1/chat/completions', chat, methods=['POST'])])\n"
    "uvicorn.run(app, host='127.0.0.1', port=int(sys.argv[2]), log_level='warning')\n"
)
"""A plain proxy on serve's stack, passing the upstream's event stream through (``--floor``)."""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid``'s threads so far (the scheduler's nanoseconds: finer than ``stat``'s ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that just ended
            continue
    return total / 1e9


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Upstream:
    """The scripted upstream on bare asyncio streams: ``tests/scripted_upstream.py``'s replies and chunks."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.sent: dict[str, list[float]] = {}
        """Per ``S<n>R<n>`` tag in the user message, when each text chunk was sent."""
        self.written: dict[str, str] = {}
        """Per tag, the reply the model wrote."""
        self.requests: list[dict[str, Any]] = []

    async def start(self) -> int:
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self._server = server
        return int(server.sockets[0].getsockname()[1])

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after another
                head = (await reader.readuntil(b"\r\n\r\n")).lower()
                length = int(re.search(rb"content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
                body = json.loads(await reader.readexactly(length))
                self.requests.append(body)
                await self._answer(writer, body)
                if b"connection: close" in head:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the server hung up, or the benchmark is over
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        user = body["messages"][-1]["content"]
        text = reply_for(user)
        tag = re.search(r"S\d+R\d+", user)
        times = self.sent.setdefault(tag.group(), []) if tag else None
        if tag:
            self.written[tag.group()] = text
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        writer.write(head + _framed(chunk_event("")))
        for i in range(0, len(text), CHUNK):
            if self.delay:
                await asyncio.sleep(self.delay)
            if times is not None:
                times.append(time.perf_counter())
            writer.write(_framed(chunk_event(text[i : i + CHUNK])))
            await writer.drain()
        writer.write(_framed(chunk_event(None, "stop")) + _framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


def _framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def http(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """One request on a connection of its own: the status and the whole body."""
    status, parts = 0, []
    async for code, _, data in _exchange(method, url, body):
        status = code
        parts.append(data)
    return status, b"".join(parts)


async def stream(url: str, body: dict[str, Any]) -> tuple[list[tuple[float, str]], float | None]:
    """The arrival time and text of each content chunk of a streamed chat completion, and when it began.

    It began with its first chunk that holds text or the ``role`` (which ``charfmt serve`` sends
    the moment the model's first text reaches it; the scripted upstream sends no role).
    """
    chunks: list[tuple[float, str]] = []
    began: float | None = None
    buffer = b""
    async for status, arrival, data in _exchange("POST", url, body):
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {data[:200]!r}")
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            obj = json.loads(event[6:])
            if "error" in obj:
                raise RuntimeError(obj["error"]["message"])
            delta = obj["choices"][0]["delta"] if obj.get("choices") else {}
            content = delta.get("content")
            if began is None and (content or "role" in delta):
                began = arrival
            if content:
                chunks.append((arrival, content))
    return chunks, began


async def _exchange(method: str, url: str, body: dict[str, Any] | None) -> Any:
    """The response's (status, arrival time, bytes) as each part of its body arrives (chunked or not): first b""."""
    parts = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        writer.write(f"{method} {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
                     f"content-length: {len(data)}\r\nconnection: close\r\n\r\n".encode() + data)  # fmt: skip
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        status = int(head.split(b" ", 2)[1])
        yield status, time.perf_counter(), b""
        if b"transfer-encoding: chunked" in head:
            while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                part = (await reader.readexactly(size + 2))[:-2]
                yield status, time.perf_counter(), part
            return
        length = re.search(rb"content-length: *(\d+)", head)
        rest = await (reader.readexactly(int(length.group(1))) if length else reader.read())
        yield status, time.perf_counter(), rest
    finally:
        writer.close()


class Formats:
    """What the server answers in each format for a reply the upstream wrote, and when each part is known."""

    def __init__(self) -> None:
        from charfmt import Character

        self.rex = Character.load(REX)

    def expected(self, fmt: str, written: str) -> str:
        from charfmt import parse
        from charfmt.serve.formats import whole

        reply = parse(written, lenient=True, vocabulary=self.rex.vocabulary, tags=self.rex.tags)
        return whole(fmt, reply, self.rex.tags)

    def lengths(self, fmt: str, written: str, say: str) -> list[int]:
        """The length of the formatted text once each upstream text chunk is read (as the server reads it)."""
        from charfmt.serve.formats import Formatter
        from charfmt.stream import StreamParser

        parser = StreamParser(lenient=True, vocabulary=self.rex.vocabulary, tags=self.rex.tags,
                              turn=self.rex.shorthand(say))  # fmt: skip
        formatter = Formatter(fmt, self.rex.tags)
        total, out = 0, []
        for i in range(0, len(written), CHUNK):
            total += sum(len(formatter.feed(e)) for e in parser.feed(written[i : i + CHUNK]))
            out.append(total)
        return out


@dataclass
class Phase:
    """One phase's measurements: per-chunk and end-of-reply latencies (ms), failures, server CPU."""

    chunk: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    """From the request's sending to the answer's beginning: its first text (through the server, the
    first chunk, sent when the model's first text reaches it)."""
    lost: int = 0
    cpu_ms: float = float("nan")
    replies: int = 0


class Bench:
    def __init__(self, args: argparse.Namespace, up: Upstream, up_port: int, servers: dict[str, tuple[Any, str]]):
        self.args = args
        self.up = up
        self.direct_url = f"http://127.0.0.1:{up_port}/v1/chat/completions"
        self.servers = servers
        self.formats = Formats()

    async def phase(self, fmt: str | None, start: str, tag_round: int) -> Phase:
        """All sessions' turns, directly (``fmt`` None) or through the server for ``fmt``."""
        out = Phase()
        interval = self.args.delay_ms / 1000
        n = self.args.sessions

        async def one(i: int) -> None:
            if start == "staggered":
                await asyncio.sleep(i * interval / n)
            tag = f"S{i}R{tag_round}"
            say = f"hello {tag}"
            if fmt is None:
                url, content, user = self.direct_url, f"<msg>{say}</msg>", {}
            elif fmt == "proxy":
                url, content, user = self.servers[fmt][1] + "/v1/chat/completions", f"<msg>{say}</msg>", {}
            else:
                url, content, user = self.servers[fmt][1] + "/v1/chat/completions", say, {"user": session(fmt, i)}
            body = {"messages": [{"role": "user", "content": content}], "stream": True, **user}
            self.up.sent.pop(tag, None)
            asked = time.perf_counter()
            try:
                chunks, began = await stream(url, body)
            except (OSError, RuntimeError, ValueError, asyncio.IncompleteReadError):
                out.lost += 1
                return
            if began is not None:
                out.first.append((began - asked) * 1000)
            self.measure(out, fmt.partition("@")[0] if fmt and fmt != "proxy" else None, say, chunks)

        before = cpu_seconds(self.servers[fmt][0].pid) if fmt is not None else 0.0
        await asyncio.gather(*(one(i) for i in range(n)))
        if fmt is not None:
            out.replies = len(out.end)
            out.cpu_ms = (cpu_seconds(self.servers[fmt][0].pid) - before) * 1000 / max(1, out.replies)
        return out

    def measure(self, out: Phase, fmt: str | None, say: str, chunks: list[tuple[float, str]]) -> None:
        """One reply's latencies into ``out`` (or a lost one): against when the upstream sent what it wrote."""
        tag = say.rsplit(maxsplit=1)[-1]
        sent = self.up.sent.pop(tag, [])
        written = self.up.written.pop(tag, "")
        text = "".join(c for _, c in chunks)
        if not sent or not chunks or tag not in written:
            out.lost += 1
            return
        if fmt is None:
            if text != written or len(chunks) != len(sent):
                out.lost += 1
                return
            out.chunk.extend((a - s) * 1000 for (a, _), s in zip(chunks, sent, strict=True))
        else:
            lengths = self.formats.lengths(fmt, written, say) if fmt != "canonical" else []
            if text != self.formats.expected(fmt, written) or (lengths and len(lengths) != len(sent)):
                out.lost += 1
                return
            so_far = 0
            for arrival, content in chunks:
                so_far += len(content)
                i = min(bisect.bisect_left(lengths, so_far), len(sent) - 1) if lengths else len(sent) - 1
                out.chunk.append((arrival - sent[i]) * 1000)
        out.end.append((chunks[-1][0] - sent[-1]) * 1000)


def session(label: str, i: int) -> str:
    """Session ``i``'s key on a server (``fmt`` or ``fmt@DIR``: each server has its own sessions)."""
    return f"{label.partition('@')[0]}{i}"


def start_servers(args: argparse.Namespace, up_port: int) -> dict[str, tuple[Any, str]]:
    """A server per format (``fmt``), and per format from the ``--ab`` checkout (``fmt@DIR``)."""
    servers = {}
    roots = [("", ROOT)] + ([(f"@{Path(args.ab).name}", Path(args.ab).resolve())] if args.ab else [])
    for fmt in args.formats:
        for suffix, root in roots:
            port = free_port()
            cmd = [sys.executable, "-m", "charfmt"]
            if args.profile:
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                cmd = [sys.executable, "-c", PROFILED, str(Path(args.profile).resolve() / f"serve-{fmt}{suffix}.prof")]
            cmd += ["serve", "--character", str(REX), "--upstream", f"http://127.0.0.1:{up_port}/v1",
                    "--port", str(port), "--max-sessions", "100000", "--reply-format", fmt]  # fmt: skip
            if "--memory" in (root / "charfmt" / "cli" / "serve.py").read_text(encoding="utf-8"):
                cmd.append("--memory")  # (sessions in memory, as before serve kept them in a store by default)
            env = {**os.environ, "PYTHONPATH": str(root)}
            app = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            servers[fmt + suffix] = (app, f"http://127.0.0.1:{port}")
    if args.floor:
        port = free_port()
        cmd = [sys.executable, "-c", PROXY, f"http://127.0.0.1:{up_port}/v1/chat/completions", str(port)]
        servers["proxy"] = (
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            f"http://127.0.0.1:{port}",
        )
    return servers


def stop(servers: dict[str, tuple[Any, str]]) -> None:
    for app, _ in servers.values():
        app.terminate()
    for app, _ in servers.values():
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait(10)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--formats", type=lambda s: s.split(","), default=list(FORMATS))
    ap.add_argument("--starts", type=lambda s: s.split(","), default=list(STARTS))
    ap.add_argument("--memory-sessions", type=int, default=2000)
    ap.add_argument("--ab", metavar="DIR", help="also measure the servers of the checkout DIR, interleaved")
    ap.add_argument("--floor", action="store_true", help="also measure a plain pass-through proxy on the same stack")
    ap.add_argument("--profile", metavar="DIR", help="run each server under cProfile, writing DIR/serve-<format>.prof")
    args = ap.parse_args()

    up = Upstream(args.delay_ms / 1000)
    up_port = await up.start()
    servers = start_servers(args, up_port)
    bench = Bench(args, up, up_port, servers)
    try:
        await warm_up(servers)
        print(f"charfmt serve: {args.sessions} concurrent sessions, {args.rounds} rounds, a chunk every"
              f" {args.delay_ms:g} ms (loopback, {os.cpu_count()} cores, load average"
              f" {os.getloadavg()[0]:.2f})")  # fmt: skip
        results: dict[tuple[str, str], list[tuple[Phase, Phase]]] = {}
        for r in range(args.rounds):
            for m, start in enumerate(args.starts):
                tag_round = r * 10 + m
                direct = await bench.phase(None, start, tag_round * 100)
                for f, label in enumerate(servers, start=1):
                    via = await bench.phase(label, start, tag_round * 100 + f)
                    results.setdefault((start, label), []).append((direct, via))
            print(f"  round {r + 1} done", flush=True)
        report(args, results)
        await check_sessions(up, servers, args)
        if "canonical" in servers:
            await memory(up, servers["canonical"], args)
    finally:
        stop(servers)
    tracemalloc_per_session()


async def warm_up(servers: dict[str, tuple[Any, str]]) -> None:
    for label, (_, base) in servers.items():
        for _ in range(600):
            try:
                if (await http("GET", base + "/v1/info"))[0] == 200:
                    break
            except OSError:
                await asyncio.sleep(0.1)
        say = "<msg>warm up</msg>" if label == "proxy" else "warm up"
        await stream(base + "/v1/chat/completions", {"messages": [{"role": "user", "content": say}], "stream": True})


def report(args: argparse.Namespace, results: dict[tuple[str, str], list[tuple[Phase, Phase]]]) -> None:
    med = statistics.median
    print("latency in ms: direct p50/p99, via charfmt serve p50/p99, added p50/p99 (median of rounds);"
          " server CPU per reply; lost or wrong replies")  # fmt: skip
    first_rows: list[str] = []
    for (start, label), rounds in results.items():
        fmt = label.partition("@")[0]
        what = "end of reply" if fmt == "canonical" else "per chunk"
        rows = []
        for direct, via in rounds:
            d = direct.end if fmt == "canonical" else direct.chunk
            v = via.end if fmt == "canonical" else via.chunk
            rows.append((pct(d, 0.5), pct(d, 0.99), pct(v, 0.5), pct(v, 0.99), via.cpu_ms, direct.lost + via.lost))
        d50, d99, v50, v99 = (med(row[k] for row in rows) for k in range(4))
        a50, a99 = med(row[2] - row[0] for row in rows), med(row[3] - row[1] for row in rows)
        cpu, lost = med(row[4] for row in rows), sum(row[5] for row in rows)
        print(f"  {start:9} {label:14} ({what:12}): direct {d50:6.2f} / {d99:6.2f}, via {v50:6.2f} / {v99:6.2f},"
              f" added {a50:6.2f} / {a99:6.2f} ms; CPU {cpu:5.2f} ms a reply; lost {lost}")  # fmt: skip
        firsts = [(pct(direct.first, 0.5), pct(direct.first, 0.99), pct(via.first, 0.5), pct(via.first, 0.99))
                  for direct, via in rounds]  # fmt: skip
        f50 = med(row[2] - row[0] for row in firsts)
        f99 = med(row[3] - row[1] for row in firsts)
        first_rows.append(f"  {start:9} {label:14}: added {f50:6.2f} / {f99:6.2f} ms")
    print("the answer's beginning (from the request sent: the model's first text, through the server the first"
          " chunk it sends then), added p50/p99 (median of rounds):")  # fmt: skip
    print("\n".join(first_rows))
    print("target: added p99 <= 5 ms per chunk at 50 concurrent sessions on 2 cores")


async def check_sessions(up: Upstream, servers: dict[str, tuple[Any, str]], args: argparse.Namespace) -> None:
    """Each session's next turn (all at once, per server) carries its own turns only."""
    mixed = 0
    up.delay = 0.0
    for label, (_, base) in servers.items():
        if label == "proxy":
            continue
        up.requests.clear()
        url = base + "/v1/chat/completions"
        await asyncio.gather(*(
            stream(url, {"messages": [{"role": "user", "content": f"again Q{i}Z"}], "stream": True,
                                 "user": session(label, i)})
            for i in range(args.sessions)
        ))  # fmt: skip
        for i in range(args.sessions):
            prompts = [json.dumps(r["messages"]) for r in up.requests if f"Q{i}Z" in r["messages"][-1]["content"]]
            others = [j for j in range(args.sessions) if j != i and prompts and f"S{j}R" in prompts[0]]
            mixed += len(prompts) != 1 or bool(others) or f"S{i}R" not in prompts[0]
    print(f"sessions whose prompt held another's turns (or lacked its own): {mixed}")


async def memory(up: Upstream, canonical: tuple[Any, str], args: argparse.Namespace) -> None:
    app, base = canonical
    up.delay = 0.0
    before = rss_kib(app.pid)
    for start in range(0, args.memory_sessions, 100):
        await asyncio.gather(*(
            http("POST", base + "/v1/turn", {"session": f"m{k}", "say": f"hello S{k}R0"})
            for k in range(start, min(start + 100, args.memory_sessions))
        ))  # fmt: skip
    after = rss_kib(app.pid)
    per = (after - before) / max(1, args.memory_sessions)
    print(f"server RSS: {before / 1024:.1f} MiB -> {after / 1024:.1f} MiB after {args.memory_sessions} more"
          f" sessions: {per:.1f} KiB per session")  # fmt: skip


def tracemalloc_per_session() -> None:
    """One session with one exchange (the scripted reply), measured in this process."""
    from charfmt import Character, parse
    from charfmt.prompt.character import Exchange
    from charfmt.store import SessionKey
    from charfmt.store.memory import MemoryStore
    from charfmt.writer import canonical_form

    rex = Character.load(REX)
    store = MemoryStore()
    replies = [parse(reply_for(f"hello S{k}R0"), vocabulary=rex.vocabulary, tags=rex.tags) for k in range(1000)]
    turns = [rex.shorthand(f"hello S{k}R0") for k in range(1000)]
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for k in range(1000):
        exchange = Exchange(user=turns[k], reply=canonical_form(replies[k], tags=rex.tags))
        store.append(SessionKey("", "turn/Rex", f"m{k}"), exchange, max_bytes=256 << 10)
    used = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    print(f"tracemalloc: {used / 1000 / 1024:.1f} KiB per session of one exchange (store, history)")


if __name__ == "__main__":
    asyncio.run(main())
