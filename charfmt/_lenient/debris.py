"""Text that is no words: the format's syntax left where speech would be, never anything a character says.

What a model leaves of the format outside its elements — JSON punctuation, a key/value pair of the format
(``- "id": "chat",``), a list of data (``[1, "şaşkın"]``: a number and an emotion key wrapped in JSON), a list mark
(``-``), a lone separator (``:``), a fragment of markup (``#f``) — is no language at all: read as speech it would
put words in the character's mouth that are none (found by the eleventh set's #0, #7, #12, #72 and #87; the tenth's
#0 backtick was one of them). ``no_words`` says which texts these are: once the format's punctuation, its keys and
its data are taken out, nothing is left but, at most, one Latin letter glued to a mark.

Real short speech stays: whatever is left that is not the format's — a word of any script (``OK``, ``はい``, ``네``),
a sentence's marks (``...?``, ``!!``, ``¿Sí?``), an emoji, a number said (``42``) — is the character's.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient.marks import CHAT_KEYS, CHATS_KEYS
from charfmt.models import Vocabulary
from charfmt.tags import TagTable

_STRING: Final = re.compile(r'"([^"\n]*)"')
"""A JSON string (a key or a value)."""
_KEY_COLON: Final = re.compile(r"\s*:")
_VALUE_COLON: Final = re.compile(r"(?:\"([^\"\n]*)\"\s*)?:\s*\Z")
"""A value's key and colon before it (group 1: the key, where it is quoted)."""
_TEXT_KEY: Final = CHAT_KEYS[-1]
"""The format's key whose value is the chat's text (``body``): a word there is said, not data."""
_PLACEHOLDER: Final = re.compile(r"\s*(?:\.\.\.|…)?\s*")
_JSON: Final = re.compile(r'[{}\[\]]|"\s*:')
"""What makes a text JSON: a bracket, or a quoted key before its colon."""
_DATUM: Final = re.compile(r"\s*(?:[^\W\d_]*|-?\d+(?:\.\d+)?|\.\.\.|…)\s*")
"""A JSON value that says nothing: one word with no sentence's mark (an enumeration's value, ``"chat"``, ``"C"``), a
number, an ellipsis (the spec's placeholder), nothing."""
_LITERALS: Final = re.compile(r"(?<![^\s\[{,:])(?:-?\d+(?:\.\d+)?|true|false|null)(?![^\s\]},])")
"""A bare number or literal standing as a JSON value (between the brackets, commas and colons of JSON)."""
_AFTER_COLON: Final = re.compile(r":\s*-?\d+(?:\.\d+)?")
"""A number after a colon (``:1,``): a key's value, wherever the key was left."""
_FORMAT_MARKS: Final = re.compile(r"""[\s{}\[\]"'`,:;#*+•>|\\=\-]+""")
"""The format's punctuation: JSON's, Markdown's list, heading and quote marks, a code span's backtick."""
_ENUMERATOR: Final = re.compile(r"\d{1,3}[.)]")
"""A list item's number (``1.``, ``2)``): with the format's marks around it and nothing else (``** ** 1.``, what a
bold heading and an empty item leave), markup (the sixteenth set's #47); alone (``1.``) an answer said."""
_ENUMERATOR_AT_END: Final = re.compile(r"(?<=\s)\d{1,3}[.)]\Z")
"""... standing as a list item's number does: after a mark and a space, at the end (``** 1.``; not ``"12-7."``)."""
_GLUED: Final = re.compile(r"[^\s][A-Za-z]|[A-Za-z][^\s]")
"""A letter with a mark right beside it (in JSON, any mark: ``"E``)."""
_GLUED_TO_MARKUP: Final = re.compile(r"[#\\{}\[\]<>`=|][A-Za-z]|[A-Za-z][#\\{}\[\]<>`=|]")
"""Outside JSON, a letter glued to a mark of markup (``#f``); a quote, a colon or a comma beside one (``"B",``, ``B:``,
an answer of a quiz quoted) is no markup."""


def no_words(text: str, tags: TagTable, vocabulary: Vocabulary | None) -> bool:
    """Whether ``text`` (not blank) holds nothing but the format's syntax, keys and data: no words of anyone's.

    Taken out: the format's punctuation (``_FORMAT_MARKS``); a quoted key before its colon; where the text is JSON
    (``_JSON``), a value after a key that says nothing (``_DATUM``), a bare number or literal, and a string that is a
    key of the format, a tag's name or a key of the vocabulary (an emotion wrapped in JSON); and a number after a
    colon. What is left is words unless it is nothing, a list item's number the marks stood around (``** 1.``), or
    one Latin letter glued to a mark (``#f``: a fragment of markup; ``a`` or ``I`` standing alone is a word).
    """
    stripped = text.strip()
    if not stripped:
        return False
    json = _JSON.search(stripped) is not None
    parts: list[str] = []
    pos = 0
    for m in _STRING.finditer(stripped):
        if _data(stripped, m, json, tags, vocabulary):
            parts.append(stripped[pos : m.start()])
            parts.append(" ")
            pos = m.end()
    rest = "".join(parts) + stripped[pos:]
    if json:
        rest = _LITERALS.sub(" ", rest)
    rest = _FORMAT_MARKS.sub("", _AFTER_COLON.sub(" ", rest))
    if not rest or (_ENUMERATOR.fullmatch(rest) is not None and _ENUMERATOR_AT_END.search(stripped) is not None):
        return True
    glued = _GLUED if json else _GLUED_TO_MARKUP
    return len(rest) == 1 and rest.isascii() and rest.isalpha() and glued.search(stripped) is not None


def _data(text: str, m: re.Match[str], json: bool, tags: TagTable, vocabulary: Vocabulary | None) -> bool:
    """Whether the string ``m`` of ``text`` is the format's: a key (a colon follows), or in JSON a value saying
    nothing after a key (after the text's key, ``body``, only a placeholder says nothing), the format's key, a tag's
    name or an emotion key of the vocabulary."""
    if _KEY_COLON.match(text, m.end()) is not None:
        return True
    if not json:
        return False
    inner = m.group(1).strip()
    if (key := _VALUE_COLON.search(text, 0, m.start())) is not None:
        if (key.group(1) or "").strip().casefold() == _TEXT_KEY:  # ('"body": "hi"': said; '"body": "..."': the spec's)
            return _PLACEHOLDER.fullmatch(inner) is not None
        if _DATUM.fullmatch(inner):
            return True
    folded = inner.casefold()
    return (
        folded in CHAT_KEYS
        or folded == CHATS_KEYS[0]
        or folded in tags.synonyms
        or (vocabulary is not None and vocabulary.resolve(inner) is not None)
    )
