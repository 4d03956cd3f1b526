"""The stream objects of the LLM SDKs read as what charfmt needs: speech text, reasoning, diagnostics.

``iter_events`` and ``aiter_events`` take whatever an SDK streams. Each item goes through one
ordered table, ``RULES``, of ``(name, detect, read)`` rules; the first rule whose ``detect``
accepts the item reads it, so the order is visible here and nowhere else:

========================  ==========================================================================
``text``                  ``str`` and bytes-like chunks, as before (text of the reply)
``helper-derived``        the events a stream helper derives (Anthropic's ``MessageStream``:
                          ``text``, ``thinking``...; OpenAI's ``chat.completions.stream``:
                          ``content.delta``...): each repeats a raw event it also yields: skipped
``openai-chat-helper``    the raw chunk OpenAI's ``chat.completions.stream`` wraps (``chunk``)
``error-event``           an ``error`` event (Anthropic, OpenAI Responses): ``CF826``
``openai-responses``      OpenAI Responses API events (``response.output_text.delta``...)
``anthropic``             Anthropic raw stream events (``content_block_delta``...) and a ``Message``
``openai-chat``           OpenAI chat completions chunks (and a whole ``ChatCompletion``), and
                          every OpenAI-compatible server (vLLM, llama.cpp, ollama's ``/v1``...)
``openai-response``       a whole OpenAI Responses API ``Response``
``gemini``                google-genai ``GenerateContentResponse``
``ollama``                ollama's ``ChatResponse`` and ``GenerateResponse``
``langchain``             LangChain messages (``AIMessageChunk``, ``AIMessage``)
========================  ==========================================================================

Detection is duck typing on attributes (or keys: a dict of the same JSON shape reads the
same); no SDK is imported here. What each item holds becomes a ``ChunkParts``: speech text for the
reader, reasoning (``Reasoning`` events), refusal text and notes (diagnostics ``CF821`` to
``CF826``, positioned at the point of the speech text the stream had reached). A refusal,
a tool call, a safety block or an item charfmt cannot read is a diagnostic, never an error.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from types import GeneratorType
from typing import Any, Final, NamedTuple, Protocol, cast

from charfmt.diagnostics import CODES, Diagnostic
from charfmt.events import DiagnosticEvent, Event, Reasoning, Reset

_TEXT_TYPES: Final = (str, bytes, bytearray, memoryview)


@dataclass(slots=True)
class ChunkParts:
    """What one stream item holds for charfmt."""

    text: str | bytes = ""
    """Text of the reply, for the stream reader."""
    reasoning: str = ""
    """More of the provider's reasoning (thinking) text."""
    refusal: str = ""
    """More of the model's refusal text (one ``CF821`` at the end of the stream says all of it)."""
    notes: list[tuple[str, str]] = field(default_factory=list)
    """Diagnostics as ``(code, message)``: a tool call, a stop reason, a part not read."""


class Rule(NamedTuple):
    """One kind of stream item: how to recognise it and how to read it."""

    name: str
    detect: Callable[[Any], bool]
    read: Callable[[Any], ChunkParts]


def _get(obj: Any, name: str) -> Any:
    """An attribute of an SDK object, or the key of the same name of its JSON as a dict
    (snake_case, or camelCase as Gemini's REST API writes it: ``finishReason``)."""
    if type(obj) is not dict and not isinstance(obj, Mapping):
        return getattr(obj, name, None)
    value = obj.get(name)
    if value is None and "_" in name:
        value = obj.get(_CAMEL.get(name) or _camel(name))
    return value


_CAMEL: dict[str, str] = {}  # (bounded: the names are this module's literals)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    _CAMEL[name] = camel = head + "".join(word.title() for word in rest)
    return camel


def _has(obj: Any, name: str) -> bool:
    """Whether an SDK object has the field ``name`` (set or not), or its JSON the key."""
    return _get(obj, name) is not None if isinstance(obj, Mapping) else hasattr(obj, name)


def _str(value: Any) -> str:
    """A text field's value; ``None`` (a refusal's content, a tool call's text) and non-text are empty."""
    return value if isinstance(value, str) else ""


def _kind(item: Any) -> str:
    """An event's or block's ``type`` (``""`` if it has none)."""
    return _str(_get(item, "type"))


def _name(value: Any) -> str:
    """An enum's value (google-genai's ``FinishReason.SAFETY``) or a plain string, as a string."""
    value = getattr(value, "value", value)
    return value if isinstance(value, str) else ""


