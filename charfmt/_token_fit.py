"""Token fitting: which past exchanges a prompt keeps so that it fits a token budget.

The oldest whole exchanges go first; the system prompt and the new turn always stay, and
a ``BudgetError`` says when they alone exceed the budget. Tokens are counted with the
caller's counter (``charfmt.render.estimate_tokens`` by default).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from charfmt.diagnostics import CharfmtError

Counter = Callable[[str], int]


class BudgetError(CharfmtError):
    """The system prompt and the new turn alone exceed the token budget."""


def newest_exchanges(
    system: str, turn: str, pairs: Sequence[tuple[str, str]], *, budget: int, counter: Counter
) -> list[tuple[str, str]]:
    """The newest whole (user text, reply text) ``pairs`` that fit in ``budget`` beside ``system`` and ``turn``."""
    fixed = counter(system) + counter(turn)
    if fixed > budget:
        raise BudgetError(f"the system prompt and the new turn need {fixed} tokens; the budget is {budget}")
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
        raise BudgetError(f"the system prompt and the new turn need {need} tokens; the budget is {budget}")
    while lo < hi:
        mid = (lo + hi) // 2
        if counter(render(mid)) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo
