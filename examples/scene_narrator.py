"""A scene of two characters and a narrator: one reply, each chat with its speaker, each read with its own vocabulary.

Run: python examples/scene_narrator.py

``scenes/mars_shrine.toml`` casts Rex (``rex.toml``) and Mio (``mio.toml``) and gives the narrator
(the ``E`` chats) a voice. The script shows the cast as the system prompt presents it, reads a
saved reply strictly (each speaker's emotions against its own vocabulary), shows what an
off-cast speaker gets, and prints the stage cues: whose expression, whose voice.
"""

from __future__ import annotations

from pathlib import Path

import charfmt
from charfmt.scene import Scene

HERE = Path(__file__).parent


def main() -> int:
    scene = Scene.load(HERE / "scenes" / "mars_shrine.toml")
    system = scene.render_system()
    print(
        "\n".join(line for line in system.splitlines() if line.startswith("### "))
    )  # the cast, as the prompt shows it
    text = (HERE / "replies" / "mars_shrine.json").read_text(encoding="utf-8")
    reply = scene.parse(text)  # strict: each speaker in the cast, each emotion in its speaker's vocabulary
    for cue in charfmt.stage_cues(reply.events(scene.tags), cast=scene.cast, narrator=scene.narrator):
        who = getattr(cue, "speaker", None) or "-"
        if cue.kind == "expression":
            print(f"[{who}] sprite {getattr(cue, 'sprite', None)}")
        elif cue.kind == "motion":
            print(f"[{who}] motion {getattr(cue, 'word', '')}")
        elif cue.kind == "speak":
            print(f"[{who}] says {getattr(cue, 'text', '')!r} with voice {getattr(cue, 'voice', None)}")
    try:
        scene.parse(text.replace('"speaker":"mio"', '"speaker":"kai"'))
    except charfmt.ParseError as e:
        print(f"off-cast: {e.diagnostics[0].code} {e.diagnostics[0].message}")
    grammar = scene.grammar("gbnf")  # for llama.cpp: a C chat's "speaker" is one of the cast
    print("grammar:", next(part for part in grammar.split("t-ws?") if '\\"rex\\"' in part).strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