def _paragraphs(*parts: str) -> str:
    """Reasoning parts (a Responses API summary's parts) as paragraphs: kept apart by a blank line."""
    return "\n\n".join(part for part in parts if part)


def quoted(text: str) -> str:
    """``text`` in double quotes, as JSON writes it (a refusal's text in a message)."""
    return json.dumps(text, ensure_ascii=False)


# -- stop reasons, tool calls: the notes every SDK shares ------------------------------------------

_STOPS: Final[dict[str, tuple[str, str]]] = {
    # a refusal: the model declined (Anthropic's stop_reason)
    "refusal": ("CF821", "the model refused to answer (stop reason 'refusal')"),
    # blocked by the provider's filters
    "content_filter": ("CF823", "the provider's content filter stopped the reply ('content_filter')"),
    "SAFETY": ("CF823", "the provider's safety filter stopped the reply ('SAFETY')"),
    "RECITATION": ("CF823", "the provider stopped the reply as recitation ('RECITATION')"),
    "BLOCKLIST": ("CF823", "the provider's blocklist stopped the reply ('BLOCKLIST')"),
    "PROHIBITED_CONTENT": ("CF823", "the provider stopped the reply as prohibited content ('PROHIBITED_CONTENT')"),
    "SPII": ("CF823", "the provider stopped the reply as personal information ('SPII')"),
    "IMAGE_SAFETY": ("CF823", "the provider's safety filter stopped the reply ('IMAGE_SAFETY')"),
    # cut at a token limit
    "length": ("CF824", "the reply stopped at the token limit ('length'): it may be cut off"),
    "max_tokens": ("CF824", "the reply stopped at the token limit ('max_tokens'): it may be cut off"),
    "MAX_TOKENS": ("CF824", "the reply stopped at the token limit ('MAX_TOKENS'): it may be cut off"),
    "max_output_tokens": ("CF824", "the reply stopped at the token limit ('max_output_tokens'): it may be cut off"),
    # paused: a long-running turn (Anthropic's server tools) to be continued by sending it back
    "pause_turn": ("CF827", "the provider paused the turn ('pause_turn'): send the reply back to continue it"),
    "model_context_window_exceeded": (
        "CF824",
        "the reply stopped at the model's context window ('model_context_window_exceeded'): it may be cut off",
    ),
}
"""Stop (finish) reasons worth a diagnostic, as each SDK spells them; the others say nothing."""


def _stop(piece: ChunkParts, reason: Any) -> ChunkParts:
    note = _STOPS.get(_name(reason))
    if note is not None:
        piece.notes.append(note)
    return piece


def _tool(piece: ChunkParts, name: Any, what: str = "tool") -> None:
    called = _str(name) or what
    message = f"the model called the {what} {quoted(called)}: a tool call is not part of the reply (the SDK has it)"
    piece.notes.append(("CF822", message))


def _only_first(piece: ChunkParts, index: Any, what: str) -> bool:
    """Whether a choice or candidate is the first one (the reply); a later one is noted, not read."""
    if index in (None, 0):
        return True
    piece.notes.append(("CF825", f"{what} {index} not read: only the first one is the reply"))
    return False


# -- the rules --------------------------------------------------------------------------------------


def _is_text(item: Any) -> bool:
    return isinstance(item, _TEXT_TYPES)


def _read_text(item: Any) -> ChunkParts:
    return ChunkParts(text=item if isinstance(item, str | bytes) else bytes(item))


_ANTHROPIC_DERIVED: Final = frozenset({"text", "thinking", "input_json", "citation", "signature"})
_OPENAI_DERIVED: Final = ("content.", "refusal.", "tool_calls.", "logprobs.")


def _is_derived(item: Any) -> bool:
    """An event a stream helper derives from a raw event it also yields (Anthropic's
    ``MessageStream``, OpenAI's ``chat.completions.stream``): reading it would read twice."""
    kind = _kind(item)
    if kind == "signature":
        return isinstance(_get(item, "signature"), str)
    if kind in _ANTHROPIC_DERIVED:
        return _get(item, "snapshot") is not None
    return kind.startswith(_OPENAI_DERIVED)


def _skip(item: Any) -> ChunkParts:
    return ChunkParts()


def _is_openai_chat_helper(item: Any) -> bool:
    return _kind(item) == "chunk" and _is_openai_chat(_get(item, "chunk"))


def _read_openai_chat_helper(item: Any) -> ChunkParts:
    return _read_openai_chat(_get(item, "chunk"))


def _is_error_event(item: Any) -> bool:
    return _kind(item) == "error"


