"""charfmt serve as real front ends use it: SillyTavern's Continue, Impersonate and Post-History Instructions in
their exact request shapes, Open-LLM-VTuber's and AIRI's tools, reasoning models, AIRI's emotion names.

The request shapes are SillyTavern's own (``public/scripts/openai.js``: ``populateChatHistory`` puts the continue
nudge after the chat history, ``prepareOpenAIMessages`` the Post-History Instructions ("jailbreak") after the
history and the impersonation prompt last; ``sendOpenAIRequest`` and ``src/endpoints/backends/chat-completions.js``
the body a Custom (OpenAI-compatible) source gets). Each answers in character through the scripted upstream.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402
from charfmt.stagemap import StageMap  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
T = 10.0

ST_NUDGE = (
    "[Continue the following message. Do not include ANY parts of the original message. Use capitalization and "
    "punctuation as if your reply is a part of the original message: {}]"
)
"""SillyTavern's default continue nudge (``default_continue_nudge_prompt``), ``{{lastChatMessage}}`` as ``{}``."""
ST_IMPERSONATE = (
    "[Write your next reply from the point of view of Customer, using the chat history so far as a guideline for the "
    "writing style of Customer. Don't write as Rex or system. Don't describe actions of Rex.]"
)
"""SillyTavern's default impersonation prompt (``default_impersonation_prompt``), for the persona Customer."""
PHI = "[System note: Rex answers in at most two sentences.]"
"""A card's post_history_instructions, as SillyTavern sends it (the "jailbreak" prompt: a system message)."""


def st_body(*tail: dict[str, Any]) -> dict[str, Any]:
    """A SillyTavern request (Chat Completion source Custom, default prompt order), the chat then ``tail``."""
    head = [
        {"role": "system", "content": "Write Rex's next reply in a fictional chat between Rex and Customer."},
        {"role": "system", "content": "Rex is a retired combat robot who runs a repair shop on Mars."},
        {"role": "system", "content": "[Start a new Chat]"},
        {"role": "assistant", "content": "[neutral] What do you want?"},  # the card's first_mes
        {"role": "user", "content": "Hi Rex! Can you fix my drone?"},
    ]
    return {
        "messages": [*head, *tail], "model": "rex", "temperature": 1, "max_tokens": 300, "stream": True,
        "presence_penalty": 0, "frequency_penalty": 0, "top_p": 1, "logit_bias": {},
    }  # fmt: skip


def reply(body: str, *more: dict[str, Any]) -> str:
    """A reply of one ``C`` chat with ``body`` (and ``more`` chats), as the scripted model writes it (canonical)."""
    return json.dumps({"chats": [{"type": "C", "order": 1, "body": body}, *more]}, separators=(",", ":"))


@pytest.fixture(scope="module")
def rex() -> Character:
    return Character.load(REX)


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def up(scripted: tuple[Scripted, str]) -> Iterator[Scripted]:
    upstream, _base = scripted
    upstream.mode, upstream.delay, upstream.reasoning, upstream.refuse_prefill = "ok", 0.0, None, False
    upstream.requests.clear()
    yield upstream


@pytest.fixture
def upstream_url(scripted: tuple[Scripted, str]) -> str:
    return scripted[1] + "/v1"


def served(character: Character, url: str, **kw: Any) -> Any:
    return loopback(create_app(Settings(character=character, upstream_url=url, **kw)))


def events(response: Any) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def complete(base: str, body: dict[str, Any], **headers: str) -> tuple[str, str, dict[str, Any]]:
    """(the answer streamed, the same answer whole, the whole completion) of one chat-completions body."""
    whole = httpx.post(base + "/v1/chat/completions", json={**body, "stream": False}, headers=headers, timeout=T)
    assert whole.status_code == 200, whole.text
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json={**body, "stream": True}, headers=headers, timeout=T
    ) as r:
        assert r.status_code == 200
        chunks = [c for c in events(r) if c.get("choices")]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    return streamed, whole.json()["choices"][0]["message"]["content"], whole.json()


# --- SillyTavern: Continue --------------------------------------------------------------------------------

