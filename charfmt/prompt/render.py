"""Render prompts from Jinja templates (``prompts/``): system prompt, user block, provider requests.

Every ``{{ value }}`` a template prints is escaped for the tag language, so no
user-supplied string can open or close a tag; only the filters ``body``,
``user_block`` and ``dumps`` write markup, and they write it with the same code the
parser reads.

No value can forge a turn either: a ``#`` that would start a line (after a line
break of any kind, ``\\r``, U+0085 and U+2028 included) is written ``&#35;``, and
the ``[``/``<`` of a chat-template control string (``[INST]``, ``<|im_start|>``,
``<|eot_id|>``, ``<start_of_turn>``, ``</s>``... see :data:`CONTROL_STRINGS`) as an
entity, so the only turn headers in ``render_text`` are the template's own. Both
are character references the user-block reader decodes, so
``parse_input(render_user_block(turn)) == turn`` still holds; replies go back as JSON
with the same characters written as ``\\u`` escapes, which JSON readers decode. An
emotion key cannot hold an escape: one that holds a line separator or a control
string is a ``TemplateError``.

Templates run sealed: in Jinja's immutable sandbox, on read-only views of the
character, turn and history (tuples, read-only mappings, records without methods
that load or mutate; ``_`` names are unreachable), so a template cannot change the
caller's objects, charfmt's tables or open files. Each render has an allocation
budget (:data:`MAX_RENDER_SIZE` characters or items): string and list growth
(``*``, ``+``, ``%``, ``~``, ``**``, ``format``, ``join``, ``center``, ``indent``,
``replace``...) is checked before it happens, and anything else that escapes a
template (``MemoryError``, ``RecursionError``, a filter applied to the wrong thing)
becomes a ``TemplateError``.

The work is split by job: ``_prompt_escape`` (escaping and defusing values),
``_sandbox`` (the budgeted Jinja sandbox) and ``_token_fit`` (which exchanges fit a token
budget); this module holds the views templates see, the template environment and the
requests.

Token budgets use :data:`ESTIMATE` (:func:`estimate_tokens` per message, plus what a chat
template adds) unless you pass ``counter=``: the model's own, from :func:`charfmt.counter_for`
(llama.cpp, tiktoken, a ``tokenizer.json``), or any function of one text::

    counter = charfmt.counter_for(model="gpt-4o")  # tiktoken, where installed; else the estimate
    request = charfmt.render_messages(mio, history, turn, budget=4000, counter=counter)

See ``docs/TOKENS.md``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypedDict, Unpack

import jinja2
from pydantic import BaseModel

from charfmt._arguments import check_count, check_flag
from charfmt._control_strings import CONTROL_STRINGS as CONTROL_STRINGS  # noqa: PLC0414 (re-exported)
from charfmt._resources import resource_dir
from charfmt.constrain.schema import PROVIDERS as PROVIDERS  # noqa: PLC0414 (one list: the schema's providers are the request's)
from charfmt.constrain.schema import json_schema
from charfmt.diagnostics import CharfmtError, Diagnostic
from charfmt.models import Chat, Reply, Segment, Vocabulary
from charfmt.prompt._card_prompt import TurnParts, fit_lore, turn_parts, with_lore
from charfmt.prompt._card_prompt import greeting_exchange as greeting_exchange  # noqa: PLC0414 (re-exported)
from charfmt.prompt._prompt_escape import defused_json, defused_line, defused_text, unsafe_key
from charfmt.prompt._sandbox import MAX_RENDER_SIZE as MAX_RENDER_SIZE  # noqa: PLC0414 (re-exported)
from charfmt.prompt._sandbox import Sandbox, bounded_filter, render_budget
from charfmt.prompt._token_estimate import bound, estimate
from charfmt.prompt._token_fit import BudgetError as BudgetError  # noqa: PLC0414 (re-exported)
from charfmt.prompt._token_fit import Counter as Counter  # noqa: PLC0414 (re-exported)
from charfmt.prompt._token_fit import TextCounter, fit_messages, oldest_start
from charfmt.prompt._token_fit import TokenCounter as TokenCounter  # noqa: PLC0414 (re-exported)
from charfmt.prompt.character import Character, Exchange
from charfmt.prompt.lorebook import Activation, Lorebook, Placed
from charfmt.prompt.macros import MacroError
from charfmt.prompt.userinput import UserChat, UserContext, UserTurn
from charfmt.tags import CHAT_TYPES, DEFAULT_TAGS, ELEMENT_SEPARATOR, TAGGED_TYPES, TagTable
from charfmt.writer import canonical_form, dumps

if TYPE_CHECKING:
    from charfmt.prompt.scene import Scene

__all__ = [
    "ESTIMATE",
    "Extra",
    "RenderKeywords",
    "RenderedTurn",
    "Safe",
    "TemplateError",
    "TextKeywords",
    "at_depth",
    "bound_tokens",
    "chat_turns",
    "check_turn_options",
    "checked_keywords",
    "estimate_tokens",
    "history_reply",
    "lore_extras",
    "lore_in_system",
    "placed_after",
    "post_history",
    "provider_request",
    "render_messages",
    "render_request",
    "render_system",
    "render_template",
    "render_text",
    "render_text_turn",
    "render_turn",
    "render_user_block",
    "system_of",
    "template_folder",
    "template_view",
    "turn_message",
    "turn_of",
]


class TemplateError(CharfmtError):
    """A template is missing, invalid, uses an undefined variable or breaks the sandbox."""


class Safe(str):
    """Text in the tag language already: templates print it as it is."""

    __slots__ = ()


# --- the values templates print (the filters) -----------------------------------------


def _key(tag: str, key: str) -> str:
    # A key is written as it is (the grammar decodes no entity in it): refuse what cannot be defused.
    if unsafe_key(key):
        raise TemplateError(
            f"<{tag}> key {key!r} holds a line separator or a chat-template control string; it cannot be sent"
        )
    return key


def history_reply(reply: Reply, tags: TagTable = DEFAULT_TAGS) -> str:
    """A past reply as the model sees it: canonical (for ``tags``), as the format it must write, defused.

    Control strings and line separators are written as ``\\u`` escapes (the same value): the one writer
    of a past reply into a prompt, for ``render_messages``, ``Scene.render_messages`` and the ``dumps`` filter.
    """
    try:
        text = dumps(canonical_form(reply, tags))
    except (KeyError, ValueError) as e:
        raise TemplateError(f"cannot write a reply of the history: {type(e).__name__}: {e}") from None
    return defused_json(text)


def _body(kind: str, segments: Sequence[Segment]) -> str:
    """The body of one user chat, as ``writer.body_text`` writes it, with every value defused."""
    if kind not in TAGGED_TYPES:
        return defused_text(segments[0].text)
    parts = []
    for seg in segments:
        spec = DEFAULT_TAGS.get(seg.tag)
        opener, closer = (spec.open, spec.close) if spec is not None else (f"<{seg.tag}>", f"</{seg.tag}>")
        content = _key(seg.tag, seg.text) if spec is not None and spec.content == "key" else defused_text(seg.text)
        parts.append(f"{opener}{content}{closer}")
    return ELEMENT_SEPARATOR.join(parts)


def _finalize(value: Any) -> Any:
    # Jinja calls this on every {{ ... }} value: escape and defuse anything that is not Safe.
    if isinstance(value, Safe):
        return value
    return defused_text(value if isinstance(value, str) else str(value))


# --- token estimate -----------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Default token counter: a tight estimate of the tokens cl100k makes of ``text`` (``_token_estimate``).

    Never fewer than cl100k on ASCII text (English, JSON, markup, code: proven, and exact on
    common words); beyond ASCII, each character's exact cost added up, measured never under
    cl100k on the corpus of ``benchmarks/data`` (median 1.0 to 1.2 times cl100k by group; see
    ``docs/TOKENS.md``). Another model's tokenizer may count more: pass its counter
    (:func:`charfmt.counter_for`) for exact budgets.
    """
    return estimate(text)


