"""The prompt's own text in a reply: its lines echoed or reworded, its sections, lists and forms imitated.

Small models write their prompt back: the persona's lines (``You are Rex, a retired combat
robot``), a heading of the format spec and the section under it, its list items
(``- "order": the display order``), the tag list (``<emo>...</emo>: the emotion``), the example
forms, questions to the writer after it, the prompt retold in other words. ``prompt_lines`` finds
them line by line (when the caller told the prompt: ``parse(prompt=...)``), each a span to blank
with ``CF631``; ``turns.foreign`` calls it first.
"""

from __future__ import annotations

import difflib
import re
from typing import Final

from charfmt._lenient.marks import FORM_WRAPPER, GENERIC_CHARACTER
from charfmt._lenient.request_form import CHAT_ELEMENT, introduces
from charfmt._lenient.state import normal
from charfmt._lenient.told import (
    FIELD_LINE,
    HEADING,
    LIST_KEY,
    MIN_LINE,
    MIN_PART,
    NEARLY,
    NEARLY_FROM,
    OPENING_WORDS,
    SAME_START,
    TAG_MARKUP,
    TAG_SPEC,
    VOCAB_WORD,
    Span,
    Told,
    label_of,
    line_spans,
    list_item_key,
)

_REASONING_HEADING: Final = re.compile(
    r"^[ \t]*+#{1,6}[ \t]*+(?:thinking|thoughts?|reasoning|analysis|answer|response|reply|final(?: answer)?|output)\b",
    re.I,
)
_FENCE: Final = re.compile(r"[ \t]*+(?:```|~~~)")
"""A code fence's line (opening or closing one)."""
_REPLY_START: Final = re.compile(r"[ \t]*+(?:[{\[]|```|~~~)")
"""A line that may begin a JSON reply (or its fence): no section of the prompt's runs over it."""
FORM_START: Final = re.compile(rf"[ \t]*+(?:[-*][ \t]*+)?[<＜]\s*+(?:{FORM_WRAPPER}|chat)\b", re.I)
FORM_OPEN: Final = re.compile(rf"[ \t]*+(?:[-*][ \t]*+)?[<＜]\s*+{FORM_WRAPPER}\b", re.I)
_NUMBERED_KEY: Final = re.compile(r"^[ \t]*+\d{1,2}[.)][ \t]++(\"[^\"\n]{1,40}\")[ \t]*+[:=]")
"""A numbered item's quoted key (``1. "type": "C"``): the prompt's list imitated with numbers, where its key is the
prompt's or the item before was the list's (found in the eleventh set's #1, a row never in a sample, and the seventh
set's #1); an unquoted one (``1. Flour: 200 g``) is anyone's numbered list."""
_SPEC_LINE: Final = re.compile(r"(?:[-*•][ \t]|\d+[.)][ \t]|\"[^\"\n]{1,40}\"[ \t]*[:=])")


def prompt_lines(text: str, told: Told) -> list[Span]:
    """Lines of the prompt echoed (``CF631``), and Markdown sections where the prompt is written in them."""
    scan = _PromptScan(text, told)
    for a, b in line_spans(text):
        if a >= scan.skip:
            scan.line(a, b)
    return scan.end()


