"""A conversation document's JSON text: decoding it with positions and limits, and writing it.

Every diagnostic and error about a document is built by its ``Source`` and points into the raw
text (line, column, offset); ``need`` and ``member`` are the checks the readers make of it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from charfmt._strict.envelope import HugeInteger, JSONError, Locator, NonFinite, Path, decode
from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.tags import TagTable

DOCUMENT_DEPTH: Final = 256
"""The deepest nesting a conversation document may have (charfmt's own need fewer than 20 levels)."""
INDENT_LIMIT: Final = 1 << 20
"""``dumps`` indents a document up to this many characters; a bigger one is written compact."""


class InteropError(ParseError):
    """A document is not what its format says, or charfmt's payload in it is unreadable.

    ``diagnostics`` point into the document's raw text (line, column, offset).
    """


@dataclass
class Source:
    """The raw document text, for positions; every diagnostic and error is built here."""

    text: str
    _locator: Locator | None = None

    def span(self, path: Path) -> tuple[int, int]:
        """Raw ``(start, end)`` of the value at ``path``."""
        if self._locator is None:
            self._locator = Locator(self.text)
        return self._locator.value(path)

    def diagnostic(self, code: str, message: str, path: Path, *, chat: int | None = None) -> Diagnostic:
        """A diagnostic pointing at the value at ``path``."""
        start, end = self.span(path)
        return Diagnostic.at(self.text, code, message, start, end, chat=chat)

    def fail(self, code: str, message: str, path: Path) -> InteropError:
        """The error for a document that cannot be read, pointing at ``path``."""
        return InteropError([self.diagnostic(code, message, path)], self.text)


def where(path: Path) -> str:
    """A JSON path as messages write it: ``messages[2].role``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "the document"


def need(source: Source, value: Any, path: Path, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is a ``kind``, else CF901 naming the path and what was expected."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise source.fail("CF901", f"{where(path)}: expected {what}", path)
    return value


def member(
    source: Source, obj: dict[str, Any], path: Path, key: str, *, kind: type | tuple[type, ...], what: str
) -> Any:
    """The required member ``key`` of ``obj``, of ``kind``; CF901 if missing or of another type."""
    if key not in obj:
        raise source.fail("CF901", f"{where(path)}: missing required key {key!r} ({what})", path)
    return need(source, obj[key], (*path, key), kind, what)


def one_of(source: Source, value: str, allowed: Iterable[str], path: Path) -> str:
    """``value`` if it is one of ``allowed``, else CF901 listing them."""
    if value not in allowed:
        raise source.fail("CF901", f"{where(path)}: expected one of {', '.join(allowed)}, found {value!r}", path)
    return value


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one (an extension point that is absent or odd)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is an array, else an empty one."""
    return value if isinstance(value, list) else []


def check_arguments(**arguments: Any) -> None:
    """A clear ``TypeError`` for an argument of ``export`` or ``read`` of another type than it takes."""
    from charfmt.prompt.character import Character  # noqa: PLC0415 (a higher module: only to check)

    kinds: dict[str, tuple[type | tuple[type, ...], str]] = {
        "character": ((Character, type(None)), "a charfmt.Character or None"),
        "tags": (TagTable, "a charfmt.TagTable"),
        "created_at": ((str, type(None)), "a str (an ISO 8601 time) or None"),
    }
    for name, value in arguments.items():
        kind, what = kinds[name]
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be {what}, not {type(value).__name__}")


# --- decoding -----------------------------------------------------------------------------------

_TOO_DEEP: Final = (
    f"JSON nested too deeply: more than {DOCUMENT_DEPTH} levels (level {DOCUMENT_DEPTH + 1} opens here);"
    " a conversation document needs far fewer"
)
_BRACKET: Final = re.compile(r'[\[\]{}]|"(?:[^"\\]|\\.)*+"')


def _level_at(text: str, level: int) -> int:
    depth = 0
    for m in _BRACKET.finditer(text):
        ch = m.group()[0]
        if ch in "[{":
            depth += 1
            if depth > level:
                return m.start()
        elif ch in "]}":
            depth -= 1
    return 0


def as_text(data: Any) -> str:
    """A document given as ``str`` or ``bytes`` (UTF-8, or UTF-16/32 with a BOM) as text."""
    if isinstance(data, str):
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        encoding = "utf-8"
        if raw.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
            encoding = "utf-32"
        elif raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            encoding = "utf-16"
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as e:
            good = raw[: e.start].decode(encoding, "replace")
            diag = Diagnostic.at(good + "\ufffd", "CF901", f"the document is not valid {encoding.upper()}", len(good))
            raise InteropError([diag], good + "\ufffd") from None
    raise TypeError(f"a document is str, bytes or an already decoded dict/list, not {type(data).__name__}")


def read_json(data: Any) -> tuple[Any, Source]:
    """Decode a document (text, bytes, or a decoded dict/list); bad JSON is an ``InteropError`` where it broke.

    A decoded value is written out again for positions. ``NaN``, ``Infinity``, numbers too
    big for a float and nesting deeper than ``DOCUMENT_DEPTH`` are errors (CF909, CF110).
    """
    if isinstance(data, (dict, list)):
        problem = not_json(data)
        if problem is not None:
            raise CharfmtError(f"the document's {where(problem[0])}: {problem[1]}")
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    else:
        text = as_text(data)
    source = Source(text.removeprefix("\ufeff"))
    try:
        decoded = decode(source.text)
    except JSONError as e:
        if e.code == "CF110":
            at = _level_at(source.text, DOCUMENT_DEPTH)
            message = _TOO_DEEP
            raise InteropError([Diagnostic.at(source.text, "CF110", message, at)], source.text) from None
        raise InteropError([Diagnostic.at(source.text, e.code, e.message, e.pos)], source.text) from None
    _check_values(decoded.value, source)
    return decoded.value, source


def _check_values(value: Any, source: Source) -> None:
    """CF909 at the first number JSON cannot carry; CF110 past ``DOCUMENT_DEPTH`` levels."""
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            children: Iterable[tuple[Any, Any]] = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            bad = None
            if isinstance(item, NonFinite) or (isinstance(item, float) and not math.isfinite(item)):
                bad = f"{where(path)}: {source.text[slice(*source.span(path))]} is not a finite number"
            elif isinstance(item, HugeInteger):
                bad = f"{where(path)}: an integer of {len(item.digits)} digits"
            if bad is not None:
                raise source.fail("CF909", f"{bad}; a conversation document holds none", path)
            continue
        if len(path) >= DOCUMENT_DEPTH:
            raise source.fail("CF110", _TOO_DEEP, path)
        stack.extend((child, (*path, key)) for key, child in children)


_JSON_TYPES: Final = (str, int, float, bool, type(None))


def not_json(value: Any, depth: int = DOCUMENT_DEPTH) -> tuple[Path, str] | None:
    """Where a Python value stops being JSON a document can hold, and why; ``None`` if it is such JSON.

    Objects with string keys, arrays (lists or tuples), strings, finite numbers, booleans and
    null, nested at most ``depth`` levels: what ``json.dumps(..., allow_nan=False)`` writes and
    ``read`` reads back.
    """
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            bad = next((k for k in item if not isinstance(k, str)), _NONE)
            if bad is not _NONE:
                return path, f"a key that is not a string ({type(bad).__name__} {bad!r:.40}): JSON keys are strings"
            children: Iterable[tuple[Any, Any]] = item.items()
        elif isinstance(item, (list, tuple)):
            children = enumerate(item)
        elif not isinstance(item, _JSON_TYPES):
            return path, f"a {type(item).__name__}, which JSON cannot hold"
        else:
            if isinstance(item, float) and not math.isfinite(item):
                return path, f"{item!r} is not a finite number; JSON holds none"
            continue
        if len(path) >= depth:
            return path, f"nested more than {depth} levels deep"
        stack.extend(reversed([(child, (*path, key)) for key, child in children]))
    return None


_NONE: Final = object()


# --- writing ------------------------------------------------------------------------------------


def a_kind(kind: object) -> str:
    """``kind`` (as written, whatever a document put there) after its indefinite article: ``an image``, ``a text``."""
    word = f"{kind}"
    return f"{'an' if word[:1].lower() in ('a', 'e', 'i', 'o', 'u') else 'a'} {word}"


def dumps_document(doc: Any, *, indent: int | Literal["auto"] | None = "auto") -> str:
    """A document as JSON text (UTF-8 kept readable); ``"auto"`` indents only a small one.

    Never writes ``NaN`` or ``Infinity`` (``ValueError``: nothing charfmt reads holds one).
    """
    compact = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if indent == "auto":
        indent = 2 if len(compact) <= INDENT_LIMIT else None
    if indent is None:
        return compact + "\n"
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=indent) + "\n"
