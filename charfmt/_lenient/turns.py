"""Text a reply holds that is not the character's: the prompt's own lines, the player's turn, turns imagined after it.

Small models write the transcript they were shown: a speaker label before the reply
(``Rex:``), the player's turn echoed first (``User:`` and the request form), the prompt's
own lines (the persona, the format spec, a heading of it), and after the reply the next
turns they imagine (``User:`` again, then the character once more). ``foreign`` finds them
line by line in the whole input, before anything else reads it; the spans are blanked (so
offsets stay put), each with its diagnostic:

- ``CF631``: a line of the prompt (when told it: ``parse(prompt=...)``), or a Markdown section
  written after a heading where the prompt is written in such sections (``prompt_echo``, asked
  first);
- ``CF632``: the player's turn, labelled (``User:``, the prompt's own label) or in the request
  form right before the character's label, and everything from the first player turn after
  the reply on (the turns the model imagined);
- ``CF633``: a speaker label (``Rex:``, ``model``, ``Scene:``) on its own line;
- ``CF639``: a language's name alone on its line before the reply (``Français``).

What the prompt and the turn tell the read is ``told.learn``'s (a ``Told``). Labels are the
prompt's own (``Visitor:`` before a request form, ``Rex:`` before a JSON reply; ``## What
Visitor sends``; ``You are Rex.``) and generic role names (``user``, ``model``...), any case,
with a colon or alone on their line, as a Markdown heading or bold.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt._lenient.item_lines import item_lines
from charfmt._lenient.marks import (
    FORM_ELEMENT,
    FORM_WRAPPER,
    GENERIC_CHARACTER,
    GENERIC_PLAYER,
    SCAFFOLDING,
    SCAFFOLDING_HINT,
)
from charfmt._lenient.prompt_echo import FORM_OPEN, FORM_START, prompt_lines, spec_like
from charfmt._lenient.request_form import CHAT_ELEMENT, blocks, form_name, introduces
from charfmt._lenient.state import mostly_said, nearly_said, normal
from charfmt._lenient.told import (
    INLINE_LABEL,
    LABEL_LINE,
    MIN_LINE,
    PROMPT_LABEL,
    TAG_MARKUP,
    Span,
    Told,
    label_of,
    line_spans,
    whose_label,
)
from charfmt._lenient.words import LETTER_OR_DIGIT
from charfmt.tags import DEFAULT_TAGS

_TAG_OR_WORD: Final = re.compile(rf"{TAG_MARKUP.pattern}|(?P<word>{LETTER_OR_DIGIT.pattern})")
"""A tag, else a word's character: scanned left to right, the first ``word`` is one ``TAG_MARKUP.sub`` would leave (a
tag holds no ``<``, so the scan meets every tag where ``sub`` does), found without rewriting the text."""
_FORM_LINE: Final = re.compile(r"[ \t]*+(?:$|[-*]?[ \t]*+[<＜]|[\"'}\]{\[,\\n ]+$)")
"""A line of the request form: a tag (an element, ``<chat type="C">``) at its start, JSON debris, or blank."""
_REASONING: Final = re.compile(
    r"<\s*(think|thinking|reasoning|analysis|reflection)\s*>[\s\S]*?(?:<\s*/\s*\1\s*>|\Z)", re.I
)


def foreign(text: str, told: Told, *, prompted: bool) -> list[Span]:
    """The spans of ``text`` that are not the character's (see the module docstring), in order, not overlapping.

    ``prompted``: the caller told the prompt (its lines and sections are known).
    """
    spans: list[Span] = []
    if prompted:
        spans += prompt_lines(text, told)
    spans = _merge(spans)
    spans = _merge(spans + item_lines(text, spans))  # (the lines going on an imitated item: the prompt's too)
    spans += _closed_turns(text, told, spans)
    spans = _merge(spans)
    spans += _looped_forms(text, spans)
    spans = _merge(spans)
    spans += _marked_turns(text, told, spans)
    spans = _merge(spans)
    spans += _turns(text, told, spans)
    spans += _preamble(text, spans)
    spans += _language_labels(text, _merge(spans))
    spans += _lone_labels(text, _merge(spans))
    spans += _bracketed_turns(text, told, _merge(spans))
    spans += _bracket_labels(text, _merge(spans))
    return _merge(spans)


_BRACKET_LABEL: Final = re.compile(r"[ \t]*+\[[ \t]*+[A-Z][\w'’-]*+(?:[ \t]++[A-Za-z][\w'’-]*+){0,2}[ \t]*+:[ \t]++")
"""A line opened by a bracketed label (``[English: ``, ``[User Context: ``): capitalised words and a colon."""
_LABELLED: Final = re.compile(r"^[^\]]*+$|^[^\]]*?(?:[<!?;。！？]|[.,](?!\d)|(?:\S+[ \t]+){4})")
"""What follows a bracketed label that makes it one: no ``]`` closing it on its line, or before its ``]`` a tag, a
sentence's punctuation or five words (``[emotion: joy]``, ``[Joy: 0.8]``, ``[Action: waves]`` are bracket tags)."""


def _bracket_labels(text: str, dropped: list[Span]) -> list[Span]:
    """A line opened by a bracketed label (``[German: …``, ``[English: Yes, it's…``): the label of what follows, as
    a page of translations writes one, never speech (``CF641``; found by the sixth set's #17)."""
    spans: list[Span] = []
    for a, b in line_spans(text):
        m = _BRACKET_LABEL.match(text, a, b)
        if m is None or any(x <= a < y for x, y, *_ in dropped) or _LABELLED.search(text[m.end() : b]) is None:
            continue
        label = text[a : m.end()].strip()
        spans.append((a, m.end(), "CF641", f"a bracketed label opening a line is no speech: {label!r} dropped"))
    return spans


_BRACKETED_TURN: Final = re.compile(
    r"[ \t]*+(?:\d{1,3}[.)][ \t]*+)?\[[ \t]*+([^\W\d][^\]\[:\n]{1,30}?)[ \t]*+"
    r"(?::[ \t]*+\d{0,9}[ \t]*+)?(?:\]|\Z)[ \t]*+"
)
"""A line opened by a turn's label in brackets, a number with it or none, a list's number before it (``1. [User:
760]``, ``[Assistant]``), or such a label cut off at the end."""


def _bracketed_turns(text: str, told: Told, dropped: list[Span]) -> list[Span]:
    """A line that is a transcript's label in brackets (``[User: 760]``: a role of the prompt's or a name it labels
    a turn with, perhaps numbered): a label, never text, dropped (``CF633``; found by the eighth set's #59)."""
    spans: list[Span] = []
    for a, b in line_spans(text):
        m = _BRACKETED_TURN.match(text, a, b)
        if m is None or any(x <= a < y for x, y, *_ in dropped):
            continue
        name = m.group(1).strip().casefold()
        if len(name) >= 2 and (name in told.player_labels or name in told.character_labels):
            lead = len(m.group()) - len(m.group().lstrip())  # (the line's words after the label: read as before)
            spans.append((a + lead, m.end(), "CF633", f"speaker label {m.group().strip()!r} dropped"))
    return spans


