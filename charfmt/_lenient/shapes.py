"""A JSON reply: find it in the text, read it forgivingly, and find its chats in whatever shape it has.

The shapes: ``{"chats": [...]}`` (or ``messages``, ``replies``...), a bare array of chats,
a single chat object, ``"chats"`` holding one chat; more JSON replies after the first are
merged, a JSON reply cut off before its first chat is still one. Each chat object is read
by ``fields``.
"""

from __future__ import annotations

import re
from array import array
from typing import Final

from charfmt._grammar.lexical import ENTITY, entity_char
from charfmt._lenient import fields, forms
from charfmt._lenient.json import JNode, JsonReader
from charfmt._lenient.marks import CHAT_KEYS, CHATS_KEYS, HYBRID_BODY, TAGGED
from charfmt._lenient.pieces import Repair
from charfmt._lenient.state import FENCE, SPECIAL, Recovery, Source, short
from charfmt._lenient.table import Sample, reader

_DOUBLED: Final = re.compile(r"\{[ \t\r\n]*+\"")
"""An object opening with a key: after a ``{`` alone, the brace doubled (``{\n{"chats": …``)."""
_TRIES: Final = 8
"""How many candidate values (a '{' or '[' each) are read before the text is taken for no JSON reply."""


def read_json(state: Recovery, start: int, end: int) -> bool:
    """The JSON reply in ``text[start:end]`` and what follows it, read into ``state.chats``; whether there is one."""
    pos = start
    for tries in range(1, _TRIES + 1):
        at = state.json_start(pos, end)
        if at >= end:
            return False
        text = state.source.text
        if text.startswith("{", at) and _DOUBLED.match(text, state.skip_space(at + 1)) is not None:
            at = state.skip_space(at + 1)  # ('{\n{"chats": …': a brace doubled, the reply the inner one, the ninth
            # set's #56; the brace before it is text before the reply, dropped with it: CF601)
        if text.startswith("&quot;", state.skip_space(at + 1)) or text.startswith("{&quot;", at):
            _unescape_html(state, at, end)
            end = len(state.source.text)
        json = _json_reader(state, end)
        mark = len(json.repairs)
        node = json.read(at)
        if _looks_like_reply(state, node) and _held_by_code(text, at):
            pos = node.end if node.end > at else at + 1  # a dict literal in code: the code's, no reply
            continue
        if _looks_like_reply(state, node) and _empty_beside_prose(state, start, at, node):
            return False  # '*He nods.* "Come in."\n{"chats":[]}': the words are the reply, the JSON holds none
        if _looks_like_reply(state, node):
            _read_reply(state, (start, at, end), json.repairs[mark:], node)
            return True
        if tries == 1 and _cut_reply(state, start, at, end, node):
            # '{', '{"chats":': only the beginning of a JSON reply arrived. It is a reply
            # cut off before its first chat (as '{"chats":[' is), not prose.
            state.drop(start, at)
            _repairs(state, json.repairs[mark:])
            for key, ks, _ke, value in node.pairs:
                state.note("CF615", f"unknown key {short(key)!r} dropped", ks, value.end)
            return True
        # The next candidate starts after this value: "[[[[…" is read once, not once per bracket.
        pos = node.end if node.end > at else at + 1
    return False


_FENCE_LINE: Final = re.compile(r"^[ \t]*+(?:```|~~~)[ \t]*+([\w+#.-]*+)[^\n]*+$", re.M)
_DATA_FENCES: Final = frozenset({"", "json", "jsonc", "json5", "jsonl", "text", "txt"})
"""The info strings of a fence that holds data, not code: a reply may stand anywhere in one."""


_PLACEHOLDER: Final = "CF628"
"""The code of a body that is the spec's placeholder (``fields``): JSON holding only those holds no chat."""


def _read_reply(state: Recovery, span: tuple[int, int, int], repairs: list[Repair], node: JNode) -> None:
    """The JSON reply at ``at``, what stands before it (``forms.lead``) and the JSON replies after it.

    A request form written before JSON that holds no chat (only the spec's placeholders, ``"body": "..."``)
    is the reply, not the player's turn echoed before it (found by the sixth set's #52): read again so.
    ``span``: where the text before it starts, where it starts, where the region ends.
    """
    start, at, end = span
    marks = len(state.diagnostics), len(state.chats), list(state.dialects)
    dropped = forms.lead(state, start, at)
    first, noted = len(state.chats), len(state.diagnostics)
    _repairs(state, repairs)
    _shape(state, node)
    _more(state, node.end if node.end >= 0 else end, end)
    if not dropped or any(chat.pieces for chat in state.chats[first:]):
        return
    if not any(d.code == _PLACEHOLDER for d in state.diagnostics[noted:]):
        return  # (no chat because the JSON was cut off, or empty: the form is still the player's turn)
    del state.diagnostics[marks[0] :], state.chats[marks[1] :]
    state.dialects[:] = marks[2]
    forms.lead(state, start, at, empty=True)
    state.json_reader = None  # (a new reader: its repairs noted again)
    json = _json_reader(state, end)
    node = json.read(at)
    _repairs(state, json.repairs)
    _shape(state, node)
    _more(state, node.end if node.end >= 0 else end, end)


