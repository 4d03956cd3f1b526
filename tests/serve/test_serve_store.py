"""``charfmt serve`` over a store: sessions owned by their credential, kept across restarts and crashes,
shared by workers on one PostgreSQL, and a store that fails mid-turn said clearly (scripted upstreams only)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402
from charfmt.serve.owners import token_line  # noqa: E402
from charfmt.store import SessionKey, open_store  # noqa: E402
from charfmt.store.scopes import scope  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402
from store_targets import postgres_missing, postgres_schema  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
SCOPE = scope("Rex", Character.load(REX))
"""Rex's part of its sessions' namespaces: its name and its definition's digest (``turn/Rex~…``)."""
T = 10.0
ALICE, BOB = "alice-token-0123456789", "bob-token-9876543210xx"


@pytest.fixture(scope="module")
def rex() -> Character:
    return Character.load(REX)


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def upstream(scripted: tuple[Scripted, str]) -> tuple[Scripted, str]:
    up, _ = scripted
    up.mode, up.delay = "ok", 0.0
    up.requests.clear()
    return scripted


def sse(response: Any) -> list[dict[str, Any]]:
    return [
        json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"
    ]


def said(request: dict[str, Any]) -> list[str]:
    """The player's words of every user message the upstream was sent (the history's and the turn's)."""
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


# --- ownership ---------------------------------------------------------------------------------------------


def test_two_tokens_with_the_same_user_never_see_each_other(
    rex: Character, upstream: tuple[Scripted, str], tmp_path: Path
) -> None:
    """Per-player tokens: the same ``user``/``session`` name under two tokens is two sessions, through chat
    completions, ``/v1/turn`` (SSE) and the WebSocket; ``user`` alone (no token) is refused."""
    ws_client = pytest.importorskip("websockets.sync.client")
    up = upstream[0]
    tokens = tuple(tuple(token_line(n, t).split()) for n, t in (("alice", ALICE), ("bob", BOB)))
    settings = Settings(character=rex, upstream_url=upstream[1] + "/v1", tokens=tokens, store=tmp_path / "s.sqlite3")  # type: ignore[arg-type]
    auth = {name: {"Authorization": f"Bearer {t}"} for name, t in (("alice", ALICE), ("bob", BOB))}
    with loopback(create_app(settings)) as base:
        for who, secret in (("alice", "AlphaSecret"), ("bob", "BetaWords")):
            body = {"messages": [{"role": "user", "content": f"{secret} one"}], "user": "player-1"}
            assert httpx.post(base + "/v1/chat/completions", json=body, headers=auth[who], timeout=T).status_code == 200
            body = {"messages": [{"role": "user", "content": f"{secret} two"}], "user": "player-1"}
            assert httpx.post(base + "/v1/chat/completions", json=body, headers=auth[who], timeout=T).status_code == 200
            assert f"{secret} one" in said(up.requests[-1])[0]  # its own first turn came back
        chats = [said(r) for r in up.requests]
        assert all(not any("AlphaSecret" in s for s in c) for c in chats[2:])  # bob's prompts: nothing of alice's
        assert all(not any("BetaWords" in s for s in c) for c in chats[:2])
        assert len(chats[1]) == 2 and len(chats[3]) == 2  # each one's second turn carried its own first
        # /v1/turn: the same name is a third and a fourth session (a door of its own, per owner)
        up.requests.clear()
        for who in ("alice", "bob"):
            with httpx.stream("POST", base + "/v1/turn", json={"session": "player-1", "say": f"{who} via turn"},
                              headers=auth[who], timeout=T) as r:  # fmt: skip
                assert sse(r)[-1]["kind"] == "reply"
        assert [len(said(r)) for r in up.requests] == [1, 1]  # neither saw the chat door's turns, nor the other's
        # the WebSocket: bob continues *his* /v1/turn session, never alice's
        ws_url = base.replace("http://", "ws://") + "/v1/turn/ws?token=" + BOB
        with ws_client.connect(ws_url, close_timeout=2) as ws:
            ws.send(json.dumps({"session": "player-1", "say": "bob again"}))
            while json.loads(ws.recv(timeout=T))["kind"] != "reply":
                pass
        last = said(up.requests[-1])
        assert len(last) == 2 and "bob via turn" in last[0] and not any("alice" in s for s in last)
        # reading back: each sees its own sessions only; another's is the 404 of a session that never was
        mine = httpx.get(base + "/v1/sessions/chat/player-1", headers=auth["alice"], timeout=T).json()
        assert len(mine["exchanges"]) == 2 and "AlphaSecret" in json.dumps(mine) and "BetaWords" not in json.dumps(mine)
        listed = httpx.get(base + "/v1/sessions", headers=auth["bob"], timeout=T).json()["data"]
        assert sorted((s["door"], s["name"], s["turns"]) for s in listed) == [
            ("chat", "player-1", 2),
            ("turn", "player-1", 2),
        ]
        with httpx.stream("POST", base + "/v1/turn", json={"session": "bobs-only", "say": "mine"},
                          headers=auth["bob"], timeout=T) as r:  # fmt: skip
            assert sse(r)[-1]["kind"] == "reply"
        theirs = httpx.get(base + "/v1/sessions/turn/bobs-only", headers=auth["alice"], timeout=T)
        never = httpx.get(base + "/v1/sessions/turn/nobodys-00", headers=auth["alice"], timeout=T)
        assert theirs.status_code == never.status_code == 404
        assert theirs.text.replace("bobs-only", "X") == never.text.replace("nobodys-00", "X")  # reveals nothing
        assert httpx.delete(base + "/v1/sessions/turn/bobs-only", headers=auth["alice"], timeout=T).status_code == 404
        assert httpx.get(base + "/v1/sessions/turn/bobs-only", headers=auth["bob"], timeout=T).status_code == 200
        assert httpx.delete(base + "/v1/sessions/turn/bobs-only", headers=auth["bob"], timeout=T).status_code == 200
        assert httpx.get(base + "/v1/sessions/turn/bobs-only", headers=auth["bob"], timeout=T).status_code == 404
        assert httpx.get(base + "/v1/sessions/chat/player-1", timeout=T).status_code == 401
        # no token, or a wrong one: refused whatever ``user`` says
        body = {"messages": [{"role": "user", "content": "hi"}], "user": "player-1"}
        assert httpx.post(base + "/v1/chat/completions", json=body, timeout=T).status_code == 401
        wrong = {"Authorization": "Bearer alice-token-0123456789x"}
        assert httpx.post(base + "/v1/chat/completions", json=body, headers=wrong, timeout=T).status_code == 401
    with open_store(tmp_path / "s.sqlite3") as store:
        owners = sorted((s.key.owner, s.key.namespace, s.turns) for s in store.sessions(name="player-1"))
    assert owners == [
        ("alice", f"chat/{SCOPE}", 2),
        ("alice", f"turn/{SCOPE}", 1),
        ("bob", f"chat/{SCOPE}", 2),
        ("bob", f"turn/{SCOPE}", 2),
    ]