class _PromptScan:
    """What ``prompt_lines`` knows as it reads a reply line by line, and its spans."""

    def __init__(self, text: str, told: Told) -> None:
        self.text, self.told = text, told
        self.spans: list[Span] = []
        self.section: int | None = None  # where the section being dropped began
        self.echoed = False  # the reply began by echoing the prompt: what looks like the prompt's goes on being it
        self.content = False  # a line of the reply's own was read
        self.fenced = False  # inside a code fence: a ``#`` line is a comment of the code, no heading
        self.listing = False  # the line before was the prompt's imitated (an item of its lists, a line of it)
        self.item = _Item()  # (inside a section: a form indented under an item of its list is the item's example)
        self.wrapped = ""  # the line before, echoed whole or as the start of one of the prompt's lines: it may go on
        self.intro = False  # (inside a section: its last line of words ends in a colon, introducing what follows)
        self.example = False  # (inside a section: the player's form it introduced and what follows it, its example)
        self.skip = 0  # (the end of lines already dropped whole: the prompt continued over them)
        self.asked = 0  # (the end of the run of lines ``_asks_the_writer`` last read)

    def line(self, a: int, b: int) -> None:
        """Read the line ``text[a:b]``."""
        line = self.text[a:b]
        before, self.wrapped = self.wrapped, ""
        if _FENCE.match(line):
            self.fenced = not self.fenced
        if self._structure(a, line) or self._imitated(a, b, line, before):
            return
        self.listing = self.listing and not line.strip()
        self.content = self.content or bool(line.strip())

    def end(self) -> list[Span]:
        """The spans, a section still open at the end dropped to it."""
        if self.section is not None:
            self.spans.append((self.section, len(self.text), "CF631", _SECTION))
        return self.spans

    def _close_section(self, a: int) -> None:
        if self.section is not None:
            self.spans.append((self.section, a, "CF631", _SECTION))
            self.section = None

    def _structure(self, a: int, line: str) -> bool:
        """Labels, request forms, headings and the sections they open: whether the line is read (a label, a heading,
        a line inside a section)."""
        told = self.told
        if label_of(line, told) is not None or _REPLY_START.match(line) is not None:
            self.listing = False
            self._close_section(a)
            return True
        section = self.section
        if section is not None and line.strip():  # (the section's example: the player's form after its colon)
            self.example = self.example or (self.intro and FORM_OPEN.match(line) is not None)
            self.intro = line.rstrip().endswith((":", "："))
        elif not line.strip():
            self.example = False  # (a blank line ends an example; what follows is the section's or a reply's)
        nested = section is not None and (self.item(line) or _ITEM_FORM.match(line) is not None or self.example)
        if FORM_START.match(line) and not _form_debris(line) and not nested and not _form_named(line, section):
            self.content = True  # the request form: the form reader's (the player's turn or the character's reply)
            self._close_section(a)  # ... which no section of the prompt's imitated runs over
        if told.sections and not self.fenced and HEADING.match(line) and not _REASONING_HEADING.match(line):
            if self.section is None:
                self.section, self.item.indent = a, None
            self.intro, self.example = line.rstrip().endswith((":", "：")), False
            return True
        return self.section is not None

    def _imitated(self, a: int, b: int, line: str, before: str) -> bool:
        """Whether the line is the prompt's, echoed, imitated or reworded (its span added)."""
        told, spans = self.told, self.spans
        # (a request form's own lines are the form reader's: the player's or the character's; the prompt's spec
        # echoed inside a form left open is still the prompt's)
        # (the items of a list the prompt's imitated go on being it, whatever their keys: ``- "anger": …`` then
        # ``- "disgust": …``; the fourth set's #27, #92)
        if (key := _list_key(line)) is not None and (self.listing or list_item_key(key) in told.keys):
            spans.append((a, b, "CF631", f"a list item of the prompt's imitated: {line.strip()[:40]!r} dropped"))
            self.listing = True
            return True
        if (field := FIELD_LINE.match(line)) is not None and field.group(1).casefold() in told.fields:
            # (``Scenario: Deckhand enters the harbor…`` for the prompt's ``Scenario: …``: the sixth set's #67)
            spans.append((a, b, "CF631", f"a field of the prompt's imitated: {line.strip()[:40]!r} dropped"))
            self.listing = True
            return True
        if told.tag_spec and TAG_SPEC.match(line):
            spans.append((a, b, "CF631", f"a line of the prompt's tag list imitated: {line.strip()[:40]!r} dropped"))
            self.listing = True
            return True
        if before and (n := normal(line)) and f"{before} {n}" in told.text and TAG_MARKUP.search(line) is None:
            # (a line of the prompt's wrapped over two lines, its end alone on the second: the eighth set's #94)
            spans.append((a, b, "CF631", f"the end of a line of the prompt's echoed: {line.strip()[:40]!r} dropped"))
            return True
        if _echoes(n := normal(line), told, last=b == len(self.text), retold=TAG_MARKUP.search(line) is None) and not (
            TAG_MARKUP.search(line) is not None and f"\n{n}\n" in f"\n{told.own}\n"
        ):  # (an element holding a line of the character's own, ``<act>`` of an action of the prompt's list: theirs;
            # the eighth set's #39)
            spans.append((a, b, "CF631", f"the prompt's own text echoed: {line.strip()[:40]!r} dropped"))
            self.echoed, self.listing = self.echoed or not self.content, True
            self.wrapped = n if n in told.text else ""
            return True
        if self.echoed and not self.content and (spec_like(line) or _opens_as_prompt(line, told)):
            spans.append((a, b, "CF631", f"the prompt continued: {line.strip()[:40]!r} dropped"))
            return True
        if self.echoed and not self.content and line.strip() and a >= self.asked:
            # (questions to the model after the prompt echoed, ``how would you respond to User's response?``: the
            # twelfth set's #92)
            self.asked, found = _asks_the_writer(self.text, a, told)
            if found:
                message = f"the prompt continued, asking the writer for the reply: {line.strip()[:40]!r} dropped"
                spans.append((a, self.asked, "CF631", message))
                self.skip = self.asked
                return True
        if not self.content and _reworded(line, told):
            # (``You are Tock, a fortune-teller… Speak to her and never describe her actions.``: the twelfth set's #97;
            # a quotation its colon introduces, ``…you say: "Ah, …"``, is the character's line: left to be read)
            said = _SAID.search(line)
            message = f"the prompt reworded, the character named in its words: {line.strip()[:40]!r} dropped"
            spans.append((a, a + said.end() if said else b, "CF631", message))
            self.echoed, self.listing, self.content = True, said is None, said is not None
            return True
        return False