def bound_tokens(text: str) -> int:
    """Never fewer tokens than cl100k makes of ``text``, whatever the text (proven; looser beyond ASCII)."""
    return bound(text)


ESTIMATE: Final = TextCounter(estimate_tokens, "charfmt estimate")
"""The default counter of requests: :func:`estimate_tokens` per message, plus what a chat template adds at most."""


# --- read-only views for templates ------------------------------------------------------


class _Record:
    """A read-only record of a model's fields, as templates see it; ``_`` names are out of their reach.

    Each field is viewed when a template first reads it (then kept): a template that reads a few
    fields of a character pays for those, not for the whole model.
    """

    __slots__ = ("_fields", "_source")

    def __init__(self, source: Any) -> None:
        object.__setattr__(self, "_fields", {})
        object.__setattr__(self, "_source", source)

    def __getattr__(self, name: str) -> Any:
        fields = self._fields
        if name in fields:
            return fields[name]
        source = self._source
        if name in type(source).model_fields:
            value = template_view(getattr(source, name))
        elif name in _EXTRA.get(type(source), ()):
            attribute = getattr(source, name)
            value = _Method(attribute) if callable(attribute) else template_view(attribute)
        else:
            raise AttributeError(name)
        fields[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self._source).__name__} is read-only in templates")

    def __bool__(self) -> bool:
        return bool(self._source)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Record) and self._source == other._source

    __hash__ = None  # type: ignore[assignment]  # equal views of equal models; unhashable like the lists inside

    def __repr__(self) -> str:
        source = self._source
        names = [*type(source).model_fields, *_EXTRA.get(type(source), ())]
        return f"{type(source).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in names)})"


