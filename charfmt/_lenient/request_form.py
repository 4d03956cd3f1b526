"""The request form echoed as the reply: ``<user_chats><chat type="C">…</chat>…``, each ``<chat>`` one chat.

A chat's type and order come from its attributes (a missing order is its place); a
``<chat>`` left open ends at the next one or at the end; text between chats is dropped
(``CF601``). A ``<user_chats>`` wrapper with no ``<chat>`` in it holds one ``C`` chat.
Models mangle the form: ``<user_chat_type="C">`` opens a chat, ``<user_chat>`` wraps.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Final

from charfmt._grammar.lexical import decode_entities
from charfmt._lenient import fields
from charfmt._lenient.literals import drop_cut_entity, note_literals
from charfmt._lenient.marks import FORM_ELEMENT, TAGGED
from charfmt._lenient.pieces import Piece, Result
from charfmt._lenient.prose import JSON_LINE
from charfmt._lenient.region import has_elements
from charfmt._lenient.state import (
    RawChat,
    Recovery,
    blank_match,
    mangled,
    mostly_said,
    nearly_said,
    normal,
    opened_as,
    short,
    words,
)
from charfmt._lenient.table import Reading, Sample, Span
from charfmt._lenient.tag_soup import read_elements
from charfmt._lenient.text import read_text
from charfmt._lenient.words import is_sentence
from charfmt.tags import TAGGED_TYPES, TEXT_TAG

if TYPE_CHECKING:
    from charfmt._lenient.told import Told

CHAT_ELEMENT: Final = re.compile(rf"[<＜]\s*+([/／]\s*+)?({FORM_ELEMENT})(?![\w\-])([^<>＜＞]*+)[>＞]", re.I)
"""An element of the echoed request form: ``<user_chats>``, ``<chat type="C" order="2">``, their closers."""
CUT_ELEMENT: Final = re.compile(r"[<＜]\s*+(?:[/／]\s*+)?(?:[A-Za-z_][\w.\-:]*+(?:\s[^<>＜＞]*+)?)?\Z")
"""A tag the input ends inside: ``<chat type="C``, ``</ms``, ``</``, a lone ``<``."""
_COLON_AFTER: Final = re.compile(r"[ \t]*+[:：](?=[ \t]*+[^\s/])")
"""A colon right after a tag, words after it: the tag written as a label."""
_ATTRIBUTE: Final = re.compile(r"""([\w\-:]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>/]+))""")


def read_form(span: Span) -> int:
    """The dialect table's reader of the request form (the ``text`` chain): its chats added to the read's."""
    if span.state is None:
        raise LookupError("the request form is read only as a reply's text")
    read(span.state, span.offset, span.text)
    span.own_chats = True
    return len(span.text)


def read(state: Recovery, offset: int, text: str) -> None:
    """The request form echoed (``text`` at ``offset``): each ``<chat>`` read into ``state.chats``."""
    if (cut := CUT_ELEMENT.search(text)) is not None:
        # The form is markup: a tag the input ends inside (<chat type="C, <ms) is half an element.
        state.note(
            "CF702", f"a tag cut off at the end is dropped: {cut.group()!r}", offset + cut.start(), offset + len(text)
        )
        text = text[: cut.start()]
    elements = list(CHAT_ELEMENT.finditer(text))
    if any(_opens_chat(text, m) for m in elements):
        _read_chats(state, offset, text, elements)
    else:
        _read_wrapped(state, offset, text, elements)


def _opens_chat(text: str, m: re.Match[str]) -> bool:
    """Whether ``m`` opens a ``<chat>``: not a closer, nor an opener closed or followed by another element with
    nothing in it (``<user_chats></chat>``). One the text ends after may yet hold the rest of a reply: a chat."""
    if form_name(m, inside_chat=False) != "chat" or m.group(1) is not None:
        return False
    nxt = CHAT_ELEMENT.search(text, m.end())
    return nxt is None or bool(JSON_LINE.sub("", text[m.end() : nxt.start()]).strip())


