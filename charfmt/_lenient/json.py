"""A forgiving JSON reader for what models write: every repair is noted, every value keeps its raw span.

It reads strict JSON as JSON, and also: single quotes, unquoted keys, Python and
bare-word literals, trailing and missing commas, raw newlines and control characters in
strings, invalid escapes, unescaped double quotes inside strings (decided by what
follows, and by open tags in the text so far), and input cut off anywhere. It never
recurses, so nesting depth costs no stack.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Final

from charfmt._grammar.lexical import JSON_ESCAPES
from charfmt._lenient.marks import CHAT_KEYS, FORM_ELEMENT, FORM_WRAPPER, HYBRID_BODY
from charfmt._lenient.pieces import Repair


@dataclass(slots=True)
class JNode:
    """A JSON value with its raw span ``[start, end)``."""

    kind: str  # "object", "array", "string", "scalar"
    start: int
    end: int = -1
    value: Any = None  # the string, number, bool or None (for strings and scalars)
    items: list[JNode] = field(default_factory=list)  # array items
    pairs: list[tuple[str, int, int, JNode]] = field(default_factory=list)  # object: key, key span, value
    closed: bool = True  # False when the input ended inside it
    content_start: int = 0  # strings: offset of the first character after the quote
    escapes: array[int] | None = None  # strings: (decoded index, raw offset) just after each escape, flat

    def get(self, key: str) -> JNode | None:
        """The value of ``key`` in an object (the last one, as JSON readers do), or ``None``."""
        found = None
        for k, _s, _e, v in self.pairs:
            if k == key:
                found = v
        return found


_WS: Final = re.compile(r"[ \t\n\r\ufeff]*")
_WS_OR_COMMENT: Final = frozenset(" \t\n\r\ufeff/")
"""What ``_WS`` or a comment may begin with: at any other character ``skip_ws`` has nothing to skip."""
_COMMENT: Final = re.compile(r"//[^\n]*+|/\*(?:[^*]++|\*(?!/))*+(?:\*/)?")
"""A ``// line`` or ``/* block */`` comment, which models write in JSON (the design study does)."""
_NUMBER: Final = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_WORD: Final = re.compile(r"[^\s,:{}\[\]\"']+")
_LITERALS: Final = {
    "true": True, "false": False, "null": None, "True": True, "False": False, "None": None,
    "NONE": None, "NULL": None, "nil": None, "undefined": None, "TRUE": True, "FALSE": False,
}  # fmt: skip
_ESCAPES: Final = JSON_ESCAPES | {"'": "'"}  # and \' as single-quoted strings write it
_PLAIN_DQ: Final = re.compile(r'[^\\\x00-\x1f"]+')
_PLAIN_SQ: Final = re.compile(r"[^\\\x00-\x1f']+")
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_CUT_HEX: Final = re.compile(r"[0-9a-fA-F]{0,3}")
_MAX_DIGITS: Final = 4300
"""CPython refuses to convert longer digit strings to ``int`` (``sys.get_int_max_str_digits``)."""
_OPEN_TAG: Final = re.compile(r"<\s*+([A-Za-z][\w.\-]*+)[^<>]*+>")
_CLOSE_TAG: Final = re.compile(r"<\s*/")
_NEXT_REPLY: Final = re.compile(r"(?<=\n)[^\n\"{]{0,40}\{\s*\"chats\"\s*:")
"""A reply beginning on a line of its own (after a speaker label, ``Rex:``, at most)."""
_LABEL: Final = re.compile(r"[^\W\d][\w ]{0,30}:[ \t]*(?:\n|\Z)")
"""A speaker label on a line of its own (``User:``, ``Rex:``): prose between replies."""
_TAG_START: Final = re.compile(r"<\s*+/?\s*+[A-Za-z]")
_FORM_CLOSER_LINE: Final = rf"[ \t]*[<＜]\s*+[/／]\s*+(?:{FORM_ELEMENT})(?![\w\-])[^<>＜＞\n]*[>＞]"
_NEXT_FORM: Final = re.compile(
    rf"(?<=\n)(?:(?:[^\W\d][\w ]{{0,30}}:|{_FORM_CLOSER_LINE})?[ \t]*\n)*"
    rf"[ \t]*[<＜]\s*+{FORM_WRAPPER}(?![\w\-])[^<>＜＞\n]*[>＞]",
    re.I,
)
"""The request form's wrapper opened on a line of its own, with the lines right before it that hold only a speaker
label (``Scene:``, or the blanks a label dropped leaves), a closer of the form's elements (``</chat>``,
``</user_chats>``: the model wrote its body as a form) or nothing: the player's turn written after a reply (the tenth
set's #65)."""
_MANGLED_CLOSE: Final = re.compile(r"(?<![`'’”])(['’”`]{1,3})[ \t]*+(?=[}\]])[}\]]{1,4}[ \t]*+\Z")
"""A body's closing quote written wrong at its line's end, the JSON closed after it (``पूछा.''}]}``, ``...’}]``):
the model's end of the string, not its words (a quote of the character's own, ``'Tis``, ``it''s``, has a letter
after it)."""
_AFTER_CLOSE: Final = re.compile(
    rf"\n(?:[ \t]*+\n)*+[ \t]*+(?:\Z|<!--|[<＜]\s*+{FORM_WRAPPER}(?![\w\-])|[^\n\"{{]{{0,40}}\{{\s*+\"chats\""
    rf"|[^\W\d][\w ]{{0,30}}:[ \t]*+(?:\n|\Z)|<start_of_turn>|<end_of_turn>|<\|im_|\[/?INST\]|<<?[ \t]*+/?SYS)",
    re.I,
)
"""What may follow such a line where the reply has plainly ended: the end, an HTML comment, the request form, a new
reply, a speaker label on a line of its own, or a chat template's marker (blank lines before it)."""


