"""Character files and history files: every mistake an author makes is a CharacterError naming file, key and line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, Case, load_cases
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt import Character, CharacterError, CharfmtError, EmotionKey, Vocabulary
from charfmt.cli import main

ERRORS = load_cases("character_errors.txt")
MIO = Character.load(ROOT / "examples" / "characters" / "mio.toml")
MINIMAL = 'name = "x"\npersona = "p"\n[[emotions]]\nkey = "joy"\n'


@pytest.mark.parametrize("case", ERRORS, ids=[c.name for c in ERRORS])
def test_character_errors_name_file_key_and_line(case: Case) -> None:
    (expected,) = case.expected
    with pytest.raises(CharacterError) as info:
        Character.from_toml(case.input + "\n", "c.toml")
    assert str(info.value).startswith(expected), str(info.value)
    assert "Value error," not in str(info.value) and "validation error" not in str(info.value)


def test_load_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(MINIMAL + "aliasses = []\n", encoding="utf-8")
    with pytest.raises(CharacterError, match=r"c\.toml:5: emotions\[0\]\.aliasses: unknown key") as info:
        Character.load(path)
    assert (info.value.file, info.value.key, info.value.line) == (str(path), "emotions[0].aliasses", 5)


def test_a_character_built_in_code_is_checked_too() -> None:
    with pytest.raises(ValueError, match="Extra inputs"):
        Character.model_validate({"name": "x", "persona": "p", "emotions": ["joy"], "user_nmae": "u"})
    turn = charfmt.UserTurn.say("hi", emotion="furious")
    example = charfmt.Exchange(user=turn, reply=charfmt.Reply())
    with pytest.raises(ValueError, match=r"example 0 \(user\): emotion 'furious'"):
        Character(name="x", persona="p", emotions=[EmotionKey(key="joy")], examples=[example])


# --- hostile or absurd files: CharacterError, never a foreign error ---------------------


def _deep_toml() -> str:
    return "a = " + "[" * 50_000 + "]" * 50_000 + "\n"


def _deep_inline_table() -> str:
    return "a = " + "{b = " * 5_000 + "1" + "}" * 5_000 + "\n"


HOSTILE_TOML: dict[str, Callable[[], str]] = {
    "deeply nested arrays": _deep_toml,
    "deeply nested inline tables": _deep_inline_table,
    "a 5,000-digit integer": lambda: MINIMAL.replace('name = "x"', "name = " + "9" * 5000),
    "a NUL byte": lambda: MINIMAL + "\x00",
    "a lone surrogate": lambda: MINIMAL.replace('"x"', '"\ud800"'),
    "examples as a string": lambda: MINIMAL + 'examples = "x"\n',
    "emotions as a table": lambda: 'name = "x"\npersona = "p"\n[emotions]\nkey = "joy"\n',
}


@pytest.mark.parametrize("make", HOSTILE_TOML.values(), ids=list(HOSTILE_TOML))
def test_hostile_character_text_is_a_character_error(make: Callable[[], str]) -> None:
    with pytest.raises(CharacterError) as info:
        Character.from_toml(make(), "c.toml")
    assert str(info.value).startswith("c.toml")


MIO_TEXT = (ROOT / "examples" / "characters" / "mio.toml").read_text(encoding="utf-8")


@given(
    st.integers(0, len(MIO_TEXT)), st.integers(0, 40), st.sampled_from(["", "[", "]", "=", '"', "\n", "{", "1", "x"])
)
def test_a_damaged_character_file_loads_or_is_a_character_error(at: int, cut: int, insert: str) -> None:
    text = MIO_TEXT[:at] + insert + MIO_TEXT[at + cut :]
    try:
        Character.from_toml(text, "c.toml")
    except CharacterError as e:
        assert str(e).startswith("c.toml")


def test_unreadable_files_are_character_errors(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(MINIMAL.encode() + b'persona2 = "caf\xe9"\n')
    with pytest.raises(CharacterError, match=r"latin1\.toml:5: not UTF-8: byte 0xE9"):
        Character.load(latin1)
    with pytest.raises(CharacterError, match="cannot read"):
        Character.load(tmp_path)
    with pytest.raises(CharacterError, match="cannot read"):
        Character.load(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_text(MINIMAL + "#" * 200 + "\n")
    with pytest.raises(CharacterError, match=r"larger than 100 bytes \(max_size\)"):
        Character.load(big, max_size=100)
    with pytest.raises(CharacterError, match=r"larger than 100 bytes"):
        charfmt.load_history(big, MIO, max_size=100)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_file_is_cut_at_max_size() -> None:
    with pytest.raises(CharacterError, match="larger than"):
        Character.load("/dev/zero", max_size=1 << 20)
    with pytest.raises(CharacterError, match="larger than"):
        charfmt.load_history("/dev/zero", MIO, max_size=1 << 20)


HOSTILE_HISTORY: dict[str, str] = {
    "deeply nested JSON": '{"user": "hi", "reply": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deeply nested user": '{"user": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + ', "reply": {"chats": []}}',
    "a 5,000-digit integer": '{"user": "hi", "reply": {"chats": [{"type": "C", "order": ' + "9" * 5000 + "}]}}",
    "not an object": "[1, 2]",
    "extra key": '{"user": "hi", "reply": {"chats": []}, "x": 1}',
    "invalid JSON": '{"user": "hi",',
    "a user turn of the wrong shape": '{"user": {"chats": 3}, "reply": {"chats": []}}',
    "a reply with an unknown emotion": '{"user": "hi", "reply": "<emo>furious</emo>"}',
}


@pytest.mark.parametrize("line", HOSTILE_HISTORY.values(), ids=list(HOSTILE_HISTORY))
def test_hostile_history_is_a_character_error_naming_the_line(line: str) -> None:
    text = '{"user": "[joy] hi", "reply": {"chats": []}}\n\n' + line + "\n"
    with pytest.raises(CharacterError) as info:
        charfmt.prompt.character.history_from_jsonl(text, MIO, "h.jsonl")
    assert str(info.value).startswith("h.jsonl:3: "), str(info.value)
    assert info.value.line == 3


def test_history_from_text_and_from_a_file_agree(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "history.jsonl").read_text(encoding="utf-8")
    assert charfmt.prompt.character.history_from_jsonl(text, MIO) == charfmt.load_history(
        ROOT / "examples" / "history.jsonl", MIO
    )


# --- Vocabulary -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        Vocabulary.of,
        lambda: Vocabulary(emotions=[]),
        lambda: Vocabulary.model_validate({"emotions": []}),
    ],
    ids=["of()", "emotions=[]", "model_validate"],
)
def test_an_empty_vocabulary_is_rejected(make: Callable[[], Vocabulary]) -> None:
    with pytest.raises(ValueError, match="a vocabulary needs at least one emotion key"):
        make()


def test_cli_grammar_with_no_emotion_keys_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grammar", "--target", "regex", "--emotions", " , "]) == 2  # a usage error
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "charfmt: error: argument --emotions: no emotion key given (see 'charfmt grammar --help')\n"


def test_vocabulary_of_raises_a_charfmt_error_in_plain_words() -> None:
    with pytest.raises(CharfmtError) as info:
        Vocabulary.of("joy", " sad")
    assert str(info.value) == "emotions[1].key: emotion key ' sad' is not a valid key"
    with pytest.raises(CharfmtError, match=r"^emotions\[1\]\.key: emotion 'joy' is listed twice$"):
        Vocabulary.of("joy", "joy")


def test_vocabulary_accepts_keys_mappings_and_emotion_keys() -> None:
    vocab = Vocabulary(emotions=["joy", {"key": "sad", "aliases": ["悲しい"]}, EmotionKey(key="calm")])
    assert vocab.keys == ["joy", "sad", "calm"] and vocab.resolve("悲しい") == "sad"
    with pytest.raises(ValueError, match="Extra inputs"):
        Vocabulary(emotions=[{"key": "sad", "alias": ["悲しい"]}])


USER_CODE = '''\
"""A user's file, written the way the README and docstrings show."""

