"""Every subcommand's error paths end in the documented exit code and a clear message, never a traceback.

The rules (``charfmt/cli/_io.py``): 0 success; 1 a file was read but what it holds is rejected
(an empty or binary reply, a character file that is not TOML or not UTF-8); 2 a usage error
(a bad option value) or a file that cannot be used at all (missing, a directory, closed
standard input, an output folder that does not exist, larger than ``--max-size``); 130 Ctrl-C.
Errors of kind 2 are exactly one line, ``charfmt: error: ...``.

Each cell of the table runs in-process (``main([...])``) and as ``python -m charfmt``; the
subprocesses run concurrently, once per module.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import ROOT

import charfmt
from charfmt.cli import main

GOOD = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>わあ🎉</msg>"}]}'
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe\x80garbage"
CHARACTER = ROOT / "examples" / "characters" / "mio.toml"
HISTORY = ROOT / "examples" / "history.jsonl"
PACKAGE_ROOT = Path(charfmt.__file__).resolve().parent.parent
"""Where the charfmt under test lives: the subprocesses import the same one."""


def _lenient_exit(data: bytes) -> int:
    """The exit code of a lenient command: 1 when an error is left after repairs, else 0."""
    return 1 if any(d.severity == "error" for d in charfmt.parse(data, lenient=True).diagnostics) else 0


@dataclass(frozen=True)
class Cell:
    """One run of the command line: ``{placeholders}`` in ``argv`` name files of the ``files`` fixture."""

    command: str
    condition: str
    argv: tuple[str, ...]
    exit: int | Callable[[], int]
    closed_stdin: bool = False
    shows: str = ""
    """Text the output (stdout and stderr together) must hold, such as a diagnostic code."""
    subprocess: bool = False
    """Also run as ``python -m charfmt``: each command's closed-stdin cell and one unreadable-file cell."""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.command}-{self.condition}"

    def expected(self) -> int:
        return self.exit if isinstance(self.exit, int) else self.exit()