@cache
def _record_class(model: type) -> type[_Record]:
    """A record class named after ``model``, so template errors say ``Character``, not ``_Record``."""
    return type(model.__name__, (_Record,), {"__slots__": (), "__doc__": f"A read-only view of {model.__name__}."})


class _Method:
    """A read-only method of a model, callable from templates; what it returns is a view too."""

    __slots__ = ("_function",)
    _function: Callable[..., Any]

    def __init__(self, function: Callable[..., Any]) -> None:
        object.__setattr__(self, "_function", function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return template_view(self._function(*args, **kwargs))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("read-only")


_EXTRA: Final[Mapping[type, tuple[str, ...]]] = MappingProxyType(
    {
        Character: ("vocabulary",),
        Vocabulary: ("keys", "resolve"),
        Chat: ("texts",),
        UserContext: ("lines",),
    }
)
"""Properties and read-only methods templates may use, beyond a model's fields."""


def template_view(value: Any) -> Any:
    """``value`` as templates see it: models as records, lists as tuples, dicts as read-only mappings."""
    if isinstance(value, BaseModel):
        return _record_class(type(value))(value)
    if isinstance(value, (list, tuple)):
        return tuple(template_view(v) for v in value)
    if isinstance(value, Mapping):
        return MappingProxyType({k: template_view(v) for k, v in value.items()})
    return value


def _source(value: Any, kind: type | tuple[type, ...], filter_name: str) -> Any:
    source = value._source if isinstance(value, _Record) else value
    if not isinstance(source, kind):
        raise TemplateError(f"the {filter_name} filter does not apply to {type(source).__name__}")
    return source


# --- templates ---------------------------------------------------------------------------


class _OwnFirst(jinja2.BaseLoader):
    """The user's folder first, then charfmt's templates; a template added to the folder later wins at once.

    Jinja keeps a compiled template while its ``uptodate`` says so; for one taken from
    charfmt's defaults that also checks the user's folder still has no file of the name.
    """

    def __init__(self, user_dir: str | None) -> None:
        self.user_dir = user_dir
        self.defaults = jinja2.FileSystemLoader(str(resource_dir("prompts")))
        self.own = None if user_dir is None else jinja2.FileSystemLoader(user_dir)

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str | None, Any]:
        if self.own is not None:
            with suppress(jinja2.TemplateNotFound):
                return self.own.get_source(environment, template)
        source, filename, uptodate = self.defaults.get_source(environment, template)
        own = self.user_dir
        if own is None:
            return source, filename, uptodate
        shadow = os.path.join(own, *template.split("/"))
        return source, filename, lambda: not os.path.exists(shadow) and uptodate()


