"""The dialect table: every way of writing a reply that lenient parsing reads, in one ordered list.

Like markdown-it-py's ``Ruler`` (an ordered list of named rules, each naming the chains
it runs in), each entry is a name, a description, the readers' chains it takes part in
and the rule that detects it. The two lenient readers walk this table instead of
deciding in branches of their own:

``text``
    a reply without JSON (``recover``): the first matching entry decides how the text is
    read (echoed request form, front matter, bare tags, plain text).
``json``
    a JSON value (``recover``): the shape of the whole reply (top level) or of one chat.
``body``
    the start of a ``C`` body (``soup``): front matter standing before the elements.
``tag``
    one tag as written (``soup``): the attribute form, dot notation.
``prose``
    untagged text (``soup``): the entry's ``pattern`` is the regex its reader matches
    (bracket tags, role-play marks), tried in table order.
``stray``
    text standing between the elements of a tagged body (``soup``).

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Literal, get_args

from charfmt import _control_strings as cs
from charfmt._dialect_names import DialectName
from charfmt.tags import DEFAULT_TAGS, TagTable

Chain = Literal["text", "json", "body", "tag", "prose", "stray"]


@dataclass(frozen=True, slots=True)
class Sample:
    """What a reader shows the table: some text, or (JSON) the keys of an object."""

    text: str = ""
    """``text``: the reply; ``body``: a body; ``tag``: one tag as written."""
    keys: frozenset[str] = frozenset()
    """``json``: the object's keys, lower case (empty for an array)."""
    array: bool = False
    """``json``: the value is an array."""
    top: bool = False
    """``json``: the value is the whole reply, not one chat of it."""


Detect = Callable[[Sample, TagTable], bool]


@dataclass(frozen=True, slots=True)
class DialectRule:
    """One entry of the dialect table."""

    name: DialectName
    """What ``Reply.dialect`` says when this entry names the reply."""
    description: str
    """What the model wrote, in one line (documentation, ``charfmt fuzz`` output)."""
    chains: tuple[Chain, ...]
    """The readers' chains this entry runs in (markdown-it-py's ``alt``)."""
    detect: Detect | None = None
    """Whether a sample is written in this dialect; ``None`` for ``canonical``, which detects nothing."""
    pattern: str | None = None
    """``prose`` entries: the (verbose) regex the reader matches, with named groups it dispatches on."""


# --- detectors ---------------------------------------------------------------------------


def _one_of(*markers: str) -> str:
    """A regex matching any of the chat-template control strings ``markers``."""
    return "|".join(map(re.escape, markers))


SCAFFOLDING: Final = re.compile(
    rf"""(?P<sys_open>{_one_of(*cs.SYSTEM_OPENERS)})
      | (?P<sys_close>{_one_of(*cs.SYSTEM_CLOSERS)})
      | (?P<inst_open>{_one_of(cs.INST_OPEN)})
      | (?P<inst_close>{_one_of(cs.INST_CLOSE)})
      | {_one_of(cs.CHATML_START)}[ \t]*+(?P<chatml>[A-Za-z_][\w\-]*+)?[ \t]*+\n?
      | {_one_of(cs.GEMMA_START)}[ \t]*+(?P<gemma>[A-Za-z_][\w\-]*+)?[ \t]*+\n?
      | {_one_of(cs.HEADER_START)}[ \t]*+(?P<llama3>[^<>|\n]{{0,30}}?)[ \t]*+{_one_of(cs.HEADER_END)}[ \t]*+\n{{0,2}}
      | <\|(?P<phi>{_one_of(*cs.PHI_ROLES)})\|>[ \t]*+\n?
      | (?P<end>{_one_of(*cs.TURN_ENDS)})
      | (?P<placeholder>[<＜][/／]?[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]++)++[>＞](?:[/／][A-Z][A-Z0-9_\-]*+)*+[>＞]?
          | \[/?(?:[A-Z][A-Z0-9]*+(?:[-_][A-Z0-9]++)++|SYS|USER|ASSISTANT|SYSTEM)\])
      | (?P<angles><<++|>>++)""",
    re.X,
)
"""Chat-template scaffolding a model echoes from its prompt: never a tag, never speech.

llama-2 (``<<SYS>>``, ``[INST]``), Mistral (``[SYSTEM_PROMPT]``), ChatML (``<|im_start|>role``,
``<|im_end|>``), Gemma (``<start_of_turn>role``, ``<end_of_turn>``), Llama 3
(``<|start_header_id|>role<|end_header_id|>``, ``<|eot_id|>``), Phi (``<|user|>``, ``<|end|>``),
upper-case placeholders (``<USER-CHAT-ID>``, ``[/USER-CONTEXT]``: the format's tags are never
written so; an upper-case path right after one, ``<USER-CHAT>/MYCHAT/DEFAULT>``, is part of it),
and runs of ``<<`` or ``>>`` left of a mangled ``<<SYS>>``.
"""
SCAFFOLD_PROMPT_ROLES: Final = frozenset({"system", "user", "human", "tool", "ipython", "developer"})
"""Turns of these roles are the prompt echoed, not the character's reply: their text is dropped."""
USER_CHATS: Final = re.compile(r"[<＜]\s*+(?:user_chats?(?:_type)?|chat(?:_type)?)(?![\w\-])[^<>＜＞]*+[>＞]", re.I)
"""An element of the request form (``<user_chats>``, ``<chat type="C">``) written in a reply."""
FRONT_MATTER: Final = re.compile(r"\A\s*---[ \t]*\n((?:[^\n]*\n)*?)---[ \t]*(?:\n|\Z)")
"""Pattern C: a ``---`` block of ``key: value`` lines at the very start."""
TAGGED: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?[^\W\d][\w.\-:]*+[^<>＜＞]*+[>＞]")
"""Anything that looks like a tag."""
_DOT: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?[^\W\d][\w\-]*+\.[\w.\-]")
_ATTRIBUTE: Final = re.compile(r"[<＜]\s*+[/／]?\s*+[^\W\d][\w.\-:]*+\s[^<>＜＞]*=")
HYBRID_BODY: Final = frozenset({"chat_body", "chatbody"})
"""Pattern D's body key."""
HYBRID_EMOTION: Final = frozenset({"emotion_summary", "emotionsummary"})
"""Pattern D's emotion key."""
CHATS_KEYS: Final = ("chats", "messages", "replies", "responses", "chat")
"""Keys that hold the list of chats (``chats`` and what models write instead)."""
_CHAT_KEYS: Final = frozenset({"type", "order", "body"})


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


