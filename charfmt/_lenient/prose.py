"""Untagged text: bracket tags, role-play marks and quoted speech in it, the rest speech or narration.

The marks are the ``prose`` entries of the dialect table, in its order (``BRACKET``,
``ROLEPLAY``: each entry's pattern, read by its reader here), then quoted speech, which
is no dialect of its own (plain text quotes too).
"""

from __future__ import annotations

import functools
import re
from typing import Final

from charfmt._grammar.lexical import decode_entities
from charfmt._lenient.debris import no_words
from charfmt._lenient.literals import drop_cut_entity
from charfmt._lenient.marks import CHAT_KEYS, CHATS_KEYS, FORM_ELEMENT, GENERIC_CHARACTER, GENERIC_PLAYER
from charfmt._lenient.pieces import Piece, Result
from charfmt._lenient.table import DialectRule, Dialects, Span, reader
from charfmt._lenient.words import LETTER_OR_DIGIT, in_running_text, key_alone, last_sentence_start, narrates_next
from charfmt.models import Vocabulary
from charfmt.tags import TagTable

BRACKET: Final = r"""
    \[\[?(?P<word>[^\[\]\n:：]++)(?:[:：](?P<val>[^\[\]\n]++))?\]\]?       # [joy] [emotion:angry] [[x:y]]
  | 【(?P<full>[^【】\n]+)】                                                # 【疑惑】
"""
"""Bracket tags (the ``bracket`` entry's pattern)."""
ROLEPLAY: Final = r"""
    \*\*\((?P<direction>[^)\n]+)\)\*\*                                     # **(stage direction)**
  | \*\*(?P<bold>[^*\s](?:[^*\n]*[^*\s])?)\*\*                              # **jumps**
  | \*(?P<star>[^*\s](?:[^*\n]*[^*\s])?)\*                                 # *jumps* (not "* " a bullet)
  | (?:^|(?<=\n))<!--(?P<comment>(?s:.*?))-->(?=[ \t]*(?:\n|\Z))        # <!-- an HTML comment --> on its own lines
  | (?:^|(?<=\n))<(?P<angle>[^<>/\s][^<>\n]*\s[^<>\n]*)>(?=[ \t]*(?:\n|\Z))   # <sighs deeply> on its own line
  | （(?P<paren>[^（）\n]+)）                                               # （动作）
  | (?:^|(?<=[.!?。！？\n]\s)|(?<=[.!?。！？\n]))\((?P<half>[^()\n]+)\)          # (sighs) at a sentence start
"""
"""Role-play marks (the ``roleplay`` entry's pattern)."""
_QUOTED: Final = r""""(?P<dq>[^"\n]+)"|「(?P<jq>[^「」]+)」|“(?P<cq>[^“”]+)”"""
"""Quoted speech: no dialect of its own (plain text quotes too), tried after the dialects' patterns."""
_QUOTES: Final = frozenset('"「“')
_MARKUP_CHARS: Final = re.compile(r"[<>&]")
"""Characters an emotion key cannot hold."""
_NUMBER: Final = re.compile(r"\s*[-+]?[0-9.]+\s*")

_CODE_AFTER: Final = re.compile(r"[ \t]*+\{")
"""What follows a bracket that makes it code: a brace (``[style1] {padding: 3px}``, a CSS selector; the fifth
set's #7)."""
_LIST_NUMBER: Final = re.compile(r"\s*+\d{1,3}\s*+")
"""A bracket holding a number alone (``[1]``): a list's number or a note's (found by the sixth set's #32)."""
Meaning = tuple[str, str, float | None]
"""What a mark reads as: its tag, its text, its intensity."""
_FORM_BRACKET: Final = re.compile(rf"[ \t]*+[/／]?[ \t]*+(?:{FORM_ELEMENT})[ \t]*+", re.I)
"""A bracket naming an element of the request form (``[user_chats]``, ``[/user_chats]``): its markup written in
brackets, no emotion (found in the eleventh set's #45 and #50, rows never in a sample)."""
_LABEL_ROLES: Final = sorted(
    {*GENERIC_PLAYER, *GENERIC_CHARACTER, "npc", "system", "narrator", "speaker", "gm", "dm"} - {"you", "a", "q"},
    key=len,
    reverse=True,
)
_ROLE_BRACKET: Final = re.compile(
    rf"[ \t]*+(?:{'|'.join(re.escape(r) for r in _LABEL_ROLES)})(?:[ \t_\-#]?+\d{{1,6}})?[ \t]*+", re.I
)
"""A bracket naming a role or a speaker of a transcript (``[User01]``, ``[Assistant]``, ``[Player 2]``, ``[NPC]``,
``[User 0001]``): a label, markup, no emotion (the vocabulary's keys and aliases aside; found by the fifteenth set's
#61, its number of up to six digits by the sixteenth's #47)."""
_MARKUP: Final = ""
"""The tag of a mark that is markup (its text the code to note): dropped with its diagnostic, never a piece."""


