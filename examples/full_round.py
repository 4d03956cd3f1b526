"""A full round: character + history + shorthand input → provider request → saved reply → events.

Run: python examples/full_round.py [openai|anthropic|gemini]
Offline: instead of calling the provider, it reads a saved model reply.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import charfmt

HERE = Path(__file__).parent


def main(provider: str = "openai") -> int:
    """Build the request a game would send, then handle the model's answer."""
    mio = charfmt.Character.load(HERE / "characters" / "mio.toml")
    history = charfmt.load_history(HERE / "history.jsonl", mio)
    turn = mio.shorthand("[angry] なんで教えてくれないの？")
    request = charfmt.render_messages(mio, history, turn, provider=provider, budget=4000)
    print(json.dumps(request, ensure_ascii=False, indent=2)[:400], "…\n")

    answer = (HERE / "replies" / "mio_angry.json").read_text(encoding="utf-8")  # the model's reply
    reply = charfmt.parse(answer, vocabulary=mio.vocabulary)
    sprites = {e.key: e.sprite for e in mio.emotions}
    for event in reply.events():
        if isinstance(event, charfmt.Emotion):
            print(f"[sprite] {sprites[event.text]}")
        elif isinstance(event, charfmt.TextDelta) and event.tag in ("msg", "text"):
            print(f"[{event.tag}] {event.text}")
    history.append(charfmt.Exchange(user=turn, reply=reply))  # goes back in canonical form next turn
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