_BRACKET: Final = r"""
    \[\[?(?P<word>[^\[\]\n:：]++)(?:[:：](?P<val>[^\[\]\n]++))?\]\]?       # [joy] [emotion:angry] [[x:y]]
  | 【(?P<full>[^【】\n]+)】                                                # 【疑惑】
"""
_ROLEPLAY: Final = r"""
    \*\*\((?P<direction>[^)\n]+)\)\*\*                                     # **(stage direction)**
  | \*(?P<star>[^*\n]+)\*                                                  # *jumps*
  | （(?P<paren>[^（）\n]+)）                                               # （动作）
  | (?:^|(?<=[.!?。！？\n]\s)|(?<=[.!?。！？\n]))\((?P<half>[^()\n]+)\)          # (sighs) at a sentence start
"""

DIALECTS: Final[tuple[DialectRule, ...]] = (
    DialectRule("canonical", "charfmt's own format, repaired (the fallback: detects nothing)", ()),
    DialectRule(
        "user-chats",
        'the request form echoed: <user_chats><chat type="C">…</chat>…, possibly unclosed',
        ("text",),
        _user_chats,
    ),
    DialectRule("json-array", 'a bare JSON array of chats, without {"chats": …}', ("json",), _json_array),
    DialectRule("hybrid", "pattern D: chat_body and emotion_summary keys", ("json",), _hybrid),
    DialectRule(
        "single-chat", 'one chat object (type, order or body keys) without {"chats": [...]}', ("json",), _single_chat
    ),
    DialectRule(
        "json-fields", 'pattern A: tags as JSON fields, {"emotion": "joy", "content": "…"}', ("json",), _json_fields
    ),
    DialectRule(
        "front-matter",
        "pattern C: a ---/key: value/--- block, then the text (bare, or at the start of a JSON body)",
        ("text", "body"),
        _front_matter,
    ),
    DialectRule("bare-tags", "tag elements with no JSON around them", ("text",), _bare_tags),
    DialectRule("dot-notation", "pattern E: <emotion.surprise>えっ！？</emotion.surprise>", ("tag",), _dot_notation),
    DialectRule("attribute-xml", 'pattern B: <emotion type="joy">わあ</emotion>', ("tag",), _attribute_xml),
    DialectRule("bracket", "bracket tags: [joy], [emotion:angry], 【疑惑】", ("prose",), _pattern(_BRACKET), _BRACKET),
    DialectRule(
        "roleplay",
        "role-play marks: *jumps*, **(aside)**, （动作）, (sighs)",
        ("prose",),
        _pattern(_ROLEPLAY),
        _ROLEPLAY,
    ),
    DialectRule("prose", "text outside the elements of a tagged body", ("stray",), _stray_text),
    DialectRule("plain-text", "a reply that is only text: no JSON, no tags, no brackets", ("text",), _stray_text),
)
"""Every dialect, in the order that decides which one names a reply (see the module docstring)."""

DIALECT_NAMES: Final[tuple[DialectName, ...]] = tuple(rule.name for rule in DIALECTS)
"""The dialects' names in table order: the values ``Reply.dialect`` takes."""

_RANK: Final[dict[str, int]] = {name: i for i, name in enumerate(DIALECT_NAMES)}
_BY_NAME: Final[dict[str, DialectRule]] = {rule.name: rule for rule in DIALECTS}

if get_args(DialectName) != DIALECT_NAMES:  # pragma: no cover - a table edit without the Literal
    raise RuntimeError("charfmt.dialects: DialectName and the table list different names")


def rule(name: str) -> DialectRule:
    """The entry called ``name``."""
    return _BY_NAME[name]


def chain(name: Chain) -> Iterator[DialectRule]:
    """The entries that run in chain ``name``, in table order."""
    return (rule for rule in DIALECTS if name in rule.chains)


def first(
    name: Chain, sample: Sample, tags: TagTable = DEFAULT_TAGS, *, after: str | None = None
) -> DialectRule | None:
    """The first entry of chain ``name`` that detects ``sample`` (only those after entry ``after``), or ``None``."""
    floor = _RANK[after] if after is not None else -1
    for entry in chain(name):
        if _RANK[entry.name] > floor and entry.detect is not None and entry.detect(sample, tags):
            return entry
    return None


def winner(found: Iterable[str]) -> DialectName:
    """The dialect that names a reply in which the readers met ``found``: the first in table order."""
    ranks = [_RANK[name] for name in found]
    return DIALECT_NAMES[min(ranks)] if ranks else "canonical"