def _mangled_close(text: str, pos: int, i: int) -> tuple[int, int] | None:
    """The span of a mangled closing quote that ends the first line of the body string opened at ``pos``
    (``_MANGLED_CLOSE``), the line at ``i`` followed by what follows a reply's end (``_AFTER_CLOSE``: a comment, a
    form, a new turn), or ``None``: the model closed its string there (the sixteenth set's #42), and what follows is
    not the body's."""
    m = _MANGLED_CLOSE.search(text, pos + 1, i)  # (no raw line break before i: asked at the first)
    if m is None or not _AFTER_CLOSE.match(text, i):
        return None
    return m.start(), m.end(1)


class _Open:
    """The containers open while a value is read, innermost last: each, the key awaiting its value, and
    whether a value was just read (a separator is due). The first is a holder of the value read."""

    __slots__ = ("after_value", "keys", "nodes", "orphan")

    def __init__(self, root: JNode) -> None:
        self.nodes = [root]
        self.keys: list[tuple[str, int, int] | None] = [None]
        self.after_value = [False]
        self.orphan = [False]  # the next value is that of a key written in an array: dropped

    def push(self, node: JNode) -> None:
        self.nodes.append(node)
        self.keys.append(None)
        self.after_value.append(False)
        self.orphan.append(False)

    def pop(self) -> JNode:
        self.keys.pop()
        self.after_value.pop()
        self.orphan.pop()
        return self.nodes.pop()


_CHAT_KEY: Final = frozenset({*CHAT_KEYS, "speaker", *HYBRID_BODY})
_MANGLED_KEY: Final = re.compile(r"[^\w]*+([A-Za-z_]++)[^\w]*+")
"""A chat object's keys (``_CHAT_KEY``), written in an array, are a chat's whose object lost a brace, not a stray
key; a key may have the punctuation of a broken object around it (``: {"order``, the fifteenth set's #56)."""


