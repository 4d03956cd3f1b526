"""``parse``: raw model output → envelope → body grammar → models.

Strict mode raises :class:`ParseError` listing every problem found in one pass
(at most one per body); ``lenient=True`` returns whatever parsed, with the
problems as ``Reply.diagnostics``, and never raises.
"""

from __future__ import annotations

import codecs
import gc
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from charfmt import _twin
from charfmt._grammar.static import terminal_regex
from charfmt._strict.body import Element, parse_batch, parse_body
from charfmt._strict.diagnosis import BodyError
from charfmt._strict.envelope import BOM, CHAT_KEYS, SPEAKER, HugeInteger, JSONError, Locator, NonFinite, decode
from charfmt._strict.fast import read_reply
from charfmt.diagnostics import Diagnostic, ParseError, in_body, too_long
from charfmt.models import Chat, Reply, Segment, Vocabulary, construct_trusted
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, TagTable
from charfmt.vocabulary import apply_vocabulary

if TYPE_CHECKING:
    from charfmt.userinput import UserTurn

DEFAULT_MAX_SIZE: Final = 16 * 1024 * 1024
"""Largest input (in characters, or bytes for ``bytes`` input) ``parse`` accepts by default."""

_GC_PAUSE_ABOVE: Final = 64 * 1024
_PROBE: Final = 64 * 1024


def parse(
    text: str | bytes,
    *,
    lenient: bool = False,
    vocabulary: Vocabulary | None = None,
    tags: TagTable | None = None,
    max_size: int = DEFAULT_MAX_SIZE,
    turn: UserTurn | str | Sequence[str] | None = None,
    prompt: str | Sequence[str | Mapping[str, Any]] | None = None,
) -> Reply:
    """Parse a model reply ``{"chats": [...]}`` into a :class:`Reply`.

    Strict (default): raise :class:`ParseError` on any error. Lenient: never raise;
    valid input gives exactly the strict result, anything else is recovered (see
    ``docs/LENIENT.md``) with every repair in ``Reply.diagnostics``. ``tags``: the tag
    table the bodies are written in (``None``: :data:`charfmt.DEFAULT_TAGS`); the
    emotion tag's keys are checked against ``vocabulary``, a cue tag with a list of
    values holds one of them. ``turn``: the player's turn the reply answers (a
    ``UserTurn``, the line as typed, or its lines); a lenient read recognises an echo of
    it and drops it (``CF625``) instead of showing it as the character's speech.
    ``prompt``: the prompt the reply answers (its text, or the request's ``messages``);
    a lenient read drops the prompt's own text echoed in a reply without JSON (``CF631``),
    never what the character said in it (assistant messages, few-shot replies).
    """
    if not isinstance(text, (str, bytes)):  # (a tuple: ``str | bytes`` would build a union on every call)
        text = _text_argument(text)
    table = DEFAULT_TAGS if tags is None else tags
    told = _NOTHING_TOLD if turn is None and prompt is None else Told(turn_lines(turn), prompt_texts(prompt))
    if isinstance(text, bytes) and text[:2] in _WIDE_BOM_STARTS and len(text) <= max_size:
        return _parse_wide(text, lenient, vocabulary, max_size, tags=table, told=told)
    if len(text) <= _GC_PAUSE_ABOVE:  # the usual reply: no pause of the collector to arrange
        reply = _READERS.fast(text, vocabulary, max_size, table)
        if reply is not None:
            return reply
        return _parse(text, lenient, vocabulary, max_size, fast=False, tags=table, told=told)
    return _parse(text, lenient, vocabulary, max_size, tags=table, told=told)


_WIDE_BOMS: Final = (
    (codecs.BOM_UTF32_LE, "utf-32", "UTF-32 (little-endian)"),
    (codecs.BOM_UTF32_BE, "utf-32", "UTF-32 (big-endian)"),
    (codecs.BOM_UTF16_LE, "utf-16", "UTF-16 (little-endian)"),
    (codecs.BOM_UTF16_BE, "utf-16", "UTF-16 (big-endian)"),
)
"""The byte order marks of the wide encodings a file may be in (PowerShell's ``>`` writes UTF-16 LE),
longest first (UTF-32 LE's starts with UTF-16 LE's)."""
_WIDE_BOM_STARTS: Final = frozenset(bom[:2] for bom, _codec, _name in _WIDE_BOMS)