_ITEM_FORM: Final = re.compile(rf"[ \t]*+[-*•][ \t]*+[<＜]\s*+(?:{FORM_WRAPPER}|chat)\b", re.I)
"""A list item holding a request form (``- <user_chat>What is…``): inside a section imitating the prompt, an item
of its list (the options of an imitated task), no form that ends the section (the twelfth set's #77)."""
_REPLY_WORDS: Final = (
    r"respon(?:d|se)|repl(?:y|ies)|answer|message|risposta|rispondere|r[ée]ponse|r[ée]pondre|respuesta|responder"
    r"|resposta|antwort(?:en)?|antwoord(?:en)?|ответ\w*|odpowied\w*|yanıt\w*|cevap\w*"
)


def _asks_the_writer(text: str, a: int, told: Told) -> tuple[int, bool]:
    """Where the run of lines of words from ``a`` (after the prompt echoed, nothing of the reply's read) ends, when a
    sentence of it speaks of the reply to the player by the prompt's name for them, in the third person (``how would
    you respond to User's response?``, ``answer User's message``, ``la risposta di Deckhand``): the prompt going on
    with questions to the writer, never the character's speech (who speaks to the player, not of them; the twelfth
    set's #92): the run's end and whether one does. The run ends before a label, a form, a heading or a JSON reply."""
    names = told.player_labels | told.player_names
    end = a
    for x, y in line_spans(text[a:]):
        line = text[a + x : a + y]
        starts = (_REPLY_START, FORM_START, HEADING)
        if line.strip() and (label_of(line, told) is not None or any(p.match(line) for p in starts)):
            break
        if line.strip():
            end = a + y
    if not names:
        return max(end, a + 1), False
    run = text[a:end]
    said = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    about = re.compile(
        rf"(?<![\w'’])(?:(?:{said})['’]s[ \t]+(?:\w+[ \t]+)?(?:{_REPLY_WORDS})"
        rf"|(?:{_REPLY_WORDS})[ \t]+(?:to|di|de|del|à|a|an|auf|op|на)[ \t]+(?:{said}))(?![\w'’])",
        re.I,
    )
    return max(end, a + 1), about.search(run) is not None


_SAID: Final = re.compile(r"[:：][ \t]*+(?=[\"“«„「])")
"""The colon that introduces a quotation: what the prompt reworded tells the character to say, said."""
_NAMED_WORDS: Final = 4
"""Words, the character's name last, from which a line that begins as a line of the prompt does is it reworded."""