CUT = "[annoyed] *crosses arms* Forty bolts. Not one"
"""The character's answer as SillyTavern shows it, cut off (its length limit, a stop, the player's edit)."""
WHOLE = reply("<emo>annoyed</emo>\n<act>crosses arms</act>\n<msg>Forty bolts. Not one less.</msg>\n<act>beeps</act>")
"""The whole reply the scripted model writes: on a prefill, only what follows the prefilled part."""


@pytest.mark.parametrize("prefill", [False, True], ids=["nudge", "continue-prefill"])
def test_sillytavern_continue_goes_on_from_the_last_answer_and_answers_only_the_rest(
    prefill: bool, rex: Character, up: Scripted, upstream_url: str
) -> None:
    """Continue, by default (the answer, then SillyTavern's nudge quoting it, then the Post-History Instructions)
    and with "Continue prefill" (the answer last): llama-server is sent the reply so far, left open, as the start
    of the model's answer, without the grammar; the front end gets only the continuation, streamed or not."""
    tail = (
        [{"role": "system", "content": PHI}, {"role": "assistant", "content": CUT}]
        if prefill
        else [{"role": "assistant", "content": CUT}, {"role": "system", "content": ST_NUDGE.format(CUT)},
              {"role": "system", "content": PHI}]
    )  # fmt: skip
    up.mode = "say:" + WHOLE
    with served(rex, upstream_url, reply_format="tags") as base:
        streamed, shown, _ = complete(base, st_body(*tail))
    assert streamed == shown == " less. *beeps*"  # SillyTavern appends it to the answer it shows
    sent = up.requests[-1]
    last = sent["messages"][-1]
    assert last["role"] == "assistant" and WHOLE.startswith(last["content"])
    assert last["content"].endswith("<msg>Forty bolts. Not one")  # open inside the speech it goes on with
    assert "grammar" not in sent  # (a grammar of a whole reply cannot start inside one)
    said = json.dumps(sent["messages"])
    assert "Continue the following message" not in said  # the nudge is SillyTavern's way of asking; charfmt's is this
    assert sent["messages"][-2]["role"] == "user" and sent["messages"][-2]["content"].endswith(PHI)
    assert "Can you fix my drone" in sent["messages"][-2]["content"]


def test_a_continue_without_prefill_asks_for_the_rest(rex: Character, up: Scripted, upstream_url: str) -> None:
    """Where the upstream takes no prefill (OpenAI), the reply so far is the model's last answer and
    ``prompts/continue.j2`` asks for the rest, constrained as any reply; the rest follows on a new line."""
    up.mode = "say:" + reply("<emo>annoyed</emo>\n<msg>Less is not a word I sell.</msg>")
    with served(rex, upstream_url, reply_format="tags", server="openai", model_name="gpt") as base:
        streamed, shown, _ = complete(base, st_body({"role": "assistant", "content": CUT}))
    assert streamed == shown == "\n[annoyed] Less is not a word I sell."
    sent = up.requests[-1]
    messages = sent["messages"]
    assert messages[-1]["role"] == "user" and "Write only the rest of it" in messages[-1]["content"]
    before = reply("<emo>annoyed</emo>\n<act>crosses arms</act>\n<msg>Forty bolts. Not one</msg>")
    assert messages[-2] == {"role": "assistant", "content": before}
    assert "response_format" in sent  # the rest is a reply of its own: constrained


def test_a_prefill_the_upstream_refuses_is_asked_for_as_the_rest(
    rex: Character, up: Scripted, upstream_url: str
) -> None:
    """llama-server refuses a prefill with a thinking template (a 400): the rest is asked for instead."""
    up.refuse_prefill = True
    up.mode = "say:" + reply("<emo>annoyed</emo>\n<msg>Less is not a word I sell.</msg>")
    with served(rex, upstream_url, reply_format="tags") as base:
        streamed, shown, _ = complete(base, st_body({"role": "assistant", "content": CUT}))
    assert streamed == shown == "\n[annoyed] Less is not a word I sell."
    tried, asked = up.requests[-2:]
    assert tried["messages"][-1]["role"] == "assistant" and "grammar" not in tried
    assert "Write only the rest of it" in asked["messages"][-1]["content"] and "grammar" in asked


