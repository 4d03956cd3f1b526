"""The JSON envelope's names where their importers read them; the module is ``charfmt._strict.envelope``."""

from __future__ import annotations

from charfmt._strict.envelope import (
    Decoded,
    HugeInteger,
    JSONError,
    Locator,
    NonFinite,
    Path,
    decode,
    decode_pairs,
    json_cut_off,
    json_error,
)

__all__ = [
    "Decoded",
    "HugeInteger",
    "JSONError",
    "Locator",
    "NonFinite",
    "Path",
    "decode",
    "decode_pairs",
    "json_cut_off",
    "json_error",
]
