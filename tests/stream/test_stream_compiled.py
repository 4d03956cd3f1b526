"""The mypyc-compiled stream reader (``charfmt._stream_c``) against the pure-Python one.

Where the package was built with a C compiler, ``charfmt.StreamParser`` is the compiled twin
of ``charfmt._stream`` (``hatch_build.py``), and every other stream test exercises it. Here:
the twin is chosen only while it was compiled from the installed source; and both readers
produce exactly the same events (not merely the same reply) on every case file input, on
what ``charfmt fuzz`` generates and on hypothesis' damaged replies, cut into random chunks of
``str`` and ``bytes``, with the default and an extended tag table: so the pure reader, which
runs wherever no compiler was, is held to everything the compiled one is tested for.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from conftest import CASES, MARK, cannot_compile, load_cases
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
import charfmt.stream
from charfmt import _twin as _twin_module
from charfmt._stream import collector as _pure_collector
from charfmt._stream import reader as _pure_reader
from charfmt.fuzz import Damaged, iter_fuzz_cases
from charfmt.tags import DEFAULT_TAGS, TagSpec, TagTable
from charfmt.testing import chunkings, damaged_replies

EXTENDED = DEFAULT_TAGS.extend(
    TagSpec("sfx", "cue", "a sound effect the game plays", values=("door_slam", "thunder")),
    TagSpec("whisper", "speech", "what the character whispers"),
)


def _twin() -> tuple[ModuleType | None, str]:
    """The compiled reader, if it was built for the installed package; else why not (the tests below skip)."""
    if importlib.util.find_spec("charfmt._stream_c") is None:
        return None, "no compiled reader was built here (pip install -e . builds it where a C compiler is)"
    twin = importlib.import_module("charfmt._stream_c")
    if charfmt.stream.source_digest() != twin.SOURCE_DIGEST:
        return None, "the compiled reader was built from other sources than these (edited since: reinstall)"
    return twin, ""


TWIN, NO_TWIN = _twin()
# The twin's modules: its StreamParser, its Collector (the pure ones: _pure_reader, _pure_collector).
TWIN_READER = None if TWIN is None else importlib.import_module("charfmt._stream_c.reader")
TWIN_COLLECTOR = None if TWIN is None else importlib.import_module("charfmt._stream_c.collector")
needs_twin = pytest.mark.skipif(TWIN is None, reason=NO_TWIN)


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the installed package's modules and subpackages (what the digest reads), in ``tmp_path/charfmt``."""
    copy = tmp_path / "charfmt"
    skip = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "_stream_c")
    shutil.copytree(Path(charfmt.__file__).parent, copy, ignore=skip)
    return copy


def _edit_max_size(copy: Path) -> None:
    """What the new-user trial did: change a ``Final`` of another module, which mypyc inlines."""
    parser = copy / "parser.py"
    text = parser.read_text(encoding="utf-8")
    assert "DEFAULT_MAX_SIZE: Final = " in text
    parser.write_text(text.replace("DEFAULT_MAX_SIZE: Final = ", "DEFAULT_MAX_SIZE: Final = 2 * "), encoding="utf-8")


def _events(module: ModuleType, chunks: list[Any], **kwargs: Any) -> list[charfmt.Event]:
    parser = module.StreamParser(**kwargs)
    events: list[charfmt.Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    return events


def _same(chunks: list[Any], **kwargs: Any) -> None:
    assert TWIN_READER is not None
    pure = _events(_pure_reader, chunks, **kwargs)
    compiled = _events(TWIN_READER, chunks, **kwargs)
    assert compiled == pure, chunks


def _cut(text: str | bytes, rnd: random.Random) -> list[Any]:
    points = sorted(rnd.sample(range(1, len(text)), min(len(text) - 1, rnd.randint(0, 12)))) if len(text) > 1 else []
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True) if b > a]