def test_a_continue_in_canonical_form_answers_the_continuation_as_a_reply(
    rex: Character, up: Scripted, upstream_url: str
) -> None:
    cut = reply("<emo>annoyed</emo>\n<act>crosses arms</act>\n<msg>Forty bolts. Not one</msg>")
    up.mode = "say:" + WHOLE
    with served(rex, upstream_url) as base:
        streamed, shown, _ = complete(base, st_body({"role": "assistant", "content": cut}))
    assert streamed == shown
    assert json.loads(shown) == {"chats": [{"type": "C", "order": 1, "body": "<msg> less.</msg>\n<act>beeps</act>"}]}


def test_a_continue_in_a_session_goes_on_from_its_last_reply(rex: Character, up: Scripted, upstream_url: str) -> None:
    """In a session, the reply gone on with is the session's last (the turn it answers sent once); the session
    keeps it as it was kept (a store keeps each exchange as written: the continuation is the front end's)."""
    up.mode = "say:" + reply("<emo>annoyed</emo>\n<msg>Forty bolts. Not one</msg>")
    app = create_app(Settings(character=rex, upstream_url=upstream_url, reply_format="tags"))
    session = {"X-Charfmt-Session": "st"}
    with loopback(app) as base:
        said = [{"role": "user", "content": "fix my drone"}]
        first = httpx.post(base + "/v1/chat/completions", json={"messages": said}, headers=session, timeout=T)
        shown = first.json()["choices"][0]["message"]["content"]
        assert shown == "[annoyed] Forty bolts. Not one"
        up.mode = "say:" + reply("<emo>annoyed</emo>\n<msg>Forty bolts. Not one less.</msg>")
        body = {"messages": [*said, {"role": "assistant", "content": shown}]}
        more = httpx.post(base + "/v1/chat/completions", json=body, headers=session, timeout=T)
    assert more.json()["choices"][0]["message"]["content"] == " less."
    sent = up.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant"]  # the turn once, then the reply so far
    assert "fix my drone" in sent[1]["content"] and sent[2]["content"].endswith("<msg>Forty bolts. Not one")
    (kept,) = app.state.charfmt.sessions.store.sessions()
    assert kept.turns == 1


def test_a_scene_is_continued_and_its_players_line_asked_for(up: Scripted, upstream_url: str) -> None:
    from charfmt.prompt.scene import Scene

    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    first = next(iter(scene.cast.values()))
    chats = [{"type": "C", "order": 1, "speaker": "rex", "body": "<emo>annoyed</emo>\n<msg>No. Not today.</msg>"},
             {"type": "C", "order": 2, "speaker": "mio", "body": "<msg>Rex!</msg>"}]  # fmt: skip
    up.mode = "say:" + json.dumps({"chats": chats}, separators=(",", ":"))
    app = create_app(Settings(character=first, scene=scene, upstream_url=upstream_url, reply_format="tags"))
    said = [{"role": "user", "content": "open the shrine"}]
    with loopback(app) as base:
        streamed, shown, _ = complete(
            base, {"messages": [*said, {"role": "assistant", "content": "rex: [annoyed] No. Not"}]}
        )
        up.mode = "say:" + json.dumps(
            {"chats": [{"type": "C", "order": 1, "speaker": "rex", "body": "<msg>Please?</msg>"}]}
        )
        line = complete(base, {"messages": [*said, {"role": "assistant", "content": "rex: No."},
                                            {"role": "system", "content": "Impersonate the user."}]})  # fmt: skip
    assert streamed == shown == " today.\nmio: Rex!"
    assert line[0] == line[1] == "Please?"  # the player's line: no speaker of the cast
    assert "next message of" in up.requests[-1]["messages"][-1]["content"]


# --- SillyTavern: Impersonate and Post-History Instructions ----------------------------------------------------