@functools.lru_cache(maxsize=8)
def _marks(table: Dialects) -> tuple[re.Pattern[str], dict[str, DialectRule]]:
    """The ``prose`` entries of ``table``, in table order, then quoted speech: one regex; and each named
    group of it with the entry whose pattern holds it."""
    entries = [entry for entry in table.chain("prose") if entry.pattern]
    prose = re.compile("|".join([*(f"(?:{entry.pattern})" for entry in entries), _QUOTED]), re.X)
    groups = {group: entry for entry in entries for group in re.compile(entry.pattern or "", re.X).groupindex}
    return prose, groups


def read_bracket(m: re.Match[str], span: Span) -> Meaning | None:
    """A bracket tag: ``[joy]`` an emotion (``[joy:0.8]`` with an intensity), ``[action:sigh]`` a tag's text."""
    vocabulary, tags = span.reading.vocabulary, span.reading.tags
    if m.lastgroup == "full":  # 【疑惑】
        value = decode_entities(m.group("full").strip())
        canon = (vocabulary.resolve(value) if vocabulary else None) or value
        if _MARKUP_CHARS.search(canon):
            return None  # 【露娜>w<】 names no emotion: it stays text
        return (tags.emotion.name, canon, None)
    if _stays_text(m, span):
        return None
    word = m.group("word")
    known = vocabulary is not None and vocabulary.resolve(word) is not None
    if m.group("val") is None and not known and _FORM_BRACKET.fullmatch(word):
        return (_MARKUP, "CF630", None)  # ('[/user_chats]': the request form's closer in brackets)
    if m.group("val") is None and not known and _ROLE_BRACKET.fullmatch(word):
        return (_MARKUP, "CF641", None)  # ('[User01]', '[Assistant]': a speaker's label, the fifteenth set's #61)
    meaning = _bracket(m.group("word"), m.group("val"), vocabulary, tags)
    if meaning is not None and meaning[0] == tags.emotion.name and (clamped := _out_of_range(m.group("val"))):
        span.out.note("CF930", clamped, span.offset + m.start(), span.offset + m.end())
    return meaning


def _stays_text(m: re.Match[str], span: Span) -> bool:
    """A bracket word inside running text that names no emotion of the vocabulary: text (``CF724``).

    ``I am [narcissus_a] a skilled pirate.`` is one sentence; ``[joy] Hi`` and a word the vocabulary
    knows anywhere are emotions, and so is any word written with a prefix (``[emotion:x]``).
    """
    word, val = m.group("word"), m.group("val")
    if val is not None and _bracket_number(val) is None:
        return False  # [emotion:angry], [action:sigh]: what the prefix says
    vocabulary = span.reading.vocabulary
    if vocabulary is not None and vocabulary.resolve(word) is not None:
        return False
    at = span.offset + m.start()
    if _LIST_NUMBER.fullmatch(word):  # '[1] First, you need…': a list's number or a note's, never an emotion
        span.out.note("CF724", f"{m.group()!r} is a number (a list's, a note's), no emotion: kept as text", at,
                      span.offset + m.end())  # fmt: skip
        return True
    if not in_running_text(span.text, m.start()) and _CODE_AFTER.match(span.text, m.end()) is None:
        return False
    span.out.note("CF724", f"{m.group()!r} inside a sentence names no emotion: kept as text", at, span.offset + m.end())
    return True


def read_roleplay(m: re.Match[str], span: Span) -> Meaning | None:
    """A role-play mark (``*jumps*``, ``(sighs)``): what the character does (the action tag; speech without one)."""
    tags = span.reading.tags
    narration = tags.action.name if tags.action is not None else tags.speech.name
    if m.lastgroup == "comment":  # ('<!-- a note -->': markup, never what the character does; the eleventh set's #48)
        return (_MARKUP, "CF651", None)
    return (narration, m.group(m.lastgroup or 0).strip(), None)


