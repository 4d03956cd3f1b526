"""charfmt serve against real clients (openai SDK, httpx SSE, a WebSocket) and a scripted upstream on loopback."""

from __future__ import annotations

import gc
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from charfmt import Character, parse  # noqa: E402
from charfmt.serve import Settings, create_app  # noqa: E402
from charfmt.serve.formats import whole  # noqa: E402
from charfmt.writer import canonical_form, dumps  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from scripted_upstream import Scripted, loopback, reply_for  # noqa: E402

REX = ROOT / "examples" / "characters" / "rex.toml"
T = 10.0  # seconds any one request may take


@pytest.fixture(scope="module")
def rex() -> Character:
    return Character.load(REX)


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, str]]:
    up = Scripted()
    with loopback(up.app) as base:
        yield up, base


@pytest.fixture
def upstream(scripted: tuple[Scripted, str]) -> Iterator[tuple[Scripted, str]]:
    up, base = scripted
    up.mode, up.delay = "ok", 0.0
    up.requests.clear()
    up.cancelled = up.finished = 0
    yield up, base


def serve(rex: Character, upstream: tuple[Scripted, str], **kw: Any) -> Any:
    return loopback(create_app(Settings(character=rex, upstream_url=upstream[1] + "/v1", **kw)))


def sse(response: Any) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


# --- the openai SDK ----------------------------------------------------------------------------------


def test_openai_sdk_whole_and_streamed(rex: Character, upstream: tuple[Scripted, str]) -> None:
    openai = pytest.importorskip("openai")
    with serve(rex, upstream) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=T, max_retries=0)
        done = client.chat.completions.create(
            model="rex", messages=[{"role": "user", "content": "[joy] hello there"}], user="p1"
        )
        content = done.choices[0].message.content
        assert content is not None
        assert done.usage is not None and done.usage.prompt_tokens > 100 and done.usage.completion_tokens > 5
        reply = parse(content, vocabulary=rex.vocabulary, tags=rex.tags)  # strictly valid canonical JSON
        assert "hello there" in reply.chats[0].segments[-1].text
        parts = [
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="rex", messages=[{"role": "user", "content": "fix my drone"}], user="p1", stream=True
            )
            if c.choices
        ]
        assert len([p for p in parts if p]) == 1  # canonical JSON is the repaired reply: it comes whole, at the end
        parse("".join(parts), vocabulary=rex.vocabulary, tags=rex.tags)
    # the second turn carried the first exchange back in canonical form, the grammar in llama-server's field
    second = upstream[0].requests[-1]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert "hello there" in second["messages"][-2]["content"]
    assert "grammar" in second and second["max_tokens"] == 512


SCRIPTED_REPLIES = [
    None,  # the scripted model's own valid reply
    "Hello there, friend.  How are you?",  # free text
    '{"chats":[{"type":"C","order":1,"body":"<emo>joy</emo><msg>reply:</msg><msg>Hello</msg>"}]}',  # no line break
    '{"chats":[{"type":"I","order":1,"body":"He thinks."},{"type":"C","order":2,'
    '"body":"<emo>joy</emo>\\n<msg>Hi.</msg>"},{"type":"E","order":3,"body":"The bell hums."}]}',  # narrator lines
    "<emo>joy</emo>\n<act>waves</act>\n<msg>hi</msg>\n",  # a body without its envelope, a trailing line break
    "{'chats': [{'type': 'C', 'order': 1, 'body': '<emo>joy</emo>\\n<msg>single quotes</msg>'}]}",
    '{"chats":[{"type":"C","order":3,"body":"<emo>neutral</emo>\\n<msg>Three.</msg>"},{"type":"C","order":1,'
    '"body":"<msg>One.</msg>"},{"type":"C","order":2,"body":"<act>waves</act>"}]}',  # out of order (CF113)
]


RESET_REPLY = (
    "Sure, here it is. I will answer now, friend.\n<chats>\n<chat type=\"C\">\n<emo>...</emo>\n"
    "<msg>Bolts are in aisle two.</msg>\n<act>waves"
)
"""Prose shown as speech as it streams, then tags: the reply read again as a whole at its end (a ``reset``)."""


@pytest.mark.parametrize("text", SCRIPTED_REPLIES)
@pytest.mark.parametrize("fmt", ["canonical", "tags", "speech", "airi"])
def test_reply_formats_stream_equals_whole(
    fmt: str, text: str | None, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    if text is not None:
        upstream[0].mode = "say:" + text
    with serve(rex, upstream, reply_format=fmt) as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        whole_reply = httpx.post(base + "/v1/chat/completions", json=body, timeout=T).json()
        with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=T) as r:
            streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(r) if c.get("choices"))
    content = whole_reply["choices"][0]["message"]["content"]
    assert streamed == content
    if fmt == "canonical":
        parse(content, vocabulary=rex.vocabulary, tags=rex.tags)  # the repaired form: strictly valid
    else:
        assert "\n\n" not in content and content == content.strip()  # no empty line, no separator at an end
        assert "reply:Hello" not in content and "He thinks" not in content and "bell" not in content
    if text is not None or fmt == "canonical":
        return
    expected = {
        "tags": "[neutral] *beeps* You said",
        "speech": "You said",
        "airi": '<|ACT:{"emotion":{"name":"neutral","intensity":1}}|><|ACT:{"motion":"beeps"}|>You said',
    }[fmt]
    assert content.startswith(expected)
    if fmt == "tags":  # what a front end shows reads back, leniently, as the same reply
        back = parse(content, lenient=True, vocabulary=rex.vocabulary, tags=rex.tags)
        assert [s.tag for s in back.chats[0].segments] == ["emo", "act", "msg"]


@pytest.mark.parametrize("fmt", ["tags", "airi", "speech", "canonical"])
def test_an_answer_shows_chats_in_the_order_the_model_wrote_them(
    fmt: str, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    """Chats listed out of order (3, 1, 2): the text formats show them as written, streamed, whole and in
    ``/v1/turn``'s reply alike (a stream cannot show them otherwise); ``canonical`` presents them sorted."""
    upstream[0].mode = "say:" + SCRIPTED_REPLIES[-1]
    with serve(rex, upstream, reply_format=fmt) as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=T).json()
        with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=T) as r:
            streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(r) if c.get("choices"))
        with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as r:
            reply = list(sse(r))[-1]
    content = answer["choices"][0]["message"]["content"]
    assert streamed == content == reply["content"] and answer["charfmt"]["valid"] is True
    assert [c["order"] for c in reply["reply"]["chats"]] == [1, 2, 3]
    assert "CF113" in [d["code"] for d in reply["diagnostics"]]
    expected = {
        "tags": "[neutral] Three.\nOne.\n*waves*",
        "speech": "Three.\nOne.",
        "airi": '<|ACT:{"emotion":{"name":"neutral","intensity":1}}|>Three.\nOne.\n<|ACT:{"motion":"waves"}|>',
    }
    if fmt == "canonical":
        assert [c["order"] for c in json.loads(content)["chats"]] == [1, 2, 3]
    else:
        assert content == expected[fmt]


MARKUP_BODY = "<emo>annoyed</emo>\n<act>points at [map]</act>\n<msg>[pleased] *waves* &lt;|ACT:{}|> 【疑惑】 a|b</msg>"
MARKUP_IN_SPEECH = json.dumps({"chats": [{"type": "C", "order": 1, "body": MARKUP_BODY}]})
"""A reply whose speech and action hold what looks like the reply formats' own markers."""


