"""Every code block of the README and of ``docs/**/*.md`` is run or checked, or says why not.

Python blocks run as a reader pastes them: from the repository root, after the page's earlier Python
blocks, in a namespace holding only the user's own objects the pages name (a model stream, a sprite,
a window, a TTS voice, a game, the SDK clients answering offline): ``charfmt``, characters and
replies are each page's to import and load. ``>>>`` blocks run as doctests; in the other blocks, an
expression statement followed by a comment that is a Python literal (``[('emo', 'joy'), ...]``,
``...`` standing for the rest) must evaluate to that literal. Shell blocks of ``charfmt`` commands
run through ``charfmt.cli.main`` from the root of a copy of the repository's files (nothing else: a
file a command names ships in ``examples/``) and must exit 0. JSON must load (a reply must parse
strictly, a request hold messages), TOML must load as a character, JavaScript must pass ``node
--check``. A block that cannot run here carries a marker comment (``tests/doc_pages.py`` lists
them), and ``test_every_block_is_run_or_marked`` counts that no block is left out. Running the
Python and shell blocks takes about 15 s together: they are in ``tests/long_tests.txt`` (``pytest -m
long``, which CI runs); the checks and the count are in the default run.
"""

from __future__ import annotations

import ast
import doctest
import glob
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import redirect_stdout
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import sdk_wire
from conftest import ROOT
from doc_pages import README, Block, all_blocks, blocks

import charfmt
from charfmt.cli import main

PYTHON = frozenset({"python", "py", "pycon"})
SHELL = frozenset({"sh", "bash", "shell", "console"})
CHECKED = frozenset({"json", "toml", "js", "javascript"})
"""Languages the tests check without running: JSON and TOML load, JavaScript passes ``node --check``."""

BLOCKS = all_blocks()
SAMPLE_REPLY = next(b.code for b in blocks(README) if b.lang == "json")
"""The README's reply (``examples/replies/mio_joy.json``): what the user's model and SDK clients stream."""


def _unmarked(*langs: frozenset[str]) -> list[Block]:
    return [b for b in BLOCKS if b.marker is None and any(b.lang in group for group in langs)]


def _ids(found: list[Block]) -> list[str]:
    return [b.id for b in found]


# --- the count -----------------------------------------------------------------------------------


def test_every_block_is_run_or_marked() -> None:
    """Each block is run, checked, or marked with its reason; a marker says something checkable."""
    counts = {"run": 0, "checked": 0, "not run": 0, "part of": 0, "run by": 0}
    for block in BLOCKS:
        if block.marker is None:
            assert block.lang in PYTHON | SHELL | CHECKED, (
                f"{block.id}: a ```{block.lang or '(no language)'} block neither run nor checked: give it a "
                "language the tests run or a '<!-- docs: not run: REASON -->' line before it"
            )
            counts["run" if block.lang in PYTHON | SHELL else "checked"] += 1
            continue
        kind, what = block.marker
        counts[kind] += 1
        if kind == "not run":
            assert len(what.split()) >= 3, f"{block.id}: say why the block is not run"
        elif kind == "part of":
            assert (ROOT / what).is_file(), f"{block.id}: no file {what}"
            assert block.lang in {"toml", "json"}, f"{block.id}: 'part of' checks TOML or JSON snippets"
        else:
            test_file, _, test_name = what.partition("::")
            source = ROOT / test_file
            assert source.is_file(), f"{block.id}: no test file {test_file}"
            assert f"def {test_name}(" in source.read_text(encoding="utf-8"), f"{block.id}: no test {what}"
    assert sum(counts.values()) == len(BLOCKS)
    assert counts["run"] >= 40 and counts["run"] > counts["not run"], counts


def test_the_readme_reply_is_the_bundled_file() -> None:
    """The README's reply block is ``examples/replies/mio_joy.json``, which its samples open."""
    bundled = (ROOT / "examples" / "replies" / "mio_joy.json").read_text(encoding="utf-8")
    assert json.loads(bundled) == json.loads(SAMPLE_REPLY)


# --- Python --------------------------------------------------------------------------------------