@pytest.mark.parametrize("fmt", ["tags", "airi", "canonical"])
def test_sillytavern_impersonate_answers_the_players_line_in_shorthand(
    fmt: str, rex: Character, up: Scripted, upstream_url: str
) -> None:
    """Impersonate (the chat, the Post-History Instructions, the impersonation prompt last): the model is asked for
    the player's line, and whatever ``--reply-format`` says, the answer is shorthand the server reads back."""
    up.mode = "say:" + reply("<emo>pleased</emo>\n<act>waves</act>\n<msg>Thanks, Rex! How much?</msg>")
    tail = [
        {"role": "assistant", "content": "[annoyed] Forty bolts."},
        {"role": "system", "content": PHI},
        {"role": "system", "content": ST_IMPERSONATE},
    ]
    app = create_app(Settings(character=rex, upstream_url=upstream_url, reply_format=fmt))
    with loopback(app) as base:
        streamed, shown, _ = complete(base, st_body(*tail))
        asked = up.requests[-1]["messages"]
        session = {"X-Charfmt-Session": "imp"}  # in a session: the session's history, and the line kept in none
        up.mode = "ok"
        httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]},
                   headers=session, timeout=T)  # fmt: skip
        line = httpx.post(base + "/v1/chat/completions", json={"messages": tail[2:]}, headers=session, timeout=T)
    assert line.status_code == 200 and "You said" in up.requests[-1]["messages"][-2]["content"]
    (kept,) = app.state.charfmt.sessions.store.sessions()
    assert kept.turns == 1  # the player's line is no exchange of the character
    assert streamed == shown == "[pleased] *waves* Thanks, Rex! How much?"
    turn = rex.shorthand(shown)
    assert [(s.tag, s.text) for s in turn.chats[0].segments] == [
        ("emo", "pleased"), ("act", "waves"), ("msg", "Thanks, Rex! How much?")
    ]  # fmt: skip
    assert asked[-1]["role"] == "user" and "next message of Customer (the player), not of Rex" in asked[-1]["content"]
    assert ST_IMPERSONATE in asked[-1]["content"] and asked[-1]["content"].endswith(PHI)
    assert asked[-2]["role"] == "assistant" and "Forty bolts." in asked[-2]["content"]
    assert "Can you fix my drone" in asked[-3]["content"]


@pytest.mark.parametrize(
    ("text", "asks"),
    [(ST_IMPERSONATE, True), ("Impersonate the user.", True), ("Reply as the player, in one line.", True),
     ("[Never impersonate the user. Do not write as the user.]", False), (PHI, False),
     ("Write Rex's next reply. Don't write as the user.", False)],
)  # fmt: skip
def test_only_a_request_for_the_players_line_is_an_impersonation(text: str, asks: bool) -> None:
    from charfmt.serve.continuation import asks_for_the_player

    assert asks_for_the_player(text) is asks


def test_sillytavern_post_history_instructions_follow_the_history(
    rex: Character, up: Scripted, upstream_url: str
) -> None:
    with served(rex, upstream_url, reply_format="tags") as base:
        streamed, shown, _ = complete(base, st_body({"role": "system", "content": PHI}))
    assert streamed == shown and shown.startswith("[neutral] *beeps* You said")
    messages = up.requests[-1]["messages"]
    assert PHI not in messages[0]["content"]  # not at the top: after the history, where it was put
    assert messages[-1]["role"] == "user" and messages[-1]["content"].endswith("\n\n" + PHI)
    assert "<user_chats>" in messages[-1]["content"] and "Can you fix my drone" in messages[-1]["content"]
    assert "Write Rex's next reply" in messages[0]["content"]  # the front end's own system text: in the prompt


# --- Open-LLM-VTuber and AIRI: tools -------------------------------------------------------------------------

MCP_TOOLS = [{"type": "function", "function": {
    "name": "time_get_current_time", "description": "Get the current time",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": []},
}}]  # fmt: skip
"""What Open-LLM-VTuber sends with ``use_mcpp`` on (its ``time`` MCP server's tool, in OpenAI's shape)."""


def test_open_llm_vtuber_default_tools_are_answered_in_character(
    rex: Character, up: Scripted, upstream_url: str
) -> None:
    """Open-LLM-VTuber's ``OpenAICompatibleLLM.chat_completion``: the openai SDK, streamed, ``tools=`` its MCP tools,
    no ``tool_choice``: the character answers (tags, as it reads them), as a model that chose to call no tool."""
    openai = pytest.importorskip("openai")
    with served(rex, upstream_url, reply_format="tags") as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="not-needed", timeout=T, max_retries=0)
        stream = client.chat.completions.create(
            messages=[{"role": "system", "content": "You are Rex."}, {"role": "user", "content": "hello there"}],
            model="rex", stream=True, temperature=1.0, tools=MCP_TOOLS,
        )  # fmt: skip
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[neutral] *beeps* You said") and "hello there" in text
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "tools" not in up.requests[-1]


