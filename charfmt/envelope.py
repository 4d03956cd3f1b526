"""The JSON envelope: decode ``{"chats": [...]}`` and find raw positions when needed.

Decoding uses the standard library (fast, C). Positions are only needed when
something is wrong, so :class:`Locator` re-scans the raw text on demand to find
where a value, a key, or a character inside a body string stands.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Final

Path = tuple[str | int, ...]

_SCALAR: Final = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity")
_PLAIN: Final = re.compile(r'[^"\\]*')


class NonFinite(float):
    """``NaN``/``Infinity`` in the input: not JSON, kept only to be reported."""


@dataclass(slots=True)
class Decoded:
    """The decoded JSON value plus what the fast decode noticed."""

    value: Any
    duplicate_keys: bool


class JSONError(Exception):
    """The text is not JSON; ``pos`` is the raw offset where it broke."""

    def __init__(self, code: str, message: str, pos: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.pos = pos


def decode(text: str) -> Decoded:
    """Decode JSON strictly (no NaN); raises :class:`JSONError`."""
    dup = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal dup
        d = dict(items)
        if len(d) != len(items):
            dup = True
        return d

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=NonFinite)
    except json.JSONDecodeError as e:
        comma = text[: e.pos].rstrip(" \t\n\r")
        if e.pos < len(text) and text[e.pos] in "]}" and comma.endswith(","):
            # Python's wording differs across versions ("Expecting value" / "Illegal
            # trailing comma"); say it plainly and point at the comma itself.
            raise JSONError("CF101", "invalid JSON: trailing comma", len(comma) - 1) from None
        message = e.msg[0].lower() + e.msg[1:]
        raise JSONError("CF101", f"invalid JSON: {message}", e.pos) from None
    except RecursionError:
        raise JSONError("CF110", "JSON nested too deeply", 0) from None
    return Decoded(value, dup)


@dataclass(slots=True)
class _Spans:
    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, list[tuple[int, int]]] = field(default_factory=dict)


class Locator:
    """Raw positions in a valid JSON text, computed on first use (error paths only)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def _spans(self) -> _Spans:
        return _scan(self.text)

    def value(self, path: Path) -> tuple[int, int]:
        """Raw ``(start, end)`` of the value at ``path`` (e.g. ``("chats", 0, "body")``)."""
        while path not in self._spans.values and path:
            path = path[:-1]
        return self._spans.values.get(path, (0, len(self.text)))

    def keys(self, path: Path) -> list[tuple[int, int]]:
        """Raw spans of every occurrence of the key ending ``path`` (duplicates included)."""
        return self._spans.keys.get(path, [])

    def string_offset(self, path: Path, index: int) -> int:
        """Raw offset of decoded character ``index`` of the string value at ``path``.

        A JSON escape stands for one character but takes 2 (``\\n``), 6 (``\\u3042``)
        or 12 (a surrogate pair) raw characters; this walks them.
        """
        text = self.text
        pos = self.value(path)[0] + 1  # past the opening quote
        left = index
        while True:
            plain = _PLAIN.match(text, pos)
            run = (plain.end() if plain else pos) - pos
            if left <= run:
                return pos + left
            pos += run
            left -= run
            if pos >= len(text) or text[pos] != "\\":
                return pos  # index past the end of the string: its closing quote
            if text[pos + 1] == "u":
                high = int(text[pos + 2 : pos + 6], 16)
                pair = 0xD800 <= high < 0xDC00 and text.startswith("\\u", pos + 6)
                if pair and 0xDC00 <= int(text[pos + 8 : pos + 12], 16) < 0xE000:
                    pos += 12
                else:
                    pos += 6
            else:
                pos += 2
            left -= 1
            if left < 0:
                return pos


_WS: Final = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos


def _scan(text: str) -> _Spans:
    """Record the raw span of every value and key of a valid JSON text, iteratively."""
    spans = _Spans()
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
            m = _SCALAR.match(text, pos)
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
