"""Escaping for prompts: a value printed into a prompt can neither open or close a tag nor forge a turn.

Text is escaped for the tag language (``writer.escape``), then defused: a ``#`` that would
start a line (after a line break of any kind, ``\\r``, U+0085 and U+2028 included) is
written ``&#35;``, and the first character of a chat-template control string
(``_control_strings.CONTROL_STRINGS``) as a character reference. Both are references the
user-block reader decodes. JSON text keeps its value: the same characters are written as
``\\u`` escapes. An emotion key holds no reference at all: ``unsafe_key`` says when one
cannot be sent.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._control_strings import CONTROL_STRINGS
from charfmt.writer import escape

_CONTROL: Final = re.compile("|".join(re.escape(s) for s in sorted(CONTROL_STRINGS, key=len, reverse=True)))
_LINE_BREAKS: Final = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""What ``str.splitlines`` (and so a reader of the prompt) takes for a line break."""
_LINE_LEADING_HASH: Final = re.compile(rf"(^|[{_LINE_BREAKS}])([\s\u00ad\u200b-\u200f\u2060-\u2064\ufeff]*)#")
"""A ``#`` that starts a line: after a line break (or at the start of a value) and only
blanks or invisible format characters."""
_KEY_UNSAFE: Final = re.compile(rf"[{_LINE_BREAKS}]|{_CONTROL.pattern}")
_JSON_LINE_BREAKS: Final = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})
_LINE_ESCAPES: Final = str.maketrans({c: f"&#{ord(c)};" for c in "\t\n\r\x85\u2028\u2029"})
"""The line filter writes a value on one line (text holds no other control character)."""


def defuse(escaped: str) -> str:
    """Text already escaped for the tag language, with no line-leading ``#`` or control string."""
    escaped = _LINE_LEADING_HASH.sub(r"\1\2&#35;", escaped)
    return _CONTROL.sub(lambda m: f"&#{ord(m.group()[0])};{m.group()[1:]}", escaped)


def defused_text(text: str) -> str:
    """``text`` escaped for the tag language and defused."""
    return defuse(escape(text))


def defused_line(text: str) -> str:
    """``text`` escaped, on one line (its line breaks and tabs as character references), and defused."""
    return defuse(escape(text).translate(_LINE_ESCAPES))


def defused_json(text: str) -> str:
    """JSON text with line separators and control strings written as ``\\u`` escapes (same value)."""
    text = text.translate(_JSON_LINE_BREAKS)
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()[0]):04x}{m.group()[1:]}", text)


def unsafe_key(key: str) -> bool:
    """Whether ``key`` holds a line separator or a control string (a key is written as it is: no reference)."""
    return _KEY_UNSAFE.search(key) is not None
