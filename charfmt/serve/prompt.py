"""The upstream's messages for one turn: the system prompt, the history that fits, the player's turn.

The system prompt is the same for every turn of a character (or scene), and rendering it is
most of a render: it is rendered once (``render_system``, ``Scene.render_system``) and again
only when its template file changes. A character's past exchanges come back every turn of
their session: each is rendered once (its user block, its reply as ``history_reply`` writes
it) and kept while the session holds it, and again when ``user.j2`` changes; the new turn is
rendered each time, and the oldest exchanges are left out to fit as ``render_messages`` leaves
them out (``newest_exchanges``). The messages are exactly ``render_messages``'s (a test holds
the two equal). A scene's history and turn are rendered by ``Scene.render_messages`` as ever.
Both render from charfmt's own templates with the templates folder ``prompt_stub/`` in front:
it holds only an empty ``system.j2`` and ``scene.j2``, so the system prompt is not rendered a
second time (every other template is charfmt's, the folder being searched first). The cached
prompt then takes the empty one's place, and the token budget is what it leaves.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from charfmt.diagnostics import CharfmtError

if TYPE_CHECKING:
    from charfmt.character import Character, Exchange
    from charfmt.scene import Scene
    from charfmt.userinput import UserTurn

STUB: Final = Path(__file__).resolve().parent / "prompt_stub"
"""Templates that write an empty system prompt (the cached one replaces it)."""

Message = dict[str, str]

PAST_KEPT: Final = 8192
"""Past exchanges whose rendered texts are kept (the least recently used go first)."""


class BadTurn(CharfmtError):
    """The player's turn cannot be sent (nothing to say, or it does not fit the context window)."""


@functools.lru_cache(maxsize=16384)
def count_tokens(text: str) -> int:
    """``estimate_tokens``, remembered: the system prompt and past exchanges come back every turn."""
    from charfmt.render import estimate_tokens  # noqa: PLC0415

    return estimate_tokens(text)


@functools.lru_cache(maxsize=64)
def prompt_version(system: str) -> str:
    """The first 12 hex digits of the system prompt's SHA-256 (the log's ``prompt_version``)."""
    return hashlib.sha256(system.encode()).hexdigest()[:12]