_LANGUAGE_NAMES: Final = frozenset({
    "english", "français", "francais", "french", "deutsch", "german", "español", "espanol", "spanish", "italiano",
    "italian", "português", "portugues", "portuguese", "nederlands", "dutch", "polski", "polish", "русский",
    "russian", "türkçe", "turkish", "日本語", "japanese", "中文", "简体中文", "繁體中文", "chinese", "한국어", "korean",
})  # fmt: skip
"""Names of languages, in their own words and in English: the ``language`` a prompt asks replies in."""
_LANGUAGE_LINE: Final = re.compile(r"[ \t]*+(?:#{1,6}[ \t]*+)?(?:\*\*)?([^\W\d_]{2,12})(?:\*\*)?[ \t]*+[:：]?[ \t]*+")


def _language_labels(text: str, dropped: list[Span]) -> list[Span]:
    """A line that is nothing but a language's name (``Français``, ``## English``) with the reply after it: a label
    of the language it is written in, as a transcript or a page of translations heads one, never speech (``CF639``;
    found by the fifth set's #2). Alone, it is the reply (a one-word answer)."""
    spans: list[Span] = []
    for a, b in line_spans(text):
        m = _LANGUAGE_LINE.fullmatch(text, a, b)
        if m is None or m.group(1).casefold() not in _LANGUAGE_NAMES or any(x <= a < y for x, y, *_ in dropped):
            continue
        if _has_content(text, b, len(text), dropped):
            spans.append((a, b, "CF639", f"a language's name alone on its line is a label: {m.group(1)!r} dropped"))
    return spans


_LONE_LABEL: Final = re.compile(r"[ \t]*+(?:\*\*)?([^\W\d_][\w'’.\-]{0,30})(?:\*\*)?[ \t]*+[:：](?:\*\*)?[ \t]*+")
"""A line that is one word and a colon (``Dati:``, ``**Reply:**``)."""
_LONE_LABEL_LINE: Final = re.compile(rf"^{_LONE_LABEL.pattern}$", re.M)
_FORM_OR_JSON: Final = re.compile(rf"{FORM_START.pattern}|[ \t]*+\{{", re.I)


def _lone_labels(text: str, dropped: list[Span]) -> list[Span]:
    """A line that is one word and a colon right before a request form or a JSON object (``Dati:`` /
    ``<user_chats>…``): the label of what follows, whoever's it names, never speech (``CF633``; found by the ninth
    set's #1). Before words, it is a sentence's lead-in (``Answer: it is late.``), read as written."""
    spans: list[Span] = []
    for m in _LONE_LABEL_LINE.finditer(text):
        a, b = m.span()
        if any(x <= a < y for x, y, *_ in dropped) or _PREAMBLE_WORDS.search(text[a:b]) is not None:
            continue  # (``Sure:`` announces the reply: text before it, dropped so)
        nxt = _next_words(text, b)
        if _FORM_OR_JSON.match(text, text.rfind("\n", 0, nxt) + 1) is not None:
            spans.append((a, b, "CF633", f"speaker label {text[a:b].strip()!r} dropped"))
    return spans


_PREAMBLE_WORDS: Final = re.compile(
    r"(?i)^[^{}<>\[\]]*?(?:\bhere(?:'s| is| are| you go)\b"
    r"|\b(?:voici|voilà|hier (?:ist|sind|kommt)|aquí (?:está|tienes|va)|ecco|eis|вот)\b"
    r".*\b(?:réponse|antwort|respuesta|risposta|resposta|ответ)"
    r"|^[ \t]*+(?:sure|okay|ok|certainly|of course|absolutely)\b|以下)"
)
"""A preamble announcing the reply (``Sure! Here is Rex:``, ``Okay, …:``, ``以下…：``; in other languages naming the
reply: ``Voici une réponse dans le personnage de Margaux :``, ``Hier ist meine Antwort:``): no brace, bracket, tag."""
_ANNOUNCES: Final = re.compile(r"[:：][ \t]*+$")
_JSON_NEXT: Final = re.compile(r"[ \t]*+(?:[{`~]|\[[ \t]*+(?:$|[{\[\"]))")
"""A line that begins a JSON reply or its fence: a preamble before it is the JSON reader's to set aside."""


def _preamble(text: str, dropped: list[Span]) -> list[Span]:
    """The reply's first line when it announces the reply (a preamble's word, ending in a colon) and the reply
    follows it on the next lines, not as JSON: ``CF636`` (no speech of the character's)."""
    lines = [(a, b) for a, b in line_spans(text) if text[a:b].strip() and not any(x <= a < y for x, y, *_ in dropped)]
    if len(lines) < 2:
        return []
    (a, b), (c, d) = lines[0], lines[1]
    line = text[a:b]
    if _ANNOUNCES.search(line) is None or _PREAMBLE_WORDS.search(line) is None or _JSON_NEXT.match(text, c, d):
        return []
    if _has_content(text, 0, a, dropped):
        return []
    return [(a, b, "CF636", f"a preamble announcing the reply dropped: {line.strip()[:40]!r}")]


_PLAYER_ROLES: Final = r"user|human|player"
"""The player's roles as chat templates and models name their turns and blocks (``[INST]`` opens one unnamed)."""
_USER_CLOSER: Final = re.compile(
    rf"\s*+[<\[][ \t]*+/[ \t]*+(?:{_PLAYER_ROLES})(?![\w-]*?(?:chats?|messages?)\b)[^<>\[\]\n]{{0,20}}?[>\]]++",
    re.I,
)
"""A closer naming the player's turn (``</USER>>``, ``</user>``, ``[/USER]``), no request form's (``</user_chats>``)."""
_ROLE_IN_TAG: Final = re.compile(rf"<[ \t]*+[\w\-]*?(?:{_PLAYER_ROLES})", re.I)
"""A tag whose name holds a role of the player's: a test before ``_user_blocks``'s scan of every tag."""
_NAMED_BLOCK: Final = re.compile(r"<[ \t]*+([^\W\d][\w\-]*+)[^<>\n]*+>")