@cache
def _environment(user_dir: str | None) -> Sandbox:
    env = Sandbox(
        loader=_OwnFirst(user_dir),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["body"] = lambda chat: Safe(_body(*_chat_parts(chat)))
    env.filters["dumps"] = lambda reply, tags=DEFAULT_TAGS: Safe(
        history_reply(_source(reply, Reply, "dumps"), _source(tags, TagTable, "dumps"))
    )
    env.filters["line"] = lambda value: Safe(defused_line(str(value)))
    env.filters["user_block"] = lambda turn: Safe(render_template("user.j2", user_dir, turn=_turn_view(turn)))
    for name, function in list(env.filters.items()):
        env.filters[name] = bounded_filter(name, function)
    return env


def _turn_view(turn: Any) -> Any:
    source = _source(turn, UserTurn, "user_block")
    return turn if isinstance(turn, _Record) else template_view(source)


def _chat_parts(chat: Any) -> tuple[str, Sequence[Segment]]:
    source: Chat | UserChat = _source(chat, (Chat, UserChat), "body")
    return source.type, source.segments


def render_template(name: str, templates: str | None, **variables: Any) -> str:
    """Render one template; every failure becomes a ``TemplateError`` naming it."""
    try:
        with render_budget():
            return _environment(templates).get_template(name).render(**variables)
    except CharfmtError:
        raise
    except jinja2.UndefinedError as e:
        said = re.sub(r"'charfmt\.[\w.]+\.(\w+) object'", r"\1", e.message or "")  # (the view's class: its model)
        raise TemplateError(f"{_where(name, e)}: undefined variable: {said}") from None
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"template {e.name or name}, line {e.lineno}: {e.message}") from None
    except jinja2.TemplateNotFound as e:
        raise TemplateError(f"template {e.name} not found in the templates folder") from None
    except (jinja2.exceptions.SecurityError, OverflowError, MemoryError) as e:
        raise TemplateError(f"{_where(name, e)}: blocked by the sandbox: {str(e) or type(e).__name__}") from None
    except RecursionError:
        raise TemplateError(f"template {name}: blocked by the sandbox: recursion too deep") from None
    except jinja2.TemplateError as e:
        raise TemplateError(f"{_where(name, e)}: {e}") from None
    except Exception as e:  # a filter or method applied to the wrong value, a failing operator...
        raise TemplateError(f"{_where(name, e)}: {type(e).__name__}: {e}") from None


def _where(name: str, error: BaseException) -> str:
    """``template NAME, line N``: the template line the error was raised on (Jinja gives a rendered template's
    frames its file and line), the innermost; ``template NAME`` where no frame is a template's."""
    where = f"template {name}"
    tb = error.__traceback__
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if file.endswith(".j2"):
            where = f"template {Path(file).name}, line {tb.tb_lineno}"
        tb = tb.tb_next
    return where


def template_folder(templates: str | Path | None) -> str | None:
    """The user's templates folder as the environment is keyed by (absolute, links resolved); ``None``: the defaults."""
    if templates is None:
        return None
    if not str(templates).strip():  # (Path("") is the current folder: an empty name is a mistake, not ".")
        raise TemplateError("templates folder: the name is empty (None: charfmt's own templates)")
    path = Path(templates)
    if not path.is_dir():
        raise TemplateError(f"templates folder {path} {'is not a directory' if path.exists() else 'does not exist'}")
    return _resolved(str(path))


@lru_cache(maxsize=64)
def _resolved(path: str) -> str:
    """``path`` made absolute, links resolved: once per folder (a server renders with one folder each turn)."""
    return str(Path(path).resolve())


def _system(
    character: Any, folder: str | None, tags: TagTable, intro: str | None = None, lore: Activation | None = None
) -> str:
    chat_types = MappingProxyType(dict(CHAT_TYPES))
    before = "\n".join(lore.texts("before")) if lore is not None else ""
    after = "\n".join(lore.texts("after")) if lore is not None else ""
    return render_template(
        "system.j2", folder, character=character, tags=tags, chat_types=chat_types, intro=intro or "",
        lore_before=before, lore_after=after,
    )  # fmt: skip


def render_system(character: Character, *, templates: str | Path | None = None) -> str:
    """The system prompt for ``character`` (``prompts/system.j2``), teaching its tags (``character.tags``) by role.

    A card's macros are expanded (``{{user}}`` is ``character.user_name``) and its ``system_prompt``
    opens the prompt; the lore of a turn is ``render_turn``'s.
    """
    parts = turn_parts(character, [], UserTurn(), counter=estimate_tokens, lorebooks=None)
    return _system(template_view(parts.character), template_folder(templates), character.tags, parts.intro)


def render_user_block(turn: UserTurn, *, templates: str | Path | None = None) -> str:
    """One user turn in the tag language (``prompts/user.j2``); ``parse_input`` reads it back."""
    return render_template("user.j2", template_folder(templates), turn=template_view(turn))


