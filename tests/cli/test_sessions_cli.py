"""``charfmt chat --session`` resumes; ``charfmt sessions list|show|export|delete``; a scene's history loads back."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

import charfmt
from charfmt.cli import main
from charfmt.prompt.character import Exchange, history_from_jsonl, history_line
from charfmt.prompt.scene import Scene
from charfmt.prompt.userinput import UserTurn
from charfmt.store import SessionKey, open_store
from charfmt.store.scopes import scope

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX = str(ROOT / "examples" / "characters" / "rex.toml")
SCENE = ROOT / "examples" / "scenes" / "mars_shrine.toml"


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def upstream(scripted: tuple[Scripted, str]) -> tuple[Scripted, str]:
    scripted[0].mode = "ok"
    scripted[0].requests.clear()
    return scripted


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "charfmt", *argv], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip


def test_chat_session_resumes_where_it_stopped(
    upstream: tuple[Scripted, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up, base = upstream
    store = str(tmp_path / "s.sqlite3")
    chat = ["chat", "--character", REX, "--endpoint", base + "/v1", "--session", "bench", "--store", store]
    assert main([*chat, "--say", "fix my drone", "--say", "the left rotor"]) == 0
    first = capsys.readouterr().out
    assert "resumed" not in first
    assert main([*chat, "--say", "how much"]) == 0
    again = capsys.readouterr().out
    assert again.startswith("(resumed: 2 exchanges; the last reply was)\n")
    assert "the left rotor. Fine." in again.split("you> how much")[0]  # the last reply, shown before the turn
    sent = [m["content"] for m in up.requests[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert len(sent) == 5 and "fix my drone" in sent[0] and "left rotor" in sent[2] and "how much" in sent[4]
    with open_store(store) as opened:
        (info,) = opened.sessions()
    assert info.key.namespace.startswith("cli/Rex~") and info.key.name == "bench" and info.turns == 3
    assert main(["chat", "--character", REX, "--endpoint", base + "/v1", "--say", "hi"]) == 0  # no --session:
    with open_store(store) as opened:  # nothing kept
        assert [s.turns for s in opened.sessions()] == [3]


def test_chat_session_of_an_edited_character_says_why_it_is_not_resumed(
    upstream: tuple[Scripted, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An edited character begins a new session (its definition's digest); it was silent, so a developer
    tuning a character lost the conversation without a word (a newcomer's trial)."""
    _, base = upstream
    mine = tmp_path / "myrex.toml"
    mine.write_text(Path(REX).read_text(encoding="utf-8"), encoding="utf-8")
    store = str(tmp_path / "s.sqlite3")
    chat = ["chat", "--character", str(mine), "--endpoint", base + "/v1", "--session", "edit1", "--store", store]
    assert main([*chat, "--say", "hi"]) == 0
    assert "note:" not in capsys.readouterr().err  # (a first session: nothing to say)
    mine.write_text(mine.read_text(encoding="utf-8") + "\n# a comment\n", encoding="utf-8")
    assert main([*chat, "--say", "hi again"]) == 0  # (a comment: the same definition, resumed)
    assert "note:" not in capsys.readouterr().err
    text = mine.read_text(encoding="utf-8")
    mine.write_text(text.replace('persona = """', 'persona = """Edited. ', 1), encoding="utf-8")
    assert main([*chat, "--say", "hello"]) == 0
    err = capsys.readouterr().err
    with open_store(store) as opened:
        old = next(s.key for s in opened.sessions() if s.turns == 2)
    assert "charfmt: note: a new session 'edit1': the one of that name holds another definition" in err
    command = err.rpartition("it is kept: ")[2].strip()
    assert shlex.split(command) == [
        "charfmt",
        "sessions",
        "show",
        "--store",
        store,
        "--namespace",
        old.namespace,
        "edit1",
    ]
    assert main(shlex.split(command)[1:]) == 0  # (the command shown runs: the old session, kept)
    assert "hi again" in capsys.readouterr().out


def test_chat_session_usage_and_store_errors(tmp_path: Path) -> None:
    chat = ["chat", "--character", REX, "--endpoint", "http://127.0.0.1:9/v1", "--say", "hi"]
    p = run(*chat, "--session", "two words")
    assert p.returncode == 2 and "argument --session" in p.stderr
    p = run(*chat, "--store", str(tmp_path / "s.sqlite3"))
    assert p.returncode == 2 and "only with --session" in p.stderr
    notes = tmp_path / "notes.txt"
    notes.write_text("hello", encoding="utf-8")
    p = run(*chat, "--session", "a", "--store", str(notes))
    assert p.returncode == 1 and "is not a SQLite database" in p.stderr and "Traceback" not in p.stderr


