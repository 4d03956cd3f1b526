"""One turn: render → upstream (+ grammar) → stream → stage, as a sequence of typed pieces.

``Engine.turn_batches`` yields, in order: each raw text delta of the model (``Raw``), each event
of the ``StreamParser`` the moment it is certain, the stage cues and sentences each event makes
certain, and last the ``Done`` record (the reply, its raw text, validity and timing), in a list
per chunk of the model's text. The endpoints only choose which pieces to send and in what shape.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from charfmt.constrain._reply_constraints import constraints_of
from charfmt.constrain.budget import chat_bounds, limit_note, speech_texts
from charfmt.constrain.engines import local_constraint, request_fields
from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError
from charfmt.events import DiagnosticEvent, reply_events
from charfmt.llm._sdk_chunks import Reader, quoted
from charfmt.prompt._token_fit import count_messages
from charfmt.prompt.cast import stage_reader
from charfmt.prompt.tokens import counter_for, grammar_cost, prompt_budget
from charfmt.serve.continuation import PREFILL, Continuation, Prefix, open_prefix
from charfmt.serve.emotion_names import served_names
from charfmt.serve.formats import read_answer
from charfmt.serve.offload import PromptWorker
from charfmt.serve.pacing import Pacer
from charfmt.serve.prompt import BadTurn, Prompter
from charfmt.serve.upstreams.base import UpstreamFailure
from charfmt.speech import CutSpeech, SentenceSplitter, trim_cut_speech
from charfmt.stream import StreamParser
from charfmt.writer import canonical_form

if TYPE_CHECKING:
    from collections.abc import Mapping

    from charfmt.diagnostics import Diagnostic
    from charfmt.events import Event
    from charfmt.llm._replies import Delta
    from charfmt.llm._sdk_chunks import ChunkParts
    from charfmt.models import Reply
    from charfmt.prompt._token_fit import TokenCounter
    from charfmt.prompt.character import Character, Exchange
    from charfmt.prompt.lorebook import Activation
    from charfmt.prompt.scene import Scene
    from charfmt.prompt.userinput import UserTurn
    from charfmt.serve.continuation import Ask, Continuation
    from charfmt.serve.prompt import Message
    from charfmt.serve.settings import Settings
    from charfmt.serve.upstreams import Upstream
    from charfmt.serve.upstreams.base import UpstreamKind
    from charfmt.speech import Sentence
    from charfmt.stage import StageCue

__all__ = [
    "BadTurn", "Done", "Engine", "Greeting", "Lore", "Piece", "Prefix", "Raw", "history_from_messages", "read_back",
    "reply_bounds",
]  # fmt: skip

_LONE: Final = "a lone UTF-16 surrogate the server sent replaced by U+FFFD"
"""``CF714``'s message where serve replaces one (``_Reading._sound``)."""


@dataclass(frozen=True, slots=True)
class Raw:
    """A piece of the model's own text, as it arrived."""

    text: str


@dataclass(frozen=True)
class Done:
    """The end of a turn: what the character said and what it cost."""

    request_id: str
    reply: Reply
    text: str
    valid: bool
    """Whether ``text`` parses strictly (with the character's vocabulary and tags)."""
    exchange: Exchange
    first_token_seconds: float
    seconds: float
    tokens: int
    reason: str | None
    prompt_version: str
    prompt_tokens: int
    """The prompt's tokens as the engine's counter counts them (the model's own where known, else the estimate)."""
    prefilled: int = 0
    """Characters at the start of ``text`` that were the upstream's prefill (a continue), not the model's."""

    def timing(self) -> dict[str, Any]:
        """The timing fields of the log and of ``/v1/turn``'s reply event."""
        return {
            "first_token_s": round(self.first_token_seconds, 6),
            "total_s": round(self.seconds, 6),
            "tokens": self.tokens,
            "finish_reason": self.reason,
        }


@dataclass(frozen=True)
class Lore:
    """Which lore entries the turn's prompt holds and which the lore's budget cut (``Activation.report``)."""

    report: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """``/v1/turn``'s ``lore`` object."""
        return {"kind": "lore", **self.report}


