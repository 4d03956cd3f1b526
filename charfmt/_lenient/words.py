"""What a run of words is, where the readers must judge it: a sentence, a vocabulary key alone, running text.

Shared by the lenient readers and the stream (which holds what the batch reader would read
otherwise), so that both judge a text by the same rule.
"""

from __future__ import annotations

import re
from typing import Final

from charfmt.models import Vocabulary
from charfmt.vocabulary import apply_vocabulary

_SENTENCE_END: Final = re.compile(r"[.!?…。！？][\"'”」』)）]*\Z")
_CJK_PUNCTUATION: Final = re.compile(r"[。！？、，]")
_CJK: Final = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_SENTENCE_WORDS: Final = 4
"""Words from which a text is a sentence whatever ends it (no emotion key is that long)."""
_CJK_SENTENCE: Final = 10
"""Characters of CJK text without spaces from which it is a sentence, not a word."""


def is_sentence(text: str) -> bool:
    """Whether ``text`` reads as a sentence, never as a key (an emotion, a cue value).

    Four words or more; two or more ending in sentence punctuation (``I will go.``); CJK
    text holding sentence punctuation, or ten characters without a space. ``slightly happy``,
    ``joy``, ``嬉しい`` and ``Worried!`` are keys, however odd.
    """
    stripped = text.strip()
    words = stripped.split()
    if len(words) >= _SENTENCE_WORDS:
        return True
    if len(words) >= 2 and _SENTENCE_END.search(stripped):
        return True
    if _CJK.search(stripped):
        return (len(stripped) >= 4 and _CJK_PUNCTUATION.search(stripped) is not None) or (
            len(stripped) >= _CJK_SENTENCE and len(words) == 1
        )
    return False


LETTER: Final = re.compile(r"[^\W\d_]")
"""A letter of any script (no digit, no underscore): where text holds none, it holds no word."""
LETTER_OR_DIGIT: Final = re.compile(r"[^\W_]")
"""A letter or a digit of any script."""


def unknown_sentence(text: str, vocabulary: Vocabulary | None) -> bool:
    """Whether ``text``, written as an emotion, is a sentence the vocabulary rejects: words, never an expression.

    Only what strict reading rejects (``CF301``): without a vocabulary, or under a policy that
    maps or keeps unknown keys, a key is what the policy makes of it, as a valid reply reads it.
    """
    return vocabulary is not None and is_sentence(text) and apply_vocabulary(text, vocabulary).code == "CF301"


_KEY_LINE_TRIM: Final = ".:"


def key_alone(line: str, vocabulary: Vocabulary | None) -> str | None:
    """The vocabulary's key when ``line`` is nothing but one of its keys or aliases (``furious``, ``Happy.``).

    An emotion word alone on its line is the emotion the model meant, not words to say.
    """
    if vocabulary is None:
        return None
    word = line.strip().rstrip(_KEY_LINE_TRIM).strip()
    if not word or len(word.split()) > 2:
        return None
    return vocabulary.resolve(word)


_RUNNING_BEFORE: Final = re.compile(r"[^\s.!?…。！？*)）」』”\]】]\s*\Z")
"""Text before a bracket that leaves it inside a sentence: a word (or a comma) right before it on its line."""
_ABBREVIATION: Final = re.compile(
    r"(?i)(?<![^\W\d_])(?:e\.g|i\.e|etc|cf|vs|viz|approx|ca|p\.\s?ex|z\.\s?B|bzw|usw|d\.\s?h|c\.-à-d)\.\s*\Z"
)
"""An abbreviation's full stop before a bracket (``e.g.``, ``i.e.``, ``z. B.``): no sentence's end."""
_SUBSCRIPT: Final = re.compile(r"\w(?:\[[^\[\]\n]*+\])++\Z")
"""Text before a bracket that makes it a subscript of code (``data[i]`` before ``[1]``): inside the line's text."""


def in_running_text(text: str, start: int) -> bool:
    """Whether ``text[start]`` (a bracket) stands inside a sentence: words before it on its line, no sentence end.

    Judged from what comes before it only, as a stream reads it: ``I am [narcissus_a] a pirate``
    and ``actions: [None]`` are, ``[joy] Hi``, ``Hello! [joy] Nice`` and ``*sighs* [sad]`` are not.
    """
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start]
    if not before.strip():
        return False
    # (found by the third set's #7: ``data[i][1]`` in code, its ``[1]`` read as an emotion)
    # (``e.g. [style1]``: an abbreviation's full stop ends no sentence; found by the fifth set's #7)
    return any(p.search(before) is not None for p in (_RUNNING_BEFORE, _SUBSCRIPT, _ABBREVIATION))


