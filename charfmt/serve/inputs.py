"""What front ends send, read and checked: request bodies, chat-completions fields, ``/v1/turn`` fields.

Each reader raises :class:`~charfmt.serve.wire.HTTPFailure` (400, 413, 415) with a message
that says what is wrong and the field it is about.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from charfmt.diagnostics import CharfmtError, ParseError
from charfmt.llm._replies import JSONDepthError, load_json
from charfmt.serve.continuation import asks_for_the_player
from charfmt.serve.sessions import check_key
from charfmt.serve.wire import HTTPFailure

if TYPE_CHECKING:
    from starlette.requests import Request

    from charfmt.prompt.userinput import UserTurn
    from charfmt.serve.settings import Settings
    from charfmt.serve.turns import Engine


def json_object(text: str, what: str = "the request body") -> dict[str, Any]:
    """``text`` as a JSON object (within the depth limit), or a 400 saying what it is instead."""
    try:
        value = load_json(text)
    except JSONDepthError as e:
        raise HTTPFailure(400, f"{what} is not usable JSON: {e}") from None
    except ValueError as e:
        raise HTTPFailure(400, f"{what} is not JSON: {str(e)[:200]}") from None
    if not isinstance(value, dict):
        raise HTTPFailure(400, f"{what} is {_JSON_KINDS.get(type(value), 'JSON')}, not an object")
    return value


_JSON_KINDS: Final[dict[type, str]] = {
    list: "a JSON array", str: "a JSON string", int: "a JSON number", float: "a JSON number",
    bool: "JSON true or false", type(None): "JSON null",
}  # fmt: skip
"""What a JSON value that is not an object is, in JSON's own words (not Python's ``list``)."""


def _text_of(content: Any, where: str) -> str:
    """A message's content: a string, or the text parts of an array of parts (``null``, as an assistant's
    message that only called tools has: no text)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) and isinstance(part.get("type"), str) else None
                what = f"the part {kind[:40]!r}" if kind else "a part that is no {'type': 'text', 'text': ...}"
                raise HTTPFailure(400, f"{where}: {what} cannot be taken: the server reads text parts only", where)
            parts.append(part["text"])
        return "\n".join(parts)  # (two parts' words never glued together)
    raise HTTPFailure(400, f"{where}: content must be a string or an array of text parts", where)


@dataclass(frozen=True)
class ChatRequest:
    """A chat-completions request as the server reads it: the turn, and what a front end asks beyond it."""

    earlier: list[tuple[str, str]]
    """The messages before the turn, as (role, text): the front end's history and its own system text."""
    say: str | None
    """The player's turn (the last run of user messages); ``None`` where there is none to answer (a continue
    of a greeting, the player's line asked for)."""
    stream: bool
    after: str = ""
    """The ``system`` messages after the last user message, joined: post-history instructions."""
    partial: str | None = None
    """A continue: the character's answer the reply goes on from (the ``assistant`` messages after the turn)."""
    impersonation: str | None = None
    """The player's line asked for: the front end's ``system`` message that asks it."""


def chat_request(body: dict[str, Any], settings: Settings) -> ChatRequest:
    """The turn of a chat-completions body and what its last messages ask (``continuation``'s module docstring)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HTTPFailure(400, "'messages' must be a non-empty array of {role, content} objects", "messages")
    if len(messages) > settings.max_messages:
        raise HTTPFailure(400, f"'messages' holds {len(messages)} (at most {settings.max_messages})", "messages")
    read: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise HTTPFailure(400, f"{where} must be an object with a string 'role'", where)
        read.append((m["role"], _text_of(m.get("content"), where)))
    stream = body.get("stream")
    stream = False if stream is None else stream
    if not isinstance(stream, bool):
        raise HTTPFailure(400, "'stream' must be true or false", "stream")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise HTTPFailure(400, "'user' must be a string", "user")
    return _read_turn(read, stream)


_SYSTEM: Final = ("system", "developer")
"""The roles of a front end's own instructions."""


