"""Old home of ``charfmt.constrain.schema``: a door kept so users' ``charfmt.schema`` imports still work.

The module moved into the constraining wing (issue 41), which keeps this public path.
Import from ``charfmt.constrain.schema``; nothing inside the package imports this door.
"""

from charfmt.constrain.schema import (
    ENGINES,
    LISTED_ORDERS,
    MINIMUM_IGNORED,
    PATTERN_READS,
    PROVIDERS,
    for_engine,
    json_schema,
    raw_pattern,
)

__all__ = [
    "ENGINES",
    "LISTED_ORDERS",
    "MINIMUM_IGNORED",
    "PATTERN_READS",
    "PROVIDERS",
    "for_engine",
    "json_schema",
    "raw_pattern",
]
