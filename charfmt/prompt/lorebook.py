"""Lorebooks: SillyTavern's World Info, read from a card's ``character_book`` or a World Info file, and activated.

A :class:`Lorebook` is a list of :class:`LoreEntry` and the book's scan settings. Each turn,
:meth:`Lorebook.activate` reads the newest messages (the player's new turn first, then the
history, newest first, each as ``Name: text``) and decides which entries go into the prompt,
as SillyTavern's ``checkWorldInfo`` (``public/scripts/world-info.js``) does:

- an entry activates when it is ``constant``, or one of its primary keys matches and its
  secondary keys satisfy its logic (AND ANY, NOT ALL, NOT ANY, AND ALL; secondary keys only
  count for a ``selective`` entry); disabled entries never do;
- a plain key matches as a substring (lower-cased unless case-sensitive), or as a whole word
  (``(?:^|\\W)key(?:$|\\W)``, JavaScript's ASCII ``\\W``) when whole-word matching is on and the key
  is one word; a ``/pattern/flags`` key is a regular expression matched against the raw text;
- the text scanned is the newest ``scan_depth`` messages (per entry or per book; 0 scans
  nothing), plus, with recursive scanning, the content of entries already activated (entries
  that ``prevent_recursion`` add nothing; entries that ``exclude_recursion`` are not activated
  by it);
- entries are processed from the highest ``order`` down; an entry with ``use_probability`` and a
  ``probability`` under 100 is kept when a roll from the seeded generator says so; the content
  (macros expanded) is added while the token budget holds: the entry that reaches it and every
  entry after it are cut, and scanning stops;
- the prompt gets the activated entries in ascending ``order``: before or after the character
  definition, or at a depth in the history with a role.

Regular expressions: Python's ``re`` cannot be stopped, so a key like ``/(a+)+$/`` could hang a
turn on a long message. Regex keys therefore run on the ``regex`` package (``charfmt[lorebook]``),
whose matcher takes a timeout: each search gets :data:`REGEX_TIMEOUT` seconds and one activation
:data:`REGEX_TIME` in all, whatever the pattern; a key that runs out of time is reported
(``CF942``) and does not match. Without the package, regex keys are not used (one ``CF942``).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from charfmt.diagnostics import CharfmtError, Diagnostic
from charfmt.parser import DEFAULT_MAX_SIZE
from charfmt.prompt.macros import Macros

Logic = Literal["and_any", "not_all", "not_any", "and_all"]
Position = Literal["before", "after", "depth"]
Role = Literal["system", "user", "assistant"]

LOGIC: Final[tuple[Logic, ...]] = ("and_any", "not_all", "not_any", "and_all")
"""SillyTavern's ``selectiveLogic`` numbers 0-3, in order."""
_POSITIONS: Final[dict[int, tuple[Position, str]]] = {
    0: ("before", "before the character"),
    1: ("after", "after the character"),
    2: ("depth", "top of the author's note (charfmt: at depth 4)"),
    3: ("depth", "bottom of the author's note (charfmt: at depth 4)"),
    4: ("depth", "at a depth"),
    5: ("after", "before the examples (charfmt: after the character)"),
    6: ("after", "after the examples (charfmt: after the character)"),
}
"""SillyTavern's ``position`` numbers, and where charfmt puts each (it has no author's note)."""
_ROLES: Final[tuple[Role, ...]] = ("system", "user", "assistant")
AUTHOR_NOTE_DEPTH: Final = 4
DEFAULT_SCAN_DEPTH: Final = 2
"""SillyTavern's default: the player's new message and the reply before it."""
DEFAULT_BUDGET: Final = 1024
"""Tokens the lore may take where neither the book nor the caller says (SillyTavern: 25 % of the context)."""
MAX_SCAN_DEPTH: Final = 1000
MAX_ENTRIES: Final = 100_000


class LorebookError(CharfmtError):
    """A file that is not a lorebook (SillyTavern World Info, or a card's ``character_book``)."""