@dataclass(frozen=True)
class Greeting:
    """A new session's first line: the card's greeting, kept as the session's first exchange."""

    reply: Reply


Piece: TypeAlias = "Raw | Prefix | Event | StageCue | Sentence | Done | Lore | Greeting"
"""What a turn yields: the model's text, the reply a continue went on from, an event of the stream, a stage
cue, a sentence, the end; with ``lore=True``, first, the lore the prompt holds."""


def reply_bounds(settings: Settings, tokens_per_char: float | None = None) -> Any:
    """The grammar's bounds within ``max_tokens`` for the character or the scene: ``charfmt chat``'s engine
    (``chat_bounds``, i.e. ``charfmt.constrain.export.plan_bounds``), at the model's ``tokens_per_char`` where known."""

    return chat_bounds(settings.cast, settings.max_tokens, tokens_per_char=tokens_per_char)


def upstream_tokens_per_char(
    upstream: Upstream, subject: Character | Scene, counter: TokenCounter | None = None
) -> float | None:
    """The upstream model's tokens per character of what ``subject`` says, where its tokenizer is known:
    llama.cpp in-process, or a server whose tokenizer ``counter`` is (``--tokenizer``, a model name tiktoken
    knows); ``None`` where it is not (the estimate: the engine's default then)."""
    from charfmt.constrain.export import measure_tokens_per_char  # noqa: PLC0415 (import cost: lark, regex load on first use)
    from charfmt.prompt.render import ESTIMATE  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

    measure = getattr(upstream, "tokens_per_char", None)
    if callable(measure):
        return float(measure(speech_texts(subject)))
    if counter is None or counter is ESTIMATE:
        return None
    return measure_tokens_per_char(counter, speech_texts(subject))


