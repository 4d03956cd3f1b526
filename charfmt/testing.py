"""Hypothesis strategies for charfmt's data, for your tests and ours.

Install with ``pip install charfmt[testing]``. Every strategy draws from the tag
table and the grammar's own terminals, so generated data is exactly what the
strict parser accepts; ``damaged_replies`` damages it the way models do.

    from hypothesis import given
    from charfmt.testing import damaged_replies

    @given(damaged_replies())
    def test_my_handler_survives(damaged):
        my_game.handle(charfmt.parse(damaged.text, lenient=True))

The strategies are written in ``charfmt._strategies``, which the hypothesis plugin
(``charfmt._hypothesis_plugin``) draws from; this module is their public door.
"""

from __future__ import annotations

# Installs made before the hook moved name ``charfmt.testing:_hypothesis_setup_hook`` as
# hypothesis's entry point, and hypothesis loads it while the import below is still running
# (this module half initialised): the name must exist before hypothesis is imported.
from charfmt._hypothesis_plugin import setup_hook as _hypothesis_setup_hook  # noqa: F401 (old installs' entry point)

# isort: split
try:
    from charfmt._strategies import (
        bodies,
        chats,
        chunkings,
        contents,
        damaged_replies,
        keys,
        replies,
        segments,
        texts,
        user_chats,
        user_contexts,
        user_texts,
        user_turns,
    )
except ModuleNotFoundError as e:  # the testing extra is not installed
    if e.name != "hypothesis":
        raise
    raise ImportError("charfmt.testing needs hypothesis: pip install 'charfmt[testing]'") from None
from charfmt.fuzz import Damaged

__all__ = [
    "Damaged",
    "bodies",
    "chats",
    "chunkings",
    "contents",
    "damaged_replies",
    "keys",
    "replies",
    "segments",
    "texts",
    "user_chats",
    "user_contexts",
    "user_texts",
    "user_turns",
]
