"""The mypyc-compiled strict reader (``charfmt._strict_c``) against the pure-Python one.

Where the package was built with a C compiler, ``charfmt._strict`` also exists compiled
(``hatch_build.py``), and ``charfmt.parse`` switches to it once it has read ``WARM_UP``
characters with the pure one (``charfmt.parser._Readers``). Here: the twin is chosen only
while it was compiled from the installed source and ``CHARFMT_PURE_PYTHON`` does not ask for
pure Python; and both readers give exactly the same results (the fast path's reply or its
``None``, the batch LALR parse's elements or its ``None``, each body reader's answer, and
``parse`` itself, strict and lenient) on every case file input, on what ``charfmt fuzz``
generates and on hypothesis' valid and damaged replies, as text and as bytes, with the default
and an extended tag table and with a vocabulary: so the pure reader, which runs wherever no
compiler was (and in every process until it has read a megabyte), is held to everything the
compiled one is tested for.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import CASES, MARK, cannot_compile, load_cases
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
from charfmt import _twin, dumps, parser
from charfmt._strict import elements as pure_body
from charfmt._strict import fast as pure_fast
from charfmt._strict import lalr as pure_lalr
from charfmt.fuzz import iter_fuzz_cases
from charfmt.tags import DEFAULT_TAGS, TagSpec, TagTable
from charfmt.testing import bodies, damaged_replies, replies, texts

EXTENDED = DEFAULT_TAGS.extend(
    TagSpec("sfx", "cue", "a sound effect the game plays", values=("door_slam", "thunder")),
    TagSpec("whisper", "speech", "what the character whispers"),
)
VOCABULARY = charfmt.Vocabulary(emotions=["joy", {"key": "sad", "aliases": ["blue"]}], policy="nearest")
NAME = _twin.TWINS["_strict"]
PACKAGE = Path(charfmt.__file__).parent


def _twin_module() -> tuple[ModuleType | None, str]:
    """The compiled reader, if it was built for the installed package; else why not (the tests below skip)."""
    if importlib.util.find_spec(f"charfmt.{NAME}") is None:
        return None, "no compiled strict reader was built here (pip install -e . builds it where a C compiler is)"
    twin = importlib.import_module(f"charfmt.{NAME}")
    if _twin.package_digest(PACKAGE) != twin.SOURCE_DIGEST:
        return None, "the compiled strict reader was built from other sources than these (edited since: reinstall)"
    return twin, ""


TWIN, NO_TWIN = _twin_module()
TWIN_FAST = None if TWIN is None else importlib.import_module(f"charfmt.{NAME}.fast")
TWIN_BODY = None if TWIN is None else importlib.import_module(f"charfmt.{NAME}.elements")
TWIN_LALR = None if TWIN is None else importlib.import_module(f"charfmt.{NAME}.lalr")
needs_twin = pytest.mark.skipif(TWIN is None, reason=NO_TWIN)


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the installed package's modules and subpackages (what the digest reads), in ``tmp_path/charfmt``."""
    copy = tmp_path / "charfmt"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", *_twin.TWINS.values()))
    return copy


def _edit(copy: Path) -> None:
    """An edit of a module the twin does not hold: a ``Final`` mypyc may have inlined (``charfmt.tags``)."""
    tags = copy / "tags.py"
    tags.write_text(tags.read_text(encoding="utf-8") + "\nEDITED: Final = 1\n", encoding="utf-8")