def _read_error_event(item: Any) -> ChunkParts:
    error = _get(item, "error")
    message = _str(_get(error, "message")) or _str(_get(item, "message")) or "no message"
    kind = _kind(error) or _str(_get(item, "code"))
    return ChunkParts(notes=[("CF826", f"the provider sent an error{f' ({kind})' if kind else ''}: {message}")])


def _is_responses_event(item: Any) -> bool:
    return _kind(item).startswith("response.")


_RESPONSES_TEXT: Final = frozenset({"response.output_text.delta"})
_RESPONSES_REASONING: Final = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})


def _read_responses_event(item: Any) -> ChunkParts:
    kind = _kind(item)
    if kind in _RESPONSES_TEXT:
        return ChunkParts(text=_str(_get(item, "delta")))
    if kind in _RESPONSES_REASONING:
        return ChunkParts(reasoning=_str(_get(item, "delta")))
    if kind == "response.refusal.delta":
        return ChunkParts(refusal=_str(_get(item, "delta")))
    if kind == "response.reasoning_summary_part.added" and _get(item, "summary_index"):
        return ChunkParts(reasoning="\n\n")  # summary parts are paragraphs: keep them apart
    piece = ChunkParts()
    if kind == "response.output_item.added":
        output = _get(item, "item")
        output_type = _kind(output)
        if output_type.endswith("_call"):
            _tool(piece, _get(output, "name") or output_type, "tool")
    elif kind == "response.incomplete":
        _stop(piece, _get(_get(_get(item, "response"), "incomplete_details"), "reason"))
    elif kind == "response.failed":
        error = _get(_get(item, "response"), "error")
        message = _str(_get(error, "message")) or "no message"
        piece.notes.append(("CF826", f"the provider failed the response: {message}"))
    return piece


_ANTHROPIC_EVENTS: Final = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "message",
    }
)


def _is_anthropic_event(item: Any) -> bool:
    return _kind(item) in _ANTHROPIC_EVENTS


def _anthropic_block(piece: ChunkParts, block: Any) -> None:
    kind = _kind(block)
    if kind == "text":
        piece.text = _str(piece.text) + _str(_get(block, "text"))
    elif kind == "thinking":
        piece.reasoning += _str(_get(block, "thinking"))
    elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        _tool(piece, _get(block, "name"))


def _read_anthropic_event(item: Any) -> ChunkParts:
    kind = _kind(item)
    piece = ChunkParts()
    if kind == "content_block_delta":
        delta = _get(item, "delta")
        delta_type = _kind(delta)
        if delta_type == "text_delta":
            piece.text = _str(_get(delta, "text"))
        elif delta_type == "thinking_delta":
            piece.reasoning = _str(_get(delta, "thinking"))
    elif kind == "content_block_start":
        _anthropic_block(piece, _get(item, "content_block"))
    elif kind == "message_delta":
        _stop(piece, _get(_get(item, "delta"), "stop_reason"))
    elif kind == "message":  # a whole Message (messages.create without stream)
        for block in _get(item, "content") or ():
            _anthropic_block(piece, block)
        _stop(piece, _get(item, "stop_reason"))
    return piece


def _is_openai_chat(item: Any) -> bool:
    return isinstance(_get(item, "choices"), list)


def _is_openai_response(item: Any) -> bool:
    return _get(item, "object") == "response" and isinstance(_get(item, "output"), list)


def _read_openai_response(item: Any) -> ChunkParts:
    """A whole ``Response`` (``responses.create`` without stream)."""
    piece = ChunkParts()
    text: list[str] = []
    for output in _get(item, "output"):
        kind = _kind(output)
        if kind == "message":
            for part in _get(output, "content") or ():
                text.append(_str(_get(part, "text")) if _kind(part) == "output_text" else "")
                piece.refusal += _str(_get(part, "refusal")) if _kind(part) == "refusal" else ""
        elif kind == "reasoning":
            summary = [_str(_get(s, "text")) for s in _get(output, "summary") or ()]
            piece.reasoning = _paragraphs(piece.reasoning, *summary)
        elif kind.endswith("_call"):
            _tool(piece, _get(output, "name") or kind)
    piece.text = "".join(text)
    return _stop(piece, _get(_get(item, "incomplete_details"), "reason"))


