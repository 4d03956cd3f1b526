"""A character's parts of one turn's prompt: macros expanded, the card's instructions, the lore activated.

Everything a card writes is kept with its macros (``{{user}}``, ``{{random:…}}``…) and expanded
here, once per turn, through one :class:`~charfmt.prompt.macros.Macros` (one output bound for the whole
turn): the persona, the few-shots, the card's ``system_prompt`` (``{{original}}``: charfmt's
opening line it replaces) and ``post_history_instructions``, the lore entries. The lore is
activated from the new turn and the recent history (newest first, ``Name: text`` as SillyTavern
scans them), from the card's own ``character_book`` and the lorebooks the caller adds.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, TypeVar

from charfmt.diagnostics import CharfmtError, Diagnostic
from charfmt.models import Chat, Reply
from charfmt.prompt._token_fit import BudgetError
from charfmt.prompt.lorebook import (
    AUTHOR_NOTE_DEPTH,
    DEFAULT_BUDGET,
    MAX_SCAN_DEPTH,
    Activation,
    Lorebook,
    LorebookError,
    LoreEntry,
    checked_books,
    lore_note,
)
from charfmt.prompt.macros import HeldNames, MacroError, Macros
from charfmt.writer import canonical_form

if TYPE_CHECKING:
    from charfmt.prompt.character import Character, Exchange
    from charfmt.prompt.userinput import UserTurn

LORE_SHARE: Final = 4
"""Where no book sets a budget, the lore may take a quarter of the prompt's budget (SillyTavern's 25 %)."""


@dataclass
class TurnParts:
    """What a character brings to one turn's prompt, macros expanded."""

    character: Character
    """The character with its persona and few-shots expanded (what the templates print)."""
    intro: str | None
    """The card's ``system_prompt``, expanded: it replaces the prompt's opening line (``None``: the default)."""
    post_history: str
    """The card's ``post_history_instructions``, expanded ("" where none): sent after the history."""
    lore: Activation | None
    """The lore activated for the turn (``None``: no lorebook)."""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """What expanding and activating noted (unknown macros, regex keys not used, what fired or was cut)."""


_Built = TypeVar("_Built")


def fit_lore(
    lore: Activation | None, build: Callable[[Activation | None], _Built], *, budget: int
) -> tuple[_Built, Activation | None]:
    """``build(lore)`` and the lore it holds: all of ``lore`` where the prompt fits ``budget``, else the most of it
    that fits, cut from its lowest priority up (``Activation.keeping``: each entry cut named in a ``CF947``).

    ``build`` raises ``BudgetError`` where its prompt does not fit (``fit_messages``); where it does not fit even
    with no lore, the ``BudgetError`` says how many of the tokens were lore. More lore never makes a prompt shorter,
    so the search halves the range each time."""
    try:
        return build(lore), lore
    except BudgetError as e:
        if lore is None or not lore.placed:
            raise
        whole = e
    bare = lore.keeping(0, budget)
    try:
        best = build(bare), bare
    except BudgetError as e:
        raise _lore_too_long(whole, e) from None
    lo, hi = 0, len(lore.placed) - 1  # (``lo`` entries fit: ``best``'s; more than ``hi`` do not)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        trimmed = lore.keeping(mid, budget)
        try:
            best, lo = (build(trimmed), trimmed), mid
        except BudgetError:
            hi = mid - 1
    return best


def _lore_too_long(whole: BudgetError, bare: BudgetError) -> BudgetError:
    """The error of a prompt that does not fit with its lore (``whole``) nor without it (``bare``)."""
    if whole.need is None or bare.need is None:
        return BudgetError(f"{bare} (and its lore, all cut)", need=bare.need, budget=bare.budget, what=bare.what)
    lore = whole.need - bare.need
    return BudgetError(
        f"{whole.what} need {whole.need} tokens, {lore} of them lore (all of it cut, they still need {bare.need});"
        f" the budget is {bare.budget}",
        need=bare.need, budget=bare.budget, what=bare.what,
    )  # fmt: skip


def with_lore(parts: TurnParts, lore: Activation | None) -> TurnParts:
    """``parts`` holding ``lore`` (``parts.lore`` or less of it, ``fit_lore``'s) in place of its own, with its notes."""
    own = parts.lore.diagnostics if parts.lore is not None else []
    notes = [d for d in parts.diagnostics if not any(d is n for n in own)]
    return replace(parts, lore=lore, diagnostics=[*notes, *(lore.diagnostics if lore is not None else [])])


