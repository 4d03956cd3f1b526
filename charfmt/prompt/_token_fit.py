"""Token fitting: which past exchanges a prompt keeps so that it fits a token budget.

The oldest whole exchanges go first; the system prompt and the new turn always stay, and
a ``BudgetError`` says when they alone exceed the budget. Tokens are counted with the
caller's counter (``charfmt.prompt.render.estimate_tokens`` by default): a function of one text, or a
``TokenCounter``, which also counts a whole request as the model's chat template writes it
(``fit_messages`` counts the messages as they go upstream, everything added to them included).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Final, Protocol, runtime_checkable

from charfmt.diagnostics import CharfmtError

Counter = Callable[[str], int]
"""Tokens of one text."""

Message = Mapping[str, str]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens as one model does: a text (``counter(text)``), and a chat request as its template writes it."""

    name: str
    """What counts, for messages and logs: ``llama.cpp (model.gguf)``, ``tiktoken o200k_base``, ``charfmt estimate``."""
    exact: bool
    """Whether ``messages`` is the model's own count of the prompt (its tokenizer and its chat template)."""

    def __call__(self, text: str) -> int:
        """Tokens of ``text`` alone."""
        ...

    def messages(self, messages: Sequence[Message]) -> int:
        """Tokens of the prompt these chat messages make, the template's own tokens and the reply's header included."""
        ...


TEMPLATE_PER_MESSAGE: Final = 5
"""Tokens a chat template writes around one message, at most, in the common templates: ChatML
(``<|im_start|>role\n`` … ``<|im_end|>\n``), Llama 3, Gemma, Mistral; OpenAI's API counts 3 or 4."""

TEMPLATE_PER_REQUEST: Final = 5
"""Tokens a chat template adds once, at most: the BOS token and the reply's header (``<|im_start|>assistant\n``)."""


@dataclass(eq=False, repr=False, slots=True)
class TextCounter:
    """A ``TokenCounter`` from a counter of texts: each message's text, plus what a chat template adds at most."""

    count: Counter
    """Tokens of one text."""
    name: str
    _: KW_ONLY
    exact: bool = False
    per_message: int = TEMPLATE_PER_MESSAGE
    """Tokens the chat template adds around each message."""
    per_request: int = TEMPLATE_PER_REQUEST
    """Tokens the chat template adds once."""

    def __call__(self, text: str) -> int:
        """Tokens of ``text`` alone."""
        return self.count(text)

    def messages(self, messages: Sequence[Message]) -> int:
        """The messages' texts, ``per_message`` for each, ``per_request`` once."""
        return sum(self.count(m["content"]) + self.per_message for m in messages) + self.per_request

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def count_messages(counter: Counter | TokenCounter, messages: Sequence[Message]) -> int:
    """The prompt tokens of ``messages``: the counter's own count of a request, or its texts' counts added up."""
    if isinstance(counter, TokenCounter):
        return counter.messages(messages)
    return sum(counter(m["content"]) for m in messages)


class BudgetError(CharfmtError):
    """The system prompt and the new turn alone exceed the token budget."""

    def __init__(self, message: str, *, need: int | None = None, budget: int | None = None, what: str = "") -> None:
        super().__init__(message)
        self.need = need
        """The tokens what must stay needs (``None``: not counted)."""
        self.budget = budget
        """The budget it did not fit."""
        self.what = what or "the system prompt and the new turn"
        """What must stay, as the message names it."""


def _too_long(need: int, budget: int, what: str = "the system prompt and the new turn") -> BudgetError:
    return BudgetError(f"{what} need {need} tokens; the budget is {budget}", need=need, budget=budget, what=what)


def newest_exchanges(
    system: str, turn: str, pairs: Sequence[tuple[str, str]], *, budget: int, counter: Counter
) -> list[tuple[str, str]]:
    """The newest whole (user text, reply text) ``pairs`` that fit in ``budget`` beside ``system`` and ``turn``."""
    fixed = counter(system) + counter(turn)
    if fixed > budget:
        raise _too_long(fixed, budget)
    costs = [counter(u) + counter(r) for u, r in pairs]
    total = fixed + sum(costs)
    start = 0
    while total > budget:
        total -= costs[start]
        start += 1
    return list(pairs[start:])


def oldest_start(render: Callable[[int], str], count: int, *, budget: int, counter: Counter) -> int:
    """The smallest ``start`` (of ``count`` exchanges) whose prompt ``render(start)`` fits in ``budget``.

    Fewer exchanges never make the prompt longer, so the search halves the range each time.
    """
    lo, hi = 0, count
    need = counter(render(hi))
    if need > budget:
        raise _too_long(need, budget)
    while lo < hi:
        mid = (lo + hi) // 2
        if counter(render(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo


def fit_messages(
    build: Callable[[int], list[dict[str, str]]],
    count: int,
    *,
    budget: int,
    counter: Counter | TokenCounter,
    what: str = "the system prompt and the new turn",
) -> tuple[int, list[dict[str, str]]]:
    """``(start, build(start))``: the fewest of ``count`` past exchanges left out so that the messages fit.

    ``build(start)`` gives the messages exactly as they go upstream with the exchanges from
    ``start`` on (whatever a caller adds to them, a note, a front end's system text, is counted);
    fewer exchanges never make them longer, so the search halves the range each time. Where even
    ``build(count)`` does not fit, a ``BudgetError`` says how many tokens ``what`` needs.
    """
    last = build(count)
    need = count_messages(counter, last)
    if need > budget:
        raise _too_long(need, budget, what)
    lo, hi, best = 0, count, last  # (best: the messages of ``hi``, which always fit)
    while lo < hi:
        mid = (lo + hi) // 2
        messages = build(mid)
        if count_messages(counter, messages) <= budget:
            hi, best = mid, messages
        else:
            lo = mid + 1
    return hi, best
