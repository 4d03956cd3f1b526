"""One chat of a JSON reply: its keys (type, order, speaker, body) and tags written as fields.

A chat object is read key by key, in the order written: ``type``, ``order`` and
``speaker`` say what the chat is; ``body`` (or pattern D's ``chat_body``) is read as a
body; a tag's name (pattern A, ``"emotion": "joy"``) or pattern D's ``emotion_summary``
gives a piece of that tag. A chat given as a string is its body.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable
from typing import Final

from charfmt._grammar.lexical import decode_entities
from charfmt._grammar.static import terminal_regex
from charfmt._lenient.json import JNode, OffsetMap
from charfmt._lenient.literals import drop_cut_entity, note_literals
from charfmt._lenient.marks import CHAT_KEYS, HYBRID_BODY, HYBRID_EMOTION, TAGGED
from charfmt._lenient.pieces import Piece, Result
from charfmt._lenient.state import RawChat, Recovery, short
from charfmt._lenient.table import Sample
from charfmt._lenient.tag_soup import read_elements
from charfmt.tags import TAGGED_TYPES, TEXT_TAG, TYPE_ALIASES

_HYBRID_BODY: Final = tuple(sorted(HYBRID_BODY))
_BODY_KEYS: Final = ("body", *_HYBRID_BODY)
_REPEATABLE: Final = (*CHAT_KEYS, *_HYBRID_BODY)
"""Keys whose repeat is noted (the earlier value dropped)."""
_TEXT_KEYS: Final = frozenset({*_BODY_KEYS, "text", "content", "message", "value"})
"""The keys of an object given as a body (``{"text": "…"}``) that hold its text."""
_CHAT_MEMBER: Final = frozenset({*CHAT_KEYS, "speaker", *_BODY_KEYS, *HYBRID_EMOTION})
"""A chat object's own keys (a tag's name aside)."""
_VALUE_KEYS: Final = frozenset({"name", "type", "value", "key", "label", "id", "text", "content", "emotion", "action"})
"""Keys that name the value of a pattern-A field given as an object (``{"name": "joy"}``)."""
DIGITS: Final = re.compile(r"[0-9]{1,4300}")
_INF: Final = float("inf")
PLACEHOLDER_BODY: Final = "..."
"""The body the prompt's format spec writes (``prompts/system.j2``): a model copying the spec, not a line."""


def read_chat(state: Recovery, index: int, item: JNode) -> RawChat:
    """One item of the chats: an object read key by key, a string read as a body, anything else dropped."""
    chat = RawChat(index, item)
    if item.kind == "string":
        chat.kind = "C"
        read_string(state, chat, item, tagged=True)
        return chat
    if item.kind != "object":
        state.note("CF615", "a chat that is not an object is dropped", item.start, item.end)
        return chat
    state.walk("json", Sample(keys=keys(item)))  # the shape of this chat: fields, pattern D
    bodies, summaries, fields = _read_keys(state, chat, item)
    if chat.kind is None:
        chat.kind = "C"
        if bodies and not chat.pieces:
            state.note("CF613", "a chat without a type is read as C", item.start, item.start + 1, index)
    if len({k for k, _v in bodies}) > 1:
        names = " and ".join(repr(k) for k, _v in bodies)
        state.note("CF612", f"a chat with both {names}: each is read, in order", item.start, item.start + 1, index)
    for _key, body in bodies:
        _read_body(state, chat, body)
    _drop_repeated_summaries(state, chat, summaries)
    _drop_fields_the_body_has(state, chat, fields)
    if chat.kind not in TAGGED_TYPES and chat.pieces and any(p.tag != TEXT_TAG for p in chat.pieces):
        state.note("CF613", f"a {chat.kind} chat with tag elements is read as C", item.start, item.start + 1, index)
        chat.kind = "C"
    if not item.closed:
        state.note("CF610", f"chat {index} was cut off; what arrived is kept", item.start, item.end, index)
    return chat


