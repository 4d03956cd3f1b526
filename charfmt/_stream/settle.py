"""What of a reread's reading more text cannot change: the settled part of a segment, of a line, of prose.

``Rereads`` reads a stream that left the format again as it grows; what it shows must be what
the batch reader keeps whatever follows. These are the rules for that, each the batch reader's
own judgement turned round (what could the next characters change?):

- ``settled``: a segment's text up to a mark still open (a quote, an asterisk, a bracket:
  ``open_mark``) or a character near its end that may begin markup (a tag, an entity);
- ``open_element``: the element a text ends inside (its text is its own, quotes and all);
- ``first_sentence``: the text of an element other than speech still open, up to its first sentence's end;
- ``before_last_sentence``: untagged speech less its last sentence, which a quotation coming
  next would make narration (``charfmt._lenient.words``, the batch reader's rule); ``PROBE`` is
  the quotation a reread puts after the text to ask the batch reader itself;
- ``may_echo``: a last line that may still turn out to echo the prompt the caller told;
- ``in_players_form``: a request form still open whose lines may all be the player's (told);
- ``in_turn_form``: a first request form of one speech line, held until the line after it;
- ``form_line_speaks``: a request form opening the reply whose first line of text is no label, heading or JSON;
- ``opens_as_prompt``: a reply that opens, or may yet open, as a system prompt does;
- ``prose_decided``: untagged text read as the reply, not a preamble to a JSON one.
"""

from __future__ import annotations

import difflib
import re
from typing import Final

from charfmt._lenient.prose import dialogue_decided
from charfmt._lenient.state import SAID_FROM, normal
from charfmt._lenient.told import learn
from charfmt._lenient.words import said_to_someone, speech_whatever_follows
from charfmt.models import Reply
from charfmt.tags import TagTable

from .language import SENTENCE_MARK

_UNSURE: Final = re.compile(r"<(?=[A-Za-z/!?]|\s*\Z)|&(?=[#\w]*\Z)|[\\*\[`\"(){}#|\ufffd「『“（【]")
"""Characters that may begin markup a later character completes (a tag, an entity, an escape,
an action in asterisks, a bracket value, a quoted line, a UTF-8 character cut in two); the
open segment's text is shown only up to the first one near its end. A '<' before a space or a
digit (``3 < 5``, or an entity decoded) begins no tag, and an '&' no entity once anything but
an entity's characters follows it (the batch reader drops an entity cut at the end)."""
PAIRED: Final = re.compile(r"[\\*\[`\"(){}#|\ufffd「『“（【]")
"""The same less '<' and '&': in a segment another one follows, those were read already (an
entity decoded, a '<' that began no tag); the others may pair with a later character."""
_UNSURE_NEAR_END: Final = re.compile(r"<(?=[A-Za-z/!?]|\s*\Z)|&(?=[#\w]*\Z)|[\\)}#|\ufffd]")
"""Those of ``_UNSURE`` that no later character pairs with: unsure near the end of the text only."""
_CLOSER: Final = {'"': '"', "*": "*", "(": ")", "[": "]", "{": "}", "`": "`"} | dict(
    zip("（【「『“", "）】」』”", strict=True)
)
_OPENERS: Final = re.compile("[" + re.escape("".join(_CLOSER)) + "]")
"""The marks of ``_UNSURE`` that a later character closes: unsure while they are open (``open_mark``)."""
_ACROSS_LINES: Final = frozenset("「『“{`")
"""Marks whose closing one may come on a later line (the others close on their own line or never)."""
_QUOTATION: Final = frozenset('"「『“')
_UNSURE_SPAN: Final = 48
_IN_ELEMENT: Final = re.compile(r"<(?=[A-Za-z/!?]|\s*\Z)[^<>]*\Z|&[#\w]*\Z|[{\[`]")
"""In the text of an element still open in a reply of bare tags, the only markup more text can
complete: a tag cut before its '>' or an entity cut before its ';' at the very end, and a JSON
reply or a fence that may begin there (``{``, ``[``, a backtick: the batch reader looks for a
reply inside). Quotes, asterisks and parentheses there are the element's own text."""
OPEN: Final = 1
"""``settled(in_element=)``: the text of an element still open in bare tags."""
CLEAN: Final = 2
"""... whose raw text so far holds nothing more text can complete."""
_TAG_START: Final = re.compile(r"<(?=[ \t]*/?[ \t]*[A-Za-z])")
"""Where a tag may begin (``3 < 5`` begins none)."""
_LAST_TAG: Final = re.compile(r"<[ \t]*(/?)[ \t]*([A-Za-z][\w-]*)[^<>]*>")
"""A whole tag where the last tag of a text begins: group 1 '/' for a closing tag, group 2 its name."""
_CUT_TAG: Final = re.compile(r"<[A-Za-z/][^<>]*\Z")
"""A tag cut before its '>' at the end of a segment's text."""
_FRONT_MATTER_OPEN: Final = re.compile(r"\s*-(?![\s\S]*\n[ \t]*---)")
"""Text that begins like front matter (``---``) whose closing ``---`` line has not come yet."""


