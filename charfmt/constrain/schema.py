"""``json_schema``: the reply envelope as JSON Schema, shaped for each provider's structured output."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Unpack

from charfmt.constrain._regex_ir import from_regex, json_encoded
from charfmt.constrain._reply_constraints import ReplyConstraints, Speakers, constrains, constraints_of
from charfmt.diagnostics import CharfmtError
from charfmt.models import Vocabulary
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, TAGGED_TYPES, TagSpec, TagTable

if TYPE_CHECKING:
    from charfmt.constrain.export import Bounds

__all__ = [
    "ENGINES",
    "LISTED_ORDERS",
    "MINIMUM_IGNORED",
    "PATTERN_READS",
    "PROVIDERS",
    "for_engine",
    "json_schema",
    "raw_pattern",
]

PROVIDERS: Final = ("openai", "anthropic", "gemini")


def _describe_tag(t: TagSpec) -> str:
    values = "" if t.values is None else f"; one of: {', '.join(t.values)}"
    return f"{t.open}…{t.close} ({t.description}{values})"


def _tags_description(tags: TagTable) -> str:
    return (
        "For type C: one element per line, separated by \\n, each one of "
        + ", ".join(map(_describe_tag, tags))
        + "; no attributes; escape & < > in text as &amp; &lt; &gt;. "
        "For types I and E: plain text with the same escapes."
    )


_BODY_DESCRIPTION: Final = _tags_description(DEFAULT_TAGS)
_ORDER_DESCRIPTION: Final = "Display order, an integer starting at 1."
_TYPE_DESCRIPTION: Final = "; ".join(f"{k}: {v}" for k, v in CHAT_TYPES.items())


def _body_description(vocabulary: Vocabulary | None, tags: TagTable = DEFAULT_TAGS) -> str:
    """What a body holds; with a vocabulary, also the only keys the emotion tag takes (all providers read it)."""
    base = _BODY_DESCRIPTION if tags is DEFAULT_TAGS else _tags_description(tags)
    if vocabulary is None:
        return base
    return f"{base} The only keys allowed in {tags.emotion.open}: {', '.join(vocabulary.keys)}."


def _chat(
    types: list[str],
    *,
    minimum: bool,
    closed: bool,
    pattern: str | None,
    vocabulary: Vocabulary | None,
    tags: TagTable = DEFAULT_TAGS,
    speakers: Sequence[str] | None = None,
) -> dict[str, Any]:
    order: dict[str, Any] = {"type": "integer", "description": _ORDER_DESCRIPTION}
    if minimum:
        order["minimum"] = 1
    body: dict[str, Any] = {"type": "string", "description": _body_description(vocabulary, tags)}
    if pattern is not None:
        body["pattern"] = pattern
    chat: dict[str, Any] = {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": types, "description": _TYPE_DESCRIPTION},
            "order": order,
            "body": body,
        },
        "required": ["type", "order", "body"],
    }
    if speakers and any(t in TAGGED_TYPES for t in types):  # a scene: who speaks, one of the cast
        chat["properties"] = {
            "type": chat["properties"]["type"],
            "order": order,
            "speaker": {"type": "string", "enum": list(speakers), "description": _SPEAKER_DESCRIPTION},
            "body": body,
        }
        chat["required"] = ["type", "order", "speaker", "body"]
    if closed:
        chat["additionalProperties"] = False
    return chat


_SPEAKER_DESCRIPTION: Final = "Who speaks this chat: one of the scene's cast."


def _base(
    *,
    minimum: bool,
    closed: bool,
    patterns: bool,
    vocabulary: Vocabulary | None,
    tags: TagTable = DEFAULT_TAGS,
    bounds: Bounds | None = None,
    speakers: Speakers | None = None,
) -> dict[str, Any]:
    plain = [t for t in CHAT_TYPES if t not in TAGGED_TYPES]

    def told() -> dict[str, Any]:
        """An ``I`` or ``E`` chat: plain text, no speaker."""
        pattern = body_regex("I", flavor="ecma", bounds=bounds) if patterns else None
        return _chat(plain, minimum=minimum, closed=closed, pattern=pattern, vocabulary=None)

    def spoken(vocabulary: Vocabulary | None, who: Sequence[str] | None) -> dict[str, Any]:
        """A ``C`` chat, its emotion one of ``vocabulary``'s keys, its speaker one of ``who``."""
        pattern = None
        if patterns:
            pattern = body_regex("C", vocabulary=vocabulary, flavor="ecma", tags=tags, bounds=bounds)
        return _chat(sorted(TAGGED_TYPES), minimum=minimum, closed=closed, pattern=pattern, vocabulary=vocabulary,
                     tags=tags, speakers=who)  # fmt: skip

    if patterns:
        from charfmt.constrain.export import body_regex  # noqa: PLC0415 (Lark loads only for patterns)
    items: dict[str, Any]
    if isinstance(speakers, Mapping):  # one C chat per speaker, with that speaker's emotions
        items = {"anyOf": [*(spoken(v, [who]) for who, v in speakers.items()), told()]}
    elif speakers or patterns:  # one schema per kind of body, so each gets its own language (and speaker)
        items = {"anyOf": [spoken(vocabulary, speakers), told()]}
    else:
        items = _chat(list(CHAT_TYPES), minimum=minimum, closed=closed, pattern=None, vocabulary=vocabulary, tags=tags)
    root: dict[str, Any] = {
        "type": "object",
        "properties": {
            "chats": {"type": "array", "items": items, "description": "The character's reply, chat by chat."}
        },
        "required": ["chats"],
    }
    if bounds is not None and bounds.max_chats is not None:
        root["properties"]["chats"]["maxItems"] = bounds.max_chats
    if bounds is not None and bounds.require_speech:  # (never {"chats": []}; which chat opens: the grammars' rule)
        root["properties"]["chats"]["minItems"] = 1
    if closed:
        root["additionalProperties"] = False
    return root