def _read_keys(
    state: Recovery, chat: RawChat, item: JNode
) -> tuple[list[tuple[str, JNode]], list[Piece], list[tuple[str, Piece]]]:
    """Each key of a chat object, in order; the bodies to read after them, pattern D's summaries read, and the
    pieces of tags written as fields (each with its key)."""
    index = chat.index
    bodies: list[tuple[str, JNode]] = []
    summaries: list[Piece] = []
    seen: dict[str, tuple[int, int]] = {}
    fields: list[tuple[str, Piece]] = []
    for key, ks, _ke, value in _members(state, item, index):
        lower = key.lower()
        if lower in seen and lower in _REPEATABLE:
            a, b = seen[lower]
            state.note("CF615", f"key {key!r} repeats: this earlier value is dropped", a, b, index)
            if lower in _BODY_KEYS:
                bodies = [(k, v) for k, v in bodies if k != lower]
        seen[lower] = (ks, value.end)
        if lower == "type":
            chat.kind = _type(state, value, index)
        elif lower == "order":
            chat.order = _order(state, chat, value, index)
        elif lower == "speaker":
            chat.speaker = _speaker(state, value, index)
        elif lower in _BODY_KEYS:
            bodies.append((lower, value))
        elif lower in HYBRID_EMOTION:
            before = len(chat.pieces)
            _field(state, chat, state.emotion, value, index)
            summaries += chat.pieces[before:]
        elif lower in state.tags.synonyms:
            before = len(chat.pieces)
            _field(state, chat, state.tags.synonyms[lower], value, index)
            fields += [(key, p) for p in chat.pieces[before:]]
        else:
            state.note("CF615", f"unknown key {key!r} dropped", ks, value.end, index)
    return bodies, summaries, fields


def _members(state: Recovery, item: JNode, index: int) -> list[tuple[str, int, int, JNode]]:
    """A chat object's members, with those of an object nested under a key of no chat's (``{"type": "C", "reply":
    {"order": 1, "body": "…"}}``) that holds a chat's own keys read in its place (``CF612``): the chat's keys, in
    whatever nesting they come."""
    pairs = item.pairs
    if not any(v.kind == "object" for *_k, v in pairs):
        return pairs
    own = {k.lower() for k, *_r in pairs}
    out: list[tuple[str, int, int, JNode]] = []
    todo = list(reversed(pairs))
    while todo:
        key, ks, ke, value = todo.pop()
        lower = key.lower()
        if (
            value.kind == "object"
            and lower not in _CHAT_MEMBER
            and lower not in state.tags.synonyms
            and any(k.lower() in _CHAT_MEMBER for k, *_r in value.pairs)
            and not any(k.lower() in own for k, *_r in value.pairs)
        ):
            message = f"the chat's keys nested under {key!r} read as the chat's"
            state.note("CF612", message, ks, value.start + 1, index)
            todo += reversed(value.pairs)
            continue
        out.append((key, ks, ke, value))
    return out


def _drop_repeated_summaries(state: Recovery, chat: RawChat, summaries: list[Piece]) -> None:
    """Pattern D's ``"emotion_summary"`` sums up the body: where the body shows that emotion, it is said once."""
    shown = {p.text.strip().casefold() for p in chat.pieces if p.tag == state.emotion and p not in summaries}
    for p in summaries:
        if p.text.strip().casefold() in shown:
            message = f"emotion summary {short(p.text)!r} repeats the body's emotion: read once"
            state.note("CF615", message, p.start, p.end, chat.index)
            chat.pieces.remove(p)


def _drop_fields_the_body_has(state: Recovery, chat: RawChat, fields: list[tuple[str, Piece]]) -> None:
    """A key naming a cue the body already gives (``"mood": "bad"`` beside ``<emo>annoyed</emo>``) is no second
    one: the body says it, the field is reported and dropped (``CF637``), never shown before the body's."""
    had = {p.tag for p in chat.pieces if all(p is not f for _k, f in fields)}
    for key, p in fields:
        spec = state.tags.get(p.tag)
        if p.tag in had and spec is not None and not spec.streamed:
            message = f"key {key!r} ({short(p.text)!r}) repeats the body's <{p.tag}>: the body's is read"
            state.note("CF637", message, p.start, p.end, chat.index)
            chat.pieces.remove(p)


def _type(state: Recovery, node: JNode, index: int) -> str | None:
    if node.kind not in ("string", "scalar"):
        what = "an object" if node.kind == "object" else "an array"
        state.note("CF613", f"a chat type that is {what}, not a name, is read as C", node.start, node.end, index)
        return "C"
    word = scalar_text(state, node).strip() if node.value is not None else ""
    return type_word(state, word, node.start, node.end, index)


def type_word(state: Recovery, word: str, start: int, end: int, index: int) -> str:
    """A chat type as written: ``C``, ``I``, ``E``, or an alias (``chat``, ``info``...) read as one, noted."""
    if word in ("C", "I", "E"):
        return word
    kind = TYPE_ALIASES.get(word.lower())
    if kind is None:
        state.note("CF613", f"unknown chat type {short(word)!r} read as C", start, end, index)
        return "C"
    state.note("CF613", f"chat type {word!r} read as {kind!r}", start, end, index)
    return kind


