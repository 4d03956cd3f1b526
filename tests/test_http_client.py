"""The bounded readers of ``charfmt._http_client``: lines over any chunking, JSON with a depth limit."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from charfmt._http_client import JSONDepthError, UpstreamError, lines, load_json

STREAM = b'data: {"a": 1}\r\n\r\ndata: x\n\n: ping\rdata: y\r\n'
LINES = [b'data: {"a": 1}', b"", b"data: x", b"", b": ping", b"data: y"]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=8))
def test_lines_are_the_same_however_the_bytes_arrive(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    assert list(lines(iter(chunks))) == LINES


def test_a_line_past_the_limit_is_an_error_without_holding_more() -> None:
    def endless() -> Iterator[bytes]:
        while True:
            yield b"x" * 1000

    with pytest.raises(UpstreamError, match="longer than 10,000 bytes"):
        list(lines(endless(), max_line=10_000))


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"a": ' * 65 + "1" + "}" * 65, '[[["' + "[" * 100 + '"]]]' + "[" * 70],
)
def test_deep_json_is_refused_before_it_is_parsed(text: str) -> None:
    with pytest.raises(JSONDepthError):
        load_json(text)


def test_brackets_inside_strings_do_not_count_and_nan_is_refused() -> None:
    assert load_json('{"a": "' + "[" * 1000 + '\\"["}') == {"a": "[" * 1000 + '"['}
    assert load_json("[" * 64 + "]" * 64) is not None
    with pytest.raises(ValueError, match="NaN is not JSON"):
        load_json('{"a": NaN}')
