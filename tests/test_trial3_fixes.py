"""What a new user's trial with real models, grammars and front ends found (issues 39 and 40, trial 3)."""

from __future__ import annotations

import json

import charfmt
from charfmt.speech import trim_cut_speech


def _reply(body: str) -> str:
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}]})


def test_speech_that_ends_a_sentence_at_its_bound_before_a_space_is_not_cut() -> None:
    """A sentence ended at the bound, then a space or newline: nothing was cut, so no ``CF150``."""
    for said in ("Saved a few for now. ", "Saved a few for now.\n", "行くよ。 "):
        raw = _reply(f"<msg>{said}</msg>")
        trimmed = trim_cut_speech(charfmt.parse(raw), bound=len(said), source=raw)
        assert [d.code for d in trimmed.diagnostics if d.code == "CF150"] == []
        assert trimmed.chats[0].texts("msg") == [said.rstrip()]
    cut = "Saved a few for now and"
    raw = _reply(f"<msg>{cut}</msg>")
    assert "CF150" in [d.code for d in trim_cut_speech(charfmt.parse(raw), bound=len(cut), source=raw).diagnostics]