def _cells() -> Iterator[Cell]:
    reply = {"parse": ("parse",), "check": ("check",), "fix": ("fix",), "stream": ("stream", "--strict", "--replay")}
    for command, prefix in reply.items():
        yield Cell(command, "missing", (*prefix, "{missing}"), 2, subprocess=True)
        yield Cell(command, "directory", (*prefix, "{dir}"), 2)
        yield Cell(command, "empty", (*prefix, "{empty}"), 1, shows="CF003", subprocess=command == "parse")
        binary = (lambda: _lenient_exit(BINARY)) if command == "fix" else 1
        yield Cell(command, "binary", (*prefix, "{binary}"), binary, shows="CF001")
        stdin = ("stream",) if command == "stream" else (command, "-")
        yield Cell(command, "closed-stdin", stdin, 2, closed_stdin=True, subprocess=True)
        yield Cell(command, "max-size-0", (*prefix, "{good}", "--max-size", "0"), 2)
        yield Cell(command, "max-size-negative", (*prefix, "{good}", "--max-size", "-1"), 2)
        yield Cell(command, "max-size-word", (*prefix, "{good}", "--max-size", "lots"), 2)
        yield Cell(command, "good", (*prefix, "{good}"), 0)
        yield Cell(command, "max-size-huge", (*prefix, "{good}", "--max-size", str(10**15)), 0)  # not allocated
        yield Cell(command, "nul-in-path", (*prefix, "{good}\0"), 2)
    yield Cell("parse", "lenient-empty", ("parse", "--lenient", "{empty}"), 1, shows="CF003")
    yield Cell("parse", "format", ("parse", "--format", "xml", "{good}"), 2)
    yield Cell("check", "format", ("check", "--format", "xml", "{good}"), 2)
    yield Cell("fix", "indent-negative", ("fix", "--indent", "-1", "{good}"), 2)
    yield Cell("stream", "lenient-empty", ("stream", "--replay", "{empty}"), 1, shows="CF003")
    yield Cell("stream", "stdin-empty", ("stream",), 1, shows="CF003")
    for value in ("0", "-1", "two"):
        yield Cell("stream", f"chunk-{value}", ("stream", "--replay", "{good}", "--chunk", value), 2)
    yield Cell("stream", "chunk", ("stream", "--replay", "{good}", "--chunk", "0"), 2)
    for value in ("-1", "nan", "inf", "1e9"):
        yield Cell("stream", f"delay-{value}", ("stream", "--replay", "{good}", "--delay-ms", value), 2)

    render = ("render", "--say", "[joy] hi", "--character")
    yield Cell("render", "missing", (*render, "{missing}"), 2, subprocess=True)
    yield Cell("render", "directory", (*render, "{dir}"), 2)
    yield Cell("render", "empty", (*render, "{empty}"), 1, shows="empty file")
    yield Cell("render", "binary", (*render, "{binary}"), 1, shows="not UTF-8", subprocess=True)
    yield Cell("render", "closed-stdin", (*render, "{character}"), 0, closed_stdin=True, subprocess=True)
    yield Cell("render", "say-empty", ("render", "--character", "{character}", "--say", ""), 2, subprocess=True)
    yield Cell("render", "say-blank", ("render", "--character", "{character}", "--say", " \t\u3000"), 2)
    yield Cell("render", "budget-negative", (*render, "{character}", "--budget", "-1"), 2)
    yield Cell("render", "budget-0", (*render, "{character}", "--budget", "0"), 2)
    yield Cell("render", "provider", (*render, "{character}", "--provider", "nope"), 2)
    yield Cell("render", "good", (*render, "{character}", "--history", "{history}"), 0)
    history = (*render, "{character}", "--history")
    yield Cell("render", "history-missing", (*history, "{missing}"), 2)
    yield Cell("render", "history-directory", (*history, "{dir}"), 2)
    yield Cell("render", "history-empty", (*history, "{empty}"), 0)  # no past exchanges
    yield Cell("render", "history-binary", (*history, "{binary}"), 1, shows="not UTF-8")
    templates = (*render, "{character}", "--templates")
    yield Cell("render", "templates-missing", (*templates, "{missing}"), 2)
    yield Cell("render", "templates-file", (*templates, "{good}"), 2)
    yield Cell("render", "history-nul-in-path", (*history, "{history}\0"), 2)
    yield Cell("render", "templates-nul-in-path", (*templates, "{dir}\0"), 2)
    yield Cell("render", "templates-empty-folder", (*templates, "{dir}"), 0)  # the built-ins

    grammar = ("grammar", "--target", "lark", "--character")
    yield Cell("grammar", "missing", (*grammar, "{missing}"), 2, subprocess=True)
    yield Cell("grammar", "directory", (*grammar, "{dir}"), 2)
    yield Cell("grammar", "empty", (*grammar, "{empty}"), 1, shows="empty file")
    yield Cell("grammar", "binary", (*grammar, "{binary}"), 1, shows="not UTF-8")
    yield Cell("grammar", "closed-stdin", (*grammar, "{character}"), 0, closed_stdin=True, subprocess=True)
    yield Cell("grammar", "target", ("grammar", "--target", "yacc"), 2)
    yield Cell("grammar", "emotions-none", ("grammar", "--target", "regex", "--emotions", " , "), 2)
    yield Cell("grammar", "emotions-bad", ("grammar", "--target", "regex", "--emotions", "a<b"), 2)

    fuzz = ("fuzz", "--count", "2", "--out")
    yield Cell("fuzz", "missing", (*fuzz, "{missing}/x.jsonl"), 2, subprocess=True)
    yield Cell("fuzz", "directory", (*fuzz, "{dir}"), 2)
    yield Cell("fuzz", "nul-in-path", (*fuzz, "{dir}/x\0"), 2)
    yield Cell("fuzz", "empty", (*fuzz, "{out_empty}"), 0)  # an existing file is replaced
    yield Cell("fuzz", "binary", (*fuzz, "{out_binary}"), 0)
    yield Cell("fuzz", "closed-stdin", ("fuzz", "--count", "1"), 0, closed_stdin=True, subprocess=True)
    yield Cell("fuzz", "count-negative", ("fuzz", "--count", "-1"), 2)
    yield Cell("fuzz", "count-word", ("fuzz", "--count", "many"), 2)
    yield Cell("fuzz", "count-fraction", ("fuzz", "--count", "1.5"), 2)
    yield Cell("fuzz", "seed-word", ("fuzz", "--seed", "x"), 2)

    yield Cell("schema", "closed-stdin", ("schema",), 0, closed_stdin=True, subprocess=True)
    yield Cell("schema", "provider", ("schema", "--provider", "nope"), 2)
    yield Cell("demo", "closed-stdin", ("demo",), 0, closed_stdin=True, subprocess=True)
    yield Cell("demo", "extra-argument", ("demo", "more"), 2)
    yield Cell("(none)", "no-command", (), 2)


