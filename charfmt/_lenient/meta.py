"""Text about the player or the reply in an assistant's voice: not the character's (issue 39, rounds 14 on).

SmolLM2 often answers as an assistant planning or narrating the exchange instead of as the
character: ``The user's emotional tone is that they've been robbed…, so let's just focus on the
action``, ``The player is correct and the character is the helpful AI assistant``. It narrates
the player's words too: ``The user responds, "Why…?"``, or a lead-in ``The user asked:`` before
a request form holding them. ``meta_text`` finds, in the whole input:

- a narration that marks a quote as the player's (``The user responds, "…"``) and a lead-in
  (``The user asked:`` alone at its line's end) with the request form's chat or the line after it:
  the player's (``CF632``);
- a line opened by the player named in the third person (``The user…``, ``A player's…``) that
  neither speaks (``I``, ``my``) nor addresses anyone (``you``): text about the player, dropped
  (``CF601``);
- the reply's first line about the reply itself and its making (``The message is in the format of a horoscope.``,
  ``The response follows the template…``), speaking neither ``I`` nor ``you``: an assistant describing what it
  writes, dropped (``CF601``); ``The answer is no.`` and ``The message is clear: …`` are the character's.

Only where the prompt casts one character: a scene's narrator tells what the player does (``The
player walks in``). A compound noun (``The player piano…``, ``The user manual…``), a player the line
picks out (``The player with the most gold gets a crown``, ``The player who pays first…``) and ``a
player`` are game talk a character may say, not the player at the table. A line that speaks (``The
player here pays first, you know.``), a narration's words that are no quote and every line not
opened so read as before.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient.marks import FORM_ELEMENT
from charfmt._lenient.told import Span, Told
from charfmt.tags import REASONING_TAGS

_THE_PLAYER: Final = r"(?:the|a)[ \t]++(?:user|player)"
_SAYS: Final = (
    r"(?:responds|responded|replies|replied|says|said|asks|asked|writes|wrote|sends|sent|answers|answered|types|typed)"
)
_NARRATED: Final = re.compile(
    rf"\b{_THE_PLAYER}[ \t]++{_SAYS}(?:[ \t]++(?:back|again|first))?[ \t]*+[,:]?[ \t]*+[\"“][^\n<]*[\"”]", re.I
)
"""A narration of the player's words with them quoted: ``The user responds, "Why…?"`` (to the last quote mark before
a tag or the line's end: the words may quote in turn)."""
_LEAD_IN: Final = re.compile(rf"^[ \t]*+{_THE_PLAYER}[ \t]++{_SAYS}\b[^:\n]{{0,24}}?:[ \t]*+$", re.I | re.M)
"""A lead-in alone at its line's end: ``The user asked:``."""
_FORM: Final = re.compile(rf"[ \t]*+<[ \t]*+(?:{FORM_ELEMENT})\b", re.I)
_FORM_END: Final = re.compile(rf"<[ \t]*+/[ \t]*+(?:{FORM_ELEMENT})[ \t]*+>", re.I)
_ABOUT: Final = re.compile(rf"^[ \t]*+{_THE_PLAYER}(?:['’]s)?\b(?![ \t]*+[:\-])[^\n]*+", re.I | re.M)
"""A line opened by the player named in the third person (``The user's tone is…``), not a label (``User:``)."""
_NOT_THE_PLAYER: Final = re.compile(
    rf"[ \t]*+{_THE_PLAYER}(?:[ \t]++(?:manuals?|guides?|names?|interfaces?|accounts?|agreements?|base|experience|data"
    r"|id|pianos?|characters?|cards?|count|numbers?|one|two|three|four|lists?|profiles?|controls?|settings?)"
    r"|[ \t]++(?:who|whom|whose|that|which|with|in|at|on|of|from|for|near))\b|[ \t]*+a[ \t]",
    re.I,
)
"""A player the line does not point at: ``the user`` or ``the player`` as the first word of a compound noun (``The
player piano…``, ``The user manual…``), any player the line picks out (``The player with the most gold…``, ``The
player who pays first…``), or a player (``A player needs…``): game talk a character may say, not the one at the
table."""
_ABOUT_REPLY: Final = re.compile(
    r"\s*+((?:the|this)[ \t]++(?:message|response|reply|answer|output|format)[ \t]++"
    r"(?:is|was|will|should|must|has|contains|follows|uses|takes|reads)\b[^\n]*+)",
    re.I,
)
"""The reply's first line, about the reply itself (``The message is in the format of a horoscope.``): an assistant
describing what it writes, not the character (the sixteenth set's #17; the ninth's #21 and #26)."""
_REPLY_WORDS: Final = re.compile(
    r"\b(?:format(?:ted)?|JSON|written|structured?|template|tags?|requested|below|following|as[ \t]++follows"
    r"|in[ \t]++character|character|user|player)\b",
    re.I,
)
"""A word of the reply's making (its format, its tags, what was requested): ``The answer is no.`` and ``The message is
clear: leave town.`` are the character's, ``The message is in the format of a horoscope.`` an assistant's."""
_SPEAKS: Final = re.compile(
    r"\b(?:I|I['’](?:m|ve|ll|d)|me|my|mine|myself|you|your|yours|you['’](?:re|ve|ll|d))\b", re.I
)
"""A word of one who speaks, or speaks to someone: the line is someone's speech, not text about the player."""


