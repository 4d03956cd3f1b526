"""MkDocs hook: the diagnostics page's table, written from ``charfmt.diagnostics.CODES`` at build time.

The code table is the one source of truth; the page holds a marker comment where the table goes,
so a code added to ``charfmt/diagnostics.py`` is on the site without another edit.
"""

from __future__ import annotations

import html
from typing import Any

from charfmt.diagnostics import CODES

MARKER = "<!-- diagnostics-table:"
GROUPS = {
    "0": "The input",
    "1": "The envelope: JSON, chats, orders, tag roles, speakers, bounds",
    "2": "Bodies: tag elements",
    "3": "Meaning: emotion keys and speakers",
    "4": "What the player types (shorthand)",
    "5": "The user block of a prompt",
    "6": "Lenient reading: around the reply and in the envelope",
    "7": "Lenient reading: bodies",
    "8": "Streams, SDK objects and upstreams",
    "9": "Other formats' documents, cards, macros, lorebooks, reports; internal errors",
}


def table() -> str:
    """The codes as Markdown: a table per hundred, each code with an anchor (``#cf301``)."""
    parts: list[str] = []
    for digit, title in GROUPS.items():
        rows = [(code, severity, text) for code, (severity, text) in CODES.items() if code[2] == digit]
        if not rows:
            continue
        parts += [f"### {digit}xx: {title}", "", "| code | severity | meaning |", "|---|---|---|"]
        for code, severity, text in rows:
            meaning = html.escape(text, quote=False).replace("|", "\\|")
            parts.append(f'| <span id="{code.lower()}"></span>`{code}` | {severity} | {meaning} |')
        parts.append("")
    missing = [code for code in CODES if code[2] not in GROUPS]
    if missing:
        raise ValueError(f"diagnostic codes in no group of docs/_hooks/diagnostics.py: {missing}")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the marker line of ``DIAGNOSTICS.md`` by the table."""
    if MARKER not in markdown:
        return markdown
    lines = [table() if line.startswith(MARKER) else line for line in markdown.split("\n")]
    return "\n".join(lines)