def _marked_turns(text: str, told: Told, dropped: list[Span]) -> list[Span]:
    """Request forms whose turn the chat template's markers or the tags around them say is the player's (``CF632``;
    found by the ninth set's #56, #66, #71, #76): a form right after ``[INST]`` (a user turn begun, llama-2's) or a
    user turn's opener (``<start_of_turn>user``); a form the model closes with a closer naming the user
    (``</USER>>``); two or more forms each closed by ``[/INST]`` alone (the user's turns written one after another,
    no reply between them); and chats inside a block whose tag names the user (``<user_log_line>``) but is no request
    form's wrapper (whose chats, by the form's own convention, the character's reply fills)."""
    spans: list[Span] = []
    if "<" not in text:
        return spans
    spans += _user_blocks(text, told, dropped)
    found = [_bounded(text, a, b, told) for a, b, _m in blocks(text) if not any(x <= a < y for x, y, *_ in dropped)]
    if not found:
        return spans
    marks = list(SCAFFOLDING.finditer(text)) if SCAFFOLDING_HINT.search(text) is not None else []
    closed = [(a, b, m) for a, b in found if (m := _TURN_CLOSER.match(text, _past_dropped(text, b, dropped)[0]))]
    if len(closed) >= 2 and len(closed) == len(found):
        for a, _b, m in closed:
            spans.append((a, m.end(), "CF632", "request forms each closed by the end of the player's turn are theirs"))
        return spans
    for a, b in found:
        if _opened_as_user(text, a, marks, dropped) and _players_shape(text, a, b, told):
            spans.append((a, b, "CF632", "a request form in a user turn the chat template opens is the player's"))
        elif (m := _USER_CLOSER.match(text, b)) is not None:
            spans.append((a, m.end(), "CF632", "a request form closed as the user's turn is the player's"))
    return spans


_WRAPPER_CLOSER: Final = re.compile(rf"<[ \t]*+/[ \t]*+{FORM_WRAPPER}[ \t]*+>", re.I)


def _bounded(text: str, a: int, b: int, told: Told) -> tuple[int, int]:
    """A request form's span ``text[a:b]`` (as ``blocks`` finds it: one left open runs on) cut where another form
    opens on a line of its own, a label line stands or a JSON object begins, then at its last wrapper's closer."""
    end = b
    for x, y in line_spans(text[a:b])[1:]:
        line = text[a + x : a + y]
        if FORM_OPEN.match(line) or label_of(line, told) is not None or line.lstrip().startswith("{"):
            end = a + x
            break
    closers = list(_WRAPPER_CLOSER.finditer(text, a, end))
    if closers and closers[-1].end() < end:
        end = closers[-1].end()
    return a, len(text[:end].rstrip())


def _players_shape(text: str, a: int, b: int, told: Told) -> bool:
    """Whether every chat of the request form ``text[a:b]`` could be the player's: only their elements (an emotion,
    words: no action, thought or cue), no line of the character's own few-shot words, no emotion key of one cast
    member's alone. Gemma writes ``[INST] <<SYS>> <user_chats>`` before its own reply too (the fifth set's #57)."""
    chats = _chats_of(text, a, b)
    if not chats or not all(shape for _w, shape in chats):
        return False
    own = set(told.own.split("\n")) - {""}
    form = text[a:b]
    if any(normal(line) in own for line in form.split("\n")):
        return False
    keyed = {key for key, _who in told.keyed}
    return not any(m.group(1).strip().casefold() in keyed for m in _EMO_TEXT.finditer(form))


_EMO_TEXT: Final = re.compile(r">([^<>\n]{1,40})<")


def _opened_as_user(text: str, at: int, marks: list[re.Match[str]], dropped: list[Span]) -> bool:
    """Whether only blank space, spans dropped and chat-template markers stand between a user turn's opener
    (``[INST]``, ``<start_of_turn>user``) and ``at``."""
    pos = at
    while True:
        while pos > 0 and text[pos - 1] in " \t\r\n":
            pos -= 1
        mark = next((m for m in marks if m.end() == pos and m.start() < pos), None)
        if mark is not None:
            role = mark.group("chatml") or mark.group("gemma") or ""
            if mark.group("inst_open") is not None or role.casefold() in GENERIC_PLAYER:
                return True
            pos = mark.start()
            continue
        span = next((s for s in dropped if s[0] < pos <= s[1]), None)
        if span is None:
            return False
        pos = span[0]


def _user_blocks(text: str, told: Told, dropped: list[Span]) -> list[Span]:
    """The blocks of chats whose tag names the user (``<user_log_line>…</user_log_line>``), no request form's wrapper:
    each to its last closer before the next one opens, or, left open, to the end of its paragraph."""
    roles = {"user", "human", "player", *told.player_names}
    spans: list[Span] = []
    if _ROLE_IN_TAG.search(text) is None and not told.player_names:
        return spans
    opens = [
        m for m in _NAMED_BLOCK.finditer(text)
        if re.fullmatch(FORM_ELEMENT, m.group(1), re.I) is None and m.group(1).casefold() not in _TAG_NAMES
        and not m.group(1).isupper()  # (an upper-case placeholder, <USER_CONTEXT>, is scaffolding)
        and roles.intersection(re.split(r"[_\-]", m.group(1).casefold()))
    ]  # fmt: skip
    for k, m in enumerate(opens):
        nxt = next((o.start() for o in opens[k + 1 :] if o.group(1) == m.group(1)), len(text))
        closers = list(re.finditer(rf"<[ \t]*+/[ \t]*+{re.escape(m.group(1))}[ \t]*+>", text[m.end() : nxt]))
        if closers:
            end = m.end() + closers[-1].end()
        else:
            blank = re.compile(r"\n[ \t]*+\n").search(text, m.end(), nxt)
            end = blank.start() if blank is not None else nxt
        if "<chat" not in text[m.end() : end].casefold():
            continue
        message = f"chats in a block named for the user (<{m.group(1)}>) are the player's"
        spans.append((m.start(), end, "CF632", message))
    return spans


_TURN_CLOSER: Final = re.compile(r"[ \t]*+\[/[ \t]*+[A-Z][A-Z_]*+[ \t]*+\]")
"""The end of the player's turn written after a request form: llama-2's ``[/INST]``, or a marker written like it
(``[/USER_CHAT_LIST]``)."""


def _closed_turns(text: str, told: Told, dropped: list[Span]) -> list[Span]:
    """Request forms each closed by the end of the player's turn (``<user_chats>…</user_chats> [/INST]``), the first
    the player's turn echoed (reworded or not): that one and every form after it closed so are the player's
    turns, the turn the reply answers and the turns the model imagined after it (``CF632``; found by the fifth
    set's #42). A form so closed holding words of the player's never seen is no proof: nothing is dropped, unless
    the request's own instruction (the prompt's text, dropped) stands between the form and the end of the turn —
    the shape of the player's turn as the request writes it (found by the seventh set's #58)."""
    spans: list[Span] = []
    for a, b, _m in blocks(text):
        at, instructed = _past_dropped(text, b, dropped)
        closer = _TURN_CLOSER.match(text, at) or (_TURN_CLOSER.search(text, b, at) if instructed else None)
        if closer is None:
            continue
        if not spans and not instructed and not _the_players(text[a:b], told):
            return []
        spans.append((a, closer.end(), "CF632", "a request form closed by the end of the player's turn is theirs"))
    return spans


