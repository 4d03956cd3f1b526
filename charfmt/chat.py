"""A chat turn with a character: ask a model for its reply, show it as it streams, keep the history.

Each turn renders the request with ``render_messages`` (history in canonical form), sends it
to the model with the reply grammar (bounded to ``--max-tokens``, so a constrained reply
always closes) or without it, feeds the streamed text to a ``StreamParser`` and shows the
events as they arrive: the sprite when the emotion is known, the action, the message typing
out, each complete sentence as text-to-speech would get it, and any diagnostic.

- ``take_turn``: one turn; ``run``: the loop of turns ``charfmt chat`` runs (``charfmt.cli.chat``).
- The grammar's bounds for a character within a token budget: ``charfmt.constrain.budget``.
- The model clients (``local_model``, ``endpoint_model``: ``charfmt.llm._model_clients``) and the
  terminal view (``TerminalView``: ``charfmt._chat_view``) are importable from here as well.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TextIO

from charfmt._chat_view import PLAIN_CHAT_STYLES, RESET_LINE, PlainChatStyle, TerminalView
from charfmt._terminal import visible
from charfmt.diagnostics import CharfmtError
from charfmt.llm._model_clients import (
    API_KEY_ENV,
    DEFAULT_MAX_TOKENS,
    FORMAT_BY_ARCHITECTURE,
    NAMED_SERVERS,
    TEMPLATE_KEY,
    ContextFull,
    Generate,
    NoChatTemplate,
    TurnStats,
    chat_formats,
    chat_prompt,
    endpoint_model,
    endpoint_url,
    fold_system,
    has_system_role,
    llama_logs,
    local_model,
    template_warning,
)
from charfmt.llm._replies import UpstreamError

if TYPE_CHECKING:
    from pathlib import Path

    from charfmt.llm._sdk_chunks import ChunkParts, Reader
    from charfmt.models import Reply
    from charfmt.prompt._token_fit import Counter, TokenCounter
    from charfmt.prompt.character import Character, Exchange
    from charfmt.prompt.lorebook import Lorebook
    from charfmt.prompt.scene import Scene
    from charfmt.prompt.userinput import UserTurn
    from charfmt.stage import StageReader
    from charfmt.stream import StreamParser

# --- one turn -----------------------------------------------------------------------------------


@dataclass
class Turn:
    """One exchange as it happened: the reply, the raw text, and every streamed chunk."""

    reply: Reply
    text: str
    chunks: list[str]


def take_turn(
    character: Character | Scene,
    history: list[Exchange],
    say: str,
    generate: Generate,
    *,
    view: TerminalView | None = None,
    strict: bool = False,
    budget: int | None = None,
    counter: Counter | TokenCounter | None = None,
    note: str | None = None,
    bound: int | None = None,
    stats: list[TurnStats] | None = None,
    lorebooks: Sequence[Lorebook] = (),
    seed: int | None = None,
    templates: str | Path | None = None,
) -> Turn:
    """Ask ``generate`` for the character's (or a scene's) reply to ``say`` (shorthand), streaming it into ``view``.

    The exchange is appended to ``history`` in canonical form (what goes back to the model next
    turn), where the reply holds a chat: one that says nothing (a refusal) is not the character's
    answer. ``strict``: the reply must parse strictly (``ParseError`` otherwise; a scene's speakers
    and their emotions too). ``budget``: prompt tokens (by ``counter``: ``charfmt.counter_for``'s,
    default the estimate) the request may take, counted on the messages as they go to the model (the
    note included); the oldest exchanges are left out to fit, and a turn that cannot fit even alone
    raises ``BudgetError``. ``note``: a line added to the system prompt (the reply's length limits).
    ``bound``: the grammar's most characters of speech, and ``stats``: the model's ``TurnStats`` (its
    finish reason): speech cut at the bound or by the token budget ends at its last whole word
    (``CF150``) and its unfinished sentence is never spoken. ``lorebooks``: lore beyond the card's
    own (a scene's: beyond its cast's and its own); ``seed``: the turn's random macros and lore rolls;
    ``templates``: a folder of templates of your own, looked up before charfmt's (``render_messages``'s).
    """
    from charfmt.llm._sdk_chunks import Reader  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.stream import StreamParser  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.writer import canonical_form  # noqa: PLC0415 (import cost: every CLI command loads this module)

    turn = character.shorthand(say)  # (a scene's: the whole cast's words)
    messages = _messages(
        character, history, turn, budget=budget, counter=counter, note=note, lorebooks=lorebooks, seed=seed,
        templates=templates,
    )  # fmt: skip
    if view is not None and bound is not None:
        view.bounded(bound)
    # told the turn, the reader drops an echo of the player's own line (CF625) instead of showing it as speech
    # ... and the prompt's own text echoed (CF631): it is not the character's either; a scene's reply is read
    # with every cast member's emotion words (an alias alone on its line is an emotion, not speech)
    vocabulary = character.reading_vocabulary
    stream = StreamParser(lenient=not strict, vocabulary=vocabulary, tags=character.tags, turn=turn, prompt=messages)
    reader = Reader()  # a server chunk's refusal, tool call or reasoning, read as iter_events reads them
    asked = len(stats) if stats is not None else 0
    chunks = _streamed(generate(messages), stream, reader, view, _thinker(character))
    cut = stats is not None and len(stats) > asked and stats[-1].reason == "length"
    if view is not None and cut:
        view.cut_off()
    events = reader.finish(stream)
    if view is not None:
        view.show(events)
    text = "".join(chunks)
    try:
        reply = _read(character, text, stream.reply, strict=strict, bound=bound, cut=cut)
    except BaseException:
        if view is not None:
            view.finish()
        raise
    if reader.reasoning:  # the server's, beside the text (reasoning_content): before any the text held (<think>)
        reasoning = reader.reasoning + (f"\n\n{reply.reasoning}" if reply.reasoning else "")
        reply = reply.model_copy(update={"reasoning": reasoning})
    if view is not None:
        shown = stream.reply.diagnostics
        view.note([d for d in reply.diagnostics if d not in shown])  # (a scene's CF309, cut speech's CF150)
        view.finish()
    if view is not None and not reply.chats:
        view.silent()
    if reply.chats:  # (a reply that says nothing, a refusal: not kept as the character's answer, as serve does)
        history.append(Exchange(user=turn, reply=canonical_form(reply, tags=character.tags)))
    return Turn(reply, text, chunks)


def _nothing() -> None:
    return None


def _streamed(
    generated: Iterator[str | ChunkParts], stream: StreamParser, reader: Reader, view: TerminalView | None, who: str
) -> list[str]:
    """The model's text chunks as they come, each read by ``stream`` (a server's pieces by ``reader``) and
    shown in ``view``; before the first, the "thinking" line says ``who`` is thinking."""
    chunks: list[str] = []
    stop = view.thinking(who) if view is not None else _nothing
    try:
        for chunk in generated:
            stop()
            if isinstance(chunk, str):
                chunks.append(chunk)
            events = reader.feed(stream, chunk)
            if view is not None:
                view.show(events)
    finally:
        stop()
    return chunks


def _as_scene(character: Character | Scene) -> Scene | None:
    from charfmt.prompt.scene import Scene  # noqa: PLC0415 (import cost: every CLI command loads this module)

    return character if isinstance(character, Scene) else None


def _player(character: Character | Scene) -> Character:
    """The character (a scene's first cast member, where one character is asked: the terminal view's default)."""
    return next(iter(character.members.values()))


def _thinker(character: Character | Scene) -> str:
    """Who the "thinking" line says is thinking: the character, or a scene's cast."""
    return " and ".join(c.name for c in character.members.values())