class LoreEntry(BaseModel):
    """One World Info entry, in charfmt's names for SillyTavern's fields."""

    model_config = ConfigDict(frozen=True)

    uid: str
    """The entry's id (``uid`` of World Info, ``id`` of a card book, else its index)."""
    keys: tuple[str, ...] = ()
    """Primary keys: any one of them matching activates the entry."""
    secondary_keys: tuple[str, ...] = ()
    """Secondary keys, combined by ``logic`` (only for a ``selective`` entry)."""
    logic: Logic = "and_any"
    """How the secondary keys combine: AND ANY, NOT ALL, NOT ANY, AND ALL."""
    selective: bool = True
    """Whether the secondary keys count (SillyTavern: every entry is selective now)."""
    content: str = ""
    """What goes into the prompt (macros expanded when it does)."""
    comment: str = ""
    """The entry's title in the editor."""
    constant: bool = False
    """Always active (budget and probability permitting)."""
    enabled: bool = True
    """A disabled entry never activates."""
    order: int = 100
    """Insertion order: higher is processed first (kept first under the budget) and written last."""
    position: Position = "before"
    """Before or after the character definition, or at ``depth`` in the history."""
    depth: int = AUTHOR_NOTE_DEPTH
    """For ``position = "depth"``: how many messages from the end (0: after the new turn)."""
    role: Role = "system"
    """For ``position = "depth"``: the role of the inserted message."""
    case_sensitive: bool | None = None
    """``None``: the book's setting."""
    match_whole_words: bool | None = None
    """``None``: the book's setting."""
    scan_depth: int | None = None
    """Messages scanned for this entry; ``None``: the book's ``scan_depth``."""
    probability: int = 100
    """Chance (0-100) that an activated entry is kept, where ``use_probability``."""
    use_probability: bool = True
    """Whether ``probability`` is rolled."""
    exclude_recursion: bool = False
    """Not activated by the content of other entries (recursive scanning), only by messages."""
    prevent_recursion: bool = False
    """Its content does not activate other entries."""
    book: str = ""
    """The name of the lorebook it comes from."""
    char: str | None = None
    """Whom ``{{char}}`` names in its keys and content (a scene's cast member); ``None``: the turn's character."""


