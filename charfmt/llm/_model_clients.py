"""The model clients a chat turn streams from: llama.cpp in-process and an OpenAI-compatible server.

Each client is a ``Generate``: chat messages in, the reply's text out in chunks as the model
writes it, and a ``TurnStats`` per reply (tokens, time to the first token, time generating).

- ``local_model(llm, ...)``: a ``llama_cpp.Llama`` (``charfmt.llm.loading.load_llama``), constrained by
  GBNF or, through llguidance, by Lark; its chat format chosen (``chat_formats``), a GGUF without
  a template warned about (``NoChatTemplate``), the system prompt folded into the first user
  message where the format has no system role (``fold_system``), a prompt that leaves less than
  the reply's budget refused before generating (``ContextFull``).
- ``endpoint_model(url, ...)``: an OpenAI-compatible server, streamed through the bounded HTTP
  client (``charfmt.llm._http_client``); ``endpoint_url`` reads the URL a user gives.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from charfmt.diagnostics import CharfmtError
from charfmt.llm._replies import endpoint_url as endpoint_url  # noqa: PLC0414 (re-exported: chat and the CLI read it here)

if TYPE_CHECKING:
    from charfmt.llm._sdk_chunks import ChunkParts

DEFAULT_MAX_TOKENS: Final = 2048
"""The default token budget of a reply (the grammar's bounds are computed from it).

Only a cap: a reply takes the tokens it needs. For Rex (2 chats of 3 elements) the bound engine
(``charfmt.constrain.export.plan_bounds``) gives speech of up to 827 characters, counted as bytes."""


API_KEY_ENV: Final = "OPENAI_API_KEY"
"""Where ``chat --endpoint`` finds its API key unless ``--api-key-env`` names another variable."""
NAMED_SERVERS: Final = {"openai": True, "vllm": False}
"""Servers that want the model's name in each request (``--model-name``): True where a request
without it is refused (a usage error), False where it works with one served model (a warning)."""

Generate = Callable[[list[dict[str, str]]], Iterator["str | ChunkParts"]]
"""A model: chat messages in, the reply's text out in chunks as it is generated (and, from a
server, ``ChunkParts``: what a chunk held besides text, a refusal, a tool call, reasoning)."""


@dataclass
class TurnStats:
    """What one reply cost: tokens, time to the first token (the prompt), time generating."""

    tokens: int
    first_token_seconds: float
    seconds: float
    finished: bool
    reason: str | None = None
    """The model's finish reason (``stop``, ``length``; ``None``: none was sent)."""

    @property
    def tokens_per_second(self) -> float:
        """Generation speed, from the first token to the last."""
        return (self.tokens - 1) / self.seconds if self.seconds > 0 and self.tokens > 1 else 0.0

    @property
    def state(self) -> str:
        """How the reply ended, for the stats line ("" when it finished)."""
        if self.finished:
            return ""
        if self.reason == "length":
            return "cut off at the token budget"
        if self.tokens == 0:
            return "empty reply"
        return f"ended without a stop ({self.reason or 'no finish reason'})"


class ContextFull(CharfmtError):
    """The prompt and the reply's token budget do not fit in the context window."""


class _Clock:
    """Times a streamed reply: prompt (to the first token) and generation (after it)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.tokens = 0

    def token(self) -> None:
        self.tokens += 1
        if self.first is None:
            self.first = time.perf_counter()

    def stats(self, finished: bool, reason: str | None = None) -> TurnStats:
        end = time.perf_counter()
        first = self.first if self.first is not None else end
        return TurnStats(self.tokens, first - self.started, end - first, finished, reason)


# --- llama.cpp in-process ----------------------------------------------------------------------


class _Guarded:
    """``llm`` for a chat handler, its ``create_completion`` refused where the reply would not fit.

    llama-cpp-python silently lowers ``max_tokens`` to what is left of the context window;
    the grammar was bounded for ``max_tokens``, so a lowered budget could cut a reply the
    grammar promised would close. The handler's own prompt tokens are counted here, exactly.
    """

    def __init__(self, llm: Any, max_tokens: int) -> None:
        self._llm = llm
        self._max_tokens = max_tokens
        self.prompt_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        n_ctx = int(self._llm.n_ctx())
        self.prompt_tokens = size = _prompt_size(self._llm, prompt)
        if size + self._max_tokens >= n_ctx:
            raise ContextFull(
                f"the prompt takes {size} tokens and the reply may take {self._max_tokens} "
                f"(--max-tokens): more than the context window of {n_ctx} (--n-ctx); "
                "a shorter turn or a larger --n-ctx fits"
            )
        return self._llm.create_completion(prompt, *args, **kwargs)


class _Prefilled:
    """``llm`` for a chat handler, the model's answer started with ``prefill`` (a continue): the handler's
    prompt for the messages before it (ending with the generation prompt), then ``prefill``, and the model
    goes on from there, as llama-server takes a last ``assistant`` message."""

    def __init__(self, llm: Any, prefill: str) -> None:
        self._llm = llm
        self._prefill = prefill

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(prompt, list):  # (tokens: the prefill's own, no BOS, its text as text)
            prompt = [*prompt, *self._llm.tokenize(self._prefill.encode(), add_bos=False, special=False)]
        else:
            prompt = str(prompt) + self._prefill
        return self._llm.create_completion(prompt, *args, **kwargs)


def _prompt_size(llm: Any, prompt: Any) -> int:
    """The tokens of the prompt a chat handler built (its token list, or its text as llama.cpp reads it)."""
    return len(prompt) if isinstance(prompt, list) else len(llm.tokenize(str(prompt).encode(), special=True))


TEMPLATE_KEY: Final = "tokenizer.chat_template"
"""The GGUF metadata key of a model's own chat template."""

