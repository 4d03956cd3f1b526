"""``charfmt chat``'s terminal view: who speaks what, one line per action, plain chats as narration and game lines."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ROOT

from charfmt.chat import PLAIN_CHAT_STYLES, RESET_LINE, TerminalView, run, take_turn
from charfmt.events import Reset
from charfmt.prompt.character import Character
from charfmt.stream import StreamParser
from charfmt.tags import CHAT_TYPES, TAGGED_TYPES

REX = str(ROOT / "examples" / "characters" / "rex.toml")
MIO = str(ROOT / "examples" / "characters" / "mio.toml")


def scripted(chats: list[dict[str, Any]], size: int = 3) -> Any:
    """A model that answers the reply ``{"chats": chats}`` in chunks of ``size`` characters."""
    text = json.dumps({"chats": chats}, ensure_ascii=False)

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        for i in range(0, len(text), size):
            yield text[i : i + size]

    return generate


def shown(character: Character, chats: list[dict[str, Any]], *, size: int = 3, color: bool = False) -> list[str]:
    """The lines the view shows for one turn answered with ``chats``."""
    out = io.StringIO()
    take_turn(character, [], "hi", scripted(chats, size), view=TerminalView(character, out, color=color))
    return out.getvalue().splitlines()


def c(body: str, order: int = 1) -> dict[str, Any]:
    return {"type": "C", "order": order, "body": body}


def test_an_i_chat_is_narration_and_an_e_chat_a_game_line_never_the_character_speaking() -> None:
    rex = Character.load(REX)
    lines = shown(rex, [
        c("<emo>neutral</emo>\n<msg>Fine. Leave it here.</msg>"),
        {"type": "I", "order": 2, "body": "Rex starts working on the drone."},
        {"type": "E", "order": 3, "body": "The price went up by 5 bolts."},
    ])  # fmt: skip
    assert lines == [
        "[sprite: rex_idle]",
        "Rex: Fine. Leave it here.",
        "  (tts) Fine.",
        "  (tts) Leave it here.",
        "~ Rex starts working on the drone.",  # narration: no speaker
        "[event] The price went up by 5 bolts.",  # a game line
    ]
    assert not any(line.startswith("Rex (text)") for line in lines)


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_a_line_break_inside_an_action_keeps_the_action_on_one_line(size: int) -> None:
    rex = Character.load(REX)
    lines = shown(rex, [c("<act>wipes the counter,\nthen\n  taps it</act>\n<msg>Done.</msg>")], size=size)
    assert lines[0] == "*wipes the counter, then taps it*"
    assert lines[1] == "Rex: Done."


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_a_line_break_inside_typed_text_continues_the_line_marked_as_the_first(size: int) -> None:
    rex = Character.load(REX)
    lines = shown(rex, [
        c("<msg>Forty bolts.\nNot one less.\n</msg>\n<thought>Cheap.\nVery cheap.</thought>"),
        {"type": "I", "order": 2, "body": "Rex takes the drone.\nHe turns it over."},
        {"type": "E", "order": 3, "body": "Quest updated.\nReturn tomorrow."},
    ], size=size)  # fmt: skip
    assert lines == [
        "Rex: Forty bolts.",
        "     Not one less.",  # under the speech, not a line of its own; the trailing break left no empty line
        "  (tts) Forty bolts.",
        "  (tts) Not one less.",
        "  (thinks) Cheap.",
        "           Very cheap.",
        "~ Rex takes the drone.",
        "~ He turns it over.",  # every line of narration is marked as narration
        "[event] Quest updated.",
        "[event] Return tomorrow.",
    ]


def test_on_a_terminal_narration_and_game_lines_have_their_own_styles() -> None:
    mio = Character.load(MIO)
    lines = shown(mio, [
        c("<emo>joy</emo>\n<msg>どうぞ！</msg>"),
        {"type": "I", "order": 2, "body": "旅人は「旅守り」を手に入れた。"},
        {"type": "E", "order": 3, "body": "鐘が鳴った。"},
    ], color=True)  # fmt: skip
    assert "\x1b[3m~ 旅人は「旅守り」を手に入れた。\x1b[0m" in lines  # italic narration
    assert "\x1b[1m[event] 鐘が鳴った。\x1b[0m" in lines  # a bold game line
    assert not any(line.startswith(f"{mio.name}") and "旅守り" in line for line in lines)


def test_every_plain_chat_type_has_a_view_and_none_is_speech() -> None:
    plain = set(CHAT_TYPES) - TAGGED_TYPES
    assert set(PLAIN_CHAT_STYLES) == plain
    assert {s.role for s in PLAIN_CHAT_STYLES.values()} == {"narration", "event"}
    prefixes = [s.prefix for s in PLAIN_CHAT_STYLES.values()]
    assert len(set(prefixes)) == len(prefixes) and all(p.strip() for p in prefixes)


def test_terminal_controls_and_bidi_overrides_in_a_reply_are_shown_escaped() -> None:
    rex = Character.load(REX)
    lines = shown(rex, [
        c("<act>grins\u202e</act>\n<msg>abc\u202edef \u2066x\u2069</msg>"),
        {"type": "E", "order": 2, "body": "Bell\u200f."},
    ])  # fmt: skip
    assert lines[0] == "*grins\\u202e*"
    assert lines[1] == "Rex: abc\\u202edef \\u2066x\\u2069"
    assert "[event] Bell\\u200f." in lines
    assert not any(ch in "\n".join(lines) for ch in "\u202e\u2066\u2069\u200f")


def test_the_chat_loop_shows_plain_chats_in_a_pipe() -> None:
    rex = Character.load(REX)
    out, err = io.StringIO(), io.StringIO()
    model = scripted([c("<act>whirs\nand clicks</act>\n<msg>Hm.</msg>"), {"type": "I", "order": 2, "body": "Silence."}])
    assert run(rex, generate=model, says=["hello"], out=out, err=err, stats=[]) == 0
    assert out.getvalue().splitlines() == ["you> hello", "*whirs and clicks*", "Rex: Hm.", "  (tts) Hm.", "~ Silence."]


def test_leading_and_blank_lines_of_typed_text_leave_no_empty_or_trailing_space_lines() -> None:
    rex = Character.load(REX)
    lines = shown(
        rex, [c("<msg>\n\n  Hm.\n\nNo.</msg>"), {"type": "I", "order": 2, "body": "\nRain.\n\nWind."}], size=2
    )
    assert lines == ["Rex: Hm.", "", "     No.", "  (tts) Hm.", "  (tts) No.", "~ Rain.", "~", "~ Wind."]


def test_a_reply_read_again_as_a_whole_is_marked_before_it_is_shown_anew() -> None:
    # SmolLM2's free reply to mio (tests/data/free_replies.jsonl: smollm2, mio, turn 8), streamed a character at a time
    mio = Character.load(MIO)
    text = (
        'アニンゴールは、小蔵系の首を利用します。\n<chats>\n<chat type="C">\n<emo>...</emo>\n'
        "<msg>住所に私と宮司されは旅人です－）＆ブーリングを生ずるか？？</msg><thought:明日も晴れるだけど</thought>\n"
        "<act>裏山の封印のモート・バップ＆太らは"
    )
    out = io.StringIO()
    take_turn(mio, [], "hi", lambda messages: iter(text), view=TerminalView(mio, out))
    lines = out.getvalue().splitlines()
    assert lines[0] == "ミオ: アニンゴールは、小蔵系の首を利用します。"  # shown as it streamed
    assert lines[1] == RESET_LINE  # then taken back: the reply read as a whole follows
    assert lines.count(RESET_LINE) == 1
    assert "ミオ: 住所に私と宮司されは旅人です－）＆ブーリングを生ずるか？？" in lines[2:]
    act = lines.index("*裏山の封印のモート・バップ＆太らは*")
    after = lines[act + 1 :]  # the diagnostics, after the reply, never between its lines
    assert after and all(line.startswith("! ") for line in after)
    assert "! warning CF702: <act> is not closed before the end of the body" in after
    assert not any(line.startswith("! ") for line in lines[:act])


def test_no_reset_line_where_nothing_was_shown_before_the_reread() -> None:
    """A ``Reset`` that takes back nothing visible (only diagnostics-free silence) prints no line."""
    rex = Character.load(REX)
    parser = StreamParser(lenient=True)
    whole = [*parser.feed('<msg>The inn is a place.</msg>'), *parser.close()]
    out = io.StringIO()
    view = TerminalView(rex, out)
    view.show([Reset(), *whole])
    view.finish()
    assert RESET_LINE not in out.getvalue() and "The inn is a place." in out.getvalue()
    shown = io.StringIO()
    view = TerminalView(rex, shown)
    view.show([*whole, Reset(), *whole])
    view.finish()
    assert RESET_LINE in shown.getvalue()
