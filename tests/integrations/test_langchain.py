"""``charfmt.integrations.langchain``: an LCEL chain ``prompt | model | parser`` with langchain_core's fake chat model.

Streaming gives charfmt events and ``collect`` of them is the reply ``invoke`` gives, sync and
async; the format instructions are the character's system prompt; the model's reasoning and
tool calls read as ``Reasoning`` and a diagnostic. Skipped without langchain-core (extra ``langchain``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import ROOT

pytest.importorskip("langchain_core", reason="langchain-core is not installed (extras 'langchain' and 'test')")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.prompts import ChatPromptTemplate

import charfmt
from charfmt.integrations.langchain import CharfmtOutputParser

MIO = charfmt.Character.load(ROOT / "examples" / "characters" / "mio.toml")
REPLY = (ROOT / "examples" / "replies" / "mio.json").read_text(encoding="utf-8")
DAMAGED = "Here you go!\n```json\n" + REPLY.replace("<msg>", "<MSG>").replace("</msg>", "</MSG>") + "\n```"
PROMPT = ChatPromptTemplate.from_messages([("system", "{format}"), ("human", "{input}")])


def _chain(text: str, parser: CharfmtOutputParser, **kwargs: Any) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(content=text, **kwargs)]))
    return PROMPT.partial(format=parser.get_format_instructions()) | model | parser


@pytest.mark.parametrize("text", [REPLY, DAMAGED], ids=["valid", "damaged"])
def test_a_chain_streams_events_and_invokes_to_the_same_reply(text: str) -> None:
    parser = CharfmtOutputParser(character=MIO)
    extra = {"additional_kwargs": {"reasoning_content": "She is caught out; surprise, then joy."}}
    events = list(_chain(text, parser, **extra).stream({"input": "I know your secret."}))
    reply = _chain(text, parser, **extra).invoke({"input": "I know your secret."})
    assert isinstance(reply, charfmt.Reply)
    assert all(not isinstance(e, charfmt.Reply) for e in events)
    assert charfmt.collect(events) == reply
    batch = charfmt.parse(text, lenient=True, vocabulary=MIO.vocabulary)
    assert reply.chats == batch.chats
    assert reply.reasoning == "She is caught out; surprise, then joy."
    assert sum(isinstance(e, charfmt.TextDelta) for e in events) > sum(
        isinstance(e, charfmt.TextDelta) for e in batch.events()
    )  # the speech arrived as the model's tokens did


def test_a_chain_streams_and_invokes_async() -> None:
    parser = CharfmtOutputParser(character=MIO)

    async def run() -> tuple[list[Any], charfmt.Reply]:
        events = [e async for e in _chain(REPLY, parser).astream({"input": "hi"})]
        return events, await _chain(REPLY, parser).ainvoke({"input": "hi"})

    events, reply = asyncio.run(run())
    assert charfmt.collect(events) == reply == charfmt.parse(REPLY, lenient=True, vocabulary=MIO.vocabulary)


def test_the_format_instructions_are_the_characters_system_prompt() -> None:
    assert CharfmtOutputParser(character=MIO).get_format_instructions() == charfmt.render_system(MIO)
    with pytest.raises(ValueError, match="character"):
        CharfmtOutputParser().get_format_instructions()


def test_parse_gives_a_reply_and_strict_parsing_raises() -> None:
    assert CharfmtOutputParser().parse(DAMAGED) == charfmt.parse(DAMAGED, lenient=True)
    with pytest.raises(charfmt.ParseError):
        CharfmtOutputParser(lenient=False).parse(DAMAGED)
    with pytest.raises(charfmt.ParseError):
        list(CharfmtOutputParser(lenient=False).transform(iter([DAMAGED])))


def test_the_characters_vocabulary_is_used() -> None:
    odd = REPLY.replace("<emo>joy</emo>", "<emo>JOY</emo>")
    assert CharfmtOutputParser(character=MIO).parse(odd) == charfmt.parse(odd, lenient=True, vocabulary=MIO.vocabulary)
    assert CharfmtOutputParser().parse(odd) != CharfmtOutputParser(character=MIO).parse(odd)


def test_message_chunks_with_thinking_blocks_and_tool_calls() -> None:
    chunks = [
        AIMessageChunk(content=[{"type": "thinking", "thinking": "Let me think", "index": 0}]),
        AIMessageChunk(content=[{"type": "thinking", "thinking": " about it.", "index": 0}]),
        *(
            AIMessageChunk(content=[{"type": "text", "text": REPLY[i : i + 9], "index": 1}])
            for i in range(0, len(REPLY), 9)
        ),
        AIMessageChunk(content="", tool_call_chunks=[{"name": "open_door", "args": "", "id": "toolu_1", "index": 2}]),
        AIMessageChunk(
            content="", tool_call_chunks=[{"name": None, "args": '{"room": "hall"}', "id": None, "index": 2}]
        ),
    ]
    events = list(CharfmtOutputParser().transform(iter(chunks)))
    assert [e.kind for e in events[:2]] == ["reasoning", "reasoning"]
    reply = charfmt.collect(events)
    assert reply.reasoning == "Let me think about it."
    assert reply.chats == charfmt.parse(REPLY).chats
    (call,) = [d for d in reply.diagnostics if d.code == "CF822"]
    assert "open_door" in call.message
    whole = AIMessage(
        content=[{"type": "thinking", "thinking": "Let me think about it."}, {"type": "text", "text": REPLY}]
    )
    assert CharfmtOutputParser().invoke(whole) == reply.model_copy(update={"diagnostics": []})
