"""Hostile JSON (issue 12): strict raises only ParseError; lenient and stream never raise.

Each hostility is generated with hypothesis and put in every place of the envelope a
reply has (the top level, ``chats``, each chat's ``type``/``order``/``body``, unknown
keys), as text and as UTF-8 bytes:

unhashable values where strings go, integers longer than CPython converts (4,300 digits),
``NaN``/``Infinity``, deep nesting, duplicate keys, lone surrogates (escaped and raw),
floats that overflow, keys that are not strings, and bytes that are not UTF-8.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charfmt
from charfmt.diagnostics import CODES

VALID_BODY = '"<emo>joy</emo>\\n<msg>hi</msg>"'
"""A valid C body, as JSON text."""


def _huge_integers() -> st.SearchStrategy[str]:
    digits = st.integers(min_value=4_301, max_value=6_000)
    return st.builds(
        lambda sign, n, d: sign + d + "7" * (n - 1), st.sampled_from(["", "-"]), digits, st.sampled_from("123456789")
    )


def _deep() -> st.SearchStrategy[str]:
    depth = st.integers(min_value=50, max_value=5_000)
    opener = st.sampled_from(["[", '{"a":'])
    closed = st.booleans()

    def build(n: int, o: str, c: bool) -> str:
        return o * n + ("1" + ("]" if o == "[" else "}") * n if c else "")

    return st.builds(build, depth, opener, closed)


HOSTILE: dict[str, st.SearchStrategy[str]] = {
    "unhashable": st.sampled_from(['{"a":1}', "[1]", "[]", "{}", '[{"type":"C"}]', '{"C":"C"}']),
    "huge-integer": _huge_integers(),
    "non-finite": st.sampled_from(["NaN", "Infinity", "-Infinity", "-NaN", "[NaN]", '{"a":Infinity}']),
    "deep-nesting": _deep(),
    "lone-surrogate": st.sampled_from(
        ['"\\ud800"', '"\\udfff"', '"x\\udc80y"', '"\\ud83d"', '"<msg>\\ud800</msg>"', '"\ud800"']
    ),
    "big-float": st.sampled_from(
        [
            "1e400",
            "-1e400",
            "1" + "0" * 400 + ".5",
            "1.7976931348623157e309",
            "4.9e-325",
            "1E999999999999",
            "0.1e-99999",
        ]
    ),
    "key-ish": st.sampled_from(["{1:2}", "{null:1}", "{type:1}", '{"a" 1}', "{'a':1}", '{"":1}', '{"\\u0000":1}']),
    "plain": st.sampled_from(['"C"', '"I"', "1", "2", "0", "-1", "true", "null", '""', VALID_BODY, "1.0"]),
}


@st.composite
def _documents(draw: st.DrawFn, kind: str) -> str:
    """A reply envelope with the hostility ``kind`` in one or more of its places."""
    hostile = HOSTILE[kind]
    fine = {"type": st.just('"C"'), "order": st.just("1"), "body": st.just(VALID_BODY)}
    chats = []
    for order in range(1, draw(st.integers(min_value=0, max_value=3)) + 1):
        members = []
        for key, good in fine.items():
            value = st.just(str(order)) if key == "order" else good
            if draw(st.integers(0, 3)) != 0:  # hostile in three places out of four
                value = hostile
            if draw(st.integers(0, 9)) != 0:  # sometimes the key is missing
                members.append(f'"{key}":{draw(value)}')
        if draw(st.integers(0, 4)) == 0:  # an extra key, perhaps a duplicate of a real one
            extra = draw(st.sampled_from(['"type"', '"order"', '"body"', '"mood"', '"\\ud800"']))
            members.insert(draw(st.integers(0, len(members))), f"{extra}:{draw(hostile)}")
        draw(st.randoms(use_true_random=False)).shuffle(members)
        chats.append("{" + ",".join(members) + "}")
    if draw(st.integers(0, 5)) == 0:
        chats.insert(0, draw(hostile))  # a chat that is not an object
    top = ['"chats":[' + ",".join(chats) + "]"]
    if draw(st.integers(0, 4)) == 0:
        top.append(f'"chats":{draw(hostile)}')  # a duplicate "chats"
    if draw(st.integers(0, 4)) == 0:
        top.append(f'"meta":{draw(hostile)}')
    doc = "{" + ",".join(top) + "}"
    if draw(st.integers(0, 9)) == 0:
        doc = draw(hostile)  # the top level itself
    return doc


@st.composite
def _inputs(draw: st.DrawFn, kind: str) -> str | bytes:
    """The document as text or bytes; bytes may carry invalid UTF-8 (``bad-utf8``)."""
    if kind == "bad-utf8":
        doc = draw(_documents("plain"))
        data = doc.encode("utf-8")
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xe3\x81", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80"]))
        return data[:at] + junk + data[at:]
    doc = draw(_documents(kind))
    if draw(st.booleans()):
        return doc.encode("utf-8", errors="surrogatepass")  # a raw lone surrogate becomes invalid UTF-8
    return doc


KINDS = [*HOSTILE, "bad-utf8"]
MODES = ["strict", "lenient", "stream"]


def _params() -> list[object]:
    out: list[object] = []
    for mode in MODES:
        for kind in KINDS:
            out.append(pytest.param(mode, kind, id=f"{mode}-{kind}"))
    return out


def _check_diagnostics(diagnostics: list[charfmt.Diagnostic], data: str | bytes) -> None:
    size = len(data)
    for d in diagnostics:
        assert d.code in CODES, d
        assert d.code != "CF999", f"internal error: {d.message}"
        assert 0 <= d.offset <= d.end <= size, d


def _run(mode: str, data: str | bytes) -> None:
    if mode == "strict":
        try:
            reply = charfmt.parse(data)
        except charfmt.ParseError as e:
            assert e.diagnostics
            _check_diagnostics(e.diagnostics, data)
            str(e)  # the message renders
            return
        _check_diagnostics(reply.diagnostics, data)
        return
    if mode == "lenient":
        reply = charfmt.parse(data, lenient=True)
    else:
        parser = charfmt.StreamParser()
        parser.feed(data)
        parser.close()
        reply = parser.reply
    _check_diagnostics(reply.diagnostics, data)
    json.dumps(reply.model_dump(mode="json"))  # the result is plain data
    charfmt.dumps(reply)


@pytest.mark.parametrize(("mode", "kind"), _params())
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_json_gives_diagnostics_not_exceptions(mode: str, kind: str, data: st.DataObject) -> None:
    _run(mode, data.draw(_inputs(kind), label="input"))


# Named inputs from the issue: each one through every entry point.
NAMED = {
    "type-object": '{"chats":[{"type":{"a":1},"order":1,"body":"x"}]}',
    "type-array": '{"chats":[{"type":["C"],"order":1,"body":"x"}]}',
    "huge-order": '{"chats":[{"type":"C","order":' + "9" * 5_000 + ',"body":"<msg>x</msg>"}]}',
    "huge-unknown": '{"chats":[],"n":-' + "1" * 4_301 + "}",
    "nan-order": '{"chats":[{"type":"C","order":NaN,"body":"<msg>x</msg>"}]}',
    "deep": '{"chats":' + "[" * 100_000,
    "deep-field": '{"chats":[{"mood":' + "[" * 1_500 + ',"type":"C","order":1,"body":"<msg>x</msg>"}]}',
}
_NAMED_STRICT = {
    "type-object": "CF107",
    "type-array": "CF107",
    "huge-order": "CF108",
    "huge-unknown": "CF105",
    "nan-order": "CF108",
    "deep": "CF110",
    "deep-field": "CF110",
}


@pytest.mark.parametrize("name", list(NAMED))
def test_named_hostile_inputs_are_positioned_errors_in_strict_mode(name: str) -> None:
    text = NAMED[name]
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(text)
    first = info.value.first
    assert first.code == _NAMED_STRICT[name]
    assert 0 < first.offset < len(text)


def test_a_huge_order_is_named_by_its_digits() -> None:
    with pytest.raises(charfmt.ParseError, match="order is a number of 5,000 digits"):
        charfmt.parse(NAMED["huge-order"])


def test_deep_nesting_points_where_it_gets_deep() -> None:
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(NAMED["deep"])
    assert info.value.first.offset == len('{"chats":') + 98  # the bracket opening level 100


def _named_params() -> list[object]:
    out: list[object] = []
    for mode in ("lenient", "stream"):
        for name in NAMED:
            out.append(pytest.param(mode, name, id=f"{mode}-{name}"))
    return out


@pytest.mark.parametrize(("mode", "name"), _named_params())
def test_named_hostile_inputs_never_raise(mode: str, name: str) -> None:
    _run(mode, NAMED[name])


# Numeric references longer than CPython converts (4,300 digits): the grammar allows any number of
# leading zeros, so the first is valid text ("A"); the others name no character (CF207 / kept, CF707).
LONG_REFERENCES = {
    "zeros-then-a": ("&#" + "0" * 5_000 + "65;", "aAb"),
    "zeros-then-a-hex": ("&#x" + "0" * 5_000 + "41;", "aAb"),
    "huge-decimal": ("&#" + "9" * 5_000 + ";", None),
    "only-zeros": ("&#" + "0" * 5_000 + ";", None),
    "eight-digits": ("&#11111111;", None),
}


@pytest.mark.parametrize("name", list(LONG_REFERENCES))
def test_a_numeric_reference_of_thousands_of_digits_is_read_not_thrown(name: str) -> None:
    """Found by the strict fast path's work (issue 41): ``&#000…065;`` raised int()'s ValueError from every reader."""
    entity, text = LONG_REFERENCES[name]
    reply_text = json.dumps({"chats": [{"type": "C", "order": 1, "body": f"<msg>a{entity}b</msg>"}]})
    lenient = charfmt.parse(reply_text, lenient=True)
    streamed = charfmt.collect(charfmt.iter_events([reply_text[:40], reply_text[40:]]))
    if text is not None:
        assert [s.text for s in charfmt.parse(reply_text).chats[0].segments] == [text]
        assert lenient == streamed == charfmt.parse(reply_text)
        return
    with pytest.raises(charfmt.ParseError) as info:
        charfmt.parse(reply_text)
    assert info.value.first.code == "CF207"
    assert [d.code for d in lenient.diagnostics] == [d.code for d in streamed.diagnostics] == ["CF707"]
    assert lenient.chats[0].segments[0].text == f"a{entity}b"  # kept as written