class _Reading:
    """One reply read as it streams: its text and timing, the stream parser, the stage and sentence readers.

    ``events=False``: nothing is read as it streams (the reply is read once at the end);
    ``cues=False``: the events only, no stage cues or sentences.
    """

    def __init__(
        self, engine: Engine, turn: UserTurn | None, *, events: bool, cues: bool, prefix: str = "",
        bound: int | None = None, prompt: list[dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip

        self.events = events
        self.cues = cues and events
        # told the turn and the request's messages: an echo of either is never shown (CF625, CF631)
        self.stream = StreamParser(
            lenient=True, vocabulary=engine.reading_vocabulary, tags=engine.tags, turn=turn, prompt=prompt
        )
        self.reader = Reader()
        """The chunks-to-events loop every door shares (``_sdk_chunks.Reader``): the parser fed, the upstream's
        reasoning and notes said where they came, and said again after a ``Reset``."""
        length = engine.settings.max_length
        self.bound = bound
        """The grammar's most characters of speech (a constrained turn): speech cut there is never spoken."""
        self.stage = stage_reader(engine.cast, max_length=length, bound=bound)
        self.splitter = SentenceSplitter(tags=engine.tags, max_length=length, bound=bound)
        self.cut = CutSpeech(bound, tags=engine.tags)
        """What the front end is shown: speech a bound cut ends at its last whole word, as the reply's."""
        self.tags = engine.tags
        self.prefix = prefix
        """The reply so far that the model goes on from (a prefilled continue): the start of the reply's text."""
        self.chunks: list[str] = []
        self.size = len(prefix)
        """Characters of the reply so far."""
        self.reasoning: list[str] = []
        """The upstream's reasoning, sent beside the text (``reasoning_content``)."""
        self.lone: list[int] = []
        """Where a lone surrogate was replaced by U+FFFD (offsets in the reply's text): ``CF714``."""
        self.notes: list[tuple[str, str, int]] = []
        """The upstream's notes beside the text (``CF823`` a content filter, ``CF961``...) and where they came."""
        self.refusal: list[str] = []
        """The model's refusal text (``CF821``)."""
        self.reason: str | None = None
        self.first: float | None = None
        self.started = time.perf_counter()

    def feed(self, delta: Delta) -> list[Piece]:
        """The text of ``delta`` (``Raw``), then the events, cues and sentences it makes certain."""
        self.reason = delta.reason or self.reason
        noted = self.note(delta.piece) if delta.piece is not None else []
        text = delta.text
        if not text:
            return noted
        if not text.isascii():
            lone = len(self.lone)
            text = self._sound(text)
            if len(self.lone) > lone and self.events:  # (said as it comes too, beside the reply's diagnostics)
                noted = [*noted, *self._said_lone(text, self.lone[lone:])]
        if self.first is None:
            self.first = time.perf_counter()
        self.chunks.append(text)
        self.size += len(text)
        if not self.events:
            return [*noted, Raw(text)] if noted else [Raw(text)]
        return [*noted, Raw(text), *self._pieces(self.reader.feed(self.stream, text))]

    def note(self, piece: ChunkParts) -> list[Piece]:
        """What a chunk says beside the reply's text (a content filter's stop, invalid UTF-8): kept for the
        reply's diagnostics, and said as it comes (``Reader.take``) where events are read; the reasoning said
        whatever is read (chat completions forward it as it comes too); a refusal's text, kept."""
        if piece.refusal:
            self.refusal.append(piece.refusal)
        if piece.reasoning:
            self.reasoning.append(piece.reasoning)
        self.notes.extend((code, message, self.size) for code, message in piece.notes)
        _, said = self.reader.take(piece)
        if self.events:
            return list(said)
        return [event for event in said if event.kind == "reasoning"]

    def _said_lone(self, text: str, where: list[int]) -> list[Piece]:

        so_far = self.prefix + "".join(self.chunks) + text
        return [DiagnosticEvent(None, Diagnostic.at(so_far, "CF714", _LONE, at, at + 1)) for at in where]

    def diagnostics(self, text: str) -> list[Diagnostic]:
        """The notes of the upstream's chunks and the lone surrogates replaced, placed in the reply's ``text``."""

        notes = list(self.notes)
        if self.refusal:
            notes.append(("CF821", f"the model refused to answer: {quoted(''.join(self.refusal))}", len(text)))
        out = [Diagnostic.at(text, code, message, at) for code, message, at in notes]
        return out + [Diagnostic.at(text, "CF714", _LONE, at, at + 1) for at in self.lone]

    def _sound(self, text: str) -> str:
        """``text`` with each lone UTF-16 surrogate (JSON may say ``"\\udc00"``: no character) U+FFFD, its
        place noted (``CF714``), as a bad UTF-8 byte is; no text holding one can be written out. (A pair
        split across two deltas is made whole by the upstream's reader, ``_replies.EventStreamReader``.)"""
        try:
            text.encode()
        except UnicodeEncodeError:  # (a surrogate: nothing else stops UTF-8)
            pass
        else:
            return text
        chars = list(text)
        for i, char in enumerate(chars):
            try:
                char.encode()
            except UnicodeEncodeError:
                chars[i] = "\ufffd"
                self.lone.append(self.size + i)
        return "".join(chars)

    def close(self) -> list[Piece]:
        """The rest, once the reply has ended (cut by the token budget: its unfinished sentence unspoken)."""
        if not self.events:
            return []
        if self.reason == "length":
            self.stage.cut_off()
            self.splitter.cut_off()
            self.cut.cut_off()
        out = self._pieces(self.reader.after(self.stream.close()))
        if self.cues:
            out.extend(self.stage.close())
            out.extend(self.splitter.close())
        return out

    def start(self, going: Continuation | None) -> list[Piece]:
        """The pieces before the model's text: the events of the reply a continue goes on from (prefilled: read
        as the rest will be; else the reply itself), which the front end shows already."""
        if going is None:
            return []
        if not self.prefix:
            return [Prefix(list(reply_events(going.before, self.tags)))]
        return [Prefix(self.reader.feed(self.stream, self.prefix) if self.events else [])]

    def _pieces(self, found: list[Event]) -> list[Piece]:
        """The events (speech a bound cut ending at its last whole word), and the cues and sentences each
        makes certain (read from the events as they came: a cut sentence is never spoken)."""
        if self.bound is None and not self.cues:
            return list(found)
        out: list[Piece] = []
        for event in found:
            out.extend(self.cut.feed(event) if self.bound is not None else (event,))
            if self.cues:
                out.extend(self.stage.feed(event))
                out.extend(self.splitter.feed(event))
        return out


class Engine:
    """The character, its upstream and the request fields that constrain it."""

    def __init__(self, settings: Settings, upstream: Upstream) -> None:

        self.settings = settings
        self.character: Character = settings.character
        self.scene = settings.scene
        self.cast = settings.cast
        """Who answers: the scene, else the character (``charfmt.prompt.cast.Cast``)."""
        self.vocabulary = self.cast.vocabulary
        self.reading_vocabulary = self.cast.reading_vocabulary
        """What a reply is read with: a scene's, every cast member's emotion words (``Scene.reading_vocabulary``)."""
        self.tags = self.cast.tags
        self.upstream = upstream
        self.model = settings.model_name or self.cast.name
        """The model name front ends see (answers, logs): ``--model-name``, else the scene's or character's."""
        self.upstream_model = settings.model_name
        """The ``model`` sent upstream: ``--model-name``, else none (the server's default, as ``chat --endpoint``)."""
        self.counter = engine_counter(settings, upstream)
        self.tokens_per_char = upstream_tokens_per_char(upstream, self.cast, self.counter)
        """The model's tokens per character of the character's speech, where its tokenizer is known."""
        bounds = reply_bounds(settings, self.tokens_per_char)
        self.bounds = bounds
        """The reply's bounds (``charfmt.constrain.export.plan_bounds``), what a constrained request is held to."""
        self.note = limit_note(bounds)
        self._fields = {True: self._constraint(bounds), False: {"max_tokens": settings.max_tokens}}
        self.budget = prompt_budget(settings.n_ctx, settings.max_tokens, self.counter)
        server = self._server()
        self._reserve = {on: grammar_cost(server, fields, self.counter) for on, fields in self._fields.items()}
        """The prompt tokens the upstream spends on the request's schema (OpenAI's), constrained or not."""
        self.prompter = Prompter(
            self.character, self.scene, note=self.note, budget=self.budget, counter=self.counter,
            lorebooks=settings.lorebooks,
        )  # fmt: skip
        self.pacer = Pacer()
        """Turns' starts and ends, one per pass of the event loop (``charfmt.serve.pacing``)."""
        self.worker = PromptWorker(self.cast, settings.lorebooks)
        """Where a turn's prompt is built: in a worker thread where the lore is large (``charfmt.serve.offload``)."""

        kind = self._kind()  # (a script writes whole replies; in-process llama.cpp goes on as llama-server does)
        fields = PREFILL.get(server) if kind is None or kind.prefills is not False else None
        self.prefills = fields is not None
        """Whether the upstream goes on from a last answer (a continue is prefilled; else the rest is asked for)."""
        self.prefill: dict[str, Any] = dict(fields or {})
        """The request fields that ask the upstream to go on from the last answer."""

        self.names = served_names(settings)
        """The name of each emotion key in ``--reply-format`` (``charfmt.serve.emotion_names``)."""

    def _server(self) -> str:
        """The server whose request field carries the constraint: the upstream kind's (``UpstreamKind.server``)."""
        kind = self._kind()
        return kind.server(self.settings) if kind is not None else self.settings.server

    def _kind(self) -> UpstreamKind | None:
        """The kind of upstream the settings name (``None``: only a ready ``Settings.upstream``)."""
        from charfmt.serve.upstreams import source  # noqa: PLC0415 (its kinds' modules: the engine's start)

        found = source(self.settings)
        return found[0] if found is not None else None

    def _constraint(self, bounds: Any) -> dict[str, Any]:
        """The request fields of a constrained turn: llama.cpp in-process as ``charfmt chat`` holds it
        (llguidance where installed), a server in its own field (``request_fields``)."""

        s = self.settings
        subject = self.cast
        if getattr(self.upstream, "in_process", False):
            from charfmt.constrain.export import reply_grammar  # noqa: PLC0415 (import cost: lark, regex load on first use)

            c = constraints_of("serve", {"character": subject})
            g = reply_grammar(c.vocabulary, c.tags, bounds=bounds, speakers=c.speakers)
            return {**local_constraint(g), "max_tokens": s.max_tokens}
        return request_fields(self._server(), character=subject, max_tokens=s.max_tokens, bounds=bounds)

    def read(
        self, text: str, *, lenient: bool = True, turn: UserTurn | None = None,
        prompt: list[dict[str, Any]] | None = None,
    ) -> Reply:  # fmt: skip
        """A reply read as this character's (or, in a scene, each speaker's): ``ParseError`` if strict and bad.

        ``turn`` and ``prompt`` (the request's messages): what the reply answers, as ``parse`` takes them.
        """
        return self.cast.parse(text, lenient=lenient, turn=turn, prompt=prompt)

    def player_turn(self, say: str, context: Mapping[str, str] | None = None) -> UserTurn:
        """The player's turn as ``charfmt render --say`` reads it (``read_turn``): shorthand (``[joy] hi``,
        ``*waves*``) or a user block, with ``context`` as its ``[User Context]``; ``BadTurn`` where it is empty or
        too long, ``ParseError`` for a block that does not read, ``TurnError`` for nothing to say or a bad context."""

        if not say.strip():
            raise BadTurn("nothing to say: the player's turn is empty")
        size = len(say) + sum(len(key) + len(value) for key, value in (context or {}).items())
        if size > self.settings.max_say:
            what = "the player's turn with its context" if context else "the player's turn"
            raise BadTurn(f"{what} is {size:,} characters (at most {self.settings.max_say:,})")
        return self.cast.read_turn(say, context=context)  # (a scene's: the whole cast's words)

    def request(
        self, history: list[Exchange], turn: UserTurn | None, constrained: bool | None = None,
        system: str | None = None, ask: Ask | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The upstream request body for ``turn`` after ``history`` (oldest exchanges left out to fit), ``system``
        (a front end's own system text) after charfmt's system prompt, with what ``ask`` asks beyond the turn
        (``charfmt.serve.continuation``): instructions after the history, the rest of a reply (prefilled, or
        asked for), the player's line; ``BadTurn`` where even the turn does not fit."""
        return self.lore_request(history, turn, constrained, system, ask=ask)[0]

    def lore_request(
        self, history: list[Exchange], turn: UserTurn | None, constrained: bool | None = None,
        system: str | None = None, *, seed: Any = None, ask: Ask | None = None, user_name: str | None = None,
    ) -> tuple[dict[str, Any], Activation | None]:  # fmt: skip
        """``request``, and the lore its prompt holds (``seed``: the front end's, for the lore's rolls; ``user_name``:
        the player's name, where the front end gives one). What ``ask`` asks goes with the card's parts and lore
        of the turn it asks about: the player's line asked for after the history, the rest of a reply after the
        turn it answered (its system prompt and lore)."""
        from charfmt.prompt.render import render_request  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

        on = self.settings.constrained if constrained is None else constrained
        after = ask.after if ask is not None else ""
        going = ask.continuation if ask is not None else None
        if going is not None and going.prefill is not None:
            on = False  # the grammar is of a whole reply, and the model starts inside one: read leniently
        reserve, fields = self._reserve[on], self._fields[on]
        rolls = seed if isinstance(seed, (int, str)) else None
        character = self.character
        if user_name is not None and user_name != character.user_name:
            character = character.model_copy(update={"user_name": user_name})

        def fit(
            past: list[Exchange], said: UserTurn | None, request: str = "", prefill: str = "",
            lore_of: tuple[list[Exchange], UserTurn | None] | None = None,
        ) -> tuple[list[Message], Activation | None]:  # fmt: skip
            return self.prompter.turn(
                past, said, system=system, reserve=reserve, seed=rolls, after=after, request=request,
                prefill=prefill, lore_of=lore_of, user_name=user_name,
            )  # fmt: skip

        if ask is not None and ask.impersonation is not None:
            messages, lore = fit(history, None, render_request("impersonate.j2", character, request=ask.impersonation))
        elif going is not None and going.prefill is None:  # the reply so far as the model's last answer
            from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)
            from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, regex load on first use)

            past = [*history, Exchange(user=turn or UserTurn(), reply=going.before)]
            messages, lore = fit(past, None, render_request("continue.j2", character), lore_of=(history, turn))
        elif going is not None and going.prefill is not None:  # the model goes on from the reply so far
            messages, lore = fit(history, turn, prefill=going.prefill)
            fields = {**fields, **self.prefill}
        else:
            messages, lore = fit(history, turn)
        named = {"model": self.upstream_model} if self.upstream_model is not None else {}
        return {**named, "messages": messages, "stream": True, **fields}, lore

    def continuation(self, before: Reply, shown: str = "") -> Continuation:
        """A continue of ``before`` (``shown``: as the front end sent it): prefilled where the upstream goes on
        from a last answer (``PREFILL``), else asked for as the rest."""

        before = canonical_form(before, tags=self.tags)
        prefill = open_prefix(before, self.tags) if self.prefills and before.chats else None
        return Continuation(before, prefill, shown)

    async def turn_batches(
        self,
        history: list[Exchange],
        turn: UserTurn | None,
        *,
        constrained: bool | None = None,
        request_id: str | None = None,
        events: bool = True,
        cues: bool = True,
        options: dict[str, Any] | None = None,
        ask: Ask | None = None,
        lore: bool = False,
    ) -> AsyncGenerator[list[Piece], None]:
        """The pieces of one turn (see the module docstring) in batches: what each chunk of the model's
        text makes certain, in one list; the last batch is ``[Done]``. The exchange is for the caller to keep.

        A batch is what a server sends at once: one write for all that a chunk of the reply brings,
        and one step through the layers between the model and the front end, not one a piece.
        ``options``: the front end's sampling fields (``temperature``, ``top_p``, ``seed``, ``stop``)
        sent upstream as they are, its own ``system`` text, appended to charfmt's system prompt, and the
        player's ``user_name`` (a card's ``{{user}}``), neither sent upstream.
        ``events=False``: only the raw text and ``Done`` (the reply read once at the end, leniently,
        as the stream would have read it); ``cues=False``: no stage cues or sentences. ``ask``: what the
        turn asks beyond the player's words (``charfmt.serve.continuation``); a continue's first batch starts
        with ``Prefix`` (what the front end shows already), and ``Done.reply`` is the whole reply gone on with;
        a prefill the upstream refuses (a 400) is asked for as the rest instead. The upstream's reasoning
        comes as ``Reasoning`` events, whatever ``events`` says. ``lore=True``: where lore entries fired (or
        the budget cut some), a ``Lore`` piece leads the upstream's first batch (before a continue's ``Prefix``).
        """
        # Rendered here, on the event loop (a tenth of a millisecond with a short history): in a
        # worker thread it would hold the GIL as long, and add the handoff to every turn. The start
        # and the end wait for their pass of the loop: the chunks of other replies go first.
        await self.pacer.turn()
        rid = request_id or uuid.uuid4().hex
        how: dict[str, Any] = {
            "constrained": constrained,
            "rid": rid,
            "events": events,
            "cues": cues,
            "options": options,
            "lore": lore,
        }
        going = ask.continuation if ask is not None else None
        answered = False
        try:
            async for batch in self._attempt(history, turn, ask, **how):
                answered = True
                yield batch
            return
        except Exception as e:
            if answered or going is None or going.prefill is None or getattr(e, "upstream_status", None) != 400:
                raise
        # The upstream refused the prefill (llama-server with a thinking template: "Assistant response prefill
        # is incompatible with enable_thinking"; a chat template that wants a user message last): the rest is
        # asked for instead, as from an upstream that takes none.
        assert ask is not None
        rest = dataclasses.replace(ask, continuation=dataclasses.replace(going, prefill=None))
        async for batch in self._attempt(history, turn, rest, **how):
            yield batch

    async def _attempt(
        self, history: list[Exchange], turn: UserTurn | None, ask: Ask | None, *, constrained: bool | None, rid: str,
        events: bool, cues: bool, options: dict[str, Any] | None, lore: bool,
    ) -> AsyncGenerator[list[Piece], None]:  # fmt: skip
        """``turn_batches`` of one upstream request."""
        front = dict(options or {})
        system = front.pop("system", None)
        user_name = front.pop("user_name", None)
        body, active = await self.worker.run(
            self.lore_request, history, turn, constrained, system, seed=front.get("seed"), ask=ask, user_name=user_name
        )  # (off the event loop where the lore is large)
        body.update(front)
        going = ask.continuation if ask is not None else None
        prefix = going.prefill if going is not None and going.prefill is not None else ""
        on = self.settings.constrained if constrained is None else constrained
        bound = self.bounds.max_chars if on else None
        reading = _Reading(self, turn, events=events, cues=cues, prefix=prefix, bound=bound, prompt=body["messages"])
        # the lore, then the reply a continue goes on from (what the front end shows already), go with the first
        # batch the upstream brings: an upstream that fails at once is still answered with its status
        told = lore and active is not None and bool(active.placed or active.cut or active.lost)
        lead: list[Piece] = [Lore(active.report())] if told and active is not None else []
        lead += reading.start(going)
        feed = reading.feed
        async for delta in self.upstream.chat(body, max_tokens=self.settings.max_tokens):
            if lead:
                yield [*lead, *feed(delta)]
                lead = []
            elif delta.text:
                yield feed(delta)
            elif delta.reason or delta.piece:
                noted = feed(delta)  # (no text: only what the chunk notes)
                if noted:
                    yield noted
        if not reading.chunks:  # never an empty answer: nothing at all came back is the upstream's failure
            if reading.refusal:
                raise UpstreamFailure(f"the upstream's model refused to answer: {quoted(''.join(reading.refusal))}")
            raise UpstreamFailure(f"the upstream's reply held no text (finish reason: {reading.reason or 'none'})")
        rest = reading.close()
        if rest:
            yield rest
        await self.pacer.turn()
        yield [self._done(rid, body, turn, reading, going)]

    def _done(
        self, rid: str, body: dict[str, Any], turn: UserTurn | None, reading: _Reading, going: Continuation | None
    ) -> Done:
        """The end of a turn: the reply (the stream's, or the text read once), whether it was strictly valid."""
        from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)
        from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, regex load on first use)

        text = reading.prefix + "".join(reading.chunks)  # (a prefilled continue: the reply from its start)
        strict: Reply | None
        try:
            strict = self.read(text, lenient=False)
        except ParseError:
            strict = None
        messages = body["messages"]  # (read once, the reply is told what the stream was told)
        if reading.events:  # the reply as it streamed, and the cast's own problems (a scene's speakers: CF309)
            reply = reading.stream.reply
            problems = self.cast.check(reply, text, lenient=True)
            if problems:
                found = sorted([*reply.diagnostics, *problems], key=lambda d: (d.offset, d.end))
                reply = reply.model_copy(update={"diagnostics": found})
        else:  # a valid reply read leniently is the strict one (``parse``'s promise): not read twice
            reply = strict if strict is not None else self.read(text, turn=turn, prompt=messages)

        reply = trim_cut_speech(reply, bound=reading.bound, cut_off=reading.reason == "length", tags=self.tags,
                                source=text)  # fmt: skip
        notes = reading.diagnostics(text)
        if notes:  # said beside the text (a refusal, a filter's stop), or a character replaced: said where
            reply = reply.model_copy(update={"diagnostics": [*reply.diagnostics, *notes]})
            if reading.lone or any(d.severity == "error" for d in notes):
                strict = None  # (the text as sent held no character there, or is not the whole reply)
        if reading.reasoning:  # the upstream's, sent beside the text: before any the text held (<think>)
            reasoning = "".join(reading.reasoning) + (f"\n\n{reply.reasoning}" if reply.reasoning else "")
            reply = reply.model_copy(update={"reasoning": reasoning})
        if going is not None:
            reply = going.combine(reply)
        end = time.perf_counter()
        exchange = Exchange(user=turn or UserTurn(), reply=canonical_form(reply, tags=self.tags))
        prompt = count_messages(self.prompter.counter, messages)
        version = self.prompter.version()  # (the prompt's sources: every turn of them the same)
        first, started = reading.first or end, reading.started
        return Done(
            rid, reply, text, strict is not None, exchange, first - started, end - started, len(reading.chunks),
            reading.reason, version, prompt, len(reading.prefix),
        )  # fmt: skip