def _read_openai_chat(item: Any) -> ChunkParts:
    piece = ChunkParts()
    for choice in _get(item, "choices"):
        if not _only_first(piece, _get(choice, "index"), "choice"):
            continue
        delta = _get(choice, "delta")
        if delta is None:
            delta = _get(choice, "message")  # a whole ChatCompletion
        # (a legacy completion, llama-cpp-python's create_completion: the text on the choice)
        piece.text = _str(_get(delta, "content")) if delta is not None else _str(_get(choice, "text"))
        # OpenAI-compatible servers stream reasoning under one of two names (DeepSeek, vLLM, OpenRouter, ollama)
        piece.reasoning = _str(_get(delta, "reasoning_content")) or _str(_get(delta, "reasoning"))
        piece.refusal = _str(_get(delta, "refusal"))
        calls = _get(delta, "tool_calls")
        for call in calls if isinstance(calls, list | tuple) else ():  # (a server's JSON may hold anything here)
            name = _get(_get(call, "function"), "name")
            if name:  # the first delta of a call names it; the rest carry its arguments
                _tool(piece, name)
        legacy = _get(delta, "function_call")
        if _get(legacy, "name"):
            _tool(piece, _get(legacy, "name"), "function")
        _stop(piece, _get(choice, "finish_reason"))
    return piece


def read_chat_chunk(item: Any) -> ChunkParts:
    """One OpenAI chat completion chunk (or whole completion) read: the ``openai-chat`` rule's reader.

    The HTTP client of ``chat --endpoint`` reads the chunks it decodes through this, so what a
    chunk means (content, reasoning, refusal, tool calls, finish reason) is said only here.
    """
    return _read_openai_chat(item)


def _is_gemini(item: Any) -> bool:
    # (a chunk may carry only usage, with no candidates: the fields are still there, unset)
    return _has(item, "candidates") or _has(item, "prompt_feedback")


def _read_gemini(item: Any) -> ChunkParts:
    piece = ChunkParts()
    text: list[str] = []
    feedback = _get(_get(item, "prompt_feedback"), "block_reason")
    if feedback:
        piece.notes.append(("CF823", f"the provider blocked the prompt ({quoted(_name(feedback) or str(feedback))})"))
    for n, candidate in enumerate(_get(item, "candidates") or ()):
        if not _only_first(piece, _get(candidate, "index") or n, "candidate"):
            continue
        for part in _get(_get(candidate, "content"), "parts") or ():
            if _get(part, "thought"):
                piece.reasoning += _str(_get(part, "text"))
            elif (call := _get(part, "function_call") or _get(part, "tool_call")) is not None:
                _tool(piece, _get(call, "name"))
            elif _get(part, "executable_code") is not None:
                _tool(piece, "code_execution")
            else:
                text.append(_str(_get(part, "text")))
        _stop(piece, _get(candidate, "finish_reason"))
    piece.text = "".join(text)
    return piece


def _is_ollama(item: Any) -> bool:
    return _get(item, "done") is not None and (_get(item, "message") is not None or _get(item, "response") is not None)


def _read_ollama(item: Any) -> ChunkParts:
    message = _get(item, "message")
    if message is None:  # GenerateResponse
        piece = ChunkParts(text=_str(_get(item, "response")), reasoning=_str(_get(item, "thinking")))
    else:  # ChatResponse
        piece = ChunkParts(text=_str(_get(message, "content")), reasoning=_str(_get(message, "thinking")))
        for call in _get(message, "tool_calls") or ():
            _tool(piece, _get(_get(call, "function"), "name"))
    return _stop(piece, _get(item, "done_reason"))


def _is_langchain(item: Any) -> bool:
    return _get(item, "additional_kwargs") is not None and _get(item, "content") is not None


_LANGCHAIN_STOP_KEYS: Final = ("finish_reason", "stop_reason", "done_reason")


def _read_langchain(item: Any) -> ChunkParts:
    piece = ChunkParts()
    content = _get(item, "content")
    text: list[str] = []
    for block in [content] if isinstance(content, str) else content or ():
        kind = "text" if isinstance(block, str) else _kind(block)
        if kind == "text":
            text.append(block if isinstance(block, str) else _str(_get(block, "text")))
        elif kind == "thinking":  # Anthropic's and Gemini's, through LangChain
            piece.reasoning += _str(_get(block, "thinking"))
        elif kind == "reasoning":  # LangChain's standard block; OpenAI Responses' summary
            summary = [_str(_get(s, "text")) for s in _get(block, "summary") or ()]
            piece.reasoning += _paragraphs(_str(_get(block, "reasoning")), *summary)
    piece.text = "".join(text)
    extra = _get(item, "additional_kwargs")
    piece.reasoning += _str(_get(extra, "reasoning_content"))
    piece.refusal = _str(_get(extra, "refusal"))
    calls = _get(item, "tool_call_chunks")
    if calls is None:
        calls = _get(item, "tool_calls")
    for call in calls or ():
        if _get(call, "name"):
            _tool(piece, _get(call, "name"))
    metadata = _get(item, "response_metadata")
    for key in _LANGCHAIN_STOP_KEYS:
        _stop(piece, _get(metadata, key))
    return piece