def _bracket(word: str, val: str | None, vocabulary: Vocabulary | None, tags: TagTable) -> Meaning | None:
    """A bracket tag's meaning: ``(tag, text, intensity)``, or ``None`` to keep it as text."""
    number = _bracket_intensity(val)
    lower = word.strip().lower()
    emotion = tags.emotion.name
    if val is not None and number is None and not _NUMBER.fullmatch(val):
        canon = tags.prefixes.get(lower) or tags.synonyms.get(lower)  # a prefix means what shorthand reads
        if canon is None:
            return None
        value = decode_entities(val.strip())
        if canon == emotion and vocabulary is not None:
            value = vocabulary.resolve(value) or value
        if canon == emotion and _MARKUP_CHARS.search(value):
            return None  # [emotion:a<b] names no emotion: it stays text
        return (canon, value, None)
    if vocabulary is not None:
        key = vocabulary.resolve(word)
        if key is not None:
            return (emotion, key, number)
    if lower in _ROLES:
        return None  # ('[User: 760]': a speaker's role and a number, no emotion; the eighth set's #59)
    if re.fullmatch(r"[^\s<>&]+", word.strip()):
        return (emotion, word.strip(), number)
    return None


_ROLES: Final = frozenset(r for r in GENERIC_PLAYER | GENERIC_CHARACTER if len(r) >= 2)
"""The role names of a transcript's turns (``user``, ``assistant``): a bracket naming one is a speaker's label."""


def _bracket_number(val: str | None) -> float | None:
    """A bracket tag's value as a number (``[joy:0.8]``), or ``None`` where it is none."""
    if val is None or not _NUMBER.fullmatch(val):
        return None
    try:
        return float(val)
    except ValueError:
        return None


def _bracket_intensity(val: str | None) -> float | None:
    """A bracket tag's intensity (documented 0–1): above 1 clamped to 1, below 0 dropped (see ``_out_of_range``)."""
    number = _bracket_number(val)
    return None if number is None or number < 0 else min(number, 1.0)


def _out_of_range(val: str | None) -> str | None:
    """What became of a bracket intensity outside 0–1 (``CF930``), or ``None`` where it is in range."""
    number = _bracket_number(val)
    if number is not None and number > 1:
        return f"intensity {(val or '').strip()} is outside 0–1: clamped to 1"
    if number is not None and number < 0:
        return f"intensity {(val or '').strip()} is outside 0–1: dropped, the emotion kept"
    return None


_OPEN_AT_END: Final = (
    (re.compile(r"\*\*\((?P<v>[^)\n]+)\Z"), ")**"),
    (re.compile(r"\*(?P<v>[^*\s][^*\n]*)\Z"), "*"),
    (re.compile(r'"(?P<v>[^"\n]+)\Z'), '"'),
    (re.compile(r"「(?P<v>[^「」]+)\Z"), "」"),
    (re.compile(r"“(?P<v>[^“”]+)\Z"), "”"),
    (re.compile(r"\((?P<v>[^()\n]+)\Z"), ")"),
    (re.compile(r"（(?P<v>[^（）\n]+)\Z"), "）"),
)
"""A role-play mark or a quotation the input ends inside (``*wav``, ``"Hel``), and its closer, not come yet."""
_CUT_MARK: Final = re.compile(
    r"""(?:\[\[?[^\[\]\n]{0,40}|【[^【】\n]{0,40}|(?:^|(?<=\s))(?:\*\*\(?|[*"“(])|[「（])\Z"""
)
"""A bracket tag the input ends inside (``[jo``, ``【疑``: half a key), or a lone opening mark: never text."""


def _prefixes(*keys: str) -> str:
    """A regex matching a start of any of ``keys`` (``c``, ``ch``, … ``chats``), longest first."""
    return "|".join(sorted({re.escape(k[:n]) for k in keys for n in range(1, len(k) + 1)}, key=len, reverse=True))


CUT_OBJECT: Final = re.compile(
    rf"""(?:^|(?<=\s))\{{[ \t]*+"(?:(?:{_prefixes(*CHATS_KEYS, *CHAT_KEYS)})(?:"[ \t]*+:?[ \t]*+\[?)?)?\Z""", re.I
)
"""A JSON reply the input ends inside its first key (``{"chats``, ``{"cha``, ``{"``): the start of a reply that never
came, markup, never text (found in the twelfth set's #90, a row never in a sample)."""


def _cut_prose(text: str, out: Result, offset: int, prose: re.Pattern[str]) -> tuple[str, str]:
    """``text`` ending where the input was cut: a bracket tag or a JSON reply's first key cut in half dropped, and
    the closer of a role-play mark or quotation left open at the very end (read as if it had come), each noted
    ``CF720``."""
    end = len(text.rstrip())
    if (m := CUT_OBJECT.search(text, 0, end) or _CUT_MARK.search(text, 0, end)) is not None:
        out.note("CF720", f"markup cut off at the end is dropped: {m.group()!r}", offset + m.start(), offset + end)
        return text[: m.start()], ""
    found = [(m, closer) for pattern, closer in _OPEN_AT_END if (m := pattern.search(text, 0, end)) is not None]
    for m, closer in sorted(found, key=lambda f: -f[0].start()):  # the mark opened last is the one left open
        scan = text[:end] + closer
        last = None
        for mark in prose.finditer(scan):  # read from the start: a closing quote opens nothing
            last = mark
        if last is not None and last.start() == m.start() and last.end() == len(scan):
            message = f"{m.group()[:1]!r} left open at the end of the input: read as closed"
            out.note("CF720", message, offset + m.start(), offset + end)
            return text[:end], closer
    return text, ""