AIRI_PATTERNS = [re.compile(r"does not support tools", re.I), re.compile(r"tools?\s+(is|are)\s+not\s+supported", re.I)]
"""AIRI's ``TOOLS_RELATED_ERROR_PATTERNS`` for Ollama and Cloudflare (``core-agent/src/runtime/llm-service.ts``)."""


@pytest.mark.parametrize(
    "choice", [{"tool_choice": "required"}, {"tool_choice": {"type": "function", "function": {"name": "f"}}}]
)
def test_a_required_tool_call_is_refused_in_the_words_front_ends_turn_tools_off_for(
    choice: dict[str, Any], rex: Character, up: Scripted, upstream_url: str
) -> None:
    openai = pytest.importorskip("openai")
    with served(rex, upstream_url) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", timeout=T, max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                messages=[{"role": "user", "content": "hi"}], model="rex", tools=MCP_TOOLS, **choice
            )
    said = str(caught.value)
    assert "does not support tools" in said  # Open-LLM-VTuber: `if "does not support tools" in str(e)`
    assert all(pattern.search(said) for pattern in AIRI_PATTERNS)  # AIRI's isToolRelatedError, either pattern
    assert not up.requests


# --- reasoning ---------------------------------------------------------------------------------------------

THOUGHT = "The customer wants a repair. Quote a price."


@pytest.mark.parametrize("fmt", ["canonical", "tags"])
def test_reasoning_content_goes_on_as_reasoning_content(
    fmt: str, rex: Character, up: Scripted, upstream_url: str
) -> None:
    up.reasoning = THOUGHT
    with served(rex, upstream_url, reply_format=fmt) as base:
        body = {"messages": [{"role": "user", "content": "fix my drone"}]}
        whole = httpx.post(base + "/v1/chat/completions", json=body, timeout=T).json()
        with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=T) as r:
            deltas = [c["choices"][0]["delta"] for c in events(r) if c.get("choices")]
    assert whole["choices"][0]["message"]["reasoning_content"] == THOUGHT
    thought = [d["reasoning_content"] for d in deltas if "reasoning_content" in d]
    assert "".join(thought) == THOUGHT and len(thought) > 1  # as it came, piece by piece
    first_text = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert max(i for i, d in enumerate(deltas) if "reasoning_content" in d) < first_text
    assert "".join(d.get("content") or "" for d in deltas) == whole["choices"][0]["message"]["content"]


def test_reasoning_is_said_once_when_a_damaged_reply_is_read_again(
    rex: Character, up: Scripted, upstream_url: str
) -> None:
    """A reset takes back what was shown: ``/v1/turn`` says the reasoning again after it, whole; chat completions,
    which cannot take anything back, forward it once."""
    up.reasoning = THOUGHT
    up.mode = 'say:Sure, here it is. I will answer now, friend.\n<chats>\n<chat type="C">\n<msg>Bolts.</msg>'
    with served(rex, upstream_url, reply_format="tags") as base:
        with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as r:
            objs = list(events(r))
        with httpx.stream("POST", base + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "stream": True}, timeout=T) as r:  # fmt: skip
            deltas = [c["choices"][0]["delta"] for c in events(r) if c.get("choices")]
    kinds = [o["kind"] for o in objs]
    again = [o["text"] for o in objs[kinds.index("reset") :] if o["kind"] == "reasoning"]
    assert again == [THOUGHT] and kinds.index("reasoning") < kinds.index("reset")
    assert "".join(d.get("reasoning_content", "") for d in deltas) == THOUGHT


def test_reasoning_in_a_think_block_goes_on_as_reasoning_content(
    rex: Character, up: Scripted, upstream_url: str
) -> None:
    up.mode = "say:<think>" + THOUGHT + "</think>" + reply("<emo>neutral</emo>\n<msg>Forty bolts.</msg>")
    with served(rex, upstream_url) as base:
        _, shown, whole = complete(base, {"messages": [{"role": "user", "content": "hi"}]})
    assert whole["choices"][0]["message"]["reasoning_content"] == THOUGHT and "think" not in shown