def opening_line(character: Character) -> str:
    """The system prompt's default opening line: what a card's ``{{original}}`` stands for."""
    return f"You are {character.name}. Stay in character at all times."


def macros_for(character: Character, seed: int | str | None, now: dt.datetime | None) -> Macros:
    """The macros of one use for ``character``: ``{{char}}`` its card's nickname or name, ``{{user}}`` the player."""
    return Macros(char_name(character), character.user_name, seed=seed, now=now)


def char_name(character: Character) -> str:
    """What ``{{char}}`` names for ``character``: its card's nickname where it has one, else its name."""
    nickname = character.card.data.get("nickname") if character.card is not None else None
    return nickname.strip() if isinstance(nickname, str) and nickname.strip() else character.name


def turn_seed(seed: int | str | None, history: Sequence[Any]) -> int | str | None:
    """The seed of a turn's macros and rolls after ``history`` (``None``: fresh entropy): each turn its own."""
    return None if seed is None else f"{seed}/{len(history)}"


def cast_expanded(cast: dict[str, Character], macros: Macros, notes: list[Diagnostic]) -> dict[str, Character]:
    """A scene's cast with each member's persona and few-shots expanded as a single character's are: ``{{char}}``
    that member (its card's nickname or name), ``{{user}}`` ``macros.user`` (the scene's player); one output
    bound for the whole cast (``macros``'). A member without a macro is itself."""
    out: dict[str, Character] = {}
    scene = macros.char
    try:
        for who, member in cast.items():
            macros.char = char_name(member)
            out[who] = _expanded(member, macros, notes) if has_macros(member) else member
    finally:
        macros.char = scene
    return out


def turn_parts(
    character: Character,
    history: Sequence[Exchange],
    turn: UserTurn,
    *,
    lorebooks: Sequence[Lorebook] | None = (),
    counter: Callable[[str], int],
    budget: int | None = None,
    seed: int | str | None = None,
    now: dt.datetime | None = None,
) -> TurnParts:
    """The character's parts of the prompt for ``turn`` after ``history`` (see the module docstring).

    ``seed``: the turn's random macros and lore rolls (``None``: fresh entropy; the same seed and
    history give the same turn); ``now``: what ``{{time}}`` and ``{{date}}`` read. ``lorebooks``:
    lore beyond the card's own book (``None``: no lore at all, not even the card's).
    """
    if lorebooks is not None:
        lorebooks = checked_books(lorebooks)
    if character.card is None and not lorebooks and not has_macros(character):
        return TurnParts(character, None, "", None, [])  # (a character file without macros: nothing to do)
    seeded = turn_seed(seed, history)
    macros = macros_for(character, seeded, now)
    notes: list[Diagnostic] = []
    expanded = _expanded(character, macros, notes)
    card = character.card.data if character.card is not None else {}
    system_prompt = card.get("system_prompt")
    intro = None
    if isinstance(system_prompt, str) and system_prompt.strip():
        intro = macros.text(system_prompt, original=opening_line(character), where="system_prompt", notes=notes)
    post = card.get("post_history_instructions")
    post_history = ""
    if isinstance(post, str) and post.strip():
        post_history = macros.text(post, where="post_history_instructions", notes=notes).strip()
    given = [*card_books(character), *lorebooks] if lorebooks is not None else []
    books = [b for b in given if b.entries]
    notes += [d for b in given if not b.entries for d in b.diagnostics]  # (a book each of whose entries was skipped)
    lore = None
    if books:
        book = merged(books)
        share = budget // LORE_SHARE if budget is not None else DEFAULT_BUDGET
        rng = random.Random(f"lore/{seeded}") if seeded is not None else random.Random()
        messages = scan_messages(character, history, turn)
        lore = book.activate(messages, counter=counter, budget=max(1, share), rng=rng, macros=macros)
        notes += [*book.diagnostics, *lore.diagnostics]
    return TurnParts(expanded, intro, post_history, lore, notes)


_MERGED: dict[tuple[int, ...], tuple[list[Lorebook], Lorebook]] = {}
"""The last few merges of books, by the books' identities (a turn of a server merges the same ones)."""


def merged(books: list[Lorebook]) -> Lorebook:
    """``books`` as one (``Lorebook.merged``), merged once for the same books."""
    if len(books) == 1:
        return books[0]
    key = tuple(id(b) for b in books)
    kept = _MERGED.get(key)
    if kept is not None and all(a is b for a, b in zip(kept[0], books, strict=True)):
        return kept[1]
    book = books[0].merged(*books[1:])
    _MERGED[key] = (list(books), book)
    while len(_MERGED) > 16:
        del _MERGED[next(iter(_MERGED))]
    return book


