"""One turn: render → upstream (+ grammar) → stream → stage, as a sequence of typed pieces.

``Engine.turn`` yields, in order: each raw text delta of the model (``Raw``), each event of the
``StreamParser`` the moment it is certain, the stage cues and sentences each event makes
certain, and last the ``Done`` record (the reply, its raw text, validity and timing). The
endpoints only choose which pieces to send and in what shape.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from charfmt.diagnostics import CharfmtError

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange
    from charfmt.events import Event
    from charfmt.models import Reply
    from charfmt.serve.settings import Settings
    from charfmt.serve.upstream import Upstream
    from charfmt.speech import Sentence
    from charfmt.stage import StageCue
    from charfmt.userinput import UserTurn

PROMPT_MARGIN = 32
"""Tokens of the context window kept free beyond the prompt's count (as ``charfmt chat``)."""


@functools.lru_cache(maxsize=2048)
def count_tokens(text: str) -> int:
    """``estimate_tokens``, remembered: the system prompt and past exchanges come back every turn."""
    from charfmt.render import estimate_tokens  # noqa: PLC0415

    return estimate_tokens(text)


@dataclass(frozen=True, slots=True)
class Raw:
    """A piece of the model's own text, as it arrived."""

    text: str


@dataclass(frozen=True, slots=True)
class EventPiece:
    event: Event


@dataclass(frozen=True, slots=True)
class CuePiece:
    cue: StageCue


@dataclass(frozen=True, slots=True)
class SentencePiece:
    sentence: Sentence


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
    """The prompt's tokens as ``estimate_tokens`` counts them (errs high against BPE tokenizers)."""

    def timing(self) -> dict[str, Any]:
        """The timing fields of the log and of ``/v1/turn``'s reply event."""
        return {
            "first_token_s": round(self.first_token_seconds, 6),
            "total_s": round(self.seconds, 6),
            "tokens": self.tokens,
            "finish_reason": self.reason,
        }


Piece = Raw | EventPiece | CuePiece | SentencePiece | Done


def reply_bounds(settings: Settings) -> Any:
    """The grammar's bounds within ``max_tokens``: the shape the examples show (``charfmt chat``'s)."""
    from charfmt.chat import DEFAULT_MAX_ELEMENTS, chat_bounds  # noqa: PLC0415
    from charfmt.export import Bounds  # noqa: PLC0415
    from charfmt.tags import TAGGED_TYPES  # noqa: PLC0415

    scene = settings.scene
    if scene is None:
        return chat_bounds(settings.character, settings.max_tokens)
    replies = [ex.reply for ex in scene.examples]
    chats = max((len(r.chats) for r in replies), default=len(scene.cast) + 1)
    elements = max((len(c.segments) for r in replies for c in r.chats if c.type in TAGGED_TYPES), default=0)
    return Bounds.for_tokens(
        settings.max_tokens, max_chats=max(1, chats), max_elements=max(DEFAULT_MAX_ELEMENTS, elements),
        vocabulary=scene.vocabulary, tags=scene.tags,
    )  # fmt: skip


class BadTurn(CharfmtError):
    """The player's turn cannot be sent (nothing to say, or it does not fit the context window)."""


