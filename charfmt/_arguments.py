"""Argument checks the public functions share: a wrong type a ``TypeError``, a wrong value a ``CharfmtError``.

Each names the argument and what it takes, so that ``parse(text, vocabulary=["joy"])`` says what to
pass instead of failing deep inside (an ``AttributeError`` on a list). ``parse``, ``StreamParser``,
``json_schema`` / ``grammar`` and ``render_messages`` call the same checks; each costs an
``isinstance`` on the usual call, nothing is copied.
"""

from __future__ import annotations

from typing import Final

from charfmt.diagnostics import CharfmtError
from charfmt.models import Vocabulary
from charfmt.tags import TagTable

_VOCABULARY_HINT: Final = ' (charfmt.Vocabulary.of("joy", "sad") makes one of bare keys)'
_TAGS_HINT: Final = " (charfmt.DEFAULT_TAGS, or a character's .tags)"


def _kind(value: object) -> str:
    return type(value).__name__


def check_vocabulary(value: object, name: str = "vocabulary") -> None:
    """``value`` is a ``Vocabulary`` or ``None``; else a ``TypeError`` naming ``name``."""
    if value is not None and not isinstance(value, Vocabulary):
        raise TypeError(f"{name} must be a Vocabulary or None, not {_kind(value)}{_VOCABULARY_HINT}")


def check_tags(value: object, name: str = "tags") -> None:
    """``value`` is a ``TagTable`` or ``None``; else a ``TypeError`` naming ``name``."""
    if value is not None and not isinstance(value, TagTable):
        raise TypeError(f"{name} must be a TagTable or None, not {_kind(value)}{_TAGS_HINT}")


def check_flag(value: object, name: str) -> None:
    """``value`` is ``True`` or ``False`` (not a truthy string: ``"no"`` would read as yes); else a ``TypeError``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {_kind(value)} {value!r}")


def check_count(value: object, name: str, *, optional: bool = False) -> None:
    """``value`` is an ``int`` (not a ``bool``) of at least 0 (``optional``: or ``None``).

    A wrong type is a ``TypeError``, a negative number a ``CharfmtError``, each naming ``name``.
    """
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        also = " or None" if optional else ""
        raise TypeError(f"{name} must be an int{also}, not {_kind(value)} {value!r}")
    if value < 0:
        raise CharfmtError(f"{name} must be at least 0, not {value}")


def check_reading(lenient: object, vocabulary: object, tags: object, max_size: object) -> None:
    """The arguments ``parse`` and ``StreamParser`` share, checked alike."""
    check_flag(lenient, "lenient")
    check_vocabulary(vocabulary)
    check_tags(tags)
    check_count(max_size, "max_size")