class Lorebook(BaseModel):
    """A lorebook: entries and the scan settings (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    name: str = ""
    """The book's name."""
    entries: tuple[LoreEntry, ...] = ()
    """Its entries, as written."""
    scan_depth: int = Field(DEFAULT_SCAN_DEPTH, ge=0, le=MAX_SCAN_DEPTH)
    """How many of the newest messages are scanned for keys."""
    token_budget: int | None = Field(None, ge=1)
    """The most tokens the activated entries may take (``None``: the caller's)."""
    recursive: bool = False
    """Whether activated entries' content is scanned too (recursive scanning)."""
    case_sensitive: bool = False
    """Entries' default for case-sensitive matching."""
    match_whole_words: bool = False
    """Entries' default for whole-word matching."""
    diagnostics: tuple[Diagnostic, ...] = ()
    """What reading the book noted (entries skipped, features charfmt does not apply)."""
    merged_order: bool = False
    """Entries already in processing order (a merge: each book's by ``order``, books in turn)."""
    _patterns: dict[tuple[str, str], Any] = PrivateAttr(default_factory=dict)
    """The book's regex keys compiled (or why not), kept with the book: a turn of a server compiles none again
    (a process-wide cache of a few thousand made a book of 20,000 regex keys compile them all every turn)."""

    @classmethod
    def from_json(cls, data: Any, name: str = "") -> Lorebook:
        """A book from parsed JSON: a World Info file, a card's ``character_book``, or a whole card."""
        if isinstance(data, dict) and isinstance(data.get("data"), dict) and "character_book" in data["data"]:
            data = data["data"]["character_book"]  # a card: its book
        elif isinstance(data, dict) and isinstance(data.get("data"), dict) and "entries" not in data:
            raise LorebookError("a character card without a lorebook (its data holds no character_book)")
        if not isinstance(data, dict) or not isinstance(data.get("entries"), (dict, list)):
            raise LorebookError('not a lorebook: a JSON object with "entries" (World Info, or a card book)')
        entries_raw = data["entries"]
        world_info = isinstance(entries_raw, dict)
        items = list(entries_raw.items()) if world_info else list(enumerate(entries_raw))
        if len(items) > MAX_ENTRIES:
            raise LorebookError(f"a lorebook of {len(items):,} entries (at most {MAX_ENTRIES:,})")
        name = str(data.get("name") or name)
        notes: list[Diagnostic] = []
        unused: set[str] = set()
        entries: list[LoreEntry] = []
        for index, (key, raw) in enumerate(items):
            read = _world_info_entry if world_info else _card_entry
            try:
                entries.append(read(raw, str(key), index, name, unused))
            except (TypeError, ValueError) as e:
                notes.append(lore_note("CF943", f"lorebook {name!r}: entry {key}: {_first_line(e)}: skipped"))
        if unused:
            notes.append(lore_note("CF944", f"lorebook {name!r}: not applied by charfmt: {', '.join(sorted(unused))}"))
        settings = _book_settings(data, notes, name)
        return cls(name=name, entries=tuple(entries), diagnostics=tuple(notes), **settings)

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<lorebook>", *, max_size: int | None = None) -> Lorebook:
        """A book from a file's bytes: World Info JSON, a card book, or a whole card (JSON, PNG or CHARX: its
        ``character_book``); raises ``LorebookError``. ``max_size``: what a PNG's or CHARX's card may inflate to
        (default: a character file's limit)."""
        if data.startswith((b"\x89PNG", b"PK\x03\x04")):  # a card's image or zip: the card JSON it carries
            from charfmt.prompt.cards import CardError, card_text  # noqa: PLC0415 (import cost: lark, regex load on first use)

            try:
                text = card_text(data, limit=max_size or DEFAULT_MAX_SIZE)
            except CardError as e:
                raise LorebookError(f"not a readable character card: {e}") from None
            data = text.encode("utf-8")
        try:
            parsed = json.loads(data.decode("utf-8-sig"))
        except UnicodeDecodeError as e:
            raise LorebookError(f"not UTF-8: byte 0x{data[e.start]:02X} at offset {e.start}") from None
        except RecursionError:
            raise LorebookError("nested too deeply") from None
        except ValueError as e:
            raise LorebookError(f"not JSON: {e}") from None
        return cls.from_json(parsed, name)

    def spoken_by(self, name: str, book: str | None = None) -> Lorebook:
        """This book with ``{{char}}`` naming ``name`` in every entry (a scene's cast member), renamed ``book``."""
        update: dict[str, Any] = {"char": name} if book is None else {"char": name, "book": book}
        entries = tuple(e.model_copy(update=update) for e in self.entries)
        return self.model_copy(update={"entries": entries, "name": self.name if book is None else book})

    def merged(self, *others: Lorebook) -> Lorebook:
        """This book's entries, then each other's (SillyTavern's "character lore first"), in one book.

        Each entry keeps its own book's settings (scan depth, case, whole words); the merged book
        scans recursively if any does, and its budget is the smallest one given. A book the same as
        one before it (the card's own book given again as a file, a copy under another name: the same
        entries and settings) is read once, with a warning (``CF946``): its entries would fire twice.
        """
        books: list[Lorebook] = []
        notes: list[Diagnostic] = []
        for book in (self, *others):
            twin = next((kept for kept in books if _same_book(kept, book)), None)
            if twin is None:
                books.append(book)
                continue
            said = f"lorebook {_shown_name(book)} is the same book as {_shown_name(twin)}"
            notes.append(lore_note("CF946", f"{said}: read once (its entries would fire twice)"))
        entries = tuple(e for book in books for e in _settled(book))
        budgets = [b.token_budget for b in books if b.token_budget is not None]
        return Lorebook(
            name=" + ".join(b.name for b in books if b.name),
            entries=entries,
            scan_depth=max(b.scan_depth for b in books),
            token_budget=min(budgets) if budgets else None,
            recursive=any(b.recursive for b in books),
            diagnostics=(*(d for b in books for d in b.diagnostics), *notes),
            merged_order=True,
        )

    def activate(
        self,
        messages: Sequence[str],
        *,
        counter: Callable[[str], int],
        budget: int | None = None,
        rng: random.Random | None = None,
        macros: Macros | None = None,
    ) -> Activation:
        """The entries ``messages`` (newest first, each ``Name: text``) activate; see the module docstring.

        ``budget``: the tokens the lore may take where the book sets none (``None``:
        :data:`DEFAULT_BUDGET`); ``rng``: the probability rolls (seed it for a reproducible
        turn); ``macros``: what expands the entries' keys and content.
        """
        return _Scan(self, messages, counter, budget, rng or random.Random(), macros).run()


def checked_books(lorebooks: Any, what: str = "lorebooks") -> tuple[Lorebook, ...]:
    """``lorebooks`` as given to a render (a list or tuple of :class:`Lorebook`), or a ``TypeError`` that says what
    else it holds: a ``None`` or a file name among them is never left out in silence."""
    if isinstance(lorebooks, Lorebook) or not isinstance(lorebooks, (list, tuple)):
        raise TypeError(f"{what} must be a list of Lorebook, not {type(lorebooks).__name__} ([book] for one)")
    for n, book in enumerate(lorebooks):
        if not isinstance(book, Lorebook):
            raise TypeError(
                f"{what}[{n}] is {type(book).__name__}, not a Lorebook (Lorebook.from_bytes or from_json reads one)"
            )
    return tuple(lorebooks)


@dataclass(frozen=True)
class Placed:
    """An activated entry and the text it adds."""

    entry: LoreEntry
    text: str
    tokens: int


