"""The user's side: reading user blocks back (``parse_input``) and the typed shorthand (``parse_shorthand``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from conftest import ROOT, Case, load_cases
from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt import Character, UserChat, UserContext, UserTurn
from charfmt.prompt.userinput import TurnError, is_user_block, parse_input, read_turn
from charfmt.testing import user_turns
from charfmt.writer import body_text

MIO = Character.load(ROOT / "examples" / "characters" / "mio.toml")
SHORTHAND_CHARACTER = MIO.model_copy(update={"actions": [*MIO.actions, "ため息"]})
SHORTHAND = load_cases("shorthand.txt")
INPUTS = load_cases("user_input.txt")


def _unescape(text: str) -> str:
    """Case inputs write control characters as ``\\uXXXX``."""
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)


# --- parse_input -------------------------------------------------------------------


def _input(case: Case) -> str:
    text = case.input.replace("␍", "\r")
    return text[:-1] + "\n" if text.endswith("␤") else text


@pytest.mark.parametrize("case", INPUTS, ids=[c.name for c in INPUTS])
def test_parse_input(case: Case) -> None:
    text = _input(case)
    errors = [line[2:] for line in case.expected if line.startswith("! ")]
    if errors:
        (expected,) = errors
        code, where, message = expected.split(" ", 2)
        with pytest.raises(charfmt.ParseError) as info:
            charfmt.parse_input(text)
        (d,) = info.value.diagnostics
        assert (d.code, f"{d.line}:{d.column}") == (code, where)
        assert d.message.startswith(message), d.message
        return
    turn = charfmt.parse_input(text)
    contexts = [json.loads(line[len("context ") :]) for line in case.expected if line.startswith("context ")]
    assert turn.context == (UserContext(**contexts[0]) if contexts else None)
    chats = [json.loads(line) for line in case.expected if line.startswith("{")]
    assert [{"type": c.type, "segments": [[s.tag, s.text] for s in c.segments]} for c in turn.chats] == chats
    # What was read renders to the canonical form, which reads back the same.
    assert charfmt.parse_input(charfmt.render_user_block(turn)) == turn


_LAYOUT = st.sampled_from(["", "\n", " ", "\r\n", "\n  ", "\n    ", "\t", "\n\n"])


@st.composite
def _laid_out(draw: st.DrawFn, turn: UserTurn) -> str:
    """``turn`` written by hand: any layout whitespace between blocks, chats and elements."""
    rendered = charfmt.render_user_block(turn)
    context = rendered[: rendered.index("<user_chats>")]
    if context:
        context = context.rstrip("\n") + draw(st.sampled_from(["\n", "\r\n"])) + draw(_LAYOUT)
    parts = [draw(_LAYOUT), context, "<user_chats>", draw(_LAYOUT)]
    for chat in turn.chats:
        parts.append(f'<chat type="{chat.type}">')
        if chat.type == "C":
            for seg in chat.segments:
                parts += [draw(_LAYOUT), body_text("C", [seg])]
            parts.append(draw(_LAYOUT))
        else:
            parts.append(body_text(chat.type, chat.segments))
        parts += ["</chat>", draw(_LAYOUT)]
    parts += ["</user_chats>", draw(_LAYOUT)]
    return "".join(parts)


@given(st.data(), user_turns())
def test_any_layout_reads_back_the_same_turn(data: st.DataObject, turn: UserTurn) -> None:
    assert charfmt.parse_input(data.draw(_laid_out(turn))) == turn


_INTERNAL = re.compile(r"\$END|\b_?[A-Z]+(?:_[A-Z]+)+\b|__ANON|Token\(")


@given(user_turns(), st.integers(0, 10_000), st.sampled_from(["", "<", "&", "x", " ", "\r", ">", '"', "</chat>"]))
def test_errors_speak_the_users_words(turn: UserTurn, at: int, insert: str) -> None:
    block = charfmt.render_user_block(turn)
    cut = at % (len(block) + 1)
    damaged = block[:cut] + insert + block[cut + (1 if not insert else 0) :]
    try:
        charfmt.parse_input(damaged)
    except charfmt.ParseError as e:
        (d,) = e.diagnostics
        assert d.code == "CF501"
        assert not _INTERNAL.search(d.message), d.message
        assert 0 <= d.offset <= len(damaged)


def test_parse_input_reads_the_few_shot_users_of_the_system_prompt() -> None:
    for example in MIO.examples:
        block = charfmt.render_user_block(example.user)
        assert charfmt.parse_input(block + "\n") == example.user
        assert charfmt.parse_input("  " + block.replace("\n", "\r\n")) == example.user


# --- parse_shorthand ----------------------------------------------------------------


@pytest.mark.parametrize("case", SHORTHAND, ids=[c.name for c in SHORTHAND])
def test_shorthand(case: Case) -> None:
    text = _unescape(case.input)
    turn = SHORTHAND_CHARACTER.shorthand(text)
    chats = [[[s.tag, s.text] for s in chat.segments] for chat in turn.chats]
    assert chats == [json.loads(line) for line in case.expected if not line.startswith("!")]
    assert all(chat.type == "C" for chat in turn.chats)
    diagnostics = [(d.code, text[d.offset : d.end]) for d in turn.diagnostics]
    expected = [tuple(_unescape(line[2:]).split(" ", 1)) for line in case.expected if line.startswith("!")]
    assert diagnostics == expected


def test_shorthand_turn_renders_and_reads_back() -> None:
    for case in SHORTHAND:
        turn = SHORTHAND_CHARACTER.shorthand(_unescape(case.input))
        assert charfmt.parse_input(charfmt.render_user_block(turn)).chats == turn.chats


def test_parentheses_without_a_vocabulary_are_text() -> None:
    turn = charfmt.parse_shorthand("(angry) hi [sad] bye")
    assert turn.chats == [
        UserChat(segments=[charfmt.Segment(tag="msg", text="(angry) hi")]),
        UserChat(segments=[charfmt.Segment(tag="emo", text="sad"), charfmt.Segment(tag="msg", text="bye")]),
    ]
    assert turn.diagnostics == []


@pytest.mark.parametrize(
    ("text", "block"),
    [
        ('<user_chats><chat type="C"><msg>hi</msg></chat></user_chats>', True),
        ("\n  <user_chats>\n</user_chats>", True),
        ("[User Context]\nEmotion: angry\n\n[User Message]\nhi", True),
        ("[User Message]\nhi", True),
        ("[angry] なんで？", False),
        ("hello <user_chats>", False),
        ("[user context] lower case is shorthand", False),
        ("", False),
    ],
)
def test_is_user_block_tells_a_block_from_shorthand(text: str, block: bool) -> None:
    assert is_user_block(text) is block
    if block:
        parse_input(text)  # (what it calls a block, parse_input reads)


# --- parse_input with the character's vocabulary: as the shorthand reads emotions ------------------


def _block(*emotions: str) -> str:
    chats = "".join(f'<chat type="C"><emo>{e}</emo><msg>hi</msg></chat>' for e in emotions)
    return f"<user_chats>{chats}</user_chats>"


def test_parse_input_reads_emotions_by_the_vocabulary_as_the_shorthand_does() -> None:
    """Found by a newcomer's trial: ``<emo>bogus</emo>`` in a user block passed unchecked where ``[bogus]`` warns."""
    vocabulary = MIO.vocabulary
    words = [w for e in vocabulary.emotions for w in (e.key, *e.aliases, e.key.upper())]
    assert len(words) > len(vocabulary.keys)  # (aliases among them)
    for word in words:
        turn = parse_input(_block(word), vocabulary=vocabulary)
        assert turn.chats == MIO.shorthand(f"[{word}] hi").chats and turn.diagnostics == [], word
    text = _block("joy", "bogus", "angry?")
    turn = parse_input(text, vocabulary=vocabulary)
    assert [s.text for c in turn.chats for s in c.segments if s.tag == "emo"] == ["joy", "bogus", "angry?"]
    assert [(d.code, text[d.offset : d.end]) for d in turn.diagnostics] == [
        ("CF401", "<emo>bogus</emo>"), ("CF401", "<emo>angry?</emo>"),
    ]  # fmt: skip
    assert parse_input(text).diagnostics == []  # (no vocabulary: not checked)
    with pytest.raises(TypeError):
        parse_input(text, vocabulary=["joy"])  # type: ignore[arg-type]


