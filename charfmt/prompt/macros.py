"""SillyTavern's macros (``{{char}}``, ``{{user}}``, ``{{random:…}}``…) expanded in one pass, bounded in output.

Every macro expansion in charfmt goes through :func:`expand`, with one :class:`Macros` per
use (one render: the persona, the few-shots, the greeting, the lore entries, the card's system
prompt and post-history instructions share it). Three promises:

- **Linear time.** The text is read once, left to right; what a macro expands to is never read
  again (a macro cannot write another macro), so no input can make expansion loop or nest.
- **Bounded output.** The characters written by all expansions of one ``Macros`` are counted
  *before* they are written; past :data:`MAX_MACRO_OUTPUT` a :class:`MacroError` (``CF929``) is
  raised. A 1.6 MB card with 200,000 ``{{char}}`` and a 4 KB name stops at the bound (a few MB of
  memory), it does not build 800 MB.
- **Reproducible.** ``{{random}}``, ``{{roll}}`` and ``{{pick}}`` draw from a ``random.Random``
  seeded with ``seed`` (``None``: fresh entropy); ``{{time}}``, ``{{date}}`` and ``{{weekday}}``
  read ``now`` (``None``: the clock at its first use), so a test or a replay can fix both.

Names are case-insensitive, as SillyTavern reads them. An unknown macro (``{{lastMessage}}``,
a typo) is left as written and said once per text (``CF928``), however often it occurs.
"""

from __future__ import annotations

import collections
import datetime as _dt
import itertools
import random
import re
import secrets
import zlib
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Final

from charfmt.diagnostics import CharfmtError, Diagnostic

MAX_MACRO_OUTPUT: Final = 4 * 1024 * 1024
"""The most characters all expansions of one :class:`Macros` may write (a render, a card's greeting...)."""

MAX_ROLL_DICE: Final = 1000
"""The most dice one ``{{roll}}`` throws, and the most sides a die has is ``10**9``: bigger is invalid."""

_OPEN: Final = "{{"
_CLOSE: Final = "}}"
_ANGLE: Final = re.compile(r"<(USER|BOT|CHAR)>", re.IGNORECASE)
"""TavernAI's name placeholders, read as ``{{user}}``/``{{char}}``."""
_ROLL: Final = re.compile(r"\s*(\d*)\s*d\s*(\d+)\s*(?:([+-])\s*(\d+))?\s*", re.IGNORECASE)
_WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS: Final = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


class MacroError(CharfmtError):
    """Macro expansion would write more than :data:`MAX_MACRO_OUTPUT` characters (``CF929``)."""

    code: Final = "CF929"


@dataclass(eq=False, slots=True)
class Macros:
    """What the macros of one use expand to (names, seed, clock) and the output they may still write."""

    char: str
    user: str
    _: KW_ONLY
    seed: int | str | None = None
    now: _dt.datetime | None = None
    """The clock given (``None``: the clock at its first use, ``clock``)."""
    limit: int = MAX_MACRO_OUTPUT
    left: int = field(init=False)
    """Characters still allowed: every expansion takes what it writes (and holds) from here."""
    _random: random.Random | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.left = self.limit

    @property
    def clock(self) -> _dt.datetime:
        """What ``{{time}}`` and ``{{date}}`` read: the clock given, else the clock at its first use."""
        if self.now is None:
            self.now = _dt.datetime.now().astimezone()
        return self.now

    @property
    def _rng(self) -> random.Random:
        # made on first use: most texts draw nothing, and seeding a generator is the dearest step here
        if self._random is None:
            self._random = random.Random(self.seed if self.seed is not None else secrets.randbits(64))
        return self._random

    def expand(self, text: str, *, original: str = "", where: str = "") -> tuple[str, list[Diagnostic]]:
        """``text`` with its macros expanded (see :func:`expand`)."""
        return expand(text, self, original=original, where=where)

    def text(self, text: str, *, original: str = "", where: str = "", notes: list[Diagnostic] | None = None) -> str:
        """``text`` expanded, its diagnostics added to ``notes`` (where given)."""
        out, said = expand(text, self, original=original, where=where)
        if notes is not None:
            notes.extend(said)
        return out

    def _take(self, size: int, where: str) -> None:
        self.left -= size
        if self.left < 0:
            place = f" in {where}" if where else ""
            raise MacroError(
                f"CF929 macro expansion{place} would write more than {self.limit:,} characters"
                " (a macro repeated too often, or a name too long)"
            )

    def choose(self, items: list[str]) -> str:
        """One of ``items``, drawn from this use's random stream."""
        return items[self._rng.randrange(len(items))]

    def pick(self, items: list[str], text: str, at: int) -> str:
        """One of ``items``, the same for the same text, place and seed on every turn (SillyTavern's ``{{pick}}``)."""
        key = f"{self.seed}\x00{at}\x00{text}".encode("utf-8", "surrogatepass")
        return items[random.Random(zlib.crc32(key)).randrange(len(items))]

    def roll(self, formula: str) -> str | None:
        """``{{roll}}``'s total for ``1d6``, ``d20``, ``2d6+3`` or ``6`` (one die); ``None`` if not a formula."""
        formula = formula.strip()
        if formula.isdigit():
            formula = f"1d{formula}"
        m = _ROLL.fullmatch(formula)
        if m is None:
            return None
        count = int(m.group(1) or "1") if len(m.group(1) or "") <= 6 else MAX_ROLL_DICE + 1
        sides = int(m.group(2)) if len(m.group(2)) <= 10 else 0
        if not 1 <= count <= MAX_ROLL_DICE or not 1 <= sides <= 10**9:
            return None
        total = sum(self._rng.randint(1, sides) for _ in range(count))
        if m.group(3):
            bonus = int(m.group(4)) if len(m.group(4)) <= 12 else 0
            total += bonus if m.group(3) == "+" else -bonus
        return str(total)