FORMAT_BY_ARCHITECTURE: Final[tuple[tuple[str, str], ...]] = (("gemma", "gemma"), ("qwen", "chatml"))
"""(``general.architecture`` prefix, llama-cpp-python chat format) pairs: the format a model
without a chat template was most likely trained on, named in the warning; first match wins."""

_SYSTEM_PROBE: Final = "charfmt-system-probe-7d1e"
"""A system message that no chat format writes by itself: found in a prompt, the format kept it."""


class NoChatTemplate(UserWarning):
    """The GGUF has no chat template: llama-cpp-python falls back to a format the model may never have seen."""


def chat_formats(llm: Any = None) -> list[str]:
    """The chat formats ``local_model(chat_format=)`` takes: llama-cpp-python's, and ``llm``'s own templates."""
    from charfmt.constrain.engines import load_llama_cpp  # noqa: PLC0415 (import cost: every CLI command loads this module)

    registry = load_llama_cpp().llama_chat_format.LlamaChatCompletionHandlerRegistry()
    own = list(getattr(llm, "_chat_handlers", {}) or {})
    return own + sorted(set(registry._chat_handlers) - set(own))


def _chat_handler(llm: Any, chat_format: str | None = None) -> Any:
    """The chat handler for ``chat_format``, or the one ``llm.create_chat_completion`` would use (its template).

    An unknown ``chat_format`` is a ``CharfmtError`` that lists the known ones.
    """
    from charfmt.constrain.engines import load_llama_cpp  # noqa: PLC0415 (import cost: every CLI command loads this module)

    formats = load_llama_cpp().llama_chat_format
    handlers = getattr(llm, "_chat_handlers", {}) or {}
    if chat_format is None:
        return llm.chat_handler or handlers.get(llm.chat_format) or formats.get_chat_completion_handler(llm.chat_format)
    if chat_format in handlers:
        return handlers[chat_format]
    try:
        return formats.get_chat_completion_handler(chat_format)
    except formats.LlamaChatCompletionHandlerNotFoundException:
        known = ", ".join(chat_formats(llm))
        raise CharfmtError(f"unknown chat format {chat_format[:80]!r}; the known ones: {known}") from None


def template_warning(llm: Any) -> str | None:
    """What to tell the user when ``llm`` has no chat template of its own, or ``None`` when it has one."""
    metadata = getattr(llm, "metadata", None) or {}
    if getattr(llm, "chat_handler", None) is not None or TEMPLATE_KEY in metadata:
        return None
    model = os.path.basename(str(getattr(llm, "model_path", "") or "")) or "the model"
    architecture = str(metadata.get("general.architecture", ""))
    guess = next((fmt for prefix, fmt in FORMAT_BY_ARCHITECTURE if architecture.startswith(prefix)), None)
    hint = (
        f"--chat-format {guess} (chat_format={guess!r}) matches its architecture ({architecture})"
        if guess is not None
        else "--chat-format (chat_format=) chooses the format it was trained on"
    )
    return (
        f"{model} has no chat template; llama-cpp-python falls back to the {llm.chat_format!r} format, "
        f"which the model may echo; {hint}"
    )


class _Prompted(Exception):  # a signal, not an error
    """Raised by ``_Recorder`` in place of generating: carries the prompt a chat handler built."""

    def __init__(self, prompt: Any) -> None:
        self.prompt = prompt


