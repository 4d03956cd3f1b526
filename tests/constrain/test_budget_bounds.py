"""One bounded engine behind every door (issue 39, items 1-4), without a model.

``charfmt.grammar``/``json_schema``/``request_fields`` with a budget, ``charfmt grammar``, ``charfmt
chat``'s bounds and ``charfmt serve``'s (a character, a scene, llama.cpp in-process) all plan their
bounds with ``charfmt.constrain.export.plan_bounds``: speech required and given the budget, each role as long as
the character's examples, fewer chats before shorter elements, the model's tokens per character where
it is known. The grammars are checked with llguidance over a byte tokenizer (no model needed).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import ROOT

import charfmt
from charfmt.cli import main
from charfmt.constrain._grammar_bounds import MIN_SCENE_SPEECH_CHARS
from charfmt.constrain._reply_constraints import MIN_SPEECH_CHARS
from charfmt.constrain.budget import chat_bounds, limit_note, speech_texts
from charfmt.constrain.engines import request_fields
from charfmt.constrain.export import (
    DEFAULT_TOKENS_PER_CHAR,
    bytes_per_char,
    max_reply_tokens,
    plan_bounds,
    resolve_bounds,
)
from charfmt.prompt.character import Character, Exchange
from charfmt.prompt.scene import Scene

REX = ROOT / "examples" / "characters" / "rex.toml"
MIO = ROOT / "examples" / "characters" / "mio.toml"
SHRINE = ROOT / "examples" / "scenes" / "mars_shrine.toml"
LUMI = ROOT / "examples" / "cards" / "lumi.png"


class _Bytes:
    """A tokenizer with one token per byte and an end token: llguidance reads a grammar without a model."""

    eos_token_id = 256
    bos_token_id = None
    tokens: ClassVar[list[bytes]] = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids: ClassVar[list[int]] = [256]

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


@functools.cache
def _matcher(grammar: str) -> Any:
    llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install charfmt[engines])")
    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher


def accepts(grammar: str, text: str, target: str = "lark") -> bool:
    """Whether ``grammar`` (Lark, or GBNF read through llguidance's converter) accepts ``text``."""
    if target == "gbnf":
        from llguidance.gbnf_to_lark import gbnf_to_lark

        grammar = gbnf_to_lark(grammar)
    m = _matcher(grammar).deep_copy()
    return bool(m.consume_tokens(list(text.encode())) and not m.is_error() and m.is_accepting())


def reply(*bodies: str, speakers: tuple[str | None, ...] = ()) -> str:
    chats: list[dict[str, Any]] = []
    for n, body in enumerate(bodies):
        speaker = speakers[n] if n < len(speakers) else None
        chats.append({"type": "C", "order": n + 1, **({"speaker": speaker} if speaker else {}), "body": body})
    return json.dumps({"chats": chats}, ensure_ascii=False)


# --- item 1: the documented grammar call -----------------------------------------------------------


@pytest.mark.parametrize("target", ["lark", "gbnf"])
@pytest.mark.parametrize("path", [REX, MIO], ids=["rex", "mio"])
def test_the_documented_call_requires_speech_and_spends_the_budget_on_it(target: str, path: Path) -> None:
    """``grammar("gbnf", vocabulary=v, max_tokens=300)`` bounded every element at 9 characters, speech optional:
    SmolLM2 answered ``<msg>I am not </msg>`` and ``<act>taps the </act>`` with no speech at all."""
    c = Character.load(path)
    bounds = resolve_bounds(vocabulary=c.vocabulary, tags=c.tags, max_tokens=300)
    assert bounds is not None and bounds.require_speech
    assert bounds.max_chars is not None and bounds.max_chars >= MIN_SPEECH_CHARS, bounds
    assert bounds.min_speech >= bounds.max_chars // 2  # every C chat says a sentence, not a word
    grammar = charfmt.grammar(target, vocabulary=c.vocabulary, tags=c.tags, max_tokens=300)
    key = c.vocabulary.keys[0]
    said = "s" * bounds.min_speech
    assert accepts(grammar, reply(f"<emo>{key}</emo>\n<msg>{said}</msg>"), target)
    assert accepts(grammar, reply(f"<emo>{key}</emo>\n<act>taps the counter</act>\n<msg>{said}</msg>"), target)
    for silent in (f"<emo>{key}</emo>", f"<emo>{key}</emo>\n<act>taps the </act>", "<msg>I am not </msg>"):
        assert charfmt.parse(reply(silent)) and not accepts(grammar, reply(silent), target), silent
    assert not accepts(grammar, '{"chats":[]}', target)  # a reply says something


def test_the_default_tokens_per_character_is_exact_for_ascii_and_said_for_other_scripts() -> None:
    """Without the model, English is counted exactly (every token holds a byte); a character's examples in
    another script are counted by their UTF-8 bytes, which no tokenizer exceeds; the model's own, where given."""
    rex, mio = Character.load(REX), Character.load(MIO)
    assert DEFAULT_TOKENS_PER_CHAR == 1.0
    assert bytes_per_char(speech_texts(rex)) == 1.0
    assert 2.5 < bytes_per_char(speech_texts(mio)) <= 3.0
    english = resolve_bounds(character=rex, max_tokens=300)
    assert english is not None
    longest = max_reply_tokens(english, vocabulary=rex.vocabulary, tags=rex.tags, tokens_per_char=1.0)
    assert longest + 1 <= 300  # an English reply the grammar allows fits 300 tokens on any tokenizer
    unknown = resolve_bounds(character=mio, max_tokens=300)
    known = resolve_bounds(character=mio, max_tokens=300, tokens_per_char=1.0)  # a model with a token per kana
    assert unknown is not None and known is not None and (known.max_chars or 0) > (unknown.max_chars or 0)
    with pytest.raises(charfmt.CharfmtError, match="tokens_per_char is at least 1"):
        charfmt.grammar("lark", max_tokens=300, tokens_per_char=0.25)


# --- one engine on every door ----------------------------------------------------------------------


def test_every_door_plans_the_same_bounds_and_writes_the_same_grammar(capsys: pytest.CaptureFixture[str]) -> None:
    """grammar(), request_fields(), charfmt grammar, chat's bounds and serve's (its grammar sent upstream)."""
    pytest.importorskip("starlette")
    from charfmt.serve import Settings
    from charfmt.serve.turns import Engine, reply_bounds

    rex = Character.load(REX)
    planned = resolve_bounds(character=rex, max_tokens=300)
    assert planned == plan_bounds(300, vocabulary=rex.vocabulary, tags=rex.tags,
                                  examples=[ex.reply for ex in rex.examples], actions=rex.actions)  # fmt: skip
    assert chat_bounds(rex, 300) == planned
    settings = Settings(character=rex, upstream_url="http://127.0.0.1:9/v1", max_tokens=300)
    assert reply_bounds(settings) == planned
    gbnf = charfmt.grammar("gbnf", character=rex, max_tokens=300)
    assert request_fields("llama-server", character=rex, max_tokens=300)["grammar"] == gbnf
    assert main(["grammar", "--target", "gbnf", "--character", str(REX), "--max-tokens", "300"]) == 0
    assert capsys.readouterr().out == gbnf

    class Upstream:  # a server (it cannot count the model's tokens)
        name = "scripted"

    engine = Engine(settings, Upstream())  # type: ignore[arg-type]
    sent = engine.request([], rex.shorthand("hi"))
    assert sent["grammar"] == gbnf and engine.note == limit_note(planned)
    assert sent["messages"][0]["content"].rstrip().endswith(limit_note(planned))
    schema = charfmt.json_schema(character=rex, max_tokens=300)
    assert schema["properties"]["chats"]["maxItems"] == planned.max_chats


def test_fewer_chats_before_fewer_elements_before_shorter_elements() -> None:
    rex = Character.load(REX)  # its examples: 2 chats, 3 elements
    roomy = resolve_bounds(character=rex, max_tokens=2048)
    assert roomy is not None and (roomy.max_chats, roomy.max_elements) == (2, 3)
    tight = resolve_bounds(character=rex, max_tokens=300)
    assert tight is not None and (tight.max_chats, tight.max_elements) == (1, 3)  # one chat first
    assert (tight.max_chars or 0) >= MIN_SPEECH_CHARS
    tiny = resolve_bounds(character=rex, max_tokens=160)
    assert tiny is not None and (tiny.max_chats, tiny.max_elements) == (1, 2)  # then fewer elements
    fixed = resolve_bounds(character=rex, max_tokens=300, max_chats=2)
    assert fixed is not None and fixed.max_chats == 2 and (fixed.max_chars or 0) < (tight.max_chars or 0)


# --- item 4: each role as long as the character's examples ----------------------------------------


def _with_examples(character: Character, *bodies: str) -> Character:
    examples = [Exchange(user=character.shorthand("hi"), reply=charfmt.parse(reply(body))) for body in bodies]
    return character.model_copy(update={"examples": examples})


def test_actions_and_thoughts_are_as_long_as_the_examples_show() -> None:
    """Rex's example thought (35 characters) and a card's first action (78) were cut at 24."""
    rex = Character.load(REX)
    thought = "Nobody has said thanks in 200 sols."
    bounds = resolve_bounds(character=rex, max_tokens=300)
    assert bounds is not None and (bounds.chars("hidden") or 0) >= len(thought)
    grammar = charfmt.grammar("lark", character=rex, max_tokens=300)
    said = "s" * bounds.min_speech
    assert accepts(grammar, reply(f"<emo>annoyed</emo>\n<msg>{said}</msg>\n<thought>{thought}</thought>"))
    action = "lifts the lid of a bubbling pot and sniffs at the steam rising from the broth"  # 78 characters
    cook = _with_examples(rex, f"<emo>pleased</emo>\n<act>{action}</act>\n<msg>Soup is ready. Sit down.</msg>")
    roomy = resolve_bounds(character=cook, max_tokens=600)
    assert roomy is not None and (roomy.chars("action") or 0) >= len(action) and roomy.max_chars >= 80  # type: ignore[operator]
    listed = rex.model_copy(update={"actions": [*rex.actions, action]})  # an action the character lists
    assert (resolve_bounds(character=listed, max_tokens=600).chars("action") or 0) >= len(action)  # type: ignore[union-attr]
    # where the budget is short, a role never takes more than speech
    short = resolve_bounds(character=cook, max_tokens=200)
    assert short is not None and (short.chars("action") or 0) <= (short.max_chars or 0)


# --- item 3: scenes -----------------------------------------------------------------------------


def test_a_scenes_grammar_and_schema_give_each_speaker_only_its_own_emotions() -> None:
    scene = Scene.load(SHRINE)
    bounds = resolve_bounds(character=scene, max_tokens=512)
    assert bounds is not None
    said = "s" * bounds.min_speech
    rex_own = reply(f"<emo>annoyed</emo>\n<msg>{said}</msg>", speakers=("rex",))
    rex_mios = reply(f"<emo>surprise</emo>\n<msg>{said}</msg>", speakers=("rex",))  # mio's key, not rex's
    mio_own = reply(f"<emo>surprise</emo>\n<msg>{said}</msg>", speakers=("mio",))
    with pytest.raises(charfmt.ParseError, match="CF306"):
        scene.parse(rex_mios)
    for target in ("lark", "gbnf"):
        grammar = scene.grammar(target, max_tokens=512)
        assert accepts(grammar, rex_own, target) and accepts(grammar, mio_own, target)
        assert not accepts(grammar, rex_mios, target), target
    schema = scene.json_schema()
    jsonschema = pytest.importorskip("jsonschema")
    valid = functools.partial(jsonschema.Draft202012Validator(schema).is_valid)
    assert valid(json.loads(rex_own)) and valid(json.loads(mio_own)) and not valid(json.loads(rex_mios))


def test_a_scene_at_serves_default_budget_is_not_bounded_to_four_characters() -> None:
    """``serve --scene`` bounded every element to 4 characters with no speech required."""
    pytest.importorskip("starlette")
    from charfmt.serve import Settings
    from charfmt.serve.turns import reply_bounds

    scene = Scene.load(SHRINE)
    first = next(iter(scene.cast.values()))
    bounds = reply_bounds(Settings(character=first, scene=scene, upstream_url="http://127.0.0.1:9/v1"))
    # (two members speak at the default budget, trial 3: shorter elements before fewer chats for a scene)
    assert bounds.require_speech and (bounds.max_chats or 0) >= 2, bounds
    assert (bounds.max_chars or 0) >= MIN_SCENE_SPEECH_CHARS > 4, bounds
    assert bounds == resolve_bounds(character=scene, max_tokens=512)
    # the scene's speaker member and each speaker's emotions are counted: the longest reply fits
    speakers = {who: c.vocabulary for who, c in scene.cast.items()}
    per_char = bytes_per_char(speech_texts(scene))
    longest = max_reply_tokens(bounds, tags=scene.tags, speakers=speakers, tokens_per_char=per_char)
    assert longest + 1 <= 512


def test_serve_scene_with_max_tokens_300_plans_fewer_chats_rather_than_refusing() -> None:
    scene = Scene.load(SHRINE)
    assert max(len(ex.reply.chats) for ex in scene.examples) == 3
    bounds = resolve_bounds(character=scene, max_tokens=300)
    assert bounds is not None and (bounds.max_chats or 0) < 3 and bounds.require_speech
    # the command accepts it: it gets as far as binding its address (a host that cannot be: exit 1, not 2)
    cmd = [sys.executable, "-m", "charfmt", "serve", "--scene", str(SHRINE), "--upstream", "http://127.0.0.1:9/v1",
           "--max-tokens", "300", "--host", "999.1.1.1"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert p.returncode == 1 and "cannot listen" in p.stderr and "--max-tokens" not in p.stderr, p.stderr


def test_a_card_in_a_scene_calls_the_player_by_the_scenes_name(tmp_path: Path) -> None:
    """A card in a scene kept ``{{user}}`` = ``User`` while the scene names the player ``Deckhand``."""
    (tmp_path / "lumi.png").write_bytes(LUMI.read_bytes())
    text = SHRINE.read_text(encoding="utf-8").replace("../characters/", f"{ROOT / 'examples' / 'characters'}/")
    text = text.replace('user_name = "Customer"', 'user_name = "Deckhand"')
    text += '\n[[cast]]\nid = "lumi"\ncharacter = "lumi.png"\n'
    path = tmp_path / "scene.toml"
    path.write_text(text, encoding="utf-8")
    scene = Scene.load(path)
    assert scene.user_name == "Deckhand"
    assert all(c.user_name == "Deckhand" for c in scene.cast.values())
    system = scene.render_system()
    assert "Scenario: Deckhand climbs the lighthouse stairs on a stormy night and meets Lumi." in system
    assert "{{user}}" not in system and "User climbs" not in system
    renamed = Scene.load(path, user_name="Ash")  # charfmt chat --scene F --user-name Ash
    assert renamed.user_name == "Ash" and "Scenario: Ash climbs" in renamed.render_system()


# --- serve --model: chat's engine ------------------------------------------------------------------


def test_serve_in_process_uses_chats_engine_llguidance_and_the_models_tokens_per_character() -> None:
    """``serve --model`` sent GBNF only and bounded without the model's tokens per character: every reply
    was cut at exactly 50 characters where chat allows 301 with the same model and budget."""
    pytest.importorskip("starlette")
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'charfmt[local]')")
    from test_chat_format import FakeLlama

    from charfmt.constrain.engines import llguidance_installed
    from charfmt.llm._model_clients import LocalModel
    from charfmt.serve import Settings
    from charfmt.serve.turns import Engine
    from charfmt.serve.upstreams.llama import LocalUpstream

    class Quarters(FakeLlama):  # a model that takes a token per four bytes
        def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
            return list(text[::4])

    mio = Character.load(MIO)
    model = LocalModel(Quarters(), chat_format="chatml")
    upstream = LocalUpstream(model, "fake.gguf")
    engine = Engine(Settings(character=mio, upstream=upstream, max_tokens=300), upstream)
    per_char = model.tokens_per_char(speech_texts(mio))
    assert per_char < bytes_per_char(speech_texts(mio))
    assert engine.bounds == chat_bounds(mio, 300, tokens_per_char=per_char)  # what charfmt chat --model plans
    assert (engine.bounds.max_chars or 0) > (chat_bounds(mio, 300).max_chars or 0)
    body = engine.request([], mio.shorthand("hi"))
    assert ("lark" in body) == llguidance_installed() and ("grammar" in body) != llguidance_installed()


def test_serve_chat_format_and_verbose_are_flags_of_serve(tmp_path: Path) -> None:
    """``serve --model`` had no ``--chat-format``; its llama.cpp log lines reached stderr."""
    pytest.importorskip("starlette")
    serve = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX)]
    help_text = subprocess.run([*serve, "--help"], capture_output=True, text=True, timeout=120, check=False).stdout
    flat = " ".join(help_text.split())
    assert "--chat-format NAME" in flat and "--verbose" in flat and "llama.cpp log lines" in flat
    p = subprocess.run([*serve, "--upstream", "http://127.0.0.1:9/v1", "--chat-format", "gemma"],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 2 and "--chat-format: only with --model" in p.stderr, p.stderr
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'charfmt[local]')")
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 60)
    p = subprocess.run([*serve, "--model", str(fake), "--chat-format", "gemma-9"],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 2 and "'gemma-9' is not one of: " in p.stderr and "chatml" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_budgeted_schema_holds_at_least_one_chat_and_anthropics_says_the_budget() -> None:
    """Found by a newcomer's trial: under a budget the JSON schemas took ``{"chats": []}`` (the grammars never do),
    and Anthropic's schema was the same with and without the budget (it takes no numeric bound)."""
    jsonschema = pytest.importorskip("jsonschema")
    rex = charfmt.Character.load(ROOT / "examples" / "characters" / "rex.toml")
    empty = {"chats": []}
    for provider in (None, "openai"):
        schema = charfmt.json_schema(provider, character=rex, max_tokens=300)
        assert schema["properties"]["chats"]["minItems"] == 1
        assert not jsonschema.Draft202012Validator(schema).is_valid(empty)
        assert jsonschema.Draft202012Validator(charfmt.json_schema(provider, character=rex)).is_valid(empty)
    assert charfmt.json_schema("gemini", character=rex, max_tokens=300)["properties"]["chats"]["minItems"] == 1
    said = charfmt.json_schema("anthropic", character=rex, max_tokens=300)["properties"]["chats"]["description"]
    bounds = resolve_bounds(character=rex, max_tokens=300)
    assert f"each element at most {bounds.max_chars} characters" in said and "a C chat that speaks" in said
    assert "Keep the reply short" not in json.dumps(charfmt.json_schema("anthropic", character=rex))