def _items(args: str) -> list[str]:
    """``random``/``pick`` arguments: ``::a::b`` as written, or ``:a, b`` trimmed (``\\,`` a comma)."""
    if args.startswith("::"):
        return args[2:].split("::")
    parts = args[1:].replace("\\,", "\x00").split(",")
    return [p.strip().replace("\x00", ",") for p in parts]


def _time(m: Macros) -> str:
    hour = m.clock.hour % 12 or 12
    return f"{hour}:{m.clock.minute:02d} {'AM' if m.clock.hour < 12 else 'PM'}"


def _date(m: Macros) -> str:
    return f"{_MONTHS[m.clock.month - 1]} {m.clock.day}, {m.clock.year}"


_SIMPLE: Final[dict[str, Callable[[Macros], str]]] = {
    "char": lambda m: m.char,
    "user": lambda m: m.user,
    "time": _time,
    "date": _date,
    "weekday": lambda m: _WEEKDAYS[m.clock.weekday()],
    "isotime": lambda m: f"{m.clock.hour:02d}:{m.clock.minute:02d}",
    "isodate": lambda m: m.clock.date().isoformat(),
    "newline": lambda m: "\n",
    "noop": lambda m: "",
}
"""Macros without arguments, by lower-case name, and what each writes (SillyTavern's ``macros.js``)."""

_LISTS: Final = ("random", "pick")
"""Macros that choose one of their arguments: ``{{random:a,b}}``, ``{{random::a::b}}``, ``{{pick …}}``."""


_TOKEN: Final = re.compile(r"\{\{|\}\}")
MAX_NESTING: Final = 16
"""Macros inside a macro's arguments (``{{random:{{char}},{{user}}}}``) up to this depth; deeper ``{{`` is text."""


def expand(text: str, macros: Macros, *, original: str = "", where: str = "") -> tuple[str, list[Diagnostic]]:
    """``text`` with every macro expanded, and a ``CF928`` diagnostic per text that holds unknown ones.

    ``original``: what ``{{original}}`` stands for (the prompt a card's ``system_prompt`` replaces);
    ``where``: what the text is, for messages (``persona``, ``lore entry 3``). Raises
    :class:`MacroError` when the shared output bound would be passed. Positions in diagnostics are
    offsets into ``text``. A macro in another's arguments is expanded first, as SillyTavern does.
    """
    if "<" in text:  # <USER>, <BOT>: TavernAI's names (only the names: linear, written once)
        text = _ANGLE.sub(lambda m: "{{user}}" if m.group(1).lower() == "user" else "{{char}}", text)
    if _OPEN not in text:
        macros._take(len(text), where)
        return text, []
    # frames[0] is the output; each open "{{" a frame of its own: (where it opened, pieces)
    frames: list[tuple[int, list[str]]] = [(-1, [])]
    unknown: list[tuple[int, int, str]] = []
    at = 0
    trim_after = False
    for token in _TOKEN.finditer(text):
        literal = text[at : token.start()]
        if trim_after:
            literal, trim_after = literal.lstrip("\r\n"), False
        if literal:
            macros._take(len(literal), where)
            frames[-1][1].append(literal)
        at = token.end()
        if token.group() == _OPEN:
            if len(frames) > MAX_NESTING:
                macros._take(2, where)
                frames[-1][1].append(_OPEN)
            else:
                frames.append((token.start(), []))
            continue
        if len(frames) == 1:  # a "}}" that closes nothing
            macros._take(2, where)
            frames[-1][1].append(_CLOSE)
            continue
        opened, pieces = frames.pop()
        body = "".join(pieces)
        written = _one(body, macros, original, text, opened)
        if written is None:
            unknown.append((opened, token.end(), body))
            written = f"{_OPEN}{body}{_CLOSE}"
        elif written == _TRIM:  # {{trim}}: itself and the line breaks around it go
            _trim_end(frames[-1][1])
            written, trim_after = "", True
        macros._take(len(written) - len(body), where)  # (the body, counted as it came, is replaced)
        frames[-1][1].append(written)
    rest = text[at:]
    rest = rest.lstrip("\r\n") if trim_after else rest
    macros._take(len(rest), where)
    frames[-1][1].append(rest)
    macros._take(2 * (len(frames) - 1), where)  # "{{" never closed: text as written, each piece joined once
    out = "".join(itertools.chain(frames[0][1], *(itertools.chain((_OPEN,), p) for _o, p in frames[1:])))
    return out, _unknown_note(text, unknown, where)


