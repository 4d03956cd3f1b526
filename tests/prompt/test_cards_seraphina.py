"""SillyTavern's bundled card ``default_Seraphina.png`` (its lorebook "Eldoria": four entries) on a scripted chat.

The card ships with SillyTavern (AGPL-3.0, ``default/content/``); it is not committed here.
The test reads it from ``$CHARFMT_SERAPHINA`` (``.ci/run`` takes it from SillyTavern's npm
package, ``sillytavern@1.19.0``, and checks its SHA-256) or from ``cards/default_Seraphina.png``
in the shared folder beside the repository, and is skipped where neither holds it. A reader of
the card expects: the greeting (the forest, the beasts, healing magic) wakes Eldoria, the
Shadowfangs and Seraphina's powers; then each question wakes its entry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT

from charfmt import Character, greeting_exchange, parse
from charfmt.prompt.character import Exchange
from charfmt.prompt.render import render_turn
from charfmt.writer import canonical_form

PLACES = [os.environ.get("CHARFMT_SERAPHINA", ""), ROOT.parent / "shared" / "cards" / "default_Seraphina.png",
          ROOT / "shared" / "cards" / "default_Seraphina.png"]  # fmt: skip
CARD = next((Path(p) for p in PLACES if p and Path(p).is_file()), None)
WHY = "default_Seraphina.png (SillyTavern's) not found: set CHARFMT_SERAPHINA (.ci/run fetches it from npm)"
pytestmark = pytest.mark.skipif(CARD is None, reason=WHY)
REPLY = json.dumps({"chats": [{"type": "C", "order": 1, "body": "<emo>neutral</emo>\n<msg>Rest now.</msg>"}]})
SCRIPT = [  # (the player says, the entries a reader of the card expects, in prompt order)
    ("Who are you?", {"Eldoria", "Shadowfangs", "Powers"}),  # the greeting: the forest, beasts, her magic
    ("What happened to the forest out there?", {"Eldoria"}),
    ("Tell me about the Shadowfangs.", {"Shadowfangs"}),
    ("Is this glade safe?", {"Glade"}),
    ("Can you teach me your magic?", {"Powers"}),
]
NAMES = {"0": "Eldoria", "1": "Shadowfangs", "2": "Glade", "3": "Powers"}


def test_seraphinas_lorebook_wakes_what_the_chat_talks_about() -> None:
    assert CARD is not None
    sera = Character.load(CARD, user_name="Alex")
    greeting = greeting_exchange(sera)
    assert greeting is not None and "Seraphina" in json.dumps(greeting.reply.model_dump(), ensure_ascii=False)
    history = [greeting]
    for say, expected in SCRIPT:
        turn = sera.shorthand(say)
        rendered = render_turn(sera, history, turn, budget=8192, seed=7)
        assert rendered.lore is not None
        assert {NAMES[p.entry.uid] for p in rendered.lore.placed} == expected, say
        assert rendered.lore.cut == []
        system = rendered.request["messages"][0]["content"]
        assert "Alex: &quot;" not in system and "{{" not in system  # macros expanded (escaped once, as text)
        if "Eldoria" in expected:
            assert 'Alex: "What is Eldoria?"' in system and "Seraphina: *Seraphina turns" in system
        reply = canonical_form(parse(REPLY, vocabulary=sera.vocabulary), tags=sera.tags)
        history.append(Exchange(user=turn, reply=reply))
    assert rendered.request["messages"][1]["role"] == "assistant"  # the greeting, still the chat's first line