def engine_counter(settings: Settings, upstream: Upstream) -> TokenCounter:
    """The counter of an engine's prompts (``tokens.counter_for``): a model run in-process counts with its
    own tokenizer and template; ``--tokenizer``, else the model name's tiktoken encoding, else the estimate."""

    llm = getattr(upstream, "llm", None)
    if llm is not None:
        return counter_for(llm=llm, chat_format=getattr(upstream, "chat_format", None))
    return counter_for(settings.model_name, tokenizer=settings.tokenizer)


def history_from_messages(engine: Engine, messages: list[tuple[str, str]]) -> list[Exchange]:
    """Exchanges from a front end's own history: each run of user messages and the answer that follows.

    An answer sent back as the server gave it (``--reply-format``) is read as that format
    (``read_answer``: ``[joy] hi``, AIRI's markers, plain speech); anything else (JSON, tags, a front
    end's own style) is read leniently. Nothing the player said is dropped: user messages in a row
    are one turn, and an answer that shows nothing (empty, a tool call) leaves the turn to the next
    answer; answers in a row are one reply. Left out: system and tool messages (the system text goes
    to the prompt). An answer before the player's first words (the greeting the front end showed)
    is the first exchange, with an empty user turn, as a card's greeting is.
    """
    from charfmt.prompt.character import Exchange  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)
    from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, regex load on first use)

    out: list[Exchange] = []
    said: list[str] = []  # the player's words not answered yet
    tags = engine.tags
    for role, text in messages:
        if role == "user":
            if text.strip():
                said.append(text.strip())
            continue
        if role != "assistant":
            continue
        reply = read_back(engine, text)
        if not reply.chats:
            continue  # (the turn waits for an answer that says something)
        if said or not out:  # (not out: a greeting, before the player said anything)
            turn = _history_turn(engine, "\n".join(said)) if said else UserTurn()
            out.append(Exchange(user=turn, reply=canonical_form(reply, tags)))
            said = []
        elif out:  # a second answer to the same turn: the reply goes on
            last = out[-1]
            chats = [
                chat.model_copy(update={"order": i}) for i, chat in enumerate([*last.reply.chats, *reply.chats], 1)
            ]
            out[-1] = Exchange(user=last.user, reply=canonical_form(reply.model_copy(update={"chats": chats}), tags))
    return out


def _history_turn(engine: Engine, said: str) -> UserTurn:
    """A player's turn of a front end's history, read as the turn itself is (``read_turn``: a user block as a block);
    ``BadTurn`` (a 400 about ``messages``) where it cannot be read."""

    try:
        return engine.cast.read_turn(said)
    except CharfmtError as e:
        raise BadTurn(f"a player's message of the history cannot be read: {e}") from None


def read_back(engine: Engine, text: str) -> Reply:
    """An answer a front end sends back: read as this server's ``--reply-format`` where it is in that form
    (``read_answer``: markers and words apart, the front end's emotion names as their keys), else leniently."""

    speakers = engine.cast.speakers
    back = engine.names.back()
    found = read_answer(
        engine.settings.reply_format, text, engine.tags, speakers=speakers, vocabulary=engine.vocabulary, emotions=back
    )
    return found if found is not None else engine.read(text)
