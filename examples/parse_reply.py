"""Parse a saved model reply and drive a (pretend) game from its events.

Run: python examples/parse_reply.py [examples/replies/mio.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

import charfmt

SPRITES = {"joy": "mio_smile.png", "surprise": "mio_gasp.png"}


def main(path: str) -> int:
    """Show what the character feels, does and says; report a broken reply precisely."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        reply = charfmt.parse(text, vocabulary=charfmt.Vocabulary.of(*SPRITES))
    except charfmt.ParseError as e:
        print(e.report(path), file=sys.stderr)
        return 1
    for event in reply.events():
        if isinstance(event, charfmt.Emotion):
            print(f"[sprite] {SPRITES[event.text]}")
        elif isinstance(event, charfmt.Action):
            print(f"[motion] {event.text}")
        elif isinstance(event, charfmt.TextDelta) and event.tag == "msg":
            print(f"[window] {event.text}")
        elif isinstance(event, charfmt.TextDelta) and event.tag == "text":
            print(f"[log]    {event.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "replies" / "mio.json")))