@pytest.mark.parametrize("fmt", ["tags", "airi"])
def test_speech_never_forms_the_formats_own_markers(fmt: str, rex: Character, upstream: tuple[Scripted, str]) -> None:
    """``[pleased]`` or ``<|ACT:…|>`` in what the character says is no cue: written full-width, streamed or
    whole, and the answer read back (as a front end's history) holds the one emotion and the one action."""
    upstream[0].mode = "say:" + MARKUP_IN_SPEECH
    with serve(rex, upstream, reply_format=fmt) as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        content = httpx.post(base + "/v1/chat/completions", json=body, timeout=T).json()["choices"][0]["message"]
        with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=T) as r:
            streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(r) if c.get("choices"))
    shown = content["content"]
    assert streamed == shown
    if fmt == "tags":
        assert shown == "[annoyed] *points at ［map］* ［pleased］ ＊waves＊ <|ACT:{}|> 〖疑惑〗 a|b"
        back = parse(shown, lenient=True, vocabulary=rex.vocabulary, tags=rex.tags)
        (emo, act, msg) = [(seg.tag, seg.text) for seg in back.chats[0].segments]
        assert emo == ("emo", "annoyed") and act == ("act", "points at ［map］") and msg[0] == "msg"
        assert msg[1].startswith("［pleased］ ＊waves＊") and msg[1].endswith("〖疑惑〗 a|b")  # (<|…|>: blanked)
    else:
        assert shown == (
            '<|ACT:{"emotion":{"name":"angry","intensity":1}}|><|ACT:{"motion":"points at [map]"}|>'
            "[pleased] *waves* <｜ACT:{}｜> 【疑惑】 a｜b"
        )
        assert shown.count("<|") == 2 == shown.count("|>")


def test_a_stream_read_again_at_its_end_keeps_what_it_showed_and_a_whole_answer_only_the_reply(
    rex: Character, upstream: tuple[Scripted, str]
) -> None:
    """A damaged stream read again as a whole at its end (a ``reset``): streamed, what was shown stays and
    the reply follows on a new line; answered whole (and in ``/v1/turn``'s reply), only the reply."""
    upstream[0].mode = "say:" + RESET_REPLY
    with serve(rex, upstream, reply_format="speech") as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        content = httpx.post(base + "/v1/chat/completions", json=body, timeout=T).json()["choices"][0]["message"]
        with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=T) as r:
            streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(r) if c.get("choices"))
        with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as r:
            events = list(sse(r))
    assert "reset" in [e["kind"] for e in events]
    whole_answer = content["content"]
    assert whole_answer == events[-1]["content"] and "Sure, here it is." not in whole_answer
    assert streamed.startswith("Sure, here it is.") and streamed.endswith("\n" + whole_answer)


def test_front_end_history_in_tags_is_read_back(rex: Character, upstream: tuple[Scripted, str]) -> None:
    with serve(rex, upstream) as base:
        messages = [
            {"role": "system", "content": "the front end's own prompt (appended to the character's)"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "[annoyed] *crosses arms* What now?"},
            {"role": "user", "content": [{"type": "text", "text": "sorry"}]},
        ]
        r = httpx.post(base + "/v1/chat/completions", json={"messages": messages}, timeout=T)
    assert r.status_code == 200
    sent = upstream[0].requests[-1]["messages"]
    past = json.loads(sent[-2]["content"])
    assert "<emo>annoyed</emo>" in past["chats"][0]["body"] and "crosses arms" in past["chats"][0]["body"]
    system = sent[0]["content"]
    assert system.index("Rex") < system.index("the front end's own prompt") and system.count("front end's own") == 1


TWO_CHATS = json.dumps({"chats": [
    {"type": "C", "order": 1, "body": MARKUP_BODY},
    {"type": "C", "order": 2, "body": "<emo>pleased</emo>\n<msg>Hello there.</msg>\n<act>beeps</act>\n"
                                      "<msg>Put it here.</msg>"},
]})  # fmt: skip
"""A reply of two chats, the first with speech and an action that look like the formats' markers."""


@pytest.mark.parametrize("fmt", ["tags", "airi", "speech", "canonical"])
def test_an_answer_sent_back_as_history_is_the_reply_it_showed(
    fmt: str, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    """A front end without a session sends the server's own answers back as its history: each format is read
    back as the reply it showed (the character's words and markers kept apart), not taken apart by guesswork."""
    up = upstream[0]
    up.mode = "say:" + TWO_CHATS
    with serve(rex, upstream, reply_format=fmt) as base:
        said = [{"role": "user", "content": "hello"}]
        answer = httpx.post(base + "/v1/chat/completions", json={"messages": said}, timeout=T).json()
        shown = answer["choices"][0]["message"]["content"]
        up.mode = "ok"
        again = [*said, {"role": "assistant", "content": shown}, {"role": "user", "content": "sorry"}]
        assert httpx.post(base + "/v1/chat/completions", json={"messages": again}, timeout=T).status_code == 200
    past = json.loads(up.requests[-1]["messages"][-2]["content"])  # the exchange as the upstream is shown it
    first = parse(TWO_CHATS, vocabulary=rex.vocabulary, tags=rex.tags)
    if fmt == "speech":  # only the words were shown: only the words come back
        first = first.model_copy(update={"chats": [
            c.model_copy(update={"segments": [s for s in c.segments if s.tag == "msg"]}) for c in first.chats
        ]})  # fmt: skip
    bodies = [chat["body"] for chat in past["chats"]]
    expected = [chat["body"] for chat in json.loads(dumps(canonical_form(first, tags=rex.tags)))["chats"]]
    if fmt == "speech":  # (two pieces of speech shown as one line: one element)
        expected[1] = "<msg>Hello there. Put it here.</msg>"
    assert bodies == expected


def test_no_words_of_the_player_are_left_out_of_a_front_ends_history(
    rex: Character, upstream: tuple[Scripted, str]
) -> None:
    """User messages in a row are one turn; an answer that shows nothing leaves the turn to the next answer;
    answers in a row are one reply; the last run of user messages is the player's turn."""
    messages = [
        {"role": "assistant", "content": "[pleased] Welcome to the shop."},  # the greeting the front end showed
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": ""},  # (a failed or empty answer)
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t", "type": "function"}]},
        {"role": "tool", "content": "42", "tool_call_id": "t"},
        {"role": "assistant", "content": "[pleased] Fine."},
        {"role": "assistant", "content": "[annoyed] *taps the counter* More?"},
        {"role": "user", "content": "sorry"},
        {"role": "user", "content": [{"type": "text", "text": "[joy] really"}, {"type": "text", "text": "sorry"}]},
    ]
    with serve(rex, upstream, reply_format="tags") as base:
        r = httpx.post(base + "/v1/chat/completions", json={"messages": messages}, timeout=T)
    assert r.status_code == 200, r.text
    sent = upstream[0].requests[-1]["messages"]
    roles = [m["role"] for m in sent[1:]]
    # the greeting: the first assistant message the model sees (a card's greeting is sent so too)
    assert roles == ["assistant", "user", "assistant", "user"] and "Welcome" in sent[1]["content"]
    said = [m["content"] for m in sent[2:]]
    assert "hello" in said[0] and "again" in said[0] and said[0].index("hello") < said[0].index("again")
    past = json.loads(said[1])["chats"]
    assert [c["body"] for c in past] == [
        "<emo>pleased</emo>\n<msg>Fine.</msg>", "<emo>annoyed</emo>\n<act>taps the counter</act>\n<msg>More?</msg>"
    ]
    assert "sorry" in said[2] and "really" in said[2] and "<emo>pleased</emo>" in said[2]  # (joy: an alias)


def test_sessions_are_kept_apart(rex: Character, upstream: tuple[Scripted, str]) -> None:
    with serve(rex, upstream) as base:
        for who in ("alice", "bob"):
            httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": f"I am {who}"}]},
                       headers={"X-Charfmt-Session": who}, timeout=T)  # fmt: skip
        httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "again"}]},
                   headers={"X-Charfmt-Session": "bob"}, timeout=T)  # fmt: skip
    last = json.dumps(upstream[0].requests[-1]["messages"])
    assert "I am bob" in last and "I am alice" not in last