def _chat_member(reader: JsonReader, open_: _Open, key: JNode, pos: int) -> bool:
    """A chat's key written in an array (``[{"type":"C"}": {"order": 1,"body":"…"}]``, the fifteenth set's #56;
    ``["type":"C","body":"…"]``): its object lost a brace, so the key and its value are read into the object
    just before it, where that one lacks the key (``CF650``), else into an object assumed around them
    (``CF612``). Whether it was so; any other key (``"id": "a0d8…"``) goes with its value (``CF634``)."""
    m = _MANGLED_KEY.fullmatch(str(key.value))
    name = m.group(1).casefold() if m else ""
    if name not in _CHAT_KEY:
        return False
    top = open_.nodes[-1]
    prev = top.items[-1] if top.items else None
    fits = prev is not None and prev.kind == "object" and prev.closed
    if prev is not None and fits and all(k.casefold() != name for k, *_r in prev.pairs):
        message = f"key {name!r} written after its object's '}}': read into that object"
        reader.note("CF650", message, key.start, pos + 1)
        open_.push(prev)
    elif prev is None or prev.kind == "object":
        obj = JNode("object", key.start)
        top.items.append(obj)
        open_.push(obj)
        reader.note("CF612", f"key {name!r} written in an array: an object around it is assumed", key.start, pos + 1)
    else:
        return False
    open_.keys[-1] = (name, key.start, key.end)
    return True