import charfmt
from charfmt import EmotionKey, Vocabulary

v1 = Vocabulary(emotions=["joy", "sad"], policy="fallback", fallback="sad")
v2 = Vocabulary(emotions=[{"key": "joy", "aliases": ["happy"]}, "sad", EmotionKey(key="calm")])
v3 = charfmt.Vocabulary.of("joy", "sad", "angry", policy="nearest")
keys: list[str] = v1.keys + v2.keys + v3.keys
first: EmotionKey = v2.emotions[0]
reply = charfmt.parse('{"chats": []}', vocabulary=v1)
character = charfmt.Character.from_toml("", "c.toml")
loaded = charfmt.Character.load("c.toml")
history = charfmt.load_history("h.jsonl", loaded)
'''


def test_documented_forms_pass_mypy_strict_in_user_code(tmp_path: Path) -> None:
    (tmp_path / "user_code.py").write_text(USER_CODE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", os.devnull, "user_code.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_examples_load_and_few_shot_users_are_clean() -> None:
    assert all(not ex.user.diagnostics for ex in MIO.examples)
    assert json.loads(json.dumps(MIO.model_dump(mode="json")))["name"] == "ミオ"


# -- issue 22.15: every misspelt key is reported, in file order -----------------------------

_MISSPELT = """name = "Rex"
persona = "p"

[[emotions]]
key = "neutral"

[[emotions]]
key = "annoyed"
aliasses = ["angry"]

[[emotions]]
key = "pleased"
descripton = "happy"

[[tags]]
name = "sfx"
role = "cue"
descriptoin = "a sound"

[[exmaples]]
user = "hi"
"""


def test_several_misspelt_keys_are_each_reported_in_file_order() -> None:
    with pytest.raises(CharacterError) as info:
        Character.from_toml(_MISSPELT, "rex.toml")
    lines = str(info.value).splitlines()
    assert lines == [
        "rex.toml:9: emotions[1].aliasses: unknown key 'aliasses'; did you mean 'aliases'?",
        "rex.toml:13: emotions[2].descripton: unknown key 'descripton'; did you mean 'description'?",
        "rex.toml:18: tags[0].descriptoin: unknown key 'descriptoin'; did you mean 'description'?",
        "rex.toml:20: exmaples: unknown key 'exmaples'; did you mean 'examples'?",
    ]
    assert [(e.key, e.line) for e in info.value.errors] == [
        ("emotions[1].aliasses", 9),
        ("emotions[2].descripton", 13),
        ("tags[0].descriptoin", 18),
        ("exmaples", 20),
    ]
    assert (info.value.key, info.value.line) == ("emotions[1].aliasses", 9)  # the first one, as before


_PLACES = {
    "top": ("", "nmae = 'x'\n"),
    "emotion": ("[[emotions]]\nkey = 'k{n}'\n", "aliasess = []\n"),
    "example": ("[[examples]]\nuser = 'hi'\n", "replly = []\n"),
    "reply": ("[[examples]]\nuser = 'hi'\n[[examples.reply]]\ntype = 'E'\nbody = 'x'\n", "bdy = 'y'\n"),
}


@given(st.lists(st.sampled_from(sorted(_PLACES)), min_size=2, max_size=6))
def test_misspelt_keys_anywhere_are_all_reported_in_file_order(places: list[str]) -> None:
    text = 'persona = "p"\n[[emotions]]\nkey = "joy"\n'
    tops = [p for p in places if p == "top"]
    text = "".join(_PLACES["top"][1] for _ in tops[:1]) + text
    wrong_lines = [1] if tops else []
    for n, place in enumerate(p for p in places if p != "top"):
        head, wrong = _PLACES[place]
        text += head.format(n=n)
        wrong_lines.append(text.count("\n") + 1)
        text += wrong
    with pytest.raises(CharacterError) as info:
        Character.from_toml('name = "x"\n' + text, "c.toml")
    assert [e.line for e in info.value.errors] == [line + 1 for line in wrong_lines]
    assert all("unknown key" in str(e) for e in info.value.errors)