def _messages(
    character: Character | Scene,
    history: list[Exchange],
    turn: UserTurn,
    *,
    budget: int | None,
    counter: Counter | TokenCounter | None,
    note: str | None,
    lorebooks: Sequence[Lorebook],
    seed: int | None,
    templates: str | Path | None = None,
) -> list[dict[str, str]]:
    """The request's messages: the system prompt (with ``note``, and the lore ``turn`` activates), the newest
    exchanges that fit ``budget`` (counted by ``counter`` on the messages as they go to the model), ``turn``;
    rendered from ``templates`` (a folder of your own, before charfmt's)."""
    from charfmt.prompt._token_fit import count_messages, fit_messages  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.prompt.render import ESTIMATE, BudgetError, render_messages  # noqa: PLC0415 (import cost: every CLI command loads this module)

    scene = _as_scene(character)

    def build(start: int) -> list[dict[str, str]]:  # the messages as they go to the model, the note included
        past = history[start:]
        if scene is not None:
            lore = scene.lore(past, turn, lorebooks=lorebooks, budget=budget, seed=seed)
            request = scene.render_messages(past, turn, lore=lore, templates=templates)
        else:
            request = render_messages(_player(character), past, turn, lorebooks=lorebooks, seed=seed,
                                      templates=templates)  # fmt: skip
        return _noted(request["messages"], note)

    if budget is not None and budget < 1:
        raise BudgetError(f"no tokens are left for the prompt (budget {budget})")
    if budget is None:
        return build(0)
    if scene is not None:
        return fit_messages(build, len(history), budget=budget, counter=counter or ESTIMATE)[1]
    count = counter or ESTIMATE  # a character's: ``render_messages`` fits it, the oldest exchanges left out, then
    whole = build(0)  # lore cut (CF947), as ``charfmt render`` does; the note's tokens are set aside for it
    plain = render_messages(_player(character), history, turn, lorebooks=lorebooks, seed=seed,
                            templates=templates)["messages"]  # fmt: skip
    spare = budget - (count_messages(count, whole) - count_messages(count, plain))
    if spare < 1:
        raise BudgetError(f"no tokens are left for the prompt (budget {budget}, the note's tokens set aside)")
    fitted = render_messages(_player(character), history, turn, lorebooks=lorebooks, seed=seed, budget=spare,
                             counter=count, templates=templates)["messages"]  # fmt: skip
    return _noted(fitted, note)