def _quotes(text: str, reply: str) -> bool:
    """Whether the system message ``text`` is a front end's own "continue this message" nudge: it quotes the
    reply so far (SillyTavern's "[Continue the following message...: {{lastChatMessage}}]")."""
    return bool(reply) and reply in text and (len(reply) >= 16 or text.rstrip(" ]").endswith(reply))


def _read_turn(read: list[tuple[str, str]], stream: bool) -> ChatRequest:
    """The turn, the instructions after it, and a continue or the player's line asked for, of ``read``."""

    last = max((i for i, (role, _) in enumerate(read) if role not in _SYSTEM), default=-1)
    tail = [text.strip() for _, text in read[last + 1 :] if text.strip()]
    asked = next((text for text in tail if asks_for_the_player(text)), None)
    if asked is not None:  # the player's line: everything before the instructions is the history
        after = "\n\n".join(text for text in tail if text is not asked)
        return ChatRequest(read[: last + 1], None, stream, after=after, impersonation=asked)
    if last < 0 or read[last][0] not in ("user", "assistant"):
        role = read[last][0][:20] if last >= 0 else "system"
        raise HTTPFailure(
            400, f"the last message must be the player's (role 'user') or the character's to go on from "
            f"('assistant'), not {role!r}", "messages",
        )  # fmt: skip
    turn_end = last + 1
    partial = None
    if read[last][0] == "assistant":  # a continue: the answers after the turn are the reply so far
        turn_end = max((i for i, (role, _) in enumerate(read[:last]) if role == "user"), default=-1) + 1
        partial = "\n".join(text for role, text in read[turn_end:] if role == "assistant" and text.strip())
        tail = [text.strip() for role, text in read[turn_end:] if role in _SYSTEM and text.strip()]
        tail = [text for text in tail if not _quotes(text, partial.strip())]  # (a nudge: charfmt asks itself)
    if not partial and read[last][0] == "assistant":
        raise HTTPFailure(400, "the last message is the character's, with no text to go on from", "messages")
    first = turn_end  # the player's turn: the last run of user messages (a turn left unanswered is in it)
    while first > 0 and read[first - 1][0] == "user":
        first -= 1
    said = [text for _, text in read[first:turn_end]]
    say = ("\n".join(text for text in said if text.strip()) or said[-1]) if said else None
    return ChatRequest(read[:first], say, stream, after="\n\n".join(tail), partial=partial)


_SAMPLING: Final = {
    "temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "frequency_penalty": (-2.0, 2.0), "presence_penalty": (-2.0, 2.0),
}  # fmt: skip
"""Sampling fields a front end may set, forwarded upstream, with their ranges."""


def front_options(body: dict[str, Any], messages: list[tuple[str, str]]) -> dict[str, Any]:
    """The front end's sampling fields (checked) and its own system text, for the upstream request.

    ``model`` is not forwarded: the upstream gets ``--model-name`` and the answer names the served model.
    """
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise HTTPFailure(400, "'n' must be 1: the server answers with one choice", "n")
    _refuse_what_is_not_served(body)
    options: dict[str, Any] = {}
    for name, (low, high) in _SAMPLING.items():
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise HTTPFailure(400, f"'{name}' must be a number from {low:g} to {high:g}", name)
        options[name] = value
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or abs(seed) >= 1 << 63:
            raise HTTPFailure(400, "'seed' must be a whole number", "seed")
        options["seed"] = seed
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(x, str) and x for x in stops):
            raise HTTPFailure(400, "'stop' must be a string or up to 4 strings", "stop")
        options["stop"] = stops
    system = "\n\n".join(text.strip() for role, text in messages if role in ("system", "developer") and text.strip())
    if system:
        options["system"] = system
    given = body["messages"]  # (chat_request checked each: an object with a role)
    last = max((i for i, m in enumerate(given) if m["role"] == "user"), default=None)  # the player's newest message
    player = user_name(given[last].get("name"), f"messages[{last}].name") if last is not None else None
    if player is not None:
        options["user_name"] = player
    return options


MAX_USER_NAME: Final = 64
"""Characters of a player's name a front end sends (OpenAI's limit on a message's ``name``)."""


