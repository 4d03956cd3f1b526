"""json_schema: valid replies validate, and each provider variant keeps to what it accepts."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from conftest import ROOT
from hypothesis import given

import charfmt
from charfmt.testing import replies

# Keywords each provider's structured-output mode accepts (as documented by each).
ALLOWED = {
    "openai": {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "items",
        "description",
        "minimum",
        "anyOf",
        "pattern",
    },
    "anthropic": {"type", "properties", "required", "additionalProperties", "enum", "items", "description"},
    "gemini": {"type", "properties", "required", "enum", "items", "description", "minimum", "propertyOrdering"},
}


def _objects(schema: dict[str, Any]) -> list[dict[str, Any]]:
    found = [schema]
    for sub in schema.get("properties", {}).values():
        found += _objects(sub)
    if "items" in schema:
        found += _objects(schema["items"])
    for sub in schema.get("anyOf", []):
        found += _objects(sub)
    return found


def _keywords(schema: dict[str, Any]) -> set[str]:
    return {k for node in _objects(schema) for k in node}


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_provider_schema_uses_only_supported_keywords(provider: str) -> None:
    schema = charfmt.json_schema(provider)
    assert _keywords(schema) <= ALLOWED[provider]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_strict_providers_close_every_object_and_require_every_property(provider: str) -> None:
    for node in _objects(charfmt.json_schema(provider)):
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert set(node["required"]) == set(node["properties"])


def test_openai_and_generic_schemas_constrain_each_body_by_its_pattern() -> None:
    for provider in (None, "openai"):
        tagged, plain = charfmt.json_schema(provider)["properties"]["chats"]["items"]["anyOf"]
        assert tagged["properties"]["type"]["enum"] == ["C"]
        assert plain["properties"]["type"]["enum"] == ["I", "E"]
        assert tagged["properties"]["body"]["pattern"].startswith("^")
        assert tagged["properties"]["body"]["pattern"].endswith("$")


@pytest.mark.parametrize(
    "body",
    ["<msg>hi</act>", "<emo> joy</emo>", "hello", "<msg>a < b</msg>", "<emo>joy</emo><msg>x</msg>", "<emo>sad</emo>"],
)
def test_body_pattern_rejects_what_strict_parsing_rejects(body: str) -> None:
    doc = {"chats": [{"type": "C", "order": 1, "body": body}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, charfmt.json_schema("openai", vocabulary=charfmt.Vocabulary.of("joy")))
    with pytest.raises(charfmt.ParseError):
        charfmt.parse(json.dumps(doc), vocabulary=charfmt.Vocabulary.of("joy"))


def test_gemini_orders_properties_for_streaming() -> None:
    chat = charfmt.json_schema("gemini")["properties"]["chats"]["items"]
    assert chat["propertyOrdering"] == ["type", "order", "body"]


def test_unknown_provider_is_a_charfmt_error() -> None:
    with pytest.raises(charfmt.CharfmtError, match="unknown provider"):
        charfmt.json_schema("llama")


def test_generic_schema_is_valid_json_schema() -> None:
    schema = charfmt.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)


@given(replies())
def test_every_valid_reply_validates(reply: charfmt.Reply) -> None:
    doc = json.loads(charfmt.dumps(reply))
    for provider in (None, "openai", "anthropic", "gemini"):
        jsonschema.validate(doc, charfmt.json_schema(provider))


@pytest.mark.parametrize(
    "doc",
    [
        {"chats": [{"type": "X", "order": 1, "body": ""}]},
        {"chats": [{"type": "C", "order": 0, "body": ""}]},
        {"chats": [{"type": "C", "order": 1}]},
        {"chats": [{"type": "C", "order": 1, "body": "", "extra": 1}]},
        {"chats": [], "mood": "joy"},
    ],
)
def test_schema_rejects_wrong_envelopes(doc: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, charfmt.json_schema())


# --- the character's vocabulary in structured requests (issue 11.13) -------------------------

_MIO = charfmt.Character.load(ROOT / "examples" / "characters" / "mio.toml")


def _request_schema(request: dict[str, Any], provider: str) -> dict[str, Any]:
    if provider == "openai":
        schema: dict[str, Any] = request["response_format"]["json_schema"]["schema"]
    elif provider == "anthropic":
        schema = request["output_config"]["format"]["schema"]
    else:
        schema = request["generation_config"]["response_schema"]
    return schema


def _bodies(schema: dict[str, Any]) -> list[dict[str, Any]]:
    items = schema["properties"]["chats"]["items"]
    return [chat["properties"]["body"] for chat in items.get("anyOf", [items])]


def _named_keys(schema: dict[str, Any]) -> list[list[str]]:
    found = []
    for body in _bodies(schema):
        m = re.search(r"The only keys allowed in <emo>: ([^.]*)\.", body["description"])
        if m:
            found.append(m.group(1).split(", "))
    return found


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_structured_requests_restrict_emo_to_the_characters_emotions(provider: str) -> None:
    turn = charfmt.UserTurn.say("hi")
    request = charfmt.render_messages(_MIO, [], turn, provider=provider, structured=True)
    schema = _request_schema(request, provider)
    assert schema == charfmt.json_schema(provider, vocabulary=_MIO.vocabulary)
    assert _named_keys(schema) == [_MIO.vocabulary.keys]  # every provider is told the keys
    assert _keywords(schema) <= ALLOWED[provider]
    if provider == "openai":  # and OpenAI enforces them by the body pattern
        for key in _MIO.vocabulary.keys:
            jsonschema.validate(_doc(f"<emo>{key}</emo>\n<msg>hi</msg>"), schema)
        for key in ("furious", "Joy", "喜び", "joy "):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(_doc(f"<emo>{key}</emo>\n<msg>hi</msg>"), schema)


def _doc(body: str) -> dict[str, Any]:
    return {"chats": [{"type": "C", "order": 1, "body": body}]}


def test_without_a_vocabulary_no_keys_are_named() -> None:
    for provider in (None, "openai", "anthropic", "gemini"):
        assert _named_keys(charfmt.json_schema(provider)) == []
        jsonschema.validate(_doc("<emo>furious</emo>"), charfmt.json_schema(provider))