def settled(text: str, *, whole_text: bool = False, in_element: int = 0) -> str:
    """The part of the open segment's ``text`` (read from a cut-off prefix) that more text cannot change.

    Up to the first mark still open (``open_mark``) or the first other character near the end
    that may begin markup, less trailing white space (the batch reader strips it where a
    segment ends). ``in_element``: the text of an element still open in a reply of bare tags,
    where only a tag or an entity cut at the very end is unsure (``_IN_ELEMENT``); ``CLEAN``:
    one whose raw text holds no such thing (all settled).
    """
    if in_element:
        m = (
            None
            if in_element == CLEAN
            else _IN_ELEMENT.search(text, 0 if whole_text else max(0, len(text) - _UNSURE_SPAN))
        )
        return (text if m is None else text[: m.start()]).rstrip()
    if whole_text:
        m = _UNSURE.search(text)
        return (text if m is None else text[: m.start()]).rstrip()
    m = _UNSURE_NEAR_END.search(text, max(0, len(text) - _UNSURE_SPAN))
    return text[: min(open_mark(text), len(text) if m is None else m.start())].rstrip()


def open_mark(text: str) -> int:
    """Where the first mark of ``text`` that more text may still close begins (``len(text)`` where none does).

    A quote, an asterisk or a bracket not closed on its line (the batch reader's marks close
    there; ``「『“{``` and backticks may close lines later, so anywhere after them); or a quotation closed
    with less than two characters after it, which what follows may yet put inside a sentence
    (``prose.dialogue_decided``). Far from the end or near it: a quotation may be long.
    """
    line = text.rfind("\n") + 1
    pos = 0
    while (m := _OPENERS.search(text, pos)) is not None:
        mark, at = m.group(), m.start()
        across = mark in _ACROSS_LINES
        if at < line and not across:
            pos = m.end()  # its line has ended: the batch reader read it, a mark or text
            continue
        close = text.find(_CLOSER[mark], m.end())
        if close < 0 or (mark in _QUOTATION and len(text[close + 1 :].strip()) < 2):
            return at
        pos = close + 1
    return len(text)


def open_element(text: str, tags: TagTable) -> tuple[str, bool]:
    """The tag of ``tags`` whose element is open at the end of ``text`` (its last whole tag opens it,
    only text follows), as the batch reader names it (``""`` if there is none); and whether its raw
    text so far holds nothing more text can complete (then all of it is settled: a '<' or '&' the
    reread shows at its end was an entity)."""
    at = -1
    for found in _TAG_START.finditer(text):
        at = found.start()
    m = _LAST_TAG.match(text, at) if at >= 0 else None
    if m is None or m.group(1):
        return "", False
    return tags.synonyms.get(m.group(2).lower(), ""), _IN_ELEMENT.search(text, m.end()) is None


def markup_ahead(text: str) -> bool:
    """Whether the text of a segment read from a prefix may still turn into markup as the reply grows."""
    return _CUT_TAG.search(text) is not None or _FRONT_MATTER_OPEN.match(text) is not None