def user_name(value: Any, param: str = "user_name") -> str | None:
    """The player's name a request gives (``/v1/turn``'s ``user_name``, the player's message's ``name``): what the
    card's ``{{user}}`` becomes for the turn; ``None`` where it gives none; a 400 where it cannot be one."""
    from charfmt.prompt.character import name_problem  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

    if value is None:
        return None
    if not isinstance(value, str):
        raise HTTPFailure(400, f"'{param}' must be a string: the player's name", param)
    if len(value) > MAX_USER_NAME:
        raise HTTPFailure(400, f"'{param}' is {len(value):,} characters (a player's name has at most {MAX_USER_NAME})",
                          param)  # fmt: skip
    if (why := name_problem(value)) is not None:
        raise HTTPFailure(400, f"'{param}', the player's name, {why}", param)
    return value


def _refuse_what_is_not_served(body: dict[str, Any]) -> None:
    """A 400 for a field asking for what the server never gives (rather than an answer without it)."""
    if body.get("logprobs") or body.get("top_logprobs"):
        raise HTTPFailure(400, "'logprobs': the server gives no log probabilities", "logprobs")
    modalities = body.get("modalities")
    if body.get("audio") is not None or (modalities is not None and modalities != ["text"]):
        raise HTTPFailure(400, "'modalities': the server answers with text only", "modalities")
    _refuse_a_required_tool(body)
    kind = body.get("response_format")
    if kind is not None and (not isinstance(kind, dict) or kind.get("type") != "text"):
        raise HTTPFailure(
            400, "'response_format': the server sets the answer's form itself (--reply-format); only "
            "{'type': 'text'} is taken", "response_format",
        )  # fmt: skip
    options = body.get("stream_options")
    if options is not None and (
        not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool)
    ):
        raise HTTPFailure(400, "'stream_options' must be an object such as {'include_usage': true}", "stream_options")


NO_TOOLS: Final = (
    "this server does not support tools: tools are not supported here (it answers in character and calls none); "
    "send tool_choice 'auto' or 'none', or no tools"
)
"""Why a tool call that must be made is refused: in the words front ends look for to turn their tools off
(Open-LLM-VTuber and AIRI: "does not support tools"; AIRI also ``/tools?\\s+(is|are)\\s+not\\s+supported/i``)."""


def _refuse_a_required_tool(body: dict[str, Any]) -> None:
    """Tools are taken and answered as a model that chose to call none (``tool_choice`` absent, ``auto``,
    ``none``); a call the request requires (``required``, a named function) is a 400 saying ``NO_TOOLS``."""
    for choice_name in ("tool_choice", "function_call"):
        choice = body.get(choice_name)
        if choice is None or choice in ("auto", "none"):
            continue
        if choice == "required" or isinstance(choice, dict):
            raise HTTPFailure(400, f"'{choice_name}': {NO_TOOLS}", choice_name)
        raise HTTPFailure(400, f"'{choice_name}' must be 'auto', 'none', 'required' or a function to call", choice_name)
    for name in ("tools", "functions"):
        value = body.get(name)
        if value is not None and not isinstance(value, list):
            raise HTTPFailure(400, f"'{name}' must be an array", name)


TURN_FIELDS: Final = ("say", "session", "user_name", "constrained", "context")
"""The fields of a ``/v1/turn`` body (a WebSocket message, ``GET``'s query, which may add ``token``)."""


@dataclass(frozen=True)
class TurnRequest:
    """A ``/v1/turn`` body (a WebSocket message, ``GET``'s query) as the server reads it."""

    session: str | None
    """The session's key (``None``: a turn that stands alone)."""
    say: str
    """The player's turn: shorthand (``[joy] hi``) or a user block, as ``charfmt render --say`` takes it."""
    constrained: bool | None
    """``false``: this turn without the grammar (``None``: as the server is set)."""
    user_name: str | None
    """The player's name, the card's ``{{user}}`` (``None``: the server's)."""
    context: dict[str, str] | None = None
    """The player's state (``{"action": "kicking the ground"}``), as ``render --context KEY=VALUE`` writes it."""