def _speaker(state: Recovery, node: JNode, index: int) -> str | None:
    """A chat's ``"speaker"`` (a scene): a name, or dropped with CF146."""
    value = node.value.strip() if node.kind == "string" and isinstance(node.value, str) else None
    if value and terminal_regex("KEY").fullmatch(value):
        return value
    state.note("CF146", "speaker is not a name: dropped", node.start, node.end, index)
    return None


def _order(state: Recovery, chat: RawChat, node: JNode, index: int) -> int | None:
    value = node.value
    if node.kind == "string" and isinstance(value, str) and DIGITS.fullmatch(value.strip()):
        state.note("CF614", f"order {short(value)!r} read as a number", node.start, node.end, index)
        value = int(value.strip())
    elif node.kind == "scalar" and isinstance(value, float) and value.is_integer() and value >= 1:
        state.note("CF614", f"order {scalar_text(state, node)} read as {int(value)}", node.start, node.end, index)
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    shown = scalar_text(state, node) if node.kind in ("string", "scalar") else node.kind
    huge = value in (_INF, -_INF) or (isinstance(value, str) and value.strip().isascii() and value.strip().isdigit())
    why = "too large" if huge else "not a whole number from 1"
    state.note("CF614", f"order {short(shown)} is {why}: numbered in reading order", node.start, node.end, index)
    chat.order_noted = True
    return None


def scalar_text(state: Recovery, node: JNode) -> str:
    """A string's value, or a number or literal as written (``1e3``, ``true``)."""
    if node.kind == "string":
        return str(node.value)
    return state.source.text[node.start : node.end]


def _field(state: Recovery, chat: RawChat, tag: str, node: JNode, index: int) -> None:
    """Pattern A: ``"emotion": "joy"``, ``"content": "…"`` as segments, in the order written.

    Arrays (``"action": ["jump", "spin"]``) are walked with a stack, not recursion:
    a model may nest them thousands deep.
    """
    stack = [node]
    while stack:
        node = stack.pop()
        if node.kind == "array":
            stack.extend(reversed(node.items))
        else:
            _field_value(state, chat, tag, node, index)


def _field_value(state: Recovery, chat: RawChat, tag: str, node: JNode, index: int) -> None:
    if node.kind == "string" and node.value:
        if tag == state.speech and TAGGED.search(str(node.value)):
            read_string(state, chat, node, tagged=True)
        else:
            chat.pieces.append(Piece(tag, _field_text(state, tag, node, index), node.start, node.end))
    elif node.kind == "object":
        _field_object(state, chat, tag, node, index)
    elif node.kind == "scalar" and node.value is not None:
        text = scalar_text(state, node)
        state.note("CF619", f"the {_kind(node)} {short(text)} read as <{tag}> text", node.start, node.end, index)
        chat.pieces.append(Piece(tag, text, node.start, node.end))
    else:
        what = "null" if node.kind == "scalar" else "an empty string"
        state.note("CF620", f"<{tag}> given as {what} is dropped", node.start, node.end, index)


def _field_text(state: Recovery, tag: str, node: JNode, index: int) -> str:
    """A field's string: an entity cut off at its end dropped, entities decoded (each noted)."""
    text = str(node.value)
    if "&" in text and not node.closed:
        cut = Result()
        text = drop_cut_entity(text, cut)
        mapper = _mapper(state, node)
        for r in cut.repairs:
            state.note(r.code, r.message, mapper(r.start), mapper(r.end), index)
    if tag == state.emotion and "&" in text and (decoded := decode_entities(text)) != text:
        state.note("CF717", f"entities in emotion {short(text)!r} decoded", node.start, node.end, index)
        text = decoded
    elif "&" in text and (decoded := decode_entities(text)) != text:
        # An entity written in a field's text is one a model escaped out of habit: never shown as is.
        state.note("CF707", f"entities in <{tag}> text decoded: {short(text)!r}", node.start, node.end, index)
        text = decoded
    return text


def _field_object(state: Recovery, chat: RawChat, tag: str, node: JNode, index: int) -> None:
    """``"emotion": {"name": "joy", "intensity": 0.8}``: the value it names, the rest reported dropped."""
    value = next(
        (v for k, _s, _e, v in node.pairs if k.lower() in _VALUE_KEYS and v.kind in ("string", "scalar")), None
    )
    level = next((v for k, _s, _e, v in node.pairs if k.lower() in ("intensity", "level")), None)
    if value is None or value.value is None or value.value == "":
        state.note("CF620", f"<{tag}> given as an object with no name or value is dropped", node.start, node.end, index)
        return
    text = scalar_text(state, value)
    state.note("CF619", f"<{tag}> given as an object: its value {short(text)!r} is read", node.start, node.end, index)
    intensity = None
    if tag == state.emotion and level is not None and level.kind == "scalar":
        intensity = _unit(level.value)
    for k, ks, _ke, v in node.pairs:
        if v is not value and (v is not level or intensity is None):
            state.note("CF620", f"key {k!r} of the <{tag}> object dropped", ks, v.end, index)
    chat.pieces.append(Piece(tag, text, value.start, value.end, intensity))


