"""The strict reader's fast path: a reply that is valid and needs no diagnostic, in one pass; anything else ``None``.

``charfmt.parse`` runs :func:`read_reply` first on every reply of up to 64 KB, and on larger
ones before the full strict pass. It makes the same checks as the full path, written for the
case where they all pass: one JSON decode (:func:`.envelope.decode_pairs`), the chats in order
1..n with their three keys (and a scene's ``speaker``), each body read by the regular
expressions of :func:`.elements.fast_reader`, the models built without validation. At the first
doubt it gives up, and the full path decides and says what is wrong, so what it returns is
always what the full path would.

Compiled with mypyc with the rest of the package (``charfmt._strict_c.fast``, see
``charfmt._twin``); keep it mypyc-compatible, as ``charfmt._stream`` is.
"""

from __future__ import annotations

from typing import Final

from charfmt._grammar.static import terminal_regex
from charfmt.models import TRUSTED_WRITE, Chat, Reply, Segment, Vocabulary
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, TagTable

from .elements import FastReader, fast_reader
from .envelope import BOM, CHAT_KEYS, SPEAKER, decode_pairs

_FIELDS: Final = frozenset(CHAT_KEYS)
_SPEAKER_FIELDS: Final = frozenset((*CHAT_KEYS, SPEAKER))
_TYPES: Final = tuple(CHAT_TYPES)
_new, _set_dict, _set_fields_set, _set_extra, _set_private = TRUSTED_WRITE


class _Plan:
    """What reading a reply in one tag table needs.

    (A plain class: a ``NamedTuple`` compiles each field's postponed annotation at every start.)
    """

    __slots__ = ("emotion", "read", "tags", "values")

    def __init__(self, tags: TagTable, read: FastReader, emotion: str, values: dict[str, frozenset[str]]) -> None:
        self.tags: Final = tags
        """The table (held, so that its identity is not reused while the plan is kept)."""
        self.read: Final = read
        """The table's body reader (``fast_reader``)."""
        self.emotion: Final = emotion
        """The emotion tag's name: its keys are checked against a vocabulary."""
        self.values: Final = values
        """Each cue tag with a closed list of values, and its values."""


_PLANS: Final[dict[int, _Plan]] = {}
"""Each table's plan, by the table's identity: hashing a table (a Python ``__hash__``) on every
parse would cost a twentieth of a typical reply's. A plan holds its table, so an identity is
never reused while its plan is here."""
_MAX_PLANS: Final = 64
"""Plans kept at most: a program that makes a new table for every reply does not grow without bound."""


def _plan(tags: TagTable) -> _Plan:
    plan = _PLANS.get(id(tags))
    if plan is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        values = {t.name: frozenset(t.values) for t in tags if t.values is not None}
        plan = _PLANS[id(tags)] = _Plan(tags, fast_reader(tags), tags.emotion.name, values)
    return plan


def read_reply(
    text: str | bytes, vocabulary: Vocabulary | None, max_size: int, tags: TagTable = DEFAULT_TAGS
) -> Reply | None:
    """The reply, when ``text`` is a valid reply that needs no diagnostic at all; else ``None``."""
    if len(text) > max_size:
        return None
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if text[:1] == BOM:
        text = " " + text[1:]  # as the full path reads it
    top = decode_pairs(text)
    if type(top) is not tuple or len(top) != 1:
        return None
    key, items = top[0]
    if key != "chats" or type(items) is not list:
        return None
    plan = _plan(tags)
    read, emotion, values = plan.read, plan.emotion, plan.values
    known = None if vocabulary is None else frozenset(vocabulary.keys)
    chats: list[Chat] = []
    for order, chat in enumerate(items, 1):
        if type(chat) is not tuple:
            return None
        speaker = None
        if len(chat) != 3:
            if len(chat) != 4:
                return None
            fields = dict(chat)  # a scene's chat: the same three keys and "speaker"
            if fields.keys() != _SPEAKER_FIELDS:
                return None
            kind, number, body, speaker = fields["type"], fields["order"], fields["body"], fields[SPEAKER]
            if type(speaker) is not str or terminal_regex("KEY").fullmatch(speaker) is None:  # (compiled when needed)
                return None
        else:
            (k1, kind), (k2, number), (k3, body) = chat
            if k1 != "type" or k2 != "order" or k3 != "body":  # any other order of the same three keys
                fields = dict(chat)
                if fields.keys() != _FIELDS:  # three pairs, three distinct keys: no duplicate
                    return None
                kind, number, body = fields["type"], fields["order"], fields["body"]
        if number != order or type(number) is not int or kind not in _TYPES or type(body) is not str:
            return None  # ``in`` a tuple compares with ==: an unhashable "type" is simply not one
        elements = read(kind, body)
        if elements is None:
            return None
        if known is not None and any(tag == emotion and content not in known for tag, content in elements):
            return None  # a key the vocabulary does not list as written: a decision to report
        if values and any(tag in values and content not in values[tag] for tag, content in elements):
            return None  # a value outside its tag's list: an error to report
        chats.append(_chat(kind, number, elements, speaker))
    reply: Reply = _new(Reply)  # construct_trusted, written out
    _set_dict(reply, {"chats": chats, "diagnostics": [], "reasoning": None, "dialect": None})
    _set_fields_set(reply, {"chats", "diagnostics", "reasoning", "dialect"})
    _set_extra(reply, None)
    _set_private(reply, None)
    return reply


def _chat(kind: str, order: int, elements: list[tuple[str, str]], speaker: str | None) -> Chat:
    """``construct_trusted`` of a chat and of a segment (no intensity) per checked ``(tag, text)`` pair, written out."""
    segments = []
    for tag, text in elements:
        segment = _new(Segment)
        _set_dict(segment, {"tag": tag, "text": text, "intensity": None})
        _set_fields_set(segment, {"tag", "text", "intensity"})
        _set_extra(segment, None)
        _set_private(segment, None)
        segments.append(segment)
    chat: Chat = _new(Chat)
    _set_dict(chat, {"type": kind, "order": order, "segments": segments, "speaker": speaker})
    _set_fields_set(chat, {"type", "order", "segments", "speaker"})
    _set_extra(chat, None)
    _set_private(chat, None)
    return chat
