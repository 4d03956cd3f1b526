"""What a read is told: the prompt's lines and the player's turn, learned once (``learn``), and whose a label is.

A caller that built the request knows the prompt it sent and the turn the player typed
(``parse(prompt=..., turn=...)``). ``learn`` reads them into a ``Told``: the prompt's own lines
(its few-shot replies, the character's words, left out), what the player says in it, its labels
for the player and the character (``Visitor:``, ``## What Visitor sends``, ``You are Rex.``), a
scene's cast, the keys of its lists and the words of its lines. ``label_of`` and ``speaker_of``
say whose a speaker label is. The readers of what is not the character's (``prompt_echo``,
``turns``, ``imitation``, ``meta``) ask the ``Told`` only.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

from charfmt._lenient.marks import (
    GENERIC_CHARACTER,
    GENERIC_PLAYER,
)
from charfmt._lenient.request_form import blocks
from charfmt._lenient.state import NARRATOR, normal, words

NARRATOR_LABELS: Final = frozenset({"narrator", "narration", "scene", "ナレーション", "旁白", "내레이션"})
"""Labels of a scene's narrator in a transcript (``Narrator: The bell rings.``)."""
LABEL_LINE: Final = re.compile(
    r"^[ \t]*+(?:#{1,6}[ \t]*+)?(?:\*\*)?[\"“「『]?"
    r"(?P<name>[^\s:*#<>{}\[\]\"“”「」『』][^:\n*<>{}\[\]\"“”「」『』]{0,38}?)"
    r"[\"”」』]?(?:\*\*)?[ \t]*+(?P<colon>[:：,，])?(?:\*\*)?[ \t]*+$",
    re.M,
)
"""A line that is only a name: a speaker label (``Rex:``, ``## User``, ``**Maren**``, a quoted ``"Colette"``)."""
INLINE_LABEL: Final = re.compile(
    r"^[ \t]*+(?:\*\*)?(?P<name>[^\W\d_][\w'’.\-]{0,19}(?:[ \t][\w'’.\-]{1,20}){0,2}?)(?:\*\*)?"
    r"(?:[ \t]*+:(?:\*\*)?[ \t]++|[ \t]*+：(?:\*\*)?[ \t]*+)(?=\S)",
    re.M,
)
"""A speaker label that shares its line with the turn's text (``Customer: Can you fix it?``, ``ミオ：「…」``)."""
_CAST: Final = re.compile(r"^#{1,6}[ \t]*+([^\n(]{1,40}?)[ \t]*+\(speaker[ \t]++\"([^\"\n]{1,40})\"\)[ \t]*+$", re.M)
"""A cast member's heading in a scene's prompt: ``### Nadia (speaker "nadia")``: both name the character."""
PROMPT_LABEL: Final = re.compile(r"^[ \t]*+([^\s:<>{}\[\]\"#][^:\n<>{}\[\]\"]{0,38}?)[ \t]*+:[ \t]*+$", re.M)
FIELD_LINE: Final = re.compile(
    r"^[ \t]*+([A-Z][^\W\d_]{2,19}(?:[ \t][A-Za-z][^\W\d_]{1,19})?)[ \t]*+:[ \t]++(?=\S)", re.M
)
"""A field line of a prompt (``Scenario: Deckhand ducks…``, ``Personality: …``): a capitalised label, a colon, text."""
_SENDS: Final = re.compile(r"^#+[ \t]*+What[ \t]++(.{1,40}?)[ \t]++sends[ \t]*+$", re.M | re.I)
_YOU_ARE: Final = re.compile(
    r"^(?:You are|Du bist|Tu es|Vous êtes|Eres|Usted es|Sei|Lei è|Você é|Je bent|Jij bent|Ты|Вы) "
    r"((?![a-zß-öø-ÿα-ωа-яё])[^.,\n]{1,40}?)"
    r"(?:[.,]|[ \t]++(?:in|with|at|on|of|from|who|and|for|playing|aus|die|der|mit|im|une|un|qui|de|du|una|que|del"
    r"|la|il|che|di|um|uma|uit|из|и)[ \t])"
    r"|^(?:あなたは|君は|你是|您是)([^。、，,.\n]{1,20}?)(?:です|だ|。|、|，|,)",
    re.M,
)
"""The persona's opening: the character's name (``You are Rex.``, ``You are Rex, a retired combat robot``, a card's
``You are Quill in an ongoing story with …``; in the prompt's own language too: ``Du bist Greta, die Wirtin``,
``Tu es Margaux, une boulangère``, ``あなたは花です``); a name is capitalised where its script has capitals, so
``You are blunt, funny…`` and ``Sei brusca, ironica…`` name no one."""
HEADING: Final = re.compile(r"^[ \t]*+#{1,6}(?:[ \t]|-{3,}|$)", re.M)
TAG_MARKUP: Final = re.compile(r"[<＜][^<>＜＞\n]*+[>＞]")
_ITEM: Final = re.compile(r"[ \t]*+[-*•][ \t]++\S")
"""A Markdown list item."""
VOCAB_WORD: Final = re.compile(r"[^\W\d_](?:[\w'’-]*\w)?")
"""A word, as ``Told.vocab`` holds the prompt's."""
_BARE: Final = frozenset({"user", "model", "assistant"})
"""Generic role names that label a turn without a colon (a chat template's turn written without its special tokens)."""
LIST_KEY: Final = re.compile(r"^[ \t]*+[-*][ \t]++(\"[^\"\n]{1,40}\"|[^:=\"\n]{2,40}?[ \t]*+[:=])", re.M)
"""A list item's key: ``- "order":``, ``- "body" of a chat:`` (its quoted first word), ``- calm:``."""
TAG_SPEC: Final = re.compile(
    r"^[ \t]*+(?:[-*][ \t]*+)?(?:<[^<>/\n]*+>[ \t]*+)*?<([A-Za-z][\w-]*+)>[^<>\n]*+</\1>[ \t]*+[:：][ \t]*+\S", re.M
)
"""A line that lists a tag as the prompt's spec does: ``<emo>...</emo>: the character's emotion`` (after the request
form's tag, ``- <user_chat> <emo>calm</emo>: …``: the fourth set's #47)."""


