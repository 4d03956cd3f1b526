"""Lenient parsing's slow path: recover a reply from whatever a model produced.

Pipeline: decode (bad UTF-8 replaced) → set aside what is not the reply (special
tokens, reasoning, code fences, prose) → read the JSON forgivingly (``tolerant``) or,
when there is none, read the text itself as a body → normalise the shape (bare array,
single chat, the design study's patterns A and D, bodies as lists of lines, type
aliases, orders) → read each body (``soup``) → apply the vocabulary policy.

Every character of the input ends up in a segment, or inside the span of a diagnostic
that says it was dropped (or is markup: JSON punctuation, keys, tags).
"""

from __future__ import annotations

import functools
import html
import math
import operator
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from charfmt import dialects
from charfmt.body import terminal_regex
from charfmt.diagnostics import Diagnostic, in_body
from charfmt.dialects import CHATS_KEYS, HYBRID_BODY, HYBRID_EMOTION, TAGGED, Sample
from charfmt.models import Chat, Reply, Segment, Vocabulary, construct_trusted
from charfmt.soup import (
    Piece,
    Repair,
    Result,
    blank,
    cut_scaffolding,
    decode_entities,
    drop_cut_entity,
    note_literals,
    read_body,
    read_front_matter,
    read_prose,
    scaffolding,
)
from charfmt.tags import DEFAULT_TAGS, REASONING_TAGS, TAGGED_TYPES, TEXT_TAG, TYPE_ALIASES, TagTable
from charfmt.tolerant import JNode, OffsetMap, Reader
from charfmt.vocabulary import apply_vocabulary

_SPECIAL: Final = re.compile(r"<\|[^|<>\n]{1,40}\|>|</s>|<s>|\[/?INST\]|<eos>|<bos>|<\|end▁of▁sentence\|>")
_FENCE: Final = re.compile(r"(?:```|~~~)[A-Za-z0-9_+-]*")
_REASONING_OPEN: Final = re.compile(r"<\s*(" + "|".join(sorted(REASONING_TAGS)) + r")\s*>", re.I)
_HEADING: Final = re.compile(
    r"^[ \t]*+(?:#{1,6}[ \t]*+|\*\*)?(?:thinking|thoughts?|reasoning|analysis|思考)(?:\*\*)?[ \t]*+:?[ \t]*+$",
    re.I | re.M,
)
_ANSWER_HEADING: Final = re.compile(
    r"^[ \t]*+(?:#{1,6}[ \t]*+|\*\*)?(?:answer|response|reply|final(?: answer)?|output|回答)(?:\*\*)?[ \t]*+:?[ \t]*+$",
    re.I | re.M,
)
_REASONING_CLOSE: Final = re.compile(r"<\s*/\s*(" + "|".join(sorted(REASONING_TAGS)) + r")\s*>", re.I)
_JSON_START: Final = re.compile(r"[{\[]")
_NON_SPACE: Final = re.compile(r"\S")
_DIGITS: Final = re.compile(r"[0-9]{1,4300}")
_INF: Final = float("inf")
_VALUE_KEYS: Final = frozenset({"name", "type", "value", "key", "label", "id", "text", "content", "emotion", "action"})
"""Keys that name the value of a pattern-A field given as an object (``{"name": "joy"}``)."""
_CHANNEL: Final = re.compile(r"<\|channel\|>\s*(\w+)\s*(?:<\|constrain\|>\s*\w*\s*)?<\|message\|>")
_CHAT_KEYS: Final = ("type", "order", "body")
_HYBRID_BODY: Final = tuple(sorted(HYBRID_BODY))
_CHAT_ELEMENT: Final = re.compile(
    r"[<＜]\s*+([/／]\s*+)?(user_chats?(?:_type)?|chat(?:_type)?)(?![\w\-])([^<>＜＞]*+)[>＞]", re.I
)
"""An element of the echoed request form: ``<user_chats>``, ``<chat type="C" order="2">``, their closers."""
_CUT_ELEMENT: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?(?:[A-Za-z_][\w.\-:]*+(?:\s[^<>＜＞]*+)?)?\Z")
"""A tag the input ends inside: ``<chat type="C``, ``</ms``, ``</``, a lone ``<``."""
_CUT_NAME: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?([A-Za-z_][\w.\-:]*+)?")
_ATTRIBUTE: Final = re.compile(r"""([\w\-:]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>/]+))""")
_CUT_FRONT_MATTER: Final = re.compile(
    r"\A\s*(?P<open>-{1,3})(?:[ \t]*\n(?P<lines>(?:[ \t]*[\w-]+[ \t]*:[^\n]*\n)*)"
    r"(?P<partial>[ \t]*[\w-]*[ \t]*(?::[^\n]*)?|-{1,3}[ \t]*))?\s*\Z"
)
"""Front matter the input ends inside: ``-``, ``---\nemotion: joy\n-``, ``---\nemo``."""
_ELEMENT_OPEN: Final = re.compile(r"[<＜]\s*+([A-Za-z][\w.\-]*+)[^<>＜＞/]*+[>＞]")
_CHANNEL_END: Final = re.compile(r"<\|(?:end|start|channel|return|call)\|>")


@dataclass(slots=True)
class _Source:
    """The text being read, and how to find each of its offsets in the raw input."""

    text: str
    raw: str
    map: array[int] | None = None  # text offset -> raw offset, when the text is a rewrite

    def to_raw(self, i: int) -> int:
        if self.map is None:
            return i
        return self.map[min(max(i, 0), len(self.map) - 1)]


@dataclass(slots=True)
class _RawChat:
    index: int
    node: JNode | None
    kind: str | None = None
    order: int | None = None
    speaker: str | None = None
    pieces: list[Piece] = field(default_factory=list)
    order_noted: bool = False  # an unusable order was reported where it stands


