"""The JSON envelope: decode ``{"chats": [...]}`` and find raw positions when needed.

Decoding uses the standard library (fast, C). Positions are only needed when
something is wrong, so :class:`Locator` re-scans the raw text on demand to find
where a value, a key, or a character inside a body string stands.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from functools import cached_property
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Final

Path = tuple[str | int, ...]

CHAT_KEYS: Final = ("type", "order", "body")
"""The keys every chat holds, in the order the writer puts them."""
SPEAKER: Final = "speaker"
"""The optional key naming a chat's speaker in a scene of several characters."""
BOM: Final = "\ufeff"
"""A byte order mark (Windows editors write one): not part of the JSON text; RFC 8259 lets a parser
ignore it, and the strict reader reads a space in its place (every offset stays)."""

_SCALAR: Final = r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity"
"""A JSON scalar as written (and NaN, infinities). This and ``_BRACKETS`` are compiled where used, by
``re``'s cache: only a reply that failed is scanned with them, and every start would pay for them."""
_PLAIN: Final = re.compile(r'[^"\\]*')


class NonFinite:
    """``NaN``/``Infinity`` in the input: not JSON, kept as written (``literal``) only to be reported.

    Not a ``float`` (no field of a reply takes one): a class mypyc compiles (``charfmt._twin``).
    """

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal: Final = literal

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NonFinite) and other.literal == self.literal

    def __hash__(self) -> int:
        return hash((NonFinite, self.literal))

    def __repr__(self) -> str:
        return f"NonFinite(literal={self.literal!r})"


class HugeInteger:
    """An integer literal with more digits than Python converts (``sys.get_int_max_str_digits``).

    Kept as its digits, only to be reported: no field of a reply takes such a number. (A plain
    class: a dataclass costs half a millisecond to define at every start; a tuple would pass for
    a JSON array.)
    """

    __slots__ = ("digits",)

    def __init__(self, digits: str) -> None:
        self.digits: Final = digits

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HugeInteger) and other.digits == self.digits

    def __hash__(self) -> int:
        return hash((HugeInteger, self.digits))

    def __repr__(self) -> str:
        return f"HugeInteger(digits={self.digits!r})"


class Decoded:
    """The decoded JSON value plus what the fast decode noticed.

    (A plain class: a ``NamedTuple`` compiles each field's postponed annotation at every start.)
    """

    __slots__ = ("duplicate_keys", "value")

    def __init__(self, value: Any, duplicate_keys: bool) -> None:
        self.value: Final = value
        self.duplicate_keys: Final = duplicate_keys


