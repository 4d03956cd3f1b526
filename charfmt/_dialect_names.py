"""The names of the lenient dialect table's entries (``charfmt.dialects.DIALECTS``), in table order.

Apart from the table so that ``Reply.dialect`` can be typed by them without loading the
table's patterns when the models load (valid input never needs them). ``charfmt.dialects``
checks at import that its table lists exactly these names, in this order.
"""

from __future__ import annotations

from typing import Literal

DialectName = Literal[
    "canonical",
    "user-chats",
    "json-array",
    "hybrid",
    "single-chat",
    "json-fields",
    "front-matter",
    "bare-tags",
    "dot-notation",
    "attribute-xml",
    "bracket",
    "roleplay",
    "prose",
    "plain-text",
]
"""The names of the table's entries, in table order (``Reply.dialect``'s type)."""
