"""The client for OpenAI-compatible servers: one bounded door for what ``chat --endpoint`` reads, over httpx.

Bytes are counted as they come off the socket (``iter_bytes``), never ``read()`` and then
checked, so memory stays flat (httpcore's 100 KiB header block first); what they say is read by
``charfmt.llm._replies`` (``ReplyReader``, ``ReplyBody``), the readers ``charfmt serve``'s async
upstream feeds too. A transport failure is one :class:`UpstreamError` whose message is one line,
never taken for an empty reply.

httpx is an optional dependency (``pip install 'charfmt[http]'``); :func:`require` says so.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from charfmt._redact import Redactor
from charfmt.diagnostics import CharfmtError
from charfmt.llm._replies import Budget, Delta, ReplyBody, ReplyReader, UpstreamError, exception_text, redact_url

if TYPE_CHECKING:
    import httpx


INSTALL: Final = "pip install 'charfmt[http]'"


def require() -> Any:
    """The ``httpx`` module, or a ``CharfmtError`` saying which extra installs it."""
    try:
        return importlib.import_module("httpx")
    except ImportError as exc:
        raise CharfmtError(f"--endpoint needs httpx, not installed ({exc}); install it with: {INSTALL}") from None


def transport_failure(httpx: Any, e: Exception, timeout: float) -> str:
    """What an ``httpx.HTTPError`` of a request says: silence past ``timeout``, no connection, a broken protocol."""
    if isinstance(e, httpx.TimeoutException):
        return f"the server sent nothing for {timeout:g} s"
    if isinstance(e, httpx.ConnectError):
        return f"cannot connect: {exception_text(e)}"
    if isinstance(e, httpx.RemoteProtocolError):
        return f"the server broke the HTTP protocol: {exception_text(e)}"
    if isinstance(e, httpx.TransportError | httpx.StreamError):
        return f"the connection broke: {exception_text(e)}"
    return f"the request failed: {exception_text(e)}"


class _Counted:
    """The body's chunks, counted: more than ``limit`` bytes in all raises ``UpstreamError``."""

    def __init__(self, chunks: Iterator[bytes], limit: int, what: str) -> None:
        self._chunks = chunks
        self.limit = limit
        self.what = what
        self.total = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.total += len(chunk)
            if self.total > self.limit:
                raise UpstreamError(f"{self.what} is longer than {self.limit:,} bytes; stopped reading")
            yield chunk


class Client:
    """POSTs chat-completion requests to one URL and reads the answers through the limits above."""

    def __init__(self, url: str, *, timeout: float = 120.0, api_key: str | None = None) -> None:
        lib = require()
        self.url = url
        self.shown = redact_url(url)
        """The URL as errors show it (a password in it hidden)."""
        headers = {"Accept-Encoding": "identity"}  # nothing to inflate: the byte counts are the bytes
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._keyed = bool(api_key)
        self._redact = Redactor([api_key])
        self.timeout = timeout
        self.reader = ReplyReader(self.fail)
        self._httpx = lib
        self._client: httpx.Client = lib.Client(
            timeout=lib.Timeout(timeout),
            limits=lib.Limits(max_connections=4, max_keepalive_connections=2),
            follow_redirects=False,
            headers=headers,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def fail(self, message: str) -> UpstreamError:
        """The one error of this client: ``URL: message``, on one line, the key and key-shaped strings ``***``."""
        return UpstreamError(self._redact(f"{self.shown}: {' '.join(message.split())}"))

    def chat(self, body: dict[str, Any], *, max_tokens: int) -> Iterator[Delta]:
        """The reply to ``body`` (a chat-completion request), streamed or whole, within ``max_tokens``."""
        httpx = self._httpx
        try:
            with self._client.stream("POST", self.url, json=body) as response:
                yield from self._read(response, Budget.for_tokens(max_tokens))
        except UpstreamError:
            raise
        except httpx.HTTPError as e:
            raise self.fail(transport_failure(httpx, e, self.timeout)) from None

    def _read(self, response: httpx.Response, budget: Budget) -> Iterator[Delta]:
        reader = self.reader
        reader.check_headers(response.headers.raw)
        if response.status_code >= 300:
            status, detail = response.status_code, self._error_detail(response)
            if status in (401, 403):  # the key is the user's to fix: say whether one was sent
                sent = "the server refused the API key" if self._keyed else "charfmt sent no API key"
                raise self.fail(f"HTTP {status}: {sent} (--api-key-env names the variable that holds it): {detail}")
            raise self.fail(f"HTTP {status}: {detail}")
        body = ReplyBody(reader, reader.body_kind(response.headers), budget)
        heard = time.monotonic()
        for chunk in _Counted(response.iter_bytes(), budget.bytes, "the reply"):
            streaming = body.stream is not None
            events = list(body.feed(chunk))
            yield from events
            if body.done:
                return
            if events or not streaming:  # (silence is an event stream's: a whole completion has httpx's timeout)
                heard = time.monotonic()
            elif time.monotonic() - heard > self.timeout:  # bytes keep coming (comments): no event is silence
                raise self.fail(body.silence(self.timeout))
        yield from body.end()

    def _error_detail(self, response: httpx.Response) -> str:
        data = bytearray()
        for chunk in response.iter_bytes():
            if self.reader.gather_error(data, chunk):
                break
        return self.reader.error_detail(bytes(data), response.reason_phrase)

