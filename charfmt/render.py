"""Render prompts from Jinja templates (``prompts/``): system prompt, user block, provider requests.

Every ``{{ value }}`` a template prints is escaped for the tag language, so no
user-supplied string can open or close a tag; only the filters ``body``,
``user_block`` and ``dumps`` write markup, and they write it with the same code the
parser reads. Templates run in Jinja's sandbox with strict undefined variables.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Final

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from charfmt._resources import resource_dir
from charfmt.character import Character, Exchange
from charfmt.diagnostics import CharfmtError
from charfmt.schema import json_schema
from charfmt.tags import CHAT_TYPES, TAGS
from charfmt.userinput import UserTurn
from charfmt.writer import body_text, dumps, escape

PROVIDERS: Final = ("openai", "anthropic", "gemini")
Counter = Callable[[str], int]


class TemplateError(CharfmtError):
    """A template is missing, invalid, uses an undefined variable or breaks the sandbox."""


class BudgetError(CharfmtError):
    """The system prompt and the new turn alone exceed the token budget."""


class Safe(str):
    """Text in the tag language already: templates print it as it is."""

    __slots__ = ()


_LINE_ESCAPES: Final = str.maketrans({"\t": "&#9;", "\n": "&#10;", "\r": "&#13;"})


def _finalize(value: Any) -> Any:
    # Jinja calls this on every {{ ... }} value: escape anything that is not Safe.
    if isinstance(value, Safe):
        return value
    return escape(value if isinstance(value, str) else str(value))


def estimate_tokens(text: str) -> int:
    """Default token counter: 1 per wide (CJK, full-width) character, 1 per 4 other characters.

    Tokenizers give roughly one token per kanji or kana and one per 3-5 Latin
    characters; the estimate errs high on English. Pass your tokenizer's counter
    for exact budgets.
    """
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in "WF")
    return wide + math.ceil((len(text) - wide) / 4)


@cache
def _environment(user_dir: str | None) -> SandboxedEnvironment:
    loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader(str(resource_dir("prompts")))]
    if user_dir is not None:
        loaders.insert(0, jinja2.FileSystemLoader(user_dir))
    env = SandboxedEnvironment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["body"] = lambda chat: Safe(body_text(chat.type, chat.segments))
    env.filters["dumps"] = lambda reply: Safe(dumps(reply))
    env.filters["line"] = lambda value: Safe(escape(str(value)).translate(_LINE_ESCAPES))
    env.filters["user_block"] = lambda turn: Safe(_render("user.j2", user_dir, turn=turn))
    return env


def _render(name: str, templates: str | None, **variables: Any) -> str:
    """Render one template; every Jinja failure becomes a ``TemplateError`` naming it."""
    try:
        return _environment(templates).get_template(name).render(**variables)
    except jinja2.UndefinedError as e:
        raise TemplateError(f"template {name}: undefined variable: {e.message}") from None
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"template {e.name or name}, line {e.lineno}: {e.message}") from None
    except jinja2.TemplateNotFound as e:
        raise TemplateError(f"template {e.name} not found in the templates folder") from None
    except (jinja2.exceptions.SecurityError, OverflowError) as e:
        raise TemplateError(f"template {name}: blocked by the sandbox: {e}") from None
    except jinja2.TemplateError as e:
        raise TemplateError(f"template {name}: {e}") from None


def _dir(templates: str | Path | None) -> str | None:
    if templates is None:
        return None
    path = Path(templates)
    if not path.is_dir():
        raise TemplateError(f"templates folder {path} does not exist")
    return str(path.resolve())


def render_system(character: Character, *, templates: str | Path | None = None) -> str:
    """The system prompt for ``character`` (``prompts/system.j2``)."""
    return _render("system.j2", _dir(templates), character=character, tags=TAGS, chat_types=CHAT_TYPES)


def render_user_block(turn: UserTurn, *, templates: str | Path | None = None) -> str:
    """One user turn in the tag language (``prompts/user.j2``); ``parse_input`` reads it back."""
    return _render("user.j2", _dir(templates), turn=turn)


def _fit(
    system: str, history: Sequence[Exchange], turn_text: str, budget: int | None, counter: Counter
) -> list[tuple[str, str]]:
    """History as (user text, reply text) pairs, oldest whole exchanges dropped to fit ``budget``."""
    pairs = [(render_user_block(ex.user), dumps(ex.reply)) for ex in history]
    if budget is None:
        return pairs
    fixed = counter(system) + counter(turn_text)
    if fixed > budget:
        raise BudgetError(f"the system prompt and the new turn need {fixed} tokens; the budget is {budget}")
    costs = [counter(u) + counter(r) for u, r in pairs]
    total = fixed + sum(costs)
    start = 0
    while total > budget:
        total -= costs[start]
        start += 1
    return pairs[start:]


def render_messages(
    character: Character,
    history: Sequence[Exchange],
    user_turn: UserTurn,
    *,
    provider: str = "openai",
    templates: str | Path | None = None,
    budget: int | None = None,
    counter: Counter = estimate_tokens,
    structured: bool = False,
) -> dict[str, Any]:
    """The request body (without the model name) for ``provider``'s chat API.

    ``openai``: ``{"messages": [...]}``; ``anthropic``: ``{"system": ..., "messages": [...]}``;
    ``gemini``: ``{"system_instruction": ..., "contents": [...]}`` with role ``model``.
    Past replies go back in canonical form. With ``budget``, the oldest whole
    exchanges are dropped until ``counter`` says the request fits. ``structured``
    adds the provider's structured-output setting with ``json_schema(provider)``.
    """
    if provider not in PROVIDERS:
        raise CharfmtError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    system = render_system(character, templates=templates)
    turn_text = render_user_block(user_turn, templates=templates)
    pairs = _fit(system, history, turn_text, budget, counter)
    turns: list[tuple[str, str]] = []
    for user_text, reply_text in pairs:
        turns += [("user", user_text), ("assistant", reply_text)]
    turns.append(("user", turn_text))
    if provider == "openai":
        request: dict[str, Any] = {
            "messages": [{"role": "system", "content": system}] + [{"role": r, "content": t} for r, t in turns]
        }
        if structured:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "charfmt_reply", "strict": True, "schema": json_schema("openai")},
            }
        return request
    if provider == "anthropic":
        request = {"system": system, "messages": [{"role": r, "content": t} for r, t in turns]}
        if structured:
            request["output_format"] = {"type": "json_schema", "schema": json_schema("anthropic")}
        return request
    request = {
        "system_instruction": {"parts": [{"text": system}]},
        "contents": [{"role": "model" if r == "assistant" else "user", "parts": [{"text": t}]} for r, t in turns],
    }
    if structured:
        request["generation_config"] = {
            "response_mime_type": "application/json",
            "response_schema": json_schema("gemini"),
        }
    return request


def render_text(
    character: Character,
    history: Sequence[Exchange],
    user_turn: UserTurn,
    *,
    templates: str | Path | None = None,
    budget: int | None = None,
    counter: Counter = estimate_tokens,
) -> str:
    """One prompt string for raw completion endpoints (``prompts/text.j2``)."""
    folder = _dir(templates)
    system = Safe(render_system(character, templates=templates))

    def render(start: int) -> str:
        recent = list(history)[start:]
        return _render("text.j2", folder, character=character, system=system, history=recent, turn=user_turn)

    if budget is None:
        return render(0)
    # Fewer exchanges never make the prompt longer: find the oldest start that fits.
    lo, hi = 0, len(history)
    need = counter(render(hi))
    if need > budget:
        raise BudgetError(f"the system prompt and the new turn need {need} tokens; the budget is {budget}")
    while lo < hi:
        mid = (lo + hi) // 2
        if counter(render(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return render(lo)
