"""``parse``: raw model output → envelope → body grammar → models.

Strict mode raises :class:`ParseError` listing every problem found in one pass
(at most one per body); ``lenient=True`` returns whatever parsed, with the
problems as ``Reply.diagnostics``, and never raises.

The entry point only: it decodes the input (bytes as UTF-8, strictly for the strict reader,
each bad byte a U+FFFD for the lenient ones), runs the strict reader of ``charfmt._strict``
(the fast path, then the full pass :class:`charfmt._strict.reply.StrictRun`, pure Python or
the compiled twin's), and hands a reply that failed to the lenient readers (``_recover``).
"""

from __future__ import annotations

import codecs
import gc
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from charfmt._arguments import check_reading
from charfmt._strict.elements import parse_batch
from charfmt._strict.envelope import BOM
from charfmt._strict.fast import read_reply
from charfmt.diagnostics import Diagnostic, ParseError, too_long
from charfmt.models import Reply, Vocabulary, construct_trusted
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt._strict.reply import Batch
    from charfmt.prompt.userinput import UserTurn

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
    check_reading(lenient, vocabulary, tags, max_size)  # (StreamParser's checks: a TypeError naming the argument)
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


class Told:
    """What the caller told a lenient read about the exchange: the player's turn and the prompt.

    (A plain class: a ``NamedTuple`` compiles each field's postponed annotation at every start.)
    """

    __slots__ = ("prompt", "turn")

    def __init__(self, turn: tuple[str, ...] = (), prompt: tuple[str, ...] = ()) -> None:
        self.turn: Final = turn
        """What the player said this turn (``turn_lines``)."""
        self.prompt: Final = prompt
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
    told: Told = _NOTHING_TOLD,
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
        source = _strict_source(text, max_size)
        if source.stop is None:
            from charfmt._strict.reply import StrictRun  # noqa: PLC0415 (import cost: a valid reply's fast path never needs it)

            reply = StrictRun(lenient, vocabulary, tags, _READERS.batch).read(source.text)
        else:
            reply = construct_trusted(
                Reply, {"chats": [], "diagnostics": [source.stop], "reasoning": None, "dialect": None}
            )
    finally:
        if pause:
            gc.enable()
    failed = any(d.severity == "error" for d in reply.diagnostics)
    if failed and not lenient:
        raise ParseError(reply.diagnostics, source.text)
    if failed and not any(d.code in _FINAL for d in reply.diagnostics):
        return _recover(text, vocabulary, tags, told)
    return reply


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
        self.batch: Batch = parse_batch
        """``charfmt._strict.elements.parse_batch``: every body of a reply in one LALR call, or ``None``."""
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
        from charfmt import _twin  # noqa: PLC0415 (import cost: only after WARM_UP characters, or settle())

        twin = _twin.load(_twin.TWINS["_strict"], package)
        if twin is None:
            self.fast, self.batch = read_reply, parse_batch
        else:
            self.fast = import_module(f"{twin.__name__}.fast").read_reply
            self.batch = import_module(f"{twin.__name__}.elements").parse_batch
        self.compiled = twin is not None
        return self.compiled


_READERS: Final = _Readers()


_FINAL: Final = frozenset({"CF002", "CF003"})
"""Errors lenient parsing does not try to repair: too large, or empty."""
_ESCAPED_BYTES: Final = "[\udc80-\udcff]+"
"""A run of bytes that are not UTF-8, as ``surrogateescape`` decodes them. (Compiled where used, by
``re``'s cache: a class of surrogates takes a third of a millisecond to compile, and valid input
never needs it.)"""


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
    return re.compile(_ESCAPED_BYTES).sub(lambda m: "\ufffd" * len(m.group()), data)


def _recover(
    text: str | bytes,
    vocabulary: Vocabulary | None,
    tags: TagTable = DEFAULT_TAGS,
    told: Told = _NOTHING_TOLD,
) -> Reply:
    """The lenient slow path; it never raises (a bug in it is reported, not thrown)."""
    from charfmt._lenient.recovery import recover  # noqa: PLC0415 (valid input never needs recovery)

    prior: list[Diagnostic] = []
    if isinstance(text, (bytes, bytearray, memoryview)):
        # Each invalid byte becomes one U+FFFD (via surrogateescape: one pass, no re-decoding),
        # and each run of them one diagnostic naming its first byte.
        escaped = bytes(text).decode("utf-8", errors="surrogateescape")
        decoded = lenient_text(escaped)
        for m in re.compile(_ESCAPED_BYTES).finditer(escaped):
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


class _Source:
    """What the strict reader reads: the input as text, or why there is nothing to read.

    (A plain class: a ``NamedTuple`` compiles each field's postponed annotation at every start.)
    """

    __slots__ = ("stop", "text")

    def __init__(self, text: str, stop: Diagnostic | None) -> None:
        self.text: Final = text
        """The input decoded (a byte order mark blanked), or as much of it as decoded before the error."""
        self.stop: Final = stop
        """Why nothing can be read (``CF002`` too large, ``CF001`` not UTF-8, ``CF003`` empty), or ``None``."""


def _strict_source(text: str | bytes, max_size: int) -> _Source:
    """``text`` as the strict reader reads it: bytes decoded as UTF-8, a byte order mark blanked; else the stop."""
    if len(text) > max_size:
        return _Source(
            "", Diagnostic.at("", "CF002", too_long(len(text), max_size, in_bytes=not isinstance(text, str)), 0)
        )
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        try:
            if len(raw) > _PROBE:
                # A decode error carries a copy of all it was given (10 MB: 5 ms): let
                # an error near the start, the usual place, carry only the probe.
                codecs.utf_8_decode(memoryview(raw)[:_PROBE], "strict", False)
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            good = raw[: e.start].decode("utf-8")
            message = f"input is not UTF-8: byte 0x{raw[e.start]:02X} at byte offset {e.start}"
            return _Source(good, Diagnostic.at(good, "CF001", message, len(good)))
    if text[:1] == BOM:
        # A byte order mark (Windows editors write one) is not part of the JSON text;
        # RFC 8259 lets a parser ignore it. A space in its place keeps every offset.
        text = " " + text[1:]
    if not text.strip():
        return _Source(text, Diagnostic.at(text, "CF003", 'input is empty; expected {"chats": [...]}', 0, len(text)))
    return _Source(text, None)
