"""``dumps``: write a :class:`Reply` in the canonical form charfmt's strict parser reads back.

Every valid :class:`Reply` can be written, and nothing in it is lost. A segment whose
tag is in the tag table and that has no ``intensity`` is written canonically; what the
canonical form cannot say is written the way lenient parsing reads it back:

* a tag outside the tag table (lenient parsing keeps ``<wink>`` as segment ``wink``)
  becomes its own element, ``<wink>hi</wink>``, its text escaped like ``<msg>``;
* an emotion with an ``intensity`` takes the attribute form
  ``<emo intensity="0.6">surprised</emo>``.

So ``parse(dumps(r), lenient=True).chats == r.chats`` for every reply, and strict
``parse(dumps(r))`` gives equal chats exactly when :func:`is_canonical` holds for ``r``;
otherwise it raises :class:`~charfmt.ParseError` naming the unknown tag (CF204), the
attribute (CF212) or the value outside its tag's list (CF131).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from charfmt._grammar.lexical import TEXT_ESCAPES
from charfmt._grammar.static import terminal_regex
from charfmt.models import Chat, Reply, Segment
from charfmt.tags import DEFAULT_TAGS, ELEMENT_SEPARATOR, TAGGED_TYPES, TagTable


def escape(text: str) -> str:
    """Escape text content: ``&``, ``<``, ``>`` become entities; nothing else changes."""
    return text.translate(TEXT_ESCAPES)


def body(chat: Chat) -> str:
    """The canonical body string of one chat."""
    return body_text(chat.type, chat.segments)


def body_text(kind: str, segments: Sequence[Segment]) -> str:
    """The body string of chat type ``kind`` holding ``segments`` (canonical where it can be)."""
    if kind not in TAGGED_TYPES:
        return escape(segments[0].text)
    return ELEMENT_SEPARATOR.join(map(element, segments))


def element(seg: Segment) -> str:
    """One element of a ``C`` body: ``<tag>content</tag>``, or its attribute form with an intensity."""
    # A key (the emotion, a cue's value) holds no '<', '>' or '&', so escaping every content
    # writes keys unchanged: the element is the same whichever table the tag comes from.
    content = escape(seg.text)
    # repr() of a float is the shortest text that float() reads back as the same number.
    attributes = "" if seg.intensity is None else f' intensity="{seg.intensity!r}"'
    return f"<{seg.tag}{attributes}>{content}</{seg.tag}>"


def is_canonical(reply: Reply, tags: TagTable | None = None) -> bool:
    """Whether strict parsing (with ``tags``) reads ``dumps(reply)`` back.

    It does when every segment of a ``C`` chat has a tag of the table and no intensity, and
    each whole value (the emotion, a cue with a closed list) is a key its tag allows: a
    cue's value one of its ``values``.
    """
    table = DEFAULT_TAGS if tags is None else tags
    return all(
        seg.intensity is None and (chat.type not in TAGGED_TYPES or _writable(seg, table))
        for chat in reply.chats
        for seg in chat.segments
    )


def _writable(seg: Segment, tags: TagTable) -> bool:
    """Whether strict parsing with ``tags`` reads this segment of a ``C`` body back (its intensity aside)."""
    spec = tags.get(seg.tag)
    if spec is None:
        return False
    if spec.content == "text":
        return True
    return (spec.values is None or seg.text in spec.values) and terminal_regex("KEY").fullmatch(seg.text) is not None


def canonical_form(reply: Reply, tags: TagTable | None = None) -> Reply:
    """``reply`` as the canonical form can say it: what strict parsing with ``tags`` reads.

    What a prompt shows the model of its own earlier answers (``render_messages``,
    ``render_text``): only what it may write. Left out: segments with a tag outside the
    tag table, whole values their tag does not allow (a cue value not in its ``values``,
    an emotion that is not a key), and a ``C`` chat left with no segment; intensities are
    dropped. Your data keeps them: this is a view, and ``dumps(reply)`` still writes everything.
    """
    table = DEFAULT_TAGS if tags is None else tags
    if is_canonical(reply, table):
        return reply
    chats = []
    for chat in reply.chats:
        segments = [
            seg if seg.intensity is None else seg.model_copy(update={"intensity": None})
            for seg in chat.segments
            if chat.type not in TAGGED_TYPES or _writable(seg, table)
        ]
        if segments:
            chats.append(chat.model_copy(update={"segments": segments}))
    return reply.model_copy(update={"chats": chats})


def _chat_object(chat: Chat) -> dict[str, object]:
    """One chat of the envelope: type, order, the speaker where a scene names one, body."""
    if chat.speaker is None:
        return {"type": chat.type, "order": chat.order, "body": body(chat)}
    return {"type": chat.type, "order": chat.order, "speaker": chat.speaker, "body": body(chat)}


def dumps(reply: Reply, *, indent: int | None = None) -> str:
    """The JSON text of ``reply``: chats sorted by order, keys type/order/body (type/order/speaker/body in a scene).

    Canonical when :func:`is_canonical` holds; otherwise the forms the module docstring
    lists, which lenient parsing reads back to equal chats. Compact and on one line by
    default; ``indent`` pretty-prints (the content stays the same).
    Non-ASCII characters are written as themselves, not as ``\\u`` escapes.
    """
    if not isinstance(reply, Reply):
        raise TypeError(
            f"dumps() writes a charfmt.Reply, not {type(reply).__name__} (parse text with charfmt.parse first)"
        )
    chats = sorted(reply.chats, key=lambda c: c.order)
    doc = {"chats": [_chat_object(c) for c in chats]}
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(doc, ensure_ascii=False, indent=indent, separators=separators)
