"""A SillyTavern character card imported and chatted with, offline.

Run: python examples/card_chat.py

``cards/lumi.png`` is a V2 card (its JSON in the PNG's ``chara`` chunk), as SillyTavern exports
it. ``Character.load`` reads it like a character file: the persona from description, personality
and scenario (its macros, ``{{char}}`` and ``{{user}}``, expanded in each prompt), ``mes_example``
as few-shots, a default emotion vocabulary (the card has none: ``CF920``). The greeting
(``first_mes``) opens the chat: the character speaks first, and the model sees it. A scripted model stands in for a real
one (``charfmt chat --character examples/cards/lumi.png`` talks to a real one); its replies are
streamed, shown and staged as they would be. Then the character is exported as a V3 card and
read back.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import charfmt
from charfmt.cards import export_card
from charfmt.chat import TerminalView, take_turn

HERE = Path(__file__).parent
SCRIPT = [
    '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo>\\n<act>purrs</act>\\n'
    '<msg>Sardines! You may stay.</msg>"}]}',
    '{"chats":[{"type":"C","order":1,"body":"<emo>surprise</emo>\\n<msg>Thunder? Pff. I am not afraid.</msg>"}]}',
]


def scripted() -> charfmt.chat.Generate:
    """A model that answers from a script, in small chunks, as a streaming API would."""
    replies = iter(SCRIPT)

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        assert messages[0]["role"] == "system"  # the card's persona and few-shots are in it
        text = next(replies)
        for i in range(0, len(text), 7):
            yield text[i : i + 7]

    return generate


def main() -> int:
    lumi = charfmt.Character.load(HERE / "cards" / "lumi.png")
    assert lumi.card is not None
    for d in lumi.card.diagnostics:
        print(f"{d.code} {d.message}")
    persona = charfmt.render_system(lumi).split("## Persona\n", 1)[1]  # the card's macros expanded
    print(f"{lumi.name}: {persona.splitlines()[0]}")
    opening = charfmt.greeting_exchange(lumi)
    assert opening is not None
    print(f"few-shots: {len(lumi.examples)}; greeting: {charfmt.dumps(opening.reply)}")
    history: list[charfmt.Exchange] = [opening]
    view = TerminalView(lumi, sys.stdout, color=False)
    model = scripted()
    for say in ("[joy] I brought sardines!", "[fear] Is that thunder?"):
        print(f"you> {say}")
        take_turn(lumi, history, say, model, view=view)
    again = charfmt.Character.from_bytes(export_card(lumi, "png"), "lumi-v3.png")
    print("exported as a V3 card and read back the same:", again == lumi)
    print("extensions kept:", again.card is not None and again.card.extensions == lumi.card.extensions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