def turn_request(body: dict[str, Any], extra: tuple[str, ...] = ()) -> TurnRequest:
    """A ``/v1/turn`` body read; a field it does not know is a 400 (a misspelt ``"sesion"`` would otherwise run
    a turn without its session's history). ``extra``: names the door also takes (``GET``'s ``token``)."""
    for name in body:
        if name not in TURN_FIELDS and name not in extra:
            near = difflib.get_close_matches(str(name), TURN_FIELDS, n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]!r}?" if near else f"; /v1/turn takes {', '.join(map(repr, TURN_FIELDS))}"
            raise HTTPFailure(400, f"unknown field {str(name)!r}{hint}", str(name))
    key = body.get("session")
    if key is not None:
        if not isinstance(key, str):
            raise HTTPFailure(400, "'session' must be a string", "session")
        if (why := check_key(key)) is not None:
            raise HTTPFailure(400, why, "session")
    say = body.get("say")
    if say is None:
        raise HTTPFailure(400, f"'say' is missing: {_SAY}", "say")
    if not isinstance(say, str):
        raise HTTPFailure(400, f"'say' must be a string: {_SAY}", "say")
    constrained = body.get("constrained")
    if constrained is not None and not isinstance(constrained, bool):
        raise HTTPFailure(400, "'constrained' must be true or false", "constrained")
    return TurnRequest(key, say, constrained, user_name(body.get("user_name")), _context(body.get("context")))


_SAY: Final = "the player's turn (shorthand such as '[joy] hi', or a user block: <user_chats>…, [User Context]…)"


def _context(value: Any) -> dict[str, str] | None:
    """``/v1/turn``'s ``context``: an object of string values (``None`` where it gives none), or a 400."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise HTTPFailure(
            400, "'context' must be an object of string values: the player's state, such as "
            "{'emotion': 'angry', 'action': 'kicking the ground', 'environment': 'raining'}", "context",
        )  # fmt: skip
    return value


def player_turn(engine: Engine, say: str, param: str = "say", context: dict[str, str] | None = None) -> UserTurn:
    """The player's turn read by ``engine`` (``read_turn``: shorthand, or a user block), or a 400 about the
    request's field that is wrong: ``param`` that held the words, or ``context``."""
    from charfmt.prompt.userinput import TurnError  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

    try:
        return engine.player_turn(say, context)
    except ParseError as e:  # a user block that does not read: where, in the player's text
        raise HTTPFailure(400, f"the player's user block does not read: {e}", param) from None
    except TurnError as e:
        where = "context" if e.field == "context" else param
        raise HTTPFailure(400, f"'{where}': {e}" if where == "context" else str(e), where) from None
    except CharfmtError as e:
        raise HTTPFailure(400, str(e), param) from None


OWNER: Final = "charfmt.owner"
"""The scope key of the owner a request's credential proved (``ServerState.owner``), set before its handler runs."""


def owner_of(request: Request) -> str:
    """The owner a request's credential proved (``""``: the server's one front end, or no auth)."""
    owner = request.scope[OWNER]  # (every /v1 route is guarded: set before its handler)
    assert isinstance(owner, str)
    return owner


def same_origin(origin: str, host: str | None) -> bool:
    """Whether ``origin`` (a browser page's) is this server's own (its ``Host``)."""
    scheme, _, rest = origin.partition("://")
    return host is not None and scheme in ("http", "https") and rest.lower() == host.lower()


def query_token(token: str | None) -> str | None:
    """A ``?token=`` as the ``Authorization`` header it stands for (``EventSource`` cannot send headers)."""
    return f"Bearer {token}" if token else None


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object, read within ``limit`` bytes and the JSON depth limit."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":  # a cross-site form or text/plain POST needs no CORS preflight: refused
        shown = kind[:60] or "none"
        raise HTTPFailure(415, f"the request body must be sent as Content-Type: application/json (not {shown})")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPFailure(413, f"the request body is {int(declared):,} bytes (at most {limit:,})")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise HTTPFailure(413, f"the request body is larger than {limit:,} bytes")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise HTTPFailure(400, f"the request body is not UTF-8 (byte {e.start})") from None
    return json_object(text)
