"""A streamed reply drives a VRM model, a Live2D model, VTube Studio, sprites and TTS through a stage map.

Run: python examples/stage_vrm_live2d.py

The character (``characters/aoi.toml``) maps each emotion, action and ``<motion>`` value to
what each front end does (its ``[stage]`` table). The reply is fed to ``StreamParser`` in small
chunks, as a model would send it; ``StageReader`` turns the events into cues, each one out
before the speech it belongs to. Each front end takes what it needs from a cue: here they are
printed as the call each engine would get (three-vrm, pixi-live2d-display, the VTube Studio API,
VOICEVOX).
"""

from __future__ import annotations

import json
from pathlib import Path

import charfmt
from charfmt.stage import PlayMotion, SetExpression, Speak, StageCue

HERE = Path(__file__).parent


def show(cue: StageCue) -> None:
    """One cue, as each kind of front end would act on it."""
    if isinstance(cue, SetExpression):
        print(f"[sprite] {cue.sprite}")
        if cue.vrm:
            print(f'[vrm]    vrm.expressionManager.setValue("{cue.vrm}", {cue.weight})')
        for name in cue.live2d:
            print(f'[live2d] model.expression("{name}")')
        if cue.live2d_motion:
            print(f'[live2d] model.motion("{cue.live2d_motion}")')
        if cue.vts_hotkey:
            request = {"messageType": "HotkeyTriggerRequest", "data": {"hotkeyID": cue.vts_hotkey}}
            print(f"[vts]    {json.dumps(request)}")
    elif isinstance(cue, PlayMotion):
        if cue.vrm:
            print(f'[vrm]    play("{cue.vrm}")')
        if cue.live2d:
            index = "" if cue.live2d_index is None else f", {cue.live2d_index}"
            print(f'[live2d] model.motion("{cue.live2d}"{index})')
        if cue.vts_hotkey:
            print(
                f"[vts]    {json.dumps({'messageType': 'HotkeyTriggerRequest', 'data': {'hotkeyID': cue.vts_hotkey}})}"
            )
    elif isinstance(cue, Speak):
        voice = cue.voice or {}
        query = {
            "speaker": voice.get("speaker"),
            "speedScale": voice.get("rate", 1.0),
            "pitchScale": voice.get("pitch", 0.0),
        }
        print(f"[tts]    {cue.text}  (VOICEVOX /audio_query {json.dumps(query)})")


def main() -> int:
    aoi = charfmt.Character.load(HERE / "characters" / "aoi.toml")
    text = (HERE / "replies" / "aoi.json").read_text(encoding="utf-8")
    parser = charfmt.StreamParser(vocabulary=aoi.vocabulary, tags=aoi.tags)
    stage = charfmt.StageReader(aoi, max_length=20)  # TTS starts early: a long sentence also ends at 、
    for i in range(0, len(text), 5):
        for event in parser.feed(text[i : i + 5]):
            for cue in stage.feed(event):
                show(cue)
    for event in parser.close():
        for cue in stage.feed(event):
            show(cue)
    for cue in stage.close():
        show(cue)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
