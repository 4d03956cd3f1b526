"""The strict reader's full pass: every problem of a reply that is not plainly valid, each at its raw position.

``charfmt.parse`` runs :class:`StrictRun` where the fast path (:mod:`.fast`) gave up: the JSON
envelope decoded with positions (:mod:`.envelope`), the shape of each chat, the orders, every
body (:mod:`.elements`; a body that failed explained by :mod:`.diagnosis`), the vocabulary and the
closed cue values, each problem a :class:`~charfmt.diagnostics.Diagnostic` against the raw
text. It reads text ``charfmt.parser`` decoded (bytes, a byte order mark, the size limit and
empty input are the parser's) and hands nothing on: the parser decides whether the lenient
readers run.

Compiled with mypyc with the rest of the package (``charfmt._strict_c.reply``, see
``charfmt._twin``); keep it mypyc-compatible, as ``charfmt._stream`` is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from charfmt._grammar.static import terminal_regex
from charfmt.diagnostics import Diagnostic, in_body
from charfmt.models import Chat, Reply, Segment, Vocabulary, construct_trusted
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, TagTable

from .diagnosis import BodyError
from .elements import Element, parse_batch, parse_body
from .envelope import CHAT_KEYS, SPEAKER, HugeInteger, JSONError, Locator, NonFinite, decode

Batch = Callable[[Sequence[tuple[str, str]], TagTable], list[list[Element]] | None]
"""Every body of a reply read in one LALR call (``(type, body)`` pairs), or ``None`` when one fails."""

_UNESCAPED_QUOTE: Final = r'(?<!\\)(?:\\\\)*"'


class _Stop(Exception):
    """Nothing more can be read: the diagnostics say why."""


class StrictRun:
    """One full strict pass over a reply: the raw source, the locator, the diagnostics so far.

    ``batch``: the LALR reader of every body at once (``charfmt._strict.elements.parse_batch``, or
    the compiled twin's, which ``charfmt.parser`` chooses).
    """

    def __init__(
        self, lenient: bool, vocabulary: Vocabulary | None, tags: TagTable = DEFAULT_TAGS, batch: Batch = parse_batch
    ) -> None:
        self.lenient = lenient
        self.batch = batch
        self.vocabulary = vocabulary
        self.tags = tags
        self._emotion = tags.emotion.name
        self._values = {t.name: t.values for t in tags if t.values is not None}
        self.source = ""
        self.diagnostics: list[Diagnostic] = []
        self._locator: Locator | None = None
        self._speakers: dict[int, str] = {}  # chat index -> the speaker it names

    # -- the one place diagnostics are made ------------------------------------
    def fail(self, code: str, message: str, start: int, end: int | None = None, chat: int | None = None) -> None:
        """Note a diagnostic at raw offsets ``start``..``end`` of the source."""
        self.diagnostics.append(Diagnostic.at(self.source, code, message, start, end, chat=chat))

    def at_value(self, code: str, message: str, path: tuple[str | int, ...], chat: int | None = None) -> None:
        """Note a diagnostic at the JSON value ``path`` names (``("chats", 0, "order")``)."""
        start, end = self.locator.value(path)
        self.fail(code, message, start, end, chat)

    @property
    def locator(self) -> Locator:
        """Raw positions in the source, found on first use (only a reply with a problem needs them)."""
        if self._locator is None:
            self._locator = Locator(self.source)
        return self._locator

    # -- the pipeline -------------------------------------------------------------
    def read(self, source: str) -> Reply:
        """The reply ``source`` holds, with a diagnostic for each problem (at most one per body); never raises."""
        self.source = source
        try:
            return self._read()
        except _Stop:
            return construct_trusted(
                Reply, {"chats": [], "diagnostics": self.diagnostics, "reasoning": None, "dialect": None}
            )

    def _read(self) -> Reply:
        try:
            decoded = decode(self.source)
        except JSONError as e:
            self._body_error_before(e.pos)
            self.fail(e.code, e.message, e.pos, e.pos + 1)
            raise _Stop from None
        if decoded.duplicate_keys:
            self._report_duplicate_keys()
        rows = self._chats(decoded.value)
        # Memory: the peak comes when every model exists. Free what is no longer needed
        # before that: the JSON objects (the rows hold their values), the order index of
        # the order checks, and each chat's row and parsed elements once its models are
        # built (popped from reversed lists: the bodies go as the models come).
        del decoded
        self._check_orders(rows)
        parsed = self.batch([(kind, body) for _i, kind, _o, body in rows], self.tags)
        chats: list[Chat] = []
        rows.reverse()
        if parsed is not None:
            parsed.reverse()
        while rows:
            index, kind, order, body = rows.pop()
            if parsed is not None:
                elements = parsed.pop()
            else:
                try:
                    elements = parse_body(kind, body, self.tags)
                except BodyError as e:
                    self._body_error(index, e)
                    continue
            chats.append(self._chat(index, kind, order, body, elements))
        self.diagnostics.sort(key=lambda d: (d.offset, d.end))
        chats.sort(key=lambda c: c.order)
        return construct_trusted(
            Reply, {"chats": chats, "diagnostics": self.diagnostics, "reasoning": None, "dialect": None}
        )

    def _report_duplicate_keys(self) -> None:
        for path, spans in self.locator.repeated_keys():
            for start, end in spans[1:]:
                chat = path[1] if len(path) > 2 and path[0] == "chats" and isinstance(path[1], int) else None
                self.fail("CF106", f"duplicate key {path[-1]!r}: JSON keys are unique", start, end, chat)

    def _chats(self, value: Any) -> list[tuple[int, str, int, str]]:
        """Check the envelope's shape; the rows ``(index, type, order, body)`` that passed."""
        if not isinstance(value, dict) or not isinstance(value.get("chats"), list):
            if isinstance(value, dict) and "chats" in value:
                self.at_value("CF102", f'"chats" must be an array, not {_kind(value["chats"])}', ("chats",))
            elif isinstance(value, dict):
                self.at_value("CF102", 'missing key "chats": expected {"chats": [...]}', ())
            else:
                self.at_value("CF102", f'top level is {_kind(value)}; expected an object {{"chats": [...]}}', ())
            raise _Stop
        for key in value:
            if key != "chats":
                start, end = self.locator.keys((key,))[0]
                self.fail("CF105", f'unknown key {key!r}: the top level holds only "chats"', start, end)
        rows = []
        for i, chat in enumerate(value["chats"]):
            row = self._chat_row(i, chat)
            if row is not None:
                rows.append(row)
        return rows

    def _chat_row(self, i: int, chat: Any) -> Any:
        path: tuple[str | int, ...] = ("chats", i)
        if not isinstance(chat, dict):
            self.at_value("CF103", f"chat {i} is {_kind(chat)}; expected an object with type, order, body", path, i)
            return None
        ok = True
        for key in chat:
            if key not in CHAT_KEYS and key != SPEAKER:
                start, end = self.locator.keys((*path, key))[0]
                self.fail("CF105", f"unknown key {key!r} in chat {i}: a chat holds type, order, body", start, end, i)
                ok = False
        for key in CHAT_KEYS:
            if key not in chat:
                self.at_value("CF104", f"chat {i} has no {key!r}", path, i)
                ok = False
        kind, order, body = chat.get("type"), chat.get("order"), chat.get("body")
        if "type" in chat and not (isinstance(kind, str) and kind in CHAT_TYPES):  # an object is unhashable
            self.at_value("CF107", f'chat {i} type is {_show(kind)}; expected "C", "I" or "E"', (*path, "type"), i)
            ok = False
        if "order" in chat and (type(order) is not int or order < 1):
            self.at_value("CF108", f"chat {i} order is {_show(order)}; expected an integer >= 1", (*path, "order"), i)
            ok = False
        if "body" in chat and not isinstance(body, str):
            self.at_value("CF109", f"chat {i} body is {_kind(body)}; expected a string", (*path, "body"), i)
            ok = False
        speaker = chat.get(SPEAKER)
        if SPEAKER in chat and not (isinstance(speaker, str) and terminal_regex("KEY").fullmatch(speaker)):
            message = f"chat {i} speaker is {_show(speaker)}; expected a name (a string without markup)"
            self.at_value("CF145", message, (*path, SPEAKER), i)
            ok = False
        if ok and speaker is not None:
            self._speakers[i] = speaker
        return (i, kind, order, body) if ok else None

    def _body_error_before(self, pos: int) -> None:
        """The JSON breaks at ``pos``: report first a body error before it, from which no reply could go on.

        ``{"chats":[{"type":"C","order":1,"body":"<EMO>joy</EMO>\\q"}]}`` cannot continue past
        ``<EMO>`` (where a constrained decoder stops), though JSON breaks only at ``\\q``. Each
        body that begins before ``pos`` is checked as far as it goes before it: a body closed
        before ``pos`` whole, the one ``pos`` is in up to it (an error there counts only when
        what it found ends before ``pos``: ``a &`` may yet be ``a &amp;``).
        """
        from charfmt._lenient.json import JsonReader, OffsetMap  # noqa: PLC0415 (the error path only)

        source = self.source
        top = JsonReader(source).read(0)
        chats = top.get("chats") if top.kind == "object" else None
        if chats is None or chats.kind != "array":
            return
        for index, chat in enumerate(chats.items):
            body = chat.get("body") if chat.kind == "object" else None
            kind = chat.get("type") if chat.kind == "object" else None
            if body is None or body.start >= pos or body.kind != "string" or source[body.start : body.start + 1] != '"':
                if body is not None and body.start >= pos:
                    return
                continue
            if kind is None or kind.value not in CHAT_TYPES:
                continue
            text = str(body.value)
            where = OffsetMap(body)
            whole = body.closed and body.end <= pos
            if not whole:
                cut = 0
                while cut < len(text) and where(cut) < pos:
                    cut += 1
                text = text[:cut]
                stop = where(cut) if cut else body.content_start
                if re.compile(_UNESCAPED_QUOTE).search(source, body.content_start, stop):
                    return  # where strict JSON ends this string is not where the tolerant reader does
            try:
                parse_body(str(kind.value), text, self.tags)
            except BodyError as e:
                if whole or e.end < len(text):
                    end = where(e.end) if e.end > e.start else where(e.start)
                    self.fail(e.code, in_body(index, e.message), where(e.start), end, index)
                    return

    def _body_error(self, index: int, e: BodyError) -> None:
        path = ("chats", index, "body")
        start = self.locator.string_offset(path, e.start)
        end = self.locator.string_offset(path, e.end) if e.end > e.start else start
        self.fail(e.code, in_body(index, e.message), start, end, index)

    def _chat(self, index: int, kind: str, order: int, body: str, elements: list[Element]) -> Chat:
        segments = []
        vocabulary = self.vocabulary
        decisions: list[tuple[int, str, str]] = []
        emotion, values = self._emotion, self._values
        if vocabulary is not None:
            from charfmt.vocabulary import apply_vocabulary  # noqa: PLC0415 (import cost: a parse told a vocabulary only)
        for n, (tag, text) in enumerate(elements):
            shown = text
            if vocabulary is not None and tag == emotion:
                decision = apply_vocabulary(text, vocabulary)
                if decision.code is not None:
                    decisions.append((n, decision.code, decision.message))
                shown = decision.key or text
            elif tag in values and text not in values[tag]:
                allowed = ", ".join(values[tag])
                if self.lenient:
                    message = f"<{tag}> value {text!r} is not one of {allowed}; kept as written"
                    decisions.append((n, "CF132", message))
                else:
                    decisions.append((n, "CF131", f"<{tag}> value {text!r} is not one of {allowed}"))
            segments.append(construct_trusted(Segment, {"tag": tag, "text": shown, "intensity": None}))
        if decisions:
            self._key_decisions(index, body, elements, decisions)
        speaker = self._speakers.get(index)
        return construct_trusted(Chat, {"type": kind, "order": order, "segments": segments, "speaker": speaker})

    def _key_decisions(
        self, index: int, body: str, elements: list[Element], decisions: list[tuple[int, str, str]]
    ) -> None:
        """Report each vocabulary decision at its key, in one pass over the body (linear)."""
        # Valid bodies hold no raw '<', so the k-th "<emo>" is the k-th emo element: one
        # cursor per tag finds every element's opening tag with a single left-to-right scan.
        wanted = {n for n, _code, _message in decisions}
        cursors: dict[str, int] = {}
        spans: list[int] = []
        for n, (tag, text) in enumerate(elements):
            opener = f"<{tag}>"
            at = body.find(opener, cursors.get(tag, 0))
            cursors[tag] = at + len(opener)
            if n in wanted:
                spans += [at + len(opener), at + len(opener) + len(text)]
        raw = self.locator.string_offsets(("chats", index, "body"), spans)
        for k, (_n, code, message) in enumerate(decisions):
            self.fail(code, in_body(index, message), raw[2 * k], raw[2 * k + 1], index)

    def _check_orders(self, rows: list[tuple[int, str, int, str]]) -> None:
        if not rows:
            return
        seen: dict[int, int] = {}
        previous = 0
        unsorted = False
        for index, _kind, order, _body in rows:
            if order in seen:
                self.at_value(
                    "CF111",
                    f"chat {index} has order {order}, like chat {seen[order]}",
                    ("chats", index, "order"),
                    index,
                )
            else:
                seen[order] = index
            unsorted = unsorted or order < previous
            previous = order
        top = max(seen)
        if top != len(seen):  # unique orders are exactly 1..n iff the largest is n
            missing: list[int] = []
            k = 1
            while len(missing) < 10 and k < top:  # at most len(seen) + 10 steps
                if k not in seen:
                    missing.append(k)
                k += 1
            shown = ", ".join(map(str, missing)) + (" …" if len(missing) == 10 else "")
            self.at_value("CF112", f"orders are not 1..{len(seen)}: {shown} missing", ("chats",))
        if unsorted:
            self.at_value("CF113", "chats are not listed in order; they are presented sorted by order", ("chats",))


def _kind(value: Any) -> str:
    if isinstance(value, NonFinite):
        return "a non-finite number (not JSON)"
    if isinstance(value, HugeInteger):
        return f"a number of {len(value.digits.lstrip('-')):,} digits"
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    if isinstance(value, (str, int, float)):  # (NonFinite and HugeInteger are neither)
        text = repr(value) if not isinstance(value, str) else '"' + value[:40] + '"'
        return text if not isinstance(value, bool) else str(value).lower()
    return _kind(value)
