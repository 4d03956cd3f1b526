"""The model behind ``charfmt serve``: an OpenAI-compatible server (async httpx) or llama.cpp in-process.

The HTTP upstream reads through the same limits and the same chunk and completion readers as
``charfmt chat --endpoint`` (:mod:`charfmt._http_client`): only the socket side is async here,
so a client that goes away cancels the upstream request at once. Every failure is one
:class:`UpstreamFailure` carrying the HTTP status the front end should see (and ``Retry-After``
where the upstream sent one), never a traceback.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Protocol

from charfmt._http_client import (
    MAX_ERROR_BODY,
    MAX_LINE,
    Budget,
    Delta,
    EventStream,
    ReplyReader,
    UpstreamError,
    exception_text,
    redact_url,
    require,
    transport_failure,
)

MAX_RETRY_AFTER: Final = 3600
"""Seconds of a ``Retry-After`` passed on to the front end, at most."""

DRAIN_BYTES: Final = 64 << 10
"""Bytes an upstream may still send after its reply ended (``[DONE]``) before its connection is closed."""

DRAIN_SECONDS: Final = 2.0
"""Seconds an upstream may take to end its body after the reply ended, before its connection is closed."""

_TITLE: Final = re.compile(rb"<title[^>]*>(.{0,200}?)</title>", re.IGNORECASE | re.DOTALL)


class UpstreamFailure(UpstreamError):
    """The upstream failed; ``status`` is what the front end is told, ``retry_after`` (seconds) where known."""

    def __init__(self, message: str, *, status: int = 502, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class Upstream(Protocol):
    """A model: a chat-completion request body in, the reply's deltas out."""

    name: str
    """What the logs call this upstream (the URL or the model file)."""

    def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        """The deltas of the reply to ``body``."""
        ...

    async def aclose(self) -> None:
        """Release connections or the model."""
        ...


def retry_after(value: str | None) -> int | None:
    """Seconds from a ``Retry-After`` header (seconds or an HTTP date), within ``MAX_RETRY_AFTER``."""
    if not value or len(value) > 64:
        return None
    value = value.strip()
    if value.isdigit():
        return min(int(value[:5]), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0, min(int(when.timestamp() - time.time()), MAX_RETRY_AFTER))


def front_status(upstream_status: int) -> int:
    """The status a front end gets for an upstream's error status: 429 and 503 as they are, else 502."""
    return upstream_status if upstream_status in (429, 503) else 502


