"""Tight token counts for cl100k without tiktoken: its pre-tokenizer copied, its first 20,000 merges known.

cl100k splits a text into pieces with one pattern (a word with the space before it, one to
three digits, a run of punctuation, a run of white space) and runs its BPE on each piece alone;
a piece that is itself a token is one. So the text is split here as cl100k splits it (the pattern
run over each character's class: letter, number, white space or other), and each piece is counted:

- ``piece_bound`` (never fewer than cl100k): one where the piece is one of cl100k's first 20,000
  tokens or one to three digits; else the BPE run with those merges only (``charfmt/data/
  cl100k_tables.json.gz``, made by ``benchmarks/data/make_token_tables.py``), which stops with at
  least as many tokens as the full BPE; or the older bound of :mod:`charfmt.prompt._token_bound`, where lower.
- ``piece_estimate``: the bound on ASCII pieces (English, JSON, markup, code: exact for the common
  words, proven never under). A piece beyond ASCII (Japanese, Chinese, Korean, Cyrillic...) is its
  characters' own costs added up, each exact (1 where the character is one token, else 2 or 3 by
  its byte pairs), plus one for an ASCII mark before it, where that is lower than the bound: a merge
  across characters (``です``) only lowers what the BPE makes, but nothing proves the BPE never
  splits a character across its neighbours so as to make more (measured: never, on the corpus of
  ``benchmarks/data``). Runs of few characters (``草草草``, laughter) keep the bound.

``benchmarks/bench_tokens.py`` measures both against cl100k.
"""

from __future__ import annotations

import gzip
import json
import re
import unicodedata
from functools import cache, lru_cache
from pathlib import Path
from typing import Final

from charfmt.prompt._token_bound import token_bound

TABLES: Final = Path(__file__).resolve().parent.parent / "data" / "cl100k_tables.json.gz"

_SPACE: Final = r"[\t\n\v\f\r ]"
_PATTERN: Final = re.compile(
    r"'(?i:[sdmt]|ll|ve|re)"
    r"|[^\r\nA-Za-z0-9]?+[A-Za-z]++"
    r"|[0-9]{1,3}+"
    rf"| ?[^\t\n\v\f\r A-Za-z0-9]++[\r\n]*+"
    rf"|{_SPACE}++\Z"
    rf"|{_SPACE}*[\r\n]"
    rf"|{_SPACE}+(?![^\t\n\v\f\r ])"
    rf"|{_SPACE}"
)
"""cl100k's pre-token pattern, over text whose characters beyond ASCII stand for their class."""

_WHITE: Final = frozenset("\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}
"""The characters beyond ASCII that are white space to cl100k's pattern (``\\s``: Unicode's White_Space)."""

MAX_MERGED: Final = 96
"""Bytes of a piece the BPE is run on (its cost grows with the square); a longer one gets the older bound."""


class _Classes(dict[int, str]):
    """``str.translate`` table: a character beyond ASCII as the ASCII character of its class."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        if ch == "ſ":  # (the long s folds to s: a contraction ``'ſ`` is one piece)
            out = "s"
        elif ch in _WHITE:
            out = "\f"
        else:
            kind = unicodedata.category(ch)[0]
            out = "a" if kind == "L" else "0" if kind == "N" else "!"
        self[code] = out
        return out


_CLASSES: Final = _Classes({c: chr(c) for c in range(128)})


def pieces(text: str) -> list[str]:
    """``text`` split into cl100k's pre-token pieces (each encoded on its own)."""
    shape = text if text.isascii() else text.translate(_CLASSES)
    return [text[m.start() : m.end()] for m in _PATTERN.finditer(shape)]


@cache
def _tables() -> tuple[dict[str, int], frozenset[str], frozenset[bytes]]:
    """(the first merges of cl100k by their bytes as Latin-1 text, the characters that are one token,
    the byte pairs beyond ASCII that are one)."""
    data = json.loads(gzip.decompress(TABLES.read_bytes()))
    ranks = {token: rank for rank, token in enumerate(data["ranks"])}
    return ranks, frozenset(data["chars"]), frozenset(bytes.fromhex(p) for p in data["pairs"])


def _merged(data: str, ranks: dict[str, int]) -> int:
    """The tokens cl100k's BPE leaves of one piece (its bytes as Latin-1 text) with only the merges of ``ranks``.

    The BPE merges the adjacent pair of the lowest rank, the leftmost first, until no pair is a token.
    With the first merges only, it makes the same merges in the same order until none of them is
    left: what it stops with is at least what cl100k makes (each later merge takes one token away).
    """
    parts = list(data)
    while len(parts) > 1:
        best, at = len(ranks), -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1], best)
            if rank < best:
                best, at = rank, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


@cache
def _char_cost(ch: str) -> int:
    """The tokens cl100k makes of one character alone (exact on the Basic Multilingual Plane; 4 beyond it)."""
    _, chars, pairs = _tables()
    if ch.isascii() or ch in chars:
        return 1
    data = ch.encode("utf-8", "surrogatepass")
    if len(data) == 2:
        return 2
    if len(data) == 3:
        return 2 if data[:2] in pairs or data[1:] in pairs else 3
    return len(data)


def _repeats(piece: str) -> bool:
    """A run of few characters (``wwww``, ``hahaha``, ``草草草``): the BPE splits those unevenly."""
    return len(piece) >= 8 and 4 * len(set(piece)) <= len(piece)


@lru_cache(maxsize=65536)
def piece_bound(piece: str) -> int:
    """At most how many tokens cl100k makes of one pre-token piece (see the module docstring)."""
    ranks, _, _ = _tables()
    if piece.isascii() and (piece in ranks or piece.isdigit()):
        return 1  # (tiktoken looks a whole piece up first; one to three digits are always one token)
    bound = token_bound(piece)
    data = piece.encode("utf-8", "surrogatepass").decode("latin-1")
    return min(bound, _merged(data, ranks)) if len(data) <= MAX_MERGED else bound


@lru_cache(maxsize=65536)
def piece_estimate(piece: str) -> int:
    """The estimate for one pre-token piece (see the module docstring)."""
    bound = piece_bound(piece)
    if piece.isascii() or bound == 1 or _repeats(piece):
        return bound
    lead = 1 if piece[0].isascii() and len(piece) > 1 else 0  # an ASCII mark can merge with the first byte
    return min(bound, lead + sum(_char_cost(ch) for ch in piece))


def bound(text: str) -> int:
    """At most how many tokens cl100k makes of ``text``: the pieces' bounds added up."""
    return sum(piece_bound(p) for p in pieces(text))


def estimate(text: str) -> int:
    """The estimate for ``text``: the pieces' estimates added up."""
    return sum(piece_estimate(p) for p in pieces(text))