RULES: Final[tuple[Rule, ...]] = (
    Rule("text", _is_text, _read_text),
    Rule("helper-derived", _is_derived, _skip),
    Rule("openai-chat-helper", _is_openai_chat_helper, _read_openai_chat_helper),
    Rule("error-event", _is_error_event, _read_error_event),
    Rule("openai-responses", _is_responses_event, _read_responses_event),
    Rule("anthropic", _is_anthropic_event, _read_anthropic_event),
    Rule("openai-chat", _is_openai_chat, _read_openai_chat),
    Rule("openai-response", _is_openai_response, _read_openai_response),
    Rule("gemini", _is_gemini, _read_gemini),
    Rule("ollama", _is_ollama, _read_ollama),
    Rule("langchain", _is_langchain, _read_langchain),
)
"""Every kind of stream item charfmt reads, in the order they are tried: the first match wins."""


def rule_for(item: Any) -> Rule | None:
    """The first rule that recognises ``item``, or ``None``."""
    for rule in RULES:
        if rule.detect(item):
            return rule
    return None


# -- a stream: its items, and what they add up to -------------------------------------------------


def items(source: Any) -> Iterable[Any]:
    """The items of ``source``: a stream (any iterable, as it is), a context manager that opens one
    (Anthropic's ``client.messages.stream(...)``), or one whole text or SDK response."""
    if isinstance(source, list | tuple | GeneratorType):  # the usual streams, known at once
        return source
    if inspect.isawaitable(source) or (hasattr(source, "__aiter__") and not hasattr(source, "__iter__")):
        raise TypeError(
            f"iter_events got an async stream or an awaitable ({type(source).__qualname__}): use aiter_events"
        )
    if isinstance(source, _TEXT_TYPES) or rule_for(source) is not None or not _iterable(source):
        if not hasattr(source, "__iter__") and hasattr(source, "__enter__"):
            return _opened(source)
        return (source,)
    return cast("Iterable[Any]", source)


def _opened(manager: Any) -> Iterator[Any]:
    with manager as opened:
        yield from items(opened)


async def aitems(source: Any) -> AsyncGenerator[Any, None]:
    """The items of ``source`` as ``items``, and also an async stream, an async context manager
    (``client.messages.stream(...)`` of ``AsyncAnthropic``) or an awaitable that gives one
    (``AsyncOpenAI().chat.completions.create(..., stream=True)`` before ``await``)."""
    if hasattr(source, "__aiter__"):
        async for item in source:
            yield item
    elif hasattr(source, "__aenter__"):
        async with source as opened, aclosing(aitems(opened)) as inner:
            async for item in inner:
                yield item
    elif inspect.isawaitable(source):
        opened = await source
        try:
            async with aclosing(aitems(opened)) as inner:
                async for item in inner:
                    yield item
        finally:  # the stream this call opened (the response) is closed here, even when left early
            close = getattr(opened, "aclose", None) or getattr(opened, "close", None)
            if callable(close):
                result = close()
                if inspect.isawaitable(result):
                    await result
    else:
        for item in items(source):
            yield item


def _iterable(source: Any) -> bool:
    return hasattr(source, "__iter__") and not isinstance(source, Mapping)


FOLD: Final = 256
"""How many text chunks ``Reader.fed`` holds before ``fold`` counts them (memory stays flat)."""


class EventReader(Protocol):
    """What reads the reply text into events: ``charfmt.stream.StreamParser``."""

    def feed(self, chunk: str | bytes) -> list[Event]: ...

    def close(self) -> list[Event]: ...


