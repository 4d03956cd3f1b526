"""The upstream readers' line splitter (shared by chat and serve), the serve upstream's status helpers, and
its watch on the upstream's silence."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from charfmt.llm._replies import LineSplitter, UpstreamError, lines
from charfmt.serve.upstreams import UpstreamFailure
from charfmt.serve.upstreams.openai import HTTPUpstream, _Body, front_status, retry_after


@given(st.binary(max_size=60).map(lambda b: b.replace(b"x", b"\r").replace(b"y", b"\n")), st.data())
def test_lines_fed_in_any_chunks_are_the_streams_splitlines(stream: bytes, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=8))
    points = [0, *sorted(cuts), len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(points)]
    reader = LineSplitter(1 << 20)
    fed = [line for chunk in chunks for line in reader.feed(chunk)] + reader.end()
    assert fed == list(lines(iter(chunks))) == stream.splitlines()


def test_a_line_past_the_limit_is_the_same_error() -> None:
    reader = LineSplitter(10_000)
    with pytest.raises(UpstreamError, match="longer than 10,000 bytes"):
        for _ in range(20):
            reader.feed(b"x" * 1000)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7), ("0", 0), ("99999999", 3600), ("soon", None), ("", None), (None, None), ("x" * 100, None)],
)
def test_retry_after(header: str | None, seconds: int | None) -> None:
    assert retry_after(header) == seconds


def test_an_http_date_retry_after_counts_from_now() -> None:
    import email.utils
    import time

    value = retry_after(email.utils.formatdate(time.time() + 120, usegmt=True))
    assert value is not None and 100 <= value <= 120


@pytest.mark.parametrize(("upstream", "front"), [(429, 429), (503, 503), (500, 502), (400, 502), (404, 502)])
def test_front_status(upstream: int, front: int) -> None:
    assert front_status(upstream) == front


# --- silence: no event for --timeout seconds ends the reading (one timer, moved on when it fires) ---------


class _Content:
    """What ``_Body`` reads of an aiohttp body: the bytes received, the error set, the end."""

    def __init__(self) -> None:
        self.total_bytes = 0
        self.error: BaseException | None = None

    def exception(self) -> BaseException | None:
        return self.error

    def set_exception(self, error: BaseException) -> None:
        self.error = error

    def is_eof(self) -> bool:
        return False


class _Response:
    connection = None

    def __init__(self) -> None:
        self.content = _Content()


def _watch(script: Any, seconds: float = 0.05) -> BaseException | None:
    """The error a body's silence watch set while ``script(body, content)`` ran (None: none)."""

    async def main() -> BaseException | None:
        pytest.importorskip("aiohttp")
        upstream = HTTPUpstream("http://127.0.0.1:9/v1", timeout=seconds)
        response = _Response()
        body = _Body(upstream, response, 1 << 20)
        try:
            await script(body, response.content)
        finally:
            body.close()
        return response.content.error

    return asyncio.run(main())


def test_an_upstream_that_sends_nothing_is_a_504() -> None:
    async def nothing(body: _Body, content: _Content) -> None:
        await asyncio.sleep(0.2)

    error = _watch(nothing)
    assert isinstance(error, UpstreamFailure) and error.status == 504
    assert str(error) == "the upstream: the server sent nothing for 0.05 s"


def test_comments_without_an_event_are_silence_too() -> None:
    async def comments(body: _Body, content: _Content) -> None:
        for _ in range(10):  # bytes read (``: ping``), never an event heard
            content.total_bytes += 8
            body.total = content.total_bytes
            await asyncio.sleep(0.02)

    error = _watch(comments)
    assert isinstance(error, UpstreamFailure) and error.status == 504
    assert "sent no event for 0.05 s (only comments)" in str(error)


def test_events_heard_keep_the_reading_going_and_silence_after_them_ends_it() -> None:
    async def events(body: _Body, content: _Content) -> None:
        for _ in range(10):  # 0.2 s of events, one every 0.02 s: never silent for 0.05 s
            content.total_bytes += 8
            body.total = content.total_bytes
            body.hear()
            await asyncio.sleep(0.02)
        assert content.error is None
        await asyncio.sleep(0.2)

    assert "sent nothing for 0.05 s" in str(_watch(events))


def test_bytes_waiting_to_be_read_are_not_the_upstreams_silence() -> None:
    async def slow_reader(body: _Body, content: _Content) -> None:
        content.total_bytes = 100  # arrived, not read: the front end reads slowly, the upstream is fine
        await asyncio.sleep(0.2)
        assert content.error is None
        body.total = 100  # read now, holding no event
        await asyncio.sleep(0.2)

    assert "only comments" in str(_watch(slow_reader))


def test_a_whole_reply_is_no_longer_watched() -> None:
    async def quiet(body: _Body, content: _Content) -> None:
        body.quiet()
        await asyncio.sleep(0.2)

    assert _watch(quiet) is None