def _read_wrapped(state: Recovery, offset: int, text: str, elements: list[re.Match[str]]) -> None:
    """A ``<user_chats>`` wrapper with no ``<chat>`` in it: one ``C`` chat, the wrapper's tags markup."""
    blanked = text
    for m in elements:
        # (a colon right after an opener is the markup's, as a label's: ``<user-chat>: Your voice…``; sixth set #47)
        end = m.end() if m.group(1) is not None or (c := _COLON_AFTER.match(text, m.end())) is None else c.end()
        state.note("CF612", f"the request form's {text[m.start():end]} is markup, removed", offset + m.start(),
                   offset + end)  # fmt: skip
        blanked = blanked[: m.start()] + " " * (end - m.start()) + blanked[end:]
    entry = state.reading.table.first("text", Sample(blanked), state.tags, after="user-chats")
    before = len(state.chats)
    read_text(state, blanked, offset, entry)
    if not (state.turn or state.prompt):
        return
    for chat in state.chats[before:]:  # (its text may be the player's turn, as a <chat>'s: the fifth set's #22)
        found = Result()
        found.pieces = chat.pieces
        _drop_the_players(state, found, cut_off=False)
        chat.pieces = found.pieces
        for r in found.repairs:
            state.note(r.code, r.message, r.start, r.end, chat.index)


def _read_chats(state: Recovery, offset: int, text: str, elements: list[re.Match[str]]) -> None:
    """Each ``<chat>`` a chat, its body up to its closer, the next element or the end."""
    open_chat: tuple[RawChat, int] | None = None  # the chat being read and where its body starts
    closed: RawChat | None = None  # the chat its </chat> closed, no element of the form since
    pos = 0  # where text not yet accounted for starts
    for m in elements:
        closing, name = m.group(1) is not None, form_name(m, inside_chat=open_chat is not None)
        if open_chat is not None:
            chat, body = open_chat
            if not (closing and name == "chat"):
                at = offset + m.start()
                state.note("CF702", "<chat> is not closed; the next element closes it", at, at)
            _chat_body(state, chat, text, (body, m.start()), offset, cut_off=False)
            open_chat = None
            if closing and name == "chat":
                pos, closed = m.end(), chat
                continue
        elif closed is not None and closing and name == "chat" and has_elements(state, text, pos, m.start()):
            # '</chat>\n<act>taps the logbook</act>\n</chat>': the first closer came early (the sixth set's #12)
            _reopen(state, closed, text, (pos, m.start()), offset)
            pos, closed = m.end(), None
            continue
        else:
            state.drop(offset + pos, offset + m.start())
            if closing and name == "chat":
                at, stop = offset + m.start(), offset + m.end()
                state.note("CF712", "a closing </chat> with no open chat is dropped", at, stop)
        closed = None
        if name == "chat" and not closing:
            chat = RawChat(len(state.chats), None)
            _chat_attributes(state, chat, m, offset)
            state.chats.append(chat)
            open_chat = (chat, m.end())
        pos = m.end()
    if open_chat is not None:
        chat, body = open_chat
        end = offset + len(text)
        state.note("CF702", "<chat> is not closed before the end", end, end, chat.index)
        _chat_body(state, chat, text, (body, len(text)), offset, cut_off=True)
    else:
        state.drop(offset + pos, offset + len(text))


def _reopen(state: Recovery, chat: RawChat, text: str, span: tuple[int, int], offset: int) -> None:
    """Elements between ``chat``'s ``</chat>`` and a second ``</chat>``: the chat's own, its first closer early."""
    start, end = span
    body = text[start:end]
    a = offset + start + len(body) - len(body.lstrip())
    message = "elements after the chat's </chat>, closed by a second </chat>, are read as the chat's"
    state.note("CF640", message, a, offset + start + len(body.rstrip()), chat.index)
    _chat_body(state, chat, text, span, offset, cut_off=False)