def _past_dropped(text: str, at: int, dropped: list[Span]) -> tuple[int, bool]:
    """Where the text after ``at`` goes on past blank space and spans already dropped, and whether one was."""
    passed = False
    while True:
        skip = at
        while skip < len(text) and text[skip] in " \t\r\n":
            skip += 1
        span = next((s for s in dropped if s[0] <= skip < s[1]), None)
        if span is None:
            return (at if not passed else skip), passed
        at, passed = span[1], True


_ANY_TAG: Final = re.compile(r"<[^<>]*+>?")
_OPENING_NAME: Final = re.compile(r"<[ \t]*+([^\W\d][\w\-]*+)")
_PLAYERS_ELEMENTS: Final = frozenset(
    name.casefold() for spec in DEFAULT_TAGS.specs if spec.role in ("speech", "emotion")
    for name in (spec.name, *spec.synonyms)
)  # fmt: skip
"""The elements of the player's turn as the request form writes it (``<emo>``, ``<msg>``): an action, a thought or a
cue in a form's chat is the character's shape, never the player's."""
_TAG_NAMES: Final = frozenset(name.casefold() for spec in DEFAULT_TAGS.specs for name in (spec.name, *spec.synonyms))
"""The tag table's names (no block of the user's is one of them)."""


def _looped_forms(text: str, dropped: list[Span]) -> list[Span]:
    """Request forms each of whose chats is said again, word for word, in another chat of a form of the reply, each
    in the player's shape (an emotion and words, no action, thought or cue): the request's turn imitated in a loop
    (``Cosa ha da fare?`` twice, and the question after it twice), the player's turns the model imagined, never the
    character's reply (``CF632``; found by the seventh set's #73)."""
    found = blocks(text) if "<" in text else []
    chats = [_chats_of(text, a, b) for a, b, _m in found]
    if sum(len(one) for one in chats) < 2:
        return []
    said: dict[str, int] = {}
    for one in chats:
        for words_, _shape in one:
            said[words_] = said.get(words_, 0) + 1
    spans: list[Span] = []
    for (a, b, _m), one in zip(found, chats, strict=True):
        if not one or not all(said[w] >= 2 and shape for w, shape in one):
            continue
        if not any(x <= a < y for x, y, *_ in dropped):
            spans.append((a, b, "CF632", "a request form whose chats the reply says again is a turn imagined"))
    return spans


_ASKED: Final = 2
"""Request forms' chats of questions from which a run of them after other text is the player's turns imagined."""
_QUESTION: Final = re.compile(r"(?:[^.!?…。！？]*+[?？]++[\"'”」』)）\s]*+)++")
"""Sentences that ask, each up to its ``?``, and nothing else."""
_SECOND_PERSON_WORDS: Final = frozenset({
    "you", "your", "yours", "you're", "youre", "you've", "youve", "you'd", "youd", "you'll", "youll", "du", "dein",
    "deine", "deinen", "deinem", "deiner", "dir", "dich", "tu", "te", "ti", "toi", "ton", "ta", "tes", "vous",
    "votre", "vos", "tú", "usted", "ustedes", "vosotros", "você", "vocês", "teu", "tua", "tuo", "jij", "je", "jouw",
    "uw", "ty", "cię", "ci", "twój", "twoja", "wy", "вы", "ты", "вас", "вам", "ваш", "ваша", "ваше", "тебя", "тебе",
    "твой", "твоя", "sen", "siz", "senin", "sizin", "bạn", "cậu", "anh", "chị",
})  # fmt: skip
_SECOND_PERSON: Final = re.compile(
    r"(?<![^\W\d_])(?:" + "|".join(sorted(_SECOND_PERSON_WORDS)) + r")(?![^\W\d_])", re.I
)
"""Words of the second person, in the languages the reader meets: a question with one asks its hearer."""


def asked_forms(text: str, told: Told, *, after: bool) -> list[tuple[int, int]]:
    """Request forms holding questions to the character (``text``: a reply read as the request form echoed, what is
    not the reply blanked), ``after`` other text (the prompt echoed or imitated, scaffolding, a lead-in, the player's
    turn: never the reply's own opening, nor the character's label alone): ``_ASKED`` chats or more of the forms
    are questions and nothing else, two thirds of their chats with words or more, one of them in the second person,
    each in the player's shape (``What is your favorite song?``, ``Why are you taking the last train?``). The form
    is the player's side and these lines ask the character: the player's turns imagined, their spans to drop whole,
    with the form chats between them (``CF632``; found by the thirteenth set's #64 and #89, the third's #82). A reply
    written in the form's shape from its start (SmolLM2's, its lines the character's own, questions to the player
    among them) or holding fewer questions reads as before."""
    found = [(a, b) for a, b, _m in blocks(text)]
    if not found:
        return []
    before = text[: found[0][0]].strip()
    if not (after or before) or (before and label_of(before, told) == "character"):
        return []
    chats = [c for a, b in found for c in _chats_of(text, a, b)]
    if chats and found[-1][1] == len(text.rstrip()) and not re.search(r"[.!?…。！？]\W*\Z", chats[-1][0]):
        chats.pop()  # (a chat the input ends inside: what it would have been, no one knows)
    asked = [n for n, shape in chats if shape and _QUESTION.fullmatch(n)]
    if len(asked) < _ASKED or 3 * len(asked) < 2 * len(chats) or not any(map(_SECOND_PERSON.search, asked)):
        return []
    return found


def _chats_of(text: str, a: int, b: int) -> list[tuple[str, bool]]:
    """The words of each chat of the request form ``text[a:b]`` that has words (its tags left out), each with
    whether it is in the player's shape (no element but theirs and the form's)."""
    form = text[a:b]
    opens = [
        m.start() for m in CHAT_ELEMENT.finditer(form)
        if m.group(1) is None and form_name(m, inside_chat=False) == "chat"
    ]  # fmt: skip
    parts = [form[x:y] for x, y in zip(opens, [*opens[1:], len(form)], strict=False)] if opens else [form]
    found: list[tuple[str, bool]] = []
    for part in parts:
        if n := normal(_ANY_TAG.sub(" ", CHAT_ELEMENT.sub(" ", part))):
            names = {m.group(1).casefold() for m in _OPENING_NAME.finditer(CHAT_ELEMENT.sub(" ", part))}
            found.append((n, all(x in _PLAYERS_ELEMENTS or x.startswith(("chat", "user_chat")) for x in names)))
    return found


