"""The docs say what the code does: README commands, codes, examples."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

import charfmt
from charfmt.diagnostics import CODES

README = (ROOT / "README.md").read_text(encoding="utf-8")
FORMAT = (ROOT / "docs" / "FORMAT.md").read_text(encoding="utf-8")


def _command(marker: str) -> str:
    after = README.split(f"<!-- {marker} -->", 1)[1]
    return after.split("```sh\n", 1)[1].split("\n```", 1)[0]


def test_readme_has_exactly_one_demo_and_one_test_command() -> None:
    assert README.count("<!-- demo-command -->") == 1
    assert README.count("<!-- test-command -->") == 1
    assert _command("demo-command").endswith("charfmt demo")
    assert "pytest" in _command("test-command")
    assert "\n" not in _command("demo-command") + _command("test-command")


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "<!-- test-command -->" in ci
    assert "ruff check" in ci and "mypy --strict" in ci


def test_every_code_is_documented() -> None:
    for code, (severity, _title) in CODES.items():
        assert re.search(rf"\| `{code}` \| {severity} \|", FORMAT), code


def test_every_code_the_parser_emits_is_known() -> None:
    source = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "charfmt").rglob("*.py"))
    assert set(re.findall(r'"(CF\d{3})"', source)) <= set(CODES)


def test_readme_error_example_is_what_parse_says() -> None:
    (call,) = re.findall(r"charfmt\.parse\('(.*)'\)\nexcept", README)
    (said,) = re.findall(r"print\(e\) +# (.*)", README)
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(call.encode().decode("unicode_escape"))
    assert str(info.value) == said


def test_readme_parse_example() -> None:
    text = README.split("```json\n", 1)[1].split("\n```", 1)[0]
    lines = [f"{c.order} {c.type} {[(s.tag, s.text) for s in c.segments]}" for c in charfmt.parse(text).chats]
    for line in lines:
        assert line in README


@pytest.mark.parametrize(
    "script",
    sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("test_")),
    ids=lambda p: p.name,
)
def test_examples_run(script: object) -> None:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_example_reports_a_broken_reply(tmp_path: object) -> None:
    from pathlib import Path

    broken = Path(str(tmp_path)) / "broken.json"
    broken.write_text('{"chats":[{"type":"C","order":1,"body":"<emo>furious</emo>"}]}', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "parse_reply.py"), str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "CF301" in done.stderr


def test_readme_full_round_is_the_example_script() -> None:
    script = (ROOT / "examples" / "full_round.py").read_text(encoding="utf-8")
    block = README.split("A full round")[1].split("```python\n", 1)[1].split("\n```", 1)[0]
    for line in block.splitlines():
        assert line.strip() in script, line


def test_readme_lenient_example() -> None:
    (call,) = re.findall(r"reply = charfmt\.parse\('(Sure!.*)', lenient=True\)", README)
    reply = charfmt.parse(call.encode().decode("unicode_escape"), lenient=True)
    (segments,) = re.findall(r"segments\]   # (.*)", README)
    assert str([(s.tag, s.text) for s in reply.chats[0].segments]) == segments
    (codes,) = re.findall(r"diagnostics\] +# \[(.*), \.\.\.\]", README)
    assert str([d.code for d in reply.diagnostics]).startswith("[" + codes)


def test_the_example_user_test_passes() -> None:
    example = str(ROOT / "examples" / "test_event_handler.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", example],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
