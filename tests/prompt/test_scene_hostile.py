"""Scenes and stage maps from strangers (issue 38): duplicate, narrator and marker cast ids, wrong types,
huge files, ``/dev/zero`` and endless pipes, type-confused and huge stage maps. Each is one clear
``CharacterError`` naming the file, the key and its line, in bounded time and memory."""

from __future__ import annotations

import difflib
import gc
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Case, load_cases
from hostile_files import PEAK_MB, WALL, MiB, one_error_line, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import charfmt
from charfmt.models import Chat, Segment
from charfmt.prompt.character import MAX_FILE_SIZE
from charfmt.prompt.scene import MAX_CAST, SPEAKER_ID, Scene
from charfmt.serve.formats import read_answer, whole
from charfmt.store.base import MAX_NAME, NAME
from charfmt.tags import DEFAULT_TAGS

CHARACTERS = ROOT / "examples" / "characters"
REX = charfmt.Character.load(CHARACTERS / "rex.toml")
MIO = charfmt.Character.load(CHARACTERS / "mio.toml")
TOO_LARGE = f"larger than {MAX_FILE_SIZE:,} bytes (max_size)"


@pytest.fixture
def stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with rex.toml and mio.toml, the current one (errors name ``s.toml`` as written)."""
    for name in ("rex.toml", "mio.toml"):
        shutil.copy(CHARACTERS / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _error(path: str | Path) -> str:
    """The first line of the ``CharacterError`` loading the scene at ``path`` raises."""
    with pytest.raises(charfmt.CharacterError) as e:
        Scene.load(path)
    return str(e.value).splitlines()[0]


# --- scene files ----------------------------------------------------------------------------------

ERRORS = load_cases("scene_errors.txt")


@pytest.mark.parametrize("case", ERRORS, ids=[c.name for c in ERRORS])
def test_a_hostile_scene_is_one_error_naming_file_key_and_line(case: Case, stage: Path) -> None:
    (stage / "s.toml").write_text(case.input + "\n", encoding="utf-8")
    first = _error("s.toml")
    expected = case.expected[0]
    assert first.startswith(expected) if expected.startswith("s.toml") else expected in first, first


def test_a_good_scene_still_loads(stage: Path) -> None:
    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    assert scene.speakers == ["rex", "mio"]
    ids = ["rex-2", "Mio_3", "a.b", "x@y", "k=v", "p+q", "n/m", "x" * 128]
    (stage / "s.toml").write_text("".join(f'[[cast]]\nid = "{i}"\ncharacter = "rex.toml"\n' for i in ids))
    assert Scene.load("s.toml").speakers == ids


@pytest.mark.parametrize(
    "who", ["narrator", "NARRATOR", "rex: [joy] *waves*", "a:b", "[joy]", "*", "ミオ", "", "a b", "x" * 129, "a\nb"]
)
def test_the_api_refuses_the_same_cast_ids(who: str) -> None:
    with pytest.raises(ValidationError, match="speaker id"):
        Scene(cast={"rex": REX, who: MIO})


def test_a_cast_file_named_many_times_is_read_once(stage: Path) -> None:
    rows = "".join(f'[[cast]]\nid = "r{i}"\ncharacter = "rex.toml"\n' for i in range(MAX_CAST))
    (stage / "s.toml").write_text(rows)
    scene = Scene.load("s.toml")
    assert len({id(c) for c in scene.cast.values()}) == 1 and scene.cast["r0"] == REX
    (stage / "s.toml").write_text(rows + '[[cast]]\nid = "one-more"\ncharacter = "rex.toml"\n')
    assert _error("s.toml") == f"s.toml:1: cast: a cast of {MAX_CAST + 1:,} members: a scene has at most {MAX_CAST}"
    with pytest.raises(ValidationError, match="at most 64"):
        Scene(cast={f"r{i}": REX for i in range(MAX_CAST + 1)})


def test_a_speaker_id_is_a_session_keys_alphabet_without_the_colon() -> None:
    for code in range(0x20, 0x7F):
        c = chr(code)
        assert bool(SPEAKER_ID.fullmatch(c)) == (bool(NAME.fullmatch(c)) and c != ":"), repr(c)
    assert SPEAKER_ID.fullmatch("x" * MAX_NAME) and not SPEAKER_ID.fullmatch("x" * (MAX_NAME + 1))


@given(st.from_regex(SPEAKER_ID, fullmatch=True), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 ,.!?]{0,30}", fullmatch=True))
@settings(max_examples=60)
def test_a_cast_id_cannot_inject_markers_into_a_tags_reply(who: str, words: str) -> None:
    # serve --reply-format tags starts each line with "id: ": every id a scene accepts reads back as
    # that speaker and nothing else (an id such as "rex: [joy] *waves*" would have added a cue)
    segments = [Segment(tag="emo", text="joy"), Segment(tag="msg", text=words.strip())]
    reply = charfmt.Reply(chats=[Chat(type="C", order=1, speaker=who, segments=segments)])
    shown = whole("tags", reply, DEFAULT_TAGS, speakers=True)
    back = read_answer("tags", shown, DEFAULT_TAGS, speakers={who, "mio"})
    assert back is not None
    (chat,) = back.chats
    assert chat.speaker == who
    assert [(s.tag, s.text) for s in chat.segments] == [("emo", "joy"), ("msg", words.strip())]


# --- huge and endless scene files -------------------------------------------------------------------


def test_a_64_mb_scene_is_refused_at_16_mib(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    with path.open("wb") as f:
        f.truncate(64 * MiB)  # sparse: 64 MB of NUL bytes, on no disk
    start = time.monotonic()
    assert _error(path) == f"{path}: {TOO_LARGE}"
    assert time.monotonic() - start < WALL


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_dev_zero_as_a_scene_ends_in_little_memory(tmp_path: Path) -> None:
    assert _error("/dev/zero") == f"/dev/zero: {TOO_LARGE}"
    run = run_cli(["grammar", "--target", "gbnf", "--scene", "/dev/zero"], tmp_path)
    assert one_error_line(run) == f"charfmt: error: /dev/zero: {TOO_LARGE}"
    assert run.peak_mb < PEAK_MB and run.seconds < WALL


@pytest.fixture
def endless_pipe(tmp_path: Path) -> Iterator[Path]:
    """A FIFO a thread writes to without end (until the reader goes)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    path = tmp_path / "scene.toml"
    os.mkfifo(path)
    done = threading.Event()

    def write() -> None:
        try:
            with path.open("wb") as f:
                while not done.is_set():
                    f.write(b"# more\n" * 8192)
        except (BrokenPipeError, OSError):
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    yield path
    done.set()
    if writer.is_alive():  # the reader never came: open the other end so that the writer can end
        # (without blocking: a writer that ends between the check and this open would leave a blocking open waiting
        # for a writer forever; this hung a CI run once)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            writer.join(timeout=5)
        finally:
            os.close(fd)
    writer.join(timeout=5)