@dataclass
class Activation:
    """What one turn's scan decided: the entries placed (in prompt order), those cut, and what it noted."""

    placed: list[Placed] = field(default_factory=list)
    """Activated entries in prompt order (ascending ``order``)."""
    cut: list[LoreEntry] = field(default_factory=list)
    """Entries that activated but did not fit the token budget."""
    lost: list[LoreEntry] = field(default_factory=list)
    """Entries whose keys matched but whose ``probability`` roll said no (the order they were rolled in)."""
    budget: int = 0
    """The budget the scan ran under."""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """``CF940`` (what fired), ``CF941`` (what the budget cut), regex keys not used, macros."""

    def texts(self, position: Position) -> list[str]:
        """The texts placed at ``position`` (``before``/``after``), in prompt order."""
        return [p.text for p in self.placed if p.entry.position == position and p.text]

    def at_depth(self) -> list[tuple[int, Role, str]]:
        """Entries at a depth: (depth, role, the texts of that depth and role joined), deepest first."""
        groups: dict[tuple[int, Role], list[str]] = {}
        for p in self.placed:
            if p.entry.position == "depth" and p.text:
                groups.setdefault((p.entry.depth, p.entry.role), []).append(p.text)
        return sorted(((d, r, "\n".join(t)) for (d, r), t in groups.items()), key=lambda x: -x[0])

    @property
    def tokens(self) -> int:
        """Tokens the placed entries take, as the counter counted them."""
        return sum(p.tokens for p in self.placed)

    def keeping(self, count: int, budget: int) -> Activation:
        """This lore with only its ``count`` entries of highest priority placed (the highest ``order``, as the scan
        takes them; of equal orders, the first placed): the others cut, each named in a ``CF947`` (the prompt's
        token ``budget`` was reached), the ``CF940`` naming those left."""
        ranked = sorted(range(len(self.placed)), key=lambda i: (-self.placed[i].entry.order, i))
        kept = set(ranked[:count])
        placed = [p for i, p in enumerate(self.placed) if i in kept]
        out = [p.entry for i, p in enumerate(self.placed) if i not in kept]
        notes = [d for d in self.diagnostics if d.code != "CF940"]
        fired = _fired_note(placed)
        if fired is not None:
            notes.insert(next((n for n, d in enumerate(notes) if d.code == "CF941"), len(notes)), fired)
        if out:
            notes.append(
                lore_note("CF947", f"lore: the prompt's token budget {budget} reached; left out: {_named(out)}")
            )
        return Activation(placed=placed, cut=[*self.cut, *out], lost=self.lost, budget=self.budget, diagnostics=notes)

    def report(self) -> dict[str, Any]:
        """Which entries fired, which the budget cut and which matched but lost their probability roll, as JSON
        (``render --explain``, ``/v1/turn``'s ``lore``)."""
        return {
            "fired": [_described(p.entry) | {"tokens": p.tokens} for p in self.placed],
            "cut": [_described(e) for e in self.cut],
            "lost": [_described(e) | {"probability": e.probability} for e in self.lost],
            "tokens": self.tokens,
            "budget": self.budget,
        }


def _described(entry: LoreEntry) -> dict[str, Any]:
    where = entry.position if entry.position != "depth" else f"depth {entry.depth} ({entry.role})"
    return {"book": entry.book, "uid": entry.uid, "comment": entry.comment, "order": entry.order, "position": where}


def _named(entries: Sequence[LoreEntry]) -> str:
    """The first twenty of ``entries`` by label (``, ...`` where there are more)."""
    return ", ".join(_label(e) for e in entries[:20]) + (", ..." if len(entries) > 20 else "")


def _fired_note(placed: Sequence[Placed]) -> Diagnostic | None:
    """The ``CF940`` naming the entries ``placed`` (``None``: none were)."""
    if not placed:
        return None
    count = f"{len(placed)} entr{'y' if len(placed) == 1 else 'ies'}"
    return lore_note("CF940", f"lore: {count} active: {_named([p.entry for p in placed])}")


def _label(entry: LoreEntry) -> str:
    title = f" ({entry.comment[:40]})" if entry.comment else ""
    return f"{entry.book + ':' if entry.book else ''}{entry.uid}{title}"


# --- the scan ----------------------------------------------------------------------------