class JSONError(Exception):
    """The text is not JSON; ``pos`` is the raw offset where it broke."""

    def __init__(self, code: str, message: str, pos: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.pos = pos


def decode(text: str) -> Decoded:
    """Decode JSON strictly (no NaN); raises :class:`JSONError`.

    ``NaN``/``Infinity`` come back as :class:`NonFinite` and integers too long to convert
    as :class:`HugeInteger`, for the caller to report where they stand.
    """
    try:
        try:
            return _loads(text, int)
        except ValueError as e:
            if isinstance(e, json.JSONDecodeError) or "digits" not in str(e):
                raise
            # CPython refuses to convert an integer of more than 4,300 digits (a guard
            # against quadratic time). Rare: decode again, keeping such literals as text.
            return _loads(text, _integer)
    except json.JSONDecodeError as e:
        words, pos = json_error(text, e)
        raise JSONError("CF101", f"invalid JSON: {words}", pos) from None
    except RecursionError:
        at = _deepest(text)
        where = f" (level {_DEEP} opens here; a reply needs 3)" if at is not None else ""
        raise JSONError("CF110", f"JSON nested too deeply{where}", at or 0) from None


_JSON_WORDS: Final = (
    ("Expecting value", "expected a value"),
    ("Expecting property name enclosed in double quotes", "expected a key in double quotes"),
    ("Expecting ':' delimiter", "expected ':' after the key"),
    ("Expecting ',' delimiter", "expected ',' or the end of the object or array"),
    ("Unterminated string", "a string that is not closed"),
    ("Invalid control character", "a control character in a string (write it as a \\u escape)"),
    ("Invalid \\uXXXX escape", "a \\u escape without its four hex digits"),
    ("Invalid \\escape", 'an escape JSON does not have (after \\, one of " \\ / b f n r t u)'),
    ("Extra data", "more text after the JSON value"),
)
"""The standard library's JSON errors (their first words), in charfmt's words."""


def json_error(text: str, e: json.JSONDecodeError) -> tuple[str, int]:
    """Why ``text`` is not JSON, in charfmt's words, and the raw offset where it broke (``e`` from ``json``).

    The one translation of the standard library's messages: ``decode`` (``CF101``) and the
    history reader (``charfmt.prompt.character``) say the same. A trailing comma is named as such and
    pointed at (Python's wording for it differs across versions).
    """
    comma = text[: e.pos].rstrip(" \t\n\r")
    if e.pos < len(text) and text[e.pos] in "]}" and comma.endswith(","):
        return "trailing comma", len(comma) - 1
    if json_cut_off(text, e) and not e.msg.startswith("Unterminated"):
        return "the text ends inside a JSON value (cut off?)", e.pos
    words = next((ours for theirs, ours in _JSON_WORDS if e.msg.startswith(theirs)), None)
    return words or e.msg[0].lower() + e.msg[1:], e.pos


def json_cut_off(text: str, e: json.JSONDecodeError) -> bool:
    """Whether ``e`` says that ``text`` ends inside a JSON value (a string or a bracket not closed)."""
    if e.msg.startswith("Unterminated string"):
        return True  # (no closing quote up to the end: a line break in a string is another error)
    return e.pos >= len(text.rstrip(" \t\n\r")) and e.msg.startswith("Expecting")


def _loads(text: str, parse_int: Callable[[str], Any]) -> Decoded:
    dup = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal dup
        d = dict(items)
        if len(d) != len(items):
            dup = True
        return d

    value = json.loads(text, object_pairs_hook=pairs, parse_constant=NonFinite, parse_int=parse_int)
    return Decoded(value, dup)


_PAIRS_SCAN: Final = json.JSONDecoder(object_pairs_hook=tuple).scan_once  # type: ignore[attr-defined]


def decode_pairs(text: str) -> Any:
    """The JSON value of ``text`` with each object as a tuple of ``(key, value)`` pairs; ``None`` if not JSON.

    For the parser's fast path: a duplicate key stays in sight (two pairs) with no Python
    function run per object, as a hook that looks for duplicates would. No diagnostics:
    ``None`` (also what ``null`` gives) sends the caller to :func:`decode`. NaN and
    infinities come back as floats, which no field of a reply accepts.
    """
    try:
        # The decoder's C scanner, called directly: ``json.loads`` adds Python frames and
        # whitespace matches that a reply of a few hundred bytes notices.
        start = 0 if text[:1] == "{" else _skip_ws(text, 0)
        value, end = _PAIRS_SCAN(text, start)
    except (ValueError, RecursionError, StopIteration):
        return None
    if end != len(text) and _skip_ws(text, end) != len(text):
        return None
    return value


def _integer(literal: str) -> int | HugeInteger:
    if len(literal.lstrip("-")) > sys.get_int_max_str_digits() > 0:
        return HugeInteger(literal)
    return int(literal)


_BRACKETS: Final = r'[\[\]{}]|"(?:[^"\\]|\\.)*+"'
_DEEP: Final = 100
"""Nesting far deeper than any reply needs; the bracket that opens it is where CF110 points."""


def _deepest(text: str) -> int | None:
    """Raw offset of the bracket that opens nesting level ``_DEEP``, if there is one."""
    depth = 0
    for m in re.compile(_BRACKETS).finditer(text):
        ch = m.group()[0]
        if ch in "[{":
            depth += 1
            if depth >= _DEEP:
                return m.start()
        elif ch in "]}":
            depth -= 1
    return None


class _Spans:
    """The raw span of every value and of every key of a JSON text, by path. (A plain class, as ``Decoded``.)"""

    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.values: Final[dict[Path, tuple[int, int]]] = {}
        self.keys: Final[dict[Path, list[tuple[int, int]]]] = {}


class Locator:
    """Raw positions in a valid JSON text, computed on first use (error paths only)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def _spans(self) -> _Spans:
        return _scan(self.text)

    def value(self, path: Path) -> tuple[int, int]:
        """Raw ``(start, end)`` of the value at ``path`` (e.g. ``("chats", 0, "body")``)."""
        if len(path) == 1 and isinstance(path[0], str) and "_spans" not in self.__dict__:
            # A top-level member (``"chats"``, for CF112/CF113): skip the members with the C
            # decoder instead of recording every position of a large reply in Python.
            span = _top_level(self.text, path[0])
            if span is not None:
                return span
        while path not in self._spans.values and path:
            path = path[:-1]
        return self._spans.values.get(path, (0, len(self.text)))

    def keys(self, path: Path) -> list[tuple[int, int]]:
        """Raw spans of every occurrence of the key ending ``path`` (duplicates included)."""
        return self._spans.keys.get(path, [])

    def repeated_keys(self) -> list[tuple[Path, list[tuple[int, int]]]]:
        """Each key written more than once in its object: its path and the raw spans of every occurrence."""
        return [(path, spans) for path, spans in self._spans.keys.items() if len(spans) > 1]

    def string_offset(self, path: Path, index: int) -> int:
        """Raw offset of decoded character ``index`` of the string value at ``path``.

        A JSON escape stands for one character but takes 2 (``\\n``), 6 (``\\u3042``)
        or 12 (a surrogate pair) raw characters; this walks them.
        """
        return self.string_offsets(path, [index])[0]

    def string_offsets(self, path: Path, indices: Sequence[int]) -> list[int]:
        """Raw offsets of several decoded characters of one string, in a single walk.

        ``indices`` ascend; an index past the end of the string maps to its closing quote.
        The walk never goes back, so *k* offsets in a string of *n* raw characters cost
        O(n + k), however many there are.
        """
        text, n = self.text, len(self.text)
        pos = self.value(path)[0] + 1  # past the opening quote
        consumed = 0  # decoded characters before ``pos``
        run_end = -1  # end of the run of plain characters ``pos`` stands in (once known)
        out: list[int] = []
        for index in indices:
            while True:
                if run_end < pos:
                    plain = _PLAIN.match(text, pos)
                    run_end = plain.end() if plain else pos
                left = index - consumed
                if left <= run_end - pos:
                    pos += max(left, 0)
                    consumed += max(left, 0)
                    out.append(pos)
                    break
                consumed += run_end - pos
                pos = run_end
                if pos >= n or text[pos] != "\\":
                    out.append(pos)  # index past the end of the string: its closing quote
                    break
                pos += _escape_length(text, pos)
                consumed += 1
        return out


def _escape_length(text: str, pos: int) -> int:
    """Raw length of the JSON escape at ``pos``: 12 for a surrogate pair, 6 for ``\\uXXXX``, else 2."""
    if text[pos + 1] != "u":
        return 2
    high = int(text[pos + 2 : pos + 6], 16)
    pair = 0xD800 <= high < 0xDC00 and text.startswith("\\u", pos + 6)
    return 12 if pair and 0xDC00 <= int(text[pos + 8 : pos + 12], 16) < 0xE000 else 6


_SKIPPER: Final = json.JSONDecoder(parse_constant=NonFinite, parse_int=lambda literal: None)
"""Decodes values only to learn where they end (integers are not even converted)."""


def _top_level(text: str, key: str) -> tuple[int, int] | None:
    """Raw span of the value of top-level ``key`` (the last one, as decoding keeps), if any."""
    found = None
    try:
        pos = _skip_ws(text, 0)
        if not text.startswith("{", pos):
            return None
        pos = _skip_ws(text, pos + 1)
        while text.startswith('"', pos):
            name, pos = scanstring(text, pos + 1)
            pos = _skip_ws(text, pos)
            if not text.startswith(":", pos):
                return None
            start = _skip_ws(text, pos + 1)
            _value, end = _SKIPPER.raw_decode(text, start)
            if name == key:
                found = (start, end)
            pos = _skip_ws(text, end)
            if not text.startswith(",", pos):
                break
            pos = _skip_ws(text, pos + 1)
    except (ValueError, RecursionError):
        return None  # not the valid JSON this is used on: the full scan decides
    return found


_WS: Final = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos


def _scan(text: str) -> _Spans:
    """Record the raw span of every value and key of a valid JSON text, iteratively."""
    spans = _Spans()
    scalar = re.compile(_SCALAR).match
    # Stack of [container path, kind, next index or pending key, start offset].
    stack: list[list[Any]] = []
    path: Path = ()
    pos = _skip_ws(text, 0)
    n = len(text)
    while pos < n:
        ch = text[pos]
        if ch in "{[":
            stack.append([path, ch, 0, pos])
            pos = _skip_ws(text, pos + 1)
            if pos < n and text[pos] in "}]":
                continue
            if ch == "[":
                path = (*stack[-1][0], 0)
            continue
        if ch in "}]":
            owner, _kind, _i, start = stack.pop()
            spans.values[owner] = (start, pos + 1)
            pos += 1
        elif ch == '"':
            s, end = scanstring(text, pos + 1)
            after = _skip_ws(text, end)
            if stack and stack[-1][1] == "{" and after < n and text[after] == ":":
                path = (*stack[-1][0], s)
                spans.keys.setdefault(path, []).append((pos, end))
                pos = _skip_ws(text, after + 1)
                continue
            spans.values[path] = (pos, end)
            pos = end
        else:
            m = scalar(text, pos)
            end = m.end() if m else pos + 1
            spans.values[path] = (pos, end)
            pos = end
        # after a value: a comma moves to the next member, or the container closes
        pos = _skip_ws(text, pos)
        if not stack:
            break
        if pos < n and text[pos] == ",":
            top = stack[-1]
            if top[1] == "[":
                top[2] += 1
                path = (*top[0], top[2])
            pos = _skip_ws(text, pos + 1)
        else:
            path = stack[-1][0]
    return spans