# -- which reader runs -----------------------------------------------------------------------
def test_the_stream_runs_the_compiled_reader_only_when_built_from_this_source() -> None:
    chosen = charfmt.StreamParser
    if TWIN is not None and not _twin_module.pure_python_requested():
        assert TWIN_READER is not None and TWIN_COLLECTOR is not None
        assert charfmt.stream.COMPILED
        assert chosen is TWIN_READER.StreamParser
        assert charfmt.stream.collect is TWIN_COLLECTOR.collect
        assert charfmt.stream.Collector is TWIN_COLLECTOR.Collector
    else:
        assert not charfmt.stream.COMPILED
        assert chosen is _pure_reader.StreamParser
        assert charfmt.stream.Collector is _pure_collector.Collector


def test_collector_is_public_again() -> None:
    assert "Collector" in charfmt.stream.__all__
    collector = charfmt.stream.Collector()
    text = '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>hi</msg>"}]}'
    for event in charfmt.iter_events([text[:20], text[20:]]):
        collector.add(event)
    assert collector.reply() == charfmt.parse(text, lenient=True)


def test_the_digest_covers_every_module_of_the_package(tmp_path: Path) -> None:
    copy = _package_copy(tmp_path)
    digest = charfmt.stream.source_digest(copy)
    assert digest == charfmt.stream.source_digest()  # the content counts, not where it lies
    modules = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*.py"))
    assert [p.relative_to(copy).as_posix() for p in _twin_module.digest_files(copy)] == modules
    assert "_stream/reader.py" in modules and "interop/_read.py" in modules  # the reader's, and subpackages'
    # What is not a module of the package does not count: the twin's own folder, an editor's file.
    (copy / "_stream_c").mkdir()
    (copy / "_stream_c" / "__init__.py").write_text("SOURCE_DIGEST = 'x'\n", encoding="utf-8")
    (copy / ".#parser.py").write_text("junk\n", encoding="utf-8")
    (copy / "_stream" / ".#reader.py").write_text("junk\n", encoding="utf-8")
    assert charfmt.stream.source_digest(copy) == digest
    # Any module does: an edited one, a new one, one of a subpackage.
    _edit_max_size(copy)
    edited = charfmt.stream.source_digest(copy)
    assert edited != digest
    (copy / "extra.py").write_text("X = 1\n", encoding="utf-8")
    extra = charfmt.stream.source_digest(copy)
    assert extra not in (digest, edited)
    language = copy / "_stream" / "language.py"
    text = language.read_text(encoding="utf-8")
    language.write_text(text.replace("TOKEN_MAX: Final = 48", "TOKEN_MAX: Final = 49"), encoding="utf-8")
    assert charfmt.stream.source_digest(copy) not in (digest, edited, extra)


def test_an_edited_module_turns_the_compiled_twin_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any module: mypyc inlined ``DEFAULT_MAX_SIZE`` of ``charfmt.parser`` into the compiled reader."""
    copy = _package_copy(tmp_path)
    monkeypatch.delenv("CHARFMT_PURE_PYTHON", raising=False)
    # A stand-in for the compiled module, stamped as the build stamps it: so this runs without a compiler.
    stand_in = ModuleType("charfmt._stream_c")
    stand_in.SOURCE_DIGEST = charfmt.stream.source_digest(copy)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "charfmt._stream_c", stand_in)
    assert charfmt.stream._compiled_twin(copy) is stand_in
    monkeypatch.setenv("CHARFMT_PURE_PYTHON", "1")
    assert charfmt.stream._compiled_twin(copy) is None
    monkeypatch.setenv("CHARFMT_PURE_PYTHON", "0")
    assert charfmt.stream._compiled_twin(copy) is stand_in
    _edit_max_size(copy)
    assert charfmt.stream._compiled_twin(copy) is None


@needs_twin
def test_the_built_twin_runs_only_for_an_unedited_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHARFMT_PURE_PYTHON", raising=False)
    copy = _package_copy(tmp_path)
    assert charfmt.stream._compiled_twin(copy) is TWIN
    _edit_max_size(copy)
    assert charfmt.stream._compiled_twin(copy) is None


@pytest.mark.parametrize(
    ("value", "requested"),
    [
        *[("1", True), ("true", True), ("TRUE", True), ("yes", True), (" On ", True)],
        *[("0", False), ("false", False), ("No", False), ("off", False), ("", False), ("2", False)],
    ],
)
def test_only_a_true_ish_charfmt_pure_python_asks_for_pure_python(value: str, requested: bool) -> None:
    assert _twin_module.pure_python_requested({"CHARFMT_PURE_PYTHON": value}) is requested
    assert _twin_module.pure_python_requested({}) is False


@pytest.mark.parametrize("value", ["1", "yes", "0", "false"])
def test_charfmt_pure_python_at_run_time(value: str) -> None:
    probe = "import charfmt, charfmt.stream; print(charfmt.stream.COMPILED, charfmt.StreamParser.__module__)"
    # The package imported here (a source tree, or an installed wheel): the one TWIN was looked up in.
    env = {**os.environ, "CHARFMT_PURE_PYTHON": value, "PYTHONPATH": str(Path(charfmt.__file__).parent.parent)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    if value in ("1", "yes") or TWIN is None:
        assert done.stdout.split() == ["False", "charfmt._stream.reader"]
    else:
        assert done.stdout.split() == ["True", "charfmt._stream_c.reader"]


def _installed_elsewhere() -> str | None:
    """Why the installed distribution is not the package imported here, or ``None`` when it is."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("charfmt")
    except PackageNotFoundError:
        return "charfmt is not installed (run from a bare source checkout)"
    here = Path(charfmt.__file__).resolve().parent
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable"):
        source = Path(unquote(urlparse(direct["url"]).path)).resolve()
        if source / "charfmt" != here:
            return f"the installed charfmt is an editable install of {source}, not of {here.parent}"
        return None
    installed = Path(str(dist.locate_file("charfmt/__init__.py"))).resolve().parent
    if installed != here:
        return f"the charfmt imported here ({here}) is not the installed one ({installed})"
    return None