def _chat_attributes(state: Recovery, chat: RawChat, m: re.Match[str], offset: int) -> None:
    """``<chat type="C" order="2">``: the chat's type and order."""
    attrs = {
        a.lower(): (v1 or v2 or v3, offset + m.start(3) + found.start(), offset + m.start(3) + found.end())
        for found in _ATTRIBUTE.finditer(m.group(3))
        for a, v1, v2, v3 in [found.groups()]
    }
    if "type" in attrs:
        word, a, b = attrs["type"]
        chat.kind = fields.type_word(state, word.strip(), a, b, chat.index)
    else:
        chat.kind = "C"
        state.note("CF613", "a <chat> without a type is read as C", offset + m.start(), offset + m.end(), chat.index)
    if "order" in attrs:
        word, a, b = attrs["order"]
        if fields.DIGITS.fullmatch(word.strip()) and int(word) >= 1:
            chat.order = int(word)
        else:
            message = f"order {short(word)!r} is not a whole number from 1: numbered in reading order"
            state.note("CF614", message, a, b, chat.index)
            chat.order_noted = True


def _chat_body(state: Recovery, chat: RawChat, text: str, span: tuple[int, int], offset: int, *, cut_off: bool) -> None:
    """The body of an echoed ``<chat>`` (``text[start:end]``): elements for ``C``, plain text for ``I``/``E``."""
    start, end = span
    body = text[start:end]
    inner = offset + start + len(body) - len(body.lstrip())
    body = body.strip()
    if chat.kind not in TAGGED_TYPES and TAGGED.search(body):
        state.note("CF613", f"a {chat.kind} chat with tag elements is read as C", inner, inner, chat.index)
        chat.kind = "C"
    if chat.kind in TAGGED_TYPES:
        read = read_elements(body, state.reading, cut_off=cut_off)
        if state.turn or state.prompt:
            _drop_the_players(state, read, cut_off=cut_off)
        state.take(chat, read, lambda i: inner + i)
        return
    notes = Result()
    if cut_off:
        body = drop_cut_entity(body, notes)
    note_literals(body, 0, notes)
    state.take(chat, notes, lambda i: inner + i)
    fields.add_text(chat, TEXT_TAG, decode_entities(body), inner, inner + len(body))


def _drop_the_players(state: Recovery, read: Result, *, cut_off: bool) -> None:
    """Drop from a ``<chat>`` of the request form what the player says: this turn's words (``CF625``) or the
    prompt's few-shot turns (``CF631``); where that leaves only an emotion or a cue, the chat is the player's
    turn whole: they go too, an emotion that is a sentence as well (beside the player's words it is their
    emotion's slot, not the character's speech: the twelfth set's #2). So does a chat the input ends in before its
    words (``cut_off``): its emotion may be the player's, as the words to come would tell (a stream shows it only
    then); an emotion that is a sentence is words there."""
    mark = len(read.repairs)
    kept = [p for p in read.pieces if not _said_by_player(state, p, read)]
    example = [r.start for r in read.repairs[mark:] if r.message == _EXAMPLE_TURN]
    if example:
        # (the lines of a chat before a few-shot turn of the player's in it are that turn's, a line added to it:
        # the same speaker's; the reply may follow it, never precede it; the sixth set's #77)
        for p in (p for p in kept if p.end <= example[-1]):
            read.note("CF631", f"<{p.tag}> before a turn of the player's from the prompt's examples: dropped",
                      p.start, p.end)  # fmt: skip
        kept = [p for p in kept if p.end > example[-1]]
    theirs = len(kept) < len(read.pieces)  # (an emotion beside the player's words is theirs, whatever it holds)
    if (theirs or cut_off) and all(
        _cue_like(state, p) or (theirs and (p.tag == state.emotion or not p.text.strip())) for p in kept
    ):
        for p in kept:
            if cut_off and len(kept) == len(read.pieces):
                message = f"<{p.tag}> of a chat cut off before its words (the player's or not): dropped"
                read.note("CF610", message, p.start, p.end)
            else:
                read.note("CF625", f"<{p.tag}> of the player's own turn echoed: dropped", p.start, p.end)
        kept = []
    read.pieces = kept


