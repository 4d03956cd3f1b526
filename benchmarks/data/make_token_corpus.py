"""Build the token-count corpus: ``benchmarks/data/token_corpus.jsonl`` (issue 37, item 2).

Every text a prompt is made of, in the groups the estimate is judged on: English prose, Japanese,
Chinese, reply JSON, charfmt's own prompts, real model output, and the adversarial texts the
proven bound is tested on (runs, laughter, emoji, digits, random letters, mixed scripts).

Sources, all in this repository: the hand-written lines of ``token_texts.txt`` (single and joined
into paragraphs), the README's and docs' prose paragraphs, the example characters, the real free
replies of ``tests/data/free_replies.jsonl`` and ``tests/data/prose_replies.txt``, the samples
of ``tests/prompt/test_render_tokens.py``, and texts drawn with ``random.Random(SEED)``.
Each row is ``{"id", "group", "source", "half", "text"}``; ``half`` ("fit" or "held") splits the
corpus in two by the SHA-256 of the id: the estimate is tuned on "fit" only, and reported on "held".

Run from the repository root (writes the file anew; the same inputs give the same file)::

    python benchmarks/data/make_token_corpus.py
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "prompt")]  # test_render_tokens

import charfmt  # noqa: E402
from charfmt import Character  # noqa: E402

SEED: Final = 37
HERE: Final = Path(__file__).resolve().parent
OUT: Final = HERE / "token_corpus.jsonl"


def hand_written() -> dict[str, list[str]]:
    """The lines of ``token_texts.txt`` by group."""
    groups: dict[str, list[str]] = {}
    group = None
    for line in (HERE / "token_texts.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            group = line[3:].strip()
            groups[group] = []
        elif line.strip() and not line.startswith("#") and group is not None:
            groups[group].append(line.strip())
    return groups


def paragraphs(lines: list[str], n: int, rng: random.Random, joiner: str) -> list[str]:
    """``n`` paragraphs of 2 to 8 of ``lines`` each."""
    return [joiner.join(rng.sample(lines, rng.randint(2, 8))) for _ in range(n)]


def doc_prose() -> list[str]:
    """Paragraphs of English prose from the README and docs (no code, no tables, no headings)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
        for raw in text.split("\n\n"):
            block = raw.strip()
            if len(block) < 200 or block.startswith(("#", "|", "-", "*", ">", "<")) or "`" in block[:40]:
                continue
            letters = sum(ch.isalpha() and ch.isascii() for ch in block)
            if letters / len(block) > 0.7:
                out.append(block)
    return out


def character_texts() -> dict[str, list[str]]:
    """Personas, emotion descriptions and example speech of the example characters, by language."""
    out: dict[str, list[str]] = {"en": [], "ja": []}
    for path in sorted((ROOT / "examples" / "characters").glob("*.toml")):
        character = Character.load(path)
        lang = "ja" if character.language == "ja" else "en"
        out[lang].append(character.persona.strip())
        for ex in character.examples:
            for chat in ex.reply.chats:
                out[lang].extend(seg.text for seg in chat.segments if len(seg.text) > 20)
    return out


EMOTIONS: Final = ("joy", "neutral", "angry", "sad", "surprise", "shy")
ACTIONS: Final = ("bow", "jump", "look_away", "crosses arms", "袖で口元を隠す", "taps the counter", "耸了耸肩")


def replies(lines: dict[str, list[str]], n: int, rng: random.Random) -> list[str]:
    """Reply JSON in canonical form (``charfmt.dumps``): one to three chats, speech in one language each."""
    out = []
    for i in range(n):
        lang = ("en", "ja", "zh")[i % 3]
        chats = []
        for order in range(1, rng.randint(1, 3) + 1):
            elements = [f"<emo>{rng.choice(EMOTIONS)}</emo>"]
            if rng.random() < 0.7:
                elements.append(f"<act>{rng.choice(ACTIONS)}</act>")
            elements.append(f"<msg>{' '.join(rng.sample(lines[lang], rng.randint(1, 3)))}</msg>")
            if rng.random() < 0.2:
                elements.append(f"<thought>{rng.choice(lines[lang])}</thought>")
            chats.append({"type": "C", "order": order, "body": "\n".join(elements)})
        if rng.random() < 0.3:
            chats.append({"type": "I", "order": len(chats) + 1, "body": rng.choice(lines[lang])})
        reply = charfmt.parse(json.dumps({"chats": chats}, ensure_ascii=False), lenient=True)
        out.append(charfmt.dumps(reply))
    return out


def prompts(lines: dict[str, list[str]], rng: random.Random) -> list[str]:
    """charfmt's own prompts: system prompts, user blocks, whole requests for each provider, text prompts."""
    out = []
    for path in sorted((ROOT / "examples" / "characters").glob("*.toml")):
        character = Character.load(path)
        lang = "ja" if character.language == "ja" else "en"
        out.append(charfmt.render_system(character))
        history = []
        for n in range(6):
            turn = character.shorthand(f"[{rng.choice(EMOTIONS)}] {rng.choice(lines[lang])}")
            out.append(charfmt.render_user_block(turn))
            say = " ".join(rng.sample(lines[lang], 2))
            reply = charfmt.parse(
                json.dumps({"chats": [{"type": "C", "order": 1, "body": f"<emo>joy</emo>\n<msg>{say}</msg>"}]},
                           ensure_ascii=False),
                lenient=True,
            )  # fmt: skip
            if n % 2:
                for provider in ("openai", "anthropic", "gemini"):
                    request = charfmt.render_messages(character, history, turn, provider=provider, structured=n == 3)
                    out.append(json.dumps(request, ensure_ascii=False))
                out.append(charfmt.render_text(character, history, turn))
            history.append(charfmt.Exchange(user=turn, reply=reply))
    return out