def wide_text(data: bytes) -> tuple[str, str] | None:
    """``data`` that starts with a UTF-16 or UTF-32 byte order mark and decodes as such, decoded (the mark
    dropped), and what it was (``"UTF-16 (little-endian)"``); else ``None`` (bytes that only start like a
    mark, ``\xff\xfe{``, are read as UTF-8, and their first byte is ``CF001``)."""
    for bom, codec, name in _WIDE_BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec), name
            except UnicodeDecodeError:
                continue  # (UTF-32 LE's mark starts like UTF-16 LE's: try the next)
    return None


def _parse_wide(
    data: bytes, lenient: bool, vocabulary: Vocabulary | None, max_size: int, *, tags: TagTable, told: Told
) -> Reply:
    """``parse`` of bytes in UTF-16 or UTF-32: the decoded text parsed, ``CF160`` first among its diagnostics."""
    wide = wide_text(data)
    if wide is None:  # (a start like a mark's that is not one: UTF-8's own errors)
        return _parse(data, lenient, vocabulary, max_size, tags=tags, told=told)
    text, name = wide
    note = Diagnostic.at(text, "CF160", f"input is {name}, not UTF-8: decoded as {name.split()[0]}", 0, 0,
                         severity="warning")  # fmt: skip
    try:
        reply = _parse(text, lenient, vocabulary, max_size, tags=tags, told=told)
    except ParseError as e:
        raise ParseError([note, *e.diagnostics], e.source) from None
    return reply.model_copy(update={"diagnostics": [note, *reply.diagnostics]})


class Told(NamedTuple):
    """What the caller told a lenient read about the exchange: the player's turn and the prompt."""

    turn: tuple[str, ...] = ()
    """What the player said this turn (``turn_lines``)."""
    prompt: tuple[str, ...] = ()
    """The prompt's own text, the character's words left out (``prompt_texts``)."""


_NOTHING_TOLD: Final = Told()
"""No turn and no prompt (most calls: nothing to build)."""

_CHARACTER_ROLES: Final = frozenset({"assistant", "model", "bot", "character"})
"""Roles of a request's messages whose text is the character's own words, not the prompt's."""


def prompt_texts(prompt: str | Sequence[str | Mapping[str, Any]] | None) -> tuple[str, ...]:
    """The prompt's own text (``parse(prompt=...)``): a text, texts, or the request's messages less the character's.

    Messages are mappings with a ``role`` and a ``content`` (a string, or a list of parts with
    a ``text``: OpenAI, Anthropic), or Gemini's ``parts``; an assistant's (``model``) message is
    the character's words and is left out.
    """
    if prompt is None:
        return ()
    if isinstance(prompt, str):
        return (prompt,)
    if not isinstance(prompt, Sequence):
        raise TypeError(f"prompt must be a str or a list of messages, not {type(prompt).__name__}")
    texts: list[str] = []
    for item in prompt:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, Mapping):
            if str(item.get("role", "")).lower() not in _CHARACTER_ROLES:
                texts += _message_texts(item)
        else:
            raise TypeError(f"prompt must be a str or a list of messages, not a list of {type(item).__name__}")
    return tuple(t for t in texts if t.strip())