class Recorder:
    """Stands for a game object of the samples (``sprite``, ``window``, ``tts``): records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.calls.append((name, args))

        return record


def _namespace() -> dict[str, Any]:
    return {
        "model_stream": [SAMPLE_REPLY[i : i + 5] for i in range(0, len(SAMPLE_REPLY), 5)],
        "sprite": Recorder(),
        "window": Recorder(),
        "tts": Recorder(),
        "game": Recorder(),
    }


def _matches(value: Any, expected: str) -> bool:
    """``repr(value)`` against a literal from the docs; ``...`` stands for anything."""
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, repr(value), flags=re.DOTALL) is not None


def _literal_comment(line: str) -> tuple[str, str] | None:
    """``(expression, expected)`` when ``line`` is an expression with a literal comment."""
    code, sep, comment = line.partition("#")
    if not sep or not code.strip():
        return None
    try:
        tree = ast.parse(code.strip())
        ast.literal_eval(comment.strip().replace(", ...", "").replace("...", "0"))
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    if isinstance(tree.body[0].value, ast.Call):  # a call with a prose comment, e.g. print(e.report())
        return None
    return code.strip(), comment.strip()


def test_the_docs_check_values_they_show() -> None:
    """Enough samples state their results (checked below), so a wrong claim fails a test."""
    checked = [line for b in _unmarked(PYTHON) for line in b.code.splitlines() if _literal_comment(line)]
    doctests = [b for b in _unmarked(PYTHON) if b.code.lstrip().startswith(">>>")]
    assert len(checked) >= 10 and doctests


def _extras(block: Block, namespace: dict[str, Any]) -> None:
    """The SDK clients a block names (the user's own, as its page says), answering offline."""
    if "_client" in block.code or "chat_model" in block.code:  # the SDK samples: the real clients, offline
        namespace.update(sdk_wire.readme_namespace(block.code, SAMPLE_REPLY))


def _run_doctest(block: Block, namespace: dict[str, Any]) -> None:
    test = doctest.DocTestParser().get_doctest(block.code, namespace, block.id, block.page, block.line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    runner.run(test, out=out.write, clear_globs=False)  # later blocks of the page use its names
    assert runner.failures == 0, out.getvalue()


def _earlier(block: Block) -> list[Block]:
    """The page's run Python blocks before ``block``: a reader pastes a page's blocks in order."""
    return [b for b in _unmarked(PYTHON) if b.page == block.page and b.line < block.line]


def _execute(block: Block, namespace: dict[str, Any], check: bool) -> None:
    """Run ``block`` in ``namespace``; with ``check``, its ``expression  # literal`` lines too."""
    _extras(block, namespace)
    if block.code.lstrip().startswith(">>>"):
        _run_doctest(block, namespace)
        return
    source = "\n" * (block.line) + block.code  # tracebacks name the page's own line
    with redirect_stdout(io.StringIO()):
        try:
            exec(compile(source, block.page, "exec"), namespace)
        except ModuleNotFoundError as e:
            if e.name is None or e.name.split(".")[0] == "charfmt":
                raise
            pytest.skip(f"{block.id} needs {e.name}, which is not installed")
        except charfmt.CharfmtError:
            pytest.fail(f"{block.id}: a sample raised")
        for line in block.code.splitlines() if check else ():
            found = _literal_comment(line)
            if found is not None:
                expression, expected = found
                assert _matches(eval(expression, namespace), expected), f"{block.id}: {line}"


@pytest.mark.parametrize("block", _unmarked(PYTHON), ids=_ids(_unmarked(PYTHON)))
def test_python_block_runs(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block runs after the page's earlier blocks, from the repository root, knowing only the
    user's own objects the page names (``_namespace``); ``charfmt`` and every file are its own to load."""
    monkeypatch.chdir(ROOT)  # a sample names files from the repository root (examples/...)
    namespace = _namespace()
    for earlier in _earlier(block):
        _execute(earlier, namespace, check=False)
    namespace.update({name: Recorder() for name in ("sprite", "window", "tts", "game")})  # this block's calls
    _execute(block, namespace, check=True)
    if "sprite.show" in block.code:
        assert namespace["sprite"].calls, "the sample's event loop saw an emotion"
    if "game.handle" in block.code:  # every SDK sample's loop saw the reply's emotion
        emotions = [args[0].text for name, args in namespace["game"].calls if args[0].kind == "emotion"]
        want = [e.text for e in charfmt.parse(SAMPLE_REPLY).events() if e.kind == "emotion"]
        assert want and emotions == want * block.code.count("game.handle"), emotions


# --- charfmt commands ----------------------------------------------------------------------------


def _commands(code: str) -> Iterator[list[str]]:
    """Each command of a shell block as words: continued lines joined, comments dropped."""
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            yield words


def _charfmt_parts(words: list[str]) -> Iterator[list[str]]:
    """The words of each ``charfmt`` command in a shell line (pipes and ``&&`` split it)."""
    part: list[str] = []
    for word in [*words, "|"]:
        if word in {"|", "&&", ";"}:
            while part and re.fullmatch(r"[A-Z_]+=\S*", part[0]):  # VAR=value before the command
                part.pop(0)
            if part and part[0] == "charfmt":
                yield part[1:]
            part = []
        else:
            part.append(word)


def _repository_files() -> list[str]:
    """The repository's files as a clone holds them: tracked, or new and not ignored (``git ls-files``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
        timeout=60,
    )
    if listed.returncode != 0:
        pytest.skip("git cannot list the repository's files: the commands need a copy of them")
    return [name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's files and nothing else: the commands run from its root, as a user's would."""
    folder = tmp_path_factory.mktemp("docs-commands")
    for name in _repository_files():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, folder / name)
    return folder


def _run_command(argv: list[str], folder: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    """Run one ``charfmt`` command in ``folder``, its redirections and globs as a shell would."""
    stdin, stdout, append, words = b"", None, False, []
    rest = iter(argv)
    for word in rest:
        if word == "<":
            stdin = (folder / next(rest)).read_bytes()
        elif word in {">", ">>"}:
            stdout, append = folder / next(rest), word == ">>"
        elif "*" in word and " " not in word:  # replies/*.json, not a quoted "*waves*"
            words += sorted(str(Path(p).relative_to(folder)) for p in glob.glob(str(folder / word)))
        else:
            words.append(word)
    assert not any(w.startswith("~") for w in words), f"{where}: a path outside the repository: mark the block"
    capsys.readouterr()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    status = main(words)
    out, err = capsys.readouterr()
    assert status == 0, f"{where}: charfmt {shlex.join(argv)} exited {status}: {err}"
    if stdout is not None:
        with stdout.open("a" if append else "w", encoding="utf-8") as file:
            file.write(out)


NEVER_RUN = {"serve": "starts a server", "chat": "talks to a model", "--engine": "starts a Ray cluster"}
"""What an unmarked block may not hold: a command that would not end by itself or needs a model."""


@pytest.mark.parametrize("block", _unmarked(SHELL), ids=_ids(_unmarked(SHELL)))
def test_shell_block_runs(
    block: Block, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workspace)
    monkeypatch.setattr(sys, "stdin", sys.stdin)  # each command's own standard input, put back after
    for words in _commands(block.code):
        parts = list(_charfmt_parts(words))
        assert len(parts) == 1 and words[0] in {"charfmt", *(w for w in words if "=" in w)}, (
            f"{block.id}: {shlex.join(words)}: an unmarked shell block holds charfmt commands only"
        )
        cannot = [why for word, why in NEVER_RUN.items() if word in parts[0]]
        assert not cannot, f"{block.id}: charfmt {shlex.join(parts[0])} {cannot[0]}: mark the block (not run: why)"
        if "report" in parts[0][:1]:
            pytest.importorskip("pyarrow", reason="charfmt report needs pyarrow (charfmt[arrow])")
        _run_command(parts[0], workspace, capsys, block.id)


@cache
def _help(command: tuple[str, ...]) -> str:
    """``charfmt COMMAND --help``; an empty string where COMMAND is no (sub)command."""
    out = io.StringIO()
    with redirect_stdout(out):
        status = main([*command, "--help"])
    return out.getvalue() if status == 0 else ""


def _flags_exist(argv: list[str], where: str) -> None:
    """The subcommand (and action, ``sessions list``) exists and its ``--help`` names every flag."""
    command = tuple(argv[:1]) if argv and not argv[0].startswith("-") else ()
    if len(argv) > 1 and re.fullmatch(r"[a-z]+", argv[1]) and _help((*command, argv[1])):
        command = (*command, argv[1])
    helped = _help(command)
    assert helped, f"{where}: no command charfmt {' '.join(command)}"
    for word in argv:
        for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", word if word.startswith(("-", "[")) else ""):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helped), (
                f"{where}: charfmt {' '.join(command)} has no {flag}"
            )


MARKED_SHELL = [b for b in BLOCKS if b.lang in SHELL and b.marker is not None and b.marker[0] == "not run"]


@pytest.mark.parametrize("block", MARKED_SHELL, ids=_ids(MARKED_SHELL))
def test_shell_block_not_run_names_real_flags(block: Block) -> None:
    for words in _commands(block.code):
        for argv in _charfmt_parts(words):
            _flags_exist(argv, block.id)


# --- checked without running ---------------------------------------------------------------------


def _contains(whole: Any, part: Any) -> bool:
    """Every table, entry and value of ``part`` is in ``whole`` (an array of tables: in one of its tables)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _contains(whole[k], v) for k, v in part.items())
    if isinstance(part, list) and part and all(isinstance(p, dict) for p in part):
        return isinstance(whole, list) and all(any(_contains(w, p) for w in whole) for p in part)
    return bool(whole == part)


PART_OF = [b for b in BLOCKS if b.marker is not None and b.marker[0] == "part of"]


@pytest.mark.parametrize("block", PART_OF, ids=_ids(PART_OF))
def test_a_snippet_is_part_of_its_file(block: Block) -> None:
    assert block.marker is not None
    path = ROOT / block.marker[1]
    text = path.read_text(encoding="utf-8")
    load = tomllib.loads if block.lang == "toml" else json.loads
    assert _contains(load(text), load(block.code)), f"{block.id}: not as in {block.marker[1]}"
    if path.parent.name == "characters":
        charfmt.Character.load(path)


JSON = _unmarked(frozenset({"json"}))


@pytest.mark.parametrize("block", JSON, ids=_ids(JSON))
def test_json_block_is_what_it_shows(block: Block) -> None:
    """A reply parses strictly; a chat-completions request holds messages with a role each."""
    value = json.loads(block.code)
    if isinstance(value, dict) and "chats" in value:
        charfmt.parse(block.code)
    elif isinstance(value, dict) and "messages" in value:
        roles = {"system", "developer", "user", "assistant", "tool"}
        assert all(m["role"] in roles for m in value["messages"]), block.id
    else:
        pytest.fail(f"{block.id}: JSON that is neither a reply nor a request: say what it is (a marker)")


TOML = _unmarked(frozenset({"toml"}))


@pytest.mark.parametrize("block", TOML, ids=_ids(TOML))
def test_toml_block_loads_as_a_character(block: Block, tmp_path: Path) -> None:
    """A whole character file loads; a part of one (``[[tags]]``, ``[[emotions]]``) loads under a name."""
    given = tomllib.loads(block.code)
    text = block.code
    if "name" not in given:  # a part: the keys a whole file needs around it
        text = f'name = "Docs"\npersona = "A character of the docs."\n{text}'
        if "emotions" not in given:
            text += '\n[[emotions]]\nkey = "neutral"\ndescription = "Default."\n'
    (tmp_path / "character.toml").write_text(text, encoding="utf-8")
    charfmt.Character.load(tmp_path / "character.toml")


JAVASCRIPT = _unmarked(frozenset({"js", "javascript"}))


@pytest.mark.parametrize("block", JAVASCRIPT, ids=_ids(JAVASCRIPT))
def test_javascript_block_is_valid_syntax(block: Block, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JavaScript samples' syntax is not checked")
    script = tmp_path / "sample.mjs"  # a module: top-level await, as in a page's <script type="module">
    script.write_text(block.code, encoding="utf-8")
    done = subprocess.run([node, "--check", str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{block.id}: {done.stderr}"