def _cue_like(state: Recovery, piece: Piece) -> bool:
    """Whether ``piece`` is an emotion or a cue, which a player's turn holds beside its words (an emotion that is a
    sentence is words: ``<emo>I'm just a bit sad to hear``)."""
    spec = state.tags.get(piece.tag)
    return spec is not None and spec.content == "key" and not (piece.tag == state.emotion and is_sentence(piece.text))


def _said_by_player(state: Recovery, piece: Piece, read: Result) -> bool:
    """Whether ``piece`` (in the request form echoed) is what the player says: this turn (``CF625``), or a turn
    of the prompt's few-shot examples (``CF631``), word for word, with a word changed, or begun as it and going on
    (``state.nearly_said``).

    Such a line is the prompt's own turn copied back, not the character's.
    """
    if _cue_like(state, piece):
        return False
    spoken = words(piece.text)
    part = len(spoken) >= _PART_OF_TURN and len(spoken.split()) >= 3 and any(spoken in t for t in state.turn)
    if spoken in state.turn or part or nearly_said(spoken, state.turn, begun=True) or _opened_in_form(spoken, state):
        message = "the player's own turn echoed: not the character's speech, dropped"
        read.note("CF625", message, piece.start, piece.end)
        return True
    if mostly_said(piece.text, state.turn, state.prompt[-1].split("\n") if state.prompt else ()):
        message = "the player's own turn echoed, reworded (its words reordered, a few changed): not the character's"
        read.note("CF625", message, piece.start, piece.end)
        return True
    told = state.told
    if addresses(told, piece.text):
        message = "a line of the request form that speaks to the character by name is the player's: dropped"
        read.note("CF635", message, piece.start, piece.end)
        return True
    if told is not None and _speaks_as_player(told, piece.text):
        message = "a line in the player's voice (I'm the deckhand: the prompt's name for the player) is theirs: dropped"
        read.note("CF642", message, piece.start, piece.end)
        return True
    said = normal(piece.text)
    if told is not None and len(said) >= _PLAYER_LINE:
        if _persona_said_to(said, told):
            message = (
                "the persona said to the character (You are …), words of the prompt's: not the character's, dropped"
            )
            read.note("CF631", message, piece.start, piece.end)
            return True
        if said in told.player or _player_line_marked(said, told) or nearly_said(said, told.player, begun=True):
            read.note("CF631", _EXAMPLE_TURN, piece.start, piece.end)
            return True
    if mangled(spoken, state.turn, told.names if told is not None else ()):
        message = "the player's own turn mangled (most of its words in order, some changed): not the character's"
        read.note("CF625", message, piece.start, piece.end)
        return True
    return False


def _opened_in_form(spoken: str, state: Recovery) -> bool:
    """Whether ``spoken`` (``words``'s form), a line of the request form, opens with the first words of one of the
    player's lines and is no longer than it with two words more (``opened_as``, however few of its other words are
    the line's): their line written again in their form, mangled past its start (``Кто-то занял много воиницы…``
    for ``Кто-то занял моё нижнее место…``; found by the twelfth set's #2)."""
    return opened_as(spoken, state.turn, share=0.0)


_EXAMPLE_TURN: Final = "a turn of the player's from the prompt's examples echoed: not the character's, dropped"