def _bounds_said(bounds: Bounds) -> str:
    """A budget's bounds in words, for a provider that takes no numeric bound (``anthropic``)."""
    said = []
    if bounds.max_chats is not None:
        said.append(f"at most {bounds.max_chats} chat{'s' if bounds.max_chats != 1 else ''}")
    if bounds.max_elements is not None:
        said.append(f"at most {bounds.max_elements} elements in a body")
    if bounds.max_chars is not None:
        said.append(f"each element at most {bounds.max_chars} characters")
    if bounds.require_speech:
        said.append(f"the first chat a C chat that speaks (at least {bounds.min_speech} characters of speech)")
    return f" Keep the reply short: {', '.join(said)}." if said else ""


@constrains
def json_schema(
    provider: str | None = None,
    *,
    speakers: Speakers | None = None,
    bounds: Bounds | None = None,
    **constraints: Unpack[ReplyConstraints],
) -> dict[str, Any]:
    """The ``{"chats": [...]}`` envelope as JSON Schema.

    ``None``: standard JSON Schema (2020-12), each body constrained by an anchored
    ``pattern`` of its language. ``"openai"``: strict structured outputs (every
    property required, ``additionalProperties: false``), with the body patterns,
    which OpenAI enforces. ``"anthropic"``: structured outputs, no numeric bounds and
    no patterns (``order >= 1`` and the body language are stated in descriptions).
    ``"gemini"``: the OpenAPI-subset ``responseSchema`` (no ``additionalProperties``,
    no patterns; ``propertyOrdering`` so ``type`` and ``order`` come first). With
    ``vocabulary``, the ``C`` body pattern allows only its emotion keys, and the body's
    description names them (the only restriction providers without patterns get).
    ``tags``: the tag table (``None``: ``DEFAULT_TAGS``); its tags, with their values, are
    what the pattern and the description allow.
    XGrammar (vLLM's and SGLang's default backend), llama.cpp's converter and Outlines read a
    schema their own way (all three apply ``pattern`` to the raw JSON text; the last two drop
    ``minimum``): send them ``for_engine(schema, engine)``, which means there what this schema
    means, less what each cannot write (docs/GRAMMARS.md).
    Length bounds, as for ``charfmt.grammar``: ``max_chats`` becomes ``maxItems`` and required speech
    ``minItems: 1`` (not for ``"anthropic"``, which takes no numeric bounds: its chats' description says them
    in words), ``max_chars`` and a ``max_tokens`` budget
    bound the body patterns, so they hold where patterns are enforced; a budget is planned by
    ``charfmt.constrain.export.plan_bounds`` (speech required; ``character``, ``tokens_per_char`` as for ``grammar``).
    ``speakers``: a scene's cast (``charfmt.prompt.scene``): each ``C`` chat names one of them; a mapping (or
    ``character=`` a scene) gives each its own vocabulary, one ``C`` chat schema per speaker.
    ``bounds``: these exact bounds (``charfmt.constrain.export.Bounds``) instead of those the keywords ask for.
    """
    c = constraints_of("json_schema", constraints, speakers)
    table = c.tags
    if bounds is None and (c.max_tokens, c.max_chars, c.max_chats) != (None, None, None):
        from charfmt.constrain.export import resolve_bounds  # noqa: PLC0415 (Lark loads only for bounds)

        bounds = resolve_bounds(speakers=c.speakers, **constraints)
    if provider not in (None, *PROVIDERS):
        raise CharfmtError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)} or None")
    schema = _base(
        minimum=provider != "anthropic",
        closed=provider != "gemini",
        patterns=provider in (None, "openai"),
        vocabulary=c.vocabulary,
        tags=table,
        bounds=None if provider == "anthropic" else bounds,
        speakers=c.speakers,
    )
    if provider is None:
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "charfmt reply", **schema}
    if provider == "anthropic" and bounds is not None:  # (no numeric bounds there: the budget said in words)
        schema["properties"]["chats"]["description"] += _bounds_said(bounds)
    if provider == "gemini":
        items = schema["properties"]["chats"]["items"]
        for chat in items.get("anyOf", [items]):  # one schema, or one per kind of chat (a scene)
            chat["propertyOrdering"] = list(chat["properties"])
    return schema