_BOOKS: dict[int, tuple[Any, list[Lorebook]]] = {}
"""The lore of the last few cards read (``card_books``), by the card's identity (a server reads one every turn)."""


def lore_entries(served: Any, lorebooks: Sequence[Lorebook] = ()) -> int:
    """How many lore entries a turn of ``served`` (a ``Character`` or a ``Scene``) scans: its cards' books, a
    scene's own and its members', and ``lorebooks``."""
    members = list(served.cast.values()) if hasattr(served, "cast") else [served]
    books = [*lorebooks, *(b for m in members for b in card_books(m))]
    if hasattr(served, "cast"):  # (a scene's own book and its members' given ones)
        books += [b for b in (served.lorebook, *served.cast_lorebooks.values()) if b is not None]
    return sum(len(b.entries) for b in books)


def card_books(character: Character) -> list[Lorebook]:
    """The lore ``character``'s card brings to every turn, read once per card: its lorebook (``character_book``),
    then its Character's Note (``_card_note``), each where it has one."""
    card = character.card
    if card is None:
        return []
    kept = _BOOKS.get(id(card))
    if kept is not None and kept[0] is card:
        return kept[1]
    read = (_card_lorebook(card.data, character.name), _card_note(card.extensions, character.name))
    books = [b for b in read if b is not None]
    _BOOKS[id(card)] = (card, books)
    while len(_BOOKS) > 16:
        del _BOOKS[next(iter(_BOOKS))]
    return books


def _card_lorebook(data: dict[str, Any], name: str) -> Lorebook | None:
    """A card's ``character_book`` read (a book of no entry, its ``CF943`` saying why, where it is not one)."""
    if not data.get("character_book"):
        return None
    try:
        return Lorebook.from_json(data["character_book"], name=name)
    except LorebookError as e:
        return Lorebook(name=name, diagnostics=(lore_note("CF943", f"the card's character_book: {e}"),))


_DEPTH_PROMPT: Final = '"depth_prompt"'
"""SillyTavern's Character's Note in a card's ``extensions`` (``{"prompt", "depth", "role"}``), as its raw JSON
names it: a card whose extensions do not hold the name has none (and is not parsed for it)."""

NOTE_ORDER: Final = 1_000_000
"""The Character's Note's insertion order: above any entry's, so that it is the last lore cut under a budget."""


def _card_note(extensions: str, name: str) -> Lorebook | None:
    """A card's Character's Note (``extensions.depth_prompt``) as a book of one constant entry at its depth, or
    ``None``; a book of no entry, its ``CF943`` saying why, where charfmt cannot read the note. Kept apart from the
    card's lorebook, so that the book given again as ``--lorebook`` is still known for the same (``CF946``).

    SillyTavern sends the note every turn, ``depth`` messages from the end (default 4), as ``role`` (``system``,
    ``user`` or ``assistant``; default ``system``).
    """
    note = json.loads(extensions).get("depth_prompt") if _DEPTH_PROMPT in extensions else None
    if note is None:
        return None
    try:
        entry = _note_entry(note, name)
    except ValueError as e:
        said = f"the card's Character's Note (extensions.depth_prompt) {e}: skipped"
        return Lorebook(name=name, diagnostics=(lore_note("CF943", said),))
    return Lorebook(name=name, entries=(entry,)) if entry is not None else None