@dataclass(frozen=True, slots=True)
class Told:
    """What a read learns from the prompt and the turn: the prompt's lines, the player's, the labels."""

    lines: frozenset[str]
    """The prompt's own lines, compared as ``normal`` writes them (the character's few-shot replies left out)."""
    text: str
    """The same lines joined, for a part of one."""
    player: frozenset[str]
    """What the player says in the prompt (its request forms: few-shot turns, this turn), compared so too."""
    player_labels: frozenset[str]
    character_labels: frozenset[str]
    starts: frozenset[str]
    """The first ``SAME_START`` characters of each of its lines."""
    long: tuple[str, ...]
    """Its lines of ``NEARLY_FROM`` characters or more."""
    openings: frozenset[str]
    """The first two words of its lines of four words or more (``you are``, ``answer with``)."""
    keys: frozenset[str]
    """The keys of the prompt's list items (``- "order": …``, ``- calm: …``), case folded: a reply's list item
    with one of them imitates the prompt's spec."""
    sections: bool
    """The prompt is written in Markdown sections (``## Persona``): a reply's heading imitates it."""
    tag_spec: bool
    """The prompt lists its tags as ``<emo>...</emo>: description`` lines: a reply's line written so imitates it."""
    names: frozenset[str] = frozenset()
    """The character's own names, case folded (``You are Wren.``; a scene's cast headings: every member's)."""
    members: int = 1
    """How many characters the prompt casts (a scene's cast; else one)."""
    cast: tuple[tuple[str, str], ...] = ()
    """A scene's cast: each member's name and speaker id (case folded) with the speaker id it labels a chat of."""
    turn: tuple[str, ...] = ()
    """The player's lines this turn, as ``words`` writes them."""
    request: tuple[str, ...] = ()
    """The lines of the request the reply answers (the prompt's last text: the turn and the instruction sent
    with it)."""
    player_names: frozenset[str] = frozenset()
    """The prompt's own names for the player (``deckhand``, ``cliente``), case folded: its player labels but the
    roles (``user``, ``human``)."""
    fields: frozenset[str] = frozenset()
    """The labels of the prompt's field lines (``Scenario: …``), case folded, no speaker's: a reply's line opened
    by one imitates the prompt, however its words go on."""
    own: str = ""
    """The character's own words in the prompt, as ``normal`` writes them, a line each: its few-shot replies (the
    JSON lines) and the items of a list under a heading that names a tag (``## Actions you may use in <act>``)."""
    vocab: frozenset[str] = frozenset()
    """The words of the prompt's own lines (``text``), case folded."""
    keyed: tuple[tuple[str, str], ...] = ()
    """A scene's emotion keys each listed under one cast member's heading only, case folded, with its speaker id:
    a chat naming no speaker whose emotions are one member's is that member's (the eighth set's #99)."""