class Reader:
    """Reads one stream's items in order: the text to feed the reader, the events to show now.

    It keeps the provider's reasoning and the diagnostics it showed, because a ``Reset`` from
    the stream reader forgets every event so far: after one, ``after`` shows them again.
    A text chunk needs none of this: the caller appends it to ``fed`` (a diagnostic's position
    is counted from there only when one is made) and calls ``fold`` past ``FOLD`` of them.
    """

    def __init__(self) -> None:
        self.fed: list[str | bytes] = []
        """Text fed since the position was last counted."""
        self.showing = False
        """Whether this reader showed events a ``Reset`` would forget (then ``after`` is needed)."""
        self._offset = 0  # where the speech text counted so far ends: diagnostics point there
        self._line = 1
        self._line_start = 0
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        self._shown: list[DiagnosticEvent] = []
        self._unread: set[str] = set()

    def feed(self, parser: EventReader, item: Any) -> list[Event]:
        """The events one stream item gives, in order: what it shows at once (reasoning, a tool call...),
        then the events of ``parser`` fed its reply text. Every loop over a model's stream (``iter_events``,
        ``aiter_events``, ``charfmt chat``) is this call per item and ``finish`` at the end."""
        fed = self.fed
        if type(item) is str:  # a text chunk, the common case: kept as cheap as feeding the parser
            fed.append(item)
            events = parser.feed(item)
            if len(fed) >= FOLD:
                self.fold()
            return self.after(events) if self.showing else events
        text, shown = self.take(item) if isinstance(item, ChunkParts) else self.read(item)
        if not text:
            return shown
        events = parser.feed(text)
        if len(fed) >= FOLD:
            self.fold()
        return shown + (self.after(events) if self.showing else events)

    def finish(self, parser: EventReader) -> list[Event]:
        """The events of the stream's end: this reader's (a refusal) and ``parser``'s, after its ``close``."""
        return self.close() + self.after(parser.close())

    def read(self, item: Any) -> tuple[str | bytes, list[Event]]:
        """The reply text ``item`` holds (may be empty) and the events it gives at once."""
        if type(item) is str:  # (iter_events reads these itself)
            self.fed.append(item)
            return item, []
        rule = rule_for(item)
        if rule is None:
            kind = type(item).__qualname__
            message = f"a stream item of type {kind} is neither text nor an SDK stream object charfmt reads: skipped"
            piece = ChunkParts(notes=[("CF825", message)])
        else:
            piece = rule.read(item)
        return self.take(piece)

    def take(self, piece: ChunkParts) -> tuple[str | bytes, list[Event]]:
        """The reply text of an item already read into ``piece`` and the events it gives at once."""
        events: list[Event] = []
        if piece.reasoning:
            self._reasoning.append(piece.reasoning)
            self.showing = True
            events.append(Reasoning(piece.reasoning))
        if piece.refusal:
            self._refusal.append(piece.refusal)
        for code, message in piece.notes:
            if code == "CF825":  # said once per kind of item (every chunk of a second choice...)
                if message in self._unread:
                    continue
                self._unread.add(message)
            events.append(self._note(code, message))
        if piece.text:
            self.fed.append(piece.text)
        return piece.text, events

    @property
    def reasoning(self) -> str:
        """The provider's reasoning read so far (beside the reply's text: ``reasoning_content``, thinking blocks)."""
        return "".join(self._reasoning)

    def close(self) -> list[Event]:
        """The events of the end of the stream: the whole refusal, if the model refused."""
        if not self._refusal:
            return []
        refusal, self._refusal = "".join(self._refusal), []
        return [self._note("CF821", f"the model refused to answer: {quoted(refusal)}")]

    def after(self, events: list[Event]) -> list[Event]:
        """``events`` of the stream reader, with what this reader showed again after a ``Reset``."""
        if not self.showing or not any(isinstance(e, Reset) for e in events):
            return events
        out: list[Event] = []
        for event in events:
            out.append(event)
            if isinstance(event, Reset):
                if self._reasoning:
                    out.append(Reasoning("".join(self._reasoning)))
                out.extend(self._shown)
        return out

    def fold(self) -> None:
        """Count the text in ``fed`` (characters of ``str``, bytes of ``bytes``, as the reader counts them)."""
        for text in self.fed:
            lines = text.count("\n") if isinstance(text, str) else text.count(b"\n")
            if lines:
                self._line += lines
                last = text.rindex("\n") if isinstance(text, str) else text.rindex(b"\n")
                self._line_start = self._offset + 1 + last
            self._offset += len(text)
        self.fed.clear()

    def _note(self, code: str, message: str) -> DiagnosticEvent:
        self.fold()
        self.showing = True
        diagnostic = Diagnostic(
            code=code,
            message=message,
            severity=CODES[code][0],
            line=self._line,
            column=self._offset - self._line_start + 1,
            offset=self._offset,
            end=self._offset,
        )
        event = DiagnosticEvent(None, diagnostic)
        self._shown.append(event)
        return event
