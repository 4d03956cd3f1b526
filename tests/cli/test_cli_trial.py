"""Defects a new-user trial of the command line found, one regression test (or a few) each.

1. ``fix --diff`` wrote a malformed diff for an input without a final newline;
2. ``fuzz`` built every case before writing one, and ``--out`` truncated the old file first;
3. diagnostics of ``parse --lenient`` (pretty) and ``stream --strict --replay`` did not name the file;
4. ``render --say ''`` sent an empty user turn.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import ROOT

import charfmt
import charfmt.fuzz
from charfmt.cli import main
from charfmt.fuzz import Damaged, fuzz_cases, iter_fuzz_cases

PACKAGE_ROOT = Path(charfmt.__file__).resolve().parent.parent
CHARACTER = ROOT / "examples" / "characters" / "mio.toml"
FENCED = 'Sure!\n```json\n{"chats": [{"type": "chat", "body": "<EMO>joy</EMO><msg>Hi"}]}\n```'
"""The trial's reply: prose, a fence, a non-canonical chat, and no final newline."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _charfmt(*argv: str) -> list[str]:
    return [sys.executable, "-m", "charfmt", *argv]


# -- 1. fix --diff ---------------------------------------------------------------------------

_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")
"""A line as ``patch`` reads one: up to and with ``\\n`` only (``\\r``, U+2028 are characters)."""


