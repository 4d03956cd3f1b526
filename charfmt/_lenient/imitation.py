"""A reply that began by imitating its prompt: what follows is the character's only in the shapes of a reply.

Gemma 3 270M (a base model) often begins by writing its prompt again: chat-template
scaffolding (``<<SYS>>``, ``[INST]``), the system prompt echoed or reworded, its sections
imitated, the player's turn written as a request form or under their label. What it writes
after that is mostly more of the same in other shapes: request forms of the player's line
reworded, forms of questions, the prompt's form of the player's turn with its placeholder,
plain text going on with the prompt, debris. Where the character speaks after such an
opening it does so as a reply: under its own label (``Sari:`` then a JSON reply or
elements), or as a JSON reply with words in a body (issue 39, the thirteenth and fourteenth
rounds).

``imitation_going_on`` finds, once ``turns.foreign`` has found what is not the character's,
whether the input began so — before any content of its own, a scaffolding marker or a span
``foreign`` dropped as the prompt's or the player's (``CF625``, ``CF631``, ``CF632``, the
player's label) — and if so drops as the imitation going on (``CF631``), of what follows:

- a run of request forms more than half of whose chats with words are the player's side (their
  turn inside, already dropped, or reworded: two thirds of a turn line's words; or the
  prompt's placeholder ``...`` in an element), but for its chats holding a sentence of the
  character's own few-shot replies;
- plain text (no tag) that is debris (no letter: `CF627`), or in the prompt's words (three quarters of
  its words the prompt's), or in its voice (opening in the second person, half its words the
  prompt's).

The character's labelled reply, a JSON reply holding words, what follows a marker of the
model's own turn (``[/INST]``) and anything else are read as before; so is every reply that
does not begin by imitating (issue 39, reader21: measured on every judged sample row, it
gains rows and loses none; see ``tests/data/JUDGED.md``).
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient.marks import SCAFFOLDING, SCAFFOLDING_HINT
from charfmt._lenient.prompt_echo import SENTENCE
from charfmt._lenient.request_form import CHAT_ELEMENT, blocks
from charfmt._lenient.state import TOKEN, normal
from charfmt._lenient.told import Span, Told, label_of, speaker_of
from charfmt._lenient.turns import opens_second_person
from charfmt._lenient.words import LETTER

IMITATING: Final = frozenset({"CF625", "CF631", "CF632", "CF635", "CF642"})
"""The codes of ``foreign``'s spans that are the prompt or the player's turn written again."""
_LABELS: Final = frozenset({"CF633"})
_JSON_OPEN: Final = re.compile(
    r"(?m)^[ \t]*+(?:(?:```|~~~)[\w-]*+[ \t]*+\n?[ \t]*+)?\[?[ \t]*+(\{)|\{(?=\s*+\"chats\")"
)
"""Where a JSON reply opens: a brace (or a bare array's) at a line's start, after a fence perhaps, or one that opens
``{"chats"`` anywhere."""
_BODY: Final = re.compile(r"\"(?:body|text)\"\s*+:\s*+\"((?:[^\"\\]|\\.)*+)")
_TAG: Final = re.compile(r"<[^<>\n]*+>|\\[nrt]")
_WORD: Final = re.compile(r"[^\W\d_]{2,}")


def imitation_going_on(text: str, told: Told, dropped: list[Span]) -> list[Span]:
    """The spans of ``text`` after an opening that imitates the prompt that are neither the character's labelled
    reply nor a JSON reply holding words (``dropped``: ``foreign``'s spans, merged, in order)."""
    found = _scaffolding(text)
    markers = [m.span() for m in found]
    at = _past_imitation(text, told, dropped, markers)
    if at is None:
        return []
    kept = _replies(text, at, told, dropped)
    if (turn := _MODEL_TURN.search(text)) is not None:  # the model's own turn begins: read as before
        kept.append((turn.end(), len(text)))
    forms = _form_runs(text, at, dropped, markers)
    for a, b in forms:
        if _players_run(text, a, b, told, dropped):
            kept += _own_chats(text, a, b, told)
        else:  # (the player's chats among others are the reader's to find, as before)
            kept.append((a, b))
    skip = sorted([(a, b) for a, b, *_ in dropped] + markers + kept)
    system = _system_sides(found, len(text))
    spans: list[Span] = []
    pos = at
    for a, b in [*skip, (len(text), len(text))]:
        if b <= pos:
            continue
        run = text[pos : max(a, pos)]
        if run.strip() and (_inside(pos, forms) or _imitating(run, told)):
            lead = len(run) - len(run.lstrip())
            debris = LETTER.search(run) is None
            spans.append((pos + lead, pos + len(run.rstrip()), *(_DEBRIS if debris else ("CF631", _MESSAGE))))
        elif run.strip() and _inside(pos, system) and "<" not in run and _JSON_KEY.search(run) is None:
            # ('<SYS>' then '{This is a long version of my article…': the prompt's system side, the fifteenth
            # set's #61)
            lead = len(run) - len(run.lstrip())
            spans.append((pos + lead, pos + len(run.rstrip()), "CF622", _SYSTEM))
        pos = max(pos, b)
    return spans


_MODEL_TURN: Final = re.compile(r"\[/INST\]|<start_of_turn>[ \t]*+model|<\|im_start\|>[ \t]*+assistant")
"""A marker after which the model's own turn begins (a chat template's): the prompt's imitation ends there."""
_PLACEHOLDER: Final = re.compile(r">[ \t]*+(?:\.\.\.|…)[ \t]*+<")


def _inside(at: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= at < b for a, b in spans)


def _form_runs(text: str, at: int, dropped: list[Span], markers: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs of request forms from ``at`` on: forms with nothing but space, markers or dropped text between."""
    runs: list[tuple[int, int]] = []
    gaps = sorted([(a, b) for a, b, *_ in dropped] + markers)
    for a, b, _name in blocks(text):
        if b <= at:
            continue
        end = min([b, *(x for x, *_ in dropped if a < x < b)])  # (a form left open ends where a dropped turn begins)
        if runs and not _has_text(text, runs[-1][1], a, gaps):
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((max(a, at), end))
    return runs


def _has_text(text: str, a: int, b: int, gaps: list[tuple[int, int]]) -> bool:
    pos = a
    for x, y in [*gaps, (b, b)]:
        if y <= pos:
            continue
        if text[pos : min(x, b)].strip():
            return True
        pos = max(pos, y)
        if pos >= b:
            return False
    return False


def _players_run(text: str, a: int, b: int, told: Told, dropped: list[Span]) -> bool:
    """Whether a run of request forms after the imitation is the player's side: more than half its chats are the
    player's (``_players_chat``)."""
    chats = [(x, y) for x, y in _chats(text, a, b) if _WORD.search(_TAG.sub(" ", text[x:y]))]
    return 2 * sum(_players_chat(text, x, y, told, dropped) for x, y in chats) > len(chats)


def _chats(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """The spans of the chats of the forms in ``text[a:b]`` (each from an opening tag of the form, ``<chat``,
    ``<user_chat type="C">``, to the next), or the whole."""
    opens = [m.start() for m in CHAT_ELEMENT.finditer(text, a, b) if m.group(1) is None]
    return list(zip(opens, [*opens[1:], b], strict=False)) or [(a, b)]


def _players_chat(text: str, a: int, b: int, told: Told, dropped: list[Span]) -> bool:
    """Whether a chat of a form after the imitation is the player's: it holds their turn (dropped already, or
    reworded) or the prompt's placeholder (its form of the player's turn)."""
    if any(a <= x and y <= b and code in ("CF625", "CF635") for x, y, code, _m in dropped):
        return True
    if _PLACEHOLDER.search(text, a, b):
        return True
    return any(_reworded_turn(normal(line), told) for line in text[a:b].split("\n"))


def _own_chats(text: str, a: int, b: int, told: Told) -> list[tuple[int, int]]:
    """The chats of a run of the player's forms that hold a line of the character's own few-shot replies: theirs
    (the prompt's exchange imitated, the character's side of it echoed)."""
    opens = [m.start() for m in CHAT_ELEMENT.finditer(text, a, b) if m.group(1) is None]
    found: list[tuple[int, int]] = []
    for x, y in zip(opens, [*opens[1:], b], strict=False):
        lines = [normal(line.replace("\\n", " ")) for line in text[x:y].split("\n")]
        said = [p.strip() for n in lines for p in SENTENCE.findall(n)]
        if _PLACEHOLDER.search(text, x, y) is None and any(len(p) >= _OWN_FROM and p in told.own for p in said):
            found.append((x, y))
    return found


_OWN_FROM: Final = 12


def _reworded_turn(n: str, told: Told) -> bool:
    said = set(TOKEN.findall(n))
    for line in told.turn:
        theirs = set(TOKEN.findall(line))
        if len(theirs) >= _TURN_FROM and 3 * len(theirs & said) >= 2 * len(theirs):
            return True
    return False


_TURN_FROM: Final = 4
_PROMPTS_WORDS: Final = 0.75
_VOICED: Final = 0.5


def _imitating(run: str, told: Told) -> bool:
    """Whether text (not a form) after the imitation goes on with it: debris (no word), the prompt's voice (the
    second person), or the prompt's words."""
    plain = _TAG.sub(" ", run)
    if plain != run:  # (elements outside a form, the character's or a placeholder's: read as before)
        return False
    if LETTER.search(plain) is None:
        return True  # (debris)
    lines = [n for line in plain.split("\n") if (n := normal(line))]
    if any(len(p.strip()) >= _OWN_FROM and p.strip() in told.own for n in lines for p in SENTENCE.findall(n)):
        return False  # (the character's own few-shot words)
    first = lines[0] if lines else ""
    found = TOKEN.findall(plain.casefold())
    if len(found) < _TURN_FROM:
        return False
    share = sum(w in told.vocab for w in found) / len(found)
    return share >= _PROMPTS_WORDS or (opens_second_person(first) and share >= _VOICED)


_MESSAGE: Final = (
    "the reply began by imitating its prompt: this goes on imitating it (the player's side in request forms, the "
    "prompt's words or voice, debris), not the character's labelled reply nor a JSON reply: dropped"
)


_DEBRIS: Final = ("CF627", "the format's syntax, no letter, after a reply that began by imitating its prompt: dropped")


_SYSTEM: Final = (
    "the reply began by imitating its prompt; after a system marker written again, text with no element is the "
    "prompt's system side, not the character's: dropped"
)


_JSON_KEY: Final = re.compile(r"[{,][ \t\n]*+[\"']")
"""A JSON object's key opening (``{"chats"``): a JSON reply, read as before."""


def _system_sides(found: list[re.Match[str]], end: int) -> list[tuple[int, int]]:
    """The text after each system marker written again (``<<SYS>>``, ``<SYS>``: one came before it) up to the
    next marker that closes a turn (``<</SYS>>``, ``[/INST]``, an end of turn) or opens the model's, or the text's
    ``end`` (``found``: the text's markers, ``_scaffolding``)."""
    sides: list[tuple[int, int]] = []
    start, seen = -1, False
    for m in found:
        closes = m.group("sys_close") or m.group("inst_close") or m.group("end")
        if start >= 0 and (closes or _MODEL_TURN.match(m.group().strip())):
            sides.append((start, m.start()))
            start = -1
        if m.group("sys_open"):
            if seen and start < 0:
                start = m.end()
            seen = True
    if start >= 0:
        sides.append((start, end))
    return sides


def _scaffolding(text: str) -> list[re.Match[str]]:
    """The chat-template markers of ``text`` (``SCAFFOLDING``), found once for both their spans and their kinds."""
    if SCAFFOLDING_HINT.search(text) is None:
        return []
    return [m for m in SCAFFOLDING.finditer(text) if m.group().strip()]


def _past_imitation(text: str, told: Told, dropped: list[Span], markers: list[tuple[int, int]]) -> int | None:
    """Where the opening imitation of the prompt ends, or ``None`` where the input does not begin with one."""
    starts = {a: (b, code, a) for a, b, code, _m in dropped}
    starts.update({a: (b, "marker", a) for a, b in markers})
    pos, imitated = 0, False
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        found = starts.get(pos)
        if found is None:
            return pos if imitated else None
        end, code, a = found
        if code in _LABELS:
            if label_of(text[a:end], told) != "player":
                return pos if imitated else None
        elif code != "marker" and code not in IMITATING:
            return pos if imitated else None
        imitated, pos = True, end


def _replies(text: str, at: int, told: Told, dropped: list[Span]) -> list[tuple[int, int]]:
    """The character's labelled replies and the JSON replies holding words from ``at`` on."""
    kept: list[tuple[int, int]] = []
    for a, b, code, _m in dropped:
        if b > at and code in _LABELS and _characters(text[a:b], told):
            stop = next((x for x, _y, c, _m2 in dropped if x >= b and c != "CF633"), len(text))
            kept.append((b, stop))
    for m in _JSON_OPEN.finditer(text, at):
        a = m.start(1) if m.group(1) else m.start()
        b = _json_end(text, a)
        if any(_WORD.search(_TAG.sub(" ", body.group(1))) for body in _BODY.finditer(text, a, b)):
            kept.append((a, b))
    return kept


def _characters(label: str, told: Told) -> bool:
    if label_of(label, told) == "character":
        return True
    return speaker_of(label, told) is not None


def _json_end(text: str, a: int) -> int:
    """Where the JSON value opened at ``a`` closes (its brackets balanced outside strings), or the input's end."""
    depth, quoted, escaped = 0, False, False
    for k in range(a, len(text)):
        ch = text[k]
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(text)
