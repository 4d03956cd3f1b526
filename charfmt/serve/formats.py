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

Each formatter turns events into text pieces; a turn's :class:`Answer` is made from the events of
its stream, so a streamed answer and the same reply answered whole are one string, the chats in
the order the model wrote them (``canonical`` presents them sorted by ``order``, as ``CF113`` says).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from charfmt.events import Action, ChatStart, Cue, Emotion, Event, Reasoning, Reset, TextDelta
from charfmt.serve.continuation import Prefix

if TYPE_CHECKING:
    from charfmt.models import Reply, Vocabulary
    from charfmt.serve.continuation import Continuation
    from charfmt.tags import TagTable

FORMATS: Final = ("canonical", "tags", "speech", "airi")
"""Every ``--reply-format``, the default first."""


class Formatter:
    """Events in, the text a front end shows out (``tags``, ``speech`` or ``airi``).

    Each chat that shows something is one line (no empty lines: a narrator's ``I``/``E`` chat,
    which holds no speech, shows nothing); the pieces of one chat are kept apart by a space, so
    a lost line break never glues two words. With ``speakers`` (a scene), each line starts with
    its speaker's id and ``": "``. The text never starts or ends with a separator, so a streamed
    answer and ``whole`` are the same string.
    """

    def __init__(
        self, name: str, tags: TagTable, *, speakers: bool = False, emotions: Mapping[str, str] | None = None
    ) -> None:
        if name not in FORMATS[1:]:
            raise ValueError(f"no event formatter for {name!r}")
        self.name = name
        self.speakers = speakers
        self._emotions = emotions or {}  # the front end's name of an emotion key (``charfmt.serve.emotion_names``)
        self._table = _SHOWN[name]
        self._speech = {spec.name for spec in tags.with_role("speech")}
        self._shown = False  # anything shown yet (a later line starts with a line break)
        self._line = ""  # what the chat's first shown piece starts with: a line break, the speaker
        self._in_line = False  # this chat has shown something
        self._gap = ""  # what goes before the chat's next piece (a space after a marker or a segment)
        self._segment: tuple[int, int] | None = None  # the segment the last speech text came from
        self._last_space = False  # the last piece shown ends with a space

    def feed(self, event: Event | object) -> str:
        """The text ``event`` adds (often ``""``; what is no event, such as a turn's raw text, adds none)."""
        name = self.name
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
        if isinstance(event, _MARKED) and name != "speech":
            if name == "tags" and self._in_line and not self._gap:
                self._gap = " "  # ``hi *waves*``, not ``hi*waves*``
            return self._show(self._marker(event), " " if name == "tags" else "")
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

    def _marker(self, event: Emotion | Action | Cue) -> str:
        shown = self._emotions.get(event.text, event.text) if isinstance(event, Emotion) else event.text
        text = shown.translate(self._table)
        if self.name == "tags":
            if isinstance(event, Emotion):
                return f"[{text}]"
            return f"*{text}*" if isinstance(event, Action) else f"[{event.tag}:{text}]"
        if isinstance(event, Emotion):
            intensity = 1 if event.intensity is None else event.intensity
            return _act({"emotion": {"name": text, "intensity": intensity}})
        return _act({"motion": text} if isinstance(event, Action) else {event.tag: text})


_MARKED: Final = (Emotion, Action, Cue)
"""The events shown as markers (``[joy]``, ``*waves*``, ``<|ACT:...|>``), not as speech."""

_BREAKS: Final = dict.fromkeys("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029", " ")
"""Each line break ``str.splitlines`` knows, in speech, a space: a chat stays one line."""
_SHOWN: Final = {
    "tags": str.maketrans({**_BREAKS, "[": "［", "]": "］", "*": "＊", "【": "〖", "】": "〗"}),
    "speech": str.maketrans(_BREAKS),
    "airi": str.maketrans({**_BREAKS, "|": "｜"}),
}
"""What each format writes in place of a character of the reply's text (speech, a marker's text): line
breaks as spaces, and the format's own marker characters (``[joy]``, ``*waves*``, ``【疑惑】``; AIRI's
``<|ACT:…|>``) as their full-width look-alikes, so no front end (nor charfmt, reading the answer back
as history) takes the character's words for a cue. Each character on its own: a chunk cut anywhere
reads as the whole does."""