class _Scan:
    """One activation: SillyTavern's scan loop (initial scan, then recursion steps)."""

    def __init__(  # noqa: PLR0917 (one private call site)
        self,
        book: Lorebook,
        messages: Sequence[str],
        counter: Callable[[str], int],
        budget: int | None,
        rng: random.Random,
        macros: Macros | None,
    ) -> None:
        self.book = book
        self.messages = [m.strip() for m in messages[:MAX_SCAN_DEPTH]]
        self.counter = counter
        self.budget = book.token_budget or budget or DEFAULT_BUDGET
        self.rng = rng
        self.macros = macros
        self.recursed: list[str] = []
        self.notes: list[Diagnostic] = []
        self.regex = _RegexClock(self.notes, book._patterns)
        self._texts: dict[tuple[int, bool], str] = {}

    def text(self, depth: int, case_sensitive: bool) -> str:
        """The scanned text for ``depth``: ``\\x01`` before each message (SillyTavern's buffer), recursion after."""
        key = (depth, case_sensitive)
        found = self._texts.get(key)
        if found is None:
            if depth <= 0:
                found = ""
            else:
                joined = "\x01" + "\n\x01".join([*self.messages[:depth], *self.recursed])
                found = joined if case_sensitive else joined.lower()
            self._texts[key] = found
        return found

    def run(self) -> Activation:
        entries = self.book.entries
        ordered = list(entries) if self.book.merged_order else sorted(entries, key=lambda e: -e.order)  # stable
        done: set[int] = set()
        accepted: list[Placed] = []
        cut: list[LoreEntry] = []
        lost: list[LoreEntry] = []
        recursion = False
        total = 0
        while True:
            now = [e for e in ordered if id(e) not in done and self.activates(e, recursion)]
            new: list[Placed] = []
            overflow = False
            for n, entry in enumerate(now):
                done.add(id(entry))
                if entry.use_probability and entry.probability < 100 and self.rng.random() * 100 > entry.probability:
                    lost.append(entry)  # (matched, not rolled: said by --explain, never silent)
                    continue
                text = self.expand(entry.content, entry)
                tokens = self.counter(text + "\n")
                if total + tokens >= self.budget:
                    cut += now[n:]
                    overflow = True
                    break
                total += tokens
                new.append(Placed(entry, text, tokens))
            accepted += new
            feeding = [p.text for p in new if not p.entry.prevent_recursion]
            if overflow or not self.book.recursive or not feeding:
                break
            self.recursed.append("\n".join(feeding))
            self._texts.clear()
            recursion = True
        return self._activation(accepted, cut, lost)

    def _activation(self, accepted: list[Placed], cut: list[LoreEntry], lost: list[LoreEntry]) -> Activation:
        placed = list(reversed(sorted(accepted, key=lambda p: -p.entry.order)))
        notes = self.notes
        fired = _fired_note(placed)
        if fired is not None:
            notes.append(fired)
        if cut:
            notes.append(lore_note("CF941", f"lore: token budget {self.budget} reached; left out: {_named(cut)}"))
        return Activation(placed=placed, cut=list(cut), lost=lost, budget=self.budget, diagnostics=notes)

    def expand(self, text: str, entry: LoreEntry, what: str = "") -> str:
        """``text`` of ``entry`` with its macros expanded (``{{char}}``: the entry's ``char``, else the turn's)."""
        macros, char = self.macros, entry.char
        if macros is None:
            return text
        if "{{" not in text and "<" not in text:  # (nothing to expand: counted, and no label made)
            macros._take(len(text), "")
            return text
        where = f"lore entry {_label(entry)}{what}"
        if char is None or char == macros.char:
            return macros.text(text, where=where, notes=self.notes)
        turns, macros.char = macros.char, char  # (a cast member's entry: {{char}} is that member)
        try:
            return macros.text(text, where=where, notes=self.notes)
        finally:
            macros.char = turns

    def activates(self, entry: LoreEntry, recursion: bool) -> bool:
        """Whether ``entry`` activates in this step (SillyTavern's checks, in its order)."""
        if not entry.enabled or (recursion and entry.exclude_recursion):
            return False
        if entry.constant:
            return True
        if not entry.keys:
            return False
        case = entry.case_sensitive if entry.case_sensitive is not None else self.book.case_sensitive
        whole = entry.match_whole_words if entry.match_whole_words is not None else self.book.match_whole_words
        depth = entry.scan_depth if entry.scan_depth is not None else self.book.scan_depth
        raw = self.text(depth, True)
        text = raw if case else self.text(depth, False)
        if not raw:
            return False

        def matches(key: str) -> bool:
            key = self.expand(key, entry, " key").strip() if "{{" in key else key.strip()
            return bool(key) and self.match(raw, text, key, case=case, whole=whole, entry=entry)

        if not any(matches(k) for k in entry.keys):
            return False
        if not entry.selective or not entry.secondary_keys:
            return True
        found = [matches(k) for k in entry.secondary_keys]
        return {
            "and_any": any(found),
            "not_all": not all(found),
            "not_any": not any(found),
            "and_all": all(found),
        }[entry.logic]

    def match(self, raw: str, text: str, key: str, *, case: bool, whole: bool, entry: LoreEntry) -> bool:
        """SillyTavern's ``matchKeys``: a regex key on the raw text, else plain (case, whole words)."""
        regex = _regex_key(key) if key.startswith("/") else None  # (most keys are plain: no call)
        if regex is not None:
            found = self.regex.search(regex, key, raw)
            if found is not None:
                return found
        needle = key if case else key.lower()
        if whole and len(needle.split()) <= 1:
            return _whole_word(needle).search(text) is not None
        return needle in text