def test_an_endless_pipe_as_a_scene_ends(endless_pipe: Path) -> None:
    start = time.monotonic()
    assert _error(endless_pipe) == f"{endless_pipe}: {TOO_LARGE}"
    assert time.monotonic() - start < WALL


def test_serve_says_a_bad_scene_in_one_line(stage: Path) -> None:
    (stage / "s.toml").write_text('[[cast]]\nid = "narrator"\ncharacter = "rex.toml"\n')
    run = run_cli(["serve", "--scene", str(stage / "s.toml"), "--upstream", "http://127.0.0.1:9/v1"], stage)
    assert "cast[0].id: speaker id 'narrator' is the narrator's" in one_error_line(run)


@pytest.mark.parametrize("command", ["grammar --target gbnf", "stream", "serve --upstream http://127.0.0.1:9/v1"])
def test_an_empty_cast_is_one_error_line_at_every_door(command: str, stage: Path) -> None:
    """``cast = []``: one line naming the key, exit 1, no traceback (was ``StopIteration``)."""
    (stage / "s.toml").write_text('name = "nobody"\ncast = []\n')
    run = run_cli([*command.split(), "--scene", str(stage / "s.toml")], stage)
    assert "s.toml:2: cast: the cast is empty" in one_error_line(run)


# --- stage maps --------------------------------------------------------------------------------------