Mark = tuple[int, int, str, str, float | None]
"""A mark found in prose: its span, tag, text and intensity."""


def read_prose(span: Span) -> int:
    """Read untagged text: bracket tags, starred or parenthesised actions, quoted speech, the rest speech.

    The marks are the ``prose`` entries of the dialect table, in its order. Once quoted
    speech has appeared, unquoted narration after it is read as action (the table's action
    tag; speech when the table has none), and so is the sentence right before the first
    quote where it ends there (``She smiles. "Hi!"``) or introduces it (``The old man says
    "Welcome."``). Other text before the first quote stays speech. A stream shows the last
    sentence of such text only once what follows it is known, so a later quote never turns
    text already shown as speech into an action.
    """
    text, out, offset = span.text, span.out, span.offset
    prose, groups = _marks(span.reading.table)
    text = _without_json_lines(text, out, offset)
    closer = ""
    if span.cut_off:
        text = drop_cut_entity(text, out, offset)
        text, closer = _cut_prose(text, out, offset, prose)
    scan = text + closer if closer else text
    marks: list[Mark] = []
    quoted = False
    speech = span.reading.tags.speech.name
    past = 0  # where a quotation holding a quotation of its own ends: the marks inside it are its words
    for m in prose.finditer(scan):
        if m.start() < past:
            continue
        entry = groups.get(m.lastgroup or "")
        if entry is None:  # quoted speech
            end, inner = _nested_end(scan, m), m.group(m.lastgroup or 0)
            if end is not None:  # ('"…use the "A to D" format, …"': one quotation, the inner one its words)
                inner, past = scan[m.start() + 1 : end - 1], end
            if _in_sentence(scan, m, inner, end) or _json_string(scan, m) or _in_code(scan, m):
                continue  # 'The word "hello" means hi.': a quotation inside a sentence is the sentence's
            quoted = True
            marks.append((m.start(), end or m.end(), speech, decode_entities(inner), None))
            continue
        meaning = reader(entry, "prose")(m, span)
        if meaning is not None:
            marks.append((m.start(), m.end(), *meaning))
            out.dialect(entry.name)
    alone = _keys_alone(span, text, marks)
    if alone:
        marks = sorted([*marks, *alone])
    _read_marks(span, text, marks, quoted=quoted, alone={a[0] for a in alone})
    return len(span.text)


_LINE: Final = re.compile(r"[^\n]+")


def _keys_alone(span: Span, text: str, marks: list[Mark]) -> list[Mark]:
    """Lines of ``text`` that are nothing but an emotion key of the vocabulary (``furious``): emotions (``CF723``)."""
    vocabulary = span.reading.vocabulary
    if vocabulary is None:
        return []
    found: list[Mark] = []
    for m in _LINE.finditer(text):
        key = key_alone(m.group(), vocabulary)
        if key is None or any(a < m.end() and m.start() < b for a, b, *_ in marks):
            continue
        lead = len(m.group()) - len(m.group().lstrip())
        found.append((m.start() + lead, m.start() + len(m.group().rstrip()), span.reading.tags.emotion.name, key, None))
    return found


def _narration_start(before: str) -> int | None:
    """Where the text before the first quotation starts to narrate it, or ``None`` where it does not.

    Its last sentence does when it ends right before the quotation (``She smiles. "Hi!"``; not
    with ``!`` or ``?``, which end speech) or introduces it (``The old man says "Welcome."``,
    ``I would say: "Go!"``): ``words.narrates_next``. The sentences before it stay speech.
    """
    stripped = before.rstrip()
    if not stripped or not narrates_next(stripped):
        return None
    return last_sentence_start(stripped)


_PLAYER_SAYS: Final = re.compile(
    r"(?i)^\s*+(?:the[ \t]++)?(?:user|player|human)\b[^.!?\"\n]{0,40}?\b(?:says|said|asks|asked|writes|wrote|"
    r"replies|replied|types|typed|answers|answered)\b"
)
"""The words that introduce a quotation as the player's (``The user of the chat asks``): the player said it."""


