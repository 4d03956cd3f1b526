"""The dialect table: every way of writing a reply that lenient parsing reads, in one ordered list.

Like markdown-it-py's ``Ruler`` (an ordered list of named rules, each naming the chains
it runs in), each entry is a name, a description, the readers' chains it takes part in,
the rule that detects it and the reader that reads it: adding a dialect is adding a row.
The lenient readers (``charfmt._lenient``) walk this table instead of deciding in
branches of their own; each chain hands its entries' readers what they read
(``charfmt._lenient.table``):

``text``
    a reply without JSON: the first matching entry reads the text (echoed request form,
    front matter, bare tags, plain text); after front matter the chain goes on.
``json``
    a JSON value: the shape of the whole reply (top level: its reader finds the chats)
    or of one chat.
``body``
    the start of a ``C`` body: front matter standing before the elements.
``tag``
    one tag as written: the attribute form, dot notation (its reader says how it was read).
``prose``
    untagged text: the entry's ``pattern`` is the regex its reader reads (bracket tags,
    role-play marks), tried in table order.
``stray``
    text standing between the elements of a tagged body.

**Which dialect names a reply is the table order**: a reader reports every dialect it
met; ``winner`` picks the one that stands first here. Outer shapes come before what is
inside them (the echoed ``<user_chats>`` form before its bodies' tags, a bare array
before the field names of its chats), and specific forms before generic ones (bracket
tags before stray prose, prose before plain text). ``canonical`` (the format itself,
repaired) stands first and detects nothing: it names a reply in which no other entry was
met.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final, get_args

from charfmt._dialect_names import DialectName
from charfmt._lenient import front_matter, prose, request_form, shapes, text
from charfmt._lenient.marks import (
    CHAT_KEYS,
    CHATS_KEYS,
    FRONT_MATTER,
    HYBRID_BODY,
    HYBRID_EMOTION,
    SCAFFOLD_PROMPT_ROLES,
    SCAFFOLDING,
    TAGGED,
)
from charfmt._lenient.table import Chain, Detect, DialectRule, Dialects, Sample
from charfmt._lenient.tag_soup import read_attribute_form, read_dot_notation
from charfmt.tags import DEFAULT_TAGS, TagTable

__all__ = [
    "CHATS_KEYS",
    "DIALECTS",
    "DIALECT_NAMES",
    "FRONT_MATTER",
    "HYBRID_BODY",
    "HYBRID_EMOTION",
    "SCAFFOLDING",
    "SCAFFOLD_PROMPT_ROLES",
    "TABLE",
    "TAGGED",
    "USER_CHATS",
    "Chain",
    "Detect",
    "DialectName",
    "DialectRule",
    "Sample",
    "chain",
    "first",
    "rule",
    "winner",
]

# --- detectors ---------------------------------------------------------------------------

USER_CHATS: Final = re.compile(r"[<＜]\s*+(?:user_chats?(?:_type)?|chat(?:_type)?)(?![\w\-])[^<>＜＞]*+[>＞]", re.I)
"""An element of the request form (``<user_chats>``, ``<chat type="C">``) written in a reply."""
_DOT: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?[^\W\d][\w\-]*+\.[\w.\-]")
_ATTRIBUTE: Final = re.compile(r"[<＜]\s*+[/／]?\s*+[^\W\d][\w.\-:]*+\s[^<>＜＞]*=")
_CHAT_KEYS: Final = frozenset(CHAT_KEYS)


def _user_chats(sample: Sample, tags: TagTable) -> bool:
    return USER_CHATS.search(sample.text) is not None


def _json_array(sample: Sample, tags: TagTable) -> bool:
    return sample.top and sample.array


def _hybrid(sample: Sample, tags: TagTable) -> bool:
    return bool(sample.keys & (HYBRID_BODY | HYBRID_EMOTION))


def _single_chat(sample: Sample, tags: TagTable) -> bool:
    return sample.top and not sample.array and not sample.keys & set(CHATS_KEYS) and bool(sample.keys & _CHAT_KEYS)


def _json_fields(sample: Sample, tags: TagTable) -> bool:
    return not sample.array and bool(sample.keys & tags.synonyms.keys())


def _front_matter(sample: Sample, tags: TagTable) -> bool:
    return FRONT_MATTER.match(sample.text) is not None


def _bare_tags(sample: Sample, tags: TagTable) -> bool:
    return TAGGED.search(sample.text) is not None


def _dot_notation(sample: Sample, tags: TagTable) -> bool:
    return _DOT.match(sample.text) is not None


def _attribute_xml(sample: Sample, tags: TagTable) -> bool:
    return _ATTRIBUTE.match(sample.text) is not None


def _stray_text(sample: Sample, tags: TagTable) -> bool:
    return bool(sample.text.strip())


def _pattern(source: str) -> Detect:
    compiled = re.compile(source, re.X)

    def detect(sample: Sample, tags: TagTable) -> bool:
        return compiled.search(sample.text) is not None

    return detect


DIALECTS: Final[tuple[DialectRule, ...]] = (
    DialectRule("canonical", "charfmt's own format, repaired (the fallback: detects nothing)", ()),
    DialectRule(
        "user-chats",
        'the request form echoed: <user_chats><chat type="C">…</chat>…, possibly unclosed',
        ("text",),
        _user_chats,
        read=request_form.read_form,
    ),
    DialectRule(
        "json-array",
        'a bare JSON array of chats, without {"chats": …}',
        ("json",),
        _json_array,
        read=shapes.read_array,
    ),
    DialectRule(
        "hybrid", "pattern D: chat_body and emotion_summary keys", ("json",), _hybrid, read=shapes.read_one_chat
    ),
    DialectRule(
        "single-chat",
        'one chat object (type, order or body keys) without {"chats": [...]}',
        ("json",),
        _single_chat,
        read=shapes.read_one_chat,
    ),
    DialectRule(
        "json-fields",
        'pattern A: tags as JSON fields, {"emotion": "joy", "content": "…"}',
        ("json",),
        _json_fields,
        read=shapes.read_one_chat,
    ),
    DialectRule(
        "front-matter",
        "pattern C: a ---/key: value/--- block, then the text (bare, or at the start of a JSON body)",
        ("text", "body"),
        _front_matter,
        read=front_matter.read,
    ),
    DialectRule("bare-tags", "tag elements with no JSON around them", ("text",), _bare_tags, read=text.read_tags),
    DialectRule(
        "dot-notation",
        "pattern E: <emotion.surprise>えっ！？</emotion.surprise>",
        ("tag",),
        _dot_notation,
        read=read_dot_notation,
    ),
    DialectRule(
        "attribute-xml",
        'pattern B: <emotion type="joy">わあ</emotion>',
        ("tag",),
        _attribute_xml,
        read=read_attribute_form,
    ),
    DialectRule(
        "bracket",
        "bracket tags: [joy], [emotion:angry], 【疑惑】",
        ("prose",),
        _pattern(prose.BRACKET),
        prose.BRACKET,
        prose.read_bracket,
    ),
    DialectRule(
        "roleplay",
        "role-play marks: *jumps*, **(aside)**, （动作）, (sighs)",
        ("prose",),
        _pattern(prose.ROLEPLAY),
        prose.ROLEPLAY,
        prose.read_roleplay,
    ),
    DialectRule("prose", "text outside the elements of a tagged body", ("stray",), _stray_text, read=prose.read_prose),
    DialectRule(
        "plain-text",
        "a reply that is only text: no JSON, no tags, no brackets",
        ("text",),
        _stray_text,
        read=text.read_plain,
    ),
)
"""Every dialect, in the order that decides which one names a reply (see the module docstring)."""

TABLE: Final = Dialects(DIALECTS)
"""The table as the readers walk it."""

DIALECT_NAMES: Final[tuple[DialectName, ...]] = TABLE.names
"""The dialects' names in table order: the values ``Reply.dialect`` takes."""

_BY_NAME: Final[dict[str, DialectRule]] = {rule.name: rule for rule in DIALECTS}

if get_args(DialectName) != DIALECT_NAMES:  # pragma: no cover - a table edit without the Literal
    raise RuntimeError("charfmt.dialects: DialectName and the table list different names")


def rule(name: str) -> DialectRule:
    """The entry called ``name``."""
    return _BY_NAME[name]


def chain(name: Chain) -> Iterator[DialectRule]:
    """The entries that run in chain ``name``, in table order."""
    return iter(TABLE.chain(name))


def first(
    name: Chain, sample: Sample, tags: TagTable = DEFAULT_TAGS, *, after: str | None = None
) -> DialectRule | None:
    """The first entry of chain ``name`` that detects ``sample`` (only those after entry ``after``), or ``None``."""
    return TABLE.first(name, sample, tags, after=after)


def winner(found: Iterable[str]) -> DialectName:
    """The dialect that names a reply in which the readers met ``found``: the first in table order."""
    return TABLE.winner(found)