class Prompter:
    """The messages of each turn for one character or scene, its system prompt rendered once.

    ``note`` (the reply's limits) is appended to the system prompt; ``budget``: the tokens the
    messages may take in all (as ``estimate_tokens`` counts them), the note's included.
    """

    def __init__(self, character: Character, scene: Scene | None, *, note: str, budget: int) -> None:
        from charfmt._resources import resource_dir  # noqa: PLC0415

        self.character = character
        self.scene = scene
        self.note = note
        self.budget = budget
        prompts = resource_dir("prompts")
        self._template = prompts / ("system.j2" if scene is None else "scene.j2")
        self._user_template = prompts / "user.j2"
        self._stamp: tuple[int, int] | None = None
        self._user_stamp: tuple[int, int] | None = None
        self._rendered = ""
        self._system = ""
        self._past: collections.OrderedDict[int, tuple[Exchange, tuple[str, str]]] = collections.OrderedDict()
        """Per past exchange (by identity; the exchange kept, so its id is not reused): its two texts."""
        self._said: collections.OrderedDict[int, tuple[UserTurn, str]] = collections.OrderedDict()
        """Per player's turn rendered (by identity, the turn kept): its user block, which its exchange
        (``Exchange.user`` is that turn) shows again from the next turn on."""

    def system(self) -> str:
        """The system prompt with the note, rendered again only when its template file changed."""
        stamp = _stamp(self._template)
        if stamp is None or stamp != self._stamp:
            if self.scene is not None:
                rendered = self.scene.render_system()
            else:
                from charfmt.render import render_system  # noqa: PLC0415

                rendered = render_system(self.character)
            self._rendered, self._stamp = rendered, stamp
            self._system = f"{rendered.rstrip()}\n\n{self.note}\n"
        return self._system

    def messages(
        self, history: list[Exchange], turn: UserTurn | None, *, after: str = "", request: str = "", reserve: int = 0
    ) -> list[Message]:
        """The system prompt, the newest exchanges of ``history`` that fit the budget, ``turn``; or ``BadTurn``.

        ``after``: the front end's post-history instructions, after the history, in the turn's message (a
        ``system`` message there is refused by many chat templates). ``request``: what is asked instead of a
        turn of the player (``turn`` ``None``: the player's line, the rest of a reply), rendered. ``reserve``:
        tokens the caller adds after these messages (a prefill), kept out of the budget.
        """
        head = {"role": "system", "content": self.system()}
        budget = self.budget - count_tokens(self.note) - reserve  # the rendered messages' share (the prompt's included)
        if self.scene is not None:
            return self._scene_messages(head, budget, history, turn, _joined(request, after))
        from charfmt._token_fit import newest_exchanges  # noqa: PLC0415
        from charfmt.render import BudgetError, render_user_block  # noqa: PLC0415

        stamp = _stamp(self._user_template)
        if stamp != self._user_stamp:  # user.j2 changed: every past exchange renders anew
            self._past.clear()
            self._said.clear()
            self._user_stamp = stamp
        try:  # render_messages's steps, the past exchanges' texts kept from earlier turns
            said = render_user_block(turn, templates=STUB) if turn is not None else ""
            if stamp is not None and turn is not None:
                self._said[id(turn)] = (turn, said)
                if len(self._said) > PAST_KEPT:
                    self._said.popitem(last=False)
            last = _joined(said, request, after)
            pairs = [self._texts(exchange) for exchange in history]
            pairs = newest_exchanges(self._rendered, last, pairs, budget=budget, counter=count_tokens)
        except BudgetError:
            raise BadTurn(f"the turn does not fit the context window: {self._budget_error(budget, turn)}") from None
        out = [head]
        for user, reply in pairs:
            out += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        out.append({"role": "user", "content": last})
        return out

    def _texts(self, exchange: Exchange) -> tuple[str, str]:
        """A past exchange's user block and reply as ``render_messages`` writes them; rendered once."""
        kept = self._past.get(id(exchange))
        if kept is not None and kept[0] is exchange:
            self._past.move_to_end(id(exchange))
            return kept[1]
        from charfmt.render import history_reply, render_user_block  # noqa: PLC0415

        said = self._said.pop(id(exchange.user), None)  # (its turn's own rendering, where this server made it)
        user = (
            said[1]
            if said is not None and said[0] is exchange.user
            else render_user_block(exchange.user, templates=STUB)
        )
        texts = user, history_reply(exchange.reply, self.character.tags)
        if self._user_stamp is None:  # user.j2 unreadable (rendering says so): nothing kept
            return texts
        self._past[id(exchange)] = (exchange, texts)
        if len(self._past) > PAST_KEPT:
            self._past.popitem(last=False)
        return texts

    def _budget_error(self, budget: int, turn: UserTurn | None) -> str:
        """What ``render_messages`` says of ``turn`` not fitting ``budget`` with the prompt rendered in place."""
        from charfmt.render import BudgetError, render_messages  # noqa: PLC0415

        if turn is None:
            return f"the budget is {budget} tokens"

        try:
            render_messages(self.character, [], turn, budget=budget, counter=count_tokens)
        except BudgetError as e:
            return str(e)
        return f"the budget is {budget}"  # not reached: the same counts fail the same way

    def _scene_messages(
        self, head: Message, budget: int, history: list[Exchange], turn: UserTurn | None, extra: str
    ) -> list[Message]:
        assert self.scene is not None
        from charfmt.userinput import UserTurn  # noqa: PLC0415

        fixed = count_tokens(self._rendered)
        past = list(history)
        while True:  # the oldest exchanges left out to fit
            rest = self.scene.render_messages(past, turn or UserTurn(), templates=STUB)["messages"][1:]
            rest[-1] = {**rest[-1], "content": _joined(rest[-1]["content"] if turn is not None else "", extra)}
            if fixed + sum(count_tokens(m["content"]) for m in rest) <= budget:
                return [head, *rest]
            if not past:
                raise BadTurn(f"the turn does not fit the context window ({budget} tokens)")
            del past[0]


def _joined(*texts: str) -> str:
    """The texts that are not empty, a blank line between each two (one text alone: as it is)."""
    parts = [text for text in texts if text.strip()]
    return "\n\n".join([*(part.rstrip("\n") for part in parts[:-1]), *parts[-1:]])


def _stamp(path: Path) -> tuple[int, int] | None:
    """A template file's modification time and size (``None`` where it cannot be read: render each time)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size
