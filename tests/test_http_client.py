"""The bounded readers of ``charfmt._http_client``: lines over any chunking, JSON with a depth limit."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from charfmt._http_client import (
    Delta,
    JSONDepthError,
    ReplyReader,
    UpstreamError,
    lines,
    load_json,
)

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


# --- the shortcuts of the hot path read exactly as the general path does --------------------------

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(_JSON_VALUES, st.booleans())
def test_load_json_reads_as_json_loads_does(value: object, bom: bool) -> None:
    text = ("\ufeff" if bom else "") + json.dumps(value)
    try:
        expected = json.loads(text)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e).partition(":")[0])):
            load_json(text)
    else:
        assert load_json(text) == expected


_CHOICE_KEYS = ("index", "delta", "finish_reason", "finishReason", "logprobs", "message", "text")
_DELTA_KEYS = ("content", "role", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call")
_SMALL = st.none() | st.text(max_size=6) | st.integers(min_value=-1, max_value=2) | st.sampled_from(["stop", "length"])
_ODD = _SMALL | st.lists(st.fixed_dictionaries({"function": st.fixed_dictionaries({"name": st.text(max_size=3)})}))
# a plain chunk's choice, then perhaps one key more (of a choice or of its delta) holding anything
_DELTAS = st.builds(
    lambda content, role, more: {**content, **role, **more},
    st.sampled_from([{}, {"content": None}, {"content": ""}]) | st.builds(lambda t: {"content": t}, st.text()),
    st.sampled_from([{}, {"role": "assistant"}]),
    st.dictionaries(st.sampled_from(_DELTA_KEYS), _ODD, max_size=1),
)
_CHOICES = st.builds(
    lambda index, delta, reason, more: {**index, "delta": delta, **reason, **more},
    st.sampled_from([{}, {"index": 0}, {"index": 1}, {"index": None}]),
    _DELTAS | _SMALL,
    st.sampled_from([{}, {"finish_reason": None}, {"finish_reason": "stop"}, {"finish_reason": "length"}]),
    st.dictionaries(st.sampled_from(_CHOICE_KEYS), _ODD | _DELTAS, max_size=1),
)


@example([{"delta": {"tool_calls": 1}}], b"")  # a server's tool_calls that is no list (was a TypeError)
@given(st.lists(_CHOICES, min_size=1, max_size=2), st.sampled_from([b"", b"\xff", "é".encode()]))
def test_a_plain_chunk_reads_as_the_openai_chat_rule_reads_it(choices: list[dict[str, object]], odd: bytes) -> None:
    """``ReplyReader._delta``'s shortcut for a text-only chunk: the same ``Delta`` as the rule's reading."""
    reader = ReplyReader(UpstreamError)
    data = {"id": "x", "object": "chat.completion.chunk", "choices": choices}
    raw = json.dumps(data, ensure_ascii=False).encode()
    if odd and b'"content": "' in raw:  # a byte inside the text: invalid UTF-8 (CF961) or a real letter
        raw = raw.replace(b'"content": "', b'"content": "' + odd, 1)
    try:
        got = reader.chunk(raw)
    except UpstreamError as e:
        with pytest.raises(UpstreamError, match=re.escape(str(e))):
            reader.chunk(raw)
        return
    parsed = load_json(raw)
    assert got == reader.rule_delta(parsed, parsed["choices"][0], raw)


def test_the_shortcut_is_taken_for_the_usual_chunks() -> None:
    reader = ReplyReader(UpstreamError)
    for delta in ({"content": "hi"}, {"role": "assistant", "content": ""}, {"content": None}, {}):
        raw = json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}]}).encode()
        assert reader.chunk(raw) == Delta(delta.get("content") or "")
    odd = b'{"choices": [{"delta": {"content": "a\xffb"}}]}'
    assert reader.chunk(odd).piece is not None and reader.chunk(odd).piece.notes[0][0] == "CF961"  # type: ignore[union-attr]