def render_request(name: str, character: Character, *, templates: str | Path | None = None, **values: str) -> str:
    """A request to the model beyond a turn of the player (``prompts/impersonate.j2``, ``prompts/continue.j2``):
    ``character`` and ``values`` (text, escaped as every value is) given to the template ``name``."""
    return render_template(name, template_folder(templates), character=template_view(character), **values).strip()


class TextKeywords(TypedDict, total=False):
    """The keywords of ``render_text`` and ``render_text_turn``, written once (``RenderKeywords`` adds two)."""

    templates: str | Path | None
    """A folder whose templates are tried before the shipped ``prompts/`` (``None``: the shipped ones)."""
    budget: int | None
    """Tokens the prompt may take: the oldest whole exchanges are left out until it fits (``None``: all kept)."""
    counter: Counter | TokenCounter
    """What counts the tokens (a ``TokenCounter`` counts its template's own tokens too; default: the estimate)."""
    lorebooks: Sequence[Lorebook]
    """Lore beyond the card's own book, scanned on the turn and the newest history."""
    seed: int | str | None
    """The seed of the macros' and the lore's rolls (the same seed and history give the same turn)."""
    now: datetime | None
    """What ``{{time}}`` and ``{{date}}`` read (``None``: the clock)."""


class RenderKeywords(TextKeywords, total=False):
    """The keywords of ``render_messages`` and ``render_turn``, written once: ``TextKeywords`` and these two."""

    provider: str
    """Whose chat API the request is for (``PROVIDERS``; default ``openai``)."""
    structured: bool
    """Add the provider's structured-output setting with the reply's JSON schema (default ``False``)."""


def checked_keywords(function: str, given: Mapping[str, object], keywords: type) -> None:
    """A keyword ``function`` does not take is a ``TypeError``, as Python says it for a written signature."""
    known: frozenset[str] = keywords.__optional_keys__  # type: ignore[attr-defined]
    for name in given:
        if name not in known:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")


def _check_turn(character: object, history: object, options: Mapping[str, object]) -> None:
    """The arguments of a turn to render, checked before any is used: a ``TypeError`` (or, for a negative
    budget, a ``CharfmtError``) naming the argument."""
    if not isinstance(character, Character):
        raise TypeError(f"character must be a Character (Character.load(path)), not {type(character).__name__}")
    check_turn_options(history, options)


def check_turn_options(history: object, options: Mapping[str, object]) -> None:
    """A turn's ``history`` (a list of ``Exchange``) and its ``budget`` and ``structured`` keywords, checked for a
    character's render and a scene's (``Scene.render_turn``): a ``TypeError`` or ``CharfmtError`` naming them."""
    if not isinstance(history, Sequence) or isinstance(history, str):
        raise TypeError(f"history must be a list of Exchange, not {type(history).__name__}")
    for n, exchange in enumerate(history):
        if not isinstance(exchange, Exchange):
            raise TypeError(
                f"history must be a list of Exchange (history[{n}] is a {type(exchange).__name__}; "
                "Exchange(user=..., reply=...), or charfmt.interop to read a chat log)"
            )
    check_count(options.get("budget"), "budget", optional=True)
    check_flag(options.get("structured", False), "structured")


@dataclass
class RenderedTurn:
    """A provider request for one turn, and what rendering it decided (the lore) and noted."""

    request: dict[str, Any]
    """The request body (without the model name), as ``render_messages`` returns it (``render_text_turn``: a raw
    completion's, ``{"prompt": ...}``)."""
    lore: Activation | None
    """The lore entries the turn activated, and those the lore's token budget cut (``None``: no lorebook)."""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """What rendering noted: lore activated (``CF940``) and cut (``CF941``), unknown macros (``CF928``)..."""


def render_messages(
    character: Character, history: Sequence[Exchange], user_turn: UserTurn | str, **options: Unpack[RenderKeywords]
) -> dict[str, Any]:
    """The request body (without the model name) for ``provider``'s chat API.

    ``openai``: ``{"messages": [...]}``; ``anthropic``: ``{"system": ..., "messages": [...]}``;
    ``gemini``: ``{"system_instruction": ..., "contents": [...]}`` with role ``model``.
    Past replies go back in canonical form. With ``budget``, the oldest whole
    exchanges are dropped until ``counter`` says the request fits (the messages as
    ``{"role", "content"}`` counted whole: a ``TokenCounter`` counts its template's own tokens
    too; a function of one text, the texts added up). ``structured``
    adds the provider's structured-output setting with ``json_schema(provider)`` for
    the character's vocabulary (OpenAI enforces the emotion keys by pattern; the
    others are told them in the body's description). A card's macros, ``system_prompt``,
    ``post_history_instructions`` and lorebook, and the ``lorebooks`` given, are used as
    ``render_turn`` says (``seed``, ``now``: its random rolls and its clock).
    """
    checked_keywords("render_messages", options, RenderKeywords)
    return render_turn(character, history, user_turn, **options).request