def _the_players(form: str, told: Told) -> bool:
    """Whether a line of words of ``form`` (a request form) is the player's: this turn or a few-shot turn of theirs,
    word for word, nearly, or reworded."""
    for line in form.split("\n"):
        n = normal(line)
        if len(n) < MIN_LINE:
            continue
        if n in told.player or nearly_said(n, told.player, begun=True) or mostly_said(n, told.turn, told.request):
            return True
    return False


def opens_second_person(line: str) -> bool:
    """Whether ``line`` opens with a word of the second person (``You're in character…``: the prompt's voice)."""
    return _SECOND_PERSON.match(line.lstrip()) is not None


def _turns(text: str, told: Told, dropped: list[Span]) -> list[Span]:
    """Speaker labels (``CF633``), the player's turns and the turns imagined after the reply (``CF632``)."""
    marks = _turn_marks(text, told, dropped)
    spans: list[Span] = []
    started = _has_content(text, 0, marks[0][0] if marks else len(text), dropped)
    if started and marks and (tail := _sentence_tail(text, marks[0][0], dropped)) is not None:
        spans.append((*tail, "CF631", f"a fragment ending a sentence of the prompt's dropped: {text[slice(*tail)]!r}"))
        started = False
    elif (
        started
        and marks
        and marks[0][2] == "player"
        and any(kind == "character" for *_, kind in marks[1:])
        and (lead := _lead_in(text, marks[0][0], dropped)) is not None
    ):
        message = f"a lead-in or a title before the turns written after it, no reply: {text[slice(*lead)].strip()!r}"
        spans.append((*lead, "CF601", message))
        started = False
    elif started and (forms := _forms_before_labelled_json(text, marks, dropped)):
        message = "a request form before the player's turn and the character's labelled JSON reply: imitated, dropped"
        spans += [(a, b, "CF632", message) for a, b in forms]
        started = False
    elif started and _labelled_json_reply(text, marks) and (voiced := _prompts_voice(text, marks[0][0], dropped)):
        message = "text in the prompt's voice (You are…) before the player's turn and the character's labelled reply"
        spans += [(a, b, "CF631", f"{message}: the prompt imitated, dropped: {text[a:b][:40]!r}") for a, b in voiced]
        started = False
    labelled = False  # a label of the character's was read, and the reply after it
    for k, (start, end, kind) in enumerate(marks):
        nxt = marks[k + 1][0] if k + 1 < len(marks) else len(text)
        if kind == "character" and labelled and started and told.members == 1:
            # (``Odile:`` a second time after her reply: the next turn of hers, imagined; the fifth set's #2)
            message = "the character's label again after the reply: the turns imagined after it dropped"
            spans.append((start, len(text), "CF632", message))
            break
        if kind == "character":
            labelled = True
            spans.append((start, end, "CF633", f"speaker label {text[start:end].strip()!r} dropped"))
            started = started or _has_content(text, end, nxt, dropped)
            continue
        if started:  # the reply was read: from here on, the turns the model imagined after it
            spans.append((start, len(text), "CF632", "the turns imagined after the reply dropped (a next turn begins)"))
            break
        following = next((m for m in marks[k + 1 :] if m[2] == "character"), None)
        stop = following[0] if following is not None else _turn_alone(text, start, end, dropped)
        spans.append((start, stop, "CF632", "the player's turn written before the reply dropped"))
        if following is None:
            break
    return spans


def _forms_before_labelled_json(
    text: str, marks: list[tuple[int, int, str]], dropped: list[Span]
) -> list[tuple[int, int]]:
    """The request forms before the first turn, a player's that the character's label and a JSON reply with words
    follow (``<user_chats>…</user_chats>`` / ``<user_chats>…the player's turn…</user_chats>`` / ``Tock:`` /
    ``{"chats"…"body":"<msg>…``): the request form is the player's shape, the labelled JSON reply the character's,
    so that reply is the reply and the forms before it the prompt imitated (found by the twelfth set's #62); the
    lines of words outside those forms are left to the reply's reading (outside the JSON reply: dropped). None
    when no form stands before the turn (a sentence, the reply: the turns after it imagined), when no JSON follows
    the label, or when that JSON holds no words (``{"chats":[]}``: the form before it stays the reply)."""
    if len(marks) < 2 or marks[1][2] != "character" or not _labelled_json_reply(text, marks):
        return []  # (an empty reply, ``{"chats":[]}``, is none: the form before it stays read; the sixth set's #22)
    return [(a, b) for a, b, _m in blocks(text[: marks[0][0]]) if _has_content(text, a, b, dropped)]


def _labelled_json_reply(text: str, marks: list[tuple[int, int, str]]) -> bool:
    """Whether the first turn marked is the player's (one or more marks: ``User:``, the form after it), the next the
    character's label, and a JSON reply holding words follows that label (``User:`` / … / ``Tock:`` /
    ``{"chats"…"body":"<msg>…``)."""
    k = next((k for k, mark in enumerate(marks) if mark[2] != "player"), 0)
    if k == 0 or marks[k][2] != "character":
        return False
    after, end = _next_words(text, marks[k][1]), marks[k + 1][0] if len(marks) > k + 1 else len(text)
    return _JSON_START.match(text, after) is not None and _BODY_WORDS.search(text, after, end) is not None


_PROMPTS_VOICE: Final = re.compile(
    r"[ \t*_>#-]*+(?:you[ \t]++are|you['’]re|stay[ \t]++in[ \t]++character|remember,?[ \t]++you)(?![^\W\d_])", re.I
)
"""A line opened as the prompt tells its character who they are (``You are the veterinarian.``, ``Stay in
character``): the prompt's voice, not the character's."""


def _prompts_voice(text: str, at: int, dropped: list[Span]) -> list[tuple[int, int]]:
    """The lines before ``at`` (the first turn), where the first of them of more than one word opens in the prompt's
    voice (``_PROMPTS_VOICE``) and every other one with words is either so opened or a word alone (``you``): the
    prompt imitated, before a transcript whose first turn is the player's (the sixteenth set's #97, the fifteenth's
    #81 in another shape). Text of the character's own before the turns (no line so opened first) is none: ``[]``."""
    found: list[tuple[int, int]] = []
    voiced = False
    for a, b in line_spans(text[:at]):
        if any(x < b and a < y for x, y, *_ in dropped) or not _has_content(text, a, b, dropped):
            continue
        words = len(text[a:b].split())
        if _PROMPTS_VOICE.match(text, a, b) is not None:
            voiced = True
        elif words > 1:
            return []
        found.append((a + len(text[a:b]) - len(text[a:b].lstrip()), a + len(text[a:b].rstrip())))
    return found if voiced else []