def _note_entry(note: Any, book: str) -> LoreEntry | None:
    """The lore entry of a card's ``depth_prompt`` (``None``: an empty note); ``ValueError`` says what is wrong."""
    if not isinstance(note, dict):
        raise ValueError(f"is {type(note).__name__}, not an object")
    text = note.get("prompt", "")
    if not isinstance(text, str):
        raise ValueError("has a prompt that is not text")
    if not text.strip():
        return None
    depth = note.get("depth", AUTHOR_NOTE_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_SCAN_DEPTH:
        raise ValueError(f"has depth {depth!r}, not a whole number from 0 to {MAX_SCAN_DEPTH}")
    role = note.get("role", "system")
    if role not in ("system", "user", "assistant"):
        raise ValueError(f"has role {role!r}, not system, user or assistant")
    return LoreEntry(
        uid="depth_prompt", content=text, comment="Character's Note", constant=True, order=NOTE_ORDER,
        position="depth", depth=depth, role=role, use_probability=False, book=book,
    )  # fmt: skip


_PLAIN: dict[int, tuple[Any, bool]] = {}
"""Whether each of the last few characters holds a macro, by identity (a server asks every turn)."""


def has_macros(character: Character) -> bool:
    """Whether ``character``'s persona or few-shot texts hold anything a macro could be (``{{``, ``<``)."""
    kept = _PLAIN.get(id(character))
    if kept is not None and kept[0] is character:
        return bool(kept[1])
    texts = [character.persona, *(s.text for ex in character.examples for c in ex.reply.chats for s in c.segments)]
    found = any("{{" in t or "<" in t for t in texts)
    _PLAIN[id(character)] = (character, found)
    while len(_PLAIN) > 16:
        del _PLAIN[next(iter(_PLAIN))]
    return found


def scan_messages(character: Character, history: Sequence[Exchange], turn: UserTurn) -> list[str]:
    """The messages lore keys are matched in, newest first: ``Name: text`` (SillyTavern includes names). A turn
    that holds nothing (something else asked of the model: the player's line, the rest of a reply) is none."""
    keys = _key_tags(character)
    out = [f"{character.user_name}: {_said(turn.chats, keys)}"] if turn.chats else []
    for exchange in reversed(history):
        out.append(f"{character.name}: {_said(exchange.reply.chats, keys)}")
        if exchange.user.chats:
            out.append(f"{character.user_name}: {_said(exchange.user.chats, keys)}")
    return out


def _said(chats: Sequence[Any], keys: frozenset[str]) -> str:
    """The words of some chats: every segment's text but keys (emotions, cues), as a person reads them."""
    return "\n".join(" ".join(s.text for s in chat.segments if s.tag not in keys) for chat in chats)


def _key_tags(character: Character) -> frozenset[str]:
    """The tags of ``character`` that hold a key (an emotion, a cue value), not text."""
    return frozenset(spec.name for spec in character.tags if spec.content == "key")


def _expanded(character: Character, macros: Macros, notes: list[Diagnostic]) -> Character:
    """``character`` with its persona and few-shot texts' macros expanded (itself where none has any)."""
    persona = macros.text(character.persona, where="persona", notes=notes)
    keys = _key_tags(character)
    replies = [expand_reply(ex.reply, macros, notes, keys) for ex in character.examples]
    if persona == character.persona and all(r is ex.reply for r, ex in zip(replies, character.examples, strict=True)):
        return character  # (no macro anywhere: the character as it is, which serve's kept prompt is)
    examples = [ex.model_copy(update={"reply": r}) for r, ex in zip(replies, character.examples, strict=True)]
    return character.model_copy(update={"persona": persona, "examples": examples})


def expand_reply(reply: Reply, macros: Macros, notes: list[Diagnostic], keys: frozenset[str]) -> Reply:
    """A reply with its texts' macros expanded (the segments of ``keys``' tags, emotions and cues, as they are)."""
    if not any("{{" in s.text or "<" in s.text for chat in reply.chats for s in chat.segments):
        return reply
    chats: list[Chat] = []
    for chat in reply.chats:
        segments = [
            s.model_copy(update={"text": macros.text(s.text, where="a few-shot", notes=notes)})
            if s.tag not in keys and ("{{" in s.text or "<" in s.text)
            else s
            for s in chat.segments
        ]
        chats.append(chat.model_copy(update={"segments": segments}))
    return reply.model_copy(update={"chats": chats})


def greeting_exchange(
    character: Character, index: int = 0, *, seed: int | str | None = None, now: dt.datetime | None = None
) -> Exchange | None:
    """The chat's first exchange: the card's greeting ``index`` (0: ``first_mes``), macros expanded, after
    an empty user turn; ``None`` where the card has no such greeting (or no card)."""
    from charfmt.prompt.cards import greeting  # noqa: PLC0415 (import cost: lark, regex load on first use)
    from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)
    from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, regex load on first use)

    macros = macros_for(character, None if seed is None else f"{seed}/greeting", now)
    names = HeldNames(macros)  # the names are put in after the greeting is read: never read as markup
    try:
        reply = greeting(character, index, lambda text: macros.text(names.clean(text), where="greeting"))
        if reply is None:
            return None
        reply = _names_restored(reply, names)
    except MacroError as e:
        raise CharfmtError(str(e)) from None
    return Exchange(user=UserTurn(), reply=canonical_form(reply, tags=character.tags))


def _names_restored(reply: Reply, names: HeldNames) -> Reply:
    """``reply`` (a greeting read with the names held out) with each segment's names put back as text."""
    chats = [
        chat.model_copy(update={"segments": [
            s.model_copy(update={"text": names.restore(s.text, "greeting")}) for s in chat.segments]})
        for chat in reply.chats
    ]  # fmt: skip
    return reply.model_copy(update={"chats": chats})