# --- /v1/turn: SSE and WebSocket -----------------------------------------------------------------


def test_turn_sse_events_before_the_reply_ends(rex: Character, upstream: tuple[Scripted, str]) -> None:
    up = upstream[0]
    up.mode = "slow"
    seen: list[dict[str, Any]] = []
    finished_when_first_text = None
    with serve(rex, upstream) as base, httpx.stream(
        "POST", base + "/v1/turn", json={"session": "g1", "say": "[joy] *waves* hi"}, timeout=T
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for obj in sse(r):
            if obj["kind"] == "text" and finished_when_first_text is None:
                finished_when_first_text = up.finished
            seen.append(obj)
    assert finished_when_first_text == 0  # speech arrived while the model was still writing
    kinds = [o["kind"] for o in seen]
    assert kinds[0] == "chat_start" and kinds[-1] == "reply"
    cues = [o["cue"]["kind"] for o in seen if o["kind"] == "stage"]
    assert cues[:2] == ["expression", "motion"] and "speak" in cues
    assert kinds.index("sentence") < kinds.index("chat_end")
    final = seen[-1]
    assert final["valid"] is True and final["session"] == "g1" and final["raw"] == reply_for(
        up.requests[-1]["messages"][-1]["content"]
    )


def test_turn_websocket(rex: Character, upstream: tuple[Scripted, str]) -> None:
    ws_client = pytest.importorskip("websockets.sync.client")
    with serve(rex, upstream) as base:
        url = base.replace("http://", "ws://") + "/v1/turn/ws"
        with ws_client.connect(url, open_timeout=T, close_timeout=T) as ws:
            for say in ("hello", "bye now"):
                ws.send(json.dumps({"session": "w1", "say": say}))
                got = []
                while True:
                    got.append(json.loads(ws.recv(timeout=T)))
                    if got[-1]["kind"] in ("reply", "error"):
                        break
                assert got[-1]["kind"] == "reply" and got[-1]["valid"]
                assert any(o["kind"] == "text" for o in got)
            ws.send("{not json")
            bad = json.loads(ws.recv(timeout=T))
            assert bad["kind"] == "error" and bad["error"]["code"] == 400 and bad["status"] == 400
            assert bad["error"]["message"].startswith("the WebSocket message is not JSON") and bad["session"] is None
            ws.send(json.dumps({"session": "w1", "say": 5}))
            bad = json.loads(ws.recv(timeout=T))
            assert bad["status"] == 400 and bad["session"] == "w1" and bad["error"]["param"] == "say"
    assert "hello" in json.dumps(upstream[0].requests[-1]["messages"])  # the session kept the first turn


# --- upstream failures -----------------------------------------------------------------------------

FAILURES = [
    ("500", 502, "model crashed"),
    ("429", 429, "slow down"),
    ("html", 502, "HTML error page"),
    ("badsse", 502, "not an OpenAI chat completion stream"),
    ("cut", 502, "upstream"),
    ("silent", 504, "sent nothing for 0.5 s"),
    ("mute", 504, "sent nothing for 0.5 s"),  # not even the answer's head
    ("endless", 502, "more than the 300 tokens"),
    ("pings", 504, "sent no event for 0.5 s (only comments)"),  # keep-alive comments are not a reply
    ("trickle", 504, "sent no whole event for 0.5 s (part of one"),  # an event too slow to come whole
    ("wholestall", 504, "sent nothing for 0.5 s"),  # a chat.completion stopped half-way: no comments there
    ("cutclean", 502, "ended before the reply did (no finish_reason, no [DONE])"),  # the body just ends
    ("say:", 502, "reply held no text"),  # [DONE] and nothing before it: never an empty answer
]


MID_REPLY = ("cut", "endless", "cutclean")
"""The modes that fail after the reply's first text."""


@pytest.mark.parametrize(("mode", "status", "words"), FAILURES)
def test_upstream_failures_are_openai_errors(
    mode: str, status: int, words: str, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    upstream[0].mode = mode
    started = time.monotonic()
    with serve(rex, upstream, timeout=0.5, max_tokens=300) as base:
        r = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=T)
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert words in error["message"] and "Traceback" not in r.text
        if mode == "429":
            assert r.headers["retry-after"] == "7"
        with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as s:
            s.read()
            if mode in MID_REPLY:  # the upstream failed after the first event: 200, an error event, the end
                seen = list(sse(s))
                last = seen[-1]
                assert s.status_code == 200 and [o["kind"] for o in seen].count("error") == 1
                assert last["kind"] == "error" and last["status"] == status and words in last["error"]["message"]
            else:  # failed before the first event: the status, an OpenAI-shaped error (as chat completions)
                assert s.status_code == status and s.json()["error"]["code"] == status, s.text
                assert words in s.json()["error"]["message"] and "Traceback" not in s.text
                assert s.headers.get("retry-after") == ("7" if mode == "429" else None)
        with httpx.stream("POST", base + "/v1/chat/completions",
                          json={"messages": [{"role": "user", "content": "hi"}], "stream": True}, timeout=T) as s:
            s.read()
            if mode in MID_REPLY:  # the upstream failed after its first bytes: 200, then an error chunk
                assert s.status_code == 200 and json.loads(s.text.split("data: ")[-1])["error"]["code"] == status
            else:  # failed before its first byte: the status held until then, streamed as not
                assert s.status_code == status and s.json()["error"]["code"] == status, s.text
                assert s.headers.get("retry-after") == ("7" if mode == "429" else None)
    assert time.monotonic() - started < 8


def test_client_disconnect_cancels_the_upstream(rex: Character, upstream: tuple[Scripted, str]) -> None:
    up = upstream[0]
    up.mode = "endless"
    with serve(rex, upstream, max_tokens=4096) as base:
        chat = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
        for path, body in (("/v1/turn", {"say": "hi"}), ("/v1/chat/completions", chat)):
            before = up.cancelled
            with httpx.stream("POST", base + path, json=body, timeout=T) as r:
                for n, _ in enumerate(r.iter_lines()):
                    # canonical JSON comes whole at the end: leave after the role chunk (not at the token limit)
                    if n > 20 or (path == "/v1/chat/completions" and n > 0):
                        break
            deadline = time.monotonic() + 5
            while up.cancelled == before and time.monotonic() < deadline:
                time.sleep(0.02)
            assert up.cancelled == before + 1, path
        ws_client = pytest.importorskip("websockets.sync.client")
        up.mode = "flood"  # (the turn mostly sending, where a client's leaving finds it)
        for _ in range(3):
            before = up.cancelled
            gc.disable()  # the turn's upstream request is closed when the client leaves, not when a collection finds
            try:  # it (a reference cycle held it: CI's default run once waited more than 5 s for one)
                with ws_client.connect(base.replace("http://", "ws://") + "/v1/turn/ws", close_timeout=0.2) as ws:
                    ws.send(json.dumps({"say": "hi"}))
                    for _ in range(5):
                        ws.recv(timeout=T)
                deadline = time.monotonic() + 5
                while up.cancelled == before and time.monotonic() < deadline:
                    time.sleep(0.02)
            finally:
                gc.enable()
            assert up.cancelled == before + 1, "websocket"


def test_the_upstream_connection_is_kept_between_turns(rex: Character, upstream: tuple[Scripted, str]) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    up = upstream[0]
    ports: set[int] = set()

    async def chat(request: Any) -> Any:
        ports.add(request.client.port)
        return await up.chat(request)

    with loopback(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as counted:
        app = create_app(Settings(character=rex, upstream_url=counted + "/v1"))
        with loopback(app) as base:
            for n in range(6):
                body = {"messages": [{"role": "user", "content": f"turn {n}"}], "stream": n % 2 == 0}
                assert httpx.post(base + "/v1/chat/completions", json=body, timeout=T).status_code == 200
                time.sleep(0.05)  # the last bytes after [DONE] are read in a task of their own
    assert len(ports) == 1, ports


# --- the doors -----------------------------------------------------------------------------------------


def test_bearer_token_and_cors(rex: Character, upstream: tuple[Scripted, str]) -> None:
    with serve(rex, upstream, token="s3cret") as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(base + "/v1/chat/completions", json=body, timeout=T)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        url = base + "/v1/chat/completions"
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer nope"}, timeout=T).status_code == 401
        ok = httpx.post(url, json=body, headers={"Authorization": "Bearer s3cret"}, timeout=T)
        assert ok.status_code == 200
        assert "access-control-allow-origin" not in ok.headers
        ws_client = pytest.importorskip("websockets.sync.client")
        from websockets.exceptions import InvalidStatus

        url = base.replace("http://", "ws://") + "/v1/turn/ws"
        for wrong in ("", "?token=nope"):  # refused as the HTTP routes refuse: 401, an OpenAI-shaped error
            with pytest.raises(InvalidStatus, match="401") as refused:
                ws_client.connect(url + wrong, open_timeout=T)
            answer = refused.value.response
            assert json.loads(answer.body)["error"]["type"] == "authentication_error"
            assert answer.headers["WWW-Authenticate"] == "Bearer"
        with ws_client.connect(url + "?token=s3cret", open_timeout=T) as ws:
            ws.send(json.dumps({"say": "hi"}))
            kinds = [json.loads(ws.recv(timeout=T))["kind"]]
            while kinds[-1] not in ("reply", "error"):
                kinds.append(json.loads(ws.recv(timeout=T))["kind"])
            assert kinds[0] == "chat_start" and kinds[-1] == "reply"
    with serve(rex, upstream, cors=("http://game.example",)) as base:
        pre = httpx.options(base + "/v1/turn", headers={"Origin": "http://game.example",
                            "Access-Control-Request-Method": "POST"}, timeout=T)  # fmt: skip
        assert pre.headers["access-control-allow-origin"] == "http://game.example"
        other = httpx.options(base + "/v1/turn", headers={"Origin": "http://evil.example",
                              "Access-Control-Request-Method": "POST"}, timeout=T)  # fmt: skip
        assert "access-control-allow-origin" not in other.headers
        cross = httpx.get(base + "/v1/info", headers={"Origin": "http://game.example"}, timeout=T)
        assert cross.headers["access-control-expose-headers"].lower() == "retry-after"


def hi(fields: str) -> bytes:
    """A chat-completions body: the player says "hi", with ``fields`` (JSON members) beside the messages."""
    return b'{"messages": [{"role": "user", "content": "hi"}], ' + fields.encode() + b"}"


BAD_REQUESTS = [
    (b"{not json", 400, "not JSON"),
    (b"[1, 2]", 400, "not an object"),
    (b"[" * 100 + b"]" * 100, 400, "nested deeper"),
    (b'{"messages": []}', 400, "non-empty array"),
    (b'{"messages": [{"role": "system", "content": "x"}]}', 400, "last message must be the player's"),
    (b'{"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "x"}]}', 400, "not 'tool'"),
    (b'{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]}', 400,
     "no text to go on from"),
    (b'{"messages": [{"role": "user", "content": 5}]}', 400, "content must be a string"),
    (b'{"messages": [{"role": "user", "content": "   "}]}', 400, "nothing to say"),
    (hi('"stream": "yes"'), 400, "'stream' must be"),
    (hi('"n": 3'), 400, "'n' must be 1"),
    (hi('"n": true'), 400, "'n' must be 1"),
    (hi('"stream_options": "x"'), 400, "'stream_options' must be"),
    (hi('"stream_options": {"include_usage": 1}'), 400, "'stream_options' must be"),
    (hi('"tools": [{"type": "function"}], "tool_choice": "required"'), 400, "does not support tools"),
    (hi('"tools": [{"type": "function"}], "tool_choice": {"type": "function", "function": {"name": "f"}}'), 400,
     "tools are not supported"),
    (hi('"functions": [{"name": "f"}], "function_call": {"name": "f"}'), 400, "does not support tools"),
    (hi('"tools": [{"type": "function"}], "tool_choice": 5'), 400, "'tool_choice' must be"),
    (hi('"tools": {"type": "function"}'), 400, "'tools' must be an array"),
    (hi('"response_format": {"type": "json_object"}'), 400, "sets the answer's form itself"),
    (hi('"response_format": "text"'), 400, "'response_format'"),
    (hi('"logprobs": true'), 400, "no log probabilities"),
    (hi('"modalities": ["text", "audio"]'), 400, "text only"),
    (hi('"frequency_penalty": 3'), 400, "from -2 to 2"),
    (b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 400, "the part 'image_url' cannot"),
    (b'{"messages": [{"role": "user", "content": null}]}', 400, "nothing to say"),
    (b"\xff\xfe", 400, "not UTF-8"),
    (json.dumps({"messages": [{"role": "user", "content": "x" * 9000}]}).encode(), 400, "at most 8,000"),
    (json.dumps({"messages": [{"role": "user", "content": "x" * 70000}]}).encode(), 413, "at most 65,536"),
]


@pytest.mark.parametrize(("body", "status", "words"), BAD_REQUESTS)
def test_malformed_requests(
    body: bytes, status: int, words: str, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    with serve(rex, upstream, max_request_bytes=65536) as base:
        json_type = {"Content-Type": "application/json"}
        r = httpx.post(base + "/v1/chat/completions", content=body, headers=json_type, timeout=T)
    assert r.status_code == status
    assert words in r.json()["error"]["message"]
    assert r.json()["error"]["param"] != "say"  # (a /v1/turn field: this request has none)
    assert not upstream[0].requests


@pytest.mark.parametrize(
    "extra",
    [{"tools": []}, {"tools": [{"type": "function"}], "tool_choice": "none"}, {"response_format": {"type": "text"}},
     {"tools": [{"type": "function"}]}, {"tools": [{"type": "function"}], "tool_choice": "auto"},
     {"functions": [{"name": "f"}], "function_call": "auto"},
     {"stream_options": {}}, {"stream_options": {"include_usage": False}}, {"stream": None}, {"logprobs": False},
     {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": None, "tool_calls": []},
                   {"role": "user", "content": "hi"}]}],
)
def test_fields_asking_for_nothing_the_server_lacks_are_taken(
    extra: dict[str, Any], rex: Character, upstream: tuple[Scripted, str]
) -> None:
    with serve(rex, upstream) as base:
        body = {"messages": [{"role": "user", "content": "hi"}], **extra}
        r = httpx.post(base + "/v1/chat/completions", json=body, timeout=T)
    assert r.status_code == 200 and r.json()["charfmt"]["valid"] is True
    assert not {"tools", "tool_choice", "response_format", "stream_options"} & set(upstream[0].requests[-1])


def test_sessions_bounded_in_number_and_bytes(rex: Character, upstream: tuple[Scripted, str]) -> None:
    app = create_app(Settings(character=rex, upstream_url=upstream[1] + "/v1", max_sessions=2, session_bytes=1500))
    store = app.state.charfmt.sessions.store
    with loopback(app) as base:
        for key in ("a", "b", "c", "c", "c"):
            r = httpx.post(base + "/v1/turn", json={"session": key, "say": "hello " * 20}, timeout=T)
            assert r.status_code == 200
    kept = {s.key.name: s for s in store.sessions()}
    assert set(kept) == {"b", "c"}
    c = kept["c"]
    assert 1 <= c.turns < 3 and (c.size <= 1500 or c.turns == 1)


def test_log_is_read_by_report(
    rex: Character, upstream: tuple[Scripted, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from charfmt.cli import main

    up = upstream[0]
    log = tmp_path / "turns.jsonl"
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    with serve(rex, upstream, log=log) as base:
        for say in ("one", "two"):
            httpx.post(base + "/v1/turn", json={"session": "L", "say": say}, timeout=T)
        up.mode = "429"
        assert httpx.post(base + "/v1/chat/completions", json=chat, timeout=T).status_code == 429
        up.mode = "endless"
        with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as r:
            next(r.iter_lines())  # then the client goes away mid-turn
        deadline = time.monotonic() + 5
        while len(log.read_text().splitlines()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 4 and {r["session"] for r in rows[:2]} == {"L"}
    assert all(r["valid"] and r["model"] == "Rex" and len(r["prompt_version"]) == 12 for r in rows[:2])
    failed, cancelled = rows[2:]
    assert failed["text"] is None and failed["status"] == 429 and "slow down" in failed["error"]
    assert cancelled["text"] is None and cancelled["status"] == 499 and "cancelled" in cancelled["error"]
    if importlib.util.find_spec("pyarrow") is None:
        pytest.skip("charfmt report needs pyarrow (charfmt[arrow]); the log itself was checked above")
    capsys.readouterr()
    assert main(["report", str(log), "--by", "model"]) == 0
    shown = capsys.readouterr()
    assert "4 lines" in shown.out + shown.err and "bad lines: 2 (a turn that failed 2)" in shown.out + shown.err
    assert "line 3: a turn that failed: no reply (status 429: " in shown.out  # (its own line: why it failed)


def test_playground_page_has_no_outside_url(rex: Character, upstream: tuple[Scripted, str]) -> None:
    with serve(rex, upstream) as base:
        r = httpx.get(base + "/", timeout=T)
        info = httpx.get(base + "/v1/info", timeout=T).json()
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "http://" not in r.text and "https://" not in r.text and "//cdn" not in r.text
    assert info["name"] == "Rex" and "pleased" in info["emotions"] and info["constrained"] is True
    assert info["speech_tags"] == [spec.name for spec in rex.tags.with_role("speech")]  # the page's speech


@pytest.mark.parametrize("fmt", ["tags", "airi", "speech"])
def test_a_scene_answer_reads_back_with_its_speakers(fmt: str) -> None:
    from charfmt.prompt.scene import Scene
    from charfmt.serve.formats import read_answer

    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    chats = [{"type": "C", "order": 1, "speaker": "mio", "body": "<emo>joy</emo>\n<msg>Welcome [in].</msg>"},
             {"type": "C", "order": 2, "speaker": "rex", "body": "<msg>No.</msg>"}]  # fmt: skip
    reply = scene.parse(json.dumps({"chats": chats}))
    shown = whole(fmt, reply, scene.tags, speakers=True) + "\nbob: who?"  # (no speaker of the cast: words)
    back = read_answer(fmt, shown, scene.tags, speakers=scene.speakers)
    assert back is not None and [c.speaker for c in back.chats] == ["mio", "rex", None]
    assert [c.texts("msg") for c in back.chats] == [["Welcome [in]."], ["No."], ["bob: who?"]]
    assert back.chats[0].texts("emo") == ([] if fmt == "speech" else ["joy"])


def test_airi_markers_written_otherwise_and_aliases_read_back(rex: Character) -> None:
    """AIRI markers a front end writes itself (two keys in one, an emotion by name) read as elements; an
    emotion's alias is its key (as the player's shorthand reads it); a marker charfmt cannot read stays words."""
    from charfmt.serve.formats import read_answer

    text = '<|ACT:{"emotion":{"name":"joy","intensity":0.5},"motion":"beeps"}|>Hi.<|ACT:{"emotion":"annoyed"}|> No.'
    back = read_answer("airi", text + ' <|ACT:{"dance":1}|>', rex.tags, vocabulary=rex.vocabulary)
    assert back is not None
    assert [(s.tag, s.text, s.intensity) for s in back.chats[0].segments] == [
        ("emo", "pleased", 0.5), ("act", "beeps", None), ("msg", "Hi.", None), ("emo", "annoyed", None),
        ("msg", "No.", None), ("msg", '<|ACT:{"dance":1}|>', None),
    ]  # fmt: skip
    tags = read_answer("tags", "[joy] Hi.", rex.tags, vocabulary=rex.vocabulary)
    assert tags is not None and tags.chats[0].texts("emo") == ["pleased"]


def test_whole_formats_of_one_reply(rex: Character) -> None:
    reply = parse(reply_for("hi there"), vocabulary=rex.vocabulary, tags=rex.tags)
    assert whole("speech", reply, rex.tags) == "You said hi there. Fine. Come back tomorrow."
    assert parse(whole("canonical", reply, rex.tags), vocabulary=rex.vocabulary, tags=rex.tags) == reply


@pytest.mark.parametrize("fmt", ["tags", "speech", "airi"])
@pytest.mark.parametrize("cut", [1, 3, 7, 1000])
def test_a_line_break_in_speech_keeps_each_chat_one_line(rex: Character, fmt: str, cut: int) -> None:
    """A chat that says something is one line in the line formats, however its speech breaks, streamed or whole."""
    from charfmt.serve.formats import Formatter
    from charfmt.stream import StreamParser

    body = "<emo>annoyed</emo>\n<msg>Fine, line one.\r\nLine two.\u2028Three.</msg>"
    text = json.dumps({"chats": [{"type": "C", "order": 1, "body": "<msg>No.</msg>"},
                                 {"type": "C", "order": 2, "body": body}]})  # fmt: skip
    reply = parse(text, vocabulary=rex.vocabulary, tags=rex.tags)
    shown = whole(fmt, reply, rex.tags)
    assert shown.splitlines() == shown.split("\n") and len(shown.splitlines()) == 2, shown
    stream, formatter = StreamParser(lenient=True, vocabulary=rex.vocabulary, tags=rex.tags), Formatter(fmt, rex.tags)
    pieces = [formatter.feed(e) for i in range(0, len(text), cut) for e in stream.feed(text[i : i + cut])]
    pieces += [formatter.feed(e) for e in stream.close()]
    assert "".join(pieces) == shown


def test_a_budget_too_small_fails_at_create_app(rex: Character) -> None:
    from charfmt import CharfmtError

    with pytest.raises(CharfmtError, match="max_tokens=64 is too small"):
        create_app(Settings(character=rex, upstream_url="http://127.0.0.1:9/v1", max_tokens=64))


def test_cli_usage_errors_exit_2() -> None:
    env_cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX)]
    for extra, words in ((["--upstream", "ftp://x"], "not an http"), ([], "one of the arguments --upstream --model"),
                         (["--upstream", "http://127.0.0.1:9/v1", "--max-tokens", "9000"], "no room"),
                         (["--upstream", "http://127.0.0.1:9/v1", "--port", "99999"], "--port"),
                         (["--upstream", "http://127.0.0.1:9/v1", "--api-key-env", "CF_NO_VAR"], "CF_NO_VAR"),
                         (["--upstream", "https://api.openai.com/v1", "--server", "openai"], "needs the model's name"),
                         (["--upstream", "http://127.0.0.1:9/v1", "--cors", "http://localhost:3000/"], "not an origin"),
                         (["--upstream", "http://127.0.0.1:9/v1", "--cors", "not an origin"], "not an origin"),
                         ):  # fmt: skip
        p = subprocess.run([*env_cmd, *extra], capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr


def test_cli_port_in_use_is_one_error_line_exit_1() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX),
               "--upstream", "http://127.0.0.1:9/v1", "--port", str(port)]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and p.stderr.startswith("charfmt: error: cannot listen")
    help_text = subprocess.run([*cmd[:4], "--help"], capture_output=True, text=True, timeout=60, check=False).stdout
    assert "exit status:" in help_text and "port in use" in help_text and "(default 120" in help_text


def test_readme_openai_sample_talks_to_the_server(rex: Character, upstream: tuple[Scripted, str]) -> None:
    pytest.importorskip("openai")
    page = (ROOT / "docs" / "SERVER.md").read_text(encoding="utf-8")
    block = page.split("```python\n", 1)[1].split("\n```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/SERVER.md", "exec"), namespace)
    with serve(rex, upstream) as base:
        text = namespace["talk"](base + "/v1")
    reply = parse(text, vocabulary=rex.vocabulary, tags=rex.tags)
    assert "Hi Rex" in reply.chats[0].segments[-1].text


def test_turn_by_get_for_eventsource(rex: Character, upstream: tuple[Scripted, str]) -> None:
    with serve(rex, upstream, token="t") as base:
        url = base + "/v1/turn?session=es&say=%5Bjoy%5D%20hi"
        assert httpx.get(url, timeout=T).status_code == 401
        with httpx.stream("GET", url + "&token=t", headers={"Accept": "text/event-stream"}, timeout=T) as r:
            objs = list(sse(r))
    assert objs[0]["kind"] == "chat_start" and objs[-1]["kind"] == "reply" and objs[-1]["session"] == "es"


def test_a_scene_is_served_with_its_cast(upstream: tuple[Scripted, str]) -> None:
    from charfmt.prompt.scene import Scene

    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    first = next(iter(scene.cast.values()))
    up = upstream[0]
    app = create_app(Settings(character=first, scene=scene, upstream_url=upstream[1] + "/v1"))
    with loopback(app) as base:
        info = httpx.get(base + "/v1/info", timeout=T).json()
        results = {}
        for speaker in ("rex", "ghost"):
            up.mode = f"scene:{speaker}"
            with httpx.stream("POST", base + "/v1/turn", json={"say": "[joy] fix the bell"}, timeout=T) as r:
                results[speaker] = list(sse(r))
    assert info["speakers"] == ["rex", "mio"] and info["name"] == scene.name
    sent = up.requests[-1]
    # the speaker is one of the cast, each C chat an alternative of its own (its speaker's emotions)
    assert '"\\"rex\\""' in sent["grammar"] and '"\\"mio\\""' in sent["grammar"]
    assert 't-key-s1 ::= "joy" | "surprise"' in sent["grammar"]
    assert "Mio" in sent["messages"][0]["content"] and "Rex" in sent["messages"][0]["content"]
    good = results["rex"]
    assert good[0] == {"kind": "chat_start", "chat": 0, "type": "C", "order": 1, "speaker": "rex"}
    expression = next(o["cue"] for o in good if o["kind"] == "stage" and o["cue"]["kind"] == "expression")
    assert expression["speaker"] == "rex" and expression["sprite"] == "rex_idle"
    assert good[-1]["kind"] == "reply" and good[-1]["valid"] is True
    bad = results["ghost"][-1]
    assert bad["valid"] is False and any(d["code"] == "CF309" for d in bad["diagnostics"])
    # the player's words are the whole cast's: Mio's [sad] (Rex, the first member, has none) is an emotion
    with loopback(app) as base, httpx.stream("POST", base + "/v1/turn", json={"say": "[sad] hi"}, timeout=T) as r:
        said = list(sse(r))
    assert said[0]["kind"] != "say" and "<emo>sad</emo>" in up.requests[-1]["messages"][-1]["content"]


# --- the upstream's key and URL --------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["ok", "401", "403", "500", "html"])
def test_upstream_key_is_bearer_and_the_url_is_never_shown(
    mode: str, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    up, base_url = upstream
    up.mode = mode
    up.auth.clear()
    secret_url = base_url.replace("http://", "http://alice:pw-in-url@") + "/v1"
    app = create_app(Settings(character=rex, upstream_url=secret_url, api_key="sk-key-123", api_key_env="MY_KEY"))
    with loopback(app) as base:
        r = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=T)
    assert up.auth == ["Bearer sk-key-123"]  # the key as Bearer; the URL's userinfo never sent as Basic
    for leak in ("sk-key-123", "pw-in-url", "alice", base_url.removeprefix("http://")):
        assert leak not in r.text
    if mode == "ok":
        assert r.status_code == 200
        return
    message = r.json()["error"]["message"]
    assert message.startswith("the upstream: "), message
    if mode in ("401", "403"):
        assert r.status_code == 502 and "MY_KEY" in message and f"HTTP {mode}" in message


def test_a_content_filters_stop_is_said_and_a_refusal_quoted(rex: Character, upstream: tuple[Scripted, str]) -> None:
    """A content filter that stops the reply half-way: ``finish_reason: content_filter`` (never ``stop``), not
    valid, ``CF823`` in the reply's diagnostics. A refusal with no reply: a 502 quoting the model's words."""
    up = upstream[0]
    up.mode = "filter"
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    with serve(rex, upstream, reply_format="tags") as base:
        answer = httpx.post(base + "/v1/chat/completions", json=chat, timeout=T).json()
        with httpx.stream("POST", base + "/v1/chat/completions", json={**chat, "stream": True}, timeout=T) as r:
            last = [c for c in sse(r) if c.get("choices")][-1]
        with httpx.stream("POST", base + "/v1/turn", json={"say": "hi"}, timeout=T) as r:
            events = list(sse(r))
        reply = events[-1]
        up.mode = "refuse"
        refused = httpx.post(base + "/v1/chat/completions", json=chat, timeout=T)
    assert answer["choices"][0]["finish_reason"] == "content_filter" and answer["charfmt"]["valid"] is False
    assert last["choices"][0]["finish_reason"] == "content_filter" and last["charfmt"]["valid"] is False
    assert reply["timing"]["finish_reason"] == "content_filter" and reply["valid"] is False
    assert "CF823" in [d["code"] for d in reply["diagnostics"]]
    said = [e["diagnostic"]["code"] for e in events[:-1] if e["kind"] == "diagnostic"]
    assert "CF823" in said  # said as it came, before the reply
    assert refused.status_code == 502
    assert refused.json()["error"]["message"] == 'the upstream\'s model refused to answer: "I cannot help with that."'


@pytest.mark.parametrize("mode", ["ok", "whole"])
def test_usage_counts_the_reply_however_the_upstream_sent_it(
    mode: str, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    """The reply's tokens are estimated from its text: a whole completion is not one token (one delta)."""
    from charfmt.prompt.render import estimate_tokens

    upstream[0].mode = mode
    with serve(rex, upstream) as base:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        usage = httpx.post(base + "/v1/chat/completions", json=body, timeout=T).json()["usage"]
    written = reply_for(upstream[0].requests[-1]["messages"][-1]["content"])
    assert usage["completion_tokens"] == estimate_tokens(written) > 10


@pytest.mark.parametrize("mode", ["401", "403"])
def test_an_upstream_refusal_without_a_key_says_none_was_sent(
    mode: str, rex: Character, upstream: tuple[Scripted, str]
) -> None:
    """With no key set (``OPENAI_API_KEY`` unset), a 401 is no refused key: the message says none was sent."""
    upstream[0].mode = mode
    with serve(rex, upstream, api_key_env="OPENAI_API_KEY") as base:
        r = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=T)
    message = r.json()["error"]["message"]
    assert upstream[0].auth[-1] is None and r.status_code == 502
    assert message.startswith(f"the upstream: HTTP {mode}: charfmt sent no API key (set the environment variable "
                              "OPENAI_API_KEY)") and "refused charfmt's" not in message  # fmt: skip


@pytest.mark.parametrize("fmt", ["tags", "speech", "airi"])
def test_a_scene_in_tags_speech_airi_says_who_speaks(fmt: str, upstream: tuple[Scripted, str]) -> None:
    from charfmt.prompt.scene import Scene

    scene = Scene.load(ROOT / "examples" / "scenes" / "mars_shrine.toml")
    up = upstream[0]
    two = {"chats": [
        {"type": "C", "order": 1, "speaker": "rex", "body": "<emo>neutral</emo>\n<msg>The bell is cracked.</msg>"},
        {"type": "E", "order": 2, "body": "The bell hums."},
        {"type": "C", "order": 3, "speaker": "mio", "body": "<emo>joy</emo>\n<msg>Fix it!</msg>"},
    ]}  # fmt: skip
    up.mode = "say:" + json.dumps(two)
    app = create_app(Settings(character=next(iter(scene.cast.values())), scene=scene,
                              upstream_url=upstream[1] + "/v1", reply_format=fmt))  # fmt: skip
    body = {"messages": [{"role": "user", "content": "fix the bell"}]}
    with loopback(app) as base:
        content = httpx.post(base + "/v1/chat/completions", json=body, timeout=T).json()["choices"][0]["message"]
        with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=T) as r:
            streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in sse(r) if c.get("choices"))
    lines = content["content"].split("\n")
    assert streamed == content["content"] and len(lines) == 2  # the narrator's line says nothing: no empty line
    assert lines[0].startswith("rex: ") and lines[1].startswith("mio: ")
    assert lines[0].endswith("The bell is cracked.") and lines[1].endswith("Fix it!")