def _read_marks(span: Span, text: str, marks: list[Mark], *, quoted: bool, alone: set[int]) -> None:
    """The marks as pieces, and the plain text around them as speech or (around quoted speech) narration."""
    out, offset, tags = span.out, span.offset, span.reading.tags
    speech = tags.speech.name
    narration = tags.action.name if tags.action is not None else speech
    pos = 0
    seen = False  # a quoted line came before: plain text from here on is narration
    for start, stop, tag, value, intensity in marks:
        quote = quoted and tag == speech and text[start] in _QUOTES
        # A sentence ended just before the first quote narrates it, and so do the words that introduce
        # it ('The old man says "Welcome."'); 'He paid "a lot" for it' is one sentence.
        before = text[pos:start]
        end = min(stop, len(text))  # a closer read as if it had come (cut_off) is not in the text
        k = None if seen or not quote else _narration_start(before)
        if k is not None and _PLAYER_SAYS.search(before[k:]) is not None:
            # ('The user of the chat asks "…"': the quotation is the player's, never the character's speech;
            # found by the fifth set's #27)
            _plain(before[:k], offset + pos, speech, span)
            message = f"a quotation the text gives the player is theirs: {before[k:].strip()[:40]!r} … dropped"
            out.note("CF625", message, offset + pos + k + len(before[k:]) - len(before[k:].lstrip()), offset + end)
            seen, pos = True, end
            continue
        if seen:
            _plain(before, offset + pos, narration, span)
        else:
            k = len(before) if k is None else k
            _plain(before[:k], offset + pos, speech, span)
            _plain(before[k:], offset + pos + k, narration, span)
        if tag == _MARKUP:
            message = f"{text[start:end][:40]!r} is markup, no one's words: dropped"
            out.note(value, message, offset + start, offset + end)
        elif quote and no_words(value, tags, span.reading.vocabulary):  # ('"type":"C"' quoted out of step: '":"')
            message = f"a quotation of the format's syntax, no words, dropped: {text[start:end][:40]!r}"
            out.note("CF627", message, offset + start, offset + end)
        else:
            out.pieces.append(Piece(tag, value, offset + start, offset + end, intensity))
        if quote:
            seen = True
        elif tag == _MARKUP:
            pass
        elif start in alone:
            message = f"{text[start:end]!r} alone on its line is the emotion {value!r}, not speech"
            out.note("CF723", message, offset + start, offset + end)
        else:
            out.note("CF713", f"{text[start:end]!r} read as <{tag}>", offset + start, offset + end)
        pos = end
    _plain(text[pos:], offset + pos, narration if seen else speech, span)


_SPOKEN_END: Final = re.compile(r"[.,!?…。、！？~〜—\-]\s*\Z")
_BOUNDARY_BEFORE: Final = re.compile(r"(?:\A|[.!?…。！？:：*）)」”\n])\s*\Z")
_BOUNDARY_AFTER: Final = re.compile(r"\s*(?:[*（(「“\n]|[A-Z]|[^\x00-\x7f])")


_NESTED: Final = re.compile(r'(?<=[^\W_][ \t])"[^\s"][^"\n]{0,58}?(?<=\S)"(?=[,;:]?[ \t]++[^\W_])')
"""A quotation inside a quoted line, words of its sentence on both sides (``…use the "A to D" format, …``)."""


def _nested_end(text: str, m: re.Match[str]) -> int | None:
    """Where a straight-quoted line ``m`` ends when the quote that would close it opens a quotation of its own
    inside its sentence instead (``"You can't use the "A to D" format, you have to…"``: a word and a space before
    it, a word after it; its closer followed by a word of the same sentence): at the next quote on the line after
    that quotation, or ``None``. The inner quotation is the line's words quoting someone (the player, a sign), never
    a line of its own: read apart, it splits her sentence around it (found by the twelfth set's #17)."""
    if m.lastgroup != "dq" or (inner := _NESTED.match(text, m.end() - 1)) is None:
        return None
    close = text.find('"', inner.end())
    return close + 1 if close >= 0 and "\n" not in text[inner.end() : close] else None


def _in_sentence(text: str, m: re.Match[str], quoted: str, end: int | None = None) -> bool:
    """A quotation inside a sentence (``The word "hello" means hi.``), not a line of dialogue.

    Dialogue ends in punctuation (``"Hello there," she said.``) or touches a boundary: it
    follows the start, a sentence's end, a colon or a mark, or it comes before the end, a
    mark or a new sentence (``He said "hi" *waves*``). Words on both sides: inside a sentence.
    The end of the text is no boundary after it: a stream cut there reads it as the whole does.
    """
    if _SPOKEN_END.search(quoted):
        return False
    before = _BOUNDARY_BEFORE.search(text, max(0, m.start() - 8), m.start()) is not None
    after = _BOUNDARY_AFTER.match(text, m.end() if end is None else end) is not None
    return not (before or after)


_QUOTATION: Final = re.compile(_QUOTED)


