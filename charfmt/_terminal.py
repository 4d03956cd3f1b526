"""Model text on a terminal: control and bidirectional formatting characters made visible.

A model's text (or a server's error message) may hold C0/C1 controls — U+009B opens an
escape sequence on many terminals, U+001B on all — and bidirectional overrides (U+202E)
that reorder what a reader sees. Human formats show each as an escape (``\\x9b``,
``\\u202e``); JSON output writes them as ``\\u`` escapes (the value stays exact); logs and
files keep them as they are.
"""

from __future__ import annotations

import re
from typing import IO, Any, Final

_BIDI: Final = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""The bidirectional formatting characters (Unicode's Bidi_Control property)."""

_SHOWN_ESCAPED: Final = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
"""What a human format escapes: every control but tab and newline, and the bidi controls."""

_JSON_ESCAPED: Final = re.compile(f"[\x7f-\x9f{_BIDI}]")
"""What ``json.dumps(ensure_ascii=False)`` leaves raw and a terminal would act on (C0 it escapes itself)."""


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with control and bidi characters (not tab, not newline) as ``\\x9b`` / ``\\u202e``."""
    return _SHOWN_ESCAPED.sub(_escape, text)


def json_safe(text: str) -> str:
    """JSON text with DEL, C1 controls and bidi characters as ``\\u`` escapes: the same value, safe to show.

    Right only where those characters sit inside JSON strings, as in any ``json.dumps`` output.
    """
    return _JSON_ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class VisibleWriter:
    """A text stream whose writes go through :func:`visible` (everything else is the stream's)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