def _held_by_code(text: str, at: int) -> bool:
    """Whether the value at ``at`` stands inside a fence of code (```` ```python ````, not ``json``) after the code's
    own text: a literal of the code (``output.append({"action": "none"})``), never a reply (found by the fifth
    set's #17). A value right after the fence's opening line is what the fence holds: a reply."""
    fence = None
    for m in _FENCE_LINE.finditer(text, 0, at):
        fence = None if fence is not None else m
    return fence is not None and fence.group(1).casefold() not in _DATA_FENCES and bool(text[fence.end() : at].strip())


def _json_reader(state: Recovery, end: int) -> JsonReader:
    """One JSON reader per source text: each candidate value is read once, never re-copied."""
    text = state.source.text
    if state.json_reader is None or state.json_reader.text is not text or end != len(text):
        state.json_reader = JsonReader(text if end == len(text) else text[:end])
    return state.json_reader


def _unescape_html(state: Recovery, at: int, end: int) -> None:
    """``{&quot;chats&quot;: ...}``: the JSON was HTML-escaped once; read it unescaped."""
    text = state.source.text
    out: list[str] = []
    mapping = array("l")
    pos = 0
    for m in ENTITY.finditer(text[at:end]):
        lo, hi = at + m.start(), at + m.end()
        out.append(text[pos:lo])
        mapping.extend(range(pos, lo))
        out.append(entity_char(m.group(1)) or m.group())  # a reference to no text character stays as written
        mapping.append(lo)
        pos = hi
    out.append(text[pos:])
    mapping.extend(range(pos, len(text)))
    mapping.append(len(text))
    state.note("CF609", "the JSON was HTML-escaped (&quot;); read unescaped", at, end)
    state.source = Source("".join(out), state.source.raw, array("l", (state.source.to_raw(i) for i in mapping)))


def _looks_like_reply(state: Recovery, node: JNode) -> bool:
    if node.kind == "object":
        keys = {k.lower() for k, _s, _e, _v in node.pairs}
        if _bare_words(state, node):
            return False  # "- {response, data}" in a list of prose: words in braces, no JSON
        return bool(keys & {*CHATS_KEYS, *CHAT_KEYS, *state.tags.synonyms, *HYBRID_BODY})
    if node.kind == "array":
        # "[joy] やったー！" is a bracket tag, not JSON: an array counts when it holds
        # chat objects, or quoted strings written in the tag language.
        text = state.source.text
        return (
            bool(node.items)
            and (
                node.items[0].kind == "object"  # "[#{%6}{}|$" in a regex: a bare word first, no chats
                or any(
                    item.kind == "string"
                    and text[item.start : item.start + 1] in "\"'"
                    and TAGGED.search(str(item.value)) is not None
                    for item in node.items
                )
            )
        )
    return False


_PREAMBLE: Final = re.compile(r"(?i)json|```|\bhere(?:'s| is| are| you go)\b|\b(?:reply|response|answer|output)\b|以下")
"""Words of a preamble announcing a JSON reply (``Sure! Here is the reply:``)."""
_WORDS: Final = re.compile(r"[^\W\d_]{2,}")


def _empty_beside_prose(state: Recovery, start: int, at: int, node: JNode) -> bool:
    """A JSON reply that holds no chat (``{"chats": []}``), on a line of its own, after words that announce
    no JSON: the words are the reply, not a preamble to it."""
    text = state.source.text
    chats = node.get("chats") if node.kind == "object" else None
    if chats is None or chats.kind != "array" or chats.items or len(node.pairs) != 1 or not node.closed:
        return False
    before, after = text[start:at], text[node.end :]
    if before.rstrip(" \t")[-1:] not in ("\n", "") or after.split("\n", 1)[0].strip():
        return False  # not on a line of its own
    return _WORDS.search(before) is not None and _PREAMBLE.search(before) is None


def _bare_words(state: Recovery, node: JNode) -> bool:
    """An object of bare words only (``{response, data}``): no quote anywhere in it, no array or object in it."""
    text = state.source.text[node.start : node.end if node.end >= 0 else len(state.source.text)]
    return not ('"' in text or "'" in text) and all(v.kind in ("string", "scalar") for _k, _s, _e, v in node.pairs)


def _cut_reply(state: Recovery, start: int, at: int, end: int, node: JNode) -> bool:
    """The region is only the beginning of a JSON object (or array of objects), cut before it closed.

    Nothing but space, code fences and special tokens stands before it, and what
    follows ``at`` is a prefix of valid JSON that never closes: ``{``, ``{"chats":``,
    ``[{"type": "C", "bo``. Prose with a brace in it is no such prefix.
    """
    text = state.source.text
    if node.closed or node.kind not in ("object", "array") or node.end != end:
        return False
    if FENCE.sub("", SPECIAL.sub("", text[start:at])).strip():
        return False
    if text[at] == "[" and text[at + 1 : end].strip()[:1] not in ("", "{"):
        return False
    return json_prefix(text, at, end)