def _reworded(line: str, told: Told) -> bool:
    """Whether ``line`` (no tag in it) begins as one of the prompt's lines does up to the character's own name, a
    word or more before it and a mark or its end after it (``You are Tock, a fortune-teller in a glass booth…`` for
    the prompt's ``You are Tock, a fortune-telling automaton…``; ``Sei Luca.``): the prompt told again in other
    words, the character named in the second person as the prompt names them. The character names others (``You are
    late, Deckhand.``) and tells of themself (``Tock is tired.``: no word before the name), never so."""
    names = told.names | (told.character_labels - GENERIC_CHARACTER)  # (``Kaspar:`` before the few-shot replies)
    if not names or TAG_MARKUP.search(line) is not None:
        return False
    n = normal(line)
    for name in names:
        m = re.search(rf"(?<![\w'’]){re.escape(name)}(?=[,.;:!?—–]|$)", n)
        if m is None or m.start() == 0:
            continue
        head = n[: m.start()].split()
        if len(head) >= _NAMED_WORDS or any(w.strip(",.") in names for w in head):
            continue
        if f"\n{n[: m.end()]}" in f"\n{told.text}":
            return True
    return False


class _Item:
    """The indentation of the last item of a list (``- when to say it:``, ``1) Put…:``) in a section imitating the
    prompt: a request form indented under it is that item's example (the section's: its chats are no one's turn,
    the character's least of all; the tenth set's #75 and #90), one at the item's indentation or less ends the
    section, as any form does. Called with each line of a section, in order: whether it is such a form."""

    __slots__ = ("indent",)

    def __init__(self) -> None:
        self.indent: int | None = None

    def __call__(self, line: str) -> bool:
        indent = len(line) - len(line.lstrip(" \t"))
        if FORM_START.match(line) is not None:
            return self.indent is not None and indent > self.indent
        if _SPEC_LINE.match(line.strip()) is not None:
            self.indent = indent
        return False


_FORM_WORD: Final = re.compile(r"[^\W\d_]{2}")


def _form_debris(line: str) -> bool:
    """Whether ``line`` is the request form's tags closed on their line around no word (``<user_chat>b</user_chat>
    <user_chat>e</user_chat>``, a letter each): a mangled item of a section imitating the prompt, no form that ends
    the section (found by the seventh set's #78)."""
    if "/" not in line:
        return False
    closed = [m for m in CHAT_ELEMENT.finditer(line) if m.group(1) is not None]
    return bool(closed) and _FORM_WORD.search(CHAT_ELEMENT.sub(" ", line)) is None


def _form_named(line: str, section: int | None) -> bool:
    """Whether ``line``, in a section imitating the prompt, names a tag of the form in words: the form's element
    closed on its line and words of a sentence right after its closer (``* <user_chat>token</user_chat> for the
    current user. This is…``), an item of the section's list, no form that ends the section (the eighth set's #94)."""
    if section is None or "/" not in line:
        return False
    closers = [m for m in CHAT_ELEMENT.finditer(line) if m.group(1) is not None]
    return bool(closers) and _FORM_WORD.search(line[closers[-1].end() :].split("<", 1)[0]) is not None


def _list_key(line: str) -> re.Match[str] | None:
    """The key of a list item (``LIST_KEY``) or of a numbered item quoted (``_NUMBERED_KEY``) ``line`` is."""
    return LIST_KEY.match(line) or _NUMBERED_KEY.match(line)


def _echoes(n: str, told: Told, *, last: bool, retold: bool = True) -> bool:
    """Whether ``n`` (a line as ``normal`` writes it) echoes the prompt: one of its lines, a part of one (cut,
    or run over two lines), a line begun as one of its lines begins, or nearly one (a word changed); with
    ``retold``, its sentences retold too (a line holding elements is none: the character's reply, its words
    the prompt's examples or actions perhaps; the eighth set's #79)."""
    if len(n) < MIN_LINE:
        return False
    if n in told.lines or (len(n) >= MIN_PART and n in told.text) or (last and _begins_a_line(n, told)):
        return True
    if len(n) >= SAME_START and n[:SAME_START] in told.starts:
        return True
    if introduces(told, n):  # (the persona told in the character's own voice, ``Ich bin Lukas, …``, is theirs)
        return False
    return (
        _retold(n, told)
        or (retold and _sentences_retold(n, told))
        or (len(n) >= NEARLY_FROM and bool(difflib.get_close_matches(n, told.long, n=1, cutoff=NEARLY)))
    )