def _turn_alone(text: str, start: int, end: int, dropped: list[Span]) -> int:
    """Where a player's labelled turn that no character's label follows ends: at its line's end when the label
    shares its line with the turn's words (``Player: hi``), else at the end of its paragraph — where words follow
    (``Player: hi`` / ``<emo>grumpy</emo>…``: the reply, never every line dropped); at the end of ``text`` when none
    do (a turn alone, or a request form: the player's whatever follows)."""
    if start == end or FORM_START.match(text, start) is not None or FORM_START.match(text, _next_words(text, end)):
        return len(text)
    if text[end:].split("\n", 1)[0].strip():
        stop = text.find("\n", end)
    else:
        blank = _BLANK_AFTER.search(text, end)
        stop = blank.end() if blank is not None else -1
    if stop < 0 or FORM_START.match(text, stop + 1) is not None or not _has_content(text, stop, len(text), dropped):
        return len(text)
    return stop


def _next_words(text: str, at: int) -> int:
    """Where the first non-blank character at or after ``at`` is (``len(text)`` when none)."""
    m = _NON_BLANK.search(text, at)
    return m.start() if m is not None else len(text)


_NON_BLANK: Final = re.compile(r"\S")
_JSON_START: Final = re.compile(r"(?:```[^\n]*+\n[ \t]*+)?\{")
"""A JSON reply's beginning (its fence, if any, and the object's brace)."""
_BODY_WORDS: Final = re.compile(r'"body"[ \t]*+:[ \t]*+"(?:[^"\\\n]|\\.)*?[^\W_]')
"""A JSON chat's body holding a word: a reply, not an empty one."""
_BLANK_AFTER: Final = re.compile(r"\S[^\n]*+\n[ \t]*+(?=\n)")
"""A line of words followed by a blank line: a paragraph's end (where the blank line is)."""
_TAIL: Final = re.compile(r"[ \t]*+[a-z][\w'’-]*+(?:[ \t]++[\w'’-]++)?[.,;:!?]?[ \t]*+")
"""A line of one or two words in lower case (``you.``): the end of a sentence, not a reply's beginning."""


def _sentence_tail(text: str, end: int, dropped: list[Span]) -> tuple[int, int] | None:
    """The span of the one line of content before the first turn when it is only the end of a sentence (``you.``,
    what the model went on with from the prompt's last words, then ``<user_chats>…`` and ``Quill:`` and the reply):
    no reply began there (found by the fourth set's #92), or ``None``."""
    found = [(a, b) for a, b in line_spans(text[:end]) if _has_content(text, a, b, dropped)]
    if len(found) != 1:
        return None
    a, b = found[0]
    if any(x < b and a < y for x, y, *_ in dropped) or _TAIL.fullmatch(text, a, b) is None:
        return None
    return a, b


_LEAD_WORDS: Final = 12
"""Words at most of a lead-in ending in a colon (``The default for this example is:``)."""
_TITLE_WORDS: Final = 3
"""Words at most of a title (``The Fairgoer``) or of a word in a tag (``<user_chat>hollis</user_chat>``)."""
_SENTENCE_END: Final = re.compile(r"[.!?…。！？\"”」』)]\Z")


def _lead_in(text: str, end: int, dropped: list[Span]) -> tuple[int, int] | None:
    """The span of the one line of content before the first turn, a player's, when it only leads to the turns after
    it, a character's labelled reply among them: a lead-in ending in a colon (``Looks like a puppet:``, ``The
    default for this example is:``), a title of a few words with no sentence's end (``The Fairgoer``), or a word
    or two in a tag (``<user_chat>hollis</user_chat>``). No reply began there (found by the tenth set's #20, #53,
    #68 and the ninth set's #99), or ``None``."""
    found = [(a, b) for a, b in line_spans(text[:end]) if _has_content(text, a, b, dropped)]
    if len(found) != 1:
        return None
    a, b = found[0]
    if any(x < b and a < y for x, y, *_ in dropped):
        return None
    line = text[a:b]
    said = TAG_MARKUP.sub(" ", line).split()
    if not said:
        return None
    if said[-1].endswith((":", "：")):
        return (a, b) if len(said) <= _LEAD_WORDS else None
    if len(said) > _TITLE_WORDS or _SENTENCE_END.search(said[-1]) is not None:
        return None
    titled = all(w[:1].isupper() or not w[:1].isalpha() for w in said)
    return (a, b) if titled or TAG_MARKUP.search(line) is not None else None


def _turn_marks(text: str, told: Told, dropped: list[Span]) -> list[tuple[int, int, str]]:
    """Where turns begin: label lines (``character``, ``player``), and the request form right before a
    character's label (the player's turn, written in the form the prompt shows it in)."""
    labels = [m for m in _labels(text, told) if not any(x <= m[0] < y for x, y, *_ in dropped)]
    marks: list[tuple[int, int, str]] = []
    since = 0  # where the text since the last label begins
    for k, (a, b, kind) in enumerate(labels):
        opened = _opened_by_player(text, since, a, told)
        if opened is not None and any(m[2] == "character" for m in labels[k:]):
            marks.append((opened, opened, "player"))  # a transcript echoed: the player's turn, then the character's
        before = _form_before(text, since, a) if kind == "character" else None
        if before is not None and not introduces(told, text[before:a]):  # (a form of the character's own: theirs)
            marks.append((before, before, "player"))
        elif kind == "character" and (bare := _bare_opener(text, since, a, dropped)) is not None:
            marks.append((bare, bare, "player"))
        marks.append((a, b, kind))
        since = b
    if not any(kind == "player" for *_, kind in marks[-1:]):
        marks += _echo_after_reply(text, since, told, dropped)
    return sorted(set(marks))


def _echo_after_reply(text: str, since: int, told: Told, dropped: list[Span]) -> list[tuple[int, int, str]]:
    """The player's turn echoed in the request form, without a label, after words of the reply (``…bigode.`` /
    ``<user_chats>…the player's line…</user_chats> [/INST]``): a next turn begins there, so what follows it is
    imagined (found by the third set's #47). Before any word of the reply, it is the turn the reply answers."""
    for a, b, _m in blocks(text[since:]):
        first = _first_words(text[since + a : since + b])
        if not first or not (first in told.player or nearly_said(first, told.player, begun=True)):
            continue
        if _has_own_line(text, since + a, dropped):
            return [(since + a, since + a, "player")]
    return []