def _without_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (httpx would send it as Basic auth; the key goes as Bearer)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class HTTPUpstream:
    """An OpenAI-compatible ``/v1/chat/completions`` at ``url``, read through charfmt's bounded readers.

    ``api_key`` goes as ``Authorization: Bearer`` (as ``charfmt chat --endpoint --api-key-env``);
    credentials in the URL (``user:secret@``) are dropped, never sent as Basic auth, and errors
    say "the upstream", never its URL (front ends must not learn where the model runs).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 120.0,
        max_connections: int = 100,
        api_key: str | None = None,
        key_env: str | None = None,
    ) -> None:
        httpx = require()
        self.name = redact_url(url)
        self.url = _without_userinfo(url)
        self.timeout = timeout
        self.key_env = key_env
        """The environment variable the key came from (named in a 401/403's message), or None."""
        self._httpx = httpx
        self._reader = ReplyReader(self.fail)
        self._finishing: set[asyncio.Task[None]] = set()
        headers = {"Accept-Encoding": "identity"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            follow_redirects=False,
            headers=headers,
        )

    async def aclose(self) -> None:
        """Close the connection pool (once the answers still finishing are closed)."""
        await asyncio.gather(*self._finishing, return_exceptions=True)
        await self._client.aclose()

    def fail(self, message: str, status: int = 502, retry: int | None = None) -> UpstreamFailure:
        """The one error of this upstream: ``the upstream: message`` on one line, with the front end's status."""
        text = " ".join(message.split()).replace(self.url, "the upstream").replace(self.name, "the upstream")
        return UpstreamFailure(f"the upstream: {text}", status=status, retry_after=retry)

    async def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        """The reply to ``body``, streamed or whole, within ``max_tokens``; cancelling closes the request.

        The reply ends at ``[DONE]`` (or the body's end): what the upstream still sends after it
        (its body's last bytes) is read, within ``DRAIN_BYTES`` and ``DRAIN_SECONDS``, and the
        connection kept or closed in a task of its own, so the turn's end does not wait for it.
        """
        httpx = self._httpx
        budget = Budget.for_tokens(max_tokens)
        try:
            response = await self._client.send(self._client.build_request("POST", self.url, json=body), stream=True)
            chunks = _counted(response.aiter_raw(), budget.bytes)  # identity-encoded (checked): the raw bytes
            try:
                async for delta in self._read(response, chunks, budget):
                    yield delta
            except BaseException:  # a failure, the client gone (cancelled): the request closed now
                await response.aclose()
                raise
        except UpstreamFailure:
            raise
        except UpstreamError as e:  # a bound of the shared readers (a line, the reply's bytes) was passed
            raise self.fail(str(e)) from None
        except httpx.HTTPError as e:
            status = 504 if isinstance(e, httpx.TimeoutException) else 502
            raise self.fail(transport_failure(httpx, e, self.timeout), status) from None
        task = asyncio.ensure_future(self._finish(response, chunks))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _finish(self, response: Any, chunks: AsyncIterator[bytes]) -> None:
        """Read the rest of an answer already complete (bounded) and close it: the connection kept when it ended."""
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                left = DRAIN_BYTES
                async for chunk in chunks:
                    left -= len(chunk)
                    if left < 0:
                        break
        except (TimeoutError, UpstreamError, self._httpx.HTTPError):
            pass  # the reply is whole already: what follows it is nobody's
        finally:
            await response.aclose()

    async def _read(self, response: Any, chunks: AsyncIterator[bytes], budget: Budget) -> AsyncIterator[Delta]:
        reader = self._reader
        reader.check_headers(response.headers.raw)
        if response.status_code >= 300:
            raise await self._error(response)
        kind = reader.body_kind(response.headers)
        if kind == "text/html":
            raise self.fail(f"the server answered with an HTML page, not a chat completion{_title(b'')}")
        first = b""
        async for chunk in chunks:  # the first bytes say which of the two shapes this is
            first += chunk
            if first.strip() or len(first) > MAX_LINE:
                break
        if reader.is_completion(first, kind):
            body = bytearray(first)
            async for chunk in chunks:
                reader.gather(body, chunk)
            yield reader.completion(bytes(body))
            return
        stream = EventStream(reader, kind, budget)
        pending: bytes | None = first
        while pending is not None:
            for delta in stream.feed(pending):
                yield delta
            if stream.done:
                return
            pending = await anext(chunks, None)
        for delta in stream.end():
            yield delta

    async def _error(self, response: Any) -> UpstreamFailure:
        data = b""
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) >= MAX_ERROR_BODY:
                data = data[:MAX_ERROR_BODY]
                break
        status = response.status_code
        retry = retry_after(response.headers.get("retry-after"))
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "text/html" or data.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
            detail = f"an HTML error page{_title(data)}"
        else:
            detail = self._reader.error_detail(data, getattr(response, "reason_phrase", ""))
        if status in (401, 403):  # the key is charfmt's to fix, not the front end's: a gateway error
            where = f"the environment variable {self.key_env}" if self.key_env else "--api-key-env"
            return self.fail(f"HTTP {status}: refused charfmt's API key (check {where}): {detail}", 502)
        return self.fail(f"HTTP {status}: {detail}", front_status(status), retry)


async def _counted(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise UpstreamError(f"the reply is longer than {limit:,} bytes; stopped reading")
        yield chunk


def _title(page: bytes) -> str:
    m = _TITLE.search(page)
    return f" ({' '.join(m.group(1).decode('utf-8', 'replace').split())[:120]!r})" if m else ""


# --- llama.cpp in-process ----------------------------------------------------------------------------

_DONE: Final = object()


class LocalUpstream:
    """A llama.cpp model in this process (``--model PATH.gguf``): one generation at a time, in a thread.

    The GBNF in ``body["grammar"]`` constrains it (the llama-server field). Cancelling the
    request stops the generation at the next token.
    """

    def __init__(self, llm: Any, name: str) -> None:
        self.name = name
        self._llm = llm
        self._lock = asyncio.Lock()  # llama.cpp's context serves one generation at a time

    async def aclose(self) -> None:
        """Nothing to close (the model lives as long as the process)."""

    async def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        """The deltas of the model's reply to ``body`` (messages, grammar, max_tokens, temperature, seed)."""
        from charfmt.chat import ContextFull, _chat_handler, _Guarded  # noqa: PLC0415
        from charfmt.engines import llama_grammar  # noqa: PLC0415

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        grammar = llama_grammar(body["grammar"]) if body.get("grammar") else None
        handler = _chat_handler(self._llm)

        def put(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            try:
                chunks = handler(
                    llama=_Guarded(self._llm, max_tokens), messages=body["messages"], grammar=grammar,
                    max_tokens=max_tokens, temperature=float(body.get("temperature", 0.7)),
                    seed=int(body.get("seed", 0)), stream=True,
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


def load_local(path: str, *, n_ctx: int, seed: int = 0) -> LocalUpstream:
    """``LocalUpstream`` for the GGUF at ``path`` (``charfmt.engines.load_llama``)."""
    from charfmt.engines import load_llama  # noqa: PLC0415

    return LocalUpstream(load_llama(path, n_ctx=n_ctx, seed=seed), path)


Factory = Callable[[], Upstream]
