"""MkDocs hook: the docstrings' Sphinx roles (``:class:`Reply```) shown as plain code in the API reference.

The package's docstrings name other objects the Sphinx way; Markdown renders the role as text
before the code (``:class:Reply``). The role says nothing a reader needs, so it goes.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|data|meth|attr|mod|exc|obj):(?=<code>)")


def on_page_content(html: str, **_: Any) -> str:
    """Drop each role written before a code span."""
    return ROLE.sub("", html)
