"""A chat on a terminal: ``TerminalView`` shows a reply's stream events as a game would.

The sprite when the emotion is known, the action, the message typing out after the
character's name (in a scene, the speaker's), the inner voice dimmed, narration and game lines
marked, each complete sentence as text-to-speech would get it, stage cues, the model's own
reasoning dimmed on a line of its own, and the reply's diagnostics after it; while the model reads
the prompt, a "thinking" line with the time waited; the model's control and bidi characters
escaped (``charfmt._terminal``). ``charfmt chat`` shows its turns with it.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from charfmt._terminal import json_safe, visible

if TYPE_CHECKING:
    from charfmt.diagnostics import Diagnostic
    from charfmt.events import Event
    from charfmt.prompt.character import Character
    from charfmt.speech import CutSpeech, SentenceSplitter
    from charfmt.stage import StageReader
    from charfmt.tags import TagTable


@dataclass(frozen=True)
class PlainChatStyle:
    """How ``TerminalView`` shows a chat whose body is plain text (not the character speaking)."""

    role: str
    """What the line is: ``narration`` (no speaker) or ``event`` (a game or system line)."""
    prefix: str
    """What each of its lines starts with, so a pipe tells it from speech."""
    sgr: str
    """The ANSI style (SGR parameters) of the line on a terminal."""


PLAIN_CHAT_STYLES: Final[dict[str, PlainChatStyle]] = {
    "I": PlainChatStyle("narration", "~ ", "3"),
    "E": PlainChatStyle("event", "[event] ", "1"),
}
"""The view of each chat type whose body is plain text (``tags.CHAT_TYPES`` less ``TAGGED_TYPES``).