@lru_cache(maxsize=4096)
def _whole_word(needle: str) -> re.Pattern[str]:
    # JavaScript's \W is ASCII: a key is a whole word next to any non-ASCII-letter (CJK text included)
    return re.compile(rf"(?:^|\W)({re.escape(needle)})(?:$|\W)", re.ASCII)


_REGEX_KEY: Final = re.compile(r"^/([\w\W]+?)/([gimsuy]*)$")
_UNESCAPED_SLASH: Final = re.compile(r"(^|[^\\])/")


@lru_cache(maxsize=4096)
def _regex_key(key: str) -> tuple[str, str] | None:
    """A ``/pattern/flags`` key's pattern and flags (SillyTavern's ``parseRegexFromString``), else ``None``."""
    m = _REGEX_KEY.match(key)
    if m is None or _UNESCAPED_SLASH.search(m.group(1)):
        return None
    return m.group(1), m.group(2)


REGEX_TIMEOUT: Final = 0.05
"""Seconds one regex key's search may take (the ``regex`` package's timeout)."""
REGEX_TIME: Final = 0.5
"""Seconds all regex keys of one activation may take together; keys after that are not used."""


class _RegexClock:
    """Regex keys run with a timeout each and a time budget for the whole activation (see the module docstring)."""

    def __init__(self, notes: list[Diagnostic], patterns: dict[tuple[str, str], Any]) -> None:
        self.notes = notes
        self.patterns = patterns
        self.spent = 0.0
        self.refused: set[str] = set()
        self.plain: set[str] = set()

    def refuse(self, key: str, why: str) -> bool:
        if key not in self.refused:
            self.refused.add(key)
            if len(self.refused) <= 10:
                self.notes.append(lore_note("CF942", f"lore: regex key {key[:80]!r} not used: {why}"))
        return False

    def search(self, regex: tuple[str, str], key: str, text: str) -> bool | None:
        """Whether the regex key matches ``text``; ``None``: not a valid pattern, matched as plain text."""
        if key in self.refused:
            return False
        compiled = self.patterns.get(regex)
        if compiled is None:
            compiled = _compiled(*regex)
            if len(self.patterns) < MAX_PATTERNS:  # (beyond: compiled again each time, memory bounded)
                self.patterns[regex] = compiled
        if isinstance(compiled, _Invalid):
            if key not in self.plain:
                self.plain.add(key)
                self.notes.append(lore_note("CF942", f"lore: regex key {key[:80]!r} {compiled}: matched as plain text"))
            return None
        if isinstance(compiled, str):
            return self.refuse(key, compiled)
        if self.spent >= REGEX_TIME:
            return self.refuse(key, f"the regex keys of this turn took {REGEX_TIME} s already")
        start = time.perf_counter()
        try:
            sticky = "y" in regex[1]
            found = (compiled.match if sticky else compiled.search)(text, timeout=REGEX_TIMEOUT)
        except TimeoutError:
            return self.refuse(key, f"its search took over {REGEX_TIMEOUT} s (a pattern that backtracks)")
        finally:
            self.spent += time.perf_counter() - start
        return found is not None


class _Invalid(str):
    """Why a ``/pattern/`` is not a valid pattern (SillyTavern then reads the key as plain text)."""

    __slots__ = ()


MAX_PATTERNS: Final = 100_000
"""Regex keys a book keeps compiled (about 2 KB each)."""


def _compiled(pattern: str, flags: str) -> Any:
    """The ``regex`` package's compiled pattern for a JavaScript ``/pattern/flags``, or why not (a string;
    an ``_Invalid`` one where the pattern itself is bad)."""
    try:
        import regex  # noqa: PLC0415 (optional: charfmt[lorebook])
    except ImportError:
        return "needs the regex package (pip install 'charfmt[lorebook]'): Python's re cannot be stopped"
    value = 0
    for flag, bit in (("i", regex.IGNORECASE), ("m", regex.MULTILINE), ("s", regex.DOTALL)):
        if flag in flags:
            value |= bit
    try:
        return regex.compile(pattern, value | regex.V0)
    except (regex.error, ValueError, OverflowError, RecursionError) as e:
        return _Invalid(f"is not a valid pattern ({e})")


