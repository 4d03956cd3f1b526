"""A llama.cpp model in this process (``charfmt serve --model PATH.gguf``), as ``charfmt chat --model`` runs it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

from charfmt.llm._replies import Delta, exception_text
from charfmt.serve.upstreams.base import UpstreamFailure, UpstreamKind

if TYPE_CHECKING:
    from charfmt.serve.settings import Settings

_DONE: Final = object()


class LocalUpstream:
    """A llama.cpp model in this process (``--model PATH.gguf``): one generation at a time, in a thread.

    The same engine as ``charfmt chat --model`` (``charfmt.llm._model_clients.LocalModel``): its chat
    format, the system prompt folded where the format has none, a prompt too long for the window
    refused (400). The request's ``lark`` (through llguidance) or ``grammar`` (GBNF) constrains it
    (``charfmt.constrain.engines.local_constraint`` chooses); ``temperature``, ``seed`` (none: a fresh one per
    request), ``top_p``, ``stop`` and the penalties are sampled with. Cancelling the request stops
    the generation at the next token.
    """

    in_process: Final = True
    """The turn engine asks this upstream for ``local_constraint``'s fields and its ``tokens_per_char``."""

    def __init__(self, model: Any, name: str) -> None:
        from charfmt.llm._model_clients import LocalModel  # noqa: PLC0415 (llama-cpp-python's side: loaded only where a local model is served)

        self.name = name
        self.model: LocalModel = model if isinstance(model, LocalModel) else LocalModel(model)
        self.llm = self.model.llm
        """The ``llama_cpp.Llama``: the engine counts prompts with its own tokenizer and chat template."""
        self.chat_format = self.model.chat_format
        """The chat format it runs in (``None``: the GGUF's own template): what its prompts are counted in."""
        self._lock = asyncio.Lock()  # llama.cpp's context serves one generation at a time

    def tokens_per_char(self, texts: list[str]) -> float:
        """The model's own tokens per character of ``texts`` (what the reply's bounds count)."""
        return self.model.tokens_per_char(texts)

    async def aclose(self) -> None:
        """Nothing to close (the model lives as long as the process)."""

    async def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        """The deltas of the model's reply to ``body`` (messages, lark or grammar, sampling fields)."""
        from charfmt.llm._model_clients import SAMPLING, ContextFull  # noqa: PLC0415 (llama-cpp-python's side: loaded only where a local model is served)

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        seed = body.get("seed")

        def put(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            try:
                chunks = self.model.chunks(
                    body["messages"], max_tokens=max_tokens, lark=body.get("lark"), gbnf=body.get("grammar"),
                    temperature=float(body.get("temperature", 0.7)), seed=None if seed is None else int(seed),
                    **{k: body[k] for k in SAMPLING if k in body},
                )  # fmt: skip
                for chunk in chunks:
                    if stop.is_set():
                        break
                    choice = chunk["choices"][0]
                    put(Delta(choice["delta"].get("content") or "", choice.get("finish_reason")))
            except ContextFull as e:
                put(UpstreamFailure(str(e), status=400))
            except Exception as e:  # llama.cpp's own failures end the turn with one line
                put(UpstreamFailure(f"llama.cpp failed: {exception_text(e)}", status=500))
            put(_DONE)

        async with self._lock:
            thread = threading.Thread(target=work, name="charfmt-llama", daemon=True)
            thread.start()
            try:
                while (item := await queue.get()) is not _DONE:
                    if isinstance(item, UpstreamFailure):
                        raise item
                    yield item
            finally:
                stop.set()
                await asyncio.to_thread(thread.join)


def load_local(
    path: str, *, n_ctx: int, seed: int = 0, chat_format: str | None = None, warn: bool = True
) -> LocalUpstream:
    """``LocalUpstream`` for the GGUF at ``path`` (``charfmt.llm.loading.load_llama``) in ``chat_format``.

    llama.cpp's own log lines are kept off standard error unless ``charfmt serve --verbose`` (``llama_logs``,
    set by the command); a GGUF without a chat template is said once on the ``charfmt.serve`` logger
    (``warn``; the command says it itself, as ``LocalModel.missing_template`` words it).
    """
    import logging  # noqa: PLC0415 (llama-cpp-python's side: loaded only where a local model is served)

    from charfmt.llm._model_clients import LocalModel  # noqa: PLC0415 (llama-cpp-python's side: loaded only where a local model is served)
    from charfmt.llm.loading import load_llama  # noqa: PLC0415 (llama-cpp-python's side: loaded only where a local model is served)

    model = LocalModel(load_llama(path, n_ctx=n_ctx, seed=seed), chat_format=chat_format)
    if warn and model.missing_template is not None:
        logging.getLogger("charfmt.serve").warning("%s", model.missing_template)
    return LocalUpstream(model, path)


def _open(settings: Settings, path: str) -> LocalUpstream:
    return load_local(path, n_ctx=settings.n_ctx, chat_format=settings.chat_format)


def _require() -> object:
    from charfmt.constrain.engines import load_llama_cpp  # noqa: PLC0415 (llama-cpp-python: an optional extra)

    return load_llama_cpp()


KIND: Final = UpstreamKind(
    "llama", "--model", "PATH.gguf", "run this GGUF in-process with llama.cpp (offline)", _open,
    require=_require, local=True, shown="llama.cpp (in-process)", file="model file",
)  # fmt: skip
"""This upstream's row in ``charfmt.serve.upstreams.KINDS``: ``--model PATH.gguf`` (``Settings.model_path``)."""
