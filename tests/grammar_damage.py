"""What a constrained model could drift to, shared by the grammar-export and engine tests.

Each damage keeps charfmt's own spelling otherwise; every exported grammar and schema must
reject a damaged reply exactly when strict parsing does (``strict_ok`` is the judge).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

import charfmt
from charfmt.testing import replies


def strict_ok(text: str, vocabulary: charfmt.Vocabulary | None = None) -> bool:
    """Whether strict parsing accepts ``text``."""
    try:
        charfmt.parse(text, vocabulary=vocabulary)
    except charfmt.ParseError:
        return False
    return True


def _body(fn: Callable[[str], str]) -> Callable[[dict[str, Any], int], None]:
    def apply(doc: dict[str, Any], i: int) -> None:
        doc["chats"][i]["body"] = fn(doc["chats"][i]["body"])

    return apply


def _set(key: str, value: Any) -> Callable[[dict[str, Any], int], None]:
    def apply(doc: dict[str, Any], i: int) -> None:
        doc["chats"][i][key] = value

    return apply


DAMAGE: dict[str, Callable[[dict[str, Any], int], None]] = {
    "none": lambda doc, i: None,
    "mismatched closer": _body(lambda b: re.sub(r"</(msg|act|thought)>", "</emo>", b, count=1)),
    "raw less-than": _body(lambda b: b.replace("</", "<</", 1)),
    "raw ampersand": _body(lambda b: b + "&"),
    "no newline": _body(lambda b: b.replace(">\n<", "><", 1)),
    "blank line": _body(lambda b: b.replace("\n", "\n\n", 1)),
    "attribute": _body(lambda b: b.replace("<emo>", '<emo type="x">', 1)),
    "unclosed": _body(lambda b: b[: b.rfind("</")] if "</" in b else b),
    "upper case": _body(lambda b: b.replace("<msg>", "<MSG>", 1)),
    "unknown tag": _body(lambda b: b + "\n<speak>hi</speak>"),
    "stray text": _body(lambda b: b + "\nhello"),
    "padded key": _body(lambda b: b.replace("<emo>", "<emo> ", 1)),
    "trailing newline": _body(lambda b: b + "\n"),
    "empty body": _body(lambda b: ""),
    "control character": _body(lambda b: b[:1] + "\x07" + b[1:]),
    "quote and backslash": _body(lambda b: b.replace("</msg>", '"\\"</msg>', 1)),
    "unknown emotion": _body(lambda b: b.replace("<emo>", "<emo>furious", 1)),
    "lower-case type": _set("type", "c"),
    "order zero": _set("order", 0),
    "order string": _set("order", "1"),
    "extra key": _set("mood", "joy"),
}


@st.composite
def damaged(draw: st.DrawFn) -> str:
    """A reply from the strategies with one damage of ``DAMAGE`` (or none, possibly truncated)."""
    reply = draw(replies().filter(lambda r: bool(r.chats)))
    doc = json.loads(charfmt.dumps(reply))
    name = draw(st.sampled_from(sorted(DAMAGE)))
    DAMAGE[name](doc, draw(st.integers(0, len(doc["chats"]) - 1)))
    text = json.dumps(doc, ensure_ascii=False, indent=draw(st.sampled_from([None, 2])))
    if draw(st.booleans()) and name == "none":
        text = text[: draw(st.integers(0, len(text) - 1))]  # truncated
    return text