def _labels(text: str, told: Told) -> list[tuple[int, int, str]]:
    """Speaker labels: lines that are only one (``label_of``), and labels that share their line with the turn's
    text (``INLINE_LABEL``; ``end`` is then where the label ends): a told or generic name's, or an unknown name's
    where two labelled lines of different names follow each other, the first after a blank line, a JSON
    reply (a transcript: the first is the player's, the second the character's). A field
    label (``Emotion: annoyed``: a tag's synonym) is no speaker's."""
    lines = line_spans(text)
    found: list[tuple[int, int, str]] = []
    for k, (a, b) in enumerate(lines):
        if (kind := label_of(text[a:b], told)) is not None:
            found.append((a, b, kind))
        elif (m := INLINE_LABEL.match(text, a, b)) is not None and (kind := _inline_kind(m, told)) is not None:
            end = m.end()
            if (again := _LABEL_AGAIN.match(text, end, b)) is not None and again.group(1).casefold() == m.group(
                "name"
            ).strip().casefold():
                end = again.end()  # (``Ashby: Ashby: "…"``: the label doubled, both dropped; the eighth set's #29)
            found.append((a, end, kind))
            found += _labels_within(text, end, b, told)
        elif m is not None and _FIELD_WORD.search(m.group("name")) is None and _opens_transcript(text, lines, k):
            found.append((a, a, "player"))
            c, d = lines[k + 1]
            if (second := INLINE_LABEL.match(text, c, d)) is not None:
                found.append((c, second.end(), "character"))
    return sorted(set(found + _other_speaker(text, lines, found)))


_LABEL_AGAIN: Final = re.compile(
    r"(?:\*\*)?([^\W\d_][\w'’.\-]{0,19}(?:[ \t][\w'’.\-]{1,20}){0,2}?)(?:\*\*)?[ \t]*+[:：][ \t]*+"
)
"""A label again right after a line's label (``Ashby: Ashby:``)."""
_LABEL_WITHIN: Final = re.compile(
    r"(?<=[.!?…\"”」』])[ \t]++(?:\*\*)?(?P<name>[^\W\d_][\w'’.\-]{0,19}(?:[ \t][\w'’.\-]{1,20}){0,2}?)(?:\*\*)?"
    r"[ \t]*+[:：][ \t]*+(?=[\"“「『])"
)
"""A second label inside a labelled line: after a sentence's end or a closing quote, a name, a colon and an opening
quote (``… No way!" Ashby: "I'm going…``)."""


def _labels_within(text: str, start: int, end: int, told: Told) -> list[tuple[int, int, str]]:
    """The labels of the character's (a scene's cast: any member's) inside a labelled line after its first label,
    each where the quotation it opens begins: the next turn, written on the same line (the eighth set's #29)."""
    found: list[tuple[int, int, str]] = []
    for m in _LABEL_WITHIN.finditer(text, start, end):
        if whose_label(m.group("name").strip().casefold(), told) == "character":
            found.append((m.start("name") - (2 if text.startswith("**", m.start("name") - 2) else 0), m.end(),
                          "character"))  # fmt: skip
    return found


def _other_speaker(text: str, lines: list[tuple[int, int]], found: list[tuple[int, int, str]]) -> list[Span3]:
    """A transcript of two speakers, one labelled by a role (``Player:``, ``User:``; ``Assistant:``) and the other by
    a name never told (``Kai:``): the other speaker's labels, on the lines next to the role's (the nearest line of
    words before or after one). With only the player's labels found, ``Kai: <emo>grumpy</emo>`` after ``Player: hi``
    would be the player's turn too, and the whole reply dropped (found by trial 7)."""
    kinds = {kind for *_, kind in found}
    if len(kinds) != 1:
        return []
    (kind,) = kinds
    other = "character" if kind == "player" else "player"
    starts = {a for a, *_ in found}
    words = [k for k, (a, b) in enumerate(lines) if text[a:b].strip()]
    name = None
    for i, k in enumerate(words):
        if lines[k][0] not in starts:
            continue
        for j in (i + 1, i - 1):
            if 0 <= j < len(words) and lines[words[j]][0] not in starts:
                m = INLINE_LABEL.match(text, *lines[words[j]])
                if m is not None and _FIELD_WORD.search(m.group("name")) is None:
                    name = m.group("name").strip().casefold()
                    break
        if name is not None:
            break
    if name is None and other == "character" and words and lines[words[0]][0] in starts:
        name = _labels_json(text, lines, words, starts)  # (a transcript the role's turn opens: no text before it)
    if name is None:
        return []
    labelled = ((a, m) for a, b in lines if (m := INLINE_LABEL.match(text, a, b) or LABEL_LINE.fullmatch(text, a, b)))
    return [(a, m.end(), other) for a, m in labelled if m.group("name").strip().casefold() == name]


def _labels_json(text: str, lines: list[tuple[int, int]], words: list[int], starts: set[int]) -> str | None:
    """The name of a label alone on its line (``Quill:``) right before a JSON reply (``{"chats": …``), as the
    prompt's few-shots label the character's replies: the other speaker of a transcript whose turns the role labels
    (``User:``) where the prompt is not told (found by the stream's helper on the fourth set's #61: the player's
    turn ran over the reply, and the reply was lost)."""
    for i, k in enumerate(words[:-1]):
        a, b = lines[k]
        if a in starts or (m := PROMPT_LABEL.fullmatch(text, a, b)) is None or _FIELD_WORD.search(m.group(1)):
            continue
        c, d = lines[words[i + 1]]
        if text[c:d].lstrip().startswith("{"):
            return m.group(1).strip().casefold()
    return None


Span3 = tuple[int, int, str]


_FIELD_WORD: Final = re.compile("(?i)^(?:" + "|".join(sorted(DEFAULT_TAGS.synonyms, key=len, reverse=True)) + r")\b")
"""A field label's first word (``Emotion``, ``Message``): the tag table's names and synonyms."""
_AFTER_JSON: Final = re.compile(r"[}\]`][ \t]*+$")


def _inline_kind(m: re.Match[str], told: Told) -> str | None:
    """``player``, ``character`` or ``None``: whose label ``m`` (an ``INLINE_LABEL`` match) is, by its name."""
    return whose_label(m.group("name").strip().casefold(), told)


def _opens_transcript(text: str, lines: list[tuple[int, int]], k: int) -> bool:
    """Whether line ``k``, labelled with an unknown name, opens a transcript: the next line is labelled with
    another name (not a field label), and line ``k`` follows a blank line, a JSON reply, or nothing."""
    a, b = lines[k]
    if k + 1 >= len(lines):
        return False
    first = INLINE_LABEL.match(text, a, b)
    c, d = lines[k + 1]
    second = INLINE_LABEL.match(text, c, d)
    if first is None or second is None or _FIELD_WORD.search(second.group("name")) is not None:
        return False
    if first.group("name").casefold() == second.group("name").casefold():
        return False
    if k == 0:
        return False  # (at the start: two labelled lines may be the reply's own, ``Price: …`` ``Time: …``)
    before = text[lines[k - 1][0] : lines[k - 1][1]]
    return not before.strip() or _AFTER_JSON.search(before) is not None