def dialogue_decided(text: str) -> bool:
    """Whether ``text`` holds a quotation read as dialogue whatever comes after it (``read_prose``'s rule).

    From then on unquoted text is narration: a later quotation changes nothing before it. A
    quotation that ends the text so far may yet turn out to be inside a sentence (or not),
    so it decides only once two characters follow it.
    """
    for m in _QUOTATION.finditer(text):
        inner = m.group(m.lastgroup or 0)
        if len(text[m.end() :].strip()) < 2 and not _SPOKEN_END.search(inner):
            continue
        if not _in_sentence(text, m, inner) and not _json_string(text, m) and not _in_code(text, m):
            return True
    return False


_JSON_DEBRIS: Final = re.compile(r"[\s\"',:]*[{}\[\]][\s{}\[\]\"',:]*")
"""Nothing but JSON punctuation with a bracket in it (``"}]}`` after an element): the end of a
JSON reply the model wrote around bare elements, never words anyone says."""


JSON_LINE: Final = re.compile(r"^[ \t]*+\{[^\n]*[\"':][^\n]*\}[ \t]*+$", re.M)
"""A line that is a JSON object (``{"chat type="C" 1"}``) among text: no reply (none was found), no words."""


def _without_json_lines(text: str, out: Result, offset: int) -> str:
    """``text`` with its JSON-object lines blanked (offsets stay put), each dropped (``CF627``)."""
    if "{" not in text:
        return text
    for m in JSON_LINE.finditer(text):
        lead = len(m.group()) - len(m.group().lstrip())
        at = offset + m.start() + lead
        out.note("CF627", f"a JSON object among the text dropped: {m.group().strip()[:40]!r}", at, offset + m.end())
    return JSON_LINE.sub(lambda m: " " * len(m.group()), text)


_BLANKED: Final = re.compile(r"[ \t]*\n(?:[ \t]*\n)+[ \t]*|[ \t]{4,}")
"""Blank lines in a row, or a run of spaces: where dropped text was blanked (offsets kept), or layout."""


def _closed_up(m: re.Match[str]) -> str:
    """A run of blank lines as one paragraph break, a run of spaces as one space."""
    return "\n\n" if "\n" in m.group() else " "


DEBRIS_BEFORE: Final = re.compile(r"[\"']?[}\]][\s\"'}\]{\[,:]*")
"""JSON punctuation that closes something (``"}]}``) at the start of a text: the end of a JSON reply, no words."""
DEBRIS_AFTER: Final = re.compile(r"[\"']\s*[}\]][\s\"'}\],]*\Z")
"""The same at the end of an element's text (``…last long."}]}``)."""
_QUOTES_ONLY: Final = re.compile(r"(?![\s\S]*\.\.\.)[\"'“”„`,:;./|\\\s]+")
"""Nothing but quotes, separators and full stops (``"`` left after ``</thought>``, ``.`` after ``</msg>``): a JSON
string's or a sentence's end, no words (an ellipsis, ``...``, may be what the character says); a ``/`` or ``|`` left
between markers dropped (``<<SYS>> / [USER]``, the fourth set's #57); a backtick, a code span's mark, left alone after
a closer (after ``</bee>``: the tenth set's #0)."""
_ATTRIBUTE_END: Final = re.compile(r"[\"'“”][\s\"'“”]*/?>")
"""A quoted value's end and a tag's ``>`` left alone (``">`` before ``</emo>``, an attribute's end cut from its tag):
markup debris, no words (found by the eighth set's #54)."""
_ESCAPES_ONLY: Final = re.compile(r"(?:\\{1,2}[nrt]|\s)*\\{1,2}[nrt](?:\\{1,2}[nrt]|\s)*")
"""Escapes written literally (``\\n``, two characters) and nothing else between elements: a JSON body's separators
left as text, layout, never words (the eighth set's #99)."""
_LIST_MARKS: Final = re.compile(r"[*\-+•>#][*\-+•>#\s\"'{}\[\],:]*")
"""Nothing but the marks of a Markdown list item, quote or heading (``*`` before ``**bold**``): layout, no words."""

_JSON_KEY_BEFORE: Final = re.compile(r"\"[ \t]*:[ \t]*\Z")
_JSON_COLON_AFTER: Final = re.compile(r"[ \t]*:")


_CODE_BEFORE: Final = re.compile(r"(?:[=(\[+]|\breturn|\byield|\bprint)[ \t]*+[fFrRbBuU]{0,2}\Z|\"\"\Z")
"""What stands before a string of code on its line (its prefix, ``f``, after it): an assignment, a call's
parenthesis, ``return``, or the first two quotes of a docstring (``\"\"\"Return my mood.\"\"\"``)."""


