"""The docs say what the code does: README commands and size, the site's nav, codes, examples."""

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
PYTHON_PAGE = (ROOT / "docs" / "PYTHON.md").read_text(encoding="utf-8")
PROMPTS_PAGE = (ROOT / "docs" / "PROMPTS.md").read_text(encoding="utf-8")


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
    source = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "charfmt").rglob("*.py"))  # subpackages too
    assert set(re.findall(r'"(CF\d{3})"', source)) <= set(CODES)


@pytest.mark.parametrize("page", [README, PYTHON_PAGE], ids=["README.md", "docs/PYTHON.md"])
def test_the_error_example_is_what_parse_says(page: str) -> None:
    (call,) = re.findall(r"charfmt\.parse\('(.*)'\)\nexcept", page)
    (said,) = re.findall(r"print\(e\) +# (.*)", page)
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


def _from_root(parts: str) -> str:
    """``/ "replies" / "a.json"`` after the script's ``HERE`` as a path from the repository root."""
    return "/".join(["examples", *re.findall(r'"([^"]+)"', parts)])


def test_the_full_round_is_the_example_script() -> None:
    """The page's block is the script's code, run from the repository root (paths from there, the default provider)."""
    script = (ROOT / "examples" / "full_round.py").read_text(encoding="utf-8")
    script = re.sub(r"(?<![\w.])\(HERE((?: / \"[^\"]+\")+)\)", lambda m: f'Path("{_from_root(m[1])}")', script)
    script = re.sub(r"HERE((?: / \"[^\"]+\")+)", lambda m: f'"{_from_root(m[1])}"', script)
    script = script.replace("provider=provider", 'provider="openai"')
    block = PROMPTS_PAGE.split("## A full round")[1].split("```python\n", 1)[1].split("\n```", 1)[0]
    for line in block.splitlines():
        assert line.strip() in script, line


@pytest.mark.parametrize("page", [README, PYTHON_PAGE], ids=["README.md", "docs/PYTHON.md"])
def test_the_lenient_example(page: str) -> None:
    (call,) = re.findall(r"reply = charfmt\.parse\('(Sure!.*)', lenient=True\)", page)
    reply = charfmt.parse(call.encode().decode("unicode_escape"), lenient=True)
    (segments,) = re.findall(r"segments\]   # (.*)", page)
    assert str([(s.tag, s.text) for s in reply.chats[0].segments]) == segments
    (codes,) = re.findall(r"diagnostics\] +# \[(.*), \.\.\.\]", page)
    assert str([d.code for d in reply.diagnostics]).startswith("[" + codes)


def test_the_example_user_test_passes() -> None:
    example = str(ROOT / "examples" / "test_event_handler.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", example],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


# --- the documentation site ----------------------------------------------------------------------

DOCS = ROOT / "docs"
MKDOCS = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def nav_pages() -> list[str]:
    """The pages ``mkdocs.yml``'s ``nav`` lists, in order (paths under ``docs/``)."""
    nav = MKDOCS.split("\nnav:\n", 1)[1]
    return re.findall(r"^\s+- (?:[^\n]+?: )?([\w/.-]+\.md)\s*$", nav, flags=re.MULTILINE)


def test_the_readme_is_a_front_door() -> None:
    """At most 12 KB (issue 41): what it is, the set-up commands, three examples, where to go next."""
    assert len(README.encode("utf-8")) <= 12 * 1024
    assert [h for h in re.findall(r"^## (.*)$", README, flags=re.MULTILINE)] == [
        "Set up",
        "Three short examples",
        "Where to go next",
    ]


def test_every_page_in_the_nav_exists_and_every_page_is_in_it() -> None:
    listed = nav_pages()
    assert len(listed) == len(set(listed)), "a page listed twice in mkdocs.yml's nav"
    assert all((DOCS / page).is_file() for page in listed), [p for p in listed if not (DOCS / p).is_file()]
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
    assert sorted(listed) == pages, f"pages missing from mkdocs.yml's nav: {sorted(set(pages) - set(listed))}"


def test_the_readme_links_to_pages_that_exist() -> None:
    """``mkdocs build --strict`` checks the site's links; the README is not in the site, so here."""
    links = re.findall(r"\]\(((?:docs|examples)/[^)#]*)(?:#[^)]*)?\)", README)
    assert links
    assert [link for link in links if not (ROOT / link).exists()] == []


def test_the_api_page_lists_every_public_name() -> None:
    listed = re.findall(r"^::: charfmt\.(\w+)$", (DOCS / "API.md").read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(charfmt.__all__)


def test_the_diagnostics_page_holds_every_code() -> None:
    """The site's table is written from the code table by the page's hook: every code, in its group."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("diagnostics_hook", DOCS / "_hooks" / "diagnostics.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.on_page_markdown((DOCS / "DIAGNOSTICS.md").read_text(encoding="utf-8"), page=None)
    rows = re.findall(r'^\| <span id="(cf\d{3})"></span>`(CF\d{3})` \| (\w+) \|', page, flags=re.MULTILINE)
    assert [(code, severity) for _, code, severity in rows] == [(c, s) for c, (s, _) in CODES.items()]
    assert all(anchor == code.lower() for anchor, code, _ in rows)


def test_ci_builds_the_site_strictly_with_the_docs_extra() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "mkdocs build --strict" in ci
    assert re.search(r"pip install -e '\.\[[^\]]*\bdocs\b", _command("test-command"))
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {re.split(r"[\[<>=]", requirement)[0] for requirement in extras["docs"]}
    assert names == {"mkdocs", "mkdocs-material", "mkdocstrings"}


def test_the_game_loop_example_logs_an_info_chat_as_one_line() -> None:
    """Found by a newcomer's trial: each streamed piece of an ``I`` chat was its own ``[log]`` line."""
    script = ROOT / "examples" / "game_loop.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False, cwd=ROOT)
    logs = [line.removeprefix("[log]").strip() for line in done.stdout.splitlines() if line.startswith("[log]")]
    reply = charfmt.parse((ROOT / "examples" / "replies" / "mio_angry.json").read_text(encoding="utf-8"))
    assert logs == ["".join(s.text for s in c.segments) for c in reply.chats if c.type != "C"]
