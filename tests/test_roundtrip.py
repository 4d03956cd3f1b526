"""Round trips: parse(dumps(r)) == r, and dumps(parse(t)) is a fixed point."""

from __future__ import annotations

import json
import random

from hypothesis import given
from hypothesis import strategies as st

import charfmt
from charfmt.tags import TAG_BY_NAME, TAGGED_TYPES
from charfmt.testing import chats, replies


@given(replies())
def test_parse_dumps_is_identity(reply: charfmt.Reply) -> None:
    assert charfmt.parse(charfmt.dumps(reply)) == reply


@given(replies(), st.sampled_from([None, 0, 2]))
def test_indent_does_not_change_meaning(reply: charfmt.Reply, indent: int | None) -> None:
    assert charfmt.parse(charfmt.dumps(reply, indent=indent)).chats == reply.chats


@given(st.lists(chats(), max_size=5, unique_by=lambda c: c.order))
def test_any_unique_orders_round_trip(items: list[charfmt.Chat]) -> None:
    reply = charfmt.Reply(chats=items)
    assert charfmt.parse(charfmt.dumps(reply)).chats == reply.chats


def _noisy(reply: charfmt.Reply, rnd: random.Random) -> str:
    """The same reply written as a model might: other escapes, key order, spacing."""

    def escape(text: str) -> str:
        # Every spelling the parser decodes: named, decimal and hex references, raw '>'.
        spellings = {"&": ["&amp;", "&#38;"], "<": ["&lt;", "&#x3c;"], ">": ["&gt;", ">", "&#62;", "&#X3E;"]}
        return "".join(
            rnd.choice(spellings[c]) if c in spellings else f"&#{ord(c)};" if c.isalpha() and rnd.random() < 0.1 else c
            for c in text
        )

    out = []
    for chat in reply.chats:
        if chat.type in TAGGED_TYPES:
            text = "\n".join(
                f"<{s.tag}>{s.text if TAG_BY_NAME[s.tag].content == 'key' else escape(s.text)}</{s.tag}>"
                for s in chat.segments
            )
        else:
            text = escape(chat.segments[0].text)
        fields = [("type", chat.type), ("order", chat.order), ("body", text)]
        rnd.shuffle(fields)
        out.append(dict(fields))
    rnd.shuffle(out)
    return json.dumps({"chats": out}, ensure_ascii=rnd.random() < 0.5, indent=rnd.choice([None, 1, 4]))


@given(replies(), st.randoms(use_true_random=False))
def test_canonical_form_is_a_fixed_point(reply: charfmt.Reply, rnd: random.Random) -> None:
    text = _noisy(reply, rnd)
    parsed = charfmt.parse(text)
    assert parsed.chats == reply.chats
    canonical = charfmt.dumps(parsed)
    assert charfmt.dumps(charfmt.parse(canonical)) == canonical