def _message_texts(message: Mapping[str, Any]) -> list[str]:
    """The texts of one message: its ``content`` (a string or parts with a ``text``), or Gemini's ``parts``."""
    content = message.get("content", message.get("parts"))
    if isinstance(content, str):
        return [content]
    if isinstance(content, Sequence):
        return [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return []


def turn_lines(turn: UserTurn | str | Sequence[str] | None) -> tuple[str, ...]:
    """What the player said in ``turn`` (``parse(turn=...)``): the text of each of its chats' segments."""
    if turn is None:
        return ()
    if isinstance(turn, str):
        return (turn,)
    chats = getattr(turn, "chats", None)
    if chats is not None:
        return tuple(s.text for chat in chats for s in chat.segments)
    if isinstance(turn, Sequence) and all(isinstance(t, str) for t in turn):
        return tuple(turn)
    raise TypeError(f"turn must be a UserTurn, a str or a list of str, not {type(turn).__name__}")


def _text_argument(value: object) -> bytes:
    """What ``parse`` was given in place of ``str`` or ``bytes``: a bytes-like object as bytes, else a TypeError."""
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    kind = type(value).__name__
    if value is None:
        hint = " (an SDK's message content is None on a refusal or a tool call: there is no text to read)"
    elif isinstance(value, dict | list):
        hint = f" (a {kind} decoded from JSON: pass the text, or json.dumps(value))"
    else:
        hint = ""
    raise TypeError(f"parse() reads model output as str or bytes, not {kind}{hint}")


def _parse(
    text: str | bytes,
    lenient: bool,
    vocabulary: Vocabulary | None,
    max_size: int,
    *,
    fast: bool = True,
    tags: TagTable = DEFAULT_TAGS,
    told: Told = Told(),  # noqa: B008 (a NamedTuple: immutable)
) -> Reply:
    """:func:`parse`; ``fast=False`` skips the fast path (tests compare the two)."""
    # A large reply allocates hundreds of thousands of models at once; the cyclic
    # garbage collector would rescan them all again and again (quadratic: 3 MB took
    # 1.8x as long with it). They hold no cycles, so pause it while they are built.
    pause = len(text) > _GC_PAUSE_ABOVE and gc.isenabled()
    if pause:
        gc.disable()
    try:
        if fast:
            fast_reply = _READERS.fast(text, vocabulary, max_size, tags)
            if fast_reply is not None:
                return fast_reply
        run = _Run(lenient, vocabulary, tags)
        try:
            reply = run.parse(text, max_size)
        except _Stop:
            reply = construct_trusted(
                Reply, {"chats": [], "diagnostics": run.diagnostics, "reasoning": None, "dialect": None}
            )
    finally:
        if pause:
            gc.enable()
    failed = any(d.severity == "error" for d in reply.diagnostics)
    if failed and not lenient:
        raise ParseError(reply.diagnostics, run.source)
    if failed and not any(d.code in _FINAL for d in reply.diagnostics):
        return _recover(text, vocabulary, tags, told)
    return reply


_UNESCAPED_QUOTE: Final = re.compile(r'(?<!\\)(?:\\\\)*"')

WARM_UP: Final = 1 << 20
"""Characters ``parse`` reads with the pure-Python strict reader before it looks for the compiled one.

Where the package was built with a C compiler, ``charfmt._strict`` also exists compiled with
mypyc (``charfmt._strict_c``, ``hatch_build.py``): the same source, the same replies, a typical
reply about a tenth faster. Checking that it was built from this very source (``charfmt._twin``:
a digest of every module) and loading it costs a few milliseconds, what about 3,000 typical
replies (a megabyte) gain: a process that reads fewer never pays it, and its start stays short.
"""


class _Readers:
    """The fast path and the batch LALR parse ``parse`` runs: pure Python, then the compiled twin's.

    After :data:`WARM_UP` characters read (or :meth:`settle`), ``charfmt._strict_c``'s if it was
    built from this very package and ``CHARFMT_PURE_PYTHON`` does not ask for pure Python;
    the pure ones otherwise. Neither raises, so no class of the twin reaches this module.
    """

    def __init__(self) -> None:
        self.fast: Callable[[str | bytes, Vocabulary | None, int, TagTable], Reply | None] = self._warming
        """``charfmt._strict.fast.read_reply``: the reply of a valid text that needs no diagnostic, else ``None``."""
        self.batch: Callable[[Sequence[tuple[str, str]], TagTable], list[list[Element]] | None] = parse_batch
        """``charfmt._strict.body.parse_batch``: every body of a reply in one LALR call, or ``None``."""
        self.compiled: bool | None = None
        """Whether the compiled twin runs (``None``: not decided yet, still warming up)."""
        self._read = 0

    def _warming(self, text: str | bytes, vocabulary: Vocabulary | None, max_size: int, tags: TagTable) -> Reply | None:
        self._read += len(text)
        if self._read >= WARM_UP:
            self.settle()
        return read_reply(text, vocabulary, max_size, tags)

    def settle(self, package: Path | None = None) -> bool:
        """Choose the readers now (``package``: the folder of ``charfmt`` the twin must match); whether compiled."""
        twin = _twin.load(_twin.TWINS["_strict"], package)
        if twin is None:
            self.fast, self.batch = read_reply, parse_batch
        else:
            self.fast = import_module(f"{twin.__name__}.fast").read_reply
            self.batch = import_module(f"{twin.__name__}.body").parse_batch
        self.compiled = twin is not None
        return self.compiled


_READERS: Final = _Readers()


_FINAL: Final = frozenset({"CF002", "CF003"})
_ESCAPED_BYTES: Final = re.compile("[\udc80-\udcff]+")
"""Errors lenient parsing does not try to repair: too large, or empty."""


def lenient_text(data: str | bytes) -> str:
    """Input as lenient parsing reads it: each byte that is not UTF-8 becomes one U+FFFD.

    Diagnostic offsets of a lenient parse of ``bytes`` count characters of this text. Bytes that
    start with a UTF-16 or UTF-32 byte order mark are decoded as such (``wide_text``), as ``parse`` reads them.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        wide = wide_text(bytes(data)) if bytes(data[:2]) in _WIDE_BOM_STARTS else None
        if wide is not None:
            return wide[0]
        data = bytes(data).decode("utf-8", errors="surrogateescape")
    return _ESCAPED_BYTES.sub(lambda m: "\ufffd" * len(m.group()), data)


def _recover(
    text: str | bytes,
    vocabulary: Vocabulary | None,
    tags: TagTable = DEFAULT_TAGS,
    told: Told = Told(),  # noqa: B008 (a NamedTuple: immutable)
) -> Reply:
    """The lenient slow path; it never raises (a bug in it is reported, not thrown)."""
    from charfmt._lenient.recovery import recover  # noqa: PLC0415 (valid input never needs recovery)

    prior: list[Diagnostic] = []
    if isinstance(text, (bytes, bytearray, memoryview)):
        # Each invalid byte becomes one U+FFFD (via surrogateescape: one pass, no re-decoding),
        # and each run of them one diagnostic naming its first byte.
        escaped = bytes(text).decode("utf-8", errors="surrogateescape")
        decoded = lenient_text(escaped)
        for m in _ESCAPED_BYTES.finditer(escaped):
            byte = ord(m.group()[0]) - 0xDC00
            message = f"invalid UTF-8 byte 0x{byte:02X} replaced by U+FFFD" + (
                f" (and {len(m.group()) - 1} more)" if len(m.group()) > 1 else ""
            )
            prior.append(Diagnostic.at(decoded, "CF001", message, m.start(), m.end(), severity="warning"))
        text = decoded
    # Recovery builds many small acyclic objects (a node per bracket of "[[[[…"): the
    # collector would rescan them all again and again, so it rests meanwhile.
    pause = gc.isenabled()
    if pause:
        gc.disable()
    try:
        return recover(text, vocabulary, prior, tags, turn=told.turn, prompt=told.prompt)
    except Exception as e:  # lenient parsing promises never to raise
        crash = Diagnostic.at(
            text, "CF999", f"internal error while recovering ({type(e).__name__}: {e}); please report it", 0
        )
        return construct_trusted(
            Reply, {"chats": [], "diagnostics": [*prior, crash], "reasoning": None, "dialect": None}
        )
    finally:
        if pause:
            gc.enable()


class _Stop(Exception):
    """Nothing more can be read: the diagnostics say why."""


class _Run:
    """The state of one parse: the raw source, the locator, the diagnostics so far."""

    def __init__(self, lenient: bool, vocabulary: Vocabulary | None, tags: TagTable = DEFAULT_TAGS) -> None:
        self.lenient = lenient
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
        self.diagnostics.append(Diagnostic.at(self.source, code, message, start, end, chat=chat))

    def at_value(self, code: str, message: str, path: tuple[str | int, ...], chat: int | None = None) -> None:
        start, end = self.locator.value(path)
        self.fail(code, message, start, end, chat)

    @property
    def locator(self) -> Locator:
        if self._locator is None:
            self._locator = Locator(self.source)
        return self._locator

    # -- the pipeline -------------------------------------------------------------
    def parse(self, text: str | bytes, max_size: int) -> Reply:
        self.source = self._text(text, max_size)
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
        parsed = _READERS.batch([(kind, body) for _i, kind, _o, body in rows], self.tags)
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

    def _text(self, text: str | bytes, max_size: int) -> str:
        if len(text) > max_size:
            self.fail("CF002", too_long(len(text), max_size, in_bytes=not isinstance(text, str)), 0)
            raise _Stop
        if isinstance(text, (bytes, bytearray, memoryview)):
            raw = bytes(text)
            try:
                if len(raw) > _PROBE:
                    # A decode error carries a copy of all it was given (10 MB: 5 ms): let
                    # an error near the start, the usual place, carry only the probe.
                    codecs.utf_8_decode(memoryview(raw)[:_PROBE], "strict", False)
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                self.source = raw[: e.start].decode("utf-8")
                self.fail(
                    "CF001", f"input is not UTF-8: byte 0x{raw[e.start]:02X} at byte offset {e.start}", len(self.source)
                )
                raise _Stop from None
        if text[:1] == BOM:
            # A byte order mark (Windows editors write one) is not part of the JSON text;
            # RFC 8259 lets a parser ignore it. A space in its place keeps every offset.
            text = " " + text[1:]
        if not text.strip():
            self.source = text
            self.fail("CF003", 'input is empty; expected {"chats": [...]}', 0, len(text))
            raise _Stop
        return text

    def _report_duplicate_keys(self) -> None:
        for path, spans in self.locator._spans.keys.items():
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
                if _UNESCAPED_QUOTE.search(source, body.content_start, where(cut) if cut else body.content_start):
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
