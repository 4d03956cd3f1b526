"""Old home of ``charfmt.prompt.cards``: a door kept so users' ``charfmt.cards`` imports still work.

The module moved into the prompting wing (issue 41); docs/API.md names this path.
Import from ``charfmt.prompt.cards``; nothing inside the package imports this door.
"""

from charfmt.prompt.cards import (
    CHARFMT_VERSION,
    DEFAULT_EMOTIONS,
    MAX_CHARX_ENTRIES,
    MAX_CHARX_EXPANSION,
    MAX_CHARX_RATIO,
    MAX_EXAMPLE_TEXT,
    MAX_EXAMPLE_TURNS,
    OWN,
    OWN_CHARACTER,
    CardError,
    CardInfo,
    CardRead,
    card_json,
    card_text,
    export_card,
    greeting,
    greeting_count,
    is_card,
    is_generated,
    read_card,
)

__all__ = [
    "CHARFMT_VERSION",
    "DEFAULT_EMOTIONS",
    "MAX_CHARX_ENTRIES",
    "MAX_CHARX_EXPANSION",
    "MAX_CHARX_RATIO",
    "MAX_EXAMPLE_TEXT",
    "MAX_EXAMPLE_TURNS",
    "OWN",
    "OWN_CHARACTER",
    "CardError",
    "CardInfo",
    "CardRead",
    "card_json",
    "card_text",
    "export_card",
    "greeting",
    "greeting_count",
    "is_card",
    "is_generated",
    "read_card",
]