def _more(state: Recovery, after: int, end: int) -> None:
    """Text after the JSON: more JSON replies (merged), or junk (dropped)."""
    pos = after
    while pos < end:
        at = state.json_start(pos, end)
        if at >= end:
            break
        json = _json_reader(state, end)
        mark = len(json.repairs)
        node = json.read(at)
        if not _looks_like_reply(state, node):
            break
        state.drop(pos, at)
        state.note("CF611", "a second JSON reply follows the first: its chats are added", at, node.end)
        _repairs(state, json.repairs[mark:])
        _shape(state, node)
        pos = node.end if node.end > at else end
    state.drop(pos, end)


def _repairs(state: Recovery, repairs: list[Repair]) -> None:
    for r in repairs:
        state.note(r.code, r.message, r.start, r.end)


def _shape(state: Recovery, node: JNode) -> None:
    """Find the chats in whatever shape the JSON has: ``{"chats": [...]}``, or as the ``json`` chain reads it."""
    holder = None if node.kind == "array" else next((v for k, _s, _e, v in node.pairs if k.lower() in CHATS_KEYS), None)
    if holder is not None and _empty_beside_a_chat(state, node, holder):
        # '{"chats":[],"type":"C","body":"…"}': the chat written beside its empty list (the fourth set's #12)
        state.note("CF612", "an empty chat list beside a chat's own keys: the object read as the chat",
                   holder.start, holder.end)  # fmt: skip
        items = [node]
    elif holder is not None:
        items = _held(state, node, holder)
    else:
        # Always one of the chain's entries: it looked like a reply by the keys they detect.
        sample = Sample(array=True, top=True) if node.kind == "array" else Sample(keys=fields.keys(node), top=True)
        entry = state.walk("json", sample)
        read = reader(entry, "json") if entry is not None else read_array if node.kind == "array" else read_one_chat
        items = read(state, node)
    for item in items:
        state.chats.append(fields.read_chat(state, len(state.chats), item))


def _empty_beside_a_chat(state: Recovery, node: JNode, holder: JNode) -> bool:
    """Whether ``holder`` (the chat list) holds nothing and ``node`` has a chat's body (``body``, a tag's key)."""
    if holder.kind not in ("array", "object") or holder.items or holder.pairs:
        return False
    body = {"body", *HYBRID_BODY, *state.tags.synonyms}
    return any(k.lower() in body for k, _s, _e, v in node.pairs if v is not holder)


def _held(state: Recovery, node: JNode, holder: JNode) -> list[JNode]:
    """``{"chats": [...]}`` (or ``messages``, ``replies``...): its chats; its other keys dropped."""
    named = next((k for k, _s, _e, v in node.pairs if v is holder), "chats")
    if named != "chats":
        state.note("CF612", f'{named!r} read as "chats"', node.start, node.start + 1)
    for k, ks, _ke, v in node.pairs:
        if v is not holder:
            state.note("CF615", f"unknown key {k!r} dropped", ks, v.end)
    if holder.kind == "array":
        return holder.items
    state.note("CF612", '"chats" holds one chat, not an array', holder.start, holder.start + 1)
    return [holder]


def read_array(state: Recovery, node: JNode) -> list[JNode]:
    """A bare array of chats (the ``json-array`` entry's reader)."""
    state.note("CF612", 'a bare array of chats, without {"chats": ...}', node.start, node.start + 1)
    return node.items


def read_one_chat(state: Recovery, node: JNode) -> list[JNode]:
    """One chat object as the whole reply (the reader of the ``json`` entries that detect one)."""
    state.note("CF612", 'a single chat object without {"chats": [...]}', node.start, node.start + 1)
    return [node]


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
_CLOSER_WANTS: Final = {"}": ("comma", "key"), "]": ("comma", "value")}
"""What a closer may follow: a value (``comma`` due), or nothing yet (an empty object or array)."""


def json_prefix(text: str, start: int, end: int) -> bool:
    """``text[start:end]`` is the beginning of valid JSON that has not closed yet (strict JSON, no repairs)."""
    stack: list[str] = []
    want = "value"  # value, key, colon, comma (each may also be a closer where JSON allows)
    pos = start
    while True:
        m = _JSON_TOKEN.match(text, pos, end)
        if m is None:
            return bool(stack) and _cut_token(text[pos:end].lstrip(" \t\r\n"), want)
        pos = m.end()
        punct = m.group("p")
        if punct is None:
            if want not in ("key", "value") or (want == "key" and m.group("s") is None):
                return False
            want = "colon" if want == "key" else "comma"
        elif punct in "{[":
            if want != "value":
                return False
            stack.append(punct)
            want = "key" if punct == "{" else "value"
        elif punct in "}]":
            if not stack or stack[-1] != ("{" if punct == "}" else "[") or want not in _CLOSER_WANTS[punct]:
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


def _cut_token(rest: str, want: str) -> bool:
    """What is left after the last whole token: nothing, or a string or value cut off where one is due."""
    if not rest:
        return True
    cut_string = want in ("key", "value") and _JSON_CUT_STRING.match(rest) is not None
    return cut_string or (want == "value" and _JSON_CUT_VALUE.match(rest) is not None)