SENTENCE_ENDED: Final = re.compile(r"[.!?…。！？．][\"'”’)）」』】]*+\s*\Z")
PROBE: Final = "“Hi!”"
"""A quotation, read as dialogue wherever it stands (it ends in ``!``), in curly quotes (a JSON string holds them
as they are): put after the text so far, it shows whether a quotation coming next makes its last sentence narration."""


def before_last_sentence(text: str) -> str:
    """``text`` less its last sentence, unless that is said to someone (``!?…``, a hearer's particle: speech
    whatever follows): a quotation coming next may make it narration, or the words still to come may introduce
    one (``words.speech_whatever_follows``, the batch reader's own rule)."""
    return text[: speech_whatever_follows(text)].rstrip()


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence: the text of an element other than speech still open, which its
    closing tag may yet end there (``</msg>`` after ``<act>nods. Welcome!``: the sentences after the first are speech,
    the batch reader's ``CF721``; ``<emo>`` holding sentences, read as speech, too)."""
    m = SENTENCE_MARK.search(text)
    return text if m is None else text[: m.end()]


def before_last_line(text: str) -> str:
    """``text`` less its last line (the batch reader judges the prompt's echoes line by line)."""
    return text[: max(0, text.rfind("\n"))].rstrip()


_NEARLY_FROM: Final = 12
_NEARLY: Final = 0.8
_LIST_START: Final = re.compile(r"[ \t]*(?:[-*•>#]|\d+[.)]|\"[^\"\n]*\"[ \t]*[:=])")


def may_echo(line: str, prompt: tuple[str, ...], turn: tuple[str, ...]) -> bool:
    """Whether ``line``, the last line of a reply so far, may still turn out to echo the prompt as it goes on.

    The batch reader drops a line of the prompt, a part of one, one begun as one of its lines is, one
    nearly one, and, after such an echo, a line that opens as one of the prompt's lines or as its
    spec (a list item, a key): so may this line while it is a part of the prompt's text so far, or
    nearly the start of one of its long lines, or opens as one of them, or as a list item or key.
    It drops the player's lines too (this turn, the prompt's few-shot turns): so may this line while it
    is the start of one (told the turn alone, only that is asked).
    """
    told = learn(prompt, turn)
    n = normal(line)
    if not n:
        return False
    if _may_be_the_players(n, told.player):
        return True
    if not prompt:
        return False
    if n in told.text or _LIST_START.match(line) is not None:
        return True
    words = n.split()
    if len(words) < 2 or " ".join(words[:2]) in told.openings:
        return True
    if len(n) < _NEARLY_FROM:
        return False
    # (a line much longer than one of the prompt's is never nearly it: only those are compared, so a long
    # line costs no more than the prompt's own lines do)
    return any(
        difflib.SequenceMatcher(None, n, long[: len(n)]).ratio() >= _NEARLY
        for long in told.long
        if len(n) <= len(long) + (len(long) >> 2)
    )


_FORM_OPENS: Final = re.compile(r"[<＜]\s*user_chats?\b[^<>＜＞]*[>＞]", re.IGNORECASE)
_FORM_CLOSES: Final = re.compile(r"[<＜]\s*/\s*user_chats?\s*[>＞]", re.IGNORECASE)
_WHOLE_LINE: Final = re.compile(r"\s*<\s*([A-Za-z][\w-]*)\s*>[^<>\n]*<\s*/\s*\1\s*>\s*")
"""A line that is one element and nothing else, tag and value (``<emo>surprise</emo>``)."""


def in_players_form(text: str, prompt: tuple[str, ...], turn: tuple[str, ...], whole: frozenset[str]) -> bool:
    """Whether ``text`` (a reply so far) ends inside a request form (``<user_chats>`` not closed yet) whose spoken
    lines so far may all be the player's (this turn's, the prompt's few-shot turns'): their turn echoed, which the
    batch reader drops once the form closes (``CF625``). A line of one element of ``whole`` (an emotion) speaks
    nothing: it is passed over."""
    opened = max(_FORM_OPENS.finditer(text), key=lambda m: m.start(), default=None)
    if opened is None or _FORM_CLOSES.search(text, opened.end()) is not None:
        return False
    player = learn(prompt, turn).player
    for line in text[opened.end() :].split("\n"):
        m = _WHOLE_LINE.fullmatch(line)
        if m is not None and m.group(1).lower() in whole:
            continue
        n = normal(line)
        if n and n not in player and not _may_be_the_players(n, player):
            return False
    return True


_LABEL: Final = r"[^\s:：<>{}\[\]][^\n:：<>{}\[\]]{0,31}[:：][ \t]*\n\s*"

_AFTER_FORM: Final = r"(?:(?:\[/INST\]|<<\s*SYS\s*>{0,2}|<)[ \t]*)*"
"""Chat-template scaffolding on the line a form closes (``[/INST]``, ``<<SYS>>``, cut or whole)."""


def _turn_form(chat_closed: str) -> re.Pattern[str]:
    """``_TURN_FORM`` with ``chat_closed`` the pattern of the form's ``</chat>`` (required or not)."""
    return re.compile(
        r"(?:(?![<＜]\s*user_chats?\b).)*+"  # whatever stands before the first form (the batch drops it as prose)
        + r"[<＜]\s*user_chats?\s*[>＞]\s*(?:[<＜]\s*chat\b[^<>＜＞\n]*[>＞]\s*"  # the form, its first chat
        + r"(?:<\s*(?P<name>[A-Za-z][\w-]*)\s*>[^<>\n]*(?:\n[ \t]*)?"  # one speech element, as the player's turn
        + rf"(?:<\s*/\s*(?P=name)\s*>\s*(?:{chat_closed}(?:[<＜]\s*/\s*user_chats?\s*[>＞][ \t]*{_AFTER_FORM}"
        # the next line: a label (Rex:), a JSON reply begun after one or not, or the start of either
        + rf"(?:\n\s*(?:(?:{_LABEL})?[{{\[].*|{_LABEL}|[^\n:：<>{{}}\[\]]{{0,32}}[:：]?[ \t]*))?"
        + r")?)?)?)?)?\Z",
        re.IGNORECASE | re.DOTALL,
    )


_CHAT_CLOSED: Final = r"<\s*/\s*chat\s*>\s*"
_TURN_FORM: Final = _turn_form(_CHAT_CLOSED)
_TURN_FORM_TOLD: Final = _turn_form(f"(?:{_CHAT_CLOSED})?")
"""A reply so far whose first request form has a first chat of one speech element, closed or not (the player's
turn as the prompt writes it), and nothing after the form but the start of the next line, a speaker label
(``Rex:``) and a JSON reply begun, as a transcript goes on (the batch reader then drops the form). What stands
before the form (a system prompt's opening echoed, a line of prose) the batch reader drops as prose either way.
``_TURN_FORM_TOLD``, told the request: a form whose ``</chat>`` the model left out too (the batch reader drops it
before the character's labelled reply, ``CF632``; untold, it keeps it as a chat of its own)."""


def _whole_turn_form(chat_closed: str) -> re.Pattern[str]:
    """``_WHOLE_TURN_FORM`` with ``chat_closed`` the pattern of the form's ``</chat>`` (required or not)."""
    return re.compile(
        r"(?:(?![<＜]\s*user_chats?\b).)*+[<＜]\s*user_chats?\s*[>＞]\s*[<＜]\s*chat\b[^<>＜＞\n]*[>＞]\s*"
        rf"<\s*([A-Za-z][\w-]*)\s*>[^<>\n]*(?:\n[ \t]*)?<\s*/\s*\1\s*>\s*{chat_closed}"
        r"[<＜]\s*/\s*user_chats?\s*[>＞](?:\s|\[/INST\]|<<\s*SYS\s*>>)*(?=[<＜]\s*user_chats?\s*[>＞])",
        re.IGNORECASE | re.DOTALL,
    )


_WHOLE_TURN_FORM: Final = _whole_turn_form(_CHAT_CLOSED)
_WHOLE_TURN_FORM_TOLD: Final = _whole_turn_form(f"(?:{_CHAT_CLOSED})?")
"""A whole request form of one element (the speech's: the player's turn as the prompt writes it), and another form
opening after it (past ``[/INST]`` and ``<<SYS>>``): group 1 the element's name (``_TURN_FORM`` says when
``</chat>`` may be left out)."""
_CUT_MARKUP: Final = re.compile(r"[<＜\[][^<>＜＞\[\]\n]*\Z")
"""A tag or a bracket (``[/INST]``) cut at the end: it may yet be the markup the form's pattern allows."""


_PLAYERS_VALUE: Final = re.compile(
    r"((?:(?![<＜]\s*user_chats?\b).)*+[<＜]\s*user_chats?\s*[>＞]\s*[<＜]\s*chat\b[^<>＜＞\n]*[>＞]\s*)"
    r"<\s*([A-Za-z][\w-]*)\s*>([^<>\n]*)<\s*/\s*\2\s*>\s*",
    re.IGNORECASE | re.DOTALL,
)
"""A first request form's first chat opening with a whole element (``<emo>flustered</emo>``): group 1 what stands
before it, group 2 its name, group 3 its value."""


def in_turn_form(
    text: str,
    speech: frozenset[str],
    values: frozenset[str] = frozenset(),
    player: frozenset[str] = frozenset(),
    *,
    told: bool = False,
    after_echo: bool = False,
) -> bool:
    """Whether ``text`` (a reply so far) may yet hold a turn written before a JSON reply: a first request form whose
    first chat is one element of ``speech`` (``<msg>…</msg>``, the player's turn as the prompt writes it), closed and
    followed so far by no more than a speaker label's line (``Rex:``) and a JSON reply begun. Before a JSON reply the
    batch reader drops the form (``CF624``); with none, it keeps it: the line after the form decides, so it waits
    for that line, and for a JSON reply begun there until a reread reads it.

    Told the player's lines (``player``, as ``state.normal`` writes them), a chat that opens with an element of
    ``values`` (an emotion) whose value is one of them (``<emo>flustered</emo>``, the player's emotion this turn)
    then one speech element is their turn as the prompt writes it too, and waits the same. Whole forms of one
    message before it (``[/INST]``, ``<<SYS>>`` between them) are the turns a transcript writes before the reply: the
    batch reader drops them all before a JSON reply, so they wait with it. ``told`` (the request was told): a form
    whose ``</chat>`` the model left out waits too (``_TURN_FORM_TOLD``). ``after_echo``: what stands before the
    first form is chat-template scaffolding or the prompt's own lines echoed (the batch reader dropped it: ``CF622``,
    ``CF631``), a transcript's opening: a chat of an emotion, whatever its value, then one message waits too."""
    text = _CUT_MARKUP.sub("", text)
    at = 0
    whole_form = _WHOLE_TURN_FORM_TOLD if told else _WHOLE_TURN_FORM
    while (whole := whole_form.match(text, at)) is not None and whole.group(1).lower() in speech:
        at = whole.end()  # (a form of one message, then another: the turns a transcript writes before the reply)
    text = text[at:]
    first = _PLAYERS_VALUE.match(text) if player or after_echo else None
    if first is not None and first.group(2).lower() in values and (after_echo or normal(first.group(3)) in player):
        text = first.group(1) + text[first.end() :]
    m = (_TURN_FORM_TOLD if told else _TURN_FORM).match(text)
    return m is not None and (m.group("name") is None or m.group("name").lower() in speech)


_FORM_LINE: Final = re.compile(
    r"\s*(?:[^\s:：,，<>]{1,24}[:：,，][ \t]*\n[ \t]*(?=[<＜]\s*user_chats?\s*[>＞][ \t]*\n[^\n{}\[\]]+\n))?"
    r"[<＜]\s*user_chats?\s*[>＞][ \t]*\n"
    r"(?:[ \t]*[^\s:：<>]{1,24}[:：][ \t]*\n(?=[ \t]*[^\s{\[`]))?"
    r"(?![ \t]*#|[ \t]*[^\s:：<>]{1,24}[:：][ \t]*(?:\n|\Z))"
)
"""A request form opening the reply on a line of its own (or after a speaker's label line, ``Quill:``, once the form's
first line has ended holding no JSON bracket), then, maybe, a speaker's label line (``Sable:``) and a line begun that
opens no JSON reply, then a line that is neither a label nor a heading (``#``)."""


def form_line_speaks(text: str) -> bool:
    """Whether ``text`` (a reply so far, read as a request form with no ``<chat>`` yet) speaks its form's text now.

    Before a ``<chat>``, the batch reader reads the text around ``<user_chats>`` as one chat, and drops it as prose
    once a chat comes. A form that opens the reply on its own line, and goes on with a line of text, is the
    character's reply written in the request's tags far more often than a transcript's preamble: its text speaks
    (a ``Reset`` if a chat comes after all). A transcript shows itself on that line: a speaker's label followed by
    a JSON reply (``Maren:`` then ``{``), or a heading (``# 2019-08-31 …``) before a chat; those, and a form after
    a prompt's opening or prose, wait as before. A form after a speaker's label (``Quill:``) speaks once its first
    line has ended with no JSON in it (a request echoed with its JSON object is dropped: ``_FORM_LINE``). Measured
    on the tuning rows of ``benchmarks/bench_stream_early.py``: 25 more early speakers, no more ``Reset``."""
    return _FORM_LINE.match(text) is not None


def _may_be_the_players(n: str, player: frozenset[str]) -> bool:
    """Whether ``n`` (a last line as ``normal`` writes it) may still be one of the player's lines (this turn's, or
    the prompt's few-shot turns'), which the batch reader drops as it drops their echo: a part of one (the batch
    reader drops speech that is a part of the player's line: ``What is your name?`` of ``...: what is your name?``),
    or begun as one begins (``SAID_FROM`` characters: theirs whatever follows, ``state.nearly_said``)."""
    return any(
        (len(p) > len(n) and n in p)
        or (len(n) >= SAID_FROM and n[:SAID_FROM] == p[:SAID_FROM])
        or _begins_with_a_word_changed(n.split(), p.split())
        for p in player
    )


def _begins_with_a_word_changed(said: list[str], line: list[str]) -> bool:
    """Whether the words ``said`` (the last one maybe cut) begin ``line``'s but for one word (``Reply in JSON only,
    with the keys`` of ``Reply in YAML only, with the keys name and mood.``): theirs, as the batch reader reads a
    line of the player's with a word changed."""
    if not 4 <= len(said) < len(line):
        return False
    done, last = said[:-1], said[-1]
    return sum(a != b for a, b in zip(done, line, strict=False)) <= 1 and line[len(done)].startswith(last)


_SENTENCE_DONE: Final = re.compile(r"[.!?…]++[\"')]*+(?:\s|\Z)|[。！？]++[」』）]*+")
_PREAMBLE_HINT: Final = re.compile(
    r"(?i)json|```|[{\[]|(?:\A|[^\w\s]|\n|\b(?:sure|okay|ok|so|well|alright|and))\s*here(?:'s| is| are| you go)\b"
    r"|\b(?:reply|response|answer|output)\b"
    r"|\bthe (?:user|player)\b|[:：][ \t]*+(?:\n|\Z)|以下|如下|下面|这是|這是|これが|回复|回覆|回答|返答|返信"
)
"""Words of a preamble to a reply (``Sure! Here is the reply:``; ``here is`` where a sentence or a line begins, or
after ``Sure``, ``Okay``: not ``what happened here is``) or of reasoning about it
(``The user is angry.``, before an orphan ``</think>``), not of the reply itself."""
_VALUE_FIRST: Final = re.compile(r"\s*(?:\[[^\]\n]{1,24}\][ \t]*|\*[^*\n]{1,40}\*[ \t]*)?\W{0,3}")
_YOU_ARE: Final = ("you are ", "you're ", "you’re ", "du bist ", "eres ", "tu es ", "vous êtes ", "você é ")
_PROMPT_OPENING: Final = re.compile(
    _VALUE_FIRST.pattern + "(?i:" + "|".join(map(re.escape, _YOU_ARE)) + r")(?:[A-Z]|[^\x00-\x7f]|(?:a|an|the) )"
)
"""Text that opens as a system prompt does (``You are Rex.``, ``You are ミオ.``, ``You're Wren.``, a persona with an
article, ``You are a lighthouse keeper``, ``You're the captain``, and so in the
languages a card's prompt is written in: ``Du bist Greta.``, ``Eres Ximena,``; after a value in brackets or
asterisks: ``[joy] You are Yuki.``): its echo, whatever a JSON reply after it (the batch reader drops what comes
before one), until the caller's prompt says otherwise."""


def opens_as_prompt(text: str) -> bool:
    """Whether ``text`` (a reply so far) opens, or may yet open, as a system prompt does: an echo the batch reader
    drops before a JSON reply, however the reply goes on (``_PROMPT_OPENING``; ``[joy] You a`` may)."""
    if _PROMPT_OPENING.match(text) is not None:
        return True
    m = _VALUE_FIRST.match(text)
    rest = text[m.end() :].lower() if m is not None else ""
    return any(len(rest) <= len(opening) and opening.startswith(rest) for opening in _YOU_ARE)


_ENDS_SENTENCE: Final = re.compile(r"[!?！？…。][\"'”’)」』）]*+\Z")
"""The text so far ends with an exclamation, a question, a trailing ``…`` or a CJK full stop:
speech, where a plain English sentence may yet narrate a quotation that follows (``She smiled.
"Hi"``), and ``Okay.`` on a line of its own stand before a JSON reply (a CJK preamble names
what follows: ``以下が返答です。``, which ``_PREAMBLE_HINT`` knows)."""
_QUOTATION_AFTER: Final = re.compile(r"[.!?…。！？][^\S\n]*[\"「『“][^\n]*\Z")
"""The text so far ends with a sentence's end, then a quotation begun on its line (no JSON reply begins so)."""
_PROSE_DECIDED_MIN: Final = 8
_PROSE_DECIDED_AFTER: Final = 12
_WORD_LETTERS: Final = 4
_WIDE: Final = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
"""Kana, CJK ideographs and Hangul: in a text written with them, a character is about a word
(``_WORD_LETTERS`` letters of an English one), so a short CJK line is decided as soon as an English
line of as many words is (``请明天`` after ``不好意思，今天已经打烊了。`` holds as much as ``Please come``)."""


def prose_decided(batch: Reply, text: str) -> bool:
    """Whether a reread reads the text so far as prose that is the reply, not a preamble to a JSON one.

    Nothing in it announces a reply to come (``Sure! Here is the JSON:``), it has at least
    ``_PROSE_DECIDED_MIN`` characters, and two sentences are complete; or one, and it ends the
    text so far (not at a line break, where ``Okay.`` may stand before a JSON reply), or it is
    said to someone and a quotation follows it on its line (``すごいね。「はい」``), or
    ``_PROSE_DECIDED_AFTER`` characters follow it (enough to hold a preamble's words; a CJK character counts as
    a word's letters, ``_WIDE``). More
    text may still bring JSON (then ``close()`` takes back what was shown), but a reply that
    ignores the format speaks as it is written.
    """
    spoken = " ".join(s.text for c in batch.chats for s in c.segments)
    if len(spoken) < _PROSE_DECIDED_MIN or _PREAMBLE_HINT.search(spoken) is not None or opens_as_prompt(text):
        return False
    ends = [m.end() for m in _SENTENCE_DONE.finditer(spoken)]
    if len(ends) != 1:
        return len(ends) > 1
    rest = spoken[ends[0] :].strip()
    # (a CJK character carries about a word: it counts as the letters of one towards a preamble's words)
    after = len(rest) + (_WORD_LETTERS - 1) * len(_WIDE.findall(rest))
    if after >= _PROSE_DECIDED_AFTER:
        return True
    if after == 0:
        return _ENDS_SENTENCE.search(text) is not None or said_to_someone(text) or dialogue_decided(text)
    return _QUOTATION_AFTER.search(text) is not None and said_to_someone(spoken[: ends[0]])