_TRIM: Final = "\x00trim"

_CHAR_MARK: Final = "\ufdd0"
_USER_MARK: Final = "\ufdd1"
_MARKS: Final = re.compile("[\ufdd0\ufdd1]")
"""Unicode noncharacters (meant for a program's own use): what ``{{char}}`` and ``{{user}}`` write while a
text is read as markup (:class:`HeldNames`); a card's own text holds none (they are taken out first)."""


class HeldNames:
    """The names (``{{char}}``, ``{{user}}``) held out of a text that is expanded, then read as markup (a
    greeting): each expands to a mark no reader takes for markup, and :meth:`restore` puts the name back in
    the texts the reader made. A name is text, always: ``[anger]``, ``*kicks you*`` or ``Al & <b>`` as the
    player's name stays those characters, never an emotion, an action or a tag dropped."""

    def __init__(self, macros: Macros) -> None:
        self.macros = macros
        self.names = {_CHAR_MARK: macros.char, _USER_MARK: macros.user}
        macros.char, macros.user = _CHAR_MARK, _USER_MARK

    @staticmethod
    def clean(text: str) -> str:
        """``text`` without the marks (a card that holds one would have it read as a name)."""
        return _MARKS.sub("", text) if _MARKS.search(text) else text

    def restore(self, text: str, where: str = "") -> str:
        """``text`` (read from the expansion) with each mark its name again, the names' length within the bound."""
        if _MARKS.search(text) is None:
            return text
        self.macros._take(sum(text.count(mark) * (len(name) - 1) for mark, name in self.names.items()), where)
        return _MARKS.sub(lambda m: self.names[m.group()], text)  # (within the bound: taken before it is written)


def _trim_end(pieces: list[str]) -> None:
    """The line breaks at the end of what ``pieces`` hold, removed (before a ``{{trim}}``)."""
    while pieces:
        last = pieces[-1].rstrip("\r\n")
        pieces[-1] = last
        if last:
            return
        pieces.pop()


def _unknown_note(text: str, unknown: list[tuple[int, int, str]], where: str) -> list[Diagnostic]:
    """One ``CF928`` for every unknown macro of a text, at the first one."""
    if not unknown:
        return []
    first, end, _body = unknown[0]
    counts = collections.Counter(body.strip().split(":", 1)[0].strip()[:40] for _s, _e, body in unknown)
    names = sorted(counts)
    place = f"{where}: " if where else ""

    def said(name: str) -> str:  # (each name with how often it stands: a count is never of several names)
        return "{{" + name + "}}" + (f" ({counts[name]:,} times)" if counts[name] > 1 else "")

    if len(names) == 1:
        message = f"{place}unknown macro (or bad arguments) {said(names[0])} left as written"
    else:
        more = f", and {len(names) - 5:,} more" if len(names) > 5 else ""
        shown = ", ".join(said(n) for n in names[:5]) + more
        message = f"{place}unknown macros (or bad arguments) left as written: {shown}"
    return [Diagnostic.at(text, "CF928", message, first, end)]


def _one(body: str, macros: Macros, original: str, text: str, at: int) -> str | None:
    """What one macro (``body``: what stands between ``{{`` and ``}}``) writes; ``None`` if unknown."""
    name = body.strip().lower()
    simple = _SIMPLE.get(name)
    if simple is not None:
        return simple(macros)
    if name == "original":
        return original
    if name == "trim":
        return _TRIM
    if body.startswith("//"):
        return ""
    lowered = body.lower()
    for kind in _LISTS:  # {{random:a,b}}, {{random::a::b}}, {{random :a}} (SillyTavern: /{{random\s?::?(...)}}/)
        if lowered.startswith(kind):
            args = body[len(kind) :]
            args = args[1:] if args[:1].isspace() else args
            if not args.startswith(":") or not args.strip(":"):
                return None
            items = _items(args)
            return macros.choose(items) if kind == "random" else macros.pick(items, text, at)
    if lowered.startswith("roll") and body[4:5] in (":", " "):
        return macros.roll(body[5:])
    return None