def test_reasoning_content_comes_as_reasoning_events_in_v1_turn(
    rex: Character, up: Scripted, upstream_url: str
) -> None:
    up.reasoning = THOUGHT
    with (
        served(rex, upstream_url) as base,
        httpx.stream("POST", base + "/v1/turn", json={"session": "r", "say": "hi"}, timeout=T) as r,
    ):
        objs = list(events(r))
    kinds = [o["kind"] for o in objs]
    thought = [o["text"] for o in objs if o["kind"] == "reasoning"]
    assert "".join(thought) == THOUGHT and kinds.index("reasoning") < kinds.index("text")
    assert objs[-1]["kind"] == "reply" and objs[-1]["reasoning"] == THOUGHT and objs[-1]["valid"] is True


def test_reasoning_content_is_shown_by_chat_endpoint(
    up: Scripted, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from charfmt.cli import main

    up.reasoning = THOUGHT
    assert main(["chat", "--character", str(REX), "--endpoint", upstream_url, "--say", "hi"]) == 0
    out = capsys.readouterr().out
    assert f"(reasoning) {THOUGHT}" in out and out.index("(reasoning)") < out.index("Rex: You said")


# --- AIRI's emotion names ----------------------------------------------------------------------------------


def test_airi_is_answered_with_the_emotion_names_it_knows(rex: Character, up: Scripted, upstream_url: str) -> None:
    """Rex's keys written as AIRI's names: ``pleased`` by its alias ``happy``, ``annoyed`` by its alias ``angry``,
    ``confused`` as ``question`` (a synonym); read back as history, each name is its key again."""
    up.mode = "say:" + reply(
        "<emo>pleased</emo>\n<msg>Fine.</msg>\n<emo>confused</emo>\n<msg>Toaster?</msg>\n<emo>annoyed</emo>"
        "\n<msg>No.</msg>"
    )
    with served(rex, upstream_url, reply_format="airi") as base:
        info = httpx.get(base + "/v1/info", timeout=T).json()
        _, shown, _ = complete(base, {"messages": [{"role": "user", "content": "hi"}]})
        up.mode = "ok"
        again = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": shown},
                 {"role": "user", "content": "sorry"}]  # fmt: skip
        assert httpx.post(base + "/v1/chat/completions", json={"messages": again}, timeout=T).status_code == 200
    names = re.findall(r'"name":"(\w+)"', shown)
    assert names == ["happy", "question", "angry"]
    names_of = {"neutral": "neutral", "annoyed": "angry", "pleased": "happy", "confused": "question"}
    assert info["emotion_names"] == names_of
    assert info["unmapped_emotions"] == []
    past = json.loads(up.requests[-1]["messages"][-2]["content"])["chats"][0]["body"]
    assert re.findall(r"<emo>(\w+)</emo>", past) == ["pleased", "confused", "annoyed"]


def test_a_stage_table_names_an_emotion_for_a_format_and_an_unnamed_one_is_reported(
    tmp_path: Path, up: Scripted, upstream_url: str
) -> None:
    toml = REX.read_text(encoding="utf-8") + '\n[[emotions]]\nkey = "smug"\n\n[[emotions]]\nkey = "glitch"\n'
    toml += '\n[stage.formats.airi]\nsmug = "awkward"\n'
    (tmp_path / "rex.toml").write_text(toml, encoding="utf-8")
    character = Character.load(tmp_path / "rex.toml")
    up.mode = "say:" + reply("<emo>smug</emo>\n<msg>Heh.</msg>\n<emo>glitch</emo>\n<msg>Bzzt.</msg>")
    with served(character, upstream_url, reply_format="airi") as base:
        info = httpx.get(base + "/v1/info", timeout=T).json()
        _, shown, _ = complete(base, {"messages": [{"role": "user", "content": "hi"}]})
    assert re.findall(r'"name":"(\w+)"', shown) == ["awkward", "glitch"]
    assert info["unmapped_emotions"] == ["glitch"] and info["emotion_names"]["smug"] == "awkward"
    bad = toml.replace('smug = "awkward"', 'smug = "smirk"')
    (tmp_path / "bad.toml").write_text(bad, encoding="utf-8")
    with pytest.raises(ValueError, match="'smirk': not a name the airi front end knows"):
        create_app(Settings(character=Character.load(tmp_path / "bad.toml"), upstream_url=upstream_url,
                            reply_format="airi"))  # fmt: skip
    typo = toml.replace("[stage.formats.airi]\nsmug", "[stage.formats.airi]\nsmugg")
    (tmp_path / "typo.toml").write_text(typo, encoding="utf-8")
    with pytest.raises(ValueError, match="'smugg' is not an emotion key"):
        Character.load(tmp_path / "typo.toml")