_PART_OF_TURN: Final = 12
"""Characters from which words of the form that are a part of the player's line (``Answer only with a JSON
object``) are their turn echoed, cut."""
_SELF: Final = (
    r"(?:\bi'?m|\bi am|\bmy name is|\bmy name's|\bcall me|\bje suis|\bje m'appelle|\bmoi,? c'est|\bsoy|"
    r"\bme llamo|\bmi nombre es|\bich bin|\bich hei(?:ß|ss)e|\bmein name ist)[ \t]++(?:the[ \t]++)?"
)
"""Words that introduce the speaker by name (``My name is Wren``), before the name."""
_SELF_AFTER: Final = r"(?:です|と申します|といいます|だよ)"
_GREETING: Final = (
    r"(?:hi|hello|hey|dear|thanks|thank you|good (?:morning|evening|night|day)|oh|bonjour|bonsoir|salut|merci|"
    r"hola|gracias|buenas|hallo|danke|guten (?:tag|abend|morgen))"
)
"""Words a line addresses someone with, before their name (``Hi Wren!``, ``Bonjour Colette !``)."""


@functools.lru_cache(maxsize=32)
def _names(names: frozenset[str]) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """How a text introduces itself as one of ``names``, and how it addresses one of them; ``None``: no names."""
    if not names:
        return None
    name = "(?:" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")(?![\w'’-])"
    own = re.compile(rf"{_SELF}{name}|(?<![\w])(?:私は|わたしは|僕は|ぼくは|俺は)?{name}{_SELF_AFTER}", re.I)
    before = rf"(?:^|[,;][ \t]*+|\b{_GREETING}\b[ \t,]*)(?<![\w])"  # the start, a comma, a greeting
    spoken_to = re.compile(rf"{before}{name}[ \t]*+(?:[,!?.:！？、。]|$)", re.I)
    return own, spoken_to


@functools.lru_cache(maxsize=32)
def _player_self(names: frozenset[str]) -> re.Pattern[str] | None:
    """How a text introduces its speaker as the player (``I'm a deckhand``), by the prompt's names for them."""
    if not names:
        return None
    name = "(?:" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")(?![\w'’-])"
    return re.compile(rf"{_SELF}(?:(?:an?|una?|el|la|le|der|die|ein|eine)[ \t]++)?{name}", re.I)


def _speaks_as_player(told: Told, text: str) -> bool:
    """Whether ``text`` introduces its speaker as the player (``I'm a deckhand.``, the scene's player by the name
    the prompt gives them, never a role such as ``user``): the player's line (found by the sixth set's #32)."""
    found = _player_self(told.player_names)
    return found is not None and found.search(text) is not None


def introduces(told: Told | None, text: str) -> bool:
    """Whether ``text`` introduces its speaker as the character (``My name is Wren.``): the character's words."""
    found = _names(told.names) if told is not None else None
    return found is not None and found[0].search(text) is not None


def addresses(told: Told | None, text: str) -> bool:
    """Whether ``text`` speaks to the character by name (``Hi Wren!``, ``Colette, two croissants``): someone else's
    line, the player's. Only where the prompt casts one character (in a scene, members address each other)."""
    found = _names(told.names) if told is not None and told.members == 1 else None
    return found is not None and found[1].search(text) is not None and found[0].search(text) is None


_YOU_ARE: Final = re.compile(
    r"(?:you are|you're|du bist|tu es|tú eres|eres|és|tu és|sei|你是|您是|あなたは|君は|お前は|너는|당신은)(?![\w])"
)
"""The second person's opening of a line that tells someone who they are (``You are just an old swamp witch``)."""
_PERSONA_RUN: Final = 4
"""Words in a row of the prompt's text from which a line telling the character who they are retells the persona."""


def _persona_said_to(said: str, told: Told) -> bool:
    """Whether ``said`` (``normal``'s form) tells the character who they are in the prompt's own words (``You are
    just an old swamp witch who sells remedies…`` of the card's ``… is an old swamp witch who sells remedies…``):
    the persona said to them, the prompt's, never their own line (found by the third set's #62)."""
    if _YOU_ARE.match(said) is None:
        return False
    found = said.split()
    return any(" ".join(found[k : k + _PERSONA_RUN]) in told.text for k in range(1, len(found) - _PERSONA_RUN + 1))


