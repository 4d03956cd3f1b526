"""A LangChain output parser: ``prompt | model | CharfmtOutputParser(character=mio)`` (extra ``langchain``).

``invoke`` gives a ``charfmt.Reply``; ``stream`` (and ``astream``) gives charfmt events as the
model's chunks arrive, the same events ``charfmt.iter_events`` gives for them, so
``charfmt.collect(chain.stream(...))`` is the reply ``chain.invoke(...)`` gives. The chat model's
reasoning (``thinking`` blocks, ``reasoning_content``) becomes ``Reasoning``; a tool call or a
refusal, a diagnostic. ``get_format_instructions()`` is the character's system prompt.

    from charfmt.integrations.langchain import CharfmtOutputParser
    chain = prompt | model | CharfmtOutputParser(character=mio)
    for event in chain.stream({"input": "Hi!"}):
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from pydantic import ConfigDict

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.output_parsers.transform import BaseTransformOutputParser
    from langchain_core.outputs import Generation
except ImportError as e:  # the one place this extra's absence is said
    raise ImportError(
        f"charfmt.integrations.langchain needs langchain-core: pip install 'charfmt[langchain]' ({e})"
    ) from e

import charfmt
from charfmt import Character, Reply, TagTable, Vocabulary

__all__ = ["CharfmtOutputParser"]


class CharfmtOutputParser(BaseTransformOutputParser[Any]):
    """Parses a chat model's reply with charfmt: a ``Reply`` from ``invoke``, events from ``stream``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    character: Character | None = None
    """The character the model plays: its vocabulary, its tags and its system prompt (the format instructions)."""
    lenient: bool = True
    """Repair what the model got wrong (``charfmt.parse(lenient=True)``); ``False`` raises ``ParseError`` instead."""
    vocabulary: Vocabulary | None = None
    """The emotion vocabulary (default: the character's)."""
    tags: TagTable | None = None
    """The tag table (default: the character's, else charfmt's own)."""

    def _options(self) -> dict[str, Any]:
        character = self.character
        vocabulary = self.vocabulary if self.vocabulary is not None or character is None else character.vocabulary
        tags = self.tags if self.tags is not None or character is None else character.tags
        return {"lenient": self.lenient, "vocabulary": vocabulary, "tags": tags}

    def parse(self, text: str) -> Reply:
        """The reply in ``text``."""
        return charfmt.parse(text, **self._options())

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> Reply:
        """The reply of the first generation; a chat message is read whole, its reasoning and tool calls included."""
        message = getattr(result[0], "message", None)
        if isinstance(message, BaseMessage):
            return charfmt.collect(charfmt.iter_events([message], **self._options()))
        return self.parse(result[0].text)

    def _transform(self, input: Iterator[str | BaseMessage]) -> Iterator[Any]:
        yield from charfmt.iter_events(input, **self._options())

    async def _atransform(self, input: AsyncIterator[str | BaseMessage]) -> AsyncIterator[Any]:
        async for event in charfmt.aiter_events(input, **self._options()):
            yield event

    def get_format_instructions(self) -> str:
        """The character's system prompt (``charfmt.render_system``): it teaches the model the format."""
        if self.character is None:
            raise ValueError("CharfmtOutputParser(character=...) is needed for format instructions")
        return charfmt.render_system(self.character)

    @property
    def OutputType(self) -> type[Reply]:
        """What ``invoke`` gives (``stream`` gives charfmt events)."""
        return Reply

    @property
    def _type(self) -> str:
        return "charfmt"
