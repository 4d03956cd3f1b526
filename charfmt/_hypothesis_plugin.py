"""Hypothesis plugin: ``st.from_type(charfmt.Reply)`` and friends draw from ``charfmt.testing``'s strategies.

Hypothesis runs every ``hypothesis`` entry point while it is itself being imported, so
this module imports nothing at load time, and the hook registers *deferred* strategies:
``charfmt._strategies`` (which imports hypothesis) is imported only when a strategy is
first drawn from. Importing ``charfmt.testing`` first, hypothesis first, or neither all
work. This module never imports ``charfmt.testing``, which imports it (the entry point of
old installs).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

_STRATEGIES = (
    ("charfmt.models", "Reply", "replies"),
    ("charfmt.models", "Chat", "chats"),
    ("charfmt.models", "Segment", "segments"),
    ("charfmt.prompt.userinput", "UserTurn", "user_turns"),
)
"""``(module, type, strategy in charfmt._strategies)`` for ``st.register_type_strategy``."""


def _deferred(strategy: str) -> SearchStrategy[object]:
    from hypothesis import strategies as st  # noqa: PLC0415 (optional dependency: hypothesis, charfmt[testing])

    def resolve() -> SearchStrategy[object]:
        from charfmt import _strategies  # noqa: PLC0415 (imports hypothesis: only when drawn from)

        made: SearchStrategy[object] = getattr(_strategies, strategy)()
        return made

    return st.deferred(resolve)


def setup_hook() -> None:
    """Hypothesis plugin entry point (``[project.entry-points.hypothesis]``)."""

    from hypothesis import strategies as st  # noqa: PLC0415 (optional dependency: hypothesis, charfmt[testing])

    for module, name, strategy in _STRATEGIES:
        st.register_type_strategy(getattr(import_module(module), name), _deferred(strategy))


_hypothesis_setup_hook = setup_hook
"""The hook's name in the entry point of installs made before it was ``setup_hook`` (their metadata still names it)."""
