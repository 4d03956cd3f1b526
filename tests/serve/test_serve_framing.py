"""The transport guard's framing readers: the same verdicts however the bytes are cut.

A connection's bytes arrive in pieces the guard does not choose (TCP segments, a client's writes), and the
server's answers leave in the pieces uvicorn writes. So each reader must read a sequence of messages the
same whichever way it is cut: the requests' heads found, a refusal at the same limit; the answers' ends
found, and for an HTTP/1.0 client the same unchunked bytes. The real server is driven by
``tests/serve/test_serve_hostile.py``; these properties try the cuts no socket test can choose.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from charfmt.serve.framing import HeadLimits, Phase, Refusal, RequestHead, RequestReader, ResponseReader

REQUESTS = [
    b"GET /v1/info HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b'POST /v1/turn HTTP/1.1\r\nHost: localhost\r\nContent-Length: 12\r\n\r\n{"say":"hi"}',
    b"POST /v1/turn HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'3;x=1\r\n{"s\r\n2\r\n"}\r\n0\r\nT: 1\r\n\r\n',
    b"\r\nGET / HTTP/1.0\r\n\r\n",
]
LIMITS = HeadLimits(request_line=64, header_line=48, headers=4, head_bytes=120)
REFUSED = [
    (b"GET /" + b"a" * 80 + b" HTTP/1.1\r\n", 414),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 60 + b"\r\n", 431),
    (b"GET / HTTP/1.1\r\n" + b"X: 1\r\n" * 5, 431),
    (b"GET / HTTP/1.1\r\n" + (b"X: " + b"a" * 40 + b"\r\n") * 3, 431),
    (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
]


def cuts(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """``data`` cut into pieces anywhere."""
    points = st.lists(st.integers(0, len(data)), max_size=12).map(sorted)
    return points.map(lambda p: [data[a:b] for a, b in zip([0, *p], [*p, len(data)], strict=True)])


def read_requests(pieces: list[bytes], limits: HeadLimits = LIMITS) -> tuple[int, Phase, int | None]:
    reader = RequestReader(limits, deque())
    try:
        for piece in pieces:
            reader.feed(piece)
    except Refusal as r:
        return reader.requests, reader.phase, r.status
    return reader.requests, reader.phase, None


@given(st.data())
def test_requests_in_a_row_are_read_whole_however_they_are_cut(data: st.DataObject) -> None:
    stream = b"".join(REQUESTS)
    pieces = data.draw(cuts(stream))
    assert read_requests(pieces, HeadLimits()) == (len(REQUESTS), Phase.IDLE, None)


@pytest.mark.parametrize(("request_bytes", "status"), REFUSED)
@given(data=st.data())
def test_a_limit_is_met_at_the_same_status_however_the_bytes_are_cut(
    request_bytes: bytes, status: int, data: st.DataObject
) -> None:
    pieces = data.draw(cuts(request_bytes))
    assert read_requests(pieces)[2] == status
    assert read_requests([request_bytes])[2] == status


ANSWERS = [
    (b"1.1", b"GET", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"),
    (
        b"1.1",
        b"POST",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    ),
    (b"1.1", b"HEAD", b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n"),
    (
        b"1.0",
        b"POST",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    ),
]


def read_answers(pieces: list[bytes]) -> tuple[bytes, int]:
    heads = deque(RequestHead(method, version, upgrade=False) for version, method, _ in ANSWERS)
    reader = ResponseReader(heads)
    sent = b"".join(reader.feed(piece) for piece in pieces)
    return sent, reader.answered


@given(st.data())
def test_answers_end_where_they_end_however_they_are_written(data: st.DataObject) -> None:
    """The end of each answer found (four), the bytes sent as written but the HTTP/1.0 client's: its chunked
    framing taken off, its body the chunks' data, ``Connection: close`` kept."""
    stream = b"".join(answer for _, _, answer in ANSWERS)
    whole, answered = read_answers([stream])
    assert answered == len(ANSWERS)
    assert read_answers(data.draw(cuts(stream))) == (whole, answered)
    first_three = b"".join(answer for _, _, answer in ANSWERS[:3])
    assert whole.startswith(first_three)
    assert whole[len(first_three) :] == b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello world"