def test_serve_says_at_its_start_which_emotions_have_no_name(tmp_path: Path, upstream_url: str) -> None:
    toml = REX.read_text(encoding="utf-8") + '\n[[emotions]]\nkey = "glitch"\n'
    (tmp_path / "rex.toml").write_text(toml, encoding="utf-8")
    args = ["serve", "--character", str(tmp_path / "rex.toml"), "--upstream", upstream_url, "--reply-format", "airi",
            "--port", "0"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "charfmt", *args], stderr=subprocess.PIPE, text=True, cwd=ROOT
    )  # (it runs until stopped: read its first lines, then stop it)
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline() for _ in range(2)]
    finally:
        proc.terminate()
        proc.wait(T)
    assert "CF828" in lines[0] and "'glitch'" in lines[0] and "[stage.formats.airi]" in lines[0]
    assert "listening on" in lines[1]


def test_a_v3_cards_emotion_assets_are_the_sprites(tmp_path: Path, up: Scripted, upstream_url: str) -> None:
    card = {"spec": "chara_card_v3", "spec_version": "3.0", "data": {
        "name": "Mio", "description": "A cheerful girl.", "first_mes": "Hi!",
        "assets": [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"},
                   {"type": "emotion", "uri": "embeded://assets/emotion/joy.png", "name": "joy", "ext": "png"},
                   {"type": "emotion", "uri": "embeded://assets/emotion/sad.png", "name": "sad", "ext": "png"}],
    }}  # fmt: skip
    (tmp_path / "mio.json").write_text(json.dumps(card), encoding="utf-8")
    mio = Character.load(tmp_path / "mio.json")
    up.mode = "say:" + reply("<emo>joy</emo>\n<msg>Yay!</msg>")
    with served(mio, upstream_url, reply_format="airi") as base:
        info = httpx.get(base + "/v1/info", timeout=T).json()
        with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as r:
            objs = list(events(r))
        cues = [o["cue"] for o in objs if o["kind"] == "stage" and o["cue"]["kind"] == "expression"]
        _, shown, _ = complete(base, {"messages": [{"role": "user", "content": "hi"}]})
    assert info["emotions"] == ["joy", "sad"] and info["emotion_names"] == {"joy": "happy", "sad": "sad"}
    assert cues[0]["sprite"] == "embeded://assets/emotion/joy.png"
    assert '"name":"happy"' in shown and '"name":"happy"' in objs[-1]["content"]  # (the reply object's, too)


# --- the smaller defects ----------------------------------------------------------------------------------------


def test_the_icon_browsers_ask_for_is_served(rex: Character, upstream_url: str) -> None:
    with served(rex, upstream_url, token="secret") as base:
        icon = httpx.get(base + "/favicon.ico", timeout=T)  # (no token: a browser sends none for it)
        page = httpx.get(base + "/", timeout=T).text
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg") and '<link rel="icon" href="/favicon.ico"' in page


NODE = shutil.which("node")
EVENT_SOURCE = """
globalThis.EventSource = class {  // a browser's EventSource, as much as the snippet uses: GET, onmessage, close
  constructor(url) { this.open = true; this.run(url); }
  close() { this.open = false; globalThis.closed?.(); }
  async run(url) {
    const r = await fetch(url, {headers: {Accept: "text/event-stream"}});
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    for (let buf = "", part; this.open && !(part = await reader.read()).done; ) {
      const blocks = (buf += part.value).split("\\n\\n");
      buf = blocks.pop();
      for (const b of blocks) if (this.open && b.startsWith("data: ")) this.onmessage({data: b.slice(6)});
    }
    reader.cancel();
  }
};
"""