def _stored(tmp_path: Path) -> tuple[str, list[Exchange]]:
    mio = charfmt.Character.load(ROOT / "examples" / "characters" / "mio.toml")
    history = charfmt.load_history(ROOT / "examples" / "history.jsonl", mio)
    path = str(tmp_path / "s.sqlite3")
    with open_store(path) as store:
        for ex in history:
            store.append(SessionKey("", "turn/Mio", "p1"), ex)
        store.append(SessionKey("alice", "chat/Mio", "p1"), history[0])
        store.append(SessionKey("alice", "chat/Mio", "solo"), history[1])
    return path, history


def test_sessions_list_show_and_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, history = _stored(tmp_path)
    assert main(["sessions", "list", "--store", store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["OWNER", "NAMESPACE", "NAME", "EXCHANGES", "BYTES", "LAST", "WRITTEN"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["alice", "chat/Mio", "solo", "1"], ["alice", "chat/Mio", "p1", "1"], ["-", "turn/Mio", "p1", "2"]]  # fmt: skip
    assert main(["sessions", "list", "--store", store, "--owner", "-", "--format", "jsonl"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["owner"] == "" and row["turns"] == 2 and row["updated"].endswith("Z")
    assert main(["sessions", "show", "solo", "--store", store]) == 0  # one session of that name: no --owner needed
    shown = capsys.readouterr().out
    assert "session alice:chat/Mio:solo: 1 exchange(s)" in shown and "裏山に何があるの？" in shown
    assert main(["sessions", "show", "p1", "--store", store]) == 1  # two of that name: which?
    assert "2 sessions are named 'p1'" in capsys.readouterr().err
    assert main(["sessions", "delete", "p1", "--owner", "alice", "--store", store]) == 0
    assert main(["sessions", "show", "p1", "--owner", "alice", "--store", store]) == 1
    assert "no session 'p1'" in capsys.readouterr().err
    with open_store(store) as opened:
        assert opened.history(SessionKey("", "turn/Mio", "p1")) == history  # the other p1 untouched


@pytest.mark.parametrize("fmt", ["jsonl", "pam", "uacs", "groupchat", "ailoy"])
def test_sessions_export_reads_back(tmp_path: Path, fmt: str) -> None:
    store, history = _stored(tmp_path)
    mio_file = str(ROOT / "examples" / "characters" / "mio.toml")
    out = tmp_path / f"p1.{fmt}"
    p = run("sessions", "export", "p1", "--owner", "-", "--to", fmt, "-o", str(out), "--store", store,
            "--character", mio_file)  # fmt: skip
    assert p.returncode == 0, p.stderr
    mio = charfmt.Character.load(mio_file)
    if fmt == "jsonl":
        assert charfmt.load_history(out, mio) == history
    else:
        from charfmt.interop import read

        assert [(e.user, e.reply) for e in read(fmt, out.read_text(encoding="utf-8"), mio)] == [
            (e.user, e.reply) for e in history
        ]


@pytest.mark.parametrize("character", [True, False])
def test_sessions_export_names_the_player_as_played(tmp_path: Path, character: bool) -> None:
    """A session played as Ren (``/v1/turn``'s ``user_name``) exported as a group chat named the player ``User``,
    with no way to say otherwise (found by a newcomer's trial): ``--user-name`` names them."""
    store, _ = _stored(tmp_path)
    mio = ["--character", str(ROOT / "examples" / "characters" / "mio.toml")] if character else []
    argv = ["sessions", "export", "p1", "--owner", "-", "--to", "groupchat", "--store", store, *mio]
    named = run(*argv, "--user-name", "Ren")
    unnamed = run(*argv)
    assert named.returncode == 0 and unnamed.returncode == 0, (named.stderr, unnamed.stderr)
    from charfmt.interop import speaker_names

    # (the file's names, or the one the store's namespace holds and User)
    player, name = ("旅人", "ミオ") if character else ("User", "Mio")
    assert speaker_names("groupchat", json.loads(named.stdout)) == ("Ren", name)
    assert speaker_names("groupchat", json.loads(unnamed.stdout)) == (player, name)
    bad = run(*argv, "--user-name", "")
    assert bad.returncode == 2 and "argument --user-name" in bad.stderr, bad.stderr


def test_sessions_errors_are_one_line(tmp_path: Path) -> None:
    store, _ = _stored(tmp_path)
    for argv, code, words in (
        (["sessions", "show", "nobody", "--store", store], 1, "no session 'nobody'"),
        (["sessions", "show", "bad name!", "--store", store], 2, "NAME is 1 to"),  # (was: "no session")
        (["sessions", "list", "--store", str(tmp_path / "missing" / "s.db")], 1, "does not exist"),
        (["sessions"], 2, "the following arguments are required"),
        (["sessions", "export", "p1", "--owner", "-", "--to", "yaml", "--store", store], 2, "invalid choice"),
        (["sessions", "export", "p1", "--owner", "-", "-o", str(tmp_path), "--store", store], 2, "cannot write"),
    ):
        p = run(*argv)
        assert p.returncode == code and words in p.stderr and "Traceback" not in p.stderr, (argv, p.stderr)
        assert p.stderr.strip().count("\n") == 0, p.stderr


def test_a_scenes_history_loads_back_with_the_scene(tmp_path: Path) -> None:
    """A scene's reply whose speaker uses an emotion only it has: read with the scene (each speaker's own
    vocabulary) it loads; read with one cast member it fails that member's vocabulary check."""
    scene = Scene.load(SCENE)
    reply = scene.parse(json.dumps({"chats": [
        {"type": "C", "order": 1, "speaker": "rex", "body": "<emo>annoyed</emo>\n<msg>No.</msg>"},
        {"type": "C", "order": 2, "speaker": "mio", "body": "<emo>shy</emo>\n<msg>えっと…</msg>"}]}))  # fmt: skip
    history = [*scene.examples, Exchange(user=UserTurn.say("the bell?"), reply=reply)]
    path = tmp_path / "scene.jsonl"
    path.write_text("".join(history_line(ex) for ex in history), encoding="utf-8")
    assert charfmt.load_history(path, scene) == history
    with pytest.raises(charfmt.CharfmtError, match="CF301"):
        charfmt.load_history(path, scene.cast["mio"])
    wrong = path.read_text(encoding="utf-8").replace("annoyed", "shy")  # mio's emotion in rex's mouth
    with pytest.raises(charfmt.CharfmtError, match="CF306"):
        history_from_jsonl(wrong, scene)


def test_a_scene_session_is_kept_and_exported(tmp_path: Path, upstream: tuple[Scripted, str]) -> None:
    from charfmt.serve import Settings, create_app

    scene = Scene.load(SCENE)
    store = tmp_path / "s.sqlite3"
    upstream[0].mode = "scene:rex"
    app = create_app(Settings(character=scene.cast["rex"], scene=scene, upstream_url=upstream[1] + "/v1",
                              store=store))  # fmt: skip
    with loopback(app) as base:
        for say in ("[joy] the bell", "and the rope"):
            assert httpx.post(base + "/v1/turn", json={"session": "s", "say": say}, timeout=10).status_code == 200
    out = tmp_path / "scene.jsonl"
    assert run("sessions", "export", "s", "--store", str(store), "-o", str(out)).returncode == 0
    loaded = charfmt.load_history(out, scene)
    assert [ex.reply.chats[0].speaker for ex in loaded] == ["rex", "rex"]
    with open_store(store) as opened:
        assert opened.history(SessionKey("", f"turn/{scope(scene.name, scene)}", "s")) == loaded


def test_the_sessions_docs_python_runs(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "SESSIONS.md").read_text(encoding="utf-8")
    (block,) = [part.split("\n```", 1)[0] for part in text.split("```python\n")[1:]]
    monkeypatch.chdir(ROOT)
    exec(compile(block, "docs/SESSIONS.md", "exec"), {})
    assert capsys.readouterr().out == "[('player-1', 2)]\n"


def test_the_sessions_docs_commands_exist() -> None:
    """Every flag docs/SESSIONS.md shows is one its command takes (its --help names it)."""
    import re

    text = (ROOT / "docs" / "SESSIONS.md").read_text(encoding="utf-8")
    for command in ("serve", "chat", "sessions list", "sessions export", "sessions delete"):
        helped = run(*command.split(), "--help").stdout
        lines = [line for line in text.splitlines() if f"charfmt {command}" in line]
        for flag in {f for line in lines for f in re.findall(r"(--[a-z-]+)", line)}:
            assert flag in helped, (command, flag)


def test_a_store_that_fails_mid_chat_is_one_error_line_and_the_chat_goes_on(tmp_path: Path) -> None:
    """``chat --session``: a store locked by another program when a turn is kept: one error line, status 1,
    the next turn kept once the lock is gone; what was kept before stays."""
    import io
    import sqlite3

    from charfmt.chat import run as chat_run
    from charfmt.store.sqlite import SQLiteStore

    rex = charfmt.Character.load(REX)
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>neutral</emo>\\n<msg>Bolts.</msg>"}]}'
    path = tmp_path / "s.sqlite3"
    key = SessionKey("", "cli/Rex", "bench")
    blocker = sqlite3.connect(path, isolation_level=None)

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        said = messages[-1]["content"]
        if "two" in said:
            blocker.execute("BEGIN EXCLUSIVE")  # (another program takes the file while turn two runs)
        elif "three" in said and blocker.in_transaction:
            blocker.execute("ROLLBACK")
        yield text

    out, err = io.StringIO(), io.StringIO()
    with SQLiteStore(path, busy=0.2) as store:
        history = store.history(key)
        status = chat_run(rex, generate=generate, says=["one", "two", "three"], out=out, err=err, stats=[],
                          history=history, keep=lambda ex: store.append(key, ex))  # fmt: skip
        kept = [ex.user.chats[0].segments[-1].text for ex in store.history(key)]
    blocker.close()
    assert status == 1 and kept == ["one", "three"]
    (line,) = err.getvalue().splitlines()
    assert line.startswith("charfmt: error: ") and "is locked by another program" in line
    assert line.endswith("the turn was not kept in the session")
