"""The emotion names each front end knows, and a character's emotion keys mapped to them (``--reply-format``).

A character's emotion keys are its own (``pleased``, ``annoyed``); a front end knows a fixed set
of names, its row's (``charfmt.serve.formats.REPLY_FORMATS``): AIRI's Live2D, VRM, Spine and MMD
stages play ``happy``, ``sad``, ``angry``, ``think``, ``surprised``, ``awkward``, ``question``,
``curious`` and ``neutral``, and ignore any other name (``packages/stage-ui/src/constants/emotions.ts``,
``llm-streaming-control/payloads.ts``). Each key
is written as the name found first of:

1. the character's ``[stage.formats.FORMAT]`` table (``fear = "awkward"``): the operator's word;
2. the key itself, or one of its aliases, where the front end knows it (Rex's ``pleased`` has the
   alias ``happy``);
3. ``SYNONYMS``: the common words for each of the front end's names (``joy`` is ``happy``,
   ``confused`` is ``question``), for the key or an alias.

A key none of these maps is written as it is, and reported once at the start (``CF828``, in
``charfmt serve``'s first lines and ``/v1/info``'s ``unmapped_emotions``): the front end will
ignore it. A front end with no fixed set (``tags``: aituber-kit's and Open-LLM-VTuber's names are
the model's own) gets the keys, or what ``[stage.formats.tags]`` says. Read back as history, a
name is its key again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from charfmt.diagnostics import CharfmtError, Diagnostic
from charfmt.serve.formats import REPLY_FORMATS

if TYPE_CHECKING:
    from charfmt.models import Vocabulary
    from charfmt.serve.settings import Settings

KNOWN: Final[dict[str, tuple[str, ...] | None]] = {
    row.name: row.emotion_names for row in REPLY_FORMATS.values() if row.writes_emotions
}
"""Per reply format that writes emotions: the names its front ends know (``None``: any name, the keys kept),
from its row (``charfmt.serve.formats.REPLY_FORMATS``)."""

SYNONYMS: Final[dict[str, tuple[str, ...]]] = {
    "happy": ("joy", "joyful", "pleased", "glad", "delighted", "amused", "amusement", "excited", "excitement",
              "cheerful", "smile", "smiling", "love", "affection", "caring", "proud", "pride", "grateful",
              "gratitude", "relief", "relieved", "content", "playful"),
    "sad": ("sadness", "grief", "sorrow", "unhappy", "disappointed", "disappointment", "hurt", "lonely",
            "crying", "remorse", "depressed", "melancholy"),
    "angry": ("anger", "annoyed", "annoyance", "irritated", "mad", "furious", "grumpy", "frustrated",
              "frustration", "disgust", "disgusted", "disapproval", "rage"),
    "think": ("thinking", "thoughtful", "pensive", "pondering", "considering", "realization", "serious"),
    "surprised": ("surprise", "shock", "shocked", "startled", "astonished", "amazed", "amazement"),
    "awkward": ("embarrassed", "embarrassment", "shy", "flustered", "nervous", "nervousness", "fear",
                "afraid", "scared", "blush", "blushing", "sheepish", "anxious", "worried"),
    "question": ("confused", "confusion", "puzzled", "doubt", "doubtful", "questioning", "unsure"),
    "curious": ("curiosity", "interested", "interest", "intrigued", "desire"),
    "neutral": ("calm", "idle", "default", "relaxed", "normal", "bored", "tired", "sleepy"),
}  # fmt: skip
"""Per name a front end knows (AIRI's), the words that mean it (SillyTavern's expression labels among them),
step 3 above."""


@dataclass(frozen=True)
class EmotionNames:
    """What a reply format writes for each emotion key, and what it reads back."""

    format: str
    names: dict[str, str] = field(default_factory=dict)
    """Per key, the name written where it is not the key itself."""
    unmapped: tuple[str, ...] = ()
    """The keys the front end knows no name for (written as they are)."""

    @property
    def known(self) -> bool:
        """Whether the format writes emotion names at all (``tags``, ``airi``; not ``canonical``, ``speech``)."""
        return self.format in KNOWN

    def back(self) -> dict[str, str]:
        """Per name written, the key it stands for (the first key of a name several share)."""
        out: dict[str, str] = {}
        for key, name in self.names.items():
            out.setdefault(name, key)
        return out

    def diagnostics(self) -> list[Diagnostic]:
        """A ``CF828`` for each unmapped key."""
        known = ", ".join(KNOWN.get(self.format) or ())
        said = "which it ignores; name one in [stage.formats." + self.format + "]"
        return [
            Diagnostic.at("", "CF828", f"emotion {key!r} has no name the {self.format} front end knows ({known}): "
                          f"written as {key!r}, {said}", 0)
            for key in self.unmapped
        ]  # fmt: skip


def emotion_names(fmt: str, vocabulary: Vocabulary, overrides: Mapping[str, str] | None = None) -> EmotionNames:
    """The names format ``fmt`` writes for ``vocabulary``'s keys (see the module docstring); ``overrides``:
    the ``[stage.formats.FMT]`` table. A ``CharfmtError`` where it names what the front end does not know."""
    if fmt not in KNOWN:
        if overrides:
            raise CharfmtError(f"[stage.formats.{fmt}]: the {fmt!r} reply format writes no emotion names")
        return EmotionNames(fmt)
    known = KNOWN[fmt]
    given = dict(overrides or {})
    for key, word in given.items():
        if known is not None and word not in known:
            raise CharfmtError(
                f"[stage.formats.{fmt}] {key} = {word!r}: not a name the {fmt} front end knows ({', '.join(known)})"
            )
    names: dict[str, str] = {}
    unmapped: list[str] = []
    for emotion in vocabulary.emotions:
        name = given.get(emotion.key) or (_known_name(emotion.key, emotion.aliases, known) if known else None)
        if name is None and known is not None:
            unmapped.append(emotion.key)
        elif name is not None and name != emotion.key:
            names[emotion.key] = name
    return EmotionNames(fmt, names, tuple(unmapped))


def _known_name(key: str, aliases: list[str], known: tuple[str, ...]) -> str | None:
    """The first of ``known`` that ``key`` or an alias is, or means (``SYNONYMS``)."""
    words = [word.casefold() for word in (key, *aliases)]
    for word in words:
        if word in known:
            return word
    for word in words:
        for name, same in SYNONYMS.items():
            if name in known and word in same:
                return name
    return None


def served_names(settings: Settings) -> EmotionNames:
    """The names ``settings.reply_format`` writes for the served character's (or scene's) emotion keys, with
    each cast member's ``[stage.formats]`` (the first that names a key wins)."""
    vocabulary = settings.cast.vocabulary
    overrides: dict[str, str] = {}
    for character in settings.cast.members.values():
        for fmt, table in (character.stage.formats if character.stage is not None else {}).items():
            if fmt not in KNOWN:
                raise CharfmtError(f"{character.name}: [stage.formats.{fmt}]: not a reply format that writes "
                                   f"emotions ({', '.join(KNOWN)})")  # fmt: skip
            if fmt == settings.reply_format:
                overrides = {**table, **overrides}
    return emotion_names(settings.reply_format, vocabulary, overrides)