def _apply(original: str, diff: str) -> str:
    """Apply a unified diff strictly, as ``patch`` would: every context and removed line must match."""
    old = _LINE.findall(original)
    lines = _LINE.findall(diff)
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ "), lines[:2]
    out: list[str] = []
    pos, i = 0, 2
    while i < len(lines):
        hunk = re.fullmatch(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@\n", lines[i])
        assert hunk, f"not a hunk header: {lines[i]!r}"
        old_count, new_count = int(hunk[2] or 1), int(hunk[4] or 1)
        start = int(hunk[1]) - 1 if old_count else int(hunk[1])
        out.extend(old[pos:start])
        pos, i = start, i + 1
        seen_old = seen_new = 0
        while i < len(lines) and not lines[i].startswith("@@ "):
            line = lines[i]
            i += 1
            assert line.endswith("\n") and line[0] in " -+", f"malformed diff line {line!r}"
            text = line[1:]
            if i < len(lines) and lines[i] == "\\ No newline at end of file\n":
                text, i = text[:-1], i + 1
            if line[0] in " -":
                assert pos < len(old) and old[pos] == text, f"{text!r} is not line {pos + 1} {old[pos : pos + 1]}"
                pos, seen_old = pos + 1, seen_old + 1
            if line[0] in " +":
                out.append(text)
                seen_new += 1
        assert (seen_old, seen_new) == (old_count, new_count), hunk.group()
    out.extend(old[pos:])
    return "".join(out)


DIFF_INPUTS = {
    "no-final-newline": FENCED,
    "final-newline": FENCED + "\n",
    "crlf": FENCED.replace("\n", "\r\n"),
    "canonical-without-newline": '{"chats":[{"type":"I","order":1,"body":"+1"}]}',
    "line-separator-in-a-string": '```\n{"chats":[{"type":"C","order":1,"body":"<msg>a\u2028b</msg>"}]}\n```',
    "one-line-prose-only": "Okay.",
}


@pytest.mark.parametrize("text", DIFF_INPUTS.values(), ids=DIFF_INPUTS.keys())
def test_fix_diff_applies_to_the_input(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "b.txt"
    p.write_bytes(text.encode())
    code = main(["fix", str(p)])
    fixed = capsys.readouterr().out
    assert main(["fix", "--diff", str(p)]) == code
    diff = capsys.readouterr().out
    assert diff, "the input is not canonical: there is a difference"
    assert _apply(text, diff) == fixed
    if not text.endswith("\n"):
        assert "\n\\ No newline at end of file\n" in diff


def test_fix_diff_of_a_canonical_file_is_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "good.json"
    p.write_text('{"chats":[{"type":"I","order":1,"body":"+1"}]}\n', encoding="utf-8")
    assert main(["fix", "--diff", str(p)]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.skipif(shutil.which("patch") is None, reason="no patch program")
@pytest.mark.parametrize(
    "data",
    [FENCED.encode(), FENCED.encode() + b"\n", FENCED.replace("Sure!", "S\xfcre!").encode("latin-1")],
    ids=["no-final-newline", "final-newline", "not-utf8"],
)
def test_patch_applies_fix_diff(data: bytes, tmp_path: Path) -> None:
    """The trial's repro: ``charfmt fix --diff b.txt > d.patch; patch b.txt < d.patch``."""
    p = tmp_path / "b.txt"
    p.write_bytes(data)
    fixed = subprocess.run(_charfmt("fix", "b.txt"), cwd=tmp_path, env=_env(), capture_output=True, check=False)
    diff = subprocess.run(
        _charfmt("fix", "--diff", "b.txt"), cwd=tmp_path, env=_env(), capture_output=True, check=False
    )
    assert diff.returncode == fixed.returncode and b"Traceback" not in diff.stderr
    (tmp_path / "d.patch").write_bytes(diff.stdout)
    with (tmp_path / "d.patch").open("rb") as patch_file:
        done = subprocess.run(["patch", "b.txt"], cwd=tmp_path, stdin=patch_file, capture_output=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert p.read_bytes() == fixed.stdout


# -- 2. fuzz: lazy, streamed, atomic --out ---------------------------------------------------


def test_iter_fuzz_cases_is_fuzz_cases_one_at_a_time() -> None:
    assert [d.to_dict() for d in iter_fuzz_cases(42, 30)] == [d.to_dict() for d in fuzz_cases(42, 30)]
    # a count that could never be held in memory: the first cases come at once, the same ones
    first = list(itertools.islice(iter_fuzz_cases(42, 10**18), 3))
    assert [d.to_dict() for d in first] == [d.to_dict() for d in fuzz_cases(42, 3)]


def _expected_lines(seed: int, count: int) -> list[dict[str, object]]:
    return [{"seed": seed, "index": i, **d.to_dict()} for i, d in enumerate(fuzz_cases(seed, count))]


def test_fuzz_writes_the_cases_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--seed", "7", "--count", "12"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == _expected_lines(7, 12)
    out = tmp_path / "new.jsonl"
    assert main(["fuzz", "--seed", "7", "--count", "12", "--out", str(out)]) == 0
    assert [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] == _expected_lines(7, 12)
    assert os.listdir(tmp_path) == ["new.jsonl"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # as open() makes a file, not tempfile's 0600


def test_fuzz_count_zero_and_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    """``--count`` is a whole number from 0, with no upper cap (see the huge run below)."""
    assert main(["fuzz", "--count", "0"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["fuzz", "--count", "-1"]) == 2
    assert main(["fuzz", "--count", "many"]) == 2


def test_first_line_of_a_huge_run_comes_at_once() -> None:
    """``charfmt fuzz --count 20000 | head -1`` no longer waits for every case to be built."""
    proc = subprocess.Popen(
        _charfmt("fuzz", "--count", str(10**12)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = json.loads(proc.stdout.readline())  # a list of 10**12 cases would never come
        proc.stdout.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
    assert first == _expected_lines(0, 1)[0]


def _stop_after(cases: int, error: BaseException) -> Iterator[Damaged]:
    yield from iter_fuzz_cases(0, cases)
    raise error


@pytest.mark.parametrize(
    ("error", "code"),
    [(KeyboardInterrupt(), 130), (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 2)],
    ids=["ctrl-c", "disk-full"],
)
def test_interrupted_fuzz_out_keeps_the_old_file(
    error: BaseException,
    code: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keep = tmp_path / "keep.jsonl"
    keep.write_text("old content\n", encoding="utf-8")
    monkeypatch.setattr(charfmt.fuzz, "iter_fuzz_cases", lambda seed, count, **_: _stop_after(3, error))
    assert main(["fuzz", "--count", "10", "--out", str(keep)]) == code
    err = capsys.readouterr().err
    assert err.startswith("charfmt: error: ") and err.count("\n") == 1
    assert keep.read_text(encoding="utf-8") == "old content\n"
    assert os.listdir(tmp_path) == ["keep.jsonl"]  # no temporary file left behind


def test_fuzz_out_replaces_keeping_mode_and_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "real.jsonl"
    real.write_text("old\n", encoding="utf-8")
    real.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert main(["fuzz", "--count", "3", "--out", str(link)]) == 0
    assert link.is_symlink() and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert [json.loads(line) for line in real.read_text(encoding="utf-8").splitlines()] == _expected_lines(0, 3)
    assert sorted(os.listdir(tmp_path)) == ["link.jsonl", "real.jsonl"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write any file")
def test_fuzz_out_does_not_replace_a_read_only_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked.jsonl"
    locked.write_text("keep\n", encoding="utf-8")
    locked.chmod(0o444)
    assert main(["fuzz", "--count", "1", "--out", str(locked)]) == 2
    assert capsys.readouterr().err == f"charfmt: error: cannot write {locked}: Permission denied\n"
    assert locked.read_text(encoding="utf-8") == "keep\n"


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="no /dev/null")
def test_fuzz_out_to_a_device_writes_through(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--count", "2", "--out", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # not replaced by a regular file
    assert capsys.readouterr().err == ""


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_fuzz_out_keeps_the_old_file(tmp_path: Path) -> None:
    keep = tmp_path / "keep.jsonl"
    keep.write_text("old content\n", encoding="utf-8")
    proc = subprocess.Popen(
        _charfmt("fuzz", "--count", str(10**12), "--out", "keep.jsonl"),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:

        def writing() -> bool:
            temporaries = [p for p in tmp_path.iterdir() if p.name != "keep.jsonl"]
            return any(p.stat().st_size > 0 for p in temporaries)

        _wait_for(writing, "the temporary file to fill")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (130, b"charfmt: error: interrupted\n")
    assert keep.read_text(encoding="utf-8") == "old content\n"
    assert os.listdir(tmp_path) == ["keep.jsonl"]


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_fuzz_to_a_pipe_keeps_what_was_written() -> None:
    proc = subprocess.Popen(
        _charfmt("fuzz", "--count", str(10**12)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = proc.stdout.readline()  # written while the run goes on, not at its end
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()  # not communicate(): it would skip what readline buffered
        err = proc.stderr.read()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (130, b"charfmt: error: interrupted\n")
    lines = (first + rest).split(b"\n")[:-1]  # complete lines (a write cut by the signal may end it)
    assert len(lines) > 1
    assert [json.loads(line) for line in lines] == _expected_lines(0, len(lines))


# -- 3. the file name in every diagnostic line ------------------------------------------------


@pytest.mark.parametrize(
    "content", [b"", b"Sure!", b'{"chats":[{"type":"C","order":1,"body":"<msg>hi</act>"}]}'], ids=str
)
def test_lenient_pretty_names_the_file_as_strict_does(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "reply.txt"
    p.write_bytes(content)
    main(["parse", "--lenient", str(p)])
    lenient = [line for line in capsys.readouterr().out.splitlines() if re.search(r": CF\d{3} ", line)]
    assert lenient, "a diagnostic is printed"
    for line in lenient:
        assert line.startswith(f"{p}:"), line
    assert main(["parse", str(p)]) == 1
    strict = capsys.readouterr().err.splitlines()[0]
    assert strict.startswith(f"{p}:")
    first = charfmt.parse(content, lenient=True).diagnostics[0]
    if first.severity == "error":  # the same diagnostic: the same line
        assert lenient[0] == strict
    else:
        assert lenient[0].startswith(f"{p}:{first.line}:{first.column}: {first.code} {first.severity}: ")


def test_stream_strict_replay_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "broken.txt"
    p.write_text(FENCED, encoding="utf-8")
    assert main(["stream", "--strict", "--replay", str(p)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{p}:1:1: CF") and "<stream>" not in err


def test_stream_strict_from_standard_input_says_stdin() -> None:
    done = subprocess.run(
        _charfmt("stream", "--strict"), input=FENCED, capture_output=True, text=True, env=_env(), check=False
    )
    assert done.returncode == 1
    assert done.stderr.startswith("<stdin>:1:1: CF"), done.stderr


# -- 4. render --say with nothing to say ----------------------------------------------------


@pytest.mark.parametrize("say", ["", " ", "\t\n", "\u3000"], ids=["empty", "space", "tab-newline", "ideographic"])
def test_render_refuses_an_empty_turn(say: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--character", str(CHARACTER), "--say", say]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("charfmt: error: argument --say: ") and captured.err.count("\n") == 1


def test_render_still_takes_a_turn_of_only_an_emotion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--character", str(CHARACTER), "--say", "[joy]"]) == 0
    assert "<user_chats>" in capsys.readouterr().out


# -- render --say takes the design study's user block; --context writes [User Context] -------------------

_BLOCK = '<user_chats><chat type="C"><emo>angry</emo><msg>なんで？</msg></chat></user_chats>'


def test_render_say_reads_a_user_block_as_the_block_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    """The study's ``<user_chats>`` form was escaped and sent as the player's words (a newcomer's trial)."""
    assert main(["render", "--character", str(CHARACTER), "--say", _BLOCK, "--format", "text"]) == 0
    prompt = capsys.readouterr().out
    assert "&lt;user_chats" not in prompt
    assert prompt.count("<emo>angry</emo>\n<msg>なんで？</msg>") == 1


def test_render_say_reads_the_study_pattern_b(capsys: pytest.CaptureFixture[str]) -> None:
    say = "[User Context]\nEmotion: Angry\nAction: Kicking the ground\n\n[User Message]\nなんでそんなことをしたの？"
    assert main(["render", "--character", str(CHARACTER), "--say", say, "--format", "text"]) == 0
    prompt = capsys.readouterr().out
    assert "[User Context]\nEmotion: Angry\nAction: Kicking the ground\n" in prompt
    assert "<msg>なんでそんなことをしたの？</msg>" in prompt
    assert "[User Message]" not in prompt  # (read, then written in the request form)


def test_render_context_options_write_the_context_block(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--context", "emotion=angry", "--context", "action=kicking the ground", "--context", "weather=rain"]
    assert main(["render", "--character", str(CHARACTER), "--say", "[angry] なんで？", "--format", "text", *args]) == 0
    prompt = capsys.readouterr().out
    assert "[User Context]\nEmotion: angry\nAction: kicking the ground\nweather: rain\n" in prompt


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--say", _BLOCK.removesuffix("</user_chats>")], 1, "charfmt: --say:1:66: CF501 the input ends too early"),
        (["--say", " <user_chats>\n</user_chats>"], 2, "argument --say: nothing to say: the user block holds no"),
        (["--say", "hi", "--context", "foo"], 2, "argument --context: 'foo' is not KEY=VALUE"),
        (["--say", "hi", "--context", "bad key=1"], 2, "argument --context: context key 'bad key'"),
        (["--say", "hi", "--context", "emotion=a", "--context", "Emotion=b"], 2, "'Emotion' is given twice"),
        (["--say", "[User Context]\nEmotion: x\n\n[User Message]\nhi", "--context", "a=b"], 2, "give the context once"),
    ],
)
def test_render_say_and_context_errors_exit_with_one_line(extra: list[str], code: int, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "charfmt", "render", "--character", str(CHARACTER), *extra],
        capture_output=True, text=True, encoding="utf-8", env=_env(), timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("say", "said"),
    [
        ("<emo>angry</emo><msg>なんで？</msg>", "charfmt: warning: --say holds <emo>: shorthand sends markup"),
        ('<chat type="C"><msg>hi</msg></chat>', "charfmt: warning: --say holds <chat>"),
        ("line one\nline two [ため息x]", "charfmt: --say:2:10: CF401 warning: [ため息x]"),
    ],
)
def test_render_says_what_shorthand_does_with_markup_and_where(
    capsys: pytest.CaptureFixture[str], say: str, said: str
) -> None:
    """The study's bare-tag line was escaped without a word; a shorthand warning gave a column that read as a line."""
    assert main(["render", "--character", str(CHARACTER), "--say", say, "--format", "text"]) == 0
    assert said in capsys.readouterr().err


def test_render_says_nothing_of_a_heart_or_of_plain_words(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--character", str(CHARACTER), "--say", "I <3 you <b>so</b> much", "--format", "text"]) == 0
    assert "warning" not in capsys.readouterr().err