def _read_body(state: Recovery, chat: RawChat, body: JNode) -> None:
    if body.kind == "array":
        state.note("CF612", "a body given as a list of lines is joined with newlines", body.start, body.start + 1)
        for item in body.items:
            _body_part(state, chat, item, "a body line")
    else:
        _body_part(state, chat, body, "a body")


def _body_part(state: Recovery, chat: RawChat, node: JNode, what: str) -> None:
    """A body, or one line of a body given as a list: text, a literal's spelling, or dropped."""
    if node.kind == "string":
        read_string(state, chat, node, tagged=chat.kind in TAGGED_TYPES)
    elif node.kind == "scalar" and node.value is not None:
        # A number or literal where the body's text belongs: its spelling, as text.
        text = scalar_text(state, node)
        state.note("CF619", f"the {_kind(node)} {short(text)} read as body text", node.start, node.end, chat.index)
        tag = state.speech if chat.kind in TAGGED_TYPES else TEXT_TAG
        add_text(chat, tag, text, node.start, node.end)
    elif node.kind == "object" and (texts := _texts_of(node)):
        # ('"body": {"text": "<msg>…"}': the body's text nested an object deeper)
        state.note("CF612", f"{what} given as an object: the text under its key read", node.start, node.start + 1)
        for value in texts:
            _body_part(state, chat, value, what)
    else:
        kind = "null" if node.kind == "scalar" else f"an {node.kind}"
        state.note("CF620", f"{what} that is {kind}, not text, is dropped", node.start, node.end, chat.index)


def _texts_of(node: JNode) -> list[JNode]:
    """The values under the text keys (``_TEXT_KEYS``) of an object given as a body, objects among them opened in
    turn (no recursion: nesting depth costs no stack), in order; none of them an object."""
    found: list[JNode] = []
    todo = [node]
    while todo:
        top = todo.pop()
        if top.kind != "object":
            found.append(top)
            continue
        todo += reversed([v for k, *_r, v in top.pairs if k.lower() in _TEXT_KEYS])
    return found


def add_text(chat: RawChat, tag: str, text: str, start: int, end: int) -> None:
    """Text of a body: an I/E body given as lines is one text."""
    if tag == TEXT_TAG and chat.pieces and chat.pieces[-1].tag == TEXT_TAG:
        chat.pieces[-1].text += "\n" + text
        chat.pieces[-1].end = end
    elif text:
        chat.pieces.append(Piece(tag, text, start, end))


def read_string(state: Recovery, chat: RawChat, node: JNode, *, tagged: bool) -> None:
    """A body given as a string: read as tags (``tagged``) or as plain text."""
    text = str(node.value)
    if text.strip() == PLACEHOLDER_BODY and node.closed and tagged:
        # {"chats": [{"type": "C", "order": 1, "body": "..."}]}: the prompt's format spec echoed (a C chat's:
        # an I or E chat's "..." is plain text, valid as it is, and read so).
        message = f"a body of {PLACEHOLDER_BODY!r} is the format's placeholder, echoed from the prompt: dropped"
        state.note("CF628", message, node.start, node.end, chat.index)
        return
    mapper = _mapper(state, node)
    if not tagged:
        notes = Result()
        if not node.closed:
            text = drop_cut_entity(text, notes)
        note_literals(text, 0, notes)
        state.take(chat, notes, mapper)
        add_text(chat, TEXT_TAG, decode_entities(text), mapper(0), mapper(len(text)))
        return
    result = read_elements(text, state.reading, cut_off=not node.closed, truncated=not node.closed, in_json=True)
    state.take(chat, result, mapper)


def _mapper(state: Recovery, node: JNode) -> Callable[[int], int]:
    """The raw offset of each character of a string's value: through its escapes where it is quoted.

    A bare word has no escapes: one raw character per character.
    """
    if state.source.text[node.start : node.start + 1] in "\"'":
        return OffsetMap(node)
    return functools.partial(operator.add, node.start)


def _kind(node: JNode) -> str:
    value = node.value
    return "boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float)) else "value"


def _unit(value: object) -> float | None:
    """An intensity as 0..1: ``0.8`` or ``80`` (percent); anything else is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    number = value / 100 if value > 1 else value
    return float(number) if number <= 1 else None


def keys(node: JNode) -> frozenset[str]:
    """An object's keys, lower case: what the dialect table's ``json`` entries look at."""
    return frozenset(k.lower() for k, _s, _e, _v in node.pairs)
