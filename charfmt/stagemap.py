"""The stage map: what each kind of front end does for an emotion, an action or a cue value.

A character's ``[stage]`` table (TOML) or ``Character.stage`` (API) says, per emotion key,
which sprite to show, which VRM expression preset to set at which weight, which Live2D
expressions and motion group to play, which VTube Studio hotkey to trigger and which voice
style the TTS speaks with; per action word and per cue value (a ``[[tags]]`` cue such as
``<motion>wave</motion>``), which motion to play. A word off the lists gets the fallback.

.. code-block:: toml

    [stage.voice]                 # the character's voice (each emotion may change parts of it)
    speaker = 3                   # an int id (VOICEVOX, AivisSpeech); a voice name is a string ("alloy")
    [stage.emotions.joy]
    vrm = "happy"                 # VRM expression preset (or a custom expression name)
    weight = 0.8                  # the weight at full intensity
    live2d = ["smile", "blush"]   # Live2D expressions (.exp3.json names; one may be a string)
    live2d_motion = "Happy"       # a Live2D motion group
    vts_hotkey = "Smile"          # a VTube Studio hotkey (name or id)
    voice = { style = "happy", rate = 1.1 }
    [stage.actions.bow]
    live2d = "Bow"
    [stage.cues.motion.wave]      # the cue tag <motion>, value "wave"
    vrm = "wave.vrma"
    [stage.fallback]              # an emotion off the list
    vrm = "neutral"
    [stage.formats.airi]          # charfmt serve --reply-format airi: the name AIRI knows for a key
    confused = "question"

The stage reader (``charfmt.stage``) reads this map; this module only holds it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Voice(BaseModel):
    """How the TTS speaks: each field left ``None`` keeps the character's default voice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    style: str | None = None
    """A style name of the TTS engine (VOICEVOX, Style-Bert-VITS2, Azure: ``happy``, ``ささやき``)."""
    speaker: int | str | None = None
    """A speaker id (VOICEVOX, AivisSpeech) or a voice name (Azure, OpenAI, ElevenLabs)."""
    # An id is an int (VOICEVOX and AivisSpeech take ints); a name is a string (Azure, OpenAI,
    # ElevenLabs take names). A string of digits is an id written as a string: an error, not a name.
    rate: float | None = Field(None, gt=0, le=10)
    """Speaking rate, 1 = normal."""
    pitch: float | None = Field(None, ge=-100, le=100)
    """Pitch shift in the engine's own unit (0 = normal)."""

    @field_validator("speaker", mode="before")
    @classmethod
    def _id_or_name(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            raise ValueError(f"speaker {value!r}: a speaker id is an int (speaker = {int(value)}), a name a string")
        if isinstance(value, str) and not value.strip():
            raise ValueError("speaker is an int id (VOICEVOX, AivisSpeech) or a voice name, not empty")
        return value

    def over(self, base: Voice | None) -> Voice:
        """This voice with the fields it leaves ``None`` taken from ``base``."""
        if base is None:
            return self
        return Voice.model_validate({**base.model_dump(), **self.model_dump(exclude_none=True)})


class Expression(BaseModel):
    """What the front ends show for one emotion key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sprite: str | None = None
    """A sprite or image id (``None``: the emotion key's own ``sprite``)."""
    vrm: str | None = None
    """A VRM expression preset (``happy``, ``angry``, ``sad``, ``relaxed``, ``surprised``,
    ``neutral``) or a custom expression name of the model."""
    weight: float = Field(1.0, ge=0, le=1)
    """The VRM expression's weight at full intensity; an emotion's intensity scales it."""
    live2d: list[str] = Field(default_factory=list)
    """Live2D expressions (``.exp3.json`` names) to set, in order."""

    @field_validator("live2d", mode="before")
    @classmethod
    def _one_expression(cls, value: Any) -> Any:
        """``live2d = "smile"`` is a list of one, as an action's ``live2d`` is one name."""
        return [value] if isinstance(value, str) else value

    live2d_motion: str | None = None
    """A Live2D motion group to play with the expression."""
    vts_hotkey: str | None = None
    """A VTube Studio hotkey (its name or id) to trigger."""
    voice: Voice | None = None
    """The voice for speech in this emotion (over the character's ``stage.voice``)."""


class Motion(BaseModel):
    """What the front ends play for one action word or cue value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vrm: str | None = None
    """A VRM animation (a VRMA clip name) to play."""
    live2d: str | None = None
    """A Live2D motion group to play."""
    live2d_index: int | None = Field(None, ge=0)
    """Which motion of the group (``None``: the front end picks one)."""
    vts_hotkey: str | None = None
    """A VTube Studio hotkey (its name or id) to trigger."""
    sprite: str | None = None
    """A sprite or image id (a visual-novel front end's pose)."""


class StageMap(BaseModel):
    """A character's stage map: expressions per emotion key, motions per action word and cue value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    voice: Voice | None = None
    """The character's voice: what every sentence is spoken with, unless an emotion changes it."""
    emotions: dict[str, Expression] = Field(default_factory=dict)
    """Per emotion key (the vocabulary's keys): what to show."""
    actions: dict[str, Motion] = Field(default_factory=dict)
    """Per action word (``bow``, ``crosses arms``): what to play."""
    cues: dict[str, dict[str, Motion]] = Field(default_factory=dict)
    """Per cue tag, per value (``cues.motion.wave``): what to play."""
    fallback: Expression | None = None
    """What to show for an emotion off ``emotions`` (``None``: the emotion key's sprite only)."""
    fallback_action: Motion | None = None
    """What to play for an action or cue value off the lists (``None``: nothing)."""
    formats: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Per ``charfmt serve --reply-format`` (``airi``, ``tags``), per emotion key, the name that front end
    knows (``[stage.formats.airi] fear = "awkward"``; ``charfmt.serve.emotion_names``)."""

    def expression(self, key: str, sprite: str | None = None) -> tuple[Expression, bool]:
        """The expression for emotion ``key`` and whether it was mapped (else the fallback).

        ``sprite``: the emotion key's own sprite, used where the map names none.
        """
        found = self.emotions.get(key)
        expression = found if found is not None else (self.fallback or _NOTHING)
        if expression.sprite is None and sprite is not None:
            expression = expression.model_copy(update={"sprite": sprite})
        return expression, found is not None

    def motion(self, word: str, tag: str | None = None) -> tuple[Motion | None, bool]:
        """The motion for an action word (``tag=None``) or a cue value, and whether it was mapped."""
        table = self.actions if tag is None else self.cues.get(tag, {})
        found = table.get(word)
        return (found if found is not None else self.fallback_action), found is not None

    def check(
        self,
        keys: Sequence[str],
        cues: dict[str, tuple[str, ...] | None],
        actions: Sequence[str] = (),
        resolve: Callable[[str], str | None] | None = None,
    ) -> Iterator[tuple[tuple[Any, ...], str]]:
        """Each entry that names no emotion key, action or cue (its place under ``stage`` and why).

        ``cues``: each cue tag with its closed list of values (``None``: any value).
        ``actions``: the character's action words; where it lists none, any word may be mapped.
        ``resolve``: the vocabulary's lookup, so that an alias written as a key says which key it means.

        Lazy, and linear in the entries: a problem's message (with its did-you-mean search through
        every key) is written only when it is reached, so a caller that stops at the first pays
        for one search however many entries are misspelt.
        """
        known = frozenset(keys)
        for key in self.emotions:
            if key not in known:
                alias = resolve(key) if resolve is not None else None
                if alias is not None:
                    message = f"{key!r} is an alias of {alias!r}: map the key ([stage.emotions.{alias}])"
                else:
                    message = f"{key!r} is not an emotion key (the keys are {_listing(keys)}){_mean(key, keys)}"
                yield ("emotions", key), message
        words = frozenset(actions)
        for word in self.actions if actions else ():
            if word not in words:
                listed, mean = _listing(actions), _mean(word, actions)
                yield ("actions", word), f"{word!r} is not an action of the character (actions: {listed}){mean}"
        for fmt, table in self.formats.items():
            for key in table:
                if key not in known:
                    alias = resolve(key) if resolve is not None else None
                    message = (
                        f"{key!r} is an alias of {alias!r}: map the key" if alias is not None
                        else f"{key!r} is not an emotion key (the keys are {_listing(keys)}){_mean(key, keys)}"
                    )  # fmt: skip
                    yield ("formats", fmt, key), message
        for tag, values in self.cues.items():
            if tag not in cues:
                yield ("cues", tag), f"{tag!r} is not a cue tag of the character (cue tags: {_listing(cues) or 'none'})"
                continue
            allowed = cues[tag]
            allowed_set = frozenset(allowed or ())
            for value in values:
                if allowed is not None and value not in allowed_set:
                    yield ("cues", tag, value), f"<{tag}> value {value!r} is not one of {_listing(allowed)}"


_NOTHING: Final = Expression()


_MAX_LISTED: Final = 20
"""Words an error lists at most (a map of 10,000 keys is not an error message)."""
_MAX_SUGGESTED: Final = 64
"""The longest word a did-you-mean compares (difflib's ratio is quadratic in the words' lengths)."""


def _listing(words: Collection[str]) -> str:
    """``words`` joined for a message: the first ``_MAX_LISTED`` and how many there are in all."""
    if len(words) <= _MAX_LISTED:
        return ", ".join(words)
    return ", ".join(list(words)[:_MAX_LISTED]) + f", ... ({len(words):,} in all)"


def _mean(word: str, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` to ``word``, or nothing."""
    close = closest(word, known)
    return f"; did you mean {close!r}?" if close is not None else ""


def closest(word: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The word of ``known`` most like ``word`` (``difflib.get_close_matches(word, known, 1, cutoff)``), fast.

    difflib computes the full ratio of every candidate; here candidates are ranked by its cheap
    upper bound (``quick_ratio``) and the full ratio is computed only while that bound can still
    beat the best found: one pass over ``known`` and a few full ratios, the same answer. Words
    longer than ``_MAX_SUGGESTED`` get no answer (the full ratio is quadratic in their length).
    """
    if len(word) > _MAX_SUGGESTED:
        return None
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(word)
    bounds: list[tuple[float, str]] = []
    for candidate in known:
        if len(candidate) > _MAX_SUGGESTED:
            continue
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() >= cutoff and (bound := matcher.quick_ratio()) >= cutoff:
            bounds.append((bound, candidate))
    bounds.sort(key=lambda pair: pair[0], reverse=True)
    best: tuple[float, str] | None = None
    for bound, candidate in bounds:
        if best is not None and bound < best[0]:
            break  # no candidate left can beat (or tie) the best
        matcher.set_seq1(candidate)
        score = (matcher.ratio(), candidate)
        if score[0] >= cutoff and (best is None or score > best):  # difflib's order: (ratio, word), largest
            best = score
    return best[1] if best is not None else None