def model_output() -> list[str]:
    """Real free replies of small models (``tests/data``), as they came."""
    rows = [json.loads(line) for line in (ROOT / "tests" / "data" / "free_replies.jsonl").open(encoding="utf-8")]
    prose = (ROOT / "tests" / "data" / "prose_replies.txt").read_text(encoding="utf-8")
    blocks = [b.strip() for b in prose.split("\n%%\n")]
    blocks = ["\n".join(line for line in b.splitlines() if not line.startswith("#")).strip() for b in blocks]
    return [row["reply"] for row in rows if row["reply"].strip()] + [b for b in blocks if b]


def adversarial(rng: random.Random) -> list[str]:
    """The texts the proven bound is tested on (``tests/prompt/test_render_tokens.py``), and more drawn like them."""
    from test_render_tokens import RUNS, SAMPLES

    out = list(RUNS.values()) + SAMPLES["emoji"] + SAMPLES["markup"] + SAMPLES["ko"] + SAMPLES["ru"]
    alphabets = [
        "abcdefghijklmnopqrstuvwxyz",
        "zqxjkvbwfgyp",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        "0123456789abcdef",
        "!?.,;:-_=+*/\\|@#$%^&()[]{}<>\"'`~",
        " \t\n",
        "ぁあぃいぅうぇえぉおかがきぎくぐけげこごさざしじすずせぜそぞ",
        "ァアィイゥウェエォオカガキギクグケゲコゴサザシジスズセゼソゾ",
        "龘靐齉齾爩鱻麤龗灪吁礻鬱躑躅薔薇檸檬",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "αβγδεζηθικλμνξοπρστυφχψω",
        "😂🎉👍🔥✨🌸🍡⛩️🦊🌙🇯🇵👨‍👩‍👧",
        "ｗ草笑ー〜…！？",
    ]
    for n in range(90):
        kind = n % 6
        if kind == 0:  # a run of one character or a short unit
            unit = "".join(rng.choice(rng.choice(alphabets)) for _ in range(rng.randint(1, 3)))
            out.append(unit * rng.randint(5, 80))
        elif kind == 1:  # random characters of one alphabet
            alphabet = rng.choice(alphabets)
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(10, 120))))
        elif kind == 2:  # random characters of any alphabet
            out.append("".join(rng.choice(rng.choice(alphabets)) for _ in range(rng.randint(10, 120))))
        elif kind == 3:  # random code points of the Basic Multilingual Plane (no surrogates)
            chars = [chr(rng.choice([rng.randint(0x20, 0xD7FF), rng.randint(0xE000, 0xFFFD)])) for _ in range(40)]
            out.append("".join(chars))
        elif kind == 4:  # laughter and long marks
            unit = rng.choice(["w", "ｗ", "草", "ha", "HA", "lol", "は", "ハ", "哈", "!", "?", "…", "~", "ー", "😂"])
            out.append(f"{rng.choice(['', 'ok ', 'えっ', '好的'])}{unit * rng.randint(5, 60)}")
        else:  # digits and numbers in text
            out.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 15))) for _ in range(rng.randint(3, 20))))
    return out


def corpus() -> list[dict[str, str]]:
    """Every row of the corpus, in a fixed order."""
    rng = random.Random(SEED)
    lines = hand_written()
    chars = character_texts()
    groups: dict[str, list[tuple[str, str]]] = {
        "en": [("hand", t) for t in lines["en"]]
        + [("hand-paragraph", t) for t in paragraphs(lines["en"], 50, rng, " ")]
        + [("docs", t) for t in doc_prose()]
        + [("character", t) for t in chars["en"]],
        "ja": [("hand", t) for t in lines["ja"]]
        + [("hand-paragraph", t) for t in paragraphs(lines["ja"], 50, rng, "")]
        + [("character", t) for t in chars["ja"]],
        "zh": [("hand", t) for t in lines["zh"]]
        + [("hand-paragraph", t) for t in paragraphs(lines["zh"], 40, rng, "")],
        "reply": [("generated", t) for t in replies(lines, 90, rng)],
        "prompt": [("rendered", t) for t in prompts(lines, rng)],
        "model_output": [("tests/data", t) for t in model_output()],
        "adversarial": [("adversarial", t) for t in adversarial(rng)],
    }
    rows = []
    for group, texts in groups.items():
        seen = set()
        for n, (source, text) in enumerate(texts):
            if text in seen:
                continue
            seen.add(text)
            row_id = f"{group}-{n:03d}"
            half = "fit" if hashlib.sha256(row_id.encode()).digest()[0] % 2 == 0 else "held"
            rows.append({"id": row_id, "group": group, "source": source, "half": half, "text": text})
    return rows


def main() -> int:
    rows = corpus()
    with OUT.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["group"]] = counts.get(row["group"], 0) + 1
    print(f"{len(rows)} texts: {counts} -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
