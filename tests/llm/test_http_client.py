"""The bounded readers of ``charfmt.llm._replies``: lines over any chunking, JSON with a depth limit."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from charfmt.llm._replies import (
    Budget,
    Delta,
    EventStream,
    JSONDepthError,
    LineSplitter,
    ReplyReader,
    UpstreamError,
    lines,
    load_json,
    plain_chunk,
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


def _set(path: str, value: object) -> Callable[[dict[str, Any]], bytes]:
    """A change to a plain chunk: ``path`` (``choices.0.delta``) set to ``value`` (``...``: removed)."""

    def change(data: dict[str, Any]) -> bytes:
        *inner, last = path.split(".")
        node: Any = data
        for step in inner:
            node = node[int(step)] if isinstance(node, list) else node[step]
        if value is ...:
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return json.dumps(data, ensure_ascii=False).encode()

    return change


_NEAR_PLAIN: list[Callable[[dict[str, Any]], bytes]] = [
    lambda data: json.dumps(data).encode(),  # as it is: plain
    lambda data: json.dumps(data, ensure_ascii=False).encode(),
    lambda data: b"\xef\xbb\xbf" + json.dumps(data).encode(),  # a BOM
    lambda data: json.dumps(data).encode().replace(b'"content": "', b'"content": "\xff', 1),  # bad UTF-8
    lambda data: json.dumps(data).encode()[:-1],  # cut
    lambda data: json.dumps([data] * 1).encode(),  # not an object
    lambda data: json.dumps(data).encode()[:-1] + b', "x": ' + b"[" * 64 + b"]" * 64 + b"}",  # deep
    _set("error", {"message": "overloaded"}),
    _set("choices", []),
    _set("choices", "x"),
    _set("choices.0", 5),
    _set("choices.0.finish_reason", "stop"),
    _set("choices.0.finish_reason", "length"),
    _set("choices.0.index", 1),
    _set("choices.0.index", ...),
    _set("choices.0.delta", ...),
    _set("choices.0.delta", None),
    _set("choices.0.delta", "text"),
    _set("choices.0.delta.content", None),
    _set("choices.0.delta.content", 5),
    _set("choices.0.delta.content", ["a"]),
    _set("choices.0.delta.role", "assistant"),
    _set("choices.0.delta.reasoning_content", "hmm"),
    _set("choices.0.delta.refusal", "no"),
    _set("choices.0.delta.tool_calls", [{"function": {"name": "f"}}]),
    _set("choices.0.logprobs", None),
    _set("choices.0.message", {"content": "m"}),
    _set("choices.0.text", "t"),
    lambda data: json.dumps({**data, "choices": [*data["choices"], {"delta": {"content": "2"}}]}).encode(),
]


@given(st.text(max_size=6), st.sampled_from(_NEAR_PLAIN))
def test_a_chunk_read_in_one_pass_reads_as_the_general_reading(text: str, change: Any) -> None:
    """``plain_chunk`` (``ReplyReader.chunk``'s one pass) on a plain chunk and on each change of one of its
    fields: where it reads a text, the general reading gives that text and nothing else."""
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    data = {"id": "x", "object": "chat.completion.chunk", "choices": [choice]}
    raw = change(data)
    fast = plain_chunk(raw)
    if change is _NEAR_PLAIN[0]:
        assert fast == text  # the plain chunk itself is read in one pass (the comparison below is no empty one)
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr("charfmt.llm._replies.plain_chunk", lambda event: None)
            general: object = ReplyReader(UpstreamError).chunk(raw)
    except UpstreamError as e:
        general = e
    if fast is not None:
        assert general == Delta(fast)


def test_the_shortcut_is_taken_for_the_usual_chunks() -> None:
    reader = ReplyReader(UpstreamError)
    for delta in ({"content": "hi"}, {"role": "assistant", "content": ""}, {"content": None}, {}):
        raw = json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}]}).encode()
        assert reader.chunk(raw) == Delta(delta.get("content") or "")
        assert plain_chunk(raw) == (delta.get("content") or "")  # read in one pass
    for odd in (b'{"choices": []}', b'{"error": "x"}', b'{"choices": [{"delta": {"content": 5}}]}', b"[" * 70):
        assert plain_chunk(odd) is None  # the general reading says what it is
    odd = b'{"choices": [{"delta": {"content": "a\xffb"}}]}'
    assert reader.chunk(odd).piece is not None and reader.chunk(odd).piece.notes[0][0] == "CF961"  # type: ignore[union-attr]


# --- an event stream: whole packets of ``data:`` events read as the bytes one by one are -------------

_EVENT_PARTS = st.sampled_from(
    [
        b'data: {"choices": [{"index": 0, "delta": {"content": "ab"}, "finish_reason": null}]}\n\n',
        b'data:{"choices": [{"delta": {"content": "c\\nd"}}]}\n\n',  # no space after the colon
        b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n',
        b'data: {"choices": [{"delta": {"content": "x"}}]}\r\n\r\n',  # CRLF: the line splitter's
        b'data: {"choices": [{"delta": {"content": "e"}}]}\n',  # half an event: its blank line later
        b"\n",
        b": ping\n\n",  # a keep-alive comment
        b'data: {"choices": [\ndata: {"delta": {"content": "m"}}]}\n\n',  # data over two lines
        b'data: {"choices": [\rdata: {"delta": {"content": "r"}}]}\n\n',  # two lines, the first ended by CR
        b"\r",
        b'data: {"error": {"message": "overloaded"}}\n\n',
        b"data: {not json\n\n",
        b"data: \n\n",
        b"event: x\nid: 1\n\n",
        b"data: [DONE]\n\n",
        b'data: {"choices": []}\n\n',  # a usage chunk
        b'data: {"choices": [{"delta": {"content": "y\\ud83d"}}]}\n\n',  # half an emoji ends the text
        b'data: {"choices": [{"delta": {"content": "\\ude00z"}}]}\n\n',  # its other half
        b"oops\n\n",
    ]
)


def _read_stream(chunks: list[bytes], lines_budget: int, tokens: int) -> list[object]:
    """What an ``EventStream`` fed ``chunks`` gives: each delta, then ``done``, or the error it ended with."""
    reader = ReplyReader(UpstreamError)
    stream = EventStream(reader, "text/event-stream", Budget(tokens=tokens, chars=1000, lines=lines_budget))
    out: list[object] = []
    try:
        for chunk in chunks:
            out.extend(stream.feed(chunk))
            if stream.done:
                return [*out, "done"]
        out.extend(stream.end())
    except UpstreamError as e:
        out.append(f"error: {e}")
    return out


@given(
    st.lists(_EVENT_PARTS, max_size=10),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=6),
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=1, max_value=6),
)
def test_packets_read_as_the_same_bytes_one_at_a_time(
    parts: list[bytes], cuts: list[int], lines_budget: int, tokens: int
) -> None:
    """``EventStream.feed``'s shortcut for packets of whole ``data:`` events: the same deltas, the same
    end (``[DONE]``) and the same error at the same place (a bad event, a budget passed) as the
    general path, which a stream fed a byte at a time always takes."""
    data = b"".join(parts)
    points = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    packets = [data[a:b] for a, b in itertools.pairwise(points)]  # as a server's writes may arrive
    by_byte = [data[i : i + 1] for i in range(len(data))]
    assert _read_stream(packets, lines_budget, tokens) == _read_stream(by_byte, lines_budget, tokens)
    assert _read_stream(parts, lines_budget, tokens) == _read_stream(by_byte, lines_budget, tokens)


def test_the_packet_shortcut_is_taken_for_whole_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above compares two paths: a packet of whole ``data:`` events never reaches the line splitter."""
    event = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
    split: list[bytes] = []
    real = LineSplitter.feed

    def spy(self: LineSplitter, chunk: bytes) -> list[bytes]:
        split.append(chunk)
        return real(self, chunk)

    monkeypatch.setattr(LineSplitter, "feed", spy)
    assert _read_stream([event * 2, event], 100, 10) == [*[Delta("hi")] * 3, CUT_SHORT]
    assert split == []
    assert _read_stream([event[:9], event[9:]], 100, 10) == [Delta("hi"), CUT_SHORT]
    assert split == [event[:9], event[9:]]


CUT_SHORT = "error: the stream ended before the reply did (no finish_reason, no [DONE]): the connection closed early"
"""What ``_read_stream`` gives for a stream that ends with neither ``[DONE]`` nor a finish reason."""


@pytest.mark.parametrize(
    ("ending", "expected"),
    [
        (b"data: [DONE]\n\n", ["done"]),
        (b"data: [DONE]", []),  # [DONE] without its blank line: read at the end
        (b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n', [Delta("", "stop")]),
        (b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}', [Delta("", "stop")]),  # no blank line
        (b"", [CUT_SHORT]),  # the body simply ends: cut short
        (b": ping\n\n", [CUT_SHORT]),
        (b'data: {"choices": [{"delta": {"content": "!"}}]}', [Delta("!"), CUT_SHORT]),
    ],
)
def test_a_stream_that_ends_without_finishing_was_cut_short(ending: bytes, expected: list[object]) -> None:
    """A reply ends with ``[DONE]`` or a finish reason; a body that just stops after some text (a connection
    closed, a chunked end) is an error, never a short reply taken as whole."""
    event = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
    assert _read_stream([event, ending], 100, 10) == [Delta("hi"), *expected]


def _halves(*texts: str, end: bytes = b"data: [DONE]\n\n") -> list[bytes]:
    """Events whose content is each of ``texts``, escaped as JSON does (ASCII: a surrogate as ``\\udXXX``)."""
    events = [b'data: {"choices": [{"delta": {"content": %s}}]}\n\n' % json.dumps(t).encode() for t in texts]
    return [*events, b'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n', end]


@pytest.mark.parametrize("packets", [False, True], ids=["events one by one", "one packet"])
def test_a_surrogate_pair_split_across_two_events_is_one_character(packets: bool) -> None:
    """An emoji sent as ``"\\ud83d"`` then ``"\\ude00"`` (each half no character): the deltas make it whole."""
    events = _halves("hi \ud83d", "\ude00 there", "\ud83d", "\ude00")
    chunks = [b"".join(events)] if packets else events
    out = _read_stream(chunks, 100, 10)
    assert "".join(d.text for d in out if isinstance(d, Delta)) == "hi \U0001f600 there\U0001f600"
    assert out[-1] == "done"


@pytest.mark.parametrize("end", [b"data: [DONE]\n\n", b"data: [DONE]", b""])
def test_a_half_never_completed_comes_alone_at_the_end(end: bytes) -> None:
    """A high half that ends the text, or one followed by no low half: sent on as it came (the reader of the
    text says it: ``CF714``), never dropped, never joined with what is no pair."""
    out = _read_stream(_halves("a\ud83d", "b\ud83d", end=end), 100, 10)
    assert "".join(d.text for d in out if isinstance(d, Delta)) == "a\ud83db\ud83d"