class _NoPrompt(CharfmtError):
    """A chat handler returned without building a prompt through ``create_completion``."""


class _Recorder:
    """``llm`` for a chat handler, its ``create_completion`` only reporting the prompt (``_Prompted``)."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        raise _Prompted(prompt)


def _built_prompt(llm: Any, messages: list[dict[str, str]], chat_format: str | None) -> Any:
    """The prompt (text or tokens) the chat format builds for ``messages``, as ``create_completion`` gets it."""
    handler = _chat_handler(llm, chat_format)
    try:
        handler(llama=_Recorder(llm), messages=messages, max_tokens=1, stream=False)
    except _Prompted as done:
        return done.prompt
    raise _NoPrompt(f"the chat format {chat_format or llm.chat_format!r} did not build a prompt")


def chat_prompt(llm: Any, messages: list[dict[str, str]], chat_format: str | None = None) -> str:
    """The prompt text the chat format writes for ``messages`` (what ``local_model`` sends, before folding)."""
    prompt = _built_prompt(llm, messages, chat_format)
    if isinstance(prompt, list):
        return bytes(llm.detokenize(prompt, special=True)).decode("utf-8", "replace")
    return str(prompt)


def prompt_tokens(
    llm: Any, messages: list[dict[str, str]], chat_format: str | None = None, *, folded: bool | None = None
) -> int:
    """The tokens of the prompt ``local_model`` sends for ``messages``, counted as ``ContextFull`` counts them.

    The system prompt is folded into the first user message where the format has no system role
    (``folded``: whether it has none, where already known), as ``local_model`` folds it.
    """
    if folded if folded is not None else not has_system_role(llm, chat_format):
        messages = fold_system(messages)
    else:
        messages = fold_late_system(messages)
    return _prompt_size(llm, _built_prompt(llm, messages, chat_format))


def has_system_role(llm: Any, chat_format: str | None = None) -> bool:
    """Whether the chat format writes a system message into the prompt (llama-cpp-python's ``gemma`` drops it)."""
    probe = [{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": "hi"}]
    try:
        return _SYSTEM_PROBE in chat_prompt(llm, probe, chat_format)
    except _NoPrompt:
        return True  # a handler of its own: its messages are left as they are
    except CharfmtError:
        raise
    except Exception:  # a template that refuses a system role says so by raising
        return False


_LOG_CALLBACK: list[Any] = []
"""The log callback handed to llama.cpp, kept alive here (llama.cpp holds only its address)."""


def llama_logs(*, verbose: bool = False) -> None:
    """Send llama.cpp's own log lines to standard error when ``verbose``, else nowhere.

    llama-cpp-python maps llama.cpp's log levels one step off, so its warnings
    (``llama_kv_cache_iswa: using full-size SWA cache`` on every Gemma 3 load) reach
    standard error even from a ``Llama(verbose=False)``.
    """
    import ctypes  # noqa: PLC0415 (import cost: ctypes only for llama.cpp's log callback)

    from charfmt.constrain.engines import load_llama_cpp  # noqa: PLC0415 (import cost: every CLI command loads this module)

    llama_cpp = load_llama_cpp()

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, user_data: Any) -> None:
        if verbose and sys.stderr is not None:
            sys.stderr.write(text.decode("utf-8", "replace"))
            sys.stderr.flush()

    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    _LOG_CALLBACK[:] = [callback]


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` without system messages: the system prompt opens the first user message instead.

    For a chat format without a system role, which would drop the persona, the format
    rules and the examples (Gemma's own template does the same). System messages later in the
    conversation (lore placed at a depth) join the user message after them (``fold_late_system``).
    """
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    system = "\n\n".join(m["content"].strip() for m in messages[:lead])
    rest = fold_late_system(messages[lead:])
    if not system:
        return rest
    for message in rest:
        if message["role"] == "user":
            message["content"] = f"{system}\n\n{message['content']}"
            return rest
    return [{"role": "user", "content": system}, *rest]


def fold_late_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` with every system message after the conversation began joined to a user message.

    Lore placed at a depth in the history with the system role (``position`` 4, ``role`` 0) is a
    system message in mid-conversation: llama-cpp-python's built-in formats (ChatML, Llama 2, Mistral,
    Gemma) drop it from the prompt without a word, and strict templates (Gemma's, Mistral's) refuse it.
    Its text opens the next user message (or closes the last one, at depth 0), so the model reads it
    where it was placed. The leading system messages (the system prompt) are left as they are.
    """
    out: list[dict[str, str]] = []
    pending: list[str] = []
    begun = False
    for message in messages:
        if message["role"] == "system" and begun:
            pending.append(message["content"].strip())
            continue
        begun = begun or message["role"] != "system"
        copy = dict(message)
        if pending and copy["role"] == "user":
            copy["content"] = "\n\n".join([*pending, copy["content"]])
            pending = []
        out.append(copy)
    if pending:
        last = next((m for m in reversed(out) if m["role"] == "user"), None)
        if last is None:
            out.append({"role": "user", "content": "\n\n".join(pending)})
        else:
            last["content"] = "\n\n".join([last["content"], *pending])
    return out


SAMPLING: Final = ("top_p", "stop", "presence_penalty", "frequency_penalty")
"""The sampling fields of a request ``LocalModel.chunks`` passes to llama.cpp as they are (with
``temperature`` and ``seed``, which it reads itself)."""


def fresh_seed() -> int:
    """A random sampling seed: each turn without ``--seed`` samples anew (a base model given the same seed
    for the same prompt writes the same reply word for word)."""

    return random.SystemRandom().randrange(1 << 31)


class LocalModel:
    """llama.cpp in this process, as ``charfmt chat --model`` and ``charfmt serve --model`` both run it.

    Its chat format is chosen once (``chat_format``: a llama-cpp-python name, ``chat_formats()`` lists
    them; ``None``: the GGUF's own template, and where it has none ``missing_template`` says what to tell
    the user); a format without a system role gets the system prompt at the start of the first user
    message (``fold_system``). Each reply is constrained by the Lark grammar through llguidance
    (``lark``) or by the GBNF through llama.cpp's sampler (``gbnf``): ``charfmt.constrain.engines.local_constraint``
    chooses, llguidance wherever it is installed. A prompt that leaves less than the reply's budget
    raises ``ContextFull`` before any token is generated.
    """

    def __init__(self, llm: Any, *, chat_format: str | None = None) -> None:
        self.llm = llm
        self.chat_format = chat_format
        self._handler = _chat_handler(llm, chat_format)
        self.missing_template = template_warning(llm) if chat_format is None else None
        """What to tell the user when the GGUF has no chat template (``None``: it has one, or a format was chosen)."""
        self._folded = not has_system_role(llm, chat_format)
        self._grammars: dict[str, Any] = {}

    def counter(self, per_message: int = 8) -> Callable[[str], int]:
        """The model's own token count of one message (``charfmt.llm.loading.llama_counter``)."""
        from charfmt.llm.loading import llama_counter  # noqa: PLC0415 (import cost: every CLI command loads this module)

        return llama_counter(self.llm, per_message)

    def tokens_per_char(self, texts: list[str]) -> float:
        """The model's tokens per character of ``texts`` (``measure_tokens_per_char``): what bounds count."""
        from charfmt.constrain.export import measure_tokens_per_char  # noqa: PLC0415 (import cost: every CLI command loads this module)

        return measure_tokens_per_char(self.counter(per_message=0), texts)

    def chunks(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int,
        gbnf: str | None = None,
        lark: str | None = None,
        temperature: float = 0.7,
        seed: int | None = None,
        processor: Callable[[Any, Any], Any] | None = None,
        **sampling: Any,
    ) -> Iterator[dict[str, Any]]:
        """llama-cpp-python's streamed chat-completion chunks of the reply to ``messages`` (a last ``assistant``
        message: the answer's start, which the model goes on from, as llama-server prefills; ``lark`` before
        ``gbnf`` where both are given; ``processor``: another engine's logits processor, in their place;
        ``seed`` ``None``: a fresh one; ``sampling``: ``SAMPLING``'s fields)."""
        from charfmt.constrain.engines import llama_grammar, llguidance_processor  # noqa: PLC0415 (import cost: every CLI command loads this module)

        prefill = ""
        if len(messages) > 1 and messages[-1].get("role") == "assistant":  # a continue: go on from it
            prefill, messages = messages[-1].get("content") or "", messages[:-1]
        messages = fold_system(messages) if self._folded else fold_late_system(messages)  # (no system text lost)
        grammar = None
        if gbnf is not None and lark is None and processor is None:
            grammar = self._grammars.get(gbnf)
            if grammar is None:
                grammar = self._grammars[gbnf] = llama_grammar(gbnf)
        if processor is None and lark is not None:
            processor = llguidance_processor(self.llm, lark)
        processors = None if processor is None else [processor]
        guarded: Any = _Guarded(self.llm, max_tokens)
        llama = _Prefilled(guarded, prefill) if prefill else guarded
        chunks: Iterator[dict[str, Any]] = self._handler(
            llama=llama, messages=messages, grammar=grammar, logits_processor=processors,
            max_tokens=max_tokens, temperature=temperature, seed=fresh_seed() if seed is None else seed, stream=True,
            **{k: v for k, v in sampling.items() if k in SAMPLING and v is not None},
        )  # fmt: skip
        return chunks


def local_model(
    llm: Any,
    *,
    gbnf: str | None,
    max_tokens: int,
    temperature: float = 0.7,
    seed: int | None = None,
    stats: list[TurnStats] | None = None,
    chat_format: str | None = None,
    lark: str | None = None,
) -> Generate:
    """A llama.cpp model (``charfmt.llm.loading.load_llama``, or a ``LocalModel``) as ``LocalModel`` runs it,
    constrained by ``gbnf`` where given, or by ``lark`` through llguidance (``llguidance_processor``), much
    faster on a large vocabulary.

    ``chat_format``: see ``LocalModel``; a GGUF without a template is warned about once
    (``NoChatTemplate``; a ``LocalModel`` given is not: its maker says it). ``seed``: reply ``k`` (from 0)
    samples with ``seed + k``, so a chat is reproducible and no two turns share a seed; ``None``: a fresh
    random seed per reply.
    A turn whose prompt leaves less than ``max_tokens`` of the context window raises
    ``ContextFull`` before any token is generated.
    """

    if isinstance(llm, LocalModel):  # made by the caller, who says what it lacks as it sees fit
        model = llm
    else:
        model = LocalModel(llm, chat_format=chat_format)
        if model.missing_template is not None:
            warnings.warn(model.missing_template, NoChatTemplate, stacklevel=2)
    turns = itertools.count()

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        clock, reason = _Clock(), None
        turn_seed = None if seed is None else seed + next(turns)
        chunks = model.chunks(
            messages, max_tokens=max_tokens, gbnf=gbnf, lark=lark, temperature=temperature, seed=turn_seed
        )
        for chunk in chunks:
            choice = chunk["choices"][0]
            text = choice["delta"].get("content")
            if text:
                clock.token()  # llama-cpp-python streams one token per chunk
                yield text
            reason = choice.get("finish_reason") or reason
        if stats is not None:
            stats.append(clock.stats(reason == "stop", reason))

    return generate


# --- an OpenAI-compatible server -----------------------------------------------------------------


def endpoint_model(
    url: str,
    *,
    fields: dict[str, Any],
    model: str | None = None,
    timeout: float = 120.0,
    stats: list[TurnStats] | None = None,
    api_key: str | None = None,
) -> Generate:
    """An OpenAI-compatible server at ``url`` (``…/v1`` or the full ``…/chat/completions``).

    ``fields`` (``charfmt.constrain.engines.request_fields``) carry the grammar or schema in that
    server's own field and ``max_tokens``, the budget the reply is read within. The reply is
    asked for streamed; a server that answers with one ``chat.completion`` object instead is
    read too. Anything else (an HTML page, a proxy's error, a broken transfer, a stream past
    its budget) is a ``CharfmtError``; so is ``timeout`` seconds without a byte from the server.
    Every read is bounded (``charfmt.llm._http_client``); httpx is needed (``charfmt[http]``).
    """
    from charfmt.llm._http_client import Client  # noqa: PLC0415 (import cost: every CLI command loads this module)

    client = Client(endpoint_url(url), timeout=timeout, api_key=api_key)
    max_tokens = int(fields.get("max_tokens") or DEFAULT_MAX_TOKENS)

    def generate(messages: list[dict[str, str]]) -> Iterator[str | ChunkParts]:
        body: dict[str, Any] = {"messages": messages, "stream": True, **fields}
        if model is not None:
            body["model"] = model
        clock, reason = _Clock(), None
        for delta in client.chat(body, max_tokens=max_tokens):
            if delta.text:
                clock.token()  # one chunk per token on llama-server, vLLM and SGLang
                yield delta.text
            if delta.piece is not None:
                yield delta.piece
            reason = delta.reason or reason
        if stats is not None:
            stats.append(clock.stats(reason == "stop", reason))

    return generate


def api_key_from(name: str | None) -> str | None:
    """The API key in the environment variable ``name`` (default ``API_KEY_ENV``), or None; never shown."""
    value = os.environ.get(name or API_KEY_ENV, "").strip()
    return value or None
