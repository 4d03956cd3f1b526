"""The upstream readers' line splitter (shared by chat and serve) and the serve upstream's status helpers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from charfmt._http_client import LineSplitter, UpstreamError, lines
from charfmt.serve.upstream import front_status, retry_after


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
