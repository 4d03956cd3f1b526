"""An OpenAI-compatible upstream (``charfmt serve --upstream URL``): ``/v1/chat/completions`` over aiohttp.

The HTTP upstream reads through the same limits and the same chunk and completion readers as
``charfmt chat --endpoint`` (:mod:`charfmt.llm._replies`, the readers both share): only the socket
side is async here, so a client that goes away cancels the upstream request at once. Every failure is one
:class:`UpstreamFailure` carrying the HTTP status the front end should see (and ``Retry-After``
where the upstream sent one), never a traceback.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import json
import os
import re
import socket
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final

from charfmt._redact import Redactor
from charfmt.diagnostics import CharfmtError
from charfmt.llm._replies import (
    Budget,
    Delta,
    ReplyBody,
    ReplyReader,
    UpstreamError,
    endpoint_url,
    exception_text,
    redact_url,
    silence,
)
from charfmt.serve.upstreams.base import UpstreamFailure, UpstreamKind

if TYPE_CHECKING:
    from charfmt.serve.settings import Settings

MAX_RETRY_AFTER: Final = 3600
"""Seconds of a ``Retry-After`` passed on to the front end, at most."""

DRAIN_BYTES: Final = 64 << 10
"""Bytes an upstream may still send after its reply ended (``[DONE]``) before its connection is closed."""

DRAIN_SECONDS: Final = 2.0
"""Seconds an upstream may take to end its body after the reply ended, before its connection is closed."""

MAX_HEAD_LINE: Final = 256 << 10
"""Bytes of a status or header line the HTTP parser takes (the reader's own, smaller bound names the header)."""

MAX_HEADS: Final = 1000
"""Header lines the HTTP parser takes (the reader's own, smaller bound says how many came)."""

_TITLE: Final = re.compile(rb"<title[^>]*>(.{0,200}?)</title>", re.IGNORECASE | re.DOTALL)


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
    """``url`` without ``user:password@`` (an HTTP client would send it as Basic auth; the key goes as Bearer)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class HTTPUpstream:
    """An OpenAI-compatible ``/v1/chat/completions`` at ``url``, read through charfmt's bounded readers.

    The connections are aiohttp's (one pool of ``max_connections``, kept alive between turns):
    its C parser reads a streamed reply at a fraction of the CPU an httpx pool spends with many
    sessions at once (``benchmarks/bench_serve.py --floor``). ``api_key`` goes as
    ``Authorization: Bearer`` (as ``charfmt chat --endpoint --api-key-env``); credentials in the
    URL (``user:secret@``) are dropped, never sent as Basic auth, and errors say "the upstream",
    never its URL (front ends must not learn where the model runs). The proxy variables
    (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) are read once, at start.
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
        self._aiohttp = require_aiohttp()
        self.name = redact_url(url)
        self.url = _without_userinfo(url)
        self.timeout = timeout
        self.key_env = key_env
        """The environment variable the key came from (named in a 401/403's message), or None."""
        self._reader = ReplyReader(self.fail)
        self._finishing: set[asyncio.Task[None]] = set()
        self._headers = {"Accept-Encoding": "identity", "Content-Type": "application/json"}
        self._redact = Redactor([api_key])
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._max_connections = max_connections
        self._proxy = env_proxy(self.url)
        parts = urllib.parse.urlsplit(self.url)
        self._where = sorted({parts.netloc, parts.hostname or parts.netloc} - {""}, key=len, reverse=True)
        self._session: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> Any:
        """The connection pool of the running event loop (made on the first turn: aiohttp's belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            aiohttp = self._aiohttp
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                timeout=aiohttp.ClientTimeout(total=None, connect=self.timeout),  # silence: ``_Body``'s
                headers=self._headers, auto_decompress=False,
                max_line_size=MAX_HEAD_LINE, max_field_size=MAX_HEAD_LINE, max_headers=MAX_HEADS,
            )  # fmt: skip
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        """Close the connection pool (once the answers still finishing are closed)."""
        await asyncio.gather(*self._finishing, return_exceptions=True)
        if self._session is not None and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None

    def fail(self, message: str, status: int = 502, retry: int | None = None) -> UpstreamFailure:
        """The one error of this upstream: ``the upstream: message`` on one line, with the front end's status;
        the key (an upstream may quote the one it refused) and key-shaped strings written ``***``."""
        text = " ".join(message.split()).replace(self.url, "the upstream").replace(self.name, "the upstream")
        for where in self._where:  # (a message quoting the host, or host:port, says "the upstream" too)
            text = text.replace(where, "the upstream")
        return UpstreamFailure(f"the upstream: {self._redact(text)}", status=status, retry_after=retry)

    async def chat(self, body: dict[str, Any], *, max_tokens: int) -> AsyncIterator[Delta]:
        """The reply to ``body``, streamed or whole, within ``max_tokens``; cancelling closes the request.

        The reply ends at ``[DONE]`` (or the body's end): what the upstream still sends after it
        (its body's last bytes) is read, within ``DRAIN_BYTES`` and ``DRAIN_SECONDS``, and the
        connection kept or closed in a task of its own, so the turn's end does not wait for it.
        """
        aiohttp = self._aiohttp
        budget = Budget.for_tokens(max_tokens)
        reader = self._reader
        try:
            async with asyncio.timeout(self.timeout):  # the request sent and the answer's head read
                response = await self._client().post(
                    self.url, data=_encoded(body), allow_redirects=False, proxy=self._proxy
                )
            reply = _Body(self, response, budget.bytes)
            try:
                reader.check_headers(list(response.raw_headers))
                if response.status >= 300:
                    raise await self._error(response, reply)
                kind = reader.body_kind(response.headers)
                if kind == "text/html":
                    raise self.fail(f"the server answered with an HTML page, not a chat completion{_title(b'')}")
                answer = reply.body = ReplyBody(reader, kind, budget)
                while chunk := await reply.read():
                    for delta in answer.feed(chunk):
                        reply.hear()
                        yield delta
                    if answer.whole is not None:
                        reply.hear()  # (a whole completion: each of its bytes is heard)
                    if answer.done:
                        break
                else:
                    for delta in answer.end():
                        yield delta
            except BaseException:  # a failure, the client gone (cancelled): the request closed now
                reply.close()
                response.close()
                raise
        except UpstreamFailure:
            raise
        except UpstreamError as e:  # a bound of the shared readers (a line, the reply's bytes) was passed
            raise self.fail(str(e)) from None
        except (aiohttp.ClientError, TimeoutError) as e:
            raise self.fail(*_transport_failure(aiohttp, e, self.timeout)) from None
        task = asyncio.ensure_future(self._finish(response, reply))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _finish(self, response: Any, reply: _Body) -> None:
        """Read the rest of an answer already complete (bounded) and close it: the connection kept when it ended."""
        reply.quiet()
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                left = DRAIN_BYTES
                while chunk := await reply.read():
                    left -= len(chunk)
                    if left < 0:
                        response.close()
                        return
        except (TimeoutError, UpstreamError, self._aiohttp.ClientError):
            response.close()  # the reply is whole already: what follows it is nobody's
        finally:
            reply.close()
            response.release()  # back to the pool when the body ended, else the connection is closed

    async def _error(self, response: Any, reply: _Body) -> UpstreamFailure:
        gathered = bytearray()
        while chunk := await reply.read():
            reply.hear()
            if self._reader.gather_error(gathered, chunk):
                break
        data = bytes(gathered)
        status = response.status
        retry = retry_after(response.headers.get("retry-after"))
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "text/html" or data.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
            detail = f"an HTML error page{_title(data)}"
        else:
            detail = self._reader.error_detail(data, response.reason or "")
        if status in (401, 403):  # the key is charfmt's to fix, not the front end's: a gateway error
            where = f"the environment variable {self.key_env}" if self.key_env else "--api-key-env"
            if "Authorization" not in self._headers:
                return self.fail(f"HTTP {status}: charfmt sent no API key (set {where}): {detail}", 502)
            return self.fail(f"HTTP {status}: refused charfmt's API key (check {where}): {detail}", 502)
        failure = self.fail(f"HTTP {status}: {detail}", front_status(status), retry)
        failure.upstream_status = status
        return failure


class _Body:
    """An answer's body as it is read: its bytes counted (at most ``limit``), its connection watched
    (``_watch_connection``), and the upstream's silence bounded.

    ``hear`` notes an event: when the upstream sends none for ``timeout`` seconds (keep-alive
    comments do not count), the reading ends with a 504. One timer, moved on when it fires, not at
    each chunk; bytes that arrived and wait to be read are never silence (the reading is slow, not
    the upstream).
    """

    def __init__(self, upstream: HTTPUpstream, response: Any, limit: int) -> None:
        self._upstream = upstream
        self._content = response.content
        self._limit = limit
        self.total = 0
        """Bytes read so far."""
        self._unwatch = _watch_connection(upstream._aiohttp, response)
        self._loop = asyncio.get_running_loop()
        self._heard = self._loop.time()
        self._heard_at = 0  # bytes read when the last event was heard
        self.body: ReplyBody | None = None
        """What the body is read into, once its head was accepted (the silence says what its stream held)."""
        self._timer: asyncio.TimerHandle | None = self._loop.call_at(self._heard + upstream.timeout, self._check)

    async def read(self) -> bytes:
        """The next bytes of the body (``b""``: its end)."""
        chunk: bytes = await self._content.readany()
        self.total += len(chunk)
        if self.total > self._limit:
            raise UpstreamError(f"the reply is longer than {self._limit:,} bytes; stopped reading")
        return chunk

    def hear(self) -> None:
        """An event was read: the upstream is not silent."""
        self._heard = self._loop.time()
        self._heard_at = self.total

    def quiet(self) -> None:
        """Stop watching for silence (the reply is whole)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """Stop watching the silence and the connection."""
        self.quiet()
        self._unwatch()

    def _check(self) -> None:
        content, seconds, now = self._content, self._upstream.timeout, self._loop.time()
        due = now + seconds if content.total_bytes > self.total else self._heard + seconds
        if now < due:
            self._timer = self._loop.call_at(due, self._check)
            return
        self._timer = None
        if content.exception() is not None or content.is_eof():
            return
        partial = self.body is not None and self.body.partial
        if partial or self.total > self._heard_at:
            why = silence(seconds, partial)
        else:
            why = f"the server sent nothing for {seconds:g} s"
        content.set_exception(self._upstream.fail(why, 504))


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``... ``ALL_PROXY``); None where ``NO_PROXY`` says."""
    import urllib.request  # noqa: PLC0415 (import cost: only to read the proxy settings)

    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _watch_connection(aiohttp: Any, response: Any) -> Callable[[], None]:
    """End the body's reading with an error if the connection goes before the body ends; the unwatching.

    aiohttp's C parser, failing on a body already under way (a bad chunk size in a later
    packet), closes the connection but leaves the body's reader waiting for ever; its pure
    Python parser fails the reader. This makes the C parser's case end as the other's does.
    """
    connection = response.connection
    closed = connection.protocol.closed if connection is not None and connection.protocol is not None else None
    if closed is None:  # already closed (what was read is all there is), or no connection left to watch
        return _nothing
    protocol, content = connection.protocol, response.content

    def lost(closing: asyncio.Future[None]) -> None:
        if not closing.cancelled():
            closing.exception()  # (seen: asyncio would log a reset connection's error as never retrieved)
        if not content.is_eof() and content.exception() is None:
            why = protocol.exception()
            text = _parser_text(why) if why is not None else "the connection closed before the body ended"
            content.set_exception(aiohttp.ClientPayloadError(text))

    def unwatch() -> None:
        closed.remove_done_callback(lost)

    closed.add_done_callback(lost)
    return unwatch


def _nothing() -> None:
    return None


def require_aiohttp() -> Any:
    """The ``aiohttp`` module (serve's upstream client), or a ``CharfmtError`` naming the extra."""
    try:
        return importlib.import_module("aiohttp")
    except ImportError as e:
        raise CharfmtError(f"charfmt serve needs aiohttp ({e}): pip install 'charfmt[serve]'") from None


def _os_error_text(error: OSError) -> str:
    """An OS error's words without the address it names: ``Connection refused``, ``Name or service not known``."""
    if isinstance(error, socket.gaierror) or not error.errno or error.errno < 0:
        return re.sub(r"\s*\(.*?\)", "", error.strerror or type(error).__name__)
    return os.strerror(error.errno)


def _parser_text(e: BaseException) -> str:
    """What an HTTP parser's failure says (its message, not its ``400, message=..., url=...`` form)."""
    for error in (e, e.__cause__):
        message = getattr(error, "message", None)
        if isinstance(message, str) and message:
            return message
    text = exception_text(e)
    return re.sub(r"^\d{3}, message[:=]\s*", "", text.partition("<")[0].strip() or text)


def _encoded(body: dict[str, Any]) -> bytes:
    """A request body as JSON, compact, UTF-8 as it is."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _transport_failure(aiohttp: Any, e: BaseException, timeout: float) -> tuple[str, int]:
    """What a failed exchange says, and the front end's status: silence past ``timeout`` (504), else 502.

    In charfmt's words, not aiohttp's: no host, port or address (front ends must not learn where the
    model runs), no parser's internal ``400``.
    """
    if isinstance(e, TimeoutError):  # aiohttp's connect and read timeouts are TimeoutErrors
        return f"the server sent nothing for {timeout:g} s", 504
    if isinstance(e, aiohttp.ClientConnectorError):
        return f"cannot connect: {_os_error_text(e.os_error)}", 502
    if isinstance(e, aiohttp.ClientPayloadError) and "ConnectionResetError" in str(e):  # (aiohttp says it so)
        return "the connection was reset before the reply ended", 502
    if isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return f"the server broke the HTTP protocol: {_parser_text(e)}", 502
    if isinstance(e, aiohttp.ClientOSError):
        return f"the connection broke: {exception_text(e)}", 502
    return f"the request failed: {exception_text(e)}", 502


def _title(page: bytes) -> str:
    m = _TITLE.search(page)
    return f" ({' '.join(m.group(1).decode('utf-8', 'replace').split())[:120]!r})" if m else ""


def _open(settings: Settings, url: str) -> HTTPUpstream:
    return HTTPUpstream(
        endpoint_url(url), timeout=settings.timeout, api_key=settings.api_key, key_env=settings.api_key_env
    )


KIND: Final = UpstreamKind(
    "openai", "--upstream", "URL", "an OpenAI-compatible server (…/v1)", _open, require=require_aiohttp
)
"""This upstream's row in ``charfmt.serve.upstreams.KINDS``: ``--upstream URL`` (``Settings.upstream_url``)."""