def test_the_tokens_file_holds_hashes_and_is_checked(tmp_path: Path) -> None:
    from charfmt import CharfmtError
    from charfmt.serve.owners import read_tokens

    line = token_line("alice", ALICE)
    assert ALICE not in line and line.startswith("alice sha256:")
    good = tmp_path / "tokens"
    good.write_text(f"# players\n{line}\n\n{token_line('bob', BOB)}\n", encoding="utf-8")
    assert [name for name, _ in read_tokens(good)] == ["alice", "bob"]
    for text, words in ((f"{line}\n{line}\n", ":2: the same token as line 1"), ("alice secret\n", ":1: expected"),
                        ("", "holds no token"), ("bad name sha256:00\n", ":1: expected")):  # fmt: skip
        good.write_text(text, encoding="utf-8")
        with pytest.raises(CharfmtError, match=words):
            read_tokens(good)
    with pytest.raises(CharfmtError, match="at least 16 characters"):
        token_line("alice", "short")


def test_a_bad_tokens_file_stops_the_start(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream", "http://127.0.0.1:9/v1",
           "--port", "0", "--tokens"]  # fmt: skip
    bad = tmp_path / "tokens"
    bad.write_text("alice hunter2\n", encoding="utf-8")
    for path, code, words in ((bad, 1, "tokens:1: expected 'NAME sha256:HEX'"),
                              (tmp_path / "missing", 2, "argument --tokens: ")):  # fmt: skip
        p = subprocess.run([*cmd, str(path)], capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == code and words in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert "hunter2" not in p.stderr  # (a token written there by mistake is never shown)


def test_new_and_hashed_tokens_from_the_command_line() -> None:
    cmd = [sys.executable, "-m", "charfmt", "serve"]
    made = subprocess.run([*cmd, "--new-token", "alice"], capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    token = made.stderr.strip().rsplit(" ", 1)[1]
    hashed = subprocess.run([*cmd, "--hash-token", "alice"], input=token + "\n", capture_output=True, text=True,
                            timeout=60, check=False)  # fmt: skip
    assert hashed.returncode == 0 and hashed.stdout == made.stdout == token_line("alice", token) + "\n"
    short = subprocess.run([*cmd, "--hash-token", "alice"], input="abc\n", capture_output=True, text=True,
                           timeout=60, check=False)  # fmt: skip
    assert short.returncode == 2 and "at least 16 characters" in short.stderr and "Traceback" not in short.stderr


# --- a SQLite store across restarts and crashes --------------------------------------------------------------


@contextlib.contextmanager
def serve_process(*flags: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``charfmt serve`` as a child process on a free port; its base URL once it listens."""
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--port", "0", *flags]
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env) as child:
        try:
            assert child.stderr is not None
            first = child.stderr.readline()
            assert first.startswith("charfmt serve: listening on"), first + child.stderr.read()
            base = first.split()[4]
            for _ in range(400):
                try:
                    httpx.get(base + "/v1/info", timeout=T)
                    break
                except httpx.TransportError:
                    time.sleep(0.025)
            yield child, base
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(T)


def turn(base: str, session: str, say: str) -> bool:
    """One ``/v1/turn``; whether its reply came whole (the turn finished)."""
    try:
        with httpx.stream("POST", base + "/v1/turn", json={"session": session, "say": say}, timeout=T) as r:
            objects = sse(r) if r.status_code == 200 else []
    except httpx.HTTPError:
        return False
    return bool(objects) and objects[-1]["kind"] == "reply"


@pytest.mark.long  # (about 70 s: a dozen server starts)
def test_a_server_killed_at_random_loses_no_finished_turn(upstream: tuple[Scripted, str], tmp_path: Path) -> None:
    """SIGKILL at random moments across >= 100 finished turns: every finished turn is in the store, in order,
    the file passes ``PRAGMA integrity_check``, and a restart serves every session."""
    up = upstream[0]
    up.delay = 0.002  # (a reply takes a few milliseconds: a kill often lands mid-turn)
    store = tmp_path / "sessions.sqlite3"
    flags = ("--upstream", upstream[1] + "/v1", "--store", str(store))
    rng = random.Random(37)
    finished: dict[str, list[str]] = {f"s{n}": [] for n in range(4)}
    in_flight: dict[str, list[str]] = {name: [] for name in finished}
    counter = 0
    kills = 0
    while sum(map(len, finished.values())) < 100:
        with serve_process(*flags) as (child, base):
            timer = threading.Timer(rng.uniform(0.05, 1.2), lambda c=child: c.send_signal(signal.SIGKILL))
            timer.start()
            try:
                while child.poll() is None:
                    name = rng.choice(sorted(finished))
                    counter += 1
                    say = f"T{counter}x"
                    (finished if turn(base, name, say) else in_flight)[name].append(say)
            finally:
                timer.cancel()
            kills += 1
    assert kills >= 5
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    with open_store(store) as opened:
        for name, done in finished.items():
            kept = [ex.user.chats[0].segments[-1].text for ex in opened.history(SessionKey("", f"turn/{SCOPE}", name))]
            assert [s for s in kept if s in done] == done  # every finished turn, in order
            assert set(kept) - set(done) <= set(in_flight[name])  # anything else was a turn in flight
    with serve_process(*flags) as (_, base):  # a restart serves every session: the next turn carries it back
        up.requests.clear()
        for name, done in finished.items():
            assert turn(base, name, "after the restart")
            assert all(any(s in m for m in said(up.requests[-1])) for s in done)


def test_a_store_that_cannot_be_opened_stops_the_start(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database " * 100, encoding="utf-8")
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream", "http://127.0.0.1:9/v1",
           "--port", "0"]  # fmt: skip
    for flags, words in ((["--store", str(notes)], "is not a SQLite database"),
                         (["--store", str(tmp_path / "no" / "s.db")], "does not exist"),
                         (["--store", str(tmp_path)], "is a folder")):  # fmt: skip
        p = subprocess.run([*cmd, *flags], capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == 1 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.strip().count("\n") == 0
    p = subprocess.run(
        [*cmd, "--store", str(notes), "--memory"], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 2 and "not allowed with" in p.stderr


def test_an_edited_character_names_the_sessions_it_does_not_resume(
    upstream: tuple[Scripted, str], tmp_path: Path
) -> None:
    """An edited card begins new sessions (its definition's digest is part of their namespace): a restart after a
    one-word edit answered ``p1`` as a stranger, silently (found by a newcomer's trial). The start line now counts
    the character's own sessions, and a note names those of another definition of it, with the command to see them."""
    store = tmp_path / "s.sqlite3"
    edited = tmp_path / "rex.toml"
    edited.write_text(REX.read_text(encoding="utf-8").replace('"crosses arms"', '"folds arms"'), encoding="utf-8")
    with serve_process("--upstream", upstream[1] + "/v1", "--store", str(store)) as (child, base):
        assert turn(base, "p1", "hello")
        child.terminate()
        child.wait(T)
    with serve_process("--upstream", upstream[1] + "/v1", "--store", str(store)) as (child, base):
        child.terminate()
        assert child.stderr is not None
        same = child.stderr.read()
    with serve_process("--upstream", upstream[1] + "/v1", "--store", str(store), "--character", str(edited)) as (
        child, base,
    ):  # fmt: skip
        child.terminate()
        assert child.stderr is not None
        changed = child.stderr.read()
    assert f"sessions kept in {store} (1 now, 1 of Rex)" in same and "note:" not in same, same
    assert f"sessions kept in {store} (1 now, 0 of Rex)" in changed, changed
    assert (
        "charfmt serve: note: 1 session of another definition of Rex (edited since?) is kept but not resumed;"
        f" this one's are turn/{scope('Rex', Character.load(edited))} and chat/{scope('Rex', Character.load(edited))}:"
        f" charfmt sessions list --store {store} shows each namespace"
    ) in changed, changed
    listed = subprocess.run([sys.executable, "-m", "charfmt", "sessions", "list", "--store", str(store), "--namespace",
                             "turn/Rex"], capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert listed.returncode == 0 and "p1" in listed.stdout, listed


def test_the_default_store_is_in_the_data_folder(upstream: tuple[Scripted, str], tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    with serve_process("--upstream", upstream[1] + "/v1", env=env) as (child, base):
        assert turn(base, "p1", "hello")
        child.terminate()
        assert child.stderr is not None
        log = child.stderr.read()
    store = tmp_path / "charfmt" / "sessions.sqlite3"
    assert f"sessions kept in {store} (0 now, 0 of Rex)" in log
    with open_store(store) as opened:
        assert [s.key for s in opened.sessions()] == [SessionKey("", f"turn/{SCOPE}", "p1")]
    with serve_process("--upstream", upstream[1] + "/v1", "--memory", env=env) as (child, base):
        assert turn(base, "p2", "hello")
        child.terminate()
        assert child.stderr is not None and "in memory only" in child.stderr.read()
    with open_store(store) as opened:
        assert len(opened.sessions()) == 1


def test_eviction_and_trimming_are_logged(
    rex: Character, upstream: tuple[Scripted, str], caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings(character=rex, upstream_url=upstream[1] + "/v1", max_sessions=2, session_bytes=1500))
    with caplog.at_level("INFO", logger="charfmt.serve"), loopback(app) as base:
        for key in ("a", "b", "c", "c", "c"):
            assert turn(base, key, "hello " * 20)
    lines = [r.getMessage() for r in caplog.records if r.name == "charfmt.serve"]
    assert any(line.startswith(f"session -:turn/{SCOPE}:a evicted (1 exchanges") and "more than 2 sessions" in line
               for line in lines), lines  # fmt: skip
    assert any(f"session -:turn/{SCOPE}:c:" in line and "oldest exchange(s) dropped" in line for line in lines), lines


# --- PostgreSQL: several workers, and a server that goes away -------------------------------------------------


@pytest.fixture
def postgres() -> Iterator[str]:
    why = postgres_missing()
    if why is not None:
        pytest.skip(why)
    with postgres_schema() as dsn:
        yield dsn


@pytest.mark.long  # (about 25 s each: 400 turns on two workers)
@pytest.mark.parametrize("engine", ["postgres", "sqlite"])
def test_two_workers_on_one_store_never_interleave_a_session(
    engine: str, upstream: tuple[Scripted, str], tmp_path: Path
) -> None:
    """200 sessions, each sent two turns at once, one to each worker (two ``serve`` processes on one
    PostgreSQL, or on one SQLite file): every history exact, and the turn that ran second was sent the
    first's exchange (none ran on a stale history)."""
    with contextlib.ExitStack() as stack:
        if engine == "postgres":
            why = postgres_missing()
            if why is not None:
                pytest.skip(why)
            target = stack.enter_context(postgres_schema())
        else:
            target = str(tmp_path / "s.sqlite3")
        _two_workers(upstream, target)


def _two_workers(upstream: tuple[Scripted, str], target: str) -> None:
    up = upstream[0]
    up.delay = 0.003
    flags = ("--upstream", upstream[1] + "/v1", "--store", target)
    with serve_process(*flags) as (_, one), serve_process(*flags) as (_, two):

        def send(job: tuple[int, int]) -> bool:
            session, k = job
            return turn((one, two)[k], f"s{session}", f"S{session}T{k}")

        jobs = [(s, k) for s in range(200) for k in (0, 1)]
        with ThreadPoolExecutor(24) as pool:
            results = list(pool.map(send, jobs))
    assert all(results)
    with open_store(target) as store:
        for s in range(200):
            kept = [
                ex.user.chats[0].segments[-1].text for ex in store.history(SessionKey("", f"turn/{SCOPE}", f"s{s}"))
            ]
            assert sorted(kept) == [f"S{s}T0", f"S{s}T1"], kept
            second = next(r for r in up.requests if kept[1] in said(r)[-1])
            assert len(said(second)) == 2 and kept[0] in said(second)[0]  # it saw the first turn: no interleaving


class _Proxy:
    """A TCP proxy on 127.0.0.1 to the test PostgreSQL's Unix socket; ``cut()`` drops every connection and
    refuses new ones (the server "goes away"), ``mend()`` lets them in again."""

    def __init__(self, socket_path: str) -> None:
        self.target = socket_path
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.pairs: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.target)
            self.pairs += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.open = False
        for s in self.pairs:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self.pairs.clear()

    def close(self) -> None:
        self.cut()
        self.listener.close()


def test_a_postgres_that_goes_away_mid_turn_is_one_clear_error(
    rex: Character, upstream: tuple[Scripted, str], postgres: str
) -> None:
    from urllib.parse import parse_qs, urlsplit

    query = parse_qs(urlsplit(postgres).query)
    sock_dir = query["host"][0]
    proxy = _Proxy(f"{sock_dir}/.s.PGSQL.5432")
    dsn = f"postgresql://charfmt@127.0.0.1:{proxy.port}/postgres?options={query['options'][0].replace('=', '%3D')}"
    up = upstream[0]
    try:
        with open_store(dsn) as store:
            app = create_app(Settings(character=rex, upstream_url=upstream[1] + "/v1", store=store))
            with loopback(app) as base:
                assert turn(base, "p1", "first words")
                up.mode = "slow"  # (a reply over a second or so: the database goes away while it streams)
                threading.Timer(0.3, proxy.cut).start()
                started = time.monotonic()
                with httpx.stream("POST", base + "/v1/turn", json={"session": "p1", "say": "lost"}, timeout=30) as r:
                    objects = sse(r) if r.status_code == 200 else [r.json() | {"status": r.status_code}]
                assert time.monotonic() - started < 25
                error = objects[-1]
                assert error.get("kind", "error") == "error" and error["status"] == 503, objects[-1]
                assert "session store" in json.dumps(error) or "lost during the turn" in json.dumps(error)
                up.mode = "ok"
                r = httpx.post(base + "/v1/turn", json={"session": "p1", "say": "while away"}, timeout=30)
                assert r.status_code == 503 and "cannot be reached" in r.json()["error"]["message"], r.text
                proxy.open = True  # the server is back: the next turn works, the first turn was kept
                assert turn(base, "p1", "back again")
        with open_store(postgres) as direct:
            kept = [ex.user.chats[0].segments[-1].text for ex in direct.history(SessionKey("", f"turn/{SCOPE}", "p1"))]
        assert kept == ["first words", "back again"]
    finally:
        proxy.close()


def test_a_store_locked_mid_turn_is_a_503_in_bounded_time(
    rex: Character, upstream: tuple[Scripted, str], tmp_path: Path
) -> None:
    """Another program holds the SQLite file while a turn ends: the turn is a 503 that says so within the
    store's wait, and what was finished before is there."""
    from charfmt.store.sqlite import SQLiteStore

    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path, busy=0.5) as store:
        app = create_app(Settings(character=rex, upstream_url=upstream[1] + "/v1", store=store))
        with loopback(app) as base:
            assert turn(base, "p1", "first words")
            blocker = sqlite3.connect(path, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            try:
                started = time.monotonic()
                r = httpx.post(base + "/v1/chat/completions", timeout=T, headers={"X-Charfmt-Session": "p2"},
                               json={"messages": [{"role": "user", "content": "hello"}]})  # fmt: skip
                assert time.monotonic() - started < 5
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            assert (
                r.status_code == 503 and "is locked by another program (waited 0.5 s)" in r.json()["error"]["message"]
            )
            assert turn(base, "p1", "second words")
        kept = [ex.user.chats[0].segments[-1].text for ex in store.history(SessionKey("", f"turn/{SCOPE}", "p1"))]
    assert kept == ["first words", "second words"]