_RETOLD_WORDS: Final = 3
"""Words at either end of a line that may be changed (translated, reworded) while the rest is the prompt's line."""


def _retold(n: str, told: Told) -> bool:
    """Whether ``n`` is a line of the prompt with a few words at its start or its end changed (``Du bist Lukas.
    Stay in character at all times.`` for ``You are Lukas. …``): what is left, ``MIN_PART`` characters or more
    and most of the line, is a part of the prompt's text."""
    found = n.split(" ")
    for k in range(1, min(_RETOLD_WORDS, len(found) - 1) + 1):
        for rest in (" ".join(found[k:]), " ".join(found[:-k])):
            if len(rest) >= MIN_PART and 3 * len(rest) >= 2 * len(n) and rest in told.text:
                return True
    return False


_RUN_WORDS: Final = 6
"""Words in a row of the prompt's text (``MIN_PART`` characters or more) from which a sentence retells it."""
SENTENCE: Final = re.compile(r"[^.!?。！？]+(?:[.!?。！？]+|$)")
"""A sentence with its end marks (the last one perhaps without)."""
_FIRST_PERSON: Final = re.compile(
    r"(?:^|[^\w'])(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|our|us|ich|mein|meine|mich|mir|je|j'|moi|mon|ma|mes"
    r"|io|mio|mia|ik|mijn|yo|mi|eu|meu|minha)(?![\w'])|私|僕|俺|わたし|我"
)
"""A sentence in the first person (English and a few languages): the character may tell their own persona."""


def _sentences_retold(n: str, told: Told) -> bool:
    """Whether most of ``n`` (two thirds of its characters) is sentences each holding a run of the prompt's words
    (``He is a mountain guide who has led walkers over the high passes…`` of the card's ``Oskar is a mountain guide
    from Tromsø who has led walkers…``): the prompt retold with words changed inside its lines, not only at their
    ends; a sentence in the first person is the character's own (found by the seventh set's #28)."""
    if len(n) < NEARLY_FROM:
        return False
    covered = 0
    for m in SENTENCE.finditer(n):
        if _FIRST_PERSON.search(m.group()) is not None or not _opened_as_told(m.group(), told):
            continue  # (the character telling who they are in the prompt's words: theirs)
        found = m.group().split()
        for k in range(len(found) - _RUN_WORDS + 1):
            run = " ".join(found[k : k + _RUN_WORDS])
            if len(run) >= MIN_PART and run in told.text and run not in told.own:
                covered += len(m.group())
                break
    return 3 * covered >= 2 * len(n)


def _opened_as_told(sentence: str, told: Told) -> bool:
    """Whether ``sentence`` opens as the prompt writes: one of its first two words (its subject and verb, mostly)
    is a word of the prompt's own lines. The prompt tells the persona in the second or third person and its own
    lines leave the character's replies out, so a sentence whose subject and verb the prompt never writes speaks in
    another voice, whatever its language (``Ik ben…`` for the prompt's ``Jij bent…``): the character's, not the
    prompt retold; ``He is…`` for ``Oskar is…`` keeps the prompt's verb (found by the eighth set's #79)."""
    return not (found := VOCAB_WORD.findall(sentence)[:2]) or any(w in told.vocab for w in found)


def spec_like(line: str) -> bool:
    """A line written as the prompt's spec is: a list item, a ``"key": value``, a line ending in a colon."""
    stripped = line.strip()
    return bool(stripped) and (_SPEC_LINE.match(stripped) is not None or stripped.endswith((":", "：")))


def _opens_as_prompt(line: str, told: Told) -> bool:
    """A line of four words or more whose first two are those of one of the prompt's lines (``You are 16, …``)."""
    found = normal(line).split()
    return len(found) >= OPENING_WORDS and " ".join(found[:2]) in told.openings


def _begins_a_line(n: str, told: Told) -> bool:
    """Whether ``n`` (the reply's last line, cut off there) is the beginning of one of the prompt's lines."""
    at = told.text.find(n)
    return at >= 0 and (at == 0 or told.text[at - 1] == "\n")


_SECTION: Final = "a section written after a heading, as the prompt's are: the prompt imitated, dropped"