An ``I`` chat (information: what the story tells) is narration, shown with no speaker; an
``E`` chat (something that happened in the game) is a game line. Neither is speech."""

REASONING_PREFIX: Final = "  (reasoning) "
"""What the model's reasoning (``<think>``, a server's ``reasoning_content``) is typed after: dimmed, apart."""

RESET_LINE: Final = "(read again as a whole: the reply is shown anew)"
"""Shown where the stream takes back what it showed (a ``Reset``): what follows replaces it."""

_OTHER_PLAIN_CHAT: Final = PlainChatStyle("event", "[{type}] ", "1")
"""A plain chat of a type the table does not know: a game line that names its type."""

THINKING_TICK: Final = 1.0
"""Seconds between two updates of the "thinking" line."""

_CLEAR_LINE: Final = "\r\x1b[K"
"""Back to the start of the line and erase it (the "thinking" line goes before the reply shows)."""


MODEL_DID: Final = frozenset({"CF150", "CF610", "CF614", "CF616"})
"""Notes of what the model did, shown in full after its reply (not counted with the reader's repairs): its
speech cut at the bound (``CF150``), its reply cut off (``CF610``), its chats' orders missing or repeated
(``CF614``), no JSON at all (``CF616``)."""


def _one_line(text: str) -> str:
    """``text`` on one line: each run of whitespace holding a line break becomes one space."""
    return visible(re.sub(r"[ \t]*[\r\n][\s]*", " ", text.strip()))


@dataclass
class TerminalView:
    """Shows stream events as a game would: sprite, action, cues, typing speech, inner voice, sentences.

    Text is shown by its tag's role in the character's table: speech typed after the name
    (a second speech tag after the name and the tag), the hidden role as a dim ``(thinks)``
    line, a cue as ``[tag: value]``. A chat of plain text is shown by ``PLAIN_CHAT_STYLES``:
    an ``I`` chat as narration (``~ ``, no speaker), an ``E`` chat as a game line
    (``[event] ``). Each sentence text-to-speech would get is listed under the line it came
    from, before the next element's line. An action, a cue and a diagnostic take one line
    each; a line break inside typed text starts a line indented (or, in a plain chat,
    marked) as the first was. Terminal controls and bidi characters in the reply are escaped.
    Where the stream takes back what it showed (a ``Reset``), ``RESET_LINE`` says so before
    the reply is shown anew.
    """

    character: Character
    out: TextIO = field(default_factory=lambda: sys.stdout)
    show_sentences: bool = True
    color: bool | None = None
    """Style the inner voice, narration and events with ANSI codes (``None``: when ``out`` is a terminal)."""
    stage: StageReader | None = None
    """Also show each stage cue (``charfmt.stage``) as a JSON line, ``  (stage) {...}``, as it is decided
    (a cue decided while a line is being typed is shown once that line ends, so the line is not broken)."""
    max_length: int | None = None
    """A sentence for TTS longer than this also ends at ``、`` or ``,`` (``--max-length``)."""
    bound: int | None = None
    """The grammar's most characters of speech (``Bounds.max_chars``): speech cut there ends at its last
    whole word with ``…`` on screen, and its unfinished sentence is not listed for TTS (``None``: no bound)."""
    verbose: bool = True
    """Each diagnostic after the reply (``False``: its errors and what the model or server did, ``CF8xx``;
    one line counts the rest, the reader's repairs)."""
    cast: Mapping[str, Character] | None = None
    """A scene's cast: a chat is shown with its speaker's name and sprites (``None``: one character's view)."""
    tags: TagTable | None = None
    """The tag table the replies are read with (``None``: the character's; a scene: its cast's)."""
    tick: float = THINKING_TICK
    """Seconds between two updates of the "thinking" line."""

    def __post_init__(self) -> None:
        self._tags = self.tags if self.tags is not None else self.character.tags
        if self.stage is not None:
            self.show_sentences = False  # each sentence once: the stage's speak cue says it
        self._splitter = self._new_splitter()
        self._typing = False
        self._thinking = False  # the line being typed is the model's reasoning
        self._closing = ""  # what ends the line being typed (the end of its style)
        self._continued = ""  # what starts a line that a line break inside the typed text opens
        self._held = ""  # line breaks that end the text typed so far (written once more text follows)
        self._shown = False  # whether the line being typed shows any text yet
        self._wrote = False  # whether anything of this reply was shown yet
        self._types: dict[int, str] = {}  # the type of each chat begun so far, by its index
        self._said: list[str] = []  # sentences for text-to-speech, shown once the typing line ends
        self._staged: list[str] = []  # stage cues decided while a line was typed, shown once it ends
        self._notes: list[Diagnostic] = []  # the reply's diagnostics, shown after it
        self._speakers: dict[int, str | None] = {}  # who speaks each chat begun (a scene)
        self._cut = self._new_cut()  # speech not typed yet: a word that may be cut at the bound
        self._lock = threading.Lock()  # the "thinking" line's thread and the reply do not write at once
        if self.color is None:
            isatty = getattr(self.out, "isatty", None)
            self.color = bool(isatty and isatty())

    def _new_splitter(self) -> SentenceSplitter:
        from charfmt.speech import SentenceSplitter  # noqa: PLC0415 (import cost: every CLI command loads this module)

        return SentenceSplitter(tags=self._tags, max_length=self.max_length, bound=self.bound)

    def _new_cut(self) -> CutSpeech:
        from charfmt.speech import CutSpeech  # noqa: PLC0415 (import cost: every CLI command loads this module)

        return CutSpeech(self.bound, tags=self._tags)

    def _who(self, chat: int) -> Character | None:
        """Who speaks chat ``chat``: the character; in a scene, its speaker of the cast (``None``: a chat that names
        no speaker, or one off the cast: not the first member, whose name and sprites it would borrow)."""
        if not self.cast:
            return self.character
        return self.cast.get(self._speakers.get(chat) or "")

    def _name(self, chat: int) -> str:
        """The name a chat's speech is shown after: its speaker's, or in a scene the speaker id it names as it
        names it (``?`` where it names none)."""
        who = self._who(chat)
        return who.name if who is not None else (self._speakers.get(chat) or "?")

    # --- waiting for the first token --------------------------------------------------------------

    def thinking(self, who: str | None = None) -> Callable[[], None]:
        """Say, while the model reads the prompt, that ``who`` (the character) is thinking and for how long:
        on a terminal a line updated every ``tick`` seconds, erased when the reply starts. The stop."""
        isatty = getattr(self.out, "isatty", None)
        if not (isatty and isatty()):
            return _nothing
        done = threading.Event()
        name = visible(who if who is not None else self.character.name)
        started = time.perf_counter()

        def tick() -> None:
            while not done.wait(self.tick):
                with self._lock:
                    if done.is_set():
                        return
                    self.out.write(f"{_CLEAR_LINE}  ({name} is thinking… {time.perf_counter() - started:.0f} s)")
                    self.out.flush()

        with self._lock:
            self.out.write(f"  ({name} is thinking…)")
            self.out.flush()
        thread = threading.Thread(target=tick, name="charfmt-thinking", daemon=True)
        thread.start()

        def stop() -> None:
            if done.is_set():
                return
            with self._lock:
                done.set()
                self.out.write(_CLEAR_LINE)
                self.out.flush()
            thread.join()

        return stop

    def _line(self, text: str) -> None:
        self._end_typing()
        self._wrote = True
        self.out.write(text + "\n")
        self.out.flush()

    def _end_typing(self) -> None:
        self._thinking = False
        if self._typing:
            self.out.write(self._closing + "\n")
            self._typing, self._closing, self._held, self._shown = False, "", "", False
        for line in self._staged:
            self.out.write(line + "\n")
        self._staged.clear()
        for sentence in self._said:
            self.out.write(f"  (tts) {visible(sentence)}\n")
        self._said.clear()

    def _styled(self, sgr: str, prefix: str) -> str:
        """``prefix`` opening the style ``sgr`` on a terminal (closed by ``_closing``)."""
        if not self.color:
            return prefix
        self._closing = "\x1b[0m"
        return f"\x1b[{sgr}m{prefix}"

    def _start_typing(self, chat: int, tag: str) -> None:
        from charfmt.tags import TAGGED_TYPES  # noqa: PLC0415 (import cost: every CLI command loads this module)

        self._end_typing()
        spec = self._tags.get(tag)
        name = self._name(chat)
        kind = self._types.get(chat, "C")
        if kind not in TAGGED_TYPES:  # narration or a game line: nobody speaks it
            style = PLAIN_CHAT_STYLES.get(kind, _OTHER_PLAIN_CHAT)
            prefix = style.prefix.format(type=visible(kind))
            self.out.write(self._styled(style.sgr, prefix))
            self._continued = prefix
        elif spec is not None and not spec.shown:
            self.out.write(self._styled("2", "  (thinks) "))
            self._continued = " " * len("  (thinks) ")
        elif spec is not None and spec.name == self._tags.speech.name:
            self.out.write(f"{visible(name)}: ")
            self._continued = " " * (len(name) + 2)
        else:  # a second speech tag, or a tag the table does not know
            self.out.write(f"{visible(name)} ({visible(tag)}): ")
            self._continued = " " * (len(name) + len(tag) + 5)
        self._typing = True

    def _cues(self, cues: Sequence[Any]) -> None:
        for cue in cues:
            line = "  (stage) " + json_safe(json.dumps(cue.to_dict(), ensure_ascii=False))
            if self._typing:  # not in the middle of the typed line: after it
                self._staged.append(line)
            else:
                self._line(line)

    def _type(self, text: str) -> None:
        """More of the line being typed; a line break in it opens a continuation line.

        Line breaks at the start are dropped, and those at the end held until more text
        follows, so that no empty marked line is left before or after the text.
        """
        text = self._held + visible(text.replace("\r\n", "\n").replace("\r", "\n"))
        if not self._shown:  # the line opens with its first visible character
            text = text.lstrip()
        kept = text.rstrip("\n")
        self._held = text[len(kept) :]
        if kept:
            first, *more = kept.split("\n")
            self.out.write(
                first + "".join(f"\n{self._continued if line else self._continued.rstrip()}{line}" for line in more)
            )
            self._shown = self._wrote = True
        self.out.flush()

    def show(self, events: Sequence[Event]) -> None:
        with self._lock:
            for event in events:
                self._show(event)

    def _show(self, event: Event) -> None:
        if self._thinking and event.kind != "reasoning":  # the model's reasoning is over: its line ends
            self._end_typing()
        if self.stage is not None:
            self._cues(self.stage.feed(event))
        said = self._splitter.feed(event) if self.show_sentences else []
        for shown in self._cut.feed(event):  # speech a bound cut, ending at its last whole word
            self._display(shown)
        self._said += [s.text for s in said if any(ch.isalnum() for ch in s.text)]  # "……" is not spoken
        if event.kind == "segment_end":
            self._end_typing()

    def _display(self, event: Event) -> None:
        if event.kind == "chat_start":
            self._types[event.chat] = event.type
            self._speakers[event.chat] = getattr(event, "speaker", None)
        elif event.kind == "reset":  # the damaged reply, read again as a whole, contradicts what was shown
            self._types.clear()
            self._speakers.clear()
            self._notes.clear()
            if self._wrote:
                self._line(RESET_LINE)
        elif event.kind == "emotion":
            who = self._who(event.chat)
            key = (who.vocabulary.resolve(event.text) if who is not None else None) or event.text
            sprite = next((e.sprite for e in who.vocabulary.emotions if e.key == key), None) if who else None
            # (a sprite the emotion has; else the emotion as written: never a sprite's name made up from it)
            self._line(f"[sprite: {_one_line(sprite)}]" if sprite else f"[emotion: {_one_line(key)}]")
        elif event.kind in ("action", "cue") and not event.text.strip():
            pass  # an empty action or cue means nothing: no ``**`` line
        elif event.kind == "action":
            self._line(f"*{_one_line(event.text)}*")
        elif event.kind == "cue":
            self._line(f"[{_one_line(event.tag)}: {_one_line(event.text)}]")
        elif event.kind == "text":
            if not self._typing:
                self._start_typing(event.chat, event.tag)
            self._type(event.text)
        elif event.kind == "diagnostic":
            self._notes.append(event.diagnostic)  # after the reply: never between the sentences of a message
        elif event.kind == "reasoning":  # the model's own, before its reply: dimmed, never the character's
            if not self._thinking:
                self._end_typing()
                self.out.write(self._styled("2", REASONING_PREFIX))
                self._continued, self._typing, self._thinking = " " * len(REASONING_PREFIX), True, True
            self._type(event.text)

    def silent(self) -> None:
        """The reply holds no chats (``{"chats": []}``): say so, or the turn shows nothing at all."""
        with self._lock:
            self._line(f"({self.character.name} says nothing: no chats)")

    def bounded(self, bound: int | None) -> None:
        """The next reply's speech is bounded at ``bound`` characters (see ``bound``)."""
        if bound != self.bound:
            self.bound = bound
            self._splitter = self._new_splitter()
            self._cut = self._new_cut()

    def cut_off(self) -> None:
        """The reply was cut by its token budget: its unfinished sentences are not listed for TTS."""
        self._splitter.cut_off()
        self._cut.cut_off()
        if self.stage is not None:
            self.stage.cut_off()

    def note(self, diagnostics: Sequence[Diagnostic]) -> None:
        """More diagnostics of the reply (found once it was whole), shown with the others after it."""
        self._notes.extend(diagnostics)

    def finish(self) -> None:
        """The reply is complete: flush the last sentence, then its diagnostics; the next reply starts afresh."""
        with self._lock:
            for shown in self._cut.flush():
                self._display(shown)
            if self.show_sentences:
                self._said += [s.text for s in self._splitter.close() if any(ch.isalnum() for ch in s.text)]
            if self.stage is not None:
                self._cues(self.stage.close())
            self._end_typing()
            self._show_notes()
            self._splitter = self._new_splitter()
            self._cut = self._new_cut()
            self._types.clear()
            self._speakers.clear()
            self._wrote = False
            self.out.flush()

    def _show_notes(self) -> None:
        """The reply's diagnostics: each on its line (``verbose``); else each error and each note of what the
        model or its server did (``CF8xx``: a refusal, a tool call, a filter; ``MODEL_DID``: speech cut, no JSON,
        orders renumbered), and one line that counts the rest (the reader's repairs)."""
        notes, self._notes = self._notes, []
        shown = [
            d for d in notes if self.verbose or d.severity == "error" or d.code.startswith("CF8") or d.code in MODEL_DID
        ]
        for d in shown:
            self._line(f"! {d.severity} {d.code}: {_one_line(d.message)}")
        counted = [d for d in notes if d not in shown]
        if counted:
            codes = ", ".join(dict.fromkeys(d.code for d in counted))
            many = "s" if len(counted) > 1 else ""
            self._line(f"  ({len(counted)} more diagnostic{many} of the reply: {codes}; --verbose shows them)")


def _nothing() -> None:
    return None