def test_cross_site_requests_are_refused_without_cors(rex: Character, upstream: tuple[Scripted, str]) -> None:
    ws_client = pytest.importorskip("websockets.sync.client")
    from websockets.exceptions import InvalidStatus

    with serve(rex, upstream, cors=("http://game.example",)) as base:
        body = json.dumps({"say": "hi"})
        for kind in ("text/plain", "application/x-www-form-urlencoded", None):  # what a form or no-cors fetch sends
            headers = {"Content-Type": kind} if kind else {}
            r = httpx.post(base + "/v1/turn", content=body, headers=headers, timeout=T)
            assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
        r = httpx.post(base + "/v1/chat/completions", content=body, headers={"Content-Type": "text/plain"}, timeout=T)
        assert r.status_code == 415
        url = base.replace("http://", "ws://") + "/v1/turn/ws"
        with pytest.raises(InvalidStatus, match="403"):
            ws_client.connect(url, open_timeout=T, origin="http://evil.example")  # type: ignore[arg-type]
        for origin in (None, base, "http://game.example"):  # absent, the server's own, a --cors one
            with ws_client.connect(url, open_timeout=T, origin=origin) as ws:  # type: ignore[arg-type]
                ws.send(json.dumps({"say": 1}))
                assert json.loads(ws.recv(timeout=T))["status"] == 400
    with serve(rex, upstream, cors=("*",)) as base:  # any origin, the WebSocket's too
        url = base.replace("http://", "ws://") + "/v1/turn/ws"
        with ws_client.connect(url, open_timeout=T, origin="http://evil.example") as ws:  # type: ignore[arg-type]
            ws.send(json.dumps({"say": 1}))
            assert json.loads(ws.recv(timeout=T))["status"] == 400