class Recovery:
    """One lenient read of one input."""

    def __init__(
        self, raw: str, vocabulary: Vocabulary | None, tags: TagTable = DEFAULT_TAGS, turn: tuple[str, ...] = ()
    ) -> None:
        self.source = _Source(raw, raw)
        self.turn = tuple(_words(t) for t in turn if t.strip())  # what the player said this turn
        self.vocabulary = vocabulary
        self.tags = tags
        self.emotion = tags.emotion.name
        self.speech = tags.speech.name
        # Where content that cannot be an emotion key goes: what the character does (or says).
        self.narration = tags.action.name if tags.action is not None else self.speech
        self.diagnostics: list[Diagnostic] = []
        self.dialects: list[str] = []
        self.reasoning: list[str] = []  # the model's own reasoning before the reply, kept apart
        self._json_reader: Reader | None = None

    # -- diagnostics, in raw offsets -------------------------------------------------
    def note(self, code: str, message: str, start: int, end: int, chat: int | None = None) -> None:
        raw = self.source.raw
        a, b = self.source.to_raw(start), self.source.to_raw(end) if end > start else self.source.to_raw(start)
        if end > start and self.source.map is not None:
            b = self.source.to_raw(end - 1) + 1
        self.diagnostics.append(Diagnostic.at(raw, code, message, a, max(a, b), chat=chat))

    def dialect(self, name: str) -> None:
        """Record that the reader met dialect ``name`` (an entry of the dialect table)."""
        if name not in self.dialects:
            self.dialects.append(name)

    def walk(self, chain: dialects.Chain, sample: Sample, after: str | None = None) -> dialects.DialectRule | None:
        """The first entry of ``chain`` (after entry ``after``) that detects ``sample``, recorded as met."""
        entry = dialects.first(chain, sample, self.tags, after=after)
        if entry is not None:
            self.dialect(entry.name)
        return entry

    def keep_reasoning(self, text: str) -> None:
        """Keep the model's reasoning (``Reply.reasoning``), apart from the chats."""
        if text.strip():
            self.reasoning.append(text.strip())

    # -- the pipeline -------------------------------------------------------------------
    def run(self) -> Reply:
        mark = len(self.diagnostics)
        start, end = self._reply_region(self.source.text, json=True)
        region_notes = len(self.diagnostics)
        chats: list[_RawChat] = []
        found = self._json(start, end, chats)
        if not found:
            # The '{' or '[' that reasoning seemed to stand before is no JSON reply: the
            # text is the reply, so read what stands around it again as a reply without JSON.
            del self.diagnostics[mark:region_notes]
            self.reasoning.clear()
            start, end = self._reply_region(self.source.text, json=False)
            self._bare(start, end, chats)
        return self._finish(chats)

    def _reply_region(self, text: str, *, json: bool) -> tuple[int, int]:
        """Set aside special tokens, reasoning and fences around the reply; the region left.

        A reasoning tag is the model's reasoning only where it stands before the reply:
        before the JSON, or, in a reply without JSON, first and followed by the reply. Inside
        a tag-soup reply ``<thought>`` is the format's own element. One pass: each search
        starts where the last one ended.
        """
        start, end = 0, len(text)
        channels = list(_CHANNEL.finditer(text))
        if channels:
            last = channels[-1]
            for channel in channels[:-1]:
                closer = _CHANNEL_END.search(text, channel.end(), last.start())
                self.keep_reasoning(text[channel.end() : closer.start() if closer else last.start()])
            self.note(
                "CF603",
                "the model's other channels (analysis) before the final message are kept apart as reasoning",
                0,
                last.end(),
            )
            start = last.end()
        first = self._json_start(text, start, end) if json else end  # the first '{' or '[' at or after start
        if json and self._elements_before(start, first):
            return start, end  # '<thought>…</thought><msg>…</msg>{…}': a chat before the JSON, not reasoning
        while True:
            if first < end:
                m = _REASONING_OPEN.search(text, start, first)
            else:
                m = _REASONING_OPEN.match(text, self.source_skip(start))
                if m is not None and m.group(1).lower() in self.tags:
                    m = None  # <thought> opening a reply without JSON is its first element
            if m is None:
                break
            close = _reasoning_close(m.group(1)).search(text, m.end())
            if first >= end and (close is None or not _NON_SPACE.search(text, close.end())):
                break  # no reply follows: it is the reply's own (thought) element
            stop = close.end() if close is not None else first
            self._drop(start, m.start())
            self.keep_reasoning(text[m.end() : close.start() if close is not None else first])
            self.note("CF603", f"reasoning <{m.group(1)}> kept apart as reasoning, never shown", m.start(), stop)
            start = stop
            if first < start:
                first = self._json_start(text, start, end) if json else end
        orphan = None
        for found in _REASONING_CLOSE.finditer(text, start, first):
            orphan = found  # the last closer before the JSON
        if (
            orphan is not None
            and (first < end or orphan.group(1).lower() not in self.tags)
            and _NON_SPACE.search(text, orphan.end())
            and not _REASONING_OPEN.search(text, 0, orphan.start())
        ):
            stop = orphan.end()
            self.keep_reasoning(text[start : orphan.start()])
            message = f"everything before the orphan </{orphan.group(1)}> is reasoning, kept apart"
            self.note("CF603", message, start, stop)
            start = stop
        heading = _HEADING.search(text, start)
        if heading and not text[start : heading.start()].strip():
            answer = _ANSWER_HEADING.search(text, heading.end())
            stop = answer.end() if answer else self._json_start(text, heading.end(), end)
            self.keep_reasoning(text[heading.end() : answer.start() if answer else stop])
            self.note("CF603", "a reasoning section is kept apart as reasoning, never shown", heading.start(), stop)
            start = stop
        return start, end

    def _elements_before(self, start: int, at: int) -> bool:
        """Whether ``text[start:at]`` holds an element of the format that is no reasoning tag (``<msg>…</msg>``)."""
        return self._has_elements(self.source.text, start, at)

    def _has_elements(self, text: str, start: int = 0, at: int | None = None) -> bool:
        """Whether ``text`` (from ``start`` to ``at``) holds an element of the format that is no reasoning tag."""
        found = _ELEMENT_OPEN.finditer(text, start, len(text) if at is None else at)
        names = {m.group(1).lower() for m in found}
        return any(name in self.tags.synonyms and name not in REASONING_TAGS for name in names)

    def _lead(self, start: int, at: int, chats: list[_RawChat]) -> None:
        """The text before the JSON reply: a chat of its own where it holds elements of the format, else dropped."""
        if not self._elements_before(start, at):
            self._drop(start, at)
            return
        text = self.source.text
        self._drop_fences_only(start, at)
        region = _FENCE.sub(_blank, _SPECIAL.sub(_blank, text[start:at]))
        lead = len(region) - len(region.lstrip())
        message = "elements written before the JSON reply are read as a chat of their own"
        self.note("CF626", message, start + lead, start + len(region.rstrip()))
        entry = self.walk("text", Sample(region))
        if entry is not None and entry.name == "user-chats":
            self._user_chats(start, region, chats)
            return
        chat = _RawChat(len(chats), None, "C")
        self._text_body(chat, region, start, entry, cut_off=False)
        chats.append(chat)

    def _json_start(self, text: str, start: int, end: int) -> int:
        m = _JSON_START.search(text, start, end)
        return m.start() if m else end

    def _drop(self, start: int, end: int) -> None:
        """Say what the text outside the reply was, and that it is dropped."""
        text = self.source.text
        segment = text[start:end]
        if not segment.strip():
            return
        for m in _SPECIAL.finditer(segment):
            self.note("CF604", f"special token {m.group()} dropped", start + m.start(), start + m.end())
        rest = _SPECIAL.sub(lambda m: " " * len(m.group()), segment)
        for m in _FENCE.finditer(rest):
            self.note("CF602", "code fence dropped", start + m.start(), start + m.end())
        rest = _FENCE.sub(lambda m: " " * len(m.group()), rest)
        stripped = rest.strip()
        if stripped:
            lead = len(rest) - len(rest.lstrip())
            self.note(
                "CF601",
                f"text outside the reply dropped: {stripped[:40]!r}",
                start + lead,
                start + lead + len(stripped),
            )

    # -- JSON -----------------------------------------------------------------------------
    def _json(self, start: int, end: int, chats: list[_RawChat]) -> bool:
        text = self.source.text
        tries = 0
        pos = start
        while tries < 8:
            at = self._json_start(text, pos, end)
            if at >= end:
                return False
            tries += 1
            if text.startswith("&quot;", self.source_skip(at + 1)) or text.startswith("{&quot;", at):
                self._unescape_html(at, end)
                text = self.source.text
                end = len(text)
            reader = self._reader(end)
            mark = len(reader.repairs)
            node = reader.read(at)
            if self._looks_like_reply(node):
                self._lead(start, at, chats)
                self._repairs(reader.repairs[mark:])
                self._shape(node, chats)
                after = node.end if node.end >= 0 else end
                self._more(after, end, chats)
                return True
            if tries == 1 and self._cut_reply(start, at, end, node):
                # '{', '{"chats":': only the beginning of a JSON reply arrived. It is a reply
                # cut off before its first chat (as '{"chats":[' is), not prose.
                self._drop(start, at)
                self._repairs(reader.repairs[mark:])
                for key, ks, _ke, value in node.pairs:
                    self.note("CF615", f"unknown key {_short(key)!r} dropped", ks, value.end)
                return True
            # The next candidate starts after this value: "[[[[…" is read once, not once per bracket.
            pos = node.end if node.end > at else at + 1
        return False

    def _cut_reply(self, start: int, at: int, end: int, node: JNode) -> bool:
        """The region is only the beginning of a JSON object (or array of objects), cut before it closed.

        Nothing but space, code fences and special tokens stands before it, and what
        follows ``at`` is a prefix of valid JSON that never closes: ``{``, ``{"chats":``,
        ``[{"type": "C", "bo``. Prose with a brace in it is no such prefix.
        """
        text = self.source.text
        if node.closed or node.kind not in ("object", "array") or node.end != end:
            return False
        if _FENCE.sub("", _SPECIAL.sub("", text[start:at])).strip():
            return False
        if text[at] == "[" and text[at + 1 : end].strip()[:1] not in ("", "{"):
            return False
        return _json_prefix(text, at, end)

    def _reader(self, end: int) -> Reader:
        """One JSON reader per source text: each candidate value is read once, never re-copied."""
        text = self.source.text
        if self._json_reader is None or self._json_reader.text is not text or end != len(text):
            self._json_reader = Reader(text if end == len(text) else text[:end])
        return self._json_reader

    def source_skip(self, pos: int) -> int:
        text = self.source.text
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    def _unescape_html(self, at: int, end: int) -> None:
        """``{&quot;chats&quot;: ...}``: the JSON was HTML-escaped once; read it unescaped."""
        text = self.source.text
        out: list[str] = []
        mapping = array("l")
        pos = 0
        for m in re.finditer(r"&(?:quot|amp|lt|gt|apos|#\d+|#x[0-9a-fA-F]+);", text[at:end]):
            lo, hi = at + m.start(), at + m.end()
            out.append(text[pos:lo])
            mapping.extend(range(pos, lo))
            out.append(html.unescape(m.group()))
            mapping.append(lo)
            pos = hi
        out.append(text[pos:])
        mapping.extend(range(pos, len(text)))
        mapping.append(len(text))
        self.note("CF609", "the JSON was HTML-escaped (&quot;); read unescaped", at, end)
        self.source = _Source("".join(out), self.source.raw, array("l", (self.source.to_raw(i) for i in mapping)))

    def _looks_like_reply(self, node: JNode) -> bool:
        if node.kind == "object":
            keys = {k.lower() for k, _s, _e, _v in node.pairs}
            return bool(keys & {*CHATS_KEYS, *_CHAT_KEYS, *self.tags.synonyms, *HYBRID_BODY})
        if node.kind == "array":
            # "[joy] やったー！" is a bracket tag, not JSON: an array counts when it holds
            # chat objects, or quoted strings written in the tag language.
            text = self.source.text
            return any(
                item.kind == "object"
                or (
                    item.kind == "string"
                    and text[item.start : item.start + 1] in "\"'"
                    and TAGGED.search(str(item.value))
                )
                for item in node.items
            )
        return False

    def _more(self, after: int, end: int, chats: list[_RawChat]) -> None:
        """Text after the JSON: more JSON replies (merged), or junk (dropped)."""
        text = self.source.text
        pos = after
        while pos < end:
            at = self._json_start(text, pos, end)
            if at >= end:
                break
            reader = self._reader(end)
            mark = len(reader.repairs)
            node = reader.read(at)
            if not self._looks_like_reply(node):
                break
            self._drop(pos, at)
            self.note("CF611", "a second JSON reply follows the first: its chats are added", at, node.end)
            self._repairs(reader.repairs[mark:])
            self._shape(node, chats)
            pos = node.end if node.end > at else end
        self._drop(pos, end)

    def _repairs(self, repairs: list[Repair]) -> None:
        for r in repairs:
            self.note(r.code, r.message, r.start, r.end)

    def _shape(self, node: JNode, chats: list[_RawChat]) -> None:
        """Find the chats in whatever shape the JSON has."""
        if node.kind == "array":
            self.walk("json", Sample(array=True, top=True))
            self.note("CF612", 'a bare array of chats, without {"chats": ...}', node.start, node.start + 1)
            items = node.items
        else:
            holder = next((v for k, _s, _e, v in node.pairs if k.lower() in CHATS_KEYS), None)
            named = next((k for k, _s, _e, v in node.pairs if v is holder), "chats")
            if holder is not None and named != "chats":
                self.note("CF612", f'{named!r} read as "chats"', node.start, node.start + 1)
            if holder is None:
                # Always one of hybrid, single-chat, json-fields: it looked like a reply by those keys.
                self.walk("json", Sample(keys=_keys(node), top=True))
                self.note("CF612", 'a single chat object without {"chats": [...]}', node.start, node.start + 1)
                items = [node]
            else:
                for k, ks, _ke, v in node.pairs:
                    if v is not holder:
                        self.note("CF615", f"unknown key {k!r} dropped", ks, v.end)
                if holder.kind == "array":
                    items = holder.items
                else:
                    self.note("CF612", '"chats" holds one chat, not an array', holder.start, holder.start + 1)
                    items = [holder]
        for item in items:
            chats.append(self._chat(len(chats), item))

    def _chat(self, index: int, item: JNode) -> _RawChat:
        chat = _RawChat(index, item)
        if item.kind == "string":
            chat.kind = "C"
            self._read_string(chat, item, tagged=True)
            return chat
        if item.kind != "object":
            self.note("CF615", "a chat that is not an object is dropped", item.start, item.end)
            return chat
        self.walk("json", Sample(keys=_keys(item)))  # the shape of this chat: fields, pattern D
        bodies: list[tuple[str, JNode]] = []
        summaries: list[Piece] = []
        seen: dict[str, tuple[int, int]] = {}
        for key, ks, _ke, value in item.pairs:
            lower = key.lower()
            if lower in seen and lower in (*_CHAT_KEYS, *_HYBRID_BODY):
                a, b = seen[lower]
                self.note("CF615", f"key {key!r} repeats: this earlier value is dropped", a, b, index)
                if lower in ("body", *_HYBRID_BODY):
                    bodies = [(k, v) for k, v in bodies if k != lower]
            seen[lower] = (ks, value.end)
            if lower == "type":
                chat.kind = self._type(value, index)
            elif lower == "order":
                chat.order = self._order(chat, value, index)
            elif lower == "speaker":
                chat.speaker = self._speaker(value, index)
            elif lower in ("body", *_HYBRID_BODY):
                bodies.append((lower, value))
            elif lower in HYBRID_EMOTION:
                before = len(chat.pieces)
                self._field(chat, self.emotion, value, index)
                summaries += chat.pieces[before:]
            elif lower in self.tags.synonyms:
                self._field(chat, self.tags.synonyms[lower], value, index)
            else:
                self.note("CF615", f"unknown key {key!r} dropped", ks, value.end, index)
        if chat.kind is None:
            chat.kind = "C"
            if bodies and not chat.pieces:
                self.note("CF613", "a chat without a type is read as C", item.start, item.start + 1, index)
        if len({k for k, _v in bodies}) > 1:
            names = " and ".join(repr(k) for k, _v in bodies)
            self.note("CF612", f"a chat with both {names}: each is read, in order", item.start, item.start + 1, index)
        for _key, body in bodies:
            self._read_body(chat, body)
        self._drop_repeated_summaries(chat, summaries)
        if chat.kind not in TAGGED_TYPES and chat.pieces and any(p.tag != TEXT_TAG for p in chat.pieces):
            self.note("CF613", f"a {chat.kind} chat with tag elements is read as C", item.start, item.start + 1, index)
            chat.kind = "C"
        if not item.closed:
            self.note("CF610", f"chat {index} was cut off; what arrived is kept", item.start, item.end, index)
        return chat

    def _drop_repeated_summaries(self, chat: _RawChat, summaries: list[Piece]) -> None:
        """Pattern D's ``"emotion_summary"`` sums up the body: where the body shows that emotion, it is said once."""
        shown = {p.text.strip().casefold() for p in chat.pieces if p.tag == self.emotion and p not in summaries}
        for p in summaries:
            if p.text.strip().casefold() in shown:
                message = f"emotion summary {_short(p.text)!r} repeats the body's emotion: read once"
                self.note("CF615", message, p.start, p.end, chat.index)
                chat.pieces.remove(p)

    def _type(self, node: JNode, index: int) -> str | None:
        if node.kind not in ("string", "scalar"):
            what = "an object" if node.kind == "object" else "an array"
            self.note("CF613", f"a chat type that is {what}, not a name, is read as C", node.start, node.end, index)
            return "C"
        word = self._scalar_text(node).strip() if node.value is not None else ""
        return self._type_word(word, node.start, node.end, index)

    def _type_word(self, word: str, start: int, end: int, index: int) -> str:
        """A chat type as written: ``C``, ``I``, ``E``, or an alias (``chat``, ``info``...) read as one, noted."""
        if word in ("C", "I", "E"):
            return word
        kind = TYPE_ALIASES.get(word.lower())
        if kind is None:
            self.note("CF613", f"unknown chat type {_short(word)!r} read as C", start, end, index)
            return "C"
        self.note("CF613", f"chat type {word!r} read as {kind!r}", start, end, index)
        return kind

    def _speaker(self, node: JNode, index: int) -> str | None:
        """A chat's ``"speaker"`` (a scene): a name, or dropped with CF146."""
        value = node.value.strip() if node.kind == "string" and isinstance(node.value, str) else None
        if value and terminal_regex("KEY").fullmatch(value):
            return value
        self.note("CF146", "speaker is not a name: dropped", node.start, node.end, index)
        return None

    def _order(self, chat: _RawChat, node: JNode, index: int) -> int | None:
        value = node.value
        if node.kind == "string" and isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
            self.note("CF614", f"order {_short(value)!r} read as a number", node.start, node.end, index)
            value = int(value.strip())
        elif node.kind == "scalar" and isinstance(value, float) and value.is_integer() and value >= 1:
            self.note("CF614", f"order {self._scalar_text(node)} read as {int(value)}", node.start, node.end, index)
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        shown = self._scalar_text(node) if node.kind in ("string", "scalar") else node.kind
        huge = value in (_INF, -_INF) or (
            isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()
        )
        why = "too large" if huge else "not a whole number from 1"
        self.note("CF614", f"order {_short(shown)} is {why}: numbered in reading order", node.start, node.end, index)
        chat.order_noted = True
        return None

    def _scalar_text(self, node: JNode) -> str:
        """A string's value, or a number or literal as written (``1e3``, ``true``)."""
        if node.kind == "string":
            return str(node.value)
        return self.source.text[node.start : node.end]

    def _field(self, chat: _RawChat, tag: str, node: JNode, index: int) -> None:
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
                self._field_value(chat, tag, node, index)

    def _field_value(self, chat: _RawChat, tag: str, node: JNode, index: int) -> None:
        if node.kind == "string" and node.value:
            text = str(node.value)
            if tag == self.speech and TAGGED.search(text):
                self._read_string(chat, node, tagged=True)
                return
            if "&" in text and not node.closed:
                cut = Result()
                text = drop_cut_entity(text, cut)
                quoted = _quoted(self.source.text, node)
                mapper = OffsetMap(node) if quoted else functools.partial(operator.add, node.start)
                for r in cut.repairs:
                    self.note(r.code, r.message, mapper(r.start), mapper(r.end), index)
            if tag == self.emotion and "&" in text and (decoded := decode_entities(text)) != text:
                self.note("CF717", f"entities in emotion {_short(text)!r} decoded", node.start, node.end, index)
                text = decoded
            elif "&" in text and (decoded := decode_entities(text)) != text:
                # An entity written in a field's text is one a model escaped out of habit: never shown as is.
                self.note("CF707", f"entities in <{tag}> text decoded: {_short(text)!r}", node.start, node.end, index)
                text = decoded
            chat.pieces.append(Piece(tag, text, node.start, node.end))
        elif node.kind == "object":
            self._field_object(chat, tag, node, index)
        elif node.kind == "scalar" and node.value is not None:
            text = self._scalar_text(node)
            self.note("CF619", f"the {_kind(node)} {_short(text)} read as <{tag}> text", node.start, node.end, index)
            chat.pieces.append(Piece(tag, text, node.start, node.end))
        else:
            what = "null" if node.kind == "scalar" else "an empty string"
            self.note("CF620", f"<{tag}> given as {what} is dropped", node.start, node.end, index)

    def _field_object(self, chat: _RawChat, tag: str, node: JNode, index: int) -> None:
        """``"emotion": {"name": "joy", "intensity": 0.8}``: the value it names, the rest reported dropped."""
        value = next(
            (v for k, _s, _e, v in node.pairs if k.lower() in _VALUE_KEYS and v.kind in ("string", "scalar")), None
        )
        level = next((v for k, _s, _e, v in node.pairs if k.lower() in ("intensity", "level")), None)
        if value is None or value.value is None or value.value == "":
            self.note(
                "CF620", f"<{tag}> given as an object with no name or value is dropped", node.start, node.end, index
            )
            return
        text = self._scalar_text(value)
        self.note(
            "CF619", f"<{tag}> given as an object: its value {_short(text)!r} is read", node.start, node.end, index
        )
        intensity = None
        if tag == self.emotion and level is not None and level.kind == "scalar":
            intensity = _unit(level.value)
        for k, ks, _ke, v in node.pairs:
            if v is not value and (v is not level or intensity is None):
                self.note("CF620", f"key {k!r} of the <{tag}> object dropped", ks, v.end, index)
        chat.pieces.append(Piece(tag, text, value.start, value.end, intensity))

    def _read_body(self, chat: _RawChat, body: JNode) -> None:
        if body.kind == "array":
            self.note("CF612", "a body given as a list of lines is joined with newlines", body.start, body.start + 1)
            for item in body.items:
                self._body_part(chat, item, "a body line")
        else:
            self._body_part(chat, body, "a body")

    def _body_part(self, chat: _RawChat, node: JNode, what: str) -> None:
        """A body, or one line of a body given as a list: text, a literal's spelling, or dropped."""
        if node.kind == "string":
            self._read_string(chat, node, tagged=chat.kind in TAGGED_TYPES)
        elif node.kind == "scalar" and node.value is not None:
            self._body_scalar(chat, node)
        else:
            kind = "null" if node.kind == "scalar" else f"an {node.kind}"
            self.note("CF620", f"{what} that is {kind}, not text, is dropped", node.start, node.end, chat.index)

    def _body_scalar(self, chat: _RawChat, node: JNode) -> None:
        """A number or literal where the body's text belongs: its spelling, as text."""
        text = self._scalar_text(node)
        self.note("CF619", f"the {_kind(node)} {_short(text)} read as body text", node.start, node.end, chat.index)
        tag = self.speech if chat.kind in TAGGED_TYPES else TEXT_TAG
        self._add_text(chat, tag, text, node.start, node.end)

    def _add_text(self, chat: _RawChat, tag: str, text: str, start: int, end: int) -> None:
        if tag == TEXT_TAG and chat.pieces and chat.pieces[-1].tag == TEXT_TAG:
            chat.pieces[-1].text += "\n" + text  # an I/E body given as lines: one text
            chat.pieces[-1].end = end
        elif text:
            chat.pieces.append(Piece(tag, text, start, end))

    def _read_string(self, chat: _RawChat, node: JNode, *, tagged: bool) -> None:
        text = str(node.value)
        if text.strip() == _PLACEHOLDER_BODY and node.closed:
            # {"chats": [{"type": "C", "order": 1, "body": "..."}]}: the prompt's format spec echoed.
            message = f"a body of {_PLACEHOLDER_BODY!r} is the format's placeholder, echoed from the prompt: dropped"
            self.note("CF628", message, node.start, node.end, chat.index)
            return
        # A bare word has no escapes: one raw character per character.
        quoted = _quoted(self.source.text, node)
        mapper: Callable[[int], int] = OffsetMap(node) if quoted else functools.partial(operator.add, node.start)
        if not tagged:
            notes = Result()
            if not node.closed:
                text = drop_cut_entity(text, notes)
            note_literals(text, 0, notes)
            self._take(chat, notes, mapper)
            self._add_text(chat, TEXT_TAG, decode_entities(text), mapper(0), mapper(len(text)))
            return
        result = read_body(text, self.vocabulary, cut_off=not node.closed, tags=self.tags)
        self._take(chat, result, mapper)

    def _take(self, chat: _RawChat, result: Result, mapper: Callable[[int], int]) -> None:
        for d in result.dialects:
            self.dialect(d)
        for r in result.repairs:
            self.note(r.code, r.message, mapper(r.start), mapper(r.end), chat.index)
        for p in result.pieces:
            chat.pieces.append(Piece(p.tag, p.text, mapper(p.start), mapper(p.end), p.intensity))

    # -- no JSON ---------------------------------------------------------------------------
    def _bare(self, start: int, end: int, chats: list[_RawChat]) -> None:
        """No JSON: the text itself is the reply, read as the first entry of the table's ``text`` chain says."""
        text = self._drop_scaffolding(start, end)
        region = text[start:end]
        self._drop_fences_only(start, end)
        cleaned = _FENCE.sub(_blank, _SPECIAL.sub(_blank, region))
        if not cleaned.strip():
            if not text.strip():
                self.note("CF003", 'input is empty; expected {"chats": [...]}', 0, len(text))
            return
        at = start + len(region) - len(region.lstrip())
        cleaned = self._drop_cut_tag(cleaned, start)
        if not cleaned.strip():
            self.dialect("plain-text")
            self.note("CF616", "no JSON reply, and nothing of the reply but a tag cut off at the end", at, at)
            return
        entry = self.walk("text", Sample(cleaned))
        if entry is not None and entry.name == "user-chats" and (blocks := self._request_blocks(cleaned)):
            # The request form echoed beside the reply, or the player's own turn echoed: not the reply.
            outside = blank(cleaned, blocks)
            turn = self._echoes_turn(cleaned, blocks)
            if self._has_elements(outside) or turn:
                for a, b, _m in blocks:
                    if turn:
                        message = "the player's own turn echoed: not the character's speech, dropped"
                        self.note("CF625", message, start + a, start + b)
                    else:
                        message = "the request form (<user_chats>) echoed beside the reply is dropped"
                        self.note("CF624", message, start + a, start + b)
                self.dialects.remove("user-chats")
                if not outside.strip():
                    return
                cleaned = outside
                entry = self.walk("text", Sample(cleaned), after="user-chats")
        if entry is not None and entry.name == "user-chats":
            message = "no JSON reply: the reply echoes the request form, each <chat> is read as a chat"
            self.note("CF616", message, at, at)
            self._user_chats(start, cleaned, chats)
            return
        self.note("CF616", "no JSON reply: the text itself is read as the character's chat", at, at)
        chat = _RawChat(len(chats), None, "C")
        self._text_body(chat, cleaned, start, entry)
        chats.append(chat)

    def _request_blocks(self, text: str) -> list[tuple[int, int, str]]:
        """The spans of the ``<user_chats>…</user_chats>`` blocks in ``text`` (one left open runs to its end)."""
        blocks: list[tuple[int, int, str]] = []
        opened: int | None = None  # where the block being read began
        wrapped = chat = False  # inside a <user_chats> wrapper; inside a <chat>
        found = False  # a wrapper was seen: without one, the form is no block beside a reply
        for m in _CHAT_ELEMENT.finditer(text):
            name, closing = _form_name(m, inside_chat=chat), m.group(1) is not None
            if name == "chat":
                chat = not closing
            else:
                wrapped, found = not closing, True
            if opened is None and not closing:
                opened = m.start()
            elif opened is not None and closing and not wrapped and not chat:
                blocks.append((opened, m.end(), ""))
                opened = None
        if opened is not None:
            blocks.append((opened, len(text), ""))
        return blocks if found else []

    def _echoes_turn(self, text: str, blocks: list[tuple[int, int, str]]) -> bool:
        """Whether the blocks repeat the player's turn (``turn=``): each line spoken in them is one the player said.

        A block the input ends inside may end in the middle of a line: its start is enough.
        """
        if not self.turn:
            return False
        said = [_words(t) for t in self.turn]
        spoken = []
        for a, b, _m in blocks:
            body = _CHAT_ELEMENT.sub(_blank, text[a:b])
            spoken += [_words(p.text) for p in read_body(body, None, tags=self.tags).pieces if p.tag == self.speech]
        spoken = [s for s in spoken if s]
        return bool(spoken) and all(any(s in t for t in said) for s in spoken)

    def _drop_scaffolding(self, start: int, end: int) -> str:
        """Blank the chat-template scaffolding of a reply without JSON (``soup.scaffolding``), noted ``CF622``.

        The source keeps its length (no offset moves); returns its text.
        """
        text = self.source.text
        spans = scaffolding(text[start:end])
        if end == len(text) and (cut := cut_scaffolding(text[start:end])) is not None:
            spans = [(a, min(b, cut), m) for a, b, m in spans if a < cut]
            spans.append((cut, end - start, "the reply was cut off inside a chat-template marker: dropped"))
        if spans:
            for a, b, message in spans:
                self.note("CF622", message, start + a, start + b)
            self.source = _Source(
                text[:start] + blank(text[start:end], spans) + text[end:], self.source.raw, self.source.map
            )
        return self.source.text

    def _drop_cut_tag(self, text: str, offset: int) -> str:
        """``text`` with a tag the input ends inside (``</ms``, ``<em``, ``<chat type="C``) blanked, noted ``CF610``.

        In a reply written in tags, any tag begun at the very end is one; in prose, only
        the beginning of an element name the reader knows (``<em`` of ``<emo>``, ``<user_c``):
        ``a <b`` or ``x <y`` stay text. ``text`` runs to the end of the input.
        """
        m = _CUT_ELEMENT.search(text, max(0, len(text) - 200))
        if m is None:
            return text
        name = (_CUT_NAME.match(m.group()).group(1) or "").lower()  # type: ignore[union-attr]
        if TAGGED.search(text, 0, m.start()) is None:
            known = (*(n.lower() for n in self.tags.names), *self.tags.synonyms, "user_chats", "chat", *REASONING_TAGS)
            attributes = len(m.group().rstrip()) > _CUT_NAME.match(m.group()).end()  # type: ignore[union-attr]
            base = name.partition(".")[0]  # <emotion.jo: dot notation
            if not any(k.startswith(base) and (k == base or not (attributes or "." in name)) for k in known):
                return text
        self.note(
            "CF610",
            f"the reply was cut off inside a tag: {_short(m.group())!r} dropped",
            offset + m.start(),
            offset + len(text),
        )
        return text[: m.start()] + " " * (len(text) - m.start())

    def _text_body(
        self, chat: _RawChat, text: str, offset: int, entry: dialects.DialectRule | None, *, cut_off: bool = True
    ) -> None:
        """One chat written with no JSON around it: front matter, then tags or prose, as the ``text`` chain says.

        ``cut_off``: ``text`` runs to the end of the input (what it ends inside is cut in half).
        """
        pos = 0
        if cut_off and (entry is None or entry.name == "plain-text"):
            pos = self._cut_front_matter(chat, text, offset)
            if pos:
                entry = self.walk("text", Sample(text[pos:]), after="front-matter")
        if entry is not None and entry.name == "front-matter":
            found = Result()
            pos = read_front_matter(text, 0, found, self.tags)
            self._take(chat, found, lambda i: offset + i)
            entry = self.walk("text", Sample(text[pos:]), after="front-matter")
        rest = text[pos:]
        if entry is not None and entry.name == "bare-tags":
            inner = offset + pos + len(rest) - len(rest.lstrip())
            # The text runs to the end of the input: a tag or an entity begun there is cut in half.
            result = read_body(rest.strip(), self.vocabulary, cut_off=cut_off, tags=self.tags)
        else:
            inner = offset + pos
            result = Result()
            read_prose(rest, self.vocabulary, result, tags=self.tags, cut_off=cut_off)
        self._take(chat, result, lambda i: inner + i)

    def _cut_front_matter(self, chat: _RawChat, text: str, offset: int) -> int:
        """Front matter the input ends inside (``---\nemotion: jo``): its whole lines read, the rest dropped.

        Returns how many characters it took (0: ``text`` is no such beginning).
        """
        m = _CUT_FRONT_MATTER.match(text)
        if m is None:
            return 0
        partial = m.group("partial") or ""
        name = partial.split(":", 1)[0].strip().lower()
        if ":" not in partial and partial.strip("-") and not any(k.startswith(name) for k in self.tags.synonyms):
            return 0  # "---\nHello": a rule, then text
        found = Result()
        if m.group("lines"):
            block = text[: m.start("partial")] + "---\n"
            read_front_matter(block, 0, found, self.tags)
            self.dialect("front-matter")
        self._take(chat, found, lambda i: offset + i)
        start = m.start("partial") if m.group("lines") else m.start("open")
        message = "the reply was cut off inside front matter: the unfinished line dropped"
        self.note("CF610", message, offset + start, offset + len(text))
        return len(text)

    def _user_chats(self, offset: int, text: str, chats: list[_RawChat]) -> None:
        """The request form echoed: ``<user_chats><chat type="C">…</chat>…``, each ``<chat>`` one chat.

        A chat's type and order come from its attributes (a missing order is its place); a
        ``<chat>`` left open ends at the next one or at the end; text between chats is
        dropped (``CF601``). A ``<user_chats>`` wrapper with no ``<chat>`` in it holds one ``C`` chat.
        """
        if (cut := _CUT_ELEMENT.search(text)) is not None:
            # The form is markup: a tag the input ends inside (<chat type="C, <ms) is half an element.
            self.note(
                "CF702",
                f"a tag cut off at the end is dropped: {cut.group()!r}",
                offset + cut.start(),
                offset + len(text),
            )
            text = text[: cut.start()]
        elements = list(_CHAT_ELEMENT.finditer(text))
        if not any(_form_name(m, inside_chat=False) == "chat" for m in elements):
            blanked = text
            for m in elements:
                self.note(
                    "CF612", f"the request form's {m.group()} is markup, removed", offset + m.start(), offset + m.end()
                )
                blanked = blanked[: m.start()] + " " * (m.end() - m.start()) + blanked[m.end() :]
            chat = _RawChat(len(chats), None, "C")
            self._text_body(
                chat, blanked, offset, dialects.first("text", Sample(blanked), self.tags, after="user-chats")
            )
            chats.append(chat)
            return
        open_chat: tuple[_RawChat, int] | None = None  # the chat being read and where its body starts
        pos = 0  # where text not yet accounted for starts
        for m in elements:
            closing, name = m.group(1) is not None, _form_name(m, inside_chat=open_chat is not None)
            if open_chat is not None:
                chat, body = open_chat
                if not (closing and name == "chat"):
                    self.note(
                        "CF702",
                        "<chat> is not closed; the next element closes it",
                        offset + m.start(),
                        offset + m.start(),
                    )
                self._chat_body(chat, text, body, m.start(), offset, cut_off=False)
                open_chat = None
                if closing and name == "chat":
                    pos = m.end()
                    continue
            else:
                self._drop(offset + pos, offset + m.start())
                if closing and name == "chat":
                    self.note(
                        "CF712", "a closing </chat> with no open chat is dropped", offset + m.start(), offset + m.end()
                    )
            if name == "chat" and not closing:
                chat = _RawChat(len(chats), None)
                self._chat_attributes(chat, m, offset)
                chats.append(chat)
                open_chat = (chat, m.end())
            pos = m.end()
        if open_chat is not None:
            chat, body = open_chat
            self.note(
                "CF702", "<chat> is not closed before the end", offset + len(text), offset + len(text), chat.index
            )
            self._chat_body(chat, text, body, len(text), offset, cut_off=True)
        else:
            self._drop(offset + pos, offset + len(text))

    def _chat_attributes(self, chat: _RawChat, m: re.Match[str], offset: int) -> None:
        """``<chat type="C" order="2">``: the chat's type and order."""
        attrs = {
            a.lower(): (v1 or v2 or v3, offset + m.start(3) + found.start(), offset + m.start(3) + found.end())
            for found in _ATTRIBUTE.finditer(m.group(3))
            for a, v1, v2, v3 in [found.groups()]
        }
        if "type" in attrs:
            word, a, b = attrs["type"]
            chat.kind = self._type_word(word.strip(), a, b, chat.index)
        else:
            chat.kind = "C"
            self.note("CF613", "a <chat> without a type is read as C", offset + m.start(), offset + m.end(), chat.index)
        if "order" in attrs:
            word, a, b = attrs["order"]
            if _DIGITS.fullmatch(word.strip()) and int(word) >= 1:
                chat.order = int(word)
            else:
                self.note(
                    "CF614",
                    f"order {_short(word)!r} is not a whole number from 1: numbered in reading order",
                    a,
                    b,
                    chat.index,
                )
                chat.order_noted = True

    def _chat_body(self, chat: _RawChat, text: str, start: int, end: int, offset: int, *, cut_off: bool) -> None:
        """The body of an echoed ``<chat>``: elements for ``C``, plain text for ``I``/``E``."""
        body = text[start:end]
        inner = offset + start + len(body) - len(body.lstrip())
        body = body.strip()
        if chat.kind not in TAGGED_TYPES and TAGGED.search(body):
            self.note("CF613", f"a {chat.kind} chat with tag elements is read as C", inner, inner, chat.index)
            chat.kind = "C"
        if chat.kind in TAGGED_TYPES:
            read = read_body(body, self.vocabulary, cut_off=cut_off, tags=self.tags)
            if self.turn:
                read.pieces = [p for p in read.pieces if not self._said_by_player(p, read)]
            self._take(chat, read, lambda i: inner + i)
            return
        notes = Result()
        if cut_off:
            body = drop_cut_entity(body, notes)
        note_literals(body, 0, notes)
        self._take(chat, notes, lambda i: inner + i)
        self._add_text(chat, TEXT_TAG, decode_entities(body), inner, inner + len(body))

    def _said_by_player(self, piece: Piece, read: Result) -> bool:
        """Whether ``piece`` (in the request form echoed) is speech the player said this turn, word for word.

        Such a line is the prompt's own turn copied back, not the character's: noted ``CF625``.
        """
        if piece.tag != self.speech or _words(piece.text) not in self.turn:
            return False
        message = "the player's own turn echoed: not the character's speech, dropped"
        read.note("CF625", message, piece.start, piece.end)
        return True

    def _drop_fences_only(self, start: int, end: int) -> None:
        text = self.source.text
        for m in _SPECIAL.finditer(text, start, end):
            self.note("CF604", f"special token {m.group()} dropped", m.start(), m.end())
        for m in _FENCE.finditer(text, start, end):
            self.note("CF602", "code fence dropped", m.start(), m.end())

    # -- the result -------------------------------------------------------------------------
    def _finish(self, raw_chats: list[_RawChat]) -> Reply:
        chats: list[tuple[_RawChat, list[Segment]]] = []
        for rc in raw_chats:
            segments = self._segments(rc)
            if segments:
                chats.append((rc, segments))
            elif rc.node is not None:
                self.note(
                    "CF615", f"chat {rc.index} has no content and is dropped", rc.node.start, rc.node.end, rc.index
                )
        numbered = []
        seen: set[int] = set()
        top = 0
        unsorted = False
        for rc, segments in chats:
            order = rc.order
            if order is None or order in seen:
                # A missing or repeated order takes the next free number: the chats before
                # it keep theirs, so a streamed reply never has to renumber what it showed.
                at = rc.node.start if rc.node is not None else 0
                if rc.node is not None and not (order is None and rc.order_noted):
                    why = "has no order" if order is None else f"repeats order {order}"
                    self.note("CF614", f"chat {rc.index} {why}: numbered {top + 1}", at, at, rc.index)
                order = top + 1
            unsorted = unsorted or order < top
            seen.add(order)
            top = max(top, order)
            numbered.append((order, (rc, segments)))
        if unsorted:
            first = chats[0][0].node
            at = first.start if first is not None else 0
            self.note("CF113", "chats are not listed in order; presented sorted", at, at)
        built = [
            construct_trusted(
                Chat, {"type": rc.kind or "C", "order": order, "segments": segments, "speaker": rc.speaker}
            )
            for order, (rc, segments) in numbered
        ]
        built.sort(key=lambda c: c.order)
        dialect = dialects.winner(self.dialects)
        if dialect != "canonical":
            self.diagnostics.append(
                Diagnostic.at(self.source.raw, "CF600", f"dialect: {dialect}", 0, 0, severity="info")
            )
        self.diagnostics.sort(key=lambda d: (d.offset, d.end))
        return construct_trusted(
            Reply,
            {
                "chats": built,
                "diagnostics": self.diagnostics,
                "reasoning": "\n\n".join(self.reasoning) or None,
                "dialect": dialect,
            },
        )

    def _key(self, p: Piece, index: int) -> str | None:
        """``p``'s text as an emotion key (the grammar's KEY), repaired and noted.

        ``""``: nothing is left (dropped, noted); ``None``: it cannot be a key.

        Runs of whitespace and control characters become one space, the ends are stripped
        (entities were decoded where the key was read). Text with ``<``, ``>`` or ``&`` left is no key: unless the
        vocabulary names a key for it, the caller keeps it as an action (``CF718``).
        """
        text = p.text
        key = _SURROGATE.sub("\ufffd", _KEY_SPACE.sub(" ", text).strip())
        if not key:
            self.note("CF702", "an empty emotion is dropped", p.start, p.end, index)
            return ""
        if _KEY.fullmatch(key):
            if key != text:
                self.note("CF717", f"emotion key {_short(text)!r} read as {_short(key)!r}", p.start, p.end, index)
            return key
        if self.vocabulary is not None:
            decision = apply_vocabulary(key, self.vocabulary)
            if decision.code in _MAPPED and decision.key is not None:
                self.note(decision.code or "", in_body(index, decision.message), p.start, p.end, index)
                return decision.key
        self.note(
            "CF718",
            f"emotion {_short(text)!r} cannot be a key (markup characters): kept as an action",
            p.start,
            p.end,
            index,
        )
        p.text = key
        return None

    def _segments(self, rc: _RawChat) -> list[Segment]:
        segments: list[Segment] = []
        kind = rc.kind or "C"
        for p in rc.pieces:
            tag, text = p.tag, p.text
            if kind in TAGGED_TYPES and tag == TEXT_TAG:
                tag = self.speech
            if kind not in TAGGED_TYPES:
                tag, text = TEXT_TAG, (segments[0].text + "\n" + text if segments else text)
                segments = []
            if tag == self.emotion:
                key = self._key(p, rc.index)
                if key == "":
                    continue
                if key is None:
                    tag, text = (
                        self.narration,
                        p.text,
                    )  # content that cannot be a key is kept, as what the character does
                else:
                    decision = apply_vocabulary(key, self.vocabulary)
                    if decision.code:  # worded as strict parsing words it (and the stream)
                        message = in_body(rc.index, decision.message)
                        self.note(decision.code, message, p.start, p.end, rc.index)
                    if decision.key is None:
                        continue
                    text = decision.key
            if _BAD_TEXT.search(text):
                self.note("CF714", "control characters or lone surrogates replaced by U+FFFD", p.start, p.end, rc.index)
                text = _BAD_TEXT.sub("\ufffd", text)
            if tag not in self.tags and tag != TEXT_TAG and not re.fullmatch(r"[a-z_][a-z0-9_\-]*", tag):
                tag = self.speech
            intensity = p.intensity if tag == self.emotion else None  # how strong an emotion is; nothing else has one
            segments.append(construct_trusted(Segment, {"tag": tag, "text": text, "intensity": intensity}))
        if kind not in TAGGED_TYPES and segments and not segments[0].text:
            return []
        return segments


