"""What the character says, in the shape each front end reads (``--reply-format``).

``canonical``
    the reply's JSON (``{"chats": [...]}``), repaired: streamed, it comes whole at the end (the
    repaired form is known only then), the same string a non-streamed answer carries.
``tags``
    inline ``[joy] Hello!`` (aituber-kit, Open-LLM-VTuber): the emotion in brackets before the
    speech, an action as ``*waves*`` (what charfmt's lenient reader reads back as an action).
``speech``
    only what is spoken: the speech tags' text, chats on their own lines.

In ``tags``, ``speech`` and ``airi`` each chat that says something is one line, its pieces kept
apart by a space; a narrator's ``I``/``E`` chat says nothing there (it is no character's speech:
read it from ``canonical`` or ``/v1/turn``). Serving a scene, each line starts with its speaker's
id, ``rex: [annoyed] No.``: neither aituber-kit nor Open-LLM-VTuber reads a speaker from the
text, so the prefix is plain text they show, and a front end that splits lines can route them.
``airi``
    AIRI's markers: ``<|ACT:{"emotion":{"name":"joy","intensity":1}}|>`` before the speech, an
    action as ``<|ACT:{"motion":"waves"}|>``.

The text never forms the format's own markers: in ``tags``, a ``[``, ``]``, ``*``, ``【`` or ``】`` of
the speech or of an action is written full-width (``［joy］``, ``＊``, ``〖``, ``〗``); in ``airi``,
a ``|`` (``｜``). A front end would read them as cues (``[angry]`` in what the character says is
no expression), and charfmt reading the answer back as history would too.

Each format is one row of :data:`REPLY_FORMATS` (a :class:`ReplyFormat`: how it shows a whole value,
the look-alikes that keep the text from forming its markers, how it reads its markers back, the
emotion names its front ends know); the formatter, the reader of answers sent back, the emotion
names (``charfmt.serve.emotion_names``) and ``--reply-format``'s choices and help read the table.
A new format is one row (and its tests).

Each formatter turns events into text pieces; a turn's :class:`Answer` is made from the events of
its stream, so a streamed answer and the same reply answered whole are one string, the chats in
the order the model wrote them (``canonical`` presents them sorted by ``order``, as ``CF113`` says).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Final

from charfmt.events import Action, ChatStart, Emotion, Event, Reasoning, Reset, TextDelta, WholeValue, reply_events
from charfmt.models import Chat, Reply, Segment
from charfmt.serve.continuation import Prefix
from charfmt.writer import canonical_form, dumps

if TYPE_CHECKING:
    from charfmt.models import Reply, Vocabulary
    from charfmt.serve.continuation import Ask, Continuation
    from charfmt.serve.turns import Engine
    from charfmt.tags import TagTable

Element = tuple[str, str, float | None]
"""What a marker read back shows: one element as (tag, text, intensity)."""

_BREAKS: Final = dict.fromkeys("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029", " ")
"""Each line break ``str.splitlines`` knows, in speech, a space: a chat stays one line."""


@dataclass(frozen=True, slots=True)
class ReplyFormat:
    """One ``--reply-format``: all that sets it apart from the others (one row of :data:`REPLY_FORMATS`)."""

    name: str
    """The ``--reply-format`` value."""
    help: str
    """What it answers with, in a few words (``--reply-format``'s help)."""
    look_alikes: Mapping[str, str] = field(default_factory=dict)
    """Each character of the format's own markers, and the look-alike written in its place in the reply's
    text (speech, a marker's text: ``[`` → ``［``), so that no front end (nor charfmt, reading the answer
    back as history) takes the character's words for a cue; read back, each look-alike is its character."""
    marker: Callable[[WholeValue, str, str], str] | None = None
    """How a whole value (an emotion, an action, a cue, a new role's) is shown, given its text as shown and
    its tag (``WholeValue.tag_in``: an event that names none has its role's tag; ``None``: it is not). A
    format that shows markers writes emotion names: each key by the name its front ends know."""
    spaced: bool = False
    """A marker is kept apart from the words around it by a space (``hi *waves* there``); else written
    against them."""
    markers: re.Pattern[str] | None = None
    """The markers it writes, as found in an answer sent back (``None``: it writes none)."""
    opens: str = ""
    """What its markers begin with where that is ``<`` (AIRI's ``<|ACT:``): an answer sent back that begins
    with any other ``<`` is charfmt's own tags, read leniently."""
    read_marker: Callable[[re.Match[str], TagTable], list[Element]] | None = None
    """What one of ``markers`` shows: its elements (none: it is words after all)."""
    emotion_names: tuple[str, ...] | None = None
    """The emotion names its front ends know (``None``: any name; the keys are kept unless the character's
    ``[stage.formats.NAME]`` says otherwise; ``charfmt.serve.emotion_names``)."""
    from_reply: Callable[[Reply, TagTable], str] | None = None
    """The answer written from the whole reply, at the end (``canonical``'s JSON), not from events
    (``None``: from events, as they come). Such a format is never read back: an answer in it is read leniently."""
    shown: dict[int, str] = field(init=False)
    """The ``str.translate`` table of the reply's text: line breaks as spaces, ``look_alikes``. Each character
    on its own, so a chunk cut anywhere reads as the whole does."""
    read_back: dict[int, str] = field(init=False)
    """The ``str.translate`` table ``read_answer`` undoes ``look_alikes`` with."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", str.maketrans({**_BREAKS, **self.look_alikes}))
        object.__setattr__(self, "read_back", str.maketrans({v: k for k, v in self.look_alikes.items()}))

    @property
    def writes_emotions(self) -> bool:
        """Whether it writes emotion names (as its markers): ``tags``, ``airi``; not ``canonical``, ``speech``."""
        return self.marker is not None


def _canonical(reply: Reply, tags: TagTable) -> str:
    """The reply's canonical JSON, repaired."""

    return dumps(canonical_form(reply, tags=tags))


def _tags_marker(event: WholeValue, text: str, tag: str) -> str:
    """``[joy]``, ``*waves*``, ``[voice:soft]`` (a cue or a new role's value: its tag, then its value)."""
    if isinstance(event, Emotion):
        return f"[{text}]"
    return f"*{text}*" if isinstance(event, Action) else f"[{tag}:{text}]"


def _read_tags_marker(m: re.Match[str], tags: TagTable) -> list[Element]:
    """``*waves*``: an action (where the table has an action tag); ``[tag:value]``: a tag's value; ``[joy]``:
    an emotion."""
    if m.group(2) is not None:
        return [(tags.action.name, m.group(2), None)] if tags.action is not None else []
    emotion = tags.emotion.name
    tag, colon, value = m.group(1).partition(":")
    if colon and tag in tags and tag != emotion:
        return [(tag, value, None)]
    return [(emotion, m.group(1), None)]


def _act(value: dict[str, object]) -> str:
    return f"<|ACT:{json.dumps(value, ensure_ascii=False, separators=(',', ':'))}|>"


def _airi_marker(event: WholeValue, text: str, tag: str) -> str:
    """``<|ACT:{"emotion":{"name":"happy","intensity":1}}|>``, ``<|ACT:{"motion":"waves"}|>``,
    ``<|ACT:{"sfx":"door"}|>`` (a cue or a new role's value: its tag, then its value)."""
    if isinstance(event, Emotion):
        intensity = 1 if event.intensity is None else event.intensity
        return _act({"emotion": {"name": text, "intensity": intensity}})
    return _act({"motion": text} if isinstance(event, Action) else {tag: text})


def _read_airi_marker(m: re.Match[str], tags: TagTable) -> list[Element]:
    """AIRI's: ``{"emotion": {"name", "intensity"}}`` or a name; ``{"motion": ...}``; ``{tag: value}`` (several
    keys in one)."""
    try:
        data = json.loads(m.group(1))
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    emotion = tags.emotion.name
    action = tags.action.name if tags.action is not None else None
    out: list[Element] = []
    for key, value in data.items():
        if key == "emotion" and isinstance(value, dict) and isinstance(value.get("name"), str):
            number = value.get("intensity")
            intensity = float(number) if isinstance(number, int | float) and not isinstance(number, bool) else None
            out.append((emotion, value["name"], None if intensity == 1 else intensity))
        elif key == "emotion" and isinstance(value, str):
            out.append((emotion, value, None))
        elif key == "motion" and isinstance(value, str) and action is not None:
            out.append((action, value, None))
        elif isinstance(value, str) and key in tags:
            out.append((key, value, None))
        else:
            return []  # (a marker charfmt does not write: its words stay)
    return out


AIRI_EMOTIONS: Final = ("happy", "sad", "angry", "think", "surprised", "awkward", "question", "curious", "neutral")
"""The emotion names AIRI plays (its ``Emotion`` enum; ``packages/stage-ui/src/constants/emotions.ts``); any
other name it ignores."""

REPLY_FORMATS: Final[dict[str, ReplyFormat]] = {
    row.name: row
    for row in (
        ReplyFormat("canonical", "the reply's JSON", from_reply=_canonical),
        ReplyFormat(
            "tags", "[joy] tags", look_alikes={"[": "［", "]": "］", "*": "＊", "【": "〖", "】": "〗"},
            marker=_tags_marker, spaced=True, markers=re.compile(r"\[([^\[\]\n]+)\]|\*([^*\n]+)\*"),
            read_marker=_read_tags_marker,
        ),
        ReplyFormat("speech", "speech only"),
        ReplyFormat(
            "airi", "AIRI markers", look_alikes={"|": "｜"}, marker=_airi_marker,
            markers=re.compile(r"<\|ACT:(\{[^|\n]*\})\|>"), opens="<|ACT:", read_marker=_read_airi_marker,
            emotion_names=AIRI_EMOTIONS,
        ),
    )
}  # fmt: skip
"""Every ``--reply-format``, one row each, the default first: a new format is one row here (and its tests)."""

REPLY_FORMAT_NAMES: Final = tuple(REPLY_FORMATS)
"""Every ``--reply-format``'s name, the default first."""

REPLY_FORMAT_HELP: Final = "what /v1/chat/completions answers: " + ", ".join(
    f"{row.name} ({row.help})" for row in REPLY_FORMATS.values()
)
"""``--reply-format``'s help, from the rows."""


def reply_format(name: str) -> ReplyFormat:
    """The row of ``--reply-format`` ``name`` (a ``ValueError`` naming them all where there is none)."""
    row = REPLY_FORMATS.get(name)
    if row is None:
        raise ValueError(f"unknown reply format {name!r}; expected one of {', '.join(REPLY_FORMAT_NAMES)}")
    return row


class Formatter:
    """Events in, the text a front end shows out (a format made from events: ``tags``, ``speech``, ``airi``).

    Each chat that shows something is one line (no empty lines: a narrator's ``I``/``E`` chat,
    which holds no speech, shows nothing); the pieces of one chat are kept apart by a space, so
    a lost line break never glues two words. With ``speakers`` (a scene), each line starts with
    its speaker's id and ``": "``. The text never starts or ends with a separator, so a streamed
    answer and ``whole`` are the same string.
    """

    def __init__(
        self, name: str, tags: TagTable, *, speakers: bool = False, emotions: Mapping[str, str] | None = None
    ) -> None:
        row = REPLY_FORMATS.get(name)
        if row is None or row.from_reply is not None:
            raise ValueError(f"no event formatter for {name!r}")
        self.name = name
        self.row = row
        self.speakers = speakers
        self._emotions = emotions or {}  # the front end's name of an emotion key (``charfmt.serve.emotion_names``)
        self._table = row.shown
        self._speech = {spec.name for spec in tags.with_role("speech")}
        self._tags = tags
        self._shown = False  # anything shown yet (a later line starts with a line break)
        self._line = ""  # what the chat's first shown piece starts with: a line break, the speaker
        self._in_line = False  # this chat has shown something
        self._gap = ""  # what goes before the chat's next piece (a space after a marker or a segment)
        self._segment: tuple[int, int] | None = None  # the segment the last speech text came from
        self._last_space = False  # the last piece shown ends with a space

    def feed(self, event: Event | object) -> str:
        """The text ``event`` adds (often ``""``; what is no event, such as a turn's raw text, adds none)."""
        if isinstance(event, TextDelta):  # (the most frequent event first)
            if event.tag not in self._speech or not event.text:
                return ""
            where = (event.chat, event.segment)
            if self._segment is not None and self._segment != where and not self._gap:
                self._gap = " "  # a new segment of speech: kept apart from the last one
            self._segment = where
            return self._show(event.text.translate(self._table), "")
        if isinstance(event, ChatStart):
            self._start(event.speaker)
            return ""
        if isinstance(event, WholeValue):  # (any role's whole value: an emotion, an action, a cue)
            return self._marker(event)
        if isinstance(event, Reset):  # what was shown cannot be taken back: start a new line
            self._start(None)
        return ""

    def _start(self, speaker: str | None) -> None:
        self._line = ("\n" if self._shown else "") + (f"{speaker}: " if self.speakers and speaker else "")
        self._in_line, self._gap, self._segment = False, "", None

    def _show(self, text: str, gap_after: str) -> str:
        if not self._in_line:
            out, self._in_line, self._shown = self._line + text, True, True
        else:
            gap = self._gap if not self._last_space else ""
            out = gap + text
        self._gap = gap_after
        self._last_space = out[-1:].isspace()
        return out

    def _marker(self, event: WholeValue) -> str:
        """The marker the row writes for ``event`` (none, where it writes none): an emotion by its shown name."""
        write, spaced = self.row.marker, self.row.spaced
        if write is None or not event.text.strip():  # an empty action or cue means nothing: no ``**``
            return ""
        if spaced and self._in_line and not self._gap:
            self._gap = " "  # ``hi *waves*``, not ``hi*waves*``
        shown = self._emotions.get(event.text, event.text) if isinstance(event, Emotion) else event.text
        return self._show(write(event, shown.translate(self._table), event.tag_in(self._tags)), " " if spaced else "")


_SPEAKER: Final = re.compile(r"(\S+?): ")


def read_answer(
    name: str,
    text: str,
    tags: TagTable,
    *,
    speakers: Collection[str] | None = None,
    vocabulary: Vocabulary | None = None,
    emotions: Mapping[str, str] | None = None,
) -> Reply | None:
    """An answer this server gave in format ``name`` read back as the reply it showed (the inverse of the
    formatter: each line a chat, each marker its element, the words between them speech), or ``None``
    where ``text`` is not in that form (``canonical``; JSON or tags sent back): read it leniently then.

    A front end without a session sends its history back as it showed it; the lenient reader knows
    no AIRI markers, and would take the words of ``［joy］`` for a cue. ``speakers``: a scene's cast
    (a line's ``id: `` prefix is its speaker where the id is one of them); ``vocabulary``: an emotion
    written as one of its aliases is its key, as the player's shorthand reads it; ``emotions``: per name
    the format writes, its key (``EmotionNames.back``).
    """

    row = REPLY_FORMATS.get(name)
    head = text.lstrip()[:8]
    own = bool(row is not None and row.opens and head.startswith(row.opens))
    if row is None or row.from_reply is not None or head[:1] == "{" or (head[:1] == "<" and not own):  # JSON, tags
        return None
    chats: list[Chat] = []
    for line in text.splitlines():
        speaker, words = None, line
        if speakers is not None and (m := _SPEAKER.match(line)) and m.group(1) in speakers:
            speaker, words = m.group(1), line[m.end() :]
        segments = _segments(row, words, tags, vocabulary, emotions or {})
        if segments:
            try:
                chats.append(Chat(type="C", order=len(chats) + 1, segments=segments, speaker=speaker))
            except ValueError:
                return None
    return Reply(chats=chats) if chats else None


def _segments(
    row: ReplyFormat, line: str, tags: TagTable, vocabulary: Vocabulary | None, emotions: Mapping[str, str]
) -> list[Any]:
    """The elements of one line of an answer in format ``row``."""

    back, speech, emotion = row.read_back, tags.speech.name, tags.emotion.name
    out: list[Segment] = []

    def said(words: str) -> None:
        if words.strip():
            out.append(Segment(tag=speech, text=words.strip().translate(back)))

    def unknown(value: str) -> bool:  # an emotion no key or name of the vocabulary: the writer's own [word]
        return vocabulary is not None and vocabulary.resolve(emotions.get(value, value)) is None

    at = 0
    for m, elements in _markers(row, line, tags):
        if any(tag == emotion and unknown(value.translate(back)) for tag, value, _ in elements):
            continue  # (text, as a user turn reads it: "Welcome [aboard]." keeps its brackets)
        said(line[at : m.start()])
        at = m.end()
        if not elements:
            said(m.group(0))
        for tag, value, intensity in elements:
            shown = value.translate(back)
            if tag == emotion:
                shown = emotions.get(shown, shown)
                shown = (vocabulary.resolve(shown) or shown) if vocabulary is not None else shown
            out.append(Segment(tag=tag, text=shown, intensity=intensity))
    said(line[at:])
    return out


def _markers(row: ReplyFormat, line: str, tags: TagTable) -> Iterator[tuple[re.Match[str], list[Element]]]:
    """Each of ``row``'s markers in ``line``, with the elements it shows."""
    markers, read = row.markers, row.read_marker
    if markers is not None and read is not None:
        for m in markers.finditer(line):
            yield m, read(m, tags)


@dataclass(eq=False, repr=False, slots=True)
class Answer:
    """A turn's answer in a reply format, made from its events as they come: streamed or whole, one string.

    ``feed`` each batch of the turn's pieces (its events among them) as it comes: the text it
    adds. ``end`` with the reply: what the answer has beyond what was fed (``canonical``: all of
    it, the repaired JSON known only then), after which ``text`` is the whole answer. A text
    format shows the chats in the order the model wrote them (a stream cannot show them in any
    other), so the answer is the same string streamed or not, sorted or not. The one difference:
    a damaged stream read again at its end (a ``Reset``, then the whole reply) cannot take back
    what a streamed answer showed, so there the reply follows on a new line; ``streamed=False``
    (an answer given whole) keeps only what follows the last ``Reset``.

    ``emotions``: the front end's name of each emotion key (``charfmt.serve.emotion_names``).
    ``continuation``: a continue: the answer is only what goes on from the reply so far (the turn's
    ``Prefix`` piece sets the formatter where the front end's text ends). The model's reasoning
    (``Reasoning`` events) is gathered apart: ``reasoning()`` is what came since it was last asked,
    said once even where a ``Reset`` says it again.
    """

    name: str
    tags: TagTable
    _: KW_ONLY
    speakers: bool = False
    streamed: bool = True
    emotions: Mapping[str, str] | None = None
    continuation: Continuation | None = None
    row: ReplyFormat = field(init=False)
    events: bool = field(init=False)
    """Whether the answer is made from the turn's events (else from the reply, at the end)."""
    _formatter: Formatter | None = field(init=False)
    _parts: list[str] = field(default_factory=list, init=False)
    _shown: str = field(default="", init=False)  # what the front end shows already (a continue's reply so far)
    _reread: bool = field(default=False, init=False)  # a Reset came (an answer given whole: what follows is all)
    _thought: str = field(default="", init=False)  # the reasoning forwarded so far
    _round: str = field(default="", init=False)  # the reasoning seen since the last Reset
    _unsaid: str = field(default="", init=False)  # reasoning not yet taken by ``reasoning()``

    def __post_init__(self) -> None:
        self.row = reply_format(self.name)
        self.events = self.row.from_reply is None
        self._formatter = self._new_formatter() if self.events else None

    def _new_formatter(self) -> Formatter:
        return Formatter(self.name, self.tags, speakers=self.speakers, emotions=self.emotions)

    @property
    def text(self) -> str:
        """The answer so far (whole, once ``end`` was called)."""
        return "".join(self._parts)

    def prime(self, events: Iterable[object]) -> None:
        """Set the formatter where the front end's own text ends: ``events`` shown already (a continue's)."""
        if self._formatter is not None:
            self._shown += "".join(self._formatter.feed(event) for event in events)

    def feed(self, pieces: Iterable[object]) -> str:
        """The text a batch of the turn's pieces adds (what is no event, such as the raw text, adds none)."""
        formatter = self._formatter
        out: list[str] = []
        for piece in pieces:
            if isinstance(piece, TextDelta):  # (the most frequent piece first)
                if formatter is not None:
                    out.append(formatter.feed(piece))
            elif isinstance(piece, Reasoning):
                self._reasoned(piece.text)
            elif isinstance(piece, Prefix):
                self.prime(piece.events)
                formatter = self._formatter
            elif isinstance(piece, Reset):
                self._round = ""
                if not self.streamed and formatter is not None:  # what follows is the whole reply: the answer
                    formatter = self._formatter = self._new_formatter()
                    self._parts.clear()
                    self._reread = True
                    out.clear()
                elif formatter is not None:
                    out.append(formatter.feed(piece))
            elif formatter is not None:
                out.append(formatter.feed(piece))
        text = "".join(out)
        if text:
            self._parts.append(text)
        return text

    def _reasoned(self, text: str) -> None:
        """More reasoning: what is new of it is to be said (after a ``Reset``, what was said already is not)."""
        self._round += text
        if self._round.startswith(self._thought):
            new = self._round[len(self._thought) :]
            self._thought = self._round
        else:  # (other reasoning than was said: said too, as it cannot be taken back)
            new = text
            self._thought += text
        self._unsaid += new

    def reasoning(self) -> str:
        """The reasoning that came since the last call (to forward as it comes)."""
        said, self._unsaid = self._unsaid, ""
        return said

    def end(self, reply: Reply) -> str:
        """What the answer has beyond what was fed, once the turn's ``reply`` is known.

        A text format: the reply's own text past what the events showed, where they showed its
        beginning (a stream whose events agree with the reply ends with nothing more); the
        reply's reasoning not gathered yet (``canonical``'s ``<think>``, read only now) is gathered.
        """
        if reply.reasoning and reply.reasoning.startswith(self._thought):
            self._reasoned(reply.reasoning[len(self._thought) :])
        going = self.continuation  # (whether prefilled or asked for: ``rest`` compares the reply with the one before)
        if going is not None and not self.events:
            target = whole(self.name, going.rest(reply), self.tags, speakers=self.speakers)
        else:
            target = whole(self.name, reply, self.tags, speakers=self.speakers, emotions=self.emotions)
            if going is not None and target.startswith(self._shown):
                target = target[len(self._shown) :]
        so_far = self.text
        if going is not None and self._reread and so_far.startswith(self._shown):  # the whole reply, read again
            so_far = so_far[len(self._shown) :]
            self._parts = [so_far] if so_far else []
        rest = target[len(so_far) :] if target.startswith(so_far) else ""
        if rest:
            self._parts.append(rest)
        return rest


def whole(
    name: str, reply: Reply, tags: TagTable, *, speakers: bool = False, emotions: Mapping[str, str] | None = None
) -> str:
    """``reply`` in format ``name``, its chats in display order (``speakers``: a scene's; ``emotions``: the
    front end's name of each emotion key): what a turn's :class:`Answer` is where the model wrote them in order."""

    write = reply_format(name).from_reply
    if write is not None:
        return write(reply, tags)
    formatter = Formatter(name, tags, speakers=speakers, emotions=emotions)
    return "".join(formatter.feed(e) for e in reply_events(reply, tags))


def served_answer(engine: Engine, *, streamed: bool, ask: Ask | None = None) -> Answer:
    """The answer a turn of ``engine`` gives, in the server's ``--reply-format``: a scene's lines by speaker, its
    emotions by the front end's names; ``ask``: a continue's (only what goes on), or the player's line asked for
    (in the player's shorthand, ``tags`` with the emotion keys, whatever the format). Every door builds its
    answer here."""
    if ask is not None and ask.impersonation is not None:
        return Answer("tags", engine.tags, streamed=streamed)
    return Answer(
        engine.settings.reply_format, engine.tags, speakers=engine.cast.speakers is not None, streamed=streamed,
        emotions=engine.names.names, continuation=ask.continuation if ask is not None else None,
    )  # fmt: skip