def _noted(messages: list[dict[str, str]], note: str | None) -> list[dict[str, str]]:
    """``messages`` with ``note`` (the limits the grammar sets) at the end of the system prompt."""
    if note is not None:
        messages[0] = {**messages[0], "content": f"{messages[0]['content'].rstrip()}\n\n{note}\n"}
    return messages


def _read(
    character: Character | Scene, text: str, streamed: Reply, *, strict: bool, bound: int | None, cut: bool
) -> Reply:
    """The reply: ``text`` read strictly, or as it streamed (a scene's problems noted, CF309); its cut speech
    ended at a word (``trim_cut_speech``)."""
    from charfmt.speech import trim_cut_speech  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if strict:
        reply = character.parse(text)
    else:
        reply = streamed
        problems = character.check(reply, text, lenient=True)
        if problems:
            reply = reply.model_copy(update={"diagnostics": [*reply.diagnostics, *problems]})
    return trim_cut_speech(reply, bound=bound, cut_off=cut, tags=character.tags, source=text)


# --- the command --------------------------------------------------------------------------------


def run(
    character: Character | Scene, *, generate: Generate, says: Sequence[str] | None, out: TextIO,
    stats: list[TurnStats], inp: TextIO | None = None, err: TextIO | None = None, budget: int | None = None,
    counter: Counter | TokenCounter | None = None, note: str | None = None, stage: StageReader | None = None,
    max_length: int | None = None, lorebooks: Sequence[Lorebook] = (), seed: int | None = None,
    greeting: int | None = 0, history: list[Exchange] | None = None, keep: Callable[[Exchange], None] | None = None,
    bound: int | None = None, verbose: bool = True, templates: str | Path | None = None,
) -> int:  # fmt: skip
    """The chat loop: each ``--say`` in turn, or lines from ``inp`` until end of input or ``/quit``.

    A turn that does not fit in the context window is refused with one ``charfmt: error:``
    line on ``err`` (the chat goes on; the exit status is then 1); so is a turn the server
    failed (an HTTP error, a timeout), unless it is the only ``--say``. A failed turn is not
    added to the history. ``character``: a character, or a scene (its cast speaks, each chat
    shown with its speaker's name). ``history``: the exchanges so far (a resumed session's), appended
    to; ``keep``: called with each exchange added (``charfmt chat --session`` stores it; a
    ``CharfmtError`` it raises is one error line, and the chat goes on). A card's greeting
    ``greeting`` (0: ``first_mes``; ``None``: none) opens a new chat (an empty ``history``): shown
    first, the first exchange the model sees, and the first one kept. ``bound``: the grammar's most
    characters of speech (``take_turn``); ``verbose``: each diagnostic after the reply, else its errors
    and what the model did, one line counting the rest (``TerminalView.verbose``). Each turn ends with
    its stats line: the wait for the first token, the tokens and their speed. ``templates``: a folder of
    templates of your own (``take_turn``).
    """
    from charfmt.prompt.render import BudgetError  # noqa: PLC0415 (import cost: every CLI command loads this module)

    view = TerminalView(
        _player(character), out, stage=stage, max_length=max_length, bound=bound, verbose=verbose,
        cast=character.members if _as_scene(character) is not None else None, tags=character.tags,
    )  # fmt: skip
    history = history if history is not None else []
    errors = err if err is not None else sys.stderr
    status = _begun(character, view, out, history, greeting=greeting, seed=seed, keep=keep, errors=errors)

    for say in _turns(says, inp, out):
        before, kept = len(stats), len(history)
        try:
            take_turn(
                character, history, say, generate, view=view, budget=budget, counter=counter, note=note, bound=bound,
                stats=stats, lorebooks=lorebooks, seed=seed, templates=templates,
            )  # fmt: skip
        except (BudgetError, ContextFull) as e:
            status = _failed_turn(view, out, errors, f"{e}; the turn was not sent")
            continue
        except UpstreamError as e:
            if says is not None and len(says) == 1:
                view.finish()  # what it showed ended: the error line is not glued to half a line of speech
                out.flush()
                raise  # one --say: the error is the command's (exit 1)
            status = _failed_turn(view, out, errors, f"{e}; the turn is not kept, the chat goes on")
            continue
        if keep is not None and len(history) > kept and not _kept(keep, history[-1], errors):
            status = 1
        if len(stats) > before:
            out.write(stats_line(stats[-1]) + "\n")
    return status