def test_front_end_sampling_system_and_usage_reach_the_upstream(rex: Character, upstream: tuple[Scripted, str]) -> None:
    openai = pytest.importorskip("openai")
    up = upstream[0]
    with serve(rex, upstream) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=T, max_retries=0)
        messages = [{"role": "system", "content": "Answer in pirate speak."}, {"role": "user", "content": "hi"}]
        chunks = list(client.chat.completions.create(
            model="whatever", messages=messages, temperature=0.3, top_p=0.9, seed=7, stop=["</x>"], stream=True,
            stream_options={"include_usage": True}, frequency_penalty=0.5, presence_penalty=-0.5,
        ))  # fmt: skip
        bad = httpx.post(base + "/v1/chat/completions", json={"messages": messages, "temperature": "hot"}, timeout=T)
    sent = up.requests[-1]
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (0.3, 0.9, 7, ["</x>"])
    assert (sent["frequency_penalty"], sent["presence_penalty"]) == (0.5, -0.5)
    assert sent["messages"][0]["role"] == "system" and sent["messages"][0]["content"].rstrip().endswith(
        "Answer in pirate speak."
    )
    assert sum(m["content"].count("pirate") for m in sent["messages"]) == 1  # in the system prompt only
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None and usage.completion_tokens > 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "temperature"