def meta_text(text: str, told: Told, dropped: list[Span]) -> list[Span]:
    """The spans of ``text`` that narrate the player's words (``CF632``) or talk about the player as an assistant
    would (``CF601``), outside ``dropped`` (the spans already found, merged, in order)."""
    if told.members > 1:
        return []
    tags = list(_REASONING.finditer(text))
    if tags and not tags[-1].group(1):
        return []  # (reasoning left open to the end)
    after = tags[-1].end() if tags else 0  # (what reasoning holds before its closer is kept apart as reasoning)
    spans: list[Span] = []
    for m in _NARRATED.finditer(text, after):
        a, b = _element(text, m.start(), m.end())
        spans.append((a, b, "CF632", "a narration marks the words it quotes as the player's: dropped"))
    for m in _LEAD_IN.finditer(text, after):
        said = "a lead-in narrating the player's words (The user asked:): they are the player's, dropped"
        spans.append((m.start(), _led(text, m.end()), "CF632", said))
    for m in _ABOUT.finditer(text, after):
        if _SPEAKS.search(m.group()) is None and _NOT_THE_PLAYER.match(m.group()) is None:
            said = "text about the player in an assistant's voice (The user…): not the character's, dropped"
            spans.append((m.start(), m.end(), "CF601", said))
    about = _ABOUT_REPLY.match(text, after)
    if about is not None and _SPEAKS.search(about.group()) is None and _REPLY_WORDS.search(about.group(1)) is not None:
        said = "text about the reply in an assistant's voice (The message is…): not the character's, dropped"
        spans.append((about.start(1), about.end(), "CF601", said))
    kept: list[Span] = []
    for span in spans:  # (none overlapping what is already dropped, or one another)
        if not any(span[0] < b and a < span[1] for a, b, *_ in (*dropped, *kept)):
            kept.append(span)
    return sorted(kept)


_REASONING: Final = re.compile(r"<\s*(/?)\s*(?:" + "|".join(sorted(REASONING_TAGS)) + r")\s*>", re.I)
"""A reasoning tag (``<think>``, ``</think>``): the model's reasoning is kept apart (``region``), not dropped here."""
_OPENER: Final = re.compile(r"<([A-Za-z][\w-]*+)[^<>\n]*+>[ \t]*+$")


def _element(text: str, a: int, b: int) -> tuple[int, int]:
    """``a``-``b``, or the element around it where it is all that element holds (``<act>The user says, "…"</act>``):
    an element left empty is no segment."""
    line = text.rfind("\n", 0, a) + 1
    opener = _OPENER.search(text, line, a)
    if opener is None:
        return a, b
    closer = re.compile(rf"[ \t]*+</[ \t]*+{re.escape(opener.group(1))}\b[^<>\n]*+>", re.I).match(text, b)
    return (opener.start(), closer.end()) if closer is not None else (a, b)


def _led(text: str, at: int) -> int:
    """The end of what a lead-in ending at ``at`` introduces: the request form's first chat after it, or its next line
    with words."""
    rest = len(text) - len(text[at:].lstrip())
    if _FORM.match(text, rest) is not None:
        close = _FORM_END.search(text, rest)
        return close.end() if close is not None else len(text)
    end = text.find("\n", rest)
    return len(text) if end < 0 else end