def turn_of(user_turn: object, cast: Character | Scene) -> UserTurn:
    """The turn to render: a ``UserTurn``, or a line as the player types it (``cast.shorthand``: a scene's reads
    it with the whole cast's words)."""
    if isinstance(user_turn, UserTurn):
        return user_turn
    if isinstance(user_turn, str):
        return cast.shorthand(user_turn)
    raise TypeError(f"the user turn is a UserTurn (Character.shorthand(line)) or a str, not {type(user_turn).__name__}")


def render_turn(
    character: Character, history: Sequence[Exchange], user_turn: UserTurn | str, **options: Unpack[RenderKeywords]
) -> RenderedTurn:
    """``render_messages``'s request, with the lore the turn activated and what rendering noted.

    The card's macros are expanded (one output bound for the turn: ``charfmt.prompt.macros``); its
    ``system_prompt`` replaces the prompt's opening line (``{{original}}``: that line); its
    lorebook and ``lorebooks`` are scanned on ``user_turn`` and the newest history (see
    ``charfmt.prompt.lorebook``), the lore's budget being the book's, else a quarter of ``budget``;
    entries before/after the character go into the system prompt, entries at a depth into the
    history (``openai``; the other providers' histories hold no system turns: after the
    character, ``CF945``); ``post_history_instructions`` close the new turn's user message, after
    the history (``openai``: a system message anywhere but first is refused by the chat templates of
    Gemma, Mistral and others; the other providers: at the end of the system prompt). An exchange whose user turn is
    empty (a card's greeting) is sent as the assistant's message alone (``openai``).
    ``seed``: the same seed and history give the same turn; ``now``: what ``{{time}}`` reads.
    ``user_turn``: a ``UserTurn``, or the line as the player types it (``Character.shorthand``).
    """
    checked_keywords("render_turn", options, RenderKeywords)
    _check_turn(character, history, options)
    provider = options.get("provider", "openai")
    if provider not in PROVIDERS:
        raise CharfmtError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    user_turn = turn_of(user_turn, character)
    folder = template_folder(options.get("templates"))
    budget, counter = options.get("budget"), options.get("counter", ESTIMATE)
    parts = _parts(character, history, user_turn, options, counter)
    turn_text = render_template("user.j2", folder, turn=template_view(user_turn))
    if provider == "openai":
        turn_text = turn_message(turn_text, post_history(parts))
    pairs = [
        (render_template("user.j2", folder, turn=template_view(ex.user))
         if ex.user.chats or provider != "openai" else "",
         history_reply(ex.reply, character.tags))
        for ex in history
    ]  # fmt: skip

    def build(lore: Activation | None) -> tuple[TurnParts, str, list[tuple[str, str]]]:  # (lore: all, or less)
        held = with_lore(parts, lore)
        system, extra = system_of(held, provider=provider, templates=folder)
        start = 0
        if budget is not None:  # (the oldest exchanges left out first; then ``fit_lore`` cuts lore)
            start, _ = fit_messages(
                lambda start: _chat_messages(system, chat_turns(pairs[start:], turn_text, extra)), len(pairs),
                budget=budget, counter=counter,
            )  # fmt: skip
        return held, system, chat_turns(pairs[start:], turn_text, extra)

    held, system, turns = build(parts.lore) if budget is None else fit_lore(parts.lore, build, budget=budget)[0]
    structured = options.get("structured", False)
    schema = json_schema(provider, vocabulary=character.vocabulary, tags=character.tags) if structured else None
    return RenderedTurn(provider_request(provider, system, turns, schema), held.lore, held.diagnostics)