CELLS = list(_cells())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The files the cells name; outputs get their own so that runs do not share them."""
    tmp = tmp_path_factory.mktemp("cli_errors")
    (tmp / "dir").mkdir()
    (tmp / "empty").write_bytes(b"")
    (tmp / "binary").write_bytes(BINARY)
    (tmp / "good.json").write_text(GOOD, encoding="utf-8")
    names = {
        "missing": str(tmp / "missing"),
        "dir": str(tmp / "dir"),
        "empty": str(tmp / "empty"),
        "binary": str(tmp / "binary"),
        "good": str(tmp / "good.json"),
        "character": str(CHARACTER),
        "history": str(HISTORY),
    }
    for how in ("inproc", "subproc"):
        (tmp / how).mkdir()
        (tmp / how / "out_empty").write_bytes(b"")
        (tmp / how / "out_binary").write_bytes(BINARY)
    names["tmp"] = str(tmp)
    return names


def _argv(cell: Cell, files: dict[str, str], how: str) -> list[str]:
    outs = {k: str(Path(files["tmp"], how, k)) for k in ("out_empty", "out_binary")}
    return [a.format(**files, **outs) for a in cell.argv]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _close_stdin() -> None:
    os.close(0)


def _check(cell: Cell, code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err, err
    assert code == cell.expected(), f"exit {code}; stderr: {err!r}"
    if code == 2:
        assert err.startswith("charfmt: error: ") and err.count("\n") == 1, err
    if cell.shows:
        assert cell.shows in out + err


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_in_process(
    cell: Cell, files: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", None if cell.closed_stdin else io.TextIOWrapper(io.BytesIO(b"")))
    code = main(_argv(cell, files, "inproc"))
    captured = capsys.readouterr()
    _check(cell, code, captured.out, captured.err)


@pytest.fixture(scope="module")
def subprocess_runs(files: dict[str, str]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every subprocess cell, run side by side."""
    env = _env()

    def run(cell: Cell) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "charfmt", *_argv(cell, files, "subproc")],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            cwd=files["tmp"],
            timeout=120,
            preexec_fn=_close_stdin if cell.closed_stdin else None,
            check=False,
        )

    chosen = [c for c in CELLS if c.subprocess]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip((c.id for c in chosen), pool.map(run, chosen), strict=True))


