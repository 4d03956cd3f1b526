"""An upper bound on the tokens a byte-level BPE tokenizer (cl100k) makes of a text, without its vocabulary.

Why it holds. A byte-level BPE merges adjacent parts of a pre-token piece while any two of
them form a token. So in what it returns, two one-byte tokens never stand side by side where
those two bytes form a token ("a good pair") inside one piece. Take a text of ``B`` bytes
whose adjacent byte pairs split it into ``S`` runs joined by good pairs: with ``s`` one-byte
tokens and ``m`` longer ones, ``s + 2m <= B`` and each run of one-byte tokens but the first
needs a run boundary, so ``s <= m + S``; hence ``s + m <= (2B + S) / 3``. Digit runs are
pieces of their own, every one to three digits one token: ``ceil(n / 3)`` (unless another
numeric character stands beside them and shifts the groups).

The good pairs below are those known to be one token and inside one piece (the pre-token
pattern of cl100k: letters with the space before them, punctuation runs, newline runs);
any other pair counts as a boundary, which only raises the bound. A piece that is one of
a few hundred common words with its space (`` the``, `` reply``) is one token: counted 1. Runs of one character,
laughter (``wwww``, ``ははは``), emoji and random letters stay under it (tests check it
against cl100k with hypothesis); the cost is an estimate well above what ordinary text
takes (about 2.5x for English prose): pass your tokenizer's counter for exact budgets.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cache
from typing import Final

_DIGITS: Final = re.compile(r"[0-9]+")

_LOWER_BAD: Final = frozenset(
    re.findall(
        "..",
        "bqfjfzgjgkgqhjjgjvjwjxjyjzkqkxkzlqmznqoqqfqgqjqkqoqyqzrjtjtquqvqvzwqwvwzxgxhxjxkxqxuxvxwyfyjyqyvzgzjzqzrzv",
    )
)
"""Pairs of lower-case letters that are not one token."""
_UPPER_LOWER_BAD: Final = {
    row[0]: frozenset(row[1:])
    for row in [
        "Aaeq",
        "Bbcdfhjkmnpqtvwxz",
        "Cfgjkmnpqtvwz",
        "Dcdfghjklmnpqvwxyz",
        "Eaeghijowz",
        "Fbfghjkmpqtvwyz",
        "Gcdfghjkmnpqtvwxyz",
        "Hbcdfghjklmnqrstvwx",
        "Iabceghijquvwyz",
        "Jbcdfghijklmnpqrtvwxyz",
        "Kbcdfgjklmopqstuvwxz",
        "Lbcdghjklmpqrswxz",
        "Mfghjklmnqvwxz",
        "Ncfjklnpqtvwz",
        "Oacegjoquvwxyz",
        "Pbcdfjmnpqvwz",
        "Qabcdefghjklmnopqrsvwxyz",
        "Rbcdfgijklmnqrtvwyz",
        "Sbdfgjsvx",
        "Tbcfgjlmnqtz",
        "Uacdefgjkoquvwxyz",
        "Vbcdfghjlnpqrtvwxz",
        "Wbcdfgjklmnpqtuvwxz",
        "Xabcefghjklmnopqrstuvwxyz",
        "Ybcdfghijklmnpqrstvwxyz",
        "Zabcdfgijklmnopqrstuvwxyz",
    ]
}
"""For each capital, the lower-case letters it does not make one token with."""
_PUNCT: Final = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_PUNCT_GOOD: Final = frozenset(
    [
        '{"',
        '":',
        '",',
        '"}',
        "]}",
        "}]",
        ",{",
        "</",
        "/>",
        '"<',
        "><",
        '">',
        "?!",
        "!?",
        '."',
        ',"',
        '")',
        ':"',
        '"]',
        '["',
    ]
)
"""Pairs of different punctuation marks known to be one token (a mark doubled always is)."""
_CONTRACTIONS: Final = ("s", "d", "m", "t")
_CONTRACTIONS_2: Final = ("ll", "ve", "re")

# Code points whose UTF-8 form starts with a byte pair that is one token: 2-byte characters
# that are one token, and 64-code-point blocks of 3-byte characters (and 4096-code-point
# blocks of 4-byte ones) sharing a first byte pair that is.
_TWO_BYTE: Final = (
    "80 92 a0-b7 b9-c4 c7 c9 cd-ce d0-d1 d3 d6-d7 da dc df-f6 f8-fd 101 103 105 107 10d 110-111 113 119 11b 11f"
    " 12b 130-131 142 144 14d 151 153 159 15b 15f 161 163 165 16b 16f 171 17a 17c 17e 1a1 1b0 219 21b 259 275"
    " 300-301 3ac-3af 3b1-3b5 3b7-3bd 3bf-3c7 3c9 3cc 402 410-415 417-418 41a-424 426-427 42d 42f-44f 451 456"
    " 5d0-5d1 5d3-5d5 5d7 5d9 5dc 5de 5e0 5e2 5e8-5ea 60c 623 625 627-63a 641-64a 64e-652 67e 6a9 6af 6cc"
)
_THREE_BYTE: Final = (
    "900-aff b80-ebf f00-f7f 1000-103f 10c0-10ff 1780-17ff 1e80-1eff 2000-20bf 2100-21bf 2200-227f 2440-247f"
    " 2500-267f 2700-27ff 3000-30ff 3140-317f 4e00-507f 50c0-50ff 5140-547f 54c0-55bf 56c0-577f 57c0-597f"
    " 59c0-59ff 5b40-5cbf 5dc0-607f 60c0-613f 6200-63ff 6440-64bf 6500-687f 68c0-68ff 6940-697f 6b00-6f3f"
    " 7040-707f 7100-713f 7200-727f 7380-743f 7500-757f 7640-777f 7840-78bf 7900-7bff 7c40-7cbf 7d00-7d7f"
    " 7e80-7fbf 8000-80ff 81c0-837f 83c0-843f 8640-867f 8840-88ff 8980-8abf 8b40-8dff 8f40-90ff 91c0-91ff"
    " 9300-933f 9480-977f 9800-98ff 9980-99bf 9a40-9a7f 9ec0-9eff 9f80-9fbf ac00-acff ad40-ad7f adc0-ae7f"
    " b080-b0bf b100-b17f b280-b2ff b340-b37f b3c0-b43f b4c0-b53f b780-b87f b8c0-b8ff b940-b9ff ba40-babf"
    " bbc0-bc3f bc80-bcff bd80-bdbf be00-be3f c080-c1bf c280-c2ff c540-c7bf c800-c83f c900-c93f c980-c9ff"
    " cc00-cc3f cc80-ccbf cd80-cdbf ce40-ce7f d040-d07f d0c0-d13f d280-d2bf d300-d33f d540-d57f d600-d67f"
    " f080-f0bf fe00-fe3f ff00-ffff"
)
_FOUR_BYTE: Final = "1d000-1dfff 1f000-1ffff"


def _ranges(spec: str) -> tuple[list[int], list[int]]:
    starts, ends = [], []
    for item in spec.split():
        low, _, high = item.partition("-")
        starts.append(int(low, 16))
        ends.append(int(high or low, 16))
    return starts, ends


_LEADING_PAIR: Final = _ranges(" ".join((_TWO_BYTE, _THREE_BYTE, _FOUR_BYTE)))


@cache
def _inner(ch: str) -> tuple[int, int]:
    """``(UTF-8 bytes, good pairs inside)`` of one character."""
    size = len(ch.encode("utf-8", "surrogatepass"))
    if size == 1:
        return 1, 0
    starts, ends = _LEADING_PAIR
    i = bisect_right(starts, ord(ch)) - 1
    return size, 1 if i >= 0 and ord(ch) <= ends[i] else 0


def _joined(text: str, i: int) -> bool:
    """Whether ASCII characters ``text[i]`` and ``text[i + 1]`` are one token in one piece."""
    a, b = text[i], text[i + 1]
    if a == " ":
        # A space joins the letters or marks after it, and the space before a space joins
        # it unless that is the last of the run (which goes with what follows).
        return b.isalpha() or b in _PUNCT or (b == " " and text[i + 2 : i + 3] == " ")
    if a == "\n":
        return b == "\n"
    if b.islower():
        if text[i - 1 : i] == "'" and a.lower() in _CONTRACTIONS:
            return False  # ``'s`` is a piece of its own: what follows starts another
        if text[i - 2 : i - 1] == "'" and text[i - 1 : i + 1].lower() in _CONTRACTIONS_2:
            return False
        if a.islower():
            return a + b not in _LOWER_BAD
        return a.isupper() and b not in _UPPER_LOWER_BAD[a]
    if a in _PUNCT and b in _PUNCT:
        return a == b or a + b in _PUNCT_GOOD
    return False


def _bound(text: str) -> int:
    """The bound for a text without ASCII digits."""
    size = good = 0
    last = len(text) - 1
    for i, ch in enumerate(text):
        if ch < "\x80":
            size += 1
            if i < last and text[i + 1] < "\x80" and _joined(text, i):
                good += 1
        else:
            n, inner = _inner(ch)
            size += n
            good += inner
    # (2B + S) / 3 with S = B - good runs: B - ceil(good / 3).
    return size - -(-good // 3)


_COMMON: Final = frozenset(
    re.findall(
        r"[a-z]+",
        """a about after all also an and any are as at back be because been but by can come could day did do does each
    even every few first for from get give go good had has have he her here him his how i if in into is it its just
    know like look make many may me might more most much must my new no not now of on one only or other our out over
    own people said same say see shall she should so some such take than that the their them then there these they
    think this those time to two up us use very want was way we well were what when where which who why will with
    work would year yes you your reply replies chat chats type order body user character emotion emotions action
    speech text message tag tags key keys example examples write writes written never always short sentence
    sentences line lines json format object array string value values list name persona voice game player says
    tell tells help keep kept please thank thanks sorry hello hi okay ok""",
    )
)
"""Common words that, with the space before them, are one cl100k token (a test checks each)."""
_WORD: Final = re.compile(r" ([a-z]+)(?![^\W\d_])")
"""A space and lower-case letters up to a non-letter: one whole piece of the pre-token pattern."""


def _words_and_rest(text: str) -> int:
    """The bound with each piece that is a known one-token word counted 1 (a piece boundary on both sides)."""
    total = start = 0
    for m in _WORD.finditer(text):
        if m.group(1) in _COMMON:
            total += _bound(text[start : m.start()]) + 1
            start = m.end()
    return total + _bound(text[start:])


def token_bound(text: str) -> int:
    """At most how many tokens cl100k makes of ``text`` (see the module docstring)."""
    total = 0
    start = 0
    for m in _DIGITS.finditer(text):
        if text[m.start() - 1 : m.start()].isnumeric() or text[m.end() : m.end() + 1].isnumeric():
            continue  # '²' or '٣' beside the digits shifts the groups of three: counted a token per digit
        total += _words_and_rest(text[start : m.start()]) + -(-len(m.group()) // 3)
        start = m.end()
    return total + _words_and_rest(text[start:])
