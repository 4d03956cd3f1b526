"""The stage reader: events (streamed, or of a whole ``Reply``) become what each front end does, in order.

Three kinds of cue come out, each as soon as it is certain:

``expression``
    set this expression (sprite, VRM preset at a weight, Live2D expressions and motion group,
    VTube Studio hotkey) — from an ``<emo>`` element, the emotion's intensity scaling the weight;
``motion``
    play this motion (VRM animation, Live2D motion group, VTube Studio hotkey, sprite) — from
    an action (``<act>``) or a cue tag's value (``<motion>wave</motion>``);
``speak``
    speak this sentence, as this speaker, with this voice (the character's voice with the
    emotion's voice over it) — from the speech tags, split by ``SentenceSplitter``.
    Punctuation within a message stays with its sentence (``…寂しかった。``); a message that is
    punctuation only (``<msg>……</msg>``, a pause, a gasp) is a ``speak`` cue with ``silent=True``:
    its text kept for display, nothing for TTS to say.

The order is the order of the reply, and the reader never holds a cue back: an expression
or motion is out the moment its element is complete, before any sentence written after it,
and a sentence waits only for its own end. So each cue is fired at the start of the sentence
it belongs to, never after its speech, and the cues of a stream (any chunking) are those of
the whole reply. A ``Reset`` of the stream comes out as a ``reset`` cue: forget what was shown.

In a scene (``charfmt.prompt.scene``), each chat's speaker picks the cast member whose stage map,
vocabulary and voice apply; ``I``/``E`` chats are spoken by the narrator when a narrator voice
is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from charfmt.events import ChatStart, Emotion, Event, Reset, WholeValue
from charfmt.speech import Sentence, SentenceSplitter
from charfmt.stagemap import StageMap, Voice
from charfmt.tags import TEXT_TAG

if TYPE_CHECKING:
    from charfmt.models import Reply
    from charfmt.prompt.character import Character

NARRATOR = "narrator"
"""The speaker of ``I``/``E`` chats the stage speaks (a narrator voice given)."""


@dataclass(frozen=True, slots=True)
class _CueBase:
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, ``kind`` first; fields that are not set (``None``, empty) are left out."""
        data = asdict(self)
        kind = data.pop("kind")
        return {"kind": kind, **{k: v for k, v in data.items() if v not in (None, []) or k == "chat"}}


@dataclass(frozen=True, slots=True)
class SetExpression(_CueBase):
    """Set the speaker's expression (``<emo>``): what each front end shows for ``emotion``."""

    chat: int
    emotion: str
    """The emotion key (the vocabulary's key where it names one)."""
    weight: float
    """The VRM expression's weight: the map's weight times the emotion's intensity (if any)."""
    intensity: float | None = None
    """The intensity the reply gave (``[joy:0.6]``), or ``None``."""
    sprite: str | None = None
    vrm: str | None = None
    live2d: list[str] = field(default_factory=list)
    live2d_motion: str | None = None
    vts_hotkey: str | None = None
    mapped: bool = False
    """Whether the stage map names this emotion (``False``: the fallback, or nothing mapped)."""
    speaker: str | None = None
    """Whose expression (a scene's cast member); ``None`` for the character."""
    kind: Literal["expression"] = field(default="expression", init=False)


@dataclass(frozen=True, slots=True)
class PlayMotion(_CueBase):
    """Play a motion for an action word (``tag`` ``None``) or a cue tag's value."""

    chat: int
    word: str
    """The action text or the cue value, as the reply wrote it."""
    tag: str | None = None
    """The cue tag (``motion``, ``sfx``); ``None`` for an action."""
    vrm: str | None = None
    live2d: str | None = None
    live2d_index: int | None = None
    vts_hotkey: str | None = None
    sprite: str | None = None
    mapped: bool = False
    """Whether the stage map names this word (``False``: the fallback, or nothing mapped)."""
    speaker: str | None = None
    kind: Literal["motion"] = field(default="motion", init=False)