_READ_BACK: Final = {
    "tags": str.maketrans({"［": "[", "］": "]", "＊": "*", "〖": "【", "〗": "】"}),
    "speech": str.maketrans({}),
    "airi": str.maketrans({"｜": "|"}),
}
"""What ``read_answer`` undoes: the look-alikes ``_SHOWN`` wrote for the format's own marker characters."""
_MARKERS: Final = {
    "tags": re.compile(r"\[([^\[\]\n]+)\]|\*([^*\n]+)\*"),
    "airi": re.compile(r"<\|ACT:(\{[^|\n]*\})\|>"),
}
"""The markers each format writes: ``[joy]``, ``[voice:soft]``, ``*waves*``; ``<|ACT:{...}|>``."""
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
    from charfmt.models import Chat, Reply  # noqa: PLC0415

    head = text.lstrip()[:6]
    if name not in _READ_BACK or head[:1] == "{" or (head[:1] == "<" and head != "<|ACT:"):  # JSON, tags: lenient
        return None
    chats: list[Chat] = []
    for line in text.splitlines():
        speaker, words = None, line
        if speakers is not None and (m := _SPEAKER.match(line)) and m.group(1) in speakers:
            speaker, words = m.group(1), line[m.end() :]
        segments = _segments(name, words, tags, vocabulary, emotions or {})
        if segments:
            try:
                chats.append(Chat(type="C", order=len(chats) + 1, segments=segments, speaker=speaker))
            except ValueError:
                return None
    return Reply(chats=chats) if chats else None


def _segments(
    name: str, line: str, tags: TagTable, vocabulary: Vocabulary | None, emotions: Mapping[str, str]
) -> list[Any]:
    """The elements of one line of an answer in format ``name``."""
    from charfmt.models import Segment  # noqa: PLC0415

    back, speech, emotion = _READ_BACK[name], tags.speech.name, tags.emotion.name
    out: list[Segment] = []

    def said(words: str) -> None:
        if words.strip():
            out.append(Segment(tag=speech, text=words.strip().translate(back)))

    markers = _MARKERS.get(name)
    at = 0
    for m in markers.finditer(line) if markers is not None else ():
        said(line[at : m.start()])
        at = m.end()
        elements = _marker(name, m, tags)
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


def _marker(name: str, m: re.Match[str], tags: TagTable) -> list[tuple[str, str, float | None]]:
    """What one marker shows: its elements as (tag, text, intensity); none where it is words after all."""
    emotion = tags.emotion.name
    action = tags.action.name if tags.action is not None else None
    if name == "tags":
        if m.group(2) is not None:
            return [(action, m.group(2), None)] if action is not None else []
        tag, colon, value = m.group(1).partition(":")
        if colon and tag in tags and tag != emotion:
            return [(tag, value, None)]
        return [(emotion, m.group(1), None)]
    try:
        data = json.loads(m.group(1))
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    out: list[tuple[str, str, float | None]] = []
    for key, value in data.items():  # AIRI's: {"emotion": {"name", "intensity"}} or a name; {"motion": ...}
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


def _act(value: dict[str, object]) -> str:
    return f"<|ACT:{json.dumps(value, ensure_ascii=False, separators=(',', ':'))}|>"


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

    def __init__(
        self, name: str, tags: TagTable, *, speakers: bool = False, streamed: bool = True,
        emotions: Mapping[str, str] | None = None, continuation: Continuation | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.tags = tags
        self.speakers = speakers
        self.streamed = streamed
        self.emotions = emotions
        self.continuation = continuation
        self.events = name != "canonical"
        """Whether the answer is made from the turn's events (else from the reply, at the end)."""
        self._formatter = self._new_formatter() if self.events else None
        self._parts: list[str] = []
        self._shown = ""  # what the front end shows already (a continue's reply so far), in this format
        self._reread = False  # a Reset came (an answer given whole: the text after it is the whole reply)
        self._thought = ""  # the reasoning forwarded so far
        self._round = ""  # the reasoning seen since the last Reset
        self._unsaid = ""  # reasoning not yet taken by ``reasoning()``

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
    from charfmt.events import reply_events  # noqa: PLC0415
    from charfmt.writer import canonical_form, dumps  # noqa: PLC0415

    if name == "canonical":
        return dumps(canonical_form(reply, tags=tags))
    formatter = Formatter(name, tags, speakers=speakers, emotions=emotions)
    return "".join(formatter.feed(e) for e in reply_events(reply, tags))