# --- read_turn: the player's turn as render --say and the server's doors read it ------------------------------------


@given(user_turns())
def test_read_turn_reads_a_rendered_block_as_a_block(turn: UserTurn) -> None:
    """A block the renderer writes is read back as that turn (never as the player's literal words)."""
    block = charfmt.render_user_block(turn)
    if not turn.chats and turn.context is None:
        with pytest.raises(TurnError) as e:
            read_turn(block)
        assert e.value.field == "say" and str(e.value).startswith("nothing to say")
    else:
        assert read_turn(block) == turn


@given(user_turns().filter(lambda t: t.context is not None))
def test_read_turn_context_pairs_round_trip(turn: UserTurn) -> None:
    """``context`` as ``render --context KEY=VALUE`` gives it (the block's ``Key: value`` lines) is that context."""
    assert turn.context is not None
    assert read_turn("hi", context=turn.context.lines()).context == turn.context


def test_read_turn_reads_shorthand_as_shorthand_with_the_characters_words() -> None:
    c = SHORTHAND_CHARACTER
    for say in ("[angry] なんで？ [ため息] もういい", "<emo>angry</emo> is words here", "[bogus] hi"):
        got = read_turn(say, vocabulary=c.vocabulary, actions=c.actions, tags=c.tags)
        assert got == c.shorthand(say)