@pytest.mark.skipif(NODE is None, reason="no node on this machine to run the README's JavaScript")
def test_the_readmes_eventsource_snippet_types_speech_not_narration(
    rex: Character, up: Scripted, upstream_url: str, tmp_path: Path
) -> None:
    """docs/SERVER.md's EventSource snippet, run by node against a served turn whose reply holds narration, a
    thought and a log line: only the speech is typed out (it typed ``…friend.Rex's visor glows green.``)."""
    readme = (ROOT / "docs" / "SERVER.md").read_text(encoding="utf-8")
    snippet = readme.split("// browser: EventSource (GET)", 1)[1].split("\n", 1)[1].split("// or fetch (POST)", 1)[0]
    up.mode = "say:" + reply(
        "<emo>pleased</emo>\n<msg>Hello, friend.</msg>\n<thought>A customer!</thought>",
        {"type": "I", "order": 2, "body": "Rex's visor glows green."},
    )
    with served(rex, upstream_url) as base:
        script = tmp_path / "snippet.mjs"
        script.write_text(
            EVENT_SOURCE + "const typed = []; const sprites = [];\n"
            "const showSprite = (s) => sprites.push(s); const typeOut = (t) => typed.push(t);\n"
            "const clearText = () => typed.splice(0);\n"
            + snippet.replace("http://127.0.0.1:8000", base)
            + "\nglobalThis.closed = () => console.log(JSON.stringify({typed: typed.join(''), sprites}));\n",
            encoding="utf-8",
        )
        done = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown == {"typed": "Hello, friend.", "sprites": ["rex_pleased"]}


@pytest.mark.skipif(NODE is None, reason="no node on this machine to run the playground's script")
def test_the_playground_lists_an_action_once(rex: Character, up: Scripted, upstream_url: str, tmp_path: Path) -> None:
    """The playground's own script (run by node with a stand-in for the few DOM calls it makes) on a turn's
    objects: the action is one line (it was two, ``action: beeps`` and ``motion: beeps``), a mapped motion adds
    what it plays to that line, and a ``reset`` takes back what was shown."""
    page = (ROOT / "charfmt" / "serve" / "static" / "playground.html").read_text(encoding="utf-8")
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    character = rex.model_copy(update={"stage": StageMap.model_validate({"actions": {"waves": {"live2d": "Wave"}}})})
    up.mode = "say:" + reply("<emo>neutral</emo>\n<act>beeps</act>\n<act>waves</act>\n<msg>Hm.</msg>")
    with (
        served(character, upstream_url) as base,
        httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as r,
    ):
        objs = list(events(r))
    dom = """
const nodes = {};
class Node { constructor() { this.children = []; this.textContent = ""; }
  appendChild(c) { this.children.push(c); } replaceChildren() { this.children = []; }
  addEventListener() {} }
globalThis.document = {getElementById: (id) => (nodes[id] ??= new Node()), createElement: () => new Node()};
globalThis.location = {search: ""};
const info = {name: "Rex", speakers: ["Rex"], constrained: true, speech_tags: ["msg"]};
globalThis.fetch = async () => ({ok: true, status: 200, json: async () => info});  // /v1/info, all it asks
"""
    harness = tmp_path / "page.mjs"
    harness.write_text(
        dom + script + f"\nawait loadInfo();\nfor (const o of {json.dumps(objs)}) show(o);\n"
        "const cues = () => nodes.cues.children.map((c) => c.textContent);\n"
        "const before = {cues: cues(), speech: nodes.speech.textContent}; show({kind: 'reset'});\n"
        "console.log(JSON.stringify({...before, after: [...cues(), nodes.speech.textContent]}));\n",
        encoding="utf-8",
    )
    done = subprocess.run([NODE, str(harness)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown == {"cues": ["action: beeps", "action: waves → live2d Wave"], "speech": "Hm.", "after": [""]}


def test_a_missing_scene_file_is_a_usage_error(tmp_path: Path) -> None:
    """As a missing ``--character`` file: exit 2, one line (it was exit 1)."""
    done = subprocess.run(
        [sys.executable, "-m", "charfmt", "serve", "--scene", str(tmp_path / "nope.toml"), "--upstream",
         "http://127.0.0.1:9/v1"], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("charfmt: error: ") and "nope.toml" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