# --- reading ------------------------------------------------------------------------------


def lore_note(code: str, message: str) -> Diagnostic:
    """A note about a lorebook as a whole (``CF94x``): a diagnostic with no position in a reply."""
    return Diagnostic.at("", code, message, 0)


_BOOK_SETTINGS: Final = ("scan_depth", "token_budget", "recursive", "case_sensitive", "match_whole_words")


def _same_book(a: Lorebook, b: Lorebook) -> bool:
    """Whether ``a`` and ``b`` hold the same entries with the same settings, whatever each is named (and whoever
    its ``{{char}}`` names: a scene's member's copy of its card book is that book)."""
    if len(a.entries) != len(b.entries) or any(getattr(a, k) != getattr(b, k) for k in _BOOK_SETTINGS):
        return False
    fields = [k for k in LoreEntry.model_fields if k not in ("book", "char")]  # (a cast member's copy: the same)
    return all(all(getattr(x, k) == getattr(y, k) for k in fields) for x, y in zip(a.entries, b.entries, strict=True))


def _shown_name(book: Lorebook) -> str:
    return repr(book.name) if book.name else "(unnamed)"


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if not isinstance(value, list):
        raise TypeError(f"{what} is not a list of strings")
    return tuple(v for v in value if isinstance(v, str) and v.strip())


def _flag(value: Any, what: str, default: bool | None = False) -> bool | None:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{what} is not true or false")


def _number(value: Any, what: str, default: int | None, low: int = -(10**9), high: int = 10**9) -> int | None:
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{what} is not a number")
    try:
        number = int(float(value))
    except (ValueError, OverflowError):
        raise ValueError(f"{what} is not a number") from None
    return max(low, min(high, number))


def _logic(value: Any) -> Logic:
    number = _number(value, "selectiveLogic", 0, 0, 3)
    return LOGIC[number or 0]


def _position(value: Any, fallback: int) -> int:
    number = _number(value, "position", fallback, 0, 99)
    if number not in _POSITIONS:
        raise ValueError(f"position {number} is not one SillyTavern writes (0-6)")
    return number


def _role(value: Any) -> Role:
    number = _number(value, "role", 0, 0, 2)
    return _ROLES[number or 0]


_UNAPPLIED: Final = (
    ("group", "inclusion groups"),
    ("sticky", "sticky"),
    ("cooldown", "cooldown"),
    ("delay", "delay"),
    ("vectorized", "vector matching"),
    ("delayUntilRecursion", "delay until recursion"),
    ("delay_until_recursion", "delay until recursion"),
    ("characterFilter", "character filters"),
    ("character_filter", "character filters"),
)


def _unapplied(raw: dict[str, Any], unused: set[str]) -> None:
    for key, label in _UNAPPLIED:
        value = raw.get(key)
        if value and value not in ({"isExclude": False, "names": [], "tags": []},):
            unused.add(label)
    content = raw.get("content")
    if isinstance(content, str) and content.startswith("@@"):
        unused.add("decorators (@@activate...)")


def _entry(fields: dict[str, Any], position: int, book: str) -> LoreEntry:
    place, _words = _POSITIONS[position]
    depth = fields.pop("depth")
    if position in (2, 3):
        depth = AUTHOR_NOTE_DEPTH
    return LoreEntry(position=place, depth=depth, book=book, **fields)


def _content(raw: Any) -> str:
    """An entry's ``content``: a ``TypeError`` (the entry is skipped, and said) where the entry is no object
    or its content no string."""
    if not isinstance(raw, dict):
        raise TypeError("not an object")
    content = raw.get("content", "")
    if not isinstance(content, str):
        raise TypeError("content is not a string")
    return content


_TAVERN_FIELDS: Final[tuple[tuple[str, str, str, Callable[[Any, str], Any]], ...]] = (
    ("depth", "depth", "depth", lambda value, key: _number(value, key, AUTHOR_NOTE_DEPTH, 0, MAX_SCAN_DEPTH)),
    ("role", "role", "role", lambda value, key: _role(value)),
    ("case_sensitive", "caseSensitive", "case_sensitive", lambda value, key: _flag(value, key, None)),
    ("match_whole_words", "matchWholeWords", "match_whole_words", lambda value, key: _flag(value, key, None)),
    ("scan_depth", "scanDepth", "scan_depth", lambda value, key: _number(value, key, None, 0, MAX_SCAN_DEPTH)),
    ("probability", "probability", "probability", lambda value, key: _number(value, key, 100, 0, 100)),
    ("use_probability", "useProbability", "useProbability", lambda value, key: _flag(value, key, True)),
    ("exclude_recursion", "excludeRecursion", "exclude_recursion", _flag),
    ("prevent_recursion", "preventRecursion", "prevent_recursion", _flag),
)
"""SillyTavern's own fields of an entry, read alike from both formats: ``(LoreEntry's field, World Info's key,
a card book's key under ``extensions``, how its value is read)``."""


