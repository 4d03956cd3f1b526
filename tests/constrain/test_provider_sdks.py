"""Structured requests through each provider's own SDK, offline: the real client, a mocked transport.

``render_messages(..., structured=True)`` and ``request_fields`` build request bodies; here each
goes through the current SDK (``openai``, ``anthropic``, ``google-genai``) as a user would pass it.
An SDK refuses a parameter it does not have (a ``TypeError``) or a schema its types reject (a
validation error), so a request shape the provider dropped fails here. The transport records what
the SDK would send and answers with a reply, which charfmt then parses from the SDK's response.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from conftest import ROOT

import charfmt
from charfmt.constrain.engines import request_fields

httpx = pytest.importorskip("httpx", reason="httpx is not installed (the SDKs' transport)")

REX = charfmt.Character.load(ROOT / "examples" / "characters" / "rex.toml")
REPLY = '{"chats":[{"type":"C","order":1,"body":"<emo>annoyed</emo>\\n<msg>Forty bolts. Cash.</msg>"}]}'
TURN = charfmt.UserTurn.say("How much to fix my drone?")


class Recorder:
    """An ``httpx.MockTransport`` that keeps every request body and answers with ``answer``."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def client(self, http: Any = httpx) -> Any:
        """A client of ``http`` (``httpx``, or ``httpx2``, which openai and anthropic now build on)."""

        def handle(request: Any) -> Any:
            self.sent.append((request.url.path, json.loads(request.content)))
            return http.Response(200, json=self.answer)

        return http.Client(transport=http.MockTransport(handle))


def _http(sdk: Any) -> Any:
    """The httpx flavour ``sdk``'s client is built on."""
    base = importlib.import_module(f"{sdk.__name__}._base_client")
    return getattr(base, "httpx2", None) or base.httpx


def _structured(provider: str) -> dict[str, Any]:
    return charfmt.render_messages(REX, [], TURN, provider=provider, structured=True)


# --- OpenAI --------------------------------------------------------------------------------------------


def _openai(recorder: Recorder) -> Any:
    openai = pytest.importorskip("openai", reason="openai is not installed (pip install charfmt[test])")
    return openai.OpenAI(
        api_key="test", base_url="http://provider.invalid/v1", http_client=recorder.client(_http(openai))
    )


OPENAI_ANSWER = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-test",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
}  # fmt: skip


def test_openai_sdk_takes_the_structured_request() -> None:
    recorder = Recorder(OPENAI_ANSWER)
    request = _structured("openai")
    done = _openai(recorder).chat.completions.create(model="gpt-test", **request)
    ((path, sent),) = recorder.sent
    assert path == "/v1/chat/completions"
    assert sent["response_format"]["json_schema"]["schema"] == charfmt.json_schema("openai", vocabulary=REX.vocabulary)
    assert sent["messages"] == request["messages"]
    assert charfmt.parse(done.choices[0].message.content, vocabulary=REX.vocabulary).chats[0].segments[1].text


@pytest.mark.parametrize("server", ["openai", "lmstudio"])
def test_openai_sdk_takes_the_request_fields(server: str) -> None:
    recorder = Recorder(OPENAI_ANSWER)
    fields = request_fields(server, vocabulary=REX.vocabulary, max_tokens=300)
    _openai(recorder).chat.completions.create(model="gpt-test", messages=_structured("openai")["messages"], **fields)
    ((_, sent),) = recorder.sent
    assert sent["max_tokens"] == 300 and sent["response_format"] == fields["response_format"]


@pytest.mark.parametrize("server", ["llama-server", "vllm", "sglang"])
def test_openai_sdk_sends_the_grammar_fields_as_extra_body(server: str) -> None:
    recorder = Recorder(OPENAI_ANSWER)
    fields = request_fields(server, vocabulary=REX.vocabulary, max_tokens=300)
    _openai(recorder).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], extra_body=fields
    )
    ((_, sent),) = recorder.sent
    assert {k: sent[k] for k in fields} == fields


# --- Anthropic -----------------------------------------------------------------------------------------

ANTHROPIC_ANSWER = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
    "content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}  # fmt: skip


def test_anthropic_sdk_takes_the_structured_request() -> None:
    anthropic = pytest.importorskip("anthropic", reason="anthropic is not installed (pip install charfmt[test])")
    recorder = Recorder(ANTHROPIC_ANSWER)
    client = anthropic.Anthropic(
        api_key="test", base_url="http://provider.invalid", http_client=recorder.client(_http(anthropic))
    )
    request = _structured("anthropic")
    done = client.messages.create(model="claude-test", max_tokens=300, **request)
    ((path, sent),) = recorder.sent
    assert path == "/v1/messages"
    schema = charfmt.json_schema("anthropic", vocabulary=REX.vocabulary)
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert sent["system"] == request["system"] and sent["messages"] == request["messages"]
    assert charfmt.parse(done.content[0].text, vocabulary=REX.vocabulary).chats[0].segments[0].text == "annoyed"


def test_anthropic_request_keys_are_the_sdks_own() -> None:
    """Every key of the request, and of its output format, is a parameter/field the SDK declares."""
    pytest.importorskip("anthropic", reason="anthropic is not installed (pip install charfmt[test])")
    import inspect
    import typing

    from anthropic.resources.messages import Messages
    from anthropic.types import JSONOutputFormatParam, OutputConfigParam

    request = _structured("anthropic")
    assert set(request) <= set(inspect.signature(Messages.create).parameters)
    assert set(request["output_config"]) <= set(typing.get_type_hints(OutputConfigParam))
    assert set(request["output_config"]["format"]) == set(typing.get_type_hints(JSONOutputFormatParam))


# --- Gemini (google-genai) -----------------------------------------------------------------------------

GEMINI_ANSWER = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": REPLY}]}, "finishReason": "STOP", "index": 0}],
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def _normalise(value: Any, in_properties: bool = False) -> Any:
    """camelCase keys, except the property names under ``properties``; schema type names in upper case."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = k if in_properties else _camel(k)
            kind = v.upper() if key == "type" and isinstance(v, str) and not in_properties else v
            out[key] = _normalise(kind, in_properties=(key == "properties" and not in_properties))
        return out
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def test_gemini_sdk_sends_the_structured_request() -> None:
    """The request is the REST body: google-genai sends the same for its contents and config."""
    pytest.importorskip("google.genai", reason="google-genai is not installed (pip install charfmt[test])")
    from google import genai
    from google.genai import types

    recorder = Recorder(GEMINI_ANSWER)
    client = genai.Client(
        api_key="test",
        http_options=types.HttpOptions(base_url="http://provider.invalid", httpx_client=recorder.client()),
    )
    request = _structured("gemini")
    config = {"system_instruction": request["system_instruction"], **request["generation_config"]}
    done = client.models.generate_content(model="gemini-test", contents=request["contents"], config=config)
    ((path, sent),) = recorder.sent
    assert path.endswith("/models/gemini-test:generateContent")
    assert _normalise(sent) == _normalise(request)
    assert charfmt.parse(done.text, vocabulary=REX.vocabulary).chats[0].segments[1].text == "Forty bolts. Cash."