def _in_code(text: str, m: re.Match[str]) -> bool:
    """A string of code (``mood = "calm"``, ``print("hi")``, ``return "joy"``, a docstring), not a line said: the
    code stays one text, never speech and narration cut apart (found by the first corpus's #36, #47: Python written
    as the reply, its docstrings and strings spoken between its code read as actions)."""
    line_start = text.rfind("\n", 0, m.start()) + 1
    return _CODE_BEFORE.search(text, line_start, m.start()) is not None


_SPEC_KEYS: Final = frozenset({*CHAT_KEYS, CHATS_KEYS[0]})
"""The format's own JSON keys: quoted alone in prose they name the key, never a line said."""


def _json_string(text: str, m: re.Match[str]) -> bool:
    """A JSON key or value written in prose (``- "type": "C", "body": "..."``, a format spec echoed), not dialogue.

    A key is followed by a colon; a value follows a quoted key and its colon. The text
    stays text (kept whole, read as the text around it), never speech and narration cut apart.
    """
    if m.group()[:1] != '"':
        return False
    if m.group()[1:-1].strip().casefold() in _SPEC_KEYS:  # '1. "type" -> 3': the spec's key named (fourth set #32)
        return True
    return (
        _JSON_KEY_BEFORE.search(text, max(0, m.start() - 8), m.start()) is not None
        or _JSON_COLON_AFTER.match(text, m.end()) is not None
    )


_RULE_LINE: Final = re.compile(r"^[ \t]*+#{0,6}[ \t]*+(?:[=\-*_~][ \t]*+){3,}$", re.M)
"""A Markdown rule line (``#=====``, ``----``, ``* * *``) among text: layout, never words (the fourth set's #57)."""


_DRAWN: Final = re.compile(r"[|+\u2500-\u257f]")
"""A mark a table or a box is drawn with (a pipe, a plus, a box-drawing character)."""
_SENTENCE_MARK: Final = re.compile(r"[.?!…。？！¿¡]")


def _drawn_blocks(chunk: str) -> list[tuple[int, int]]:
    """The blocks of lines of ``chunk`` that draw a table or a box with no words in it: runs of lines, each with no
    letter or digit and no sentence's mark (``...``), two of them or more drawn with pipes, pluses or box-drawing
    characters (``|---|  |``); a stray line of marks among them (``* @$``) goes with them. A run beside a table row
    with words (``| tea | 2 |``: a menu's, a price list's) is that table's: kept (the sixteenth set's #47)."""
    blocks: list[tuple[int, int]] = []
    run: list[tuple[int, int]] = []
    pos, row_before = 0, False
    for line in [*chunk.split("\n"), ""]:  # (the empty line after the last closes the last run)
        a, b = pos, pos + len(line)
        pos = b + 1
        if line.strip() and LETTER_OR_DIGIT.search(line) is None and _SENTENCE_MARK.search(line) is None:
            run.append((a, b))
            continue
        row = _DRAWN.search(line) is not None  # (a table row with words, or no line: the run beside it is its table)
        if sum(_DRAWN.search(chunk, x, y) is not None for x, y in run) >= 2 and not row and not row_before:
            blocks.append((run[0][0], run[-1][1]))
        run, row_before = [], row
    return blocks


def _without_rules(chunk: str, offset: int, out: Result) -> str:
    """``chunk`` with its rule lines and the tables and boxes drawn with no words in them (``_drawn_blocks``) blanked
    (offsets stay put), each dropped (``CF627``)."""
    if _DRAWN.search(chunk) is not None:
        for a, b in _drawn_blocks(chunk):
            lead = len(chunk[a:b]) - len(chunk[a:b].lstrip())
            out.note("CF627", "a table or a box drawn with no words in it dropped", offset + a + lead, offset + b)
            chunk = chunk[:a] + re.sub(r"[^\n]", " ", chunk[a:b]) + chunk[b:]
    if _RULE_LINE.search(chunk) is None:
        return chunk
    for m in _RULE_LINE.finditer(chunk):
        lead = len(m.group()) - len(m.group().lstrip())
        out.note("CF627", f"a rule line outside an element dropped: {m.group().strip()[:20]!r}",
                 offset + m.start() + lead, offset + m.end())  # fmt: skip
    return _RULE_LINE.sub(lambda m: " " * len(m.group()), chunk)