def _player_line_marked(said: str, told: Told) -> bool:
    """Whether ``said`` is a line of the player's in the prompt with marks after it and no more words
    (``Hello! Can I see the lamp? (1)``)."""
    bare = _TRAILING_MARKS.sub("", said)
    return len(bare) >= _PART_OF_TURN and any(_TRAILING_MARKS.sub("", line) == bare for line in told.player)


_TRAILING_MARKS: Final = re.compile(r"[\s(\[]*+[\d\W_]*\Z")
"""Marks (a number in brackets, punctuation) after the last word of a line."""
_PLAYER_LINE: Final = 4
"""Characters from which a line of the player's in the prompt, echoed in the form, is theirs (``...`` is anyone's)."""


def form_name(m: re.Match[str], *, inside_chat: bool) -> str:
    """The element of the request form a ``CHAT_ELEMENT`` match is: ``user_chats`` or ``chat``.

    Models mangle it: ``<user_chat_type="C">`` opens a chat, ``<user_chat>`` wraps, and its
    closer closes the chat that is open, else the wrapper.
    """
    name = m.group(2).lower()
    if name in ("user_chats", "chat"):
        return name
    if name.startswith("chat") or "=" in m.group(3) or (m.group(1) is not None and inside_chat):
        return "chat"
    return "user_chats"


def blocks(text: str) -> list[tuple[int, int, str]]:
    """The spans of the ``<user_chats>…</user_chats>`` blocks in ``text`` (one left open runs to its end)."""
    found: list[tuple[int, int, str]] = []
    opened: int | None = None  # where the block being read began
    wrapped = chat = False  # inside a <user_chats> wrapper; inside a <chat>
    wrapper = False  # a wrapper was seen: without one, the form is no block beside a reply
    for m in CHAT_ELEMENT.finditer(text):
        name, closing = form_name(m, inside_chat=chat), m.group(1) is not None
        if name == "chat":
            chat = not closing
        else:
            wrapped, wrapper = not closing, True
        if opened is None and not closing:
            opened = m.start()
        elif opened is not None and closing and not wrapped and not chat:
            found.append((opened, m.end(), ""))
            opened = None
    if opened is not None:
        found.append((opened, len(text), ""))
    return found if wrapper else []


def closed_again(text: str, found: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The blocks ``found`` (``blocks(text)``), each run on to a closer of the form's written again on the line it
    ends (``…</user_chat><msg>…</msg></user_chat>``): what that closer closes is the form's too, the element between
    inside the player's form, not the reply beside it (the tenth set's #35)."""
    spans = list(found)
    for m in CHAT_ELEMENT.finditer(text):
        if m.group(1) is None or form_name(m, inside_chat=False) == "chat":
            continue
        last = max((k for k, (a, _b, _m) in enumerate(spans) if a < m.start()), default=None)
        if last is None or spans[last][1] > m.start() or "\n" in text[spans[last][1] : m.start()]:
            continue
        spans[last] = (spans[last][0], m.end(), spans[last][2])
    return spans


def echoes_turn(state: Recovery, text: str, spans: list[tuple[int, int, str]]) -> bool:
    """Whether the blocks repeat the player's turn (``turn=``): each line spoken in them is one the player said.

    A block the input ends inside may end in the middle of a line: its start is enough.
    """
    if not state.turn:
        return False
    said = [words(t) for t in state.turn]
    spoken = []
    reading = Reading(state.tags, None, state.reading.table)  # what was spoken, as written: no vocabulary
    for a, b, _m in spans:
        body = CHAT_ELEMENT.sub(blank_match, text[a:b])
        spoken += [words(p.text) for p in read_elements(body, reading).pieces if p.tag == state.speech]
    spoken = [s for s in spoken if s]
    return bool(spoken) and all(any(s in t for t in said) for s in spoken)