@dataclass(frozen=True, slots=True)
class Speak(_CueBase):
    """Speak one sentence, as ``speaker``, with ``voice``."""

    chat: int
    segment: int
    text: str
    emotion: str | None = None
    action: str | None = None
    speaker: str | None = None
    voice: dict[str, Any] | None = None
    """The voice (``Voice`` fields that are set), or ``None`` where no voice is mapped."""
    silent: bool | None = None
    """``True`` where the text is punctuation only (``……``, ``！？``): shown, not sent to TTS."""
    kind: Literal["speak"] = field(default="speak", init=False)


@dataclass(frozen=True, slots=True)
class StageReset(_CueBase):
    """The stream was read again from the start: forget every cue so far (see ``charfmt.Reset``)."""

    kind: Literal["reset"] = field(default="reset", init=False)


StageCue = SetExpression | PlayMotion | Speak | StageReset
"""Every cue; switch on ``cue.kind``."""


class StageReader:
    """Feed it events; it returns the cues each event makes certain, in order."""

    def __init__(
        self,
        character: Character | None = None,
        *,
        cast: Mapping[str, Character] | None = None,
        narrator: Voice | None = None,
        max_length: int | None = None,
        bound: int | None = None,
    ) -> None:
        """``character``: whose stage map applies (a scene passes ``cast`` instead, by speaker name).

        ``narrator``: the voice ``I``/``E`` chats are spoken with (``None``: they are not spoken).
        ``max_length``: a sentence longer than this also ends at ``、`` or ``,`` (TTS starts early).
        ``bound``: the grammar's most characters of speech: a sentence cut there is not spoken
        (``SentenceSplitter``'s ``bound``).
        """
        from charfmt.prompt.character import Character  # noqa: PLC0415
        from charfmt.tags import DEFAULT_TAGS  # noqa: PLC0415

        if character is not None and not isinstance(character, Character):
            name = type(character).__name__
            raise TypeError(f"StageReader: character is a charfmt.Character (Character.load(path)), not {name}")
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)):
            raise TypeError(f"StageReader: max_length is an int or None, not {type(max_length).__name__}")
        self.character = character
        self.cast: dict[str, Character] = dict(cast or {})
        self.narrator = narrator
        tables = [c.tags for c in (character, *self.cast.values()) if c is not None] or [DEFAULT_TAGS]
        speech = {spec.name for table in tables for spec in table.with_role("speech")}
        if narrator is not None:
            speech.add(TEXT_TAG)
        self._splitter = SentenceSplitter(tags=speech, max_length=max_length, bound=bound)
        self._speaker: dict[int, str | None] = {}
        self._voice: dict[int, Voice | None] = {}
        self._type: dict[int, str] = {}

    def feed(self, event: Event) -> list[StageCue]:
        """The cues ``event`` makes certain (most events make none)."""
        if not isinstance(event, _EVENT_TYPES):
            raise TypeError(f"StageReader.feed takes a charfmt event (StreamParser.feed's), not {type(event).__name__}")
        out: list[StageCue] = []
        if isinstance(event, ChatStart):
            speaker = getattr(event, "speaker", None)
            self._speaker[event.chat] = speaker
            self._type[event.chat] = event.type
            self._voice[event.chat] = self._base_voice(event.chat)
        elif isinstance(event, Emotion):
            out.append(self._expression(event))
        elif isinstance(event, WholeValue) and event.text.strip():  # an action, a cue, a new role's: a motion
            out.append(self._motion(event.chat, event.text, event.named_tag))
        elif isinstance(event, Reset):
            self._speaker.clear()
            self._voice.clear()
            self._type.clear()
            out.append(StageReset())
        out.extend(self._speak(s) for s in self._splitter.feed(event))
        return out

    def cut_off(self) -> None:
        """The stream was cut (its token budget ran out): its unfinished sentences are not spoken."""
        self._splitter.cut_off()

    def close(self) -> list[StageCue]:
        """The cues of the sentences left unspoken (a stream that ended mid-sentence): one ``say`` cue each."""
        return [self._speak(s) for s in self._splitter.close()]

    def _who(self, chat: int) -> Character | None:
        speaker = self._speaker.get(chat)
        if speaker is not None and speaker in self.cast:
            return self.cast[speaker]
        return self.character

    def _stage(self, chat: int) -> StageMap:
        who = self._who(chat)
        return who.stage if who is not None and who.stage is not None else _EMPTY

    def _base_voice(self, chat: int) -> Voice | None:
        if self._type.get(chat, "C") != "C":
            return self.narrator
        return self._stage(chat).voice

    def _expression(self, event: Emotion) -> SetExpression:
        who = self._who(event.chat)
        key = event.text
        sprite = None
        if who is not None:
            key = who.vocabulary.resolve(event.text) or event.text
            sprite = next((e.sprite for e in who.emotions if e.key == key), None)
        stage = self._stage(event.chat)
        expression, mapped = stage.expression(key, sprite)
        voice = expression.voice.over(stage.voice) if expression.voice is not None else stage.voice
        self._voice[event.chat] = voice
        weight = expression.weight if event.intensity is None else round(expression.weight * event.intensity, 6)
        return SetExpression(
            event.chat,
            key,
            weight,
            event.intensity,
            expression.sprite,
            expression.vrm,
            list(expression.live2d),
            expression.live2d_motion,
            expression.vts_hotkey,
            mapped,
            self._speaker.get(event.chat),
        )

    def _motion(self, chat: int, word: str, tag: str | None) -> PlayMotion:
        motion, mapped = self._stage(chat).motion(word, tag)
        speaker = self._speaker.get(chat)
        if motion is None:
            return PlayMotion(chat, word, tag, mapped=mapped, speaker=speaker)
        return PlayMotion(
            chat,
            word,
            tag,
            motion.vrm,
            motion.live2d,
            motion.live2d_index,
            motion.vts_hotkey,
            motion.sprite,
            mapped,
            speaker,
        )

    def _speak(self, sentence: Sentence) -> Speak:
        voice = self._voice.get(sentence.chat)
        speaker = self._speaker.get(sentence.chat)
        who = self._who(sentence.chat)
        emotion = sentence.emotion
        if emotion is not None and who is not None:
            emotion = who.vocabulary.resolve(emotion) or emotion
        if speaker is None and self._type.get(sentence.chat, "C") != "C":
            speaker = NARRATOR
        return Speak(
            sentence.chat,
            sentence.segment,
            sentence.text,
            emotion,
            sentence.action,
            speaker,
            voice.model_dump(exclude_none=True) if voice is not None else None,
            None if any(ch.isalnum() for ch in sentence.text) else True,
        )


_EMPTY = StageMap()
_EVENT_TYPES: tuple[type, ...] = (*getattr(Event, "__args__", ()), WholeValue)


def stage_cues(
    events: Iterable[Event] | Reply,
    character: Character | None = None,
    *,
    cast: Mapping[str, Character] | None = None,
    narrator: Voice | None = None,
    max_length: int | None = None,
) -> Iterator[StageCue]:
    """The stage cues of ``events`` (or of a whole ``Reply``, read with the character's tags), in order."""
    from charfmt.models import Reply  # noqa: PLC0415 (the reader itself needs no models)

    if isinstance(events, (str, bytes)):
        raise TypeError("stage_cues takes events or a Reply, not raw text: parse it first (charfmt.parse(text))")
    reader = StageReader(character, cast=cast, narrator=narrator, max_length=max_length)
    if isinstance(events, Reply):
        table = character.tags if character is not None else None
        if table is None and cast:
            table = next(iter(cast.values())).tags
        events = events.events(table)
    for event in events:
        yield from reader.feed(event)
    yield from reader.close()
