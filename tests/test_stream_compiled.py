"""The mypyc-compiled stream reader (``charfmt._scanner_c``) against the pure-Python one.

Where the package was built with a C compiler, ``charfmt.StreamParser`` is the compiled twin
of ``charfmt._scanner`` (``hatch_build.py``), and every other stream test exercises it. Here:
the twin is chosen only while it was compiled from the installed source; and both readers
produce exactly the same events (not merely the same reply) on every case file input, on
what ``charfmt fuzz`` generates and on hypothesis' damaged replies, cut into random chunks of
``str`` and ``bytes``, with the default and an extended tag table: so the pure reader, which
runs wherever no compiler was, is held to everything the compiled one is tested for.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import CASES, MARK, ROOT, load_cases
from hypothesis import given, settings
from hypothesis import strategies as st

import charfmt
import charfmt.stream
from charfmt import _scanner
from charfmt.fuzz import Damaged, iter_fuzz_cases
from charfmt.tags import DEFAULT_TAGS, TagSpec, TagTable
from charfmt.testing import chunkings, damaged_replies

EXTENDED = DEFAULT_TAGS.extend(
    TagSpec("sfx", "cue", "a sound effect the game plays", values=("door_slam", "thunder")),
    TagSpec("whisper", "speech", "what the character whispers"),
)


def _twin() -> ModuleType | None:
    """The compiled reader, if it was built for the installed source (else the tests below skip)."""
    if importlib.util.find_spec("charfmt._scanner_c") is None:
        return None
    twin = importlib.import_module("charfmt._scanner_c")
    source = Path(_scanner.__file__).read_bytes()
    return twin if charfmt.stream.source_digest(source) == twin.SOURCE_DIGEST else None


TWIN = _twin()
needs_twin = pytest.mark.skipif(TWIN is None, reason="no compiled reader for this source (pip install -e . builds it)")


def _can_compile() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return importlib.util.find_spec("mypyc") is not None and shutil.which(cc) is not None


def _events(module: ModuleType, chunks: list[Any], **kwargs: Any) -> list[charfmt.Event]:
    parser = module.StreamParser(**kwargs)
    events: list[charfmt.Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.close())
    return events


def _same(chunks: list[Any], **kwargs: Any) -> None:
    assert TWIN is not None
    pure = _events(_scanner, chunks, **kwargs)
    compiled = _events(TWIN, chunks, **kwargs)
    assert compiled == pure, chunks


def _cut(text: str | bytes, rnd: random.Random) -> list[Any]:
    points = sorted(rnd.sample(range(1, len(text)), min(len(text) - 1, rnd.randint(0, 12)))) if len(text) > 1 else []
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True) if b > a]


# -- which reader runs -----------------------------------------------------------------------
def test_the_stream_runs_the_compiled_reader_only_when_built_from_this_source() -> None:
    chosen = charfmt.StreamParser
    if TWIN is not None and not os.environ.get("CHARFMT_PURE_PYTHON"):
        assert charfmt.stream.COMPILED
        assert chosen is TWIN.StreamParser
        assert charfmt.stream.collect is TWIN.collect
    else:
        assert not charfmt.stream.COMPILED
        assert chosen is _scanner.StreamParser


def test_an_edited_source_runs_as_pure_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("charfmt._scanner_c") is None:
        pytest.skip("no compiled reader here")
    edited = tmp_path / "_scanner.py"
    edited.write_bytes(Path(_scanner.__file__).read_bytes() + b"\n# edited\n")
    monkeypatch.setattr(_scanner, "__file__", str(edited))
    monkeypatch.delenv("CHARFMT_PURE_PYTHON", raising=False)
    assert charfmt.stream._compiled_twin() is None


def test_charfmt_pure_python_turns_the_compiled_reader_off() -> None:
    probe = "import charfmt, charfmt.stream; print(charfmt.stream.COMPILED, charfmt.StreamParser.__module__)"
    env = {**os.environ, "CHARFMT_PURE_PYTHON": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "charfmt._scanner"]


def test_an_installed_package_was_compiled_where_a_compiler_is_available() -> None:
    """CI installs with ``pip install -e .``: on a machine with a C compiler the twin must be there."""
    if not _can_compile():
        pytest.skip("no C compiler or no mypyc: the pure reader is the installed one")
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("charfmt")
    except PackageNotFoundError:
        pytest.skip("charfmt is not installed (run from a bare source checkout)")
    assert importlib.util.find_spec("charfmt._scanner_c") is not None, "pip install -e . did not compile the reader"


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
        pure = _events(_scanner, chunks, lenient=lenient, vocabulary=vocabulary)
    except charfmt.ParseError as e:
        assert TWIN is not None
        with pytest.raises(charfmt.ParseError) as caught:
            _events(TWIN, chunks, lenient=lenient, vocabulary=vocabulary)
        assert caught.value.diagnostics == e.diagnostics
        return
    assert TWIN is not None
    assert _events(TWIN, chunks, lenient=lenient, vocabulary=vocabulary) == pure