_NAME_SO_FAR: Final = re.compile(
    r"[ \t]*+(?:\*\*)?[^\W\d_][\w'’.\-]{0,19}(?:[ \t][\w'’.\-]{0,20}){0,2}(?:\*\*)?[ \t]*+\Z"
)
"""A line so far that may still become a labelled one: a name being written."""


def lines_held(text: str) -> int:
    """How many of the last lines of ``text`` (a reply so far) may still turn out to open a transcript as
    ``_labels`` finds one (a labelled line after a blank line, a JSON reply or a role's labelled line, the next
    labelled with another name; a first labelled line, a role's label maybe next): 0, 1 (a name being written, or
    the labelled line itself) or 2 (that line and the next begun)."""
    lines = text.split("\n")

    def label(line: str) -> bool:
        m = INLINE_LABEL.match(line)
        return m is not None and _FIELD_WORD.search(m.group("name")) is None

    def may_label(line: str) -> bool:
        return _NAME_SO_FAR.match(line) is not None or label(line)

    def role(line: str) -> bool:  # a line a role labels (``Player: hi``): the next labelled line is the other's
        m = INLINE_LABEL.match(line) or LABEL_LINE.match(line)
        name = m.group("name").strip().casefold() if m is not None else ""
        return name in GENERIC_PLAYER or name in GENERIC_CHARACTER

    def boundary(k: int) -> bool:
        return k >= 0 and (not lines[k].strip() or _AFTER_JSON.search(lines[k]) is not None or role(lines[k]))

    n = len(lines)
    if n <= 2 and label(lines[0]) and not role(lines[0]) and (n == 1 or not lines[-1] or may_label(lines[-1])):
        return n  # (a first line labelled ``Kai:``: a role's label on the next makes it a transcript's)
    if n >= 3 and label(lines[-2]) and boundary(n - 3) and (not lines[-1] or may_label(lines[-1])):
        return 2
    if n >= 2 and boundary(n - 2) and may_label(lines[-1]):
        return 1
    return 0


def _opened_by_player(text: str, since: int, at: int, told: Told) -> int | None:
    """Where a request form between ``since`` and ``at`` begins whose first words are the player's (a line of
    this turn or of the prompt's few-shot turns, or nearly one): the player's turn echoed, however it goes on;
    or ``None``."""
    for a, b, _m in blocks(text[since:at]):
        first = _first_words(text[since + a : since + b])
        if first and (first in told.player or nearly_said(first, told.player, begun=True)):
            return since + a
    return None


_KEY_ALONE: Final = re.compile(r"[^\W\d][\w\-]*+")
"""A line that is one word and no more (``contenta``, ``悲伤``), as an emotion key is; no sentence (``灯灭了？``)."""


def _first_words(form: str) -> str:
    """The first line of words of a request form that can say who speaks (as ``normal`` writes it), or ``""``.

    A line of one word (an emotion key alone, ``<emo>contenta</emo>``) is anyone's: it says nothing of who speaks
    (found by the sixth set's #72); ``Hi!`` is a line of words."""
    for line in form.split("\n"):
        if (n := normal(line)) and _KEY_ALONE.fullmatch(n) is None:
            return n
    return ""


_BARE_OPENER: Final = re.compile(rf"[ \t]*+[<＜]\s*+{FORM_WRAPPER}\s*+[>＞][ \t]*+$", re.I)
"""A line that is only the request form's opener (``<user_chats>``), no chat after it on the line."""


def _bare_opener(text: str, since: int, at: int, dropped: list[Span]) -> int | None:
    """Where a bare request form opener stands before the character's label at ``at``: ``<user_chats>`` alone on
    its line after words of the reply, then lines of plain words (no tag: no ``<chat>``, no element), then the
    label (``…for you.`` / ``<user_chats>`` / ``You've got two more to go...`` / ``Wick:``). The form opens the
    player's turn, written as a line: their imagined turn, and the labelled reply after it the character's
    imagined next one (found by the thirteenth set's #19). A form holding the character's elements is no such
    turn."""
    lines = line_spans(text[since:at])
    for k, (a, b) in enumerate(lines):
        if _BARE_OPENER.match(text, since + a, since + b) is None:
            continue
        after = [(since + x, since + y) for x, y in lines[k + 1 :]]
        if not any(_has_content(text, x, y, dropped) for x, y in after):
            return None
        if any(TAG_MARKUP.search(text, x, y) is not None for x, y in after):
            return None
        return since + a if _has_content(text, 0, since + a, dropped) else None
    return None


def _form_before(text: str, since: int, at: int) -> int | None:
    """Where the request form written right before ``at`` begins (its lines and the lines of any form right
    before it: nothing but tags, each line), when it follows ``since``; or ``None``."""
    found = None
    for a, b in reversed(line_spans(text[since:at])):
        line = text[since + a : since + b]
        if not _FORM_LINE.match(line):
            break
        if FORM_OPEN.match(line):
            found = since + a
    return found


def _has_own_line(text: str, end: int, dropped: list[Span]) -> bool:
    """Whether ``text[:end]``, less what is dropped, holds a line of words that is not written as the prompt's
    spec is (``- "message": …``): words of the reply's own."""
    return any(_has_content(text, a, b, dropped) and not spec_like(text[a:b]) for a, b in line_spans(text[:end]))


def _has_content(text: str, start: int, end: int, dropped: list[Span]) -> bool:
    """Whether ``text[start:end]``, less what is dropped and less tags, holds a word."""
    parts, pos = [], start
    for a, b, *_ in dropped:
        if b <= pos or a >= end:
            continue
        parts.append(text[pos:a])
        pos = max(pos, b)
    parts.append(text[pos:end])
    # (a marker as mangled as scaffolding reads it, <<SYS], is no word of the reply: found by the fresh set's #57)
    rest = _REASONING.sub(" ", " ".join(parts))
    if SCAFFOLDING_HINT.search(rest) is not None:  # (the full scan is ten times the cost: most text holds none)
        rest = SCAFFOLDING.sub(" ", rest)
    return any(m.group("word") is not None for m in _TAG_OR_WORD.finditer(rest))


def _merge(spans: list[Span]) -> list[Span]:
    """``spans`` sorted, a span inside or overlapping the one before it merged into it."""
    merged: list[Span] = []
    for span in sorted(spans):
        if merged and span[0] < merged[-1][1]:
            last = merged[-1]
            if span[1] > last[1]:
                merged[-1] = (last[0], span[1], last[2], last[3])
            continue
        merged.append(span)
    return merged
