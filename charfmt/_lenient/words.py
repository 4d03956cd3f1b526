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


def in_running_text(text: str, start: int) -> bool:
    """Whether ``text[start]`` (a bracket) stands inside a sentence: words before it on its line, no sentence end.

    Judged from what comes before it only, as a stream reads it: ``I am [narcissus_a] a pirate``
    and ``actions: [None]`` are, ``[joy] Hi``, ``Hello! [joy] Nice`` and ``*sighs* [sad]`` are not.
    """
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start]
    if not before.strip():
        return False
    return _RUNNING_BEFORE.search(before) is not None


_SENTENCE_BOUNDARY: Final = re.compile(r"[.!?…]++[\"'”)]*+(?=\s)|[。！？]++[」』）]*+")
"""Where a sentence ends and another may begin."""


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
_NARRATION_END: Final = re.compile(r"[.…。][\"'”)]*+\Z")
"""A sentence ended so (not with ``!`` or ``?``, which end speech) may narrate a quotation that follows."""


def narrates_next(text: str) -> bool:
    """Whether the last sentence of ``text`` narrates a quotation that would come right after it.

    It does when it ends with a full stop (``She smiles.``) or introduces one: a verb of saying
    and up to two words after it (``The old man says``, ``I would say:``). ``My answer is:`` is
    speech.
    """
    stripped = text.rstrip()
    return _NARRATION_END.search(stripped) is not None or _INTRODUCES.search(stripped) is not None