STAGE_ERRORS = load_cases("stage_errors.txt")


@pytest.mark.parametrize("case", STAGE_ERRORS, ids=[c.name for c in STAGE_ERRORS])
def test_a_type_confused_stage_map_is_one_error_naming_key_and_line(case: Case) -> None:
    with pytest.raises(charfmt.CharacterError) as e:
        charfmt.Character.from_toml(case.input, "c.toml")
    first = str(e.value).splitlines()[0]
    assert first.startswith(case.expected[0]), first


def _misspelt(keys: int, misspelt: int) -> str:
    lines = ['name = "Ann"', 'persona = "p"']
    for i in range(keys):
        lines += ["[[emotions]]", f'key = "emotion{i}"']
    for i in range(misspelt):
        lines += [f"[stage.emotions.emotoin{i}]", 'vrm = "happy"']
    return "\n".join(lines)


def test_misspelt_stage_keys_cost_one_did_you_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the first error is raised: one search through the keys, however many are misspelt (a
    # search of every key for every misspelt one took minutes at 10,000 of each).
    ratios = 0
    ratio = difflib.SequenceMatcher.ratio

    def counted(self: difflib.SequenceMatcher[str]) -> float:
        nonlocal ratios
        ratios += 1
        return ratio(self)

    monkeypatch.setattr(difflib.SequenceMatcher, "ratio", counted)
    counts = []
    for misspelt in (1, 2_000):
        ratios = 0
        with pytest.raises(charfmt.CharacterError) as e:
            charfmt.Character.from_toml(_misspelt(1_000, misspelt), "c.toml")
        counts.append(ratios)
    first = str(e.value).splitlines()[0]
    assert first.startswith("c.toml:2003: stage.emotions.emotoin0: 'emotoin0' is not an emotion key")
    assert first.endswith("emotion19, ... (1,000 in all)); did you mean 'emotion0'?")
    assert counts[0] == counts[1] < 1_000, counts  # one search, and not a full ratio per key


@pytest.mark.long
@pytest.mark.parametrize("keys", [10, 10_000])
def test_10000_misspelt_stage_keys_load_and_fail_in_under_a_second(keys: int) -> None:
    text = _misspelt(keys, 10_000)
    start = time.process_time()
    with pytest.raises(charfmt.CharacterError, match="did you mean 'emotion0'"):
        charfmt.Character.from_toml(text, "c.toml")
    assert time.process_time() - start < 1.0


def _mapped(n: int) -> str:
    lines = ['name = "Ann"', 'persona = "p"']
    for i in range(n):
        lines += ["[[emotions]]", f'key = "e{i}"']
    for i in range(n):
        lines += [f"[stage.emotions.e{i}]", f'vrm = "v{i}"', f"[stage.actions.a{i}]", f'live2d = "m{i}"']
    return "\n".join(lines)


@pytest.mark.long
def test_a_huge_stage_map_loads_in_linear_time() -> None:
    def cpu(n: int) -> float:  # the best of three CPU times (the suite runs beside other workers)
        text = _mapped(n)
        times = []
        for _ in range(3):
            gc.collect()
            start = time.process_time()
            character = charfmt.Character.from_toml(text, "c.toml")
            times.append(time.process_time() - start)
            assert character.stage is not None and len(character.stage.emotions) == n
        return max(min(times), 1e-3)

    cpu(100)
    # Ten times the entries, far apart so a loaded machine's noise (CI measured 9.9x on 4x the entries,
    # best of three) cannot pass for the difference: linear is 10x, quadratic 100x.
    small, large = cpu(1_000), cpu(10_000)
    assert large / small < 35, f"{small:.2f} s -> {large:.2f} s"