def _turns(says: Sequence[str] | None, inp: TextIO | None, out: TextIO) -> Iterator[str]:
    """What the player says: each ``--say``, or the lines of ``inp`` (stdin) until its end or ``/quit``, each
    echoed after ``you>`` (a terminal's prompt is written before it); a command is run, never sent."""
    if says:
        for say in says:
            out.write(f"you> {visible(say)}\n")
            yield say
        return
    source = inp if inp is not None else sys.stdin
    tty = source.isatty()
    while True:
        if tty:
            out.write("you> ")
            out.flush()
        line = source.readline()
        if not line or line.strip() in _ENDS:
            return
        if _COMMAND.fullmatch(line.strip()):  # (a command is the chat's, never a turn sent to the model)
            _command(line.strip(), out)
            continue
        if line.strip():
            if not tty:
                out.write(f"you> {visible(line.strip())}\n")  # echoed as --say is
            yield line.strip()


def stats_line(stats: TurnStats) -> str:
    """What a turn cost, as ``charfmt chat`` shows it after the reply: the wait for the first token (the
    prompt read), then the tokens generated, their time and speed, and how the reply ended if it did not finish."""
    state = f", {stats.state}" if stats.state else ""
    count = f"{stats.tokens} token{'s' if stats.tokens != 1 else ''}"
    if stats.tokens < 2 or stats.seconds <= 0:  # (one chunk, or no time between the first and the last: no speed)
        return f"  ({stats.first_token_seconds:.1f} s thinking, {count} at once{state})"
    return (
        f"  ({stats.first_token_seconds:.1f} s thinking, {count} in {stats.seconds:.1f} s, "
        f"{stats.tokens_per_second:.1f} tokens/s{state})"
    )