@dataclass(frozen=True, slots=True)
class _Learned:
    """What one text of the prompt tells a read (``learn`` joins those of its texts and the turn's)."""

    keys: frozenset[str]
    player: frozenset[str]
    """The lines of its request forms, as ``normal`` writes them."""
    lines: frozenset[str]
    players: frozenset[str]
    characters: frozenset[str]
    """The labels it writes before a JSON reply (the names it casts are in ``names``)."""
    names: frozenset[str]
    members: int
    speakers: tuple[tuple[str, str], ...]
    """Its cast's names and speaker ids with the speaker id each labels, in its order."""
    sections: bool
    tag_spec: bool
    fields: frozenset[str] = frozenset()
    """The labels of its field lines (``Scenario: …``), case folded."""
    own: frozenset[str] = frozenset()
    """The character's own words in it (``Told.own``), a line each."""
    keyed: tuple[tuple[str, str], ...] = ()
    """The keys listed under each cast member's heading (``- placid: …``), case folded, with its speaker id."""


@functools.lru_cache(maxsize=32)
def _learn_text(text: str) -> _Learned:
    """What one text of the prompt tells, learnt once for each text: a character's system prompt, most of what
    ``learn`` reads, is the same at every turn, where the request after it is new each time."""
    keys = {list_item_key(m) for m in LIST_KEY.finditer(text)}
    form = [(a, b) for a, b, _m in blocks(text)]
    player = {n for a, b in form for n in map(normal, text[a:b].split("\n")) if len(n) >= 2}
    lines: set[str] = set()
    own: set[str] = set()
    pos = 0
    tagged = False  # under a heading that names a tag (``## Actions you may use in <act>``): its items the character's
    for line in text.split("\n"):
        at, pos = pos, pos + len(line) + 1
        if any(a <= at < b for a, b in form):
            continue  # the player's (above)
        if line.lstrip().startswith(("{", "[")):
            own.add(normal(line))  # a JSON reply: the character's few-shot words
            continue
        if HEADING.match(line):
            tagged = TAG_MARKUP.search(line) is not None
        elif tagged and _ITEM.match(line) and not LIST_KEY.match(line) and not TAG_MARKUP.search(line):
            own.add(normal(line))  # (an action the character may take, in the character's words)
        if (n := normal(line)) and len(n) >= MIN_LINE:
            lines.add(n)
    players = {m.group(1).strip().casefold() for m in _SENDS.finditer(text)}
    named = {(m.group(1) or m.group(2)).strip().casefold() for m in _YOU_ARE.finditer(text)}
    cast = [{name.strip().casefold() for name in m.groups()} for m in _CAST.finditer(text)]
    speakers = tuple((name.strip().casefold(), m.group(2)) for m in _CAST.finditer(text) for name in m.groups())
    characters: set[str] = set()
    for m in PROMPT_LABEL.finditer(text):
        after = text[m.end() :].lstrip()
        name = m.group(1).strip().casefold()
        if after.startswith("<"):
            players.add(name)
        elif after.startswith("{"):
            characters.add(name)
    return _Learned(frozenset(keys), frozenset(player), frozenset(lines), frozenset(players), frozenset(characters),
                    frozenset(named.union(*cast)), len(cast), speakers, len(HEADING.findall(text)) >= 2,
                    TAG_SPEC.search(text) is not None,
                    frozenset(m.group(1).casefold() for m in FIELD_LINE.finditer(text)), frozenset(own),
                    _member_keys(text))  # fmt: skip


def _member_keys(text: str) -> tuple[tuple[str, str], ...]:
    """The list keys (``- placid: …``) under each cast member's heading (``### Ashby (speaker "ashby")``), up to
    the next heading, each with the member's speaker id."""
    found: list[tuple[str, str]] = []
    for m in _CAST.finditer(text):
        after = HEADING.search(text, m.end() + 1)
        end = after.start() if after is not None else len(text)
        found += [(list_item_key(k), m.group(2)) for k in LIST_KEY.finditer(text, m.end(), end)]
    return tuple(found)


OPENING_WORDS: Final = 4
"""Words from which a line opens as the prompt's when its first two words are those of one of the prompt's lines
of as many words (``Told.openings``)."""