def _form_name(m: re.Match[str], *, inside_chat: bool) -> str:
    """The element of the request form a ``_CHAT_ELEMENT`` match is: ``user_chats`` or ``chat``.

    Models mangle it: ``<user_chat_type="C">`` opens a chat, ``<user_chat>`` wraps, and its
    closer closes the chat that is open, else the wrapper.
    """
    name = m.group(2).lower()
    if name in ("user_chats", "chat"):
        return name
    if name.startswith("chat") or "=" in m.group(3) or (m.group(1) is not None and inside_chat):
        return "chat"
    return "user_chats"


_PLACEHOLDER_BODY: Final = "..."
"""The body the prompt's format spec writes (``prompts/system.j2``): a model copying the spec, not a line."""


def _words(text: str) -> str:
    """``text`` compared as words: entities decoded, case and runs of space folded."""
    return " ".join(decode_entities(text).casefold().split())


def _blank(m: re.Match[str]) -> str:
    """A match replaced by as many spaces: offsets after it stay put."""
    return " " * len(m.group())


@functools.lru_cache(maxsize=16)
def _reasoning_close(name: str) -> re.Pattern[str]:
    """The closer of reasoning tag ``name``, any case and spacing."""
    return re.compile(r"<\s*/\s*" + re.escape(name) + r"\s*>", re.I)