@pytest.mark.parametrize("cell", [c for c in CELLS if c.subprocess], ids=lambda c: c.id)
def test_subprocess(cell: Cell, subprocess_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    done = subprocess_runs[cell.id]
    _check(cell, done.returncode, done.stdout, done.stderr)


def test_every_command_meets_every_condition() -> None:
    """The table is complete: each command that reads a file meets each kind of bad file and a bad
    option value; each command runs as a real process with standard input closed."""
    conditions = {"missing", "directory", "empty", "binary", "closed-stdin"}
    for command in ("parse", "check", "fix", "stream", "render", "grammar", "fuzz"):
        have = {c.condition for c in CELLS if c.command == command}
        assert conditions <= have, (command, conditions - have)
    for command in ("parse", "check", "fix", "stream", "render", "grammar", "fuzz", "schema", "demo"):
        cells = [c for c in CELLS if c.command == command]
        assert any(c.expected() == 2 and not c.closed_stdin for c in cells), command  # a bad option or file
        assert any(c.closed_stdin and c.subprocess for c in cells), command


# -- the defects of issue 11 (4, 17) and 12 (3), one by one ---------------------------------


def _python_m(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    options: dict[str, object] = {"capture_output": True, "text": True, "env": _env(), "timeout": 60, **kwargs}
    if "stdout" in kwargs:
        del options["capture_output"]
        options["stderr"] = subprocess.PIPE
    return subprocess.run([sys.executable, "-m", "charfmt", *argv], check=False, **options)  # type: ignore[call-overload, no-any-return]


def test_size_limit_names_the_real_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "big.json"
    p.write_bytes(b" " * 1500 + GOOD.encode())
    size = p.stat().st_size
    assert main(["check", "--max-size", "1000", str(p)]) == 1
    assert f"CF002 input is {size:,} bytes long; the maximum is 1,000" in capsys.readouterr().out
    assert main(["parse", "--max-size", "1000", str(p)]) == 1
    assert f"{size:,} bytes" in capsys.readouterr().err


def test_size_limit_on_a_pipe_says_more_than(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b" " * 5000 + GOOD.encode())))
    assert main(["parse", "--lenient", "--max-size", "1000", "-"]) == 1
    out = capsys.readouterr().out
    assert "CF002 input is more than 1,000 bytes long" in out
    assert "1,001" not in out  # not the size of what was read to find out