@functools.lru_cache(maxsize=32)
def learn(prompt: tuple[str, ...], turn: tuple[str, ...]) -> Told:
    """What ``prompt`` (the prompt's texts, the character's words left out) and ``turn`` tell a read."""
    lines: set[str] = set()
    player: set[str] = {normal(t) for t in turn if normal(t)}
    players, characters = set(GENERIC_PLAYER), set(GENERIC_CHARACTER)
    sections = tag_spec = False
    keys: set[str] = set()
    names: set[str] = set()
    members = 1
    speakers: dict[str, str] = {}
    fields: set[str] = set()
    own: set[str] = set()
    keyed: dict[str, set[str]] = {}
    for text in prompt:
        one = _learn_text(text)
        for key, who in one.keyed:
            keyed.setdefault(key, set()).add(who)
        fields |= one.fields
        own |= one.own
        keys |= one.keys
        player |= one.player
        lines |= one.lines
        players |= one.players
        speakers.update(one.speakers)
        names |= one.names
        members = max(members, one.members)
        characters |= one.names | one.characters
        sections = sections or one.sections
        tag_spec = tag_spec or one.tag_spec
    if members > 1:  # a scene: its narrator's label tells what happens (an E chat)
        characters.update(NARRATOR_LABELS)
        speakers.update(dict.fromkeys(NARRATOR_LABELS, NARRATOR))
    characters -= players  # a name both ways is the player's (it precedes the turns the model must not write)
    starts = frozenset(n[:SAME_START] for n in lines if len(n) >= SAME_START)
    long = tuple(sorted(n for n in lines if len(n) >= NEARLY_FROM))
    openings = frozenset(" ".join(w[:2]) for n in lines if len(w := n.split()) >= OPENING_WORDS)
    fields -= players | characters
    return Told(frozenset(lines), "\n".join(sorted(lines)), frozenset(player), frozenset(players),
                frozenset(characters), starts, long, openings, frozenset(keys), sections, tag_spec,
                frozenset(n for n in names - players if len(n) >= 2), members,
                tuple(sorted(speakers.items())) if members > 1 else (), tuple(words(t) for t in turn if words(t)),
                tuple(prompt[-1].split("\n")) if prompt else (),
                frozenset(players - GENERIC_PLAYER), frozenset(fields), "\n".join(sorted(own - {""})),
                frozenset(VOCAB_WORD.findall("\n".join(lines))),
                tuple(sorted((k, min(w)) for k, w in keyed.items() if len(w) == 1)) if members > 1 else ())  # fmt: skip


def speaker_of(label: str, told: Told) -> str | None:
    """The speaker id a speaker label (``Mio:``, ``**Rex**``) names in a scene's cast (``NARRATOR``: its narrator's),
    or ``None``."""
    if not told.cast:
        return None
    m = LABEL_LINE.match(label) or INLINE_LABEL.match(label)
    name = m.group("name").strip().casefold() if m is not None else ""
    return dict(told.cast).get(name)


Span = tuple[int, int, str, str]
"""A span to blank: start, end, code, message."""


def line_spans(text: str) -> list[tuple[int, int]]:
    """Each line of ``text`` as ``(start, end)`` (without its newline)."""
    found, pos = [], 0
    for line in text.split("\n"):
        found.append((pos, pos + len(line)))
        pos += len(line) + 1
    return found


def label_of(line: str, told: Told) -> str | None:
    """``player``, ``character`` or ``None``: whether ``line`` is nothing but a speaker label, and whose."""
    m = LABEL_LINE.match(line)
    if m is None:
        return None
    name = m.group("name").strip().casefold()
    generic = name in GENERIC_PLAYER or name in GENERIC_CHARACTER
    if not m.group("colon") and generic and name not in _BARE:
        return None  # "You" alone on a line is a word; "User:" and "user" are labels
    return whose_label(name, told)


def whose_label(name: str, told: Told) -> str | None:
    """``player``, ``character`` or ``None``: whose label ``name`` (case folded) is. The player's label in another
    spelling or language (``Client`` for ``Cliente``: one begins the other, two letters more at most) is theirs
    (found by the sixth set's #37)."""
    if name in told.player_labels:
        return "player"
    if name in told.character_labels:
        return "character"
    if len(name) >= _SAME_LABEL and any(_respelled(name, label) for label in told.player_names):
        return "player"
    return None


_SAME_LABEL: Final = 4
"""Letters from which a label that begins another (``Client``, ``Cliente``) is the same label respelled."""


def _respelled(name: str, label: str) -> bool:
    short, long = sorted((name, label), key=len)
    return name.isalpha() and len(short) >= _SAME_LABEL and long.startswith(short) and len(long) - len(short) <= 2


def list_item_key(m: re.Match[str]) -> str:
    """A list item's key as compared: ``"order"``, ``calm``."""
    return m.group(1).rstrip(":= \t").strip().strip('"').casefold()


# The steps of the echo test (``prompt_echo``), in the order it takes them, each with the length of line from which
# it holds; ``learn`` indexes the prompt's lines by the same bounds (``Told.starts``, ``Told.long``).
MIN_LINE: Final = 12
"""Characters from which a line of the reply that is a line of the prompt is its echo (shorter: a tag, a word)."""
MIN_PART: Final = 24
"""Characters from which a line that is a part of the prompt's text (cut, or run over two lines) is its echo."""
SAME_START: Final = 32
"""Characters from which a line that begins as one of the prompt's lines does is its echo, whatever follows."""
NEARLY_FROM: Final = 40
NEARLY: Final = 0.9
"""A line this long is the prompt's when it is this close to one of its lines (``difflib``'s ratio)."""