def _short(text: str) -> str:
    """A value for a message: long ones cut (a 5,000-digit number is not worth quoting)."""
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(node: JNode) -> str:
    value = node.value
    return "boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float)) else "value"


def _quoted(text: str, node: JNode) -> bool:
    """A quoted string (escapes decoded), not a bare word read as one."""
    return text[node.start : node.start + 1] in "\"'"


def _unit(value: object) -> float | None:
    """An intensity as 0..1: ``0.8`` or ``80`` (percent); anything else is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    number = value / 100 if value > 1 else value
    return float(number) if number <= 1 else None


_BAD_TEXT: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_KEY: Final = terminal_regex("KEY")
"""An emotion key, as the grammar (and ``Segment``'s validator) defines it."""
_KEY_SPACE: Final = re.compile(r"[\s\x00-\x1f\x7f]+")
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")
_MAPPED: Final = frozenset({"CF302", "CF303", "CF304"})
"""Vocabulary decisions that replace a word with one of the vocabulary's keys."""


_JSON_TOKEN: Final = re.compile(
    r"""[ \t\r\n]*+(?:(?P<p>[{}\[\]:,])|(?P<s>"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+")"""
    r"|(?P<v>-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?(?![0-9.eE+\-])|true|false|null))"
)
_JSON_CUT_STRING: Final = re.compile(
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+(?:\\(?:u[0-9a-fA-F]{0,3})?)?\Z'
)
_JSON_CUT_VALUE: Final = re.compile(
    r"(?:-|-?(?:0|[1-9][0-9]*+)(?:\.[0-9]*+)?(?:[eE][-+]?[0-9]*+)?|t(?:ru?)?|f(?:a(?:ls?)?)?|n(?:ul?)?)\Z"
)


def _json_prefix(text: str, start: int, end: int) -> bool:
    """``text[start:end]`` is the beginning of valid JSON that has not closed yet (strict JSON, no repairs)."""
    stack: list[str] = []
    want = "value"  # value, key, colon, comma (each may also be a closer where JSON allows)
    pos = start
    while True:
        m = _JSON_TOKEN.match(text, pos, end)
        if m is None:
            rest = text[pos:end].lstrip(" \t\r\n")
            if not rest:
                return bool(stack)
            cut_string = want in ("key", "value") and _JSON_CUT_STRING.match(rest) is not None
            return bool(stack) and (cut_string or (want == "value" and _JSON_CUT_VALUE.match(rest) is not None))
        pos = m.end()
        punct = m.group("p")
        if punct is None:
            if want == "key" and m.group("s") is None:
                return False
            if want not in ("key", "value"):
                return False
            want = "colon" if want == "key" else "comma"
        elif punct in "{[":
            if want != "value":
                return False
            stack.append(punct)
            want = "key" if punct == "{" else "value"
        elif punct in "}]":
            if not stack or stack[-1] != ("{" if punct == "}" else "["):
                return False
            if want not in ("comma", "key" if punct == "}" else "value"):
                return False
            stack.pop()
            if not stack:
                return False  # it closed: a whole value, not a cut one
            want = "comma"
        elif punct == ":":
            if want != "colon":
                return False
            want = "value"
        else:  # ','
            if want != "comma":
                return False
            want = "key" if stack[-1] == "{" else "value"
        if not stack:
            return False  # a scalar at the top: not an object or an array


def _keys(node: JNode) -> frozenset[str]:
    """An object's keys, lower case: what the dialect table's ``json`` entries look at."""
    return frozenset(k.lower() for k, _s, _e, _v in node.pairs)


def recover(
    raw: str,
    vocabulary: Vocabulary | None,
    prior: list[Diagnostic],
    tags: TagTable = DEFAULT_TAGS,
    turn: tuple[str, ...] = (),
) -> Reply:
    """Read ``raw`` leniently; ``prior`` diagnostics (from decoding bytes) come first.

    ``turn``: what the player said this turn; an echo of it is dropped (``CF625``).

    ``tags``: the tag table; a tag is read by its role (``tags.emotion``, ``tags.speech``...),
    so a custom tag (``DEFAULT_TAGS.extend(TagSpec("sfx", "cue", ...))``) is a known tag.
    """
    recovery = Recovery(raw, vocabulary, tags, turn)
    recovery.diagnostics.extend(prior)
    return recovery.run()
