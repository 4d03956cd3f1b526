"""A reply without JSON, or text before a JSON reply: the text itself read as chats.

The dialect table's ``text`` chain says how: the request form echoed (``request_form``),
front matter, bare tags, plain text. Chat-template scaffolding, code fences, special
tokens and a tag the input ends inside are set aside first; so is the request form
echoed beside the reply, or the player's own turn echoed.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient import fields, request_form
from charfmt._lenient.marks import TAGGED
from charfmt._lenient.region import has_elements
from charfmt._lenient.scaffolding import blank, cut_scaffolding, scaffolding
from charfmt._lenient.state import NARRATOR, RawChat, Recovery, Source, short, without_tokens
from charfmt._lenient.table import Sample
from charfmt._lenient.text import read_text
from charfmt._lenient.turns import asked_forms
from charfmt.tags import REASONING_TAGS, TEXT_TAG

_CUT_ELEMENT: Final = request_form.CUT_ELEMENT
_FORM_CLOSED: Final = re.compile(r"[<＜]\s*+[/／]\s*+user_chats?\s*+[>＞]\s*+\Z", re.I)
_CUT_NAME: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?([A-Za-z_][\w.\-:]*+)?")


def lead(state: Recovery, start: int, at: int, *, empty: bool = False) -> bool:
    """The text before the JSON reply: a chat of its own where it holds elements of the format, else dropped.

    The request form written before it (``<user_chats>…``) is the player's turn echoed, never
    the character's words: dropped (``CF624``), told the turn or not; unless its words introduce
    the speaker as the character (told the prompt: ``My name is Wren.``). ``empty``: the JSON after it
    holds no chat (only the spec's placeholders), so the form is the reply; only one that repeats the
    player's turn is theirs (``CF625``; found by the sixth set's #52). Returns whether a form was dropped
    as the request form.
    """
    text = state.source.text
    region = text[start:at]
    # (a form left open runs into what follows it: no turn written before the reply, read as before)
    forms = [
        (a, b, m)
        for a, b, m in request_form.blocks(region)
        if _FORM_CLOSED.search(region, a, b) and not request_form.introduces(state.told, region[a:b])
    ]  # (a form whose words introduce the character, "My name is Wren.", is the character's: read)
    if empty:
        forms = [f for f in forms if request_form.echoes_turn(state, region, [f])]
    code, message = (
        ("CF625", "the player's own turn echoed: not the character's speech, dropped")
        if empty
        else ("CF624", "the request form (<user_chats>) written before the JSON reply is dropped")
    )
    for a, b, _m in forms:
        state.note(code, message, start + a, start + b)
    if forms:
        text = text[:start] + blank(text[start:at], forms) + text[at:]
    if not has_elements(state, text, start, at):
        _drop(state, text, start, at)
        return bool(forms) and not empty
    state.drop_fences_only(start, at)
    region = without_tokens(text[start:at])
    lead = len(region) - len(region.lstrip())
    message = "elements written before the JSON reply are read as a chat of their own"
    state.note("CF626", message, start + lead, start + len(region.rstrip()))
    read_text(state, region, start, state.walk("text", Sample(region)), cut_off=False)
    return bool(forms) and not empty


def _drop(state: Recovery, text: str, start: int, at: int) -> None:
    """``state.drop`` of ``text[start:at]``, ``text`` being the source text with some of it blanked."""
    source = state.source
    if text is source.text:
        state.drop(start, at)
        return
    state.source = Source(text, source.raw, source.map)
    try:
        state.drop(start, at)
    finally:
        state.source = source


def read_bare(state: Recovery, start: int, end: int) -> None:
    """No JSON: the text itself is the reply, read as the first entry of the table's ``text`` chain says."""
    text = _drop_scaffolding(state, start, end)
    region = text[start:end]
    state.drop_fences_only(start, end)
    cleaned = without_tokens(region)
    if not cleaned.strip():
        if not state.source.raw.strip():
            state.note("CF003", 'input is empty; expected {"chats": [...]}', 0, len(text))
        return  # (else all of it was dropped, each part with its diagnostic: the input was not empty)
    at = start + len(region) - len(region.lstrip())
    cleaned = _drop_cut_tag(state, cleaned, start)
    if not cleaned.strip():
        state.dialect("plain-text")
        state.note("CF616", "no JSON reply, and nothing of the reply but a tag cut off at the end", at, at)
        return
    entry = state.walk("text", Sample(cleaned))
    if entry is not None and entry.name == "user-chats":
        aside = _set_aside_echo(state, cleaned, start)
        if aside is None:
            return
        if aside is not cleaned:
            cleaned = aside
            entry = state.walk("text", Sample(cleaned), after="user-chats")
    if entry is not None and entry.name == "user-chats":
        message = "no JSON reply: the reply echoes the request form, each <chat> is read as a chat"
        cleaned = _drop_asked(state, cleaned, start)
    else:
        message = "no JSON reply: the text itself is read as the character's chat"
    state.note("CF616", message, at, at)
    if entry is not None and entry.name != "user-chats" and _by_speaker(state, cleaned, start):
        return
    before = len(state.chats)
    read_text(state, cleaned, start, entry)
    if entry is not None and entry.name == "user-chats" and state.speakers:
        _labelled(state, state.chats[before:], start)


def _labelled(state: Recovery, chats: list[RawChat], start: int) -> None:
    """The request form's ``<chat>`` of a scene's reply whose text a cast member's label leads (``<chat>`` /
    ``Mio: "…"``, the label dropped, ``CF633``): that member's chat, as the transcript's lines are (found by the
    thirteenth set's #29). A chat whose labels name two members, or the narrator, keeps no speaker."""
    begin = start
    for chat in chats:
        if not chat.pieces:
            continue
        end = max(p.end for p in chat.pieces)
        named = {who for at, who in state.speakers if begin <= at <= end}
        begin = end
        if chat.speaker is None and len(named) == 1 and NARRATOR not in named and (chat.kind or "C") == "C":
            chat.speaker = named.pop()


_DROPPED_BEFORE: Final = frozenset({"CF601", "CF622", "CF624", "CF625", "CF631", "CF632"})
"""What, dropped before the request form, makes it no opening of the reply (a speaker label does not)."""


def _drop_asked(state: Recovery, text: str, offset: int) -> str:
    """``text`` (the reply read as the request form echoed) with the forms of the player's imagined questions to the
    character (``turns.asked_forms``) blanked, each noted ``CF632``."""
    if state.told is None:
        return text
    first = next((a for a, _b, _m in request_form.blocks(text)), None)
    after = first is not None and any(
        d.code in _DROPPED_BEFORE and d.offset < state.source.to_raw(offset + first) for d in state.diagnostics
    )
    found = asked_forms(text, state.told, after=after)
    message = "request forms of questions to the character after other text: the player's turns imagined, dropped"
    if not found:
        return text
    for a, b in found:
        state.note("CF632", message, offset + a, offset + b)
    text = blank(text, [(a, b, "") for a, b in found])
    if not request_form.blocks(text):  # (no form left: what was outside the forms stays outside the reply)
        source = state.source.text
        _drop(state, source[:offset] + text + source[offset + len(text) :], offset, offset + len(text))
        return " " * len(text)
    return text


def _by_speaker(state: Recovery, text: str, offset: int) -> bool:
    """A scene's reply written as a transcript (``Mio: [joy] わあ！`` / ``Rex: Twenty bolts.``): the lines after
    each cast member's label (dropped, ``CF633``) read as a chat of that speaker; whether it was so written."""
    marks = [(at - offset, who) for at, who in state.speakers if offset <= at <= offset + len(text)]
    if not marks:
        return False
    bounds = [(0, None), *marks]
    for k, (a, who) in enumerate(bounds):
        b = bounds[k + 1][0] if k + 1 < len(bounds) else len(text)
        part = text[a:b]
        if not part.strip():
            continue
        lead = len(part) - len(part.lstrip())
        part = part.strip()
        if who == NARRATOR:  # the narrator tells what happens: an E chat of the text as written
            chat = RawChat(len(state.chats), None, "E")
            fields.add_text(chat, TEXT_TAG, part, offset + a + lead, offset + a + lead + len(part))
            state.chats.append(chat)
            continue
        before = len(state.chats)
        read_text(state, part, offset + a + lead, state.walk("text", Sample(part)), cut_off=b == len(text))
        for chat in state.chats[before:]:
            chat.speaker = who
    return True


def _set_aside_echo(state: Recovery, text: str, offset: int) -> str | None:
    """The request form echoed beside the reply, or the player's own turn echoed: not the reply, dropped.

    Returns the text left (``text`` itself where nothing was set aside), or ``None`` where nothing is left.
    """
    blocks = request_form.blocks(text)
    if not blocks:
        return text
    outside = blank(text, blocks)
    turn = request_form.echoes_turn(state, text, blocks)
    if not (has_elements(state, outside) or turn):
        return text
    blocks = request_form.closed_again(text, blocks)  # (set aside: the elements it closes again with it)
    outside = blank(text, blocks)
    for a, b, _m in blocks:
        if turn:
            message = "the player's own turn echoed: not the character's speech, dropped"
            state.note("CF625", message, offset + a, offset + b)
        else:
            message = "the request form (<user_chats>) echoed beside the reply is dropped"
            state.note("CF624", message, offset + a, offset + b)
    state.dialects.remove("user-chats")
    return outside if outside.strip() else None


def _drop_scaffolding(state: Recovery, start: int, end: int) -> str:
    """Blank the chat-template scaffolding of a reply without JSON (``scaffolding.scaffolding``), noted ``CF622``.

    The source keeps its length (no offset moves); returns its text.
    """
    text = state.source.text
    spans = scaffolding(text[start:end], open_turns=not state.prompt)
    if end == len(text) and (cut := cut_scaffolding(text[start:end])) is not None:
        spans = [(a, min(b, cut), m) for a, b, m in spans if a < cut]
        spans.append((cut, end - start, "the reply was cut off inside a chat-template marker: dropped"))
    if spans:
        for a, b, message in spans:
            state.note("CF622", message, start + a, start + b)
        state.source = Source(
            text[:start] + blank(text[start:end], spans) + text[end:], state.source.raw, state.source.map
        )
    return state.source.text


def _drop_cut_tag(state: Recovery, text: str, offset: int) -> str:
    """``text`` with a tag the input ends inside (``</ms``, ``<em``, ``<chat type="C``) blanked, noted ``CF610``.

    In a reply written in tags, any tag begun at the very end is one; in prose, only
    the beginning of an element name the reader knows (``<em`` of ``<emo>``, ``<user_c``):
    ``a <b`` or ``x <y`` stay text. ``text`` runs to the end of the input.
    """
    m = _CUT_ELEMENT.search(text, max(0, len(text) - 200))
    if m is None:
        return text
    named = _CUT_NAME.match(m.group())
    assert named is not None  # _CUT_ELEMENT's match begins as _CUT_NAME does
    name = (named.group(1) or "").lower()
    if TAGGED.search(text, 0, m.start()) is None:
        tags = state.tags
        known = (*(n.lower() for n in tags.names), *tags.synonyms, "user_chats", "chat", *REASONING_TAGS)
        attributes = len(m.group().rstrip()) > named.end()
        base = name.partition(".")[0]  # <emotion.jo: dot notation
        if not any(k.startswith(base) and (k == base or not (attributes or "." in name)) for k in known):
            return text
    state.note(
        "CF610",
        f"the reply was cut off inside a tag: {short(m.group())!r} dropped",
        offset + m.start(),
        offset + len(text),
    )
    return text[: m.start()] + " " * (len(text) - m.start())