def test_read_turn_checks_a_blocks_emotions_against_the_vocabulary() -> None:
    say = "[User Context]\nEmotion: furious\n\n[User Message]\nなんで？"  # (a context's emotion is the player's own)
    assert read_turn(say, vocabulary=MIO.vocabulary).diagnostics == []
    say = '<user_chats><chat type="C"><emo>smug</emo><msg>hi</msg></chat></user_chats>'
    (d,) = read_turn(say, vocabulary=MIO.vocabulary).diagnostics
    assert (d.code, d.offset, d.end) == ("CF401", 27, 42)


def test_read_turn_context_mapping_keys_in_any_case() -> None:
    turn = read_turn("hi", context={"EMOTION": "angry", "environment": "raining", "Weather": "rain"})
    assert turn.context == UserContext(emotion="angry", environment="raining", extra={"Weather": "rain"})
    assert read_turn("hi", context={"emotion": ""}).context is None  # (an empty field is no field, as render's)


@pytest.mark.parametrize(
    ("say", "context", "field", "message"),
    [
        ("<user_chats></user_chats>", None, "say", "nothing to say: the user block holds no chat and no context"),
        ("  ", None, "say", "nothing to say: the player's turn is empty"),
        ("hi", [("emotion", "a"), ("Emotion", "b")], "context", "context key 'Emotion' is given twice"),
        ("hi", [(" ", "a")], "context", "context key ' ': letters, digits"),
        ("hi", [("bad key", "a")], "context", "context key 'bad key': letters, digits"),
        ("hi", [("weather", "")], "context", "context value for 'weather' is empty"),
        ("hi", {"weather": 3}, "context", "context 'weather': the value must be a string, not int"),
        ("[User Message]\nhi\n", None, None, None),
        ("[User Context]\nEmotion: x\n\n[User Message]\nhi", [("a", "b")], "context", "give the context once"),
    ],
)
def test_read_turn_says_which_part_cannot_be_sent(say: str, context: Any, field: str | None, message: str) -> None:
    if field is None:
        assert read_turn(say, context=context).chats
        return
    with pytest.raises(TurnError) as e:
        read_turn(say, context=context)
    assert e.value.field == field
    assert message in str(e.value)
    assert isinstance(e.value, charfmt.CharfmtError)


def test_read_turn_a_broken_block_is_a_parse_error_where_it_breaks() -> None:
    with pytest.raises(charfmt.ParseError) as e:
        read_turn('<user_chats>\n<chat type="C"><msg>unclosed</chat></user_chats>')
    assert (e.value.line, e.value.column, e.value.first.code) == (2, 29, "CF501")