class Engine:
    """The character, its upstream and the request fields that constrain it."""

    def __init__(self, settings: Settings, upstream: Upstream) -> None:
        from charfmt.chat import limit_note  # noqa: PLC0415

        self.settings = settings
        self.character: Character = settings.character
        self.scene = settings.scene
        self.vocabulary = self.scene.vocabulary if self.scene is not None else self.character.vocabulary
        self.tags = self.scene.tags if self.scene is not None else self.character.tags
        self.upstream = upstream
        self.model = settings.model_name or (self.scene.name if self.scene is not None else self.character.name)
        bounds = reply_bounds(settings)
        self.note = limit_note(bounds)
        self._fields = {True: self._constraint(bounds), False: {"max_tokens": settings.max_tokens}}
        self.budget = settings.n_ctx - settings.max_tokens - PROMPT_MARGIN

    def _constraint(self, bounds: Any) -> dict[str, Any]:
        from charfmt.engines import request_fields  # noqa: PLC0415

        s = self.settings
        server = "llama-server" if s.model_path is not None and s.upstream_url is None else s.server
        speakers = self.scene.speakers if self.scene is not None else None
        return request_fields(
            server, vocabulary=self.vocabulary, tags=self.tags, max_tokens=s.max_tokens, bounds=bounds,
            speakers=speakers,
        )  # fmt: skip

    def read(self, text: str, *, lenient: bool = True) -> Reply:
        """A reply read as this character's (or, in a scene, each speaker's): ``ParseError`` if strict and bad."""
        from charfmt.parser import parse  # noqa: PLC0415

        if self.scene is not None:
            return self.scene.parse(text, lenient=lenient)
        return parse(text, lenient=lenient, vocabulary=self.vocabulary, tags=self.tags)

    def player_turn(self, say: str) -> UserTurn:
        """The player's turn read as shorthand (``[joy] hi``, ``*waves*``), or ``BadTurn``."""
        if not say.strip():
            raise BadTurn("nothing to say: the player's turn is empty")
        if len(say) > self.settings.max_say:
            raise BadTurn(f"the player's turn is {len(say):,} characters (at most {self.settings.max_say:,})")
        return self.character.shorthand(say)  # in a scene: the first of the cast's words (as Scene.load reads)

    def request(self, history: list[Exchange], turn: UserTurn, constrained: bool | None = None) -> dict[str, Any]:
        """The upstream request body for ``turn`` after ``history`` (oldest exchanges left out to fit)."""
        from charfmt.render import BudgetError, render_messages  # noqa: PLC0415

        budget = self.budget - count_tokens(self.note)
        messages: list[dict[str, str]]
        if self.scene is not None:  # the scene's own prompt; the oldest exchanges left out to fit
            past = list(history)
            while True:
                messages = self.scene.render_messages(past, turn)["messages"]
                if sum(count_tokens(m["content"]) for m in messages) <= budget:
                    break
                if not past:
                    raise BadTurn(f"the turn does not fit the context window ({budget} tokens)")
                del past[0]
        else:
            try:
                messages = render_messages(self.character, history, turn, budget=budget, counter=count_tokens)[
                    "messages"
                ]
            except BudgetError as e:
                raise BadTurn(f"the turn does not fit the context window: {e}") from None
        messages[0] = {**messages[0], "content": f"{messages[0]['content'].rstrip()}\n\n{self.note}\n"}
        on = self.settings.constrained if constrained is None else constrained
        return {"model": self.model, "messages": messages, "stream": True, **self._fields[on]}

    async def turn(
        self,
        history: list[Exchange],
        turn: UserTurn,
        *,
        constrained: bool | None = None,
        request_id: str | None = None,
        events: bool = True,
        cues: bool = True,
        options: dict[str, Any] | None = None,
    ) -> AsyncIterator[Piece]:
        """The pieces of one turn (see the module docstring); the exchange is for the caller to keep.

        ``options``: the front end's sampling fields (``temperature``, ``top_p``, ``seed``, ``stop``)
        sent upstream as they are, and its own ``system`` text, appended to charfmt's system prompt.
        ``events=False``: only the raw text and ``Done`` (the reply read once at the end, leniently,
        as the stream would have read it); ``cues=False``: no stage cues or sentences.
        """
        from charfmt.character import Exchange  # noqa: PLC0415
        from charfmt.diagnostics import ParseError  # noqa: PLC0415
        from charfmt.speech import SentenceSplitter  # noqa: PLC0415
        from charfmt.stage import StageReader  # noqa: PLC0415
        from charfmt.stream import StreamParser  # noqa: PLC0415
        from charfmt.writer import canonical_form  # noqa: PLC0415

        # Rendered in a worker thread: a burst of turns starting at once would otherwise hold the
        # event loop for every render in a row, and the chunks of the turns already streaming wait.
        body = await asyncio.to_thread(self.request, history, turn, constrained)
        if options:
            front = dict(options)
            system = front.pop("system", None)
            if system:
                head = body["messages"][0]
                body["messages"][0] = {**head, "content": f"{head['content'].rstrip()}\n\n{system}\n"}
            body.update(front)
        version = hashlib.sha256(body["messages"][0]["content"].encode()).hexdigest()[:12]
        rid = request_id or uuid.uuid4().hex
        stream = StreamParser(lenient=True, vocabulary=self.vocabulary, tags=self.tags, turn=turn)  # echoes: CF625
        length = self.settings.max_length
        if self.scene is not None:
            stage = self.scene.stage(max_length=length)
        else:
            stage = StageReader(self.character, max_length=length)
        splitter = SentenceSplitter(tags=self.tags, max_length=length)
        started = time.perf_counter()
        first: float | None = None
        tokens, reason, chunks = 0, None, []

        def pieces(found: list[Event]) -> list[Piece]:
            out: list[Piece] = []
            for event in found:
                out.append(EventPiece(event))
                if cues:
                    out.extend(CuePiece(c) for c in stage.feed(event))
                    out.extend(SentencePiece(s) for s in splitter.feed(event))
            return out

        async for delta in self.upstream.chat(body, max_tokens=self.settings.max_tokens):
            reason = delta.reason or reason
            if not delta.text:
                continue
            if first is None:
                first = time.perf_counter()
            tokens += 1
            chunks.append(delta.text)
            yield Raw(delta.text)
            if events:
                for piece in pieces(stream.feed(delta.text)):
                    yield piece
        text = "".join(chunks)
        if events:
            for piece in pieces(stream.close()):
                yield piece
        if cues and events:
            for cue in stage.close():
                yield CuePiece(cue)
            for sentence in splitter.close():
                yield SentencePiece(sentence)
        try:
            self.read(text, lenient=False)
            valid = True
        except ParseError:
            valid = False
        reply = stream.reply if events and self.scene is None else self.read(text)
        end = time.perf_counter()
        exchange = Exchange(user=turn, reply=canonical_form(reply, tags=self.tags))
        prompt = sum(count_tokens(m["content"]) for m in body["messages"])
        yield Done(
            rid, reply, text, valid, exchange, (first or end) - started, end - started, tokens, reason, version, prompt
        )


def history_from_messages(engine: Engine, messages: list[tuple[str, str]]) -> list[Exchange]:
    """Exchanges from a front end's own history (user/assistant pairs; the assistant's text read leniently).

    A front end that shows ``[joy] hi`` sends that back: the lenient reader's bracket dialect
    reads it as the same reply. System messages and unpaired turns are left out.
    """
    from charfmt.character import Exchange  # noqa: PLC0415
    from charfmt.writer import canonical_form  # noqa: PLC0415

    out: list[Exchange] = []
    pending: str | None = None
    for role, text in messages:
        if role == "user":
            pending = text
        elif role == "assistant" and pending is not None:
            reply = engine.read(text)
            if pending.strip() and reply.chats:
                out.append(Exchange(user=engine.character.shorthand(pending), reply=canonical_form(reply, engine.tags)))
            pending = None
    return out