def test_cli_says_where_it_listens_and_keeps_the_token_out_of_its_log(upstream: tuple[Scripted, str]) -> None:
    """``--port 0`` takes a free port and says which; the access log writes ``?token=***``; an upstream that
    cannot be reached is an error that names neither its host nor its port."""
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]  # a port nobody listens on once this block ends
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream",
           f"http://127.0.0.1:{dead}/v1", "--port", "0", "--token", "s3cret-tok-4f9a2"]  # fmt: skip
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as app:
        try:
            assert app.stderr is not None
            first = app.stderr.readline()
            assert first.startswith("charfmt serve: listening on http://127.0.0.1:"), first
            base = first.split()[4]
            for _ in range(200):
                try:
                    auth = {"Authorization": "Bearer s3cret-tok-4f9a2"}
                    if httpx.get(base + "/v1/info", headers=auth).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            r = httpx.get(base + "/v1/turn", params={"say": "hi", "token": "s3cret-tok-4f9a2"}, timeout=T)
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert message.startswith("the upstream: cannot connect") and str(dead) not in message, message
            assert "127.0.0.1" not in message, message
            ws_client = pytest.importorskip("websockets.sync.client")
            from websockets.exceptions import InvalidStatus

            ws_url = base.replace("http://", "ws://") + "/v1/turn/ws?token="
            with ws_client.connect(ws_url + "s3cret-tok-4f9a2", close_timeout=2):
                pass  # accepted: uvicorn's line names the URL it was opened with
            with pytest.raises(InvalidStatus):
                ws_client.connect(ws_url + "wrong-tok-77", close_timeout=2)  # refused (401): its line too
        finally:
            app.terminate()
            log = (app.stderr.read() if app.stderr else "") + (app.stdout.read() if app.stdout else "")
    assert "/v1/turn?" in log and "token=***" in log and "s3cret-tok-4f9a2" not in log, log
    assert "WebSocket /v1/turn/ws?token=***" in log and "wrong-tok-77" not in log, log
    assert "ERROR" not in log, log  # (a handshake refused with its 401 is no server error)
    assert "failed: 502 the upstream: cannot connect" in log, log  # the console says why a turn failed


