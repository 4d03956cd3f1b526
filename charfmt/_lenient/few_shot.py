"""The player's few-shot line spoken in the character's speech: a sentence of theirs, never the character's.

A small model that echoes the prompt's examples starts the character's speech with the player's few-shot turn
(``<msg>Can I get a bowl of noodles? Eat it before it cools!``: the first sentence is what the player says in the
examples' request form; found by the thirteenth set's #39). A sentence of the character's speech that is, word for
word, a sentence of the player's lines in the prompt (its request forms: the few-shot turns, and this turn) is
theirs: dropped (``CF625``), the rest of the speech kept. A sentence the character's own few-shot replies say as
well is hers (``Told.own``); so is one of a few words (``Yes, please.``), which anyone may say.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient.state import RawChat, Recovery, normal

_SENTENCE: Final = re.compile(r"[^.!?…。！？\n]+[.!?…。！？]+[\"'”’」』)]*|[^.!?…。！？\n]+$", re.M)
"""A sentence (with its end marks), or the text after the last one on its line."""
_MIN_WORDS: Final = 3
_MIN_CHARS: Final = 12


def _sentences(text: str) -> list[re.Match[str]]:
    return [m for m in _SENTENCE.finditer(text) if m.group().strip()]


def _theirs(state: Recovery) -> frozenset[str]:
    """The sentences of the player's lines in the prompt and the turn, as ``normal`` writes them, long enough to be
    no one's common words."""
    told = state.told
    if told is None or not told.player:
        return frozenset()
    found = set()
    for line in told.player:
        for m in _sentences(line):
            said = normal(m.group())
            if len(said.split()) >= _MIN_WORDS and len(said) >= _MIN_CHARS and said not in told.own:
                found.add(said)
    return frozenset(found)


def drop_player_lines(state: Recovery, rc: RawChat) -> None:
    """Each sentence of ``rc``'s speech that is a sentence of the player's in the prompt: dropped (``CF625``)."""
    theirs = _theirs(state)
    if not theirs:
        return
    kept = []
    for p in rc.pieces:
        if p.tag != state.speech or not any(normal(m.group()) in theirs for m in _sentences(p.text)):
            kept.append(p)
            continue
        text, source = p.text, state.source.text[p.start : p.end]
        for m in reversed(_sentences(text)):
            said = m.group().strip()
            if normal(said) not in theirs:
                continue
            at = source.find(said)
            start, end = (p.start + at, p.start + at + len(said)) if at >= 0 else (p.start, p.end)
            message = f"the player's few-shot line spoken as the character's: {said[:40]!r} dropped"
            state.note("CF625", message, start, end)
            text = text[: m.start()] + text[m.end() :].lstrip(" \t")
        p.text = text.strip() if text.strip() else ""
        if p.text:
            kept.append(p)
    rc.pieces = kept