class JsonReader:
    """Read one JSON value starting at ``pos``; ``repairs`` lists what was mended."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.repairs: list[Repair] = []
        self._noted: set[tuple[str, int]] = set()
        self._replies: list[int] | None = None  # where a reply begins on a line of its own (found once)
        self._forms: list[int] | None = None  # where a request form begins on a line of its own (found once)

    def note(self, code: str, message: str, start: int, end: int) -> None:
        if (code, start) not in self._noted:
            self._noted.add((code, start))
            self.repairs.append(Repair(code, message, start, end))

    def skip_ws(self, pos: int, *, note: bool = True) -> int:
        """The position after whitespace and comments; ``note=False`` only looks ahead."""
        text = self.text
        if pos < len(text) and text[pos] not in _WS_OR_COMMENT:  # (most calls: a value, a key, a comma is there)
            return pos
        while True:
            m = _WS.match(text, pos)
            pos = m.end() if m else pos
            if not text.startswith("/", pos) or (c := _COMMENT.match(text, pos)) is None:
                return pos
            if note:
                self.note("CF621", "comment dropped: JSON has no comments", c.start(), c.end())
            pos = c.end()

    def read(self, pos: int) -> JNode:
        """The value at ``pos`` (after whitespace); never raises."""
        text, n = self.text, len(self.text)
        root = JNode("array", pos)  # a holder: the value read ends up as its only item
        open_ = _Open(root)
        stack, keys, after_value = open_.nodes, open_.keys, open_.after_value
        while stack:
            pos = self.skip_ws(pos)
            top = stack[-1]
            if top is root and root.items:
                break
            if pos >= n:
                self._cut(open_, n)
                break
            ch = text[pos]
            if ch in "]}":
                pos = self._closer(open_, ch, pos)
                continue
            if ch == ",":
                pos = self._comma(open_, pos)
                continue
            if after_value[-1] and top is not root:
                if ch == ":" and top.kind == "array":
                    self._stray_colon(open_, pos)
                    pos += 1
                    continue
                if self._prose(pos):
                    # Words after a value, with no comma: prose after a JSON reply left open. It
                    # ends the reply here (read after it as text), never one value per word.
                    for node in stack[1:]:
                        node.end = pos
                    self.note(
                        "CF623", "prose or a tag after an unclosed JSON value ends it: what is open is closed", pos, pos
                    )
                    break
                self.note("CF605", "a missing comma between values is assumed", pos, pos)
                after_value[-1] = False
            if top.kind == "object" and keys[-1] is None and ch == "{" and self._reopen(open_, pos):
                pos += 1
            elif top.kind == "object" and keys[-1] is None:
                pos = self._key_and_colon(open_, pos)
            elif ch == ":":
                self._stray_colon(open_, pos)
                pos += 1
            elif ch in "{[":
                node = JNode("object" if ch == "{" else "array", pos)
                self._attach(top, keys, node, open_.orphan)
                open_.push(node)
                pos += 1
            else:
                node, pos = self._string(pos, in_body=self._is_body(keys)) if ch in "\"'" else self._scalar(pos)
                self._attach(top, keys, node, open_.orphan)
                after_value[-1] = True
        return root.items[0] if root.items else JNode("scalar", pos, pos, None, closed=False)

    def _reopen(self, open_: _Open, pos: int) -> bool:
        """A ``{`` where a key is due, after a member whose value is an object (``{"chat": {"type": "C"},
        {"body": "…"}}``): that object was closed too early, and this one's members are read into it (``CF650``;
        found by the third set's #22). Whether it was so."""
        top = open_.nodes[-1]
        last = top.pairs[-1][3] if top.pairs else None
        if last is None or last.kind != "object" or not last.closed:
            return False
        self.note("CF650", "an object where a key is due: its members read into the object before it", pos, pos + 1)
        open_.push(last)
        return True

    def _stray_colon(self, open_: _Open, pos: int) -> None:
        """A ``:`` where no key is due. After a string in an array (``[{…}, "id": "a0d8…"]``) the string was a
        key whose object lost its braces: no chat, so it goes with its value (``CF634``); else it is dropped."""
        top = open_.nodes[-1]
        last = top.items[-1] if top.kind == "array" and top is not open_.nodes[0] and top.items else None
        if last is not None and last.kind == "string" and self.text[last.end : pos].strip() == "":
            top.items.pop()
            if _chat_member(self, open_, last, pos):
                return
            open_.orphan[-1], open_.after_value[-1] = True, False
            message = f"key {str(last.value)[:40]!r} written in an array, no object around it: dropped with its value"
            self.note("CF634", message, last.start, pos + 1)
            return
        self.note("CF601", "a stray ':' is dropped", pos, pos + 1)

    def _cut(self, open_: _Open, n: int) -> None:
        """The input ends with containers open: each is closed where it ends."""
        for node in open_.nodes[1:]:
            node.closed = False
            node.end = n
        if len(open_.nodes) > 1:
            self.note("CF610", "the reply was cut off: open strings, arrays and objects are closed", n, n)

    def _closer(self, open_: _Open, ch: str, pos: int) -> int:
        """A ``]`` or ``}``: it closes the container it matches (those left open inside it first), else is dropped."""
        stack = open_.nodes
        top = stack[-1]
        if top is not stack[0] and (ch == "]") == (top.kind == "array"):
            key = open_.keys[-1]
            if key is not None:
                self.note("CF606", f"key {key[0]!r} has no value", pos, pos)
            top.end = pos + 1
            open_.pop()
            open_.after_value[-1] = True
        elif any((ch == "]") == (node.kind == "array") for node in stack[1:]):
            # '}' where ']' is due ('[{…}}'): the containers it skips were left open; it closes
            # them and the one it matches, and prose after it stays prose.
            while (ch == "]") != (stack[-1].kind == "array"):
                skipped = open_.pop()
                skipped.end = pos
                want = "]" if skipped.kind == "array" else "}"
                self.note("CF605", f"a missing {want!r} is assumed before {ch!r}", pos, pos)
            return pos  # the matching container is closed by this character, on the next pass
        else:
            self.note("CF601", f"an unmatched {ch!r} is dropped", pos, pos + 1)
        return pos + 1

    def _comma(self, open_: _Open, pos: int) -> int:
        """A ``,``: due after a value (a trailing one before a closer is noted), else stray."""
        if open_.after_value[-1] and open_.nodes[-1] is not open_.nodes[0]:
            open_.after_value[-1] = False
            nxt = self.skip_ws(pos + 1)
            if nxt < len(self.text) and self.text[nxt] in "]}":
                self.note("CF605", "a trailing comma is dropped", pos, pos + 1)
        else:
            self.note("CF605", "a stray comma is dropped", pos, pos + 1)
        return pos + 1

    def _key_and_colon(self, open_: _Open, pos: int) -> int:
        """An object's key, and the ``:`` after it (assumed where it is missing)."""
        key, kstart, pos = self._key(pos)
        pos = self.skip_ws(pos)
        if pos < len(self.text) and self.text[pos] == ":":
            pos += 1
        else:
            self.note("CF606", "a missing ':' after a key is assumed", pos, pos)
        open_.keys[-1] = (key, kstart, kstart + len(key))
        return pos

    def _prose(self, pos: int) -> bool:
        """Whether the text at ``pos`` is words of prose (a bare word, no literal, space, another word) or a tag."""
        text = self.text
        if _TAG_START.match(text, pos) is not None or _LABEL.match(text, pos) is not None:
            return True  # '<msg>No, I…', 'User:' on a line of its own after a value: never a bare word of the JSON
        m = _WORD.match(text, pos)
        if m is None or m.group() in _LITERALS or _NUMBER.fullmatch(m.group()):
            return False
        after = m.end()
        while after < len(text) and text[after] in " \t":
            after += 1
        return after > m.end() and _WORD.match(text, after) is not None

    def _is_body(self, keys: list[tuple[str, int, int] | None]) -> bool:
        key = keys[-1]
        return key is not None and key[0] in ("body", "chat_body", "content", "message", "text")

    def _attach(self, top: JNode, keys: list[tuple[str, int, int] | None], node: JNode, orphan: list[bool]) -> None:
        if orphan[-1]:  # the value of a key written in an array (``_stray_colon``)
            orphan[-1] = False
            if node.kind in ("string", "scalar"):
                self.note("CF634", "the value of a key written in an array: dropped", node.start, node.end)
                return
        if top.kind == "object":
            key = keys[-1]
            assert key is not None
            top.pairs.append((key[0], key[1], key[2], node))
            keys[-1] = None
        else:
            top.items.append(node)

    def _key(self, pos: int) -> tuple[str, int, int]:
        text = self.text
        if text[pos] in "\"'":
            node, end = self._string(pos, in_body=False)
            if text[pos] == "'":
                self.note("CF606", "single-quoted key read as a string", pos, end)
            return str(node.value), pos, end
        m = _WORD.match(text, pos)
        end = m.end() if m else pos + 1
        self.note("CF606", f"unquoted key {text[pos:end]!r} read as a string", pos, end)
        return text[pos:end], pos, end

    def _scalar(self, pos: int) -> tuple[JNode, int]:
        text = self.text
        m = _NUMBER.match(text, pos)
        if m and (m.end() >= len(text) or not (text[m.end()].isalnum() or text[m.end()] == "_")):
            raw = m.group()
            value: Any
            if not re.fullmatch(r"[-+]?\d+", raw):
                try:
                    value = float(raw)  # a huge exponent is inf
                except ValueError:  # digits of other scripts that float() does not take
                    value = raw
            elif len(raw.lstrip("+-")) > _MAX_DIGITS:
                value = float("-inf") if raw.startswith("-") else float("inf")
                self.note(
                    "CF617", f"an integer of {len(raw.lstrip('+-'))} digits is read as a huge number", pos, m.end()
                )
            else:
                value = int(raw)
            return JNode("scalar", pos, m.end(), value), m.end()
        m = _WORD.match(text, pos)
        end = m.end() if m else pos + 1
        word = text[pos:end]
        if word in _LITERALS:
            if word not in ("true", "false", "null"):
                self.note("CF606", f"{word} read as {_LITERALS[word]!r}", pos, end)
            return JNode("scalar", pos, end, _LITERALS[word]), end
        self.note("CF606", f"bare word {word!r} read as a string", pos, end)
        return JNode("string", pos, end, word, content_start=pos), end

    def _string(self, pos: int, *, in_body: bool) -> tuple[JNode, int]:
        """A quoted string; an inner quote ends it only if what follows could follow a string."""
        text, n = self.text, len(self.text)
        quote = text[pos]
        if quote == "'":
            self.note("CF606", "single-quoted string read as a string", pos, pos + 1)
        parts: list[str] = []
        i = pos + 1
        plain = _PLAIN_DQ if quote == '"' else _PLAIN_SQ
        open_tags = 0  # elements opened minus closed in the text so far (bodies only), kept as we go
        decoded = 0  # characters in parts so far
        escapes: array[int] | None = None  # where decoded and raw offsets part: see JNode.escapes
        broken = False  # a raw line break was read (and did not end the string)
        stop = n  # where the string ends if no quote ends it: the end, or a request form after it (CF629)
        while i < stop:
            m = plain.match(text, i, stop)
            if m:
                run = m.group()
                parts.append(run)
                decoded += len(run)
                if in_body and "<" in run:
                    open_tags += len(_OPEN_TAG.findall(run)) - len(_CLOSE_TAG.findall(run))
                i = m.end()
                if i >= stop:
                    break
            ch = text[i]
            if ch == quote:
                if self._ends_string(i, open_tags > 0):
                    node = JNode("string", pos, i + 1, "".join(parts), content_start=pos + 1, escapes=escapes)
                    return node, i + 1
                self.note("CF607", "an unescaped quote inside a string is kept as text", i, i + 1)
                parts.append(ch)
                decoded += 1
                i += 1
            elif ch == "\\":
                before = len(parts)
                i = self._escape(i, parts)
                decoded += sum(len(p) for p in parts[before:])
                if escapes is None:
                    escapes = array("q")
                escapes.extend((decoded, i))
            else:  # a raw control character
                if in_body and ch == "\n" and not broken and (close := _mangled_close(text, pos, i)) is not None:
                    at, end = close
                    message = f"a body whose closing quote is written {text[at:end]!r} ends where the JSON closes"
                    self.note("CF629", message, at, end)
                    node = JNode("string", pos, at, "".join(parts)[: at - i], content_start=pos + 1, escapes=escapes)
                    return node, end
                if in_body and ch == "\n" and not broken and self._runs_into_next_reply(i):
                    self.note("CF629", "a body left open runs into the next reply: it ends at its line break", i, i)
                    node = JNode("string", pos, i, "".join(parts), content_start=pos + 1, escapes=escapes)
                    return node, i
                if in_body and ch == "\n" and not broken and (at := self._runs_into_form(i)) >= 0:
                    # (the body's lines up to the form's label are the body: only the form and its label are not)
                    message = "a body left open runs into a request form written after it: it ends before the form"
                    self.note("CF629", message, at, at)
                    stop = at
                broken = broken or ch == "\n"  # (asked at the first line break only: no rescans per line)
                self.note("CF608", f"raw control character U+{ord(ch):04X} inside a string", i, i + 1)
                parts.append(ch)
                decoded += 1
                i += 1
        if stop < n:
            return JNode("string", pos, stop, "".join(parts), content_start=pos + 1, escapes=escapes), stop
        self.note("CF610", "the reply was cut off inside a string", n, n)
        node = JNode("string", pos, n, "".join(parts), closed=False, content_start=pos + 1, escapes=escapes)
        return node, n

    def _reply_starts(self) -> list[int]:
        """Where a reply begins on a line of its own (``_NEXT_REPLY``), found once per text."""
        if self._replies is None:
            self._replies = [m.start() for m in _NEXT_REPLY.finditer(self.text)]
        return self._replies

    def _runs_into_next_reply(self, i: int) -> bool:
        """Whether a body string, at its raw line break ``i``, overran its end: a new reply (``{"chats":``)
        begins on a later line and no quote before it could end the string (the model never closed it)."""
        replies = self._reply_starts()
        k = bisect_right(replies, i)
        if k == len(replies):
            return False
        at = replies[k]
        return not any(self._ends_string(q, False) for q in _quotes(self.text, i, at))

    def _runs_into_form(self, i: int) -> int:
        """Where a body string, at its raw line break ``i``, overran its end, or -1: the request form's wrapper
        (``<user_chats>``) opens on a later line (with its label, closers and blank lines before it: ``_NEXT_FORM``),
        and no quote from ``i`` to the next form or reply after that one (or the end) could end the string: the
        model never closed it (a body that holds a form and closes after it is read as before). The line break
        before that form's lines is where it ends."""
        text = self.text
        if self._forms is None:
            self._forms = [m.start() for m in _NEXT_FORM.finditer(text)]
        replies = self._reply_starts()
        k = bisect_right(self._forms, i)
        if k == len(self._forms):
            return -1
        at = self._forms[k]
        r = bisect_right(replies, at)
        end = min(
            self._forms[k + 1] if k + 1 < len(self._forms) else len(text),
            replies[r] if r < len(replies) else len(text),
        )
        if any(self._ends_string(q, False) for q in _quotes(text, i, end)):
            return -1
        return at - 1

    def _ends_string(self, i: int, element_open: bool) -> bool:
        text = self.text
        after = self.skip_ws(i + 1, note=False)
        if after >= len(text):
            return True
        nxt = text[after]
        if nxt in "}]:":
            return True
        if nxt != ",":
            return False
        # '",' inside a body whose text has an open element is dialogue, not the end:
        # "<msg>He said "hi", then left</msg>".
        return not element_open

    def _escape(self, i: int, parts: list[str]) -> int:
        """Decode the escape at ``i`` into ``parts``; the offset after it."""
        text, n = self.text, len(self.text)
        if self._cut_escape(i, i):
            return n
        c = text[i + 1]
        if c == "u" and _HEX4.fullmatch(text, i + 2, i + 6):
            code = int(text[i + 2 : i + 6], 16)
            if 0xD800 <= code < 0xDC00:
                if text[i + 6 : i + 8] == "\\u" and _HEX4.fullmatch(text, i + 8, i + 12):
                    low = int(text[i + 8 : i + 12], 16)
                    if 0xDC00 <= low < 0xE000:
                        parts.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                        return i + 12
                elif self._cut_escape(i, i + 6):  # the low half of a pair was cut off
                    return n
            parts.append(chr(code))
            return i + 6
        if c in _ESCAPES:
            parts.append(_ESCAPES[c])
            return i + 2
        self.note("CF608", f"invalid escape \\{c} read as {c!r}", i, i + 2)
        parts.append(c)
        return i + 2

    def _cut_escape(self, start: int, at: int) -> bool:
        """The input ends inside the escape at ``at`` (``\\``, ``\\u30``): drop it, from ``start``, with a note.

        A cut escape is half of a character, not text: ``\\u30`` must not show as ``u30``.
        """
        text, n = self.text, len(self.text)
        if at >= n:
            cut = at > start  # the input ends right after the high half of a pair
        elif text[at] != "\\":
            return False
        elif at + 1 >= n:
            cut = True
        else:
            cut = text[at + 1] == "u" and _CUT_HEX.fullmatch(text, at + 2) is not None
        if cut:
            self.note("CF618", f"an escape cut off at the end is dropped: {text[start:n]!r}", start, n)
        return cut


class OffsetMap:
    """Raw offset of each decoded character of one string read by ``JsonReader``, in any order.

    Decoded and raw offsets part only at escapes, which the reader listed as it read them
    (``JNode.escapes``): a lookup is a bisect over those, so repairs noted out of order
    cost no rescans of the body.
    """

    def __init__(self, node: JNode) -> None:
        self.start = node.content_start
        escapes = node.escapes if node.escapes is not None else array("q")
        self._decoded = escapes[0::2]
        self._raw = escapes[1::2]

    def __call__(self, index: int) -> int:
        k = bisect_right(self._decoded, index)
        if k == 0:
            return self.start + index
        return self._raw[k - 1] + (index - self._decoded[k - 1])


def _quotes(text: str, start: int, end: int) -> list[int]:
    """The offsets of the double quotes in ``text[start:end]``."""
    found = []
    at = text.find('"', start, end)
    while at >= 0:
        found.append(at)
        at = text.find('"', at + 1, end)
    return found