_TEMPLATE: Final = re.compile(
    r"^[ \t]*+(?:\"{3}|'{3}"  # a template's triple quote, or its placeholder, alone on its line
    r"|\[[ \t]*+(?:(?:insert|enter|type|write|add)[ \t]++(?:your[ \t]++|the[ \t]++|a[ \t]++)?[^\]\[\n]{1,30}?"
    r"|your[ \t]++(?:response|answer|reply|message|text|name|words|turn)(?:[ \t]++here)?)[ \t]*+\])[ \t]*+$",
    re.M | re.I,
)
"""What a template leaves for its user to fill in (``[Your response]``, ``[your reply here]``, ``[insert name]``) and
its triple quotes, each alone on its line: the template's, never the character's words (a placeholder inside a
sentence, ``Dear [insert name],``, stays the sentence's text, ``CF724``)."""
_STRAY_STAR: Final = re.compile(r"\A[ \t]*+\*[ \t]*+(?=\n)")
"""An asterisk left alone at the head of the text after an asterisk action (``*…**`` / ``text``)."""


def _without_template(chunk: str, offset: int, span: Span) -> str:
    """``chunk`` with a template's placeholders and triple quotes blanked (``CF628``, ``CF627``), and the second
    asterisk of ``*…**`` left at its head (``CF627``); offsets stay put. Found by the thirteenth set's #24. A
    bracket of the character's (``[sighs]``, an emotion's key) is none of them."""
    out, at = span.out, offset - span.offset
    if (m := _STRAY_STAR.match(chunk)) is not None and at > 0 and span.text[at - 1 : at] == "*":
        out.note("CF627", "the second '*' of an asterisk action's '**' closer dropped", offset + m.end() - 1,
                 offset + m.end())  # fmt: skip
        chunk = " " * m.end() + chunk[m.end() :]
    if "[" not in chunk and '"""' not in chunk and "'''" not in chunk:
        return chunk
    for m in _TEMPLATE.finditer(chunk):
        lead = len(m.group()) - len(m.group().lstrip())
        shown = m.group().strip()
        if shown.startswith("["):
            out.note("CF628", f"a template's placeholder {shown[:40]!r} dropped", offset + m.start() + lead,
                     offset + m.end())  # fmt: skip
        else:
            out.note("CF627", f"a template's {shown!r} line dropped", offset + m.start() + lead, offset + m.end())
    return _TEMPLATE.sub(lambda m: " " * len(m.group()), chunk)


_ANGLES_ONLY: Final = re.compile(r"""[\s/\\{}\[\]"',:;=|]*+[<>＜＞][\s<>＜＞/\\{}\[\]"',:;=|]*+""")
"""Text (its entities decoded: ``&lt;``) that is a tag's brackets and the format's punctuation, no letter or digit:
markup's debris, no one's words."""


def _plain(chunk: str, offset: int, tag: str, span: Span) -> None:
    out, speech = span.out, span.reading.tags.speech.name
    chunk = _without_template(_without_rules(chunk, offset, out), offset, span)
    stripped = chunk.strip()
    if not stripped:
        return
    lead = len(chunk) - len(chunk.lstrip())
    start, end = offset + lead, offset + lead + len(stripped)
    if _JSON_DEBRIS.fullmatch(stripped) or _QUOTES_ONLY.fullmatch(stripped):
        out.note("CF627", f"JSON punctuation outside an element dropped: {stripped!r}", start, end)
        return
    if _ATTRIBUTE_END.fullmatch(stripped):
        out.note("CF627", f"the end of a tag's attribute outside an element dropped: {stripped!r}", start, end)
        return
    if _LIST_MARKS.fullmatch(stripped):
        out.note("CF627", f"a list or quote mark outside an element dropped: {stripped!r}", start, end)
        return
    if (debris := DEBRIS_BEFORE.match(stripped)) is not None:  # '"}]} and then': a JSON reply's end, glued on
        out.note(
            "CF627", f"JSON punctuation outside an element dropped: {debris.group()!r}", start, start + debris.end()
        )
        stripped, start = stripped[debris.end() :], start + debris.end()
    if _ANGLES_ONLY.fullmatch(decode_entities(stripped)):  # ('&lt;' a body alone: the fourteenth set's #12)
        out.note("CF627", f"a tag's brackets outside an element, no words, dropped: {stripped[:40]!r}", start, end)
        return
    if _ESCAPES_ONLY.fullmatch(stripped):  # '"}\n\n\\n': a body's literal separator after its end (eighth #99)
        out.note("CF711", "a literal \\n between elements read as a newline", start, end)
        return
    if no_words(stripped, span.reading.tags, span.reading.vocabulary):  # ('- "id": "chat",', '#f': the eleventh set)
        shown = " ".join(stripped.split())[:40]
        out.note("CF627", f"the format's syntax outside an element, no words, dropped: {shown!r}", start, end)
        return
    out.pieces.append(Piece(tag, decode_entities(_BLANKED.sub(_closed_up, stripped)), start, end))
    reason = (
        "text outside an element read as speech" if tag == speech else "narration around quoted speech read as action"
    )
    out.note("CF706", reason, start, end)