_CLOSERS: Final = "\"'”’)）」』】"
"""What may follow a sentence's last mark and still belong to it: a closing quote or bracket."""
_SAID_END: Final = r"(?:[!?！？…‥]|\.\.)[.!?！？…‥。]*+"
"""The marks that end speech, never narration: a question, an exclamation, a sentence trailing off."""
_HEARER: Final = (
    # Japanese: the sentence-final particles and the polite forms, said to a hearer
    r"ね|よ|わ|ぞ|ぜ|かな|かしら|っけ|です|ます|ました|でした|ません|ましょう|ください|でしょう"
    # Chinese: the modal particles
    r"|吧|呢|吗|嘛|啊|呀|啦|哦|哇|呗|咯|喔|噢|嘞"
    # Korean: the polite and formal endings
    r"|요|죠|니다|니까"
)
"""Sentence endings that mark a hearer, in the languages that mark one there (never in narration)."""
_SENTENCE_BOUNDARY: Final = re.compile(rf"{_SAID_END}[{_CLOSERS}]*+|[.]++[{_CLOSERS}]*+(?=\s)|[。．]++[{_CLOSERS}]*+")
"""Where a sentence ends and another may begin: after the marks of speech (``!?…``) and a CJK full stop
wherever they stand, after a full stop before a space (not ``3.5`` or ``e.g.x``)."""


def last_sentence_start(text: str) -> int:
    """Where the last sentence of ``text`` begins (0 where it holds one): after the last sentence end that more
    words follow. A sentence that ends ``text`` is its last one still: what follows may make it narration."""
    end = len(text.rstrip())
    start = 0
    for m in _SENTENCE_BOUNDARY.finditer(text, 0, end):
        if m.end() < end:
            start = m.end()
    while start < end and text[start].isspace():
        start += 1
    return start


_INTRODUCES: Final = re.compile(
    r"(?:\b(?:say|says|said|ask|asks|asked|reply|replies|replied|answer|answers|answered|whisper|whispers|"
    r"whispered|shout|shouts|shouted|mutter|mutters|muttered|call|calls|called|add|adds|added|exclaim|exclaims|"
    r"exclaimed|cry|cries|cried|yell|yells|yelled|murmur|murmurs|murmured|growl|growls|growled|grumble|"
    r"grumbles|grumbled|laugh|laughs|laughed|sigh|sighs|sighed|goes|went)(?:[ \t]+[A-Za-z']+){0,2})"
    r"[ \t]*[,:：]?[ \t]*\Z",
    re.IGNORECASE,
)
"""The words that introduce a quotation: a verb of saying, up to two words after it, a comma or a colon."""
_NARRATION_END: Final = re.compile(rf"[.。．][{_CLOSERS}]*+\Z")
"""A sentence ended with a full stop may narrate a quotation that follows (``She smiles. "Hi!"``)."""
_SAID_TO_SOMEONE: Final = re.compile(rf"(?:{_SAID_END}|(?:{_HEARER})[。．.!?！？…]++)[{_CLOSERS}]*+\Z")


def said_to_someone(text: str) -> bool:
    """Whether the last sentence of ``text`` is complete and says it is said to someone: speech, whatever follows.

    It ends with a question, an exclamation or a trailing off (``!?…``, ``...``), or, where a
    language marks a hearer in the sentence's ending, with that ending and its full stop (the
    Japanese ``ね``, ``よ``, ``です``, ``ます``; the Chinese ``吧``, ``呢``, ``吗``; the Korean ``요``,
    ``니다``). Narration says nothing to anyone; its sentences end otherwise.
    """
    return _SAID_TO_SOMEONE.search(text.rstrip()) is not None


def narrates_next(text: str) -> bool:
    """Whether the last sentence of ``text`` narrates a quotation that would come right after it.

    It does when it ends with a full stop (``She smiles.``, ``ミオは微笑んだ。``) or introduces one:
    a verb of saying and up to two words after it (``The old man says``, ``I would say:``); never
    when it is said to someone (``said_to_someone``: ``Come in!``, ``すごいね。``, ``裂开…``).
    ``My answer is:`` is speech.
    """
    stripped = text.rstrip()
    if said_to_someone(stripped):
        return False
    return _NARRATION_END.search(stripped) is not None or _INTRODUCES.search(stripped) is not None


def speech_whatever_follows(text: str) -> int:
    """How much of ``text``, untagged speech so far, stays speech whatever follows it (a stream shows that much).

    All of it where its last sentence is said to someone (``said_to_someone``); else all but its
    last sentence, which a quotation coming next would make narration (``narrates_next``): the
    sentence before it stays speech, since the marks that end a sentence end it wherever more
    words follow (``last_sentence_start``).
    """
    start = last_sentence_start(text)
    return len(text) if said_to_someone(text[start:]) else start
