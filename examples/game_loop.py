"""A tiny game loop: switch the sprite on emotion events, type the message, speak whole sentences.

Run: python examples/game_loop.py
Offline: a saved reply is replayed as a model stream, a few characters at a time.
"""

from __future__ import annotations

from pathlib import Path

import charfmt

HERE = Path(__file__).parent


def main() -> int:
    """Drive a pretend game from a streamed reply."""
    mio = charfmt.Character.load(HERE / "characters" / "mio.toml")
    sprites = {e.key: e.sprite for e in mio.emotions}
    reply = (HERE / "replies" / "mio_angry.json").read_text(encoding="utf-8")
    chunks = [reply[i : i + 6] for i in range(0, len(reply), 6)]  # as a model would stream it

    parser = charfmt.StreamParser(vocabulary=mio.vocabulary)
    speech = charfmt.SentenceSplitter()
    window = ""
    log = ""  # an I or E chat's line, printed whole once it ends
    for chunk in [*chunks, None]:
        events = parser.feed(chunk) if chunk is not None else parser.close()
        for event in events:
            if isinstance(event, charfmt.Emotion):
                print(f"[sprite] {sprites.get(event.text, 'mio_default')}")
            elif isinstance(event, charfmt.Action):
                print(f"[motion] {event.text}")
            elif isinstance(event, charfmt.SegmentStart) and event.tag == "msg":
                window = ""
            elif isinstance(event, charfmt.TextDelta) and event.tag == "msg":
                window += event.text
                print(f"[window] {window}")
            elif isinstance(event, charfmt.TextDelta) and event.tag == "text":
                log += event.text
            elif isinstance(event, charfmt.SegmentEnd) and event.tag == "text" and log:
                print(f"[log]    {log}")
                log = ""
            elif isinstance(event, charfmt.Reset):  # (rare: a damaged reply read again as a whole at its end)
                window, log = "", ""
                print("[reset]  clear the window and stop speaking: the reply is shown again from its start")
            for sentence in speech.feed(event):
                print(f"[tts:{sentence.emotion}] {sentence.text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