def test_an_installed_package_was_compiled_where_a_compiler_is_available() -> None:
    """CI installs with ``pip install -e .``: on a machine with a C compiler the twin must be there."""
    reason = cannot_compile() or _installed_elsewhere()
    if reason is not None:
        pytest.skip(reason)
    assert importlib.util.find_spec("charfmt._stream_c") is not None, "pip install -e . did not compile the reader"


# -- the same events ---------------------------------------------------------------------------
INPUTS = [case.input.replace(MARK, "") for path in sorted(CASES.glob("*.txt")) for case in load_cases(path.name)]


@needs_twin
@pytest.mark.parametrize("tags", [DEFAULT_TAGS, EXTENDED], ids=["default-tags", "extended-tags"])
def test_both_readers_emit_the_same_events_on_every_case_file_input(tags: TagTable) -> None:
    rnd = random.Random(7)
    for text in INPUTS:
        for chunks in ([text], list(text), _cut(text, rnd), _cut(text.encode(), rnd)):
            _same(chunks, tags=tags)


@needs_twin
def test_both_readers_emit_the_same_events_on_fuzz_cases() -> None:
    rnd = random.Random(11)
    for case in iter_fuzz_cases(3, 400):
        text = case.text
        size = rnd.choice((1, 3, 4, 16))
        _same([text[i : i + size] for i in range(0, len(text), size)])
        raw = text.encode("utf-8", "surrogatepass")
        _same(_cut(raw, rnd), max_size=max(64, len(raw) // 2))
        _same(_cut(text, rnd), keep_reply=False)


@needs_twin
@settings(max_examples=150)
@given(damaged_replies().flatmap(lambda d: chunkings(d.text).map(lambda chunks: (d, chunks))), st.booleans())
def test_both_readers_emit_the_same_events_on_damaged_replies(case: tuple[Damaged, list[str]], lenient: bool) -> None:
    _damaged, chunks = case
    vocabulary = charfmt.Vocabulary(emotions=["joy", {"key": "sad", "aliases": ["blue"]}], policy="nearest")
    try:
        pure = _events(_pure_reader, chunks, lenient=lenient, vocabulary=vocabulary)
    except charfmt.ParseError as e:
        assert TWIN_READER is not None
        with pytest.raises(charfmt.ParseError) as caught:
            _events(TWIN_READER, chunks, lenient=lenient, vocabulary=vocabulary)
        assert caught.value.diagnostics == e.diagnostics
        return
    assert TWIN_READER is not None
    assert _events(TWIN_READER, chunks, lenient=lenient, vocabulary=vocabulary) == pure