# -- the schema as each engine reads its patterns --------------------------------------------------

PATTERN_READS: Final[dict[str, str]] = {
    "standard": "decoded",
    "llguidance": "decoded",
    "xgrammar": "raw",
    "llama.cpp": "raw",
    "outlines": "raw",
}
"""How each JSON-schema engine applies a string's ``pattern``: to the decoded string (``decoded``: JSON
Schema itself, OpenAI, ajv, ``jsonschema``, llguidance) or to the raw text between its quotes
(``raw``: XGrammar, as vLLM and SGLang run it; llama.cpp's converter, as llama-server, Ollama and
LM Studio run it; Outlines' ``outlines-core``). ``for_engine`` writes the body patterns for each."""

ENGINES: Final = tuple(PATTERN_READS)

MINIMUM_IGNORED: Final = frozenset({"llama.cpp", "outlines"})
"""The engines whose JSON-schema reader drops an integer's ``minimum`` (llama-cpp-python's converter: any
integer, 0 and negatives too; ``outlines-core``: the same, ``minimum``, ``exclusiveMinimum`` and
``pattern`` alike). ``for_engine`` lists the orders they may write instead (``enum``, which both read)."""

LISTED_ORDERS: Final = 99
"""The largest order ``for_engine`` lists for an engine of ``MINIMUM_IGNORED`` when the schema does not
bound the chats (``maxItems``; with it, the orders are 1..maxItems). A larger order is valid (orders
may have gaps: a warning), so such an engine refuses some valid replies, never takes an invalid one."""


def for_engine(schema: dict[str, Any], engine: str) -> dict[str, Any]:
    """``schema`` (a ``json_schema`` result) written for ``engine`` (one of ``ENGINES``), so that it means there
    what it means to a JSON Schema validator.

    An engine that reads ``pattern`` over the raw JSON text (``PATTERN_READS``) gets each body pattern
    rewritten over that text: a newline between elements as the escape ``\\n``, a quote in speech as
    ``\\"``, a backslash as ``\\\\`` (the escapes the grammar exports take; no ``\\uXXXX``), written
    in the syntax all of them read (plain groups, ``\\uXXXX`` escapes, every character class positive,
    which also makes XGrammar read the pattern as its own grammar over the raw text). ``standard`` and
    ``llguidance`` get ``schema`` as it is (a copy).

    An engine that ignores ``minimum`` (``MINIMUM_IGNORED``) gets each chat's ``order`` as the
    ``enum`` of the orders 1..``maxItems`` of the chats (``LISTED_ORDERS`` without it), so that it
    never writes an order below 1 (``CF108``), as the strict parser demands.
    """

    reads = PATTERN_READS.get(engine)
    if reads is None:
        raise CharfmtError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    out = copy.deepcopy(schema)
    if reads == "raw":
        _raw_patterns(out)
    if engine in MINIMUM_IGNORED:
        _listed_orders(out)
    return out


def _listed_orders(schema: dict[str, Any]) -> None:
    """Each chat's ``order`` in ``schema`` (a ``json_schema`` result, in place) bounded by ``minimum``
    written as the ``enum`` of its values up to the chats' ``maxItems`` (or ``LISTED_ORDERS``)."""
    chats = schema.get("properties", {}).get("chats")
    if not isinstance(chats, dict) or not isinstance(chats.get("items"), dict):
        return
    top = chats.get("maxItems", LISTED_ORDERS)
    items = chats["items"]
    for chat in items.get("anyOf", [items]):  # one schema, or one per kind of chat (a scene)
        order = chat.get("properties", {}).get("order") if isinstance(chat, dict) else None
        if isinstance(order, dict) and isinstance(order.get("minimum"), int) and "enum" not in order:
            order["enum"] = list(range(order.pop("minimum"), top + 1))


def _raw_patterns(node: Any) -> None:
    """Rewrite every ``pattern`` in ``node`` (a schema, in place) over the raw JSON text of the string."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                node[key] = raw_pattern(value)
            else:
                _raw_patterns(value)
    elif isinstance(node, list):
        for value in node:
            _raw_patterns(value)


def raw_pattern(pattern: str) -> str:
    """An anchored ECMA body ``pattern`` (``charfmt.constrain.export.body_regex(flavor="ecma")``) over the raw JSON text
    of the string it matches, in the syntax XGrammar, llama.cpp's converter and Outlines all read."""
    from charfmt.constrain._grammar_writers import RAW_JSON, all_positive, write  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if not (pattern.startswith("^(?:") and pattern.endswith(")$")):
        raise CharfmtError(f"not an anchored body pattern: {pattern[:40]!r}")
    node = json_encoded(from_regex(pattern[1:-1]))
    return f"^({write(all_positive(node), RAW_JSON, str)})$"