def test_a_stop_with_answers_under_way_ends_them_with_an_error_and_no_traceback(
    upstream: tuple[Scripted, str], tmp_path: Path
) -> None:
    """SIGTERM while one answer streams and one waits for its first event: after the grace period, each
    client is told the server stops (503), the log says so, the server exits 143 with no traceback."""
    import signal

    upstream[0].mode = "stall"  # a first chunk, then keep-alive comments: the turns never end by themselves
    log = tmp_path / "turns.jsonl"
    cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream", upstream[1] + "/v1",
           "--port", "0", "--timeout", "60", "--log", str(log)]  # fmt: skip
    seen: dict[str, str] = {}
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as app:
        try:
            assert app.stderr is not None
            base = app.stderr.readline().split()[4]
            chat = {"messages": [{"role": "user", "content": "hi"}], "stream": True}

            def read(name: str, path: str, body: dict[str, Any]) -> None:
                with httpx.stream("POST", base + path, json=body, timeout=30) as r:
                    seen[name] = f"{r.status_code} " + "".join(r.iter_text())

            import threading

            readers = [threading.Thread(target=read, args=a) for a in (
                ("turn", "/v1/turn", {"say": "hi"}), ("chat", "/v1/chat/completions", chat))]  # fmt: skip
            for t in readers:
                t.start()
            deadline = time.monotonic() + 20
            while len(upstream[0].requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # both answers under way
            app.send_signal(signal.SIGTERM)
            for t in readers:
                t.join(30)
            assert app.wait(30) == -signal.SIGTERM  # (a shell says 143)
        finally:
            app.kill()
            err = app.stderr.read() if app.stderr else ""
    assert "Traceback" not in err and "Exception in ASGI application" not in err, err
    status, _, text = seen["turn"].partition(" ")  # no event yet (the first chunk makes none): the status says it
    assert status == "503" and "server is stopping" in json.loads(text)["error"]["message"], seen
    status, _, text = seen["chat"].partition(" ")  # streaming (its role chunk sent): an error chunk ends it
    last = json.loads(text.strip().split("data: ")[-1])
    assert status == "200" and last["error"]["code"] == 503 and "server is stopping" in last["error"]["message"]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["status"], r["error"]) for r in rows] == [(503, "cancelled: the server stopped")] * 2