def _tavern_fields(source: dict[str, Any], *, card: bool) -> dict[str, Any]:
    """``_TAVERN_FIELDS`` read from a World Info entry, or from a card book entry's ``extensions`` (``card``)."""
    read = ((field, card_key if card else key, how) for field, key, card_key, how in _TAVERN_FIELDS)
    return {field: how(source.get(key), key) for field, key, how in read}


def _world_info_entry(raw: Any, key: str, index: int, book: str, unused: set[str]) -> LoreEntry:
    """One entry of a SillyTavern World Info file (``entries: {"0": {...}}``)."""
    content = _content(raw)
    _unapplied(raw, unused)
    fields: dict[str, Any] = {
        "uid": str(raw.get("uid", key)),
        "keys": _strings(raw.get("key"), "key"),
        "secondary_keys": _strings(raw.get("keysecondary"), "keysecondary"),
        "logic": _logic(raw.get("selectiveLogic")),
        "selective": _flag(raw.get("selective"), "selective", True),
        "content": content,
        "comment": str(raw.get("comment") or ""),
        "constant": _flag(raw.get("constant"), "constant"),
        "enabled": not _flag(raw.get("disable"), "disable"),
        "order": _number(raw.get("order"), "order", 100),
        **_tavern_fields(raw, card=False),
    }
    return _entry(fields, _position(raw.get("position"), 0), book)


def _card_entry(raw: Any, key: str, index: int, book: str, unused: set[str]) -> LoreEntry:
    """One entry of a card's ``character_book`` (V2/V3 spec fields, SillyTavern's under ``extensions``)."""
    content = _content(raw)
    ext = raw.get("extensions")
    ext = ext if isinstance(ext, dict) else {}
    _unapplied(ext, unused)
    spec_place = 0 if raw.get("position") == "before_char" else 1  # (none: after, as SillyTavern reads a card)
    ident = raw.get("id", index)
    fields: dict[str, Any] = {
        "uid": str(ident if isinstance(ident, (int, str)) and not isinstance(ident, bool) else index),
        "keys": _strings(raw.get("keys"), "keys"),
        "secondary_keys": _strings(raw.get("secondary_keys"), "secondary_keys"),
        "logic": _logic(ext.get("selectiveLogic")),
        "selective": _flag(raw.get("selective"), "selective", False),
        "content": content,
        "comment": str(raw.get("comment") or raw.get("name") or ""),
        "constant": _flag(raw.get("constant"), "constant"),
        "enabled": _flag(raw.get("enabled"), "enabled", True),
        "order": _number(raw.get("insertion_order"), "insertion_order", 100),
        **_tavern_fields({"case_sensitive": raw.get("case_sensitive"), **ext}, card=True),  # (V3: a spec field too)
    }
    return _entry(fields, _position(ext.get("position"), spec_place), book)


def _book_settings(data: dict[str, Any], notes: list[Diagnostic], name: str) -> dict[str, Any]:
    """A card book's ``scan_depth``, ``token_budget``, ``recursive_scanning`` (a World Info file has none)."""
    out: dict[str, Any] = {}
    readers: tuple[tuple[str, str, Callable[[Any], int | bool | None]], ...] = (
        ("scan_depth", "scan_depth", lambda v: _number(v, "scan_depth", None, 0, MAX_SCAN_DEPTH)),
        ("token_budget", "token_budget", lambda v: _number(v, "token_budget", None, 1, 10**9)),
        ("recursive_scanning", "recursive", lambda v: _flag(v, "recursive_scanning", None)),
    )
    for key, target, read in readers:
        try:
            value = read(data.get(key))
        except (TypeError, ValueError) as e:
            notes.append(lore_note("CF943", f"lorebook {name!r}: {_first_line(e)}: the default is used"))
            continue
        if value is not None:
            out[target] = value
    return out


def _settled(book: Lorebook) -> Iterable[LoreEntry]:
    """The book's entries with its defaults written into each (so they survive a merge), highest order first."""
    for entry in sorted(book.entries, key=lambda e: -e.order):
        yield entry.model_copy(
            update={
                "case_sensitive": book.case_sensitive if entry.case_sensitive is None else entry.case_sensitive,
                "match_whole_words": (
                    book.match_whole_words if entry.match_whole_words is None else entry.match_whole_words
                ),
                "scan_depth": book.scan_depth if entry.scan_depth is None else entry.scan_depth,
            }
        )