COMMANDS: Final = (
    ("/help", "list these commands"),
    ("/quit", "end the chat (so do /exit and the end of input)"),
)
"""What a line typed into ``charfmt chat`` may be besides a turn: a command, and what it does."""
_ENDS: Final = ("/quit", "/exit")
_COMMAND: Final = re.compile(r"/[A-Za-z][\w-]*")
"""A typed line that is one ``/word``: a command (an unknown one is said, not sent to the model)."""


def _command(line: str, out: TextIO) -> None:
    """Run the command ``line`` (not an end): ``/help`` lists them; anything else is said to be unknown."""
    if line == "/help":
        out.write("commands:\n" + "".join(f"  {name:<7} {what}\n" for name, what in COMMANDS))
        out.write("  anything else is what you say: [joy] *waves* Hello!\n")
    else:
        out.write(f"unknown command {visible(line)}: /help lists the commands (not sent to the model)\n")
    out.flush()


def _begun(
    character: Character | Scene, view: TerminalView, out: TextIO, history: list[Exchange], *, greeting: int | None,
    seed: int | None, keep: Callable[[Exchange], None] | None, errors: TextIO,
) -> int:  # fmt: skip
    """A chat's start: a resumed one's last reply shown again, a new one's greeting shown and kept; its status."""
    _resumed(view, out, history, character)
    if history or (opened := _opened(character, view, greeting, seed)) is None:
        return 0
    history.append(opened)
    return 1 if keep is not None and not _kept(keep, opened, errors) else 0


def _opened(
    character: Character | Scene, view: TerminalView, greeting: int | None, seed: int | None
) -> Exchange | None:
    """A new chat's first exchange: the card's greeting ``greeting``, shown (the character speaks first; a
    scene has no greeting)."""
    from charfmt.prompt.render import greeting_exchange  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if _as_scene(character) is not None or greeting is None:
        return None
    opened = greeting_exchange(_player(character), greeting, seed=seed)
    if opened is not None:
        view.show(list(opened.reply.events(character.tags)))
        view.finish()
    return opened


def _resumed(view: TerminalView, out: TextIO, history: list[Exchange], character: Character | Scene) -> None:
    """A resumed session's start: how long it is, and its last reply, shown again."""
    if history:
        out.write(f"(resumed: {len(history)} exchange{'s' if len(history) != 1 else ''}; the last reply was)\n")
        view.show(list(history[-1].reply.events(character.tags)))
        view.finish()


def _kept(keep: Callable[[Exchange], None], exchange: Exchange, errors: TextIO) -> bool:
    """``keep(exchange)``; its failure one ``charfmt: error:`` line (the chat goes on): whether it was kept."""
    try:
        keep(exchange)
    except CharfmtError as e:
        errors.write(f"charfmt: error: {e}; the turn was not kept in the session\n")
        errors.flush()
        return False
    return True


def _failed_turn(view: TerminalView, out: TextIO, errors: TextIO, message: str) -> int:
    """A turn that failed: what it showed ended, then one ``charfmt: error:`` line; the chat's status (1)."""
    view.finish()
    out.flush()
    errors.write(f"charfmt: error: {message}\n")
    errors.flush()
    return 1


__all__ = [
    "API_KEY_ENV",
    "DEFAULT_MAX_TOKENS",
    "FORMAT_BY_ARCHITECTURE",
    "NAMED_SERVERS",
    "PLAIN_CHAT_STYLES",
    "RESET_LINE",
    "TEMPLATE_KEY",
    "ContextFull",
    "Generate",
    "NoChatTemplate",
    "PlainChatStyle",
    "TerminalView",
    "Turn",
    "TurnStats",
    "chat_formats",
    "chat_prompt",
    "endpoint_model",
    "endpoint_url",
    "fold_system",
    "has_system_role",
    "llama_logs",
    "local_model",
    "run",
    "stats_line",
    "take_turn",
    "template_warning",
]