@pytest.mark.parametrize(
    "argv",
    [
        ["stream", "--replay", "/dev/zero"],
        ["render", "--character", "/dev/zero", "--say", "hi"],
        ["render", "--character", str(CHARACTER), "--history", "/dev/zero", "--say", "hi"],
        ["grammar", "--target", "gbnf", "--character", "/dev/zero"],
    ],
    ids=["replay", "character", "history", "grammar"],
)
def test_endless_files_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    assert main([*argv, "--max-size", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: cannot ") and err.count("\n") == 1
    assert "/dev/zero" in err


def test_oversized_option_files_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(CHARACTER.read_bytes())
    size = big.stat().st_size
    assert main(["render", "--character", str(big), "--say", "hi", "--max-size", str(size - 1)]) == 2
    assert f"{size:,} bytes; the maximum is {size - 1:,}" in capsys.readouterr().err
    assert main(["render", "--character", str(big), "--say", "hi", "--max-size", str(size)]) == 0


def test_invalid_character_file_is_exit_1_missing_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\npersona = "y"\nemotions = [\n', encoding="utf-8")
    for argv in (["render", "--say", "hi", "--character"], ["grammar", "--target", "lark", "--character"]):
        assert main([*argv, str(bad)]) == 1
        assert main([*argv, str(tmp_path / "missing.toml")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith(f"charfmt: error: {bad}") and "TOML" in err[0]
        assert err[1] == f"charfmt: error: cannot read {tmp_path / 'missing.toml'}: No such file or directory"


def test_replay_that_is_not_utf8_streams_like_standard_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "latin1.json"
    data = GOOD.replace("わあ🎉", "caf\u00e9").encode("latin-1")
    p.write_bytes(data)
    assert main(["stream", "--strict", "--replay", str(p)]) == 1
    assert "CF001" in capsys.readouterr().err
    code = main(["stream", "--replay", str(p), "--chunk", "3"])
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert any(e["kind"] == "diagnostic" and e["diagnostic"]["code"] == "CF001" for e in events)
    assert "".join(e["text"] for e in events if e["kind"] == "text") == "caf\ufffd"


def test_lone_surrogate_is_printed_escaped() -> None:
    """``"\\ud800"`` in a reply's JSON reaches messages and text; printing it must not crash."""
    text = '{"chats":[{"type":"\\ud800","order":1,"body":"<emo>\\ud800</emo>\\n<msg>a\\ud800</msg>"}]}'
    runs = {}
    for argv in (("check", "-"), ("check", "--format", "jsonl", "-"), ("parse", "--lenient", "--format", "json", "-")):
        done = runs[argv] = _python_m(*argv, input=text)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == (_lenient_exit(text.encode()) if "--lenient" in argv else 1)
        assert "\\ud800" in done.stdout
    record = json.loads(runs["check", "--format", "jsonl", "-"].stdout.splitlines()[0])
    assert record["code"] == "CF107" and "\ud800" in record["message"]  # valid JSON, the same text


def test_ascii_terminal_gets_escapes_and_valid_json(tmp_path: Path) -> None:
    p = tmp_path / "good.json"
    p.write_text(GOOD, encoding="utf-8")
    env = {**_env(), "PYTHONIOENCODING": "ascii"}
    pretty = _python_m("parse", str(p), env=env)
    assert pretty.returncode == 0 and "\\u308f\\u3042" in pretty.stdout, pretty.stderr
    as_json = _python_m("parse", "--format", "json", str(p), env=env)
    assert as_json.returncode == 0 and as_json.stdout.isascii()
    assert json.loads(as_json.stdout)["chats"][0]["segments"][1]["text"] == "わあ🎉"
    fixed = _python_m("fix", str(p), env=env)
    assert fixed.returncode == 0 and charfmt.parse(fixed.stdout) == charfmt.parse(GOOD)


def test_closed_and_full_standard_output() -> None:
    closed = _python_m("schema", stdout=None, stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2
    assert closed.stderr == "charfmt: error: cannot write standard output: it is closed\n"
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            done = _python_m("schema", stdout=full)
        assert done.returncode == 2
        assert done.stderr.startswith("charfmt: error: cannot write output: ") and done.stderr.count("\n") == 1


def test_reader_that_goes_away_is_no_error(tmp_path: Path) -> None:
    """``charfmt fuzz | head -1``: the broken pipe ends the run quietly."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "charfmt", "fuzz", "--count", "2000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert err == ""


def _wait_until_blocked(pid: int) -> None:
    """Until the process sleeps (blocked reading standard input); a short pause where /proc is missing."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 20
    while stat.exists() and time.monotonic() < deadline:
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "S":
            time.sleep(0.1)
            return
        time.sleep(0.02)
    time.sleep(0.5)


def _interrupt(argv: list[str], ready: Callable[[subprocess.Popen[bytes]], None]) -> tuple[int, str]:
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:
        ready(proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, err.decode()


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_while_streaming_is_one_line_exit_130() -> None:
    def first_event(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b'{"chats":[{"type":"C","order":1,"body":"<msg>hel')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["kind"] == "chat_start"
        _wait_until_blocked(proc.pid)

    code, err = _interrupt([sys.executable, "-m", "charfmt", "stream"], first_event)
    assert (code, err) == (130, "charfmt: error: interrupted\n")


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_while_parse_reads_standard_input_is_one_line_exit_130() -> None:
    script = "import sys; from charfmt.cli import main; print('ready', flush=True); sys.exit(main(['parse', '-']))"

    def reading(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b'{"chats":[')
        proc.stdin.flush()
        assert proc.stdout.readline() == b"ready\n"
        _wait_until_blocked(proc.pid)

    code, err = _interrupt([sys.executable, "-c", script], reading)
    assert (code, err) == (130, "charfmt: error: interrupted\n")