def _parts(
    character: Character, history: Sequence[Exchange], turn: UserTurn, options: TextKeywords,
    counter: Counter | TokenCounter,
) -> TurnParts:  # fmt: skip
    """The card's parts of the turn (``turn_parts``) for the keywords given; a macro's error a ``TemplateError``."""
    try:
        return turn_parts(
            character, history, turn, lorebooks=options.get("lorebooks", ()), counter=counter,
            budget=options.get("budget"), seed=options.get("seed"), now=options.get("now"),
        )  # fmt: skip
    except MacroError as e:
        raise TemplateError(str(e)) from None


Extra = tuple[str, str, int]
"""A message a turn adds among the chat's: (role, text, depth: 0 after the new turn, 1 before it...)."""


def system_of(
    parts: TurnParts, *, provider: str = "openai", templates: str | Path | None = None
) -> tuple[str, list[Extra]]:
    """The system prompt of a turn's parts, and the messages it adds among the turns (``chat_turns``).

    The lore at a depth is messages of its own for ``openai`` (the post-history instructions close
    the new turn's message there: ``post_history``); the other providers' histories hold no system
    turns, so there both close the system prompt (lore at a depth after the character, ``CF945``
    noted in ``parts``).
    """
    lore = parts.lore if provider == "openai" else _placed_after(parts, provider)
    folder = template_folder(templates)
    system = _system(template_view(parts.character), folder, parts.character.tags, parts.intro, lore)
    if provider == "openai":
        return system, lore_extras(lore)
    if parts.post_history:
        system = f"{system.rstrip()}\n\n{defused_text(parts.post_history)}\n"
    return system, []


def lore_extras(lore: Activation | None) -> list[Extra]:
    """The messages lore at a depth adds among an OpenAI request's turns."""
    depth = lore.at_depth() if lore is not None else []
    return [(role, defused_text(text), d) for d, role, text in depth]


def post_history(parts: TurnParts) -> str:
    """The card's post-history instructions as they close the new turn's message (escaped; "" where none)."""
    return defused_text(parts.post_history) if parts.post_history else ""


def turn_message(*texts: str) -> str:
    """The new turn's message: its texts that are not empty (the player's turn, what is asked instead of
    one, the post-history instructions: what goes after the history), a blank line between each two."""
    kept = [text for text in texts if text.strip()]
    return "\n\n".join([*(text.rstrip("\n") for text in kept[:-1]), *kept[-1:]])


def lore_in_system(lore: Activation | None) -> bool:
    """Whether a turn's system prompt differs from ``render_system``'s: lore before or after the character."""
    return lore is not None and bool(lore.texts("before") or lore.texts("after"))


def chat_turns(pairs: Sequence[tuple[str, str]], turn_text: str, extra: Sequence[Extra]) -> list[tuple[str, str]]:
    """The messages after the system prompt: each exchange (a greeting, with no user text, alone), the new
    turn, and ``extra`` at its depth (``at_depth``)."""
    turns: list[tuple[str, str]] = []
    for user_text, reply_text in pairs:
        turns += [("user", user_text), ("assistant", reply_text)] if user_text else [("assistant", reply_text)]
    turns.append(("user", turn_text))
    return at_depth(turns, extra)


def at_depth(turns: Sequence[tuple[str, str]], extra: Sequence[Extra]) -> list[tuple[str, str]]:
    """``turns`` (the last: the new turn) with each of ``extra`` at its depth: 0 after the new turn, 1 before
    it, 2 before the message before it... (SillyTavern's depth: counted in messages from the end)."""
    if not extra:
        return list(turns)
    n = len(turns)
    out: list[tuple[str, str]] = []
    for i, turn in enumerate(turns):
        out += [(role, text) for role, text, d in extra if d > 0 and n - min(d, n) == i]
        out.append(turn)
    out += [(role, text) for role, text, d in extra if d <= 0]
    return out


def _placed_after(parts: TurnParts, where: str) -> Activation | None:
    """The turn's lore for a prompt without system turns (``where``: the provider, or ``text``): its entries at
    a depth placed after the character instead, each time with one ``CF945`` noted in ``parts``."""
    return placed_after(parts.lore, where, parts.diagnostics)


def placed_after(
    lore: Activation | None, where: str, notes: list[Diagnostic], *, after: str = "the character"
) -> Activation | None:
    """``lore`` for a prompt without system turns (``where``: the provider, or ``text``): its entries at a depth
    placed ``after`` the character (a scene's: the cast) instead, with one ``CF945`` added to ``notes``."""
    if lore is None or not lore.at_depth():
        return lore
    notes.append(Diagnostic.at("", "CF945", f"lore at a depth placed after {after} ({where})", 0))
    return _depth_after(lore)


