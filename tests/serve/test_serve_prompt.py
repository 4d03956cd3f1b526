"""serve's prompt (``charfmt.serve.prompt``): the system prompt rendered once, the messages as rendering them whole.

Each turn's messages must be exactly what ``render_messages`` (a scene: ``Scene.render_messages``)
gives with the system prompt rendered in place, the limits note appended, the oldest exchanges
left out to fit the same budget; a turn that cannot fit says the same. The system prompt is
rendered again when its template file changes, and only then.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from charfmt import Character, parse
from charfmt.prompt._token_fit import fit_messages
from charfmt.prompt.character import Exchange
from charfmt.prompt.render import ESTIMATE, BudgetError, render_messages
from charfmt.prompt.scene import Scene
from charfmt.serve import Settings
from charfmt.serve.prompt import BadTurn
from charfmt.serve.turns import Engine
from charfmt.writer import canonical_form

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import reply_for

EXAMPLES = ROOT / "examples"
REX = Character.load(EXAMPLES / "characters" / "rex.toml")
SCENE = Scene.load(EXAMPLES / "scenes" / "mars_shrine.toml")
WORDS = st.text(alphabet=st.sampled_from("abc xyz<>&\u2028#*[]"), min_size=1, max_size=30)


def _engine(n_ctx: int = 8192, scene: Scene | None = None) -> Engine:
    character = next(iter(scene.cast.values())) if scene is not None else REX
    return Engine(Settings(character=character, scene=scene, upstream_url="http://127.0.0.1:9/v1", n_ctx=n_ctx), None)  # type: ignore[arg-type]


def _exchange(character: Character, said: str) -> Exchange:
    reply = parse(reply_for(said), vocabulary=character.vocabulary, tags=character.tags)
    return Exchange(user=character.shorthand(said), reply=canonical_form(reply, tags=character.tags))


def _rendered_whole(engine: Engine, history: list[Exchange], say: str) -> list[dict[str, str]]:
    """The messages rendered whole every turn (``render_messages``, ``Scene.render_messages``), the note appended
    to the system prompt, the oldest exchanges left out until the messages as sent fit the budget."""
    turn = engine.player_turn(say)

    def build(start: int) -> list[dict[str, str]]:
        if engine.scene is not None:
            messages: list[dict[str, str]] = engine.scene.render_messages(history[start:], turn)["messages"]
        else:
            messages = render_messages(engine.character, history[start:], turn)["messages"]
        messages[0] = {**messages[0], "content": f"{messages[0]['content'].rstrip()}\n\n{engine.note}\n"}
        return messages

    try:
        return fit_messages(build, len(history), budget=engine.budget, counter=ESTIMATE)[1]
    except BudgetError as e:
        raise BadTurn(f"the turn does not fit the context window: {e}") from None


def _same(engine: Engine, history: list[Exchange], say: str) -> None:
    try:
        expected: Any = _rendered_whole(engine, history, say)
    except BadTurn:
        expected = "BadTurn"
    try:
        got: Any = engine.request(history, engine.player_turn(say))["messages"]
    except BadTurn as e:
        assert str(e).startswith("the turn does not fit the context window: the request needs ")
        got = "BadTurn"
    assert got == expected


@pytest.mark.parametrize("n_ctx", [8192, 3200, 2900, 2600, 1200])
@pytest.mark.parametrize("exchanges", [0, 1, 6])
def test_the_messages_are_those_rendered_whole(n_ctx: int, exchanges: int) -> None:
    engine = _engine(n_ctx)
    history = [_exchange(REX, f"turn {k} S{k}R0 fix it") for k in range(exchanges)]
    _same(engine, history, "[joy] *waves* hello there")
    _same(engine, history, "x " * 900)  # a long turn: older exchanges go, or it does not fit at all


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(WORDS, max_size=5), WORDS, st.sampled_from([8192, 2800, 2300]))
def test_any_history_renders_as_whole(said: list[str], say: str, n_ctx: int) -> None:
    engine = _engine(n_ctx)
    if not say.strip():
        return
    _same(engine, [_exchange(REX, s) for s in said], say)


@pytest.mark.parametrize("n_ctx", [8192, 2600])
def test_a_scenes_messages_are_those_rendered_whole(n_ctx: int) -> None:
    engine = _engine(n_ctx, SCENE)
    first = next(iter(SCENE.cast.values()))
    history = [_exchange(first, f"turn {k} ring the bell") for k in range(4)]
    _same(engine, history, "hello all")


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """Each call of ``charfmt.prompt.render.<name>`` from now on, noted (the function still does its work)."""
    import charfmt.prompt.render

    calls: list[str] = []
    real = getattr(charfmt.prompt.render, name)

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(name)
        return real(*args, **kw)

    monkeypatch.setattr(charfmt.prompt.render, name, counted)
    return calls


def test_the_system_prompt_is_rendered_again_only_when_its_template_changes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _counting(monkeypatch, "render_system")
    engine = _engine()
    template = tmp_path / "system.j2"
    template.write_text("stand-in for the template file", encoding="utf-8")
    engine.prompter._template = template  # the file whose changes are watched
    turn = engine.player_turn("hi")
    first = engine.request([], turn)["messages"][0]["content"]
    for _ in range(3):
        assert engine.request([], turn)["messages"][0]["content"] == first
    assert len(calls) == 1
    stat = template.stat()
    os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    engine.request([], turn)
    assert len(calls) == 2
    engine.request([], turn)
    assert len(calls) == 2


def test_a_past_exchange_is_rendered_once_while_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = _counting(monkeypatch, "history_reply")
    engine = _engine()
    engine.request([], engine.player_turn("hi"))  # the system prompt rendered (its examples' replies too)
    calls.clear()
    template = tmp_path / "user.j2"
    template.write_text("stand-in for the template file", encoding="utf-8")
    engine.prompter._user_template = template  # the file whose changes are watched
    history: list[Exchange] = []
    for k in range(4):  # a session's turns: the history grows by one exchange each turn
        say = f"turn {k} S{k}R0 fix it"
        engine.request(history, engine.player_turn(say))
        history.append(_exchange(REX, say))
    assert len(calls) == 3  # each past exchange once, though the last turn's prompt held three
    stat = template.stat()
    os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    engine.request(history, engine.player_turn("again"))
    assert len(calls) == 3 + 4  # user.j2 changed: every past exchange rendered anew
    engine.request(history, engine.player_turn("again"))
    assert len(calls) == 7
    _same(engine, history, "again")  # and the kept texts are those rendered whole


def test_an_equal_exchange_that_is_another_object_is_rendered_for_itself() -> None:
    engine = _engine()
    one = _exchange(REX, "first S1R0")
    other = _exchange(REX, "second S2R0")
    _same(engine, [one], "next")
    _same(engine, [other], "next")  # not the first one's texts, though the session's list is the same length
    _same(engine, [other, one], "next")


def test_a_turn_is_rendered_once_then_shown_again_as_history(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The player's turn is rendered for its prompt; as the server keeps it (its exchange holds that
    very turn), later prompts show that text again, not a second rendering; ``user.j2`` changed: anew."""
    calls = _counting(monkeypatch, "render_user_block")
    engine = _engine()
    template = tmp_path / "user.j2"
    template.write_text("stand-in for the template file", encoding="utf-8")
    engine.prompter._user_template = template  # the file whose changes are watched
    history: list[Exchange] = []
    for k in range(4):  # a session: each turn's exchange holds the turn the server rendered
        turn = engine.player_turn(f"turn {k} S{k}R0 fix it")
        engine.request(history, turn)
        history.append(Exchange(user=turn, reply=_exchange(REX, "x").reply))
    assert len(calls) == 4  # each turn once: as itself, never again as history
    stat = template.stat()
    os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    engine.request(history, engine.player_turn("again"))
    assert len(calls) == 4 + 4 + 1  # user.j2 changed: the history's turns rendered anew, and the new one
    _same(engine, history, "again")  # the texts are those rendered whole