def test_a_websocket_client_that_leaves_with_turns_waiting_cancels_the_upstream(
    rex: Character, upstream: tuple[Scripted, str]
) -> None:
    """More turns than may wait are each refused with an error object (429), and the socket stays free
    to see its client leave: the turn under way is cancelled at once."""
    import socket
    import struct

    up = upstream[0]
    up.mode = "stall"
    ws_client = pytest.importorskip("websockets.sync.client")
    with serve(rex, upstream, timeout=60) as base:
        with ws_client.connect(base.replace("http://", "ws://") + "/v1/turn/ws", close_timeout=2) as ws:
            for i in range(12):  # one under way, eight waiting, three refused
                ws.send(json.dumps({"session": f"q{i}", "say": "hi"}))
            refused = []
            while len(refused) < 3:
                raw = ws.recv(timeout=T)
                obj = json.loads(raw)
                assert raw == json.dumps(obj, ensure_ascii=False, separators=(",", ":"))  # compact, as SSE data
                if obj["kind"] == "error":
                    refused.append(obj)
            assert all(o["status"] == 429 and "already waiting" in o["error"]["message"] for o in refused)
            assert [o["session"] for o in refused] == ["q9", "q10", "q11"]  # which turns: the last three sent
            deadline = time.monotonic() + 5
            while not up.requests and time.monotonic() < deadline:
                time.sleep(0.02)  # the turn under way has reached the upstream
            ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            ws.socket.close()  # the client goes away at once (a reset, no closing handshake)
        deadline = time.monotonic() + 5
        while up.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert up.cancelled == 1 and len(up.requests) == 1


def test_smaller_doors(rex: Character, upstream: tuple[Scripted, str], tmp_path: Path) -> None:
    """The session header is a session key; ``?constrained=`` is 1/true/0/false; the Bearer scheme's case does
    not matter; a --log that cannot be opened and too few --max-tokens are usage errors (exit 2)."""
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    with serve(rex, upstream, token="t0k") as base:
        auth = {"Authorization": "bearer t0k"}
        for bad in ("bad key", "x" * 200):
            r = httpx.post(base + "/v1/chat/completions", json=chat, timeout=T,
                           headers={**auth, "X-Charfmt-Session": bad})  # fmt: skip
            assert r.status_code == 400 and r.json()["error"]["param"] == "x-charfmt-session", r.text
            assert "the x-charfmt-session header is 1 to 128 characters" in r.json()["error"]["message"]
        headers = {**auth, "X-Charfmt-Session": "p:1"}
        ok = httpx.post(base + "/v1/chat/completions", json=chat, headers=headers, timeout=T)
        assert ok.status_code == 200, ok.text
        for flag, code in (("maybe", 400), ("yes", 400), ("TRUE", 200), ("0", 200)):
            r = httpx.get(base + "/v1/turn", params={"say": "hi", "constrained": flag}, headers=auth, timeout=T)
            assert r.status_code == code, (flag, r.text)
            if code == 400:
                assert r.json()["error"]["param"] == "constrained"
        sent = [r.get("grammar") is not None for r in upstream[0].requests[-2:]]
        assert sent == [True, False]  # TRUE: constrained; 0: not
    serve_cmd = [sys.executable, "-m", "charfmt", "serve", "--character", str(REX), "--upstream", "http://127.0.0.1:9/v1"]
    for extra, words in ((["--log", str(tmp_path)], "argument --log: cannot open"),
                         (["--log", str(tmp_path / "no" / "x.jsonl")], "argument --log: cannot open"),
                         (["--max-tokens", "1"], "argument --max-tokens: max_tokens=1 is too small")):  # fmt: skip
        p = subprocess.run([*serve_cmd, *extra], capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
    p = subprocess.run([*serve_cmd, "--host", "999.1.1.1"], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 1 and "cannot listen" in p.stderr and "warning" not in p.stderr, p.stderr
