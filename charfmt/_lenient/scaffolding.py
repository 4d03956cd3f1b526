"""Chat-template scaffolding a model echoes from its prompt (``marks.SCAFFOLDING``): found, to be blanked.

Markers (``<<SYS>>``, ``<|im_start|>user``, ``<USER-CHAT-ID>``...), the text of a turn of
the prompt echoed, and a marker the input ends inside (``<<SY``). Spans are blanked, not
cut, so offsets after them stay put.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient.marks import SCAFFOLD_PROMPT_ROLES, SCAFFOLDING, SCAFFOLDING_HINT


def _may_hold_scaffolding(text: str) -> bool:
    """A cheap test before the scan: most bodies hold none of the markers' characters. ``SCAFFOLDING_HINT``, which
    every match of ``SCAFFOLDING`` holds (a list of hints of its own missed ``<SYS >``, which ``turns`` drops)."""
    return SCAFFOLDING_HINT.search(text) is not None


def scaffolding(text: str, *, turns: bool = True, open_turns: bool = True) -> list[tuple[int, int, str]]:
    """The chat-template scaffolding in ``text`` (``marks.SCAFFOLDING``): ``(start, end, message)`` spans to drop.

    Each marker is one span. With ``turns``, so is the text of a turn of the prompt echoed
    (a system prompt, a user turn: ``marks.SCAFFOLD_PROMPT_ROLES``) — from its opening
    marker to its closing one, the next turn's opening one, or the end of ``text`` (only with
    ``open_turns``: a read told the prompt knows its text, and drops that alone) — and the
    value of a placeholder element on one line (``<USER-CHAT-ID>12</USER-CHAT-ID>``).
    """
    if not _may_hold_scaffolding(text):
        return []
    spans: list[tuple[int, int, str]] = []
    roles: list[tuple[str, int]] = []  # the open turns: role, where its text starts
    for m in SCAFFOLDING.finditer(text):
        kind = m.lastgroup
        role = None
        if kind in ("chatml", "gemma", "llama3", "phi"):
            role = (m.group(kind) or "").strip().lower() or "assistant"
        elif m.group("sys_open"):
            role = "system"
        elif m.group("inst_open"):
            role = "user"
        closes = bool(m.group("sys_close") or m.group("inst_close") or m.group("end"))
        # A closer ends the open turn; a turn's opener ends the turn before it (not a system block).
        ends = closes or (role is not None and role != "system" and bool(roles) and roles[-1][0] != "system")
        if turns and ends and roles:
            was, at = roles.pop()
            if was in SCAFFOLD_PROMPT_ROLES and text[at : m.start()].strip():
                spans.append((at, m.start(), f"the prompt's {was} turn echoed: its text is dropped"))
        spans.append((m.start(), m.end(), f"chat-template marker {m.group().strip()!r} is scaffolding: dropped"))
        if role is not None:
            roles.append((role, m.end()))
    if turns:
        for was, at in roles if open_turns else ():  # a turn of the prompt the reply ends inside
            if was in SCAFFOLD_PROMPT_ROLES and text[at:].strip():
                spans.append((at, len(text), f"the prompt's {was} turn echoed: its text is dropped"))
        for m in _PLACEHOLDER_VALUE.finditer(text):
            if m.group(2).strip():
                spans.append((m.start(2), m.end(2), "the value of a placeholder element is scaffolding: dropped"))
    spans.sort()
    merged: list[tuple[int, int, str]] = []
    for a, b, message in spans:
        if merged and a < merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b, merged[-1][2])
            continue
        merged.append((a, b, message))
    return merged


_PLACEHOLDER_VALUE: Final = re.compile(
    r"[<＜]([A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]++)++)[>＞]([^<>＜＞\n]{0,80}?)[<＜][/／]\1[>＞]"
)


_MARKERS: Final = (
    "<<SYS>>", "<</SYS>>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "<start_of_turn>",
    "<end_of_turn>", "<|start_header_id|>", "<|end_header_id|>",
)  # fmt: skip
_MANGLED: Final = ("</SYS>>", "<SYS>>", "<<SYS]", "<</SYS]")
"""Markers as models mangle them (a ``<`` or a ``>`` lost, ``]`` for ``>>``): a cut one is known from four
characters."""
_MARKER_PREFIXES: Final = frozenset(m[:k] for m in _MARKERS for k in range(2, len(m))) | frozenset(
    m[:k] for m in _MANGLED for k in range(4, len(m))
)
_CUT_SPECIAL: Final = re.compile(r"<\|[^|<>\n]{0,40}\|?\Z")
_HEADER_OPEN: Final = "<|start_header_id|>"
_CUT_PLACEHOLDER: Final = re.compile(
    r"[<＜](?:[/／][A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]*+)*+"
    r"|[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]*+)*+"
    r"|[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]*+)++[>＞][^<>＜＞\n]{0,80}+(?:[<＜][/／]?[A-Z0-9_\-]*+)?)\Z"
)
"""An upper-case tag the input ends inside (``<USER-``), or a placeholder's one-line value (``<USER-ID>12``)."""


def cut_scaffolding(text: str) -> int | None:
    """Where a chat-template marker the input ends inside begins (``<<SY``, ``[IN``, ``<|im_st``), or ``None``."""
    tail = text[-20:]
    for k in range(len(tail), 1, -1):
        if tail[-k:] in _MARKER_PREFIXES:
            return len(text) - k
    if (m := _CUT_SPECIAL.search(text, max(0, len(text) - 44))) is not None:
        return m.start()
    if (m := _CUT_PLACEHOLDER.search(text, max(0, len(text) - 160))) is not None:
        return m.start()
    header = text.rfind(_HEADER_OPEN, max(0, len(text) - 80))
    if header >= 0:  # <|start_header_id|>assist, <|start_header_id|>assistant<|end_hea: the role not read yet
        rest = text[header + len(_HEADER_OPEN) :]
        name = len(rest) - len(rest.lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_ \t"))
        cut = not rest[name:] or rest[name:] in _MARKER_PREFIXES or "<|end_header_id|>".startswith(rest[name:])
        if cut and "\n" not in rest:
            return header
    return None


def blank(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with each span replaced by as many spaces: offsets after it stay put."""
    if not spans:
        return text
    parts, pos = [], 0
    for a, b, _message in spans:
        parts += [text[pos:a], " " * (b - a)]
        pos = b
    parts.append(text[pos:])
    return "".join(parts)
