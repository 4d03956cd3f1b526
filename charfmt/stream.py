"""Streaming: events as model output arrives, never a partial tag, identical to the batch result.

``StreamParser`` (the reader itself is the package ``charfmt._stream``; its docstring says how
it works) takes chunks of ``str`` or ``bytes``; ``iter_events`` and ``aiter_events`` wrap it for
iterables and async iterables of those or of the LLM SDKs' own stream objects (read by
``charfmt.llm._sdk_chunks``); ``collect`` rebuilds the ``Reply`` a sequence of events describes.

Where the package was built with a C compiler, ``charfmt._stream`` also exists compiled with
mypyc (``charfmt._stream_c``, made by ``hatch_build.py`` at install): the same source, the same
events, over twice as fast. It is used only while it was compiled from the very package
installed next to it: a digest of every module, ``charfmt/**/*.py`` (``charfmt._twin``; mypyc
inlines constants of the modules the reader imports), is compiled in, so an edited source, of
any module, never runs stale code. ``CHARFMT_PURE_PYTHON=1`` (or ``true``, ``yes``, ``on``) in
the environment turns it off. ``COMPILED`` says which one runs.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeVar, Unpack

from charfmt import _twin
from charfmt._stream import collector as _pure_collector
from charfmt._stream import reader as _pure_reader
from charfmt.events import Event
from charfmt.llm import _sdk_chunks
from charfmt.models import Vocabulary
from charfmt.tags import TagTable

__all__ = [
    "COMPILED",
    "Collector",
    "StreamParser",
    "aiter_events",
    "collect",
    "iter_events",
    "reader_name",
    "source_digest",
]


def source_digest(package: Path | None = None) -> str:
    """The digest ``hatch_build.py`` compiles into ``charfmt._stream_c``: SHA-256 of the package's modules.

    ``package`` is the folder of ``charfmt`` (default: the installed one); every ``<name>.py``
    in it and in its subpackages counts, sorted by path, the compiled twin's own folder
    excepted (``charfmt._twin``).
    """
    return _twin.package_digest(Path(_twin.__file__).parent if package is None else package)


def _compiled_twin(package: Path | None = None) -> ModuleType | None:
    """``charfmt._stream_c`` if it was compiled from the package it sits in, else ``None`` (``charfmt._twin.load``)."""
    return _twin.load(_twin.TWIN, package)


_TWIN: Final = _compiled_twin()
COMPILED: Final = _TWIN is not None
"""Whether the mypyc-compiled reader runs (``False``: the pure-Python one, same events)."""

if TYPE_CHECKING:
    from charfmt._stream.collector import Collector, collect
    from charfmt._stream.reader import StreamParser
    from charfmt.prompt.userinput import UserTurn
elif COMPILED:
    _reader = importlib.import_module(f"{_TWIN.__name__}.reader")
    _collector = importlib.import_module(f"{_TWIN.__name__}.collector")
    StreamParser, Collector, collect = _reader.StreamParser, _collector.Collector, _collector.collect
    # mypyc keeps no docstrings: help() shows the source's
    StreamParser.__doc__, Collector.__doc__ = _pure_reader.StreamParser.__doc__, _pure_collector.Collector.__doc__
else:
    StreamParser, Collector, collect = _pure_reader.StreamParser, _pure_collector.Collector, _pure_collector.collect


class StreamOptions(TypedDict, total=False):
    """``StreamParser``'s keywords, which ``iter_events`` and ``aiter_events`` hand on (its defaults if not given)."""

    lenient: bool
    vocabulary: Vocabulary | None
    tags: TagTable | None
    max_size: int
    keep_reply: bool
    turn: UserTurn | str | Sequence[str] | None
    prompt: str | Sequence[str | Mapping[str, Any]] | None


F = TypeVar("F", bound=Callable[..., Any])


def _stream_keywords(function: F) -> F:
    """``function``'s signature with ``StreamParser``'s keywords in place of ``**options``: what ``help()`` shows."""
    signature = inspect.signature(function)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    keywords = inspect.signature(_pure_reader.StreamParser).parameters.values()
    setattr(function, "__signature__", signature.replace(parameters=[*own, *keywords]))  # noqa: B010 (mypy)
    return function


def reader_name() -> str:
    """Which stream reader runs, in words: ``compiled (mypyc)`` or ``pure Python`` (``charfmt --version``)."""
    return "compiled (mypyc)" if COMPILED else "pure Python"


@_stream_keywords
def iter_events(
    chunks: Iterable[Any] | str | bytes | Any,
    **options: Unpack[StreamOptions],
) -> Iterator[Event]:
    """Events from a stream, yielded as each item arrives. The keywords are ``StreamParser``'s.

    ``chunks`` is an iterable of ``str`` or ``bytes`` (a whole ``str`` or ``bytes`` is one
    chunk) or an SDK's own stream: OpenAI chat completions chunks and Responses API events,
    Anthropic stream events or a ``MessageStream`` (or the ``client.messages.stream(...)``
    manager), google-genai responses, ollama's ``ChatResponse``/``GenerateResponse``,
    LangChain message chunks; or one whole, not streamed, response of these. The reply text
    goes to the reader; the provider's reasoning becomes ``Reasoning`` events; a refusal, a
    tool call, a safety stop or an item charfmt cannot read becomes a diagnostic
    (``CF821``-``CF826``, see ``charfmt.llm._sdk_chunks``). ``turn``: the player's turn the reply
    answers, as ``parse(turn=...)`` takes it; an echo of it is reported (``CF625``), never shown;
    ``prompt``: the prompt it answers, as ``parse(prompt=...)`` takes it (an echo: ``CF631``).
    """
    parser = StreamParser(**options)
    reader = _sdk_chunks.Reader()
    feed = reader.feed
    for item in _sdk_chunks.items(chunks):
        yield from feed(parser, item)
    yield from reader.finish(parser)


@_stream_keywords
async def aiter_events(
    chunks: AsyncIterable[Any] | Awaitable[Any] | Iterable[Any] | Any,
    **options: Unpack[StreamOptions],
) -> AsyncGenerator[Event, None]:
    """Events from an async stream, yielded as each item arrives: ``iter_events`` for async SDK clients.

    ``chunks`` is anything ``iter_events`` takes, an async iterable of it, an async context
    manager that opens one (``AsyncAnthropic().messages.stream(...)``) or an awaitable that
    gives one (``AsyncOpenAI().chat.completions.create(..., stream=True)``, not awaited).
    The keywords are ``StreamParser``'s (``turn`` and ``prompt`` too: the turn and prompt the reply answers).
    """
    parser = StreamParser(**options)
    reader = _sdk_chunks.Reader()
    # (aclosing: a consumer that stops early closes what aitems opened, a manager or a response)
    async with aclosing(_sdk_chunks.aitems(chunks)) as items:
        async for item in items:
            for event in reader.feed(parser, item):
                yield event
    for event in reader.finish(parser):
        yield event
