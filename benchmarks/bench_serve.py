"""Benchmark: what ``charfmt serve`` adds between a front end and the model, with 50 concurrent sessions.

Run: .venv/bin/python benchmarks/bench_serve.py [--sessions 50] [--rounds 5] [--delay-ms 20]

- A scripted OpenAI-compatible upstream (``tests/scripted_upstream.py``) streams each reply in
  4-character chunks, one every ``--delay-ms`` (a model at 50 tokens/s by default), and notes
  when it sent each chunk. It runs on the benchmark's own event loop, with the client.
- ``charfmt serve`` runs as the CLI does, in its own process, on loopback in front of it.
- Each round, ``--sessions`` sessions stream a turn at once directly from the upstream, then
  the same through ``/v1/chat/completions`` (streamed, canonical: the repaired JSON comes whole
  at the end), interleaved round after round. A reply's latency is the arrival of its last
  content chunk at the client minus the upstream's sending of its last text chunk (one
  monotonic clock); the added latency is the server's p50/p99 minus the direct p50/p99, the
  median over rounds.
- Nothing lost or mixed: each session's streamed text must equal the reply the upstream wrote
  for that session (it repeats the session's tag), and its 2nd turn's prompt must hold its
  own 1st turn only.
- Memory per session: the server process's RSS growth over 2,000 sessions of one exchange each
  (``/v1/turn``, instant upstream), and ``tracemalloc`` of one session's history in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from scripted_upstream import Scripted, free_port, reply_for  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[str, list[float]]:
    """The streamed content and the arrival time of each content chunk."""
    text, arrivals = [], []
    async with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            if "error" in obj:
                raise RuntimeError(obj["error"]["message"])
            content = obj["choices"][0]["delta"].get("content") if obj.get("choices") else None
            if content:
                arrivals.append(time.perf_counter())
                text.append(content)
    return "".join(text), arrivals


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--memory-sessions", type=int, default=2000)
    args = ap.parse_args()

    up = Scripted()
    up.delay = args.delay_ms / 1000
    up.sent = {}
    up_port, app_port = free_port(), free_port()
    config = uvicorn.Config(up.app, host="127.0.0.1", port=up_port, log_level="warning", timeout_keep_alive=120)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    app = subprocess.Popen(
        [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream",
         f"http://127.0.0.1:{up_port}/v1", "--port", str(app_port), "--max-sessions", "100000"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{app_port}"
    limits = httpx.Limits(
        max_connections=4 * args.sessions, max_keepalive_connections=4 * args.sessions, keepalive_expiry=2
    )  # the server's keep-alive is 5 s: never reuse a connection it may be closing
    try:
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            for _ in range(600):
                try:
                    if (await client.get(base + "/v1/info")).status_code == 200:
                        break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
            await stream(client, base + "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "warm up"}], "stream": True})  # fmt: skip
            print(f"charfmt serve: {args.sessions} concurrent sessions, {args.rounds} rounds, "
                  f"a chunk every {args.delay_ms:g} ms (loopback, {os.cpu_count()} cores)")  # fmt: skip
            direct_p50, direct_p99, via_p50, via_p99, added50, added99 = [], [], [], [], [], []
            lost = 0
            cpu_per_reply = []
            for r in range(args.rounds):
                lat: dict[str, list[float]] = {"direct": [], "via": []}
                for how in ("direct", "via"):
                    cpu_before = cpu_seconds(app.pid)
                    async def one(i: int, how: str = how, r: int = r, lat: dict[str, list[float]] = lat) -> None:
                        nonlocal lost
                        tag = f"S{i}R{r}{'d' if how == 'direct' else 'v'}"
                        tag_key = tag[:-1]
                        if how == "direct":
                            content = f"<msg>hello {tag_key}</msg>"
                            url, body = f"http://127.0.0.1:{up_port}/v1/chat/completions", {
                                "messages": [{"role": "user", "content": content}], "stream": True}
                            expected = reply_for(content)
                        else:
                            url, body = base + "/v1/chat/completions", {
                                "messages": [{"role": "user", "content": f"hello {tag_key}"}], "stream": True,
                                "user": f"s{i}"}
                            expected = None
                        up.sent.pop(tag_key, None)  # type: ignore[union-attr]
                        text, arrivals = await stream(client, url, body)
                        sent = up.sent.pop(tag_key, [])  # type: ignore[union-attr]
                        if (expected is not None and text != expected) or tag_key not in text:
                            lost += 1
                        if not sent or len(arrivals) != (len(sent) if how == "direct" else 1):
                            lost += 1
                        if sent and arrivals:
                            lat[how].append((arrivals[-1] - sent[-1]) * 1000)

                    await asyncio.gather(*(one(i) for i in range(args.sessions)))
                    if how == "via":
                        cpu_per_reply.append((cpu_seconds(app.pid) - cpu_before) * 1000 / max(1, len(lat["via"])))
                d50, d99 = pct(lat["direct"], 0.5), pct(lat["direct"], 0.99)
                v50, v99 = pct(lat["via"], 0.5), pct(lat["via"], 0.99)
                direct_p50.append(d50)
                direct_p99.append(d99)
                via_p50.append(v50)
                via_p99.append(v99)
                added50.append(v50 - d50)
                added99.append(v99 - d99)
                print(f"  round {r + 1}: direct p50 {d50:.2f} p99 {d99:.2f} ms;"
                      f" via serve p50 {v50:.2f} p99 {v99:.2f} ms ({len(lat['via'])} replies,"
                      f" server CPU {cpu_per_reply[-1]:.3f} ms a reply)")  # fmt: skip
            med = statistics.median
            print(f"end-of-reply latency, median of rounds: direct p50 {med(direct_p50):.2f} ms,"
                  f" p99 {med(direct_p99):.2f} ms; via charfmt serve p50 {med(via_p50):.2f} ms,"
                  f" p99 {med(via_p99):.2f} ms")  # fmt: skip
            print(f"added by charfmt serve: p50 {med(added50):.2f} ms, p99 {med(added99):.2f} ms (target p99 <= 5 ms)")
            # the 2nd turn of each session carries only its own 1st turn
            mixed = 0
            for i in range(args.sessions):
                up.requests.clear()
                again = {"messages": [{"role": "user", "content": "again"}], "stream": True, "user": f"s{i}"}
                await stream(client, base + "/v1/chat/completions", again)
                prompt = json.dumps(up.requests[-1]["messages"])
                others = [j for j in range(args.sessions) if j != i and f"S{j}R" in prompt]
                mixed += bool(others) or f"S{i}R" not in prompt
            print(f"lost or wrong replies: {lost}; sessions whose prompt held another's turns: {mixed}")

            up.delay = 0.0
            before = rss_kib(app.pid)
            for start in range(0, args.memory_sessions, 100):
                await asyncio.gather(*(
                    client.post(base + "/v1/turn", json={"session": f"m{k}", "say": f"hello S{k}R0"})
                    for k in range(start, start + 100)
                ))  # fmt: skip
            after = rss_kib(app.pid)
            print(f"server RSS: {before / 1024:.1f} MiB -> {after / 1024:.1f} MiB after {args.memory_sessions} more "
                  f"sessions: {(after - before) * 1024 / args.memory_sessions / 1024:.1f} KiB per session")  # fmt: skip
    finally:
        app.terminate()
        try:
            app.wait(20)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait(10)
        server.should_exit = True
        await serving
    tracemalloc_per_session()


def tracemalloc_per_session() -> None:
    """One session with one exchange (the scripted reply), measured in this process."""
    from charfmt import Character, parse
    from charfmt.character import Exchange
    from charfmt.serve.sessions import SessionStore
    from charfmt.writer import canonical_form

    rex = Character.load(REX)
    store = SessionStore(max_sessions=100_000)
    replies = [parse(reply_for(f"hello S{k}R0"), vocabulary=rex.vocabulary, tags=rex.tags) for k in range(1000)]
    turns = [rex.shorthand(f"hello S{k}R0") for k in range(1000)]
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for k in range(1000):
        store.add(store.get(f"m{k}"), Exchange(user=turns[k], reply=canonical_form(replies[k], tags=rex.tags)))
    used = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    print(f"tracemalloc: {used / 1000 / 1024:.1f} KiB per session of one exchange (store, history, lock)")


if __name__ == "__main__":
    asyncio.run(main())