# -- which reader runs -----------------------------------------------------------------------
def test_parse_reads_with_the_pure_reader_until_it_has_read_warm_up_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parser, "WARM_UP", 1_000)
    readers = parser._Readers()
    text = dumps(charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>hi</msg>"}]}'))
    calls = 0
    while readers.compiled is None:
        assert readers.fast(text, None, parser.DEFAULT_MAX_SIZE, DEFAULT_TAGS) == charfmt.parse(text)
        calls += 1
    assert calls == -(-1_000 // len(text))  # the call that reaches WARM_UP settles, and reads with the pure one
    expected = TWIN is not None and not _twin.pure_python_requested()
    assert readers.compiled is expected
    if expected:
        assert TWIN_FAST is not None and TWIN_BODY is not None
        assert readers.fast is TWIN_FAST.read_reply and readers.batch is TWIN_BODY.parse_batch
    else:
        assert readers.fast is pure_fast.read_reply and readers.batch is pure_body.parse_batch


@contextmanager
def _stand_in(digest: str) -> Iterator[tuple[ModuleType, ModuleType]]:
    """A stand-in for the compiled package, stamped as the build stamps it (the choice is tested without a compiler)."""
    twin, fast, body = (ModuleType(f"charfmt.{NAME}{suffix}") for suffix in ("", ".fast", ".elements"))
    twin.SOURCE_DIGEST = digest  # type: ignore[attr-defined]
    fast.read_reply = partial(pure_fast.read_reply)  # type: ignore[attr-defined]  # (an object of its own)
    body.parse_batch = partial(pure_body.parse_batch)  # type: ignore[attr-defined]
    saved = {m.__name__: sys.modules.get(m.__name__) for m in (twin, fast, body)}
    sys.modules.update({m.__name__: m for m in (twin, fast, body)})
    try:
        yield fast, body
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def test_the_twin_runs_only_when_built_from_this_package_and_pure_python_is_not_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = _package_copy(tmp_path)
    monkeypatch.delenv("CHARFMT_PURE_PYTHON", raising=False)
    readers = parser._Readers()
    with _stand_in(_twin.package_digest(copy)) as (fast, body):
        assert readers.settle(copy) is True
        assert readers.fast is fast.read_reply and readers.batch is body.parse_batch  # type: ignore[attr-defined]
        monkeypatch.setenv("CHARFMT_PURE_PYTHON", "1")
        assert readers.settle(copy) is False
        assert readers.fast is pure_fast.read_reply and readers.batch is pure_body.parse_batch
        monkeypatch.setenv("CHARFMT_PURE_PYTHON", "0")
        assert readers.settle(copy) is True
        _edit(copy)  # any module: mypyc inlines the Final constants of the modules a reader imports
        assert readers.settle(copy) is False
        assert readers.fast is pure_fast.read_reply


def test_the_digest_leaves_out_both_twins_folders(tmp_path: Path) -> None:
    copy = _package_copy(tmp_path)
    digest = _twin.package_digest(copy)
    for name in _twin.TWINS.values():
        (copy / name).mkdir()
        (copy / name / "__init__.py").write_text("SOURCE_DIGEST = 'x'\n", encoding="utf-8")
    assert _twin.package_digest(copy) == digest
    assert "_strict/fast.py" in [p.relative_to(copy).as_posix() for p in _twin.digest_files(copy)]


@needs_twin
def test_the_built_twin_runs_only_for_an_unedited_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHARFMT_PURE_PYTHON", raising=False)
    copy = _package_copy(tmp_path)
    assert _twin.load(NAME, copy) is TWIN
    _edit(copy)
    assert _twin.load(NAME, copy) is None


# -- the same results --------------------------------------------------------------------------
def _outcome(run: Any, *args: Any) -> Any:
    try:
        return ("value", run(*args))
    except Exception as e:  # the two must fail alike: the same class name and message
        return ("raised", type(e).__name__, str(e))


def _same_reply(text: str | bytes) -> None:
    """The fast path and the whole reader give the same on ``text``, with every table and vocabulary."""
    assert TWIN_FAST is not None
    for tags in (DEFAULT_TAGS, EXTENDED):
        for vocabulary in (None, VOCABULARY):
            for max_size in (parser.DEFAULT_MAX_SIZE, max(1, len(text) - 1)):
                args = (text, vocabulary, max_size, tags)
                assert _outcome(TWIN_FAST.read_reply, *args) == _outcome(pure_fast.read_reply, *args), args


def _same_bodies(pairs: list[tuple[str, str]], tags: TagTable = DEFAULT_TAGS) -> None:
    """Every body reader gives the same on each ``(chat type, body)``, and the batch parse on all of them."""
    assert TWIN_BODY is not None and TWIN_LALR is not None
    assert _outcome(TWIN_BODY.parse_batch, pairs, tags) == _outcome(pure_body.parse_batch, pairs, tags)
    twin_read, pure_read = TWIN_BODY.fast_reader(tags), pure_body.fast_reader(tags)
    twin_driver, pure_driver = TWIN_LALR.driver(tags), pure_lalr.driver(tags)
    for kind, body in pairs:
        assert _outcome(twin_read, kind, body) == _outcome(pure_read, kind, body)
        start = "c_body" if kind == "C" else "text_body"
        assert _outcome(twin_driver.parse, body, start) == _outcome(pure_driver.parse, body, start)


def _bodies_of(text: str) -> list[tuple[str, str]]:
    """The ``(type, body)`` string pairs of a reply's chats, if it is JSON of that shape."""
    try:
        chats = json.loads(text).get("chats")
    except (ValueError, AttributeError, RecursionError):
        return []
    pairs = [(c.get("type"), c.get("body")) for c in chats if isinstance(c, dict)] if isinstance(chats, list) else []
    return [(k, b) for k, b in pairs if isinstance(k, str) and isinstance(b, str)]


INPUTS = [case.input.replace(MARK, "") for path in sorted(CASES.glob("*.txt")) for case in load_cases(path.name)]


@needs_twin
def test_both_readers_give_the_same_on_every_case_file_input() -> None:
    for text in INPUTS:
        _same_reply(text)
        _same_reply(text.encode("utf-8", "surrogatepass"))
        _same_bodies(_bodies_of(text))
        _same_bodies(_bodies_of(text), EXTENDED)


@needs_twin
def test_both_readers_give_the_same_on_fuzz_cases() -> None:
    for case in iter_fuzz_cases(5, 300):
        for text in (case.text, dumps(case.original)):
            _same_reply(text)
            _same_bodies(_bodies_of(text))


@needs_twin
@settings(max_examples=150)
@given(replies(), st.booleans())
def test_both_readers_give_the_same_on_valid_replies(reply: charfmt.Reply, as_bytes: bool) -> None:
    text = dumps(reply)
    _same_reply(text.encode() if as_bytes else text)
    _same_bodies(_bodies_of(text))


@needs_twin
@settings(max_examples=150)
@given(damaged_replies())
def test_both_readers_give_the_same_on_damaged_replies(damaged: Any) -> None:
    _same_reply(damaged.text)
    _same_bodies(_bodies_of(damaged.text))


@needs_twin
@settings(max_examples=200)
@given(st.one_of(bodies(), texts(max_size=40)), st.sampled_from(["C", "I", "E"]))
def test_both_readers_give_the_same_on_any_body(body: str, kind: str) -> None:
    _same_bodies([(kind, body)])
    _same_bodies([(kind, body), ("C", "<emo>joy</emo>"), ("E", body)], EXTENDED)


@needs_twin
def test_parse_gives_the_same_with_either_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the public function: strict (the reply, or the error and its diagnostics) and lenient."""
    compiled, pure = parser._Readers(), parser._Readers()
    monkeypatch.delenv("CHARFMT_PURE_PYTHON", raising=False)
    assert compiled.settle() is True
    monkeypatch.setenv("CHARFMT_PURE_PYTHON", "1")
    assert pure.settle() is False

    def observed(readers: parser._Readers, text: str, **kwargs: Any) -> Any:
        monkeypatch.setattr(parser, "_READERS", readers)
        try:
            reply = charfmt.parse(text, **kwargs)
        except charfmt.ParseError as e:
            return ("error", e.diagnostics)
        return ("reply", reply, reply.model_dump())

    texts_ = [*INPUTS[:200], *(c.text for c in iter_fuzz_cases(9, 100))]
    big = dumps(charfmt.parse('{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>hi &amp; bye</msg>"}]}'))
    texts_.append(big.replace('{"type"', '{"speaker": "mio", "type"'))
    texts_.append(
        '{"chats": [' + ", ".join(f'{{"type": "E", "order": {i}, "body": "x"}}' for i in range(1, 9000)) + "]}"
    )
    for text in texts_:
        for kwargs in ({}, {"lenient": True}, {"vocabulary": VOCABULARY}, {"tags": EXTENDED}):
            assert observed(compiled, text, **kwargs) == observed(pure, text, **kwargs)


def test_an_installed_package_was_compiled_where_a_compiler_is_available() -> None:
    """CI installs with ``pip install -e .``: on a machine with a C compiler the strict twin must be there too."""
    from test_stream_compiled import _installed_elsewhere

    reason = cannot_compile() or _installed_elsewhere()
    if reason is not None:
        pytest.skip(reason)
    assert importlib.util.find_spec(f"charfmt.{NAME}") is not None, "pip install -e . did not compile the strict reader"
