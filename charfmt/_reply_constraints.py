"""The keywords that constrain a reply, defined once: which tags and emotion keys it holds, and how long it may be.

``charfmt.grammar``, ``charfmt.json_schema``, ``charfmt.export.resolve_bounds`` and the
engine recipes (``request_fields``, ``structural_tag``) each take them as
``**constraints: Unpack[ReplyConstraints]`` and hand them on; ``values`` refuses any other
keyword as Python refuses an unknown one. ``@constrains`` gives each of them the signature
``help()`` and ``inspect.signature`` show: the keywords themselves, read from ``ReplyConstraints``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypedDict, TypeVar

from charfmt.models import Vocabulary
from charfmt.tags import TagTable


class ReplyConstraints(TypedDict, total=False):
    """What a constrained reply may hold (every keyword optional, ``None`` by default)."""

    vocabulary: Vocabulary | None
    """The emotion tag holds only these keys."""
    tags: TagTable | None
    """The tag table (``None``: ``DEFAULT_TAGS``); a cue with values holds one of them."""
    max_tokens: int | None
    """A token budget the longest allowed reply fits in (``Bounds.for_tokens``)."""
    max_chars: int | None
    """Characters per element content (and per ``I``/``E`` body)."""
    max_chats: int | None
    """Chats per reply."""


Values = tuple[Vocabulary | None, TagTable | None, int | None, int | None, int | None]


def values(function: str, constraints: Mapping[str, Any]) -> Values:
    """``(vocabulary, tags, max_tokens, max_chars, max_chats)`` from the keywords ``function`` was called with."""
    for name in constraints:
        if name not in ReplyConstraints.__optional_keys__:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
    get = constraints.get
    return get("vocabulary"), get("tags"), get("max_tokens"), get("max_chars"), get("max_chats")


F = TypeVar("F", bound=Callable[..., Any])


def constrains(function: F) -> F:
    """``function``'s signature with the keywords of ``ReplyConstraints`` in place of ``**constraints``.

    What ``help()`` and ``inspect.signature`` show: ``vocabulary=None, tags=None, max_tokens=None...``,
    keyword-only, each annotated as ``ReplyConstraints`` declares it (one definition for every function).
    """
    signature = inspect.signature(function)
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    # (a TypedDict holds its annotations as ForwardRefs; the signature shows the text they are)
    hints = {name: getattr(hint, "__forward_arg__", hint) for name, hint in ReplyConstraints.__annotations__.items()}
    keywords = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
        for name, hint in hints.items()
    ]
    setattr(function, "__signature__", signature.replace(parameters=[*kept, *keywords]))  # noqa: B010 (mypy)
    return function