def _depth_after(lore: Activation) -> Activation:
    """``lore`` with its entries at a depth placed after the character instead."""
    placed = [
        Placed(p.entry.model_copy(update={"position": "after"}), p.text, p.tokens) if p.entry.position == "depth" else p
        for p in lore.placed
    ]
    return Activation(placed=placed, cut=lore.cut, lost=lore.lost, budget=lore.budget, diagnostics=lore.diagnostics)


def provider_request(
    provider: str, system: str, turns: list[tuple[str, str]], schema: dict[str, Any] | None
) -> dict[str, Any]:
    """The request body of ``provider`` for a system prompt and turns."""
    if provider == "openai":
        request: dict[str, Any] = {
            "messages": [{"role": "system", "content": system}] + [{"role": r, "content": t} for r, t in turns]
        }
        if schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "charfmt_reply", "strict": True, "schema": schema},
            }
        return request
    if provider == "anthropic":
        request = {"system": system, "messages": [{"role": r, "content": t} for r, t in turns]}
        if schema is not None:
            # output_config.format: the Messages API and its SDK (anthropic 2.x) take no "output_format"
            request["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return request
    request = {
        "system_instruction": {"parts": [{"text": system}]},
        "contents": [{"role": "model" if r == "assistant" else "user", "parts": [{"text": t}]} for r, t in turns],
    }
    if schema is not None:
        request["generation_config"] = {"response_mime_type": "application/json", "response_schema": schema}
    return request


def _chat_messages(system: str, turns: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The chat messages of a request: the system prompt, then ``turns`` (``chat_turns``: the past exchanges,
    the new turn, what the turn adds among them)."""
    return [{"role": "system", "content": system}, *({"role": r, "content": t} for r, t in turns)]


def render_text(
    character: Character, history: Sequence[Exchange], user_turn: UserTurn | str, **options: Unpack[TextKeywords]
) -> str:
    """One prompt string for raw completion endpoints (``prompts/text.j2``).

    Turns are headed by ``### <name>`` lines that only the template writes: no value
    it prints can start a line with ``#`` or hold a chat-template control string. The card's
    parts and the lore are ``render_turn``'s; lore at a depth and the post-history
    instructions go into the system part (a text prompt has no system turns: ``CF945``, which
    ``render_text_turn`` returns with the rest of what rendering noted).
    """
    checked_keywords("render_text", options, TextKeywords)
    prompt: str = render_text_turn(character, history, user_turn, **options).request["prompt"]
    return prompt


def render_text_turn(
    character: Character, history: Sequence[Exchange], user_turn: UserTurn | str, **options: Unpack[TextKeywords]
) -> RenderedTurn:
    """``render_text``'s prompt as a raw completion request (``{"prompt": ...}``), with the lore the turn
    activated and what rendering noted (as ``render_turn`` returns them)."""
    checked_keywords("render_text_turn", options, TextKeywords)
    _check_turn(character, history, options)
    user_turn = turn_of(user_turn, character)
    folder = template_folder(options.get("templates"))
    budget, counter = options.get("budget"), options.get("counter", estimate_tokens)
    parts = _parts(character, history, user_turn, options, counter)
    character_view = template_view(parts.character)
    history_view: tuple[Any, ...] = template_view(list(history))
    turn_view = template_view(user_turn)

    def build(lore: Activation | None) -> tuple[TurnParts, str]:  # (lore: all, or less: ``fit_lore``'s)
        held = with_lore(parts, lore)
        system_text = _system(character_view, folder, character.tags, parts.intro, _placed_after(held, "text"))
        if parts.post_history:
            system_text = f"{system_text.rstrip()}\n\n{defused_text(parts.post_history)}\n"
        system = Safe(system_text)

        def render(start: int) -> str:
            return render_template(
                "text.j2", folder, character=character_view, system=system, history=history_view[start:],
                turn=turn_view,
            )  # fmt: skip

        start = 0 if budget is None else oldest_start(render, len(history), budget=budget, counter=counter)
        return held, render(start)

    held, prompt = build(parts.lore) if budget is None else fit_lore(parts.lore, build, budget=budget)[0]
    return RenderedTurn({"prompt": prompt}, held.lore, held.diagnostics)
