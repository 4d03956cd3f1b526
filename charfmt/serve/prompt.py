"""The upstream's messages for one turn: the system prompt, the history that fits, the player's turn.

The system prompt is the same for every turn of a character (or scene), and rendering it is
most of a render: it is rendered once (``render_system``, ``Scene.render_system``) and again
only when its template file changes. A character's past exchanges come back every turn of
their session: each is rendered once (its user block, its reply as ``history_reply`` writes
it) and kept while the session holds it, and again when ``user.j2`` changes; the new turn is
rendered each time, and the oldest exchanges are left out to fit as ``render_messages`` leaves
them out (``fit_messages``), counted as they go upstream: the limits note, the front end's own
system text and anything else added to them included, with the engine's counter (the model's
own where known: ``charfmt.prompt.tokens.counter_for``). The messages are exactly ``render_messages``'s
with the note and the front end's text appended to the system prompt (a test holds the two equal).
A scene's history and turn are rendered by ``Scene.render_messages`` as ever.
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
from typing import TYPE_CHECKING, Final, TypeVar

from charfmt._resources import resource_dir
from charfmt.diagnostics import CharfmtError
from charfmt.prompt._card_prompt import fit_lore, has_macros, turn_parts, turn_seed, with_lore
from charfmt.prompt._token_fit import TextCounter, count_messages, fit_messages
from charfmt.prompt.macros import MacroError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from charfmt.prompt._token_fit import TokenCounter
    from charfmt.prompt.character import Character, Exchange
    from charfmt.prompt.lorebook import Activation, Lorebook
    from charfmt.prompt.render import Extra
    from charfmt.prompt.scene import Scene
    from charfmt.prompt.userinput import UserTurn

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
    from charfmt.prompt.render import estimate_tokens  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

    return estimate_tokens(text)


def remembered(counter: TokenCounter) -> TokenCounter:
    """``counter`` with each text's count remembered where it counts messages text by text (the estimate,
    tiktoken, a tokenizer.json): the system prompt and past exchanges come back every turn."""
    from charfmt.prompt.render import ESTIMATE  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

    if counter is ESTIMATE:
        return TextCounter(count_tokens, counter.name, per_message=counter.per_message, per_request=counter.per_request)
    if isinstance(counter, TextCounter):
        count = functools.lru_cache(maxsize=16384)(counter.count)
        return TextCounter(
            count, counter.name, exact=counter.exact, per_message=counter.per_message, per_request=counter.per_request
        )
    return counter


def prompt_version(*sources: str) -> str:
    """The first 12 hex digits of the SHA-256 of a prompt's sources (the log's ``prompt_version``): the same
    templates, character or scene, lorebooks and limits give the same version, whatever a turn's macros,
    lore and history make of them."""
    digest = hashlib.sha256()
    for source in sources:
        data = source.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)  # (each source's length first: no two splits collide)
    return digest.hexdigest()[:12]


class Prompter:
    """The messages of each turn for one character or scene, its system prompt rendered once.

    ``note`` (the reply's limits) is appended to the system prompt; ``budget``: the tokens the
    messages may take in all (as ``counter`` counts them: default the estimate), the note's included.
    """

    def __init__(
        self,
        character: Character,
        scene: Scene | None,
        *,
        note: str,
        budget: int,
        counter: TokenCounter | None = None,
        lorebooks: Sequence[Lorebook] = (),
    ) -> None:
        from charfmt.prompt.render import ESTIMATE  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

        self.character = character
        self.scene = scene
        self.note = note
        self.budget = budget
        self.counter = remembered(counter or ESTIMATE)
        self.lorebooks = tuple(lorebooks)
        """Lore beyond the character's card's own book (``--lorebook``)."""
        prompts = resource_dir("prompts")
        self._template = prompts / ("system.j2" if scene is None else "scene.j2")
        self._user_template = prompts / "user.j2"
        self._stamp: tuple[int, int] | None = None
        self._user_stamp: tuple[int, int] | None = None
        self._version: tuple[tuple[object, ...], str] | None = None
        self._macros = scene is not None and any(has_macros(member) for member in scene.cast.values())
        """Whether a cast member's persona holds macros (the scene's system prompt is then each turn's own)."""
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
                from charfmt.prompt.render import render_system  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

                rendered = render_system(self.character)
            self._rendered, self._stamp = rendered, stamp
            self._system = f"{rendered.rstrip()}\n\n{self.note}\n"
        return self._system

    def version(self) -> str:
        """``prompt_version`` of what this prompter renders from: its templates (as they are now), the character
        or scene, the lorebooks and the note; the same every turn until one of them changes."""
        templates = (self._template, self._user_template, *(self._template.parent / name for name in _ALSO))
        stamps = tuple(_stamp(path) for path in templates)
        if self._version is None or self._version[0] != stamps:
            who = self.scene if self.scene is not None else self.character
            sources = [*(_read(path) for path in templates), who.model_dump_json(), self.note]
            sources += [book.model_dump_json() for book in self.lorebooks]
            self._version = stamps, prompt_version(*sources)
        return self._version[1]

    def messages(
        self, history: list[Exchange], turn: UserTurn | None, *, system: str | None = None, reserve: int = 0,
        after: str = "", request: str = "", prefill: str = "",
    ) -> list[Message]:  # fmt: skip
        """The system prompt (``system``, a front end's own text, after it), the newest exchanges of ``history``
        that fit the budget less ``reserve`` (what the upstream counts of the request's schema), ``turn``;
        or ``BadTurn`` saying what did not fit (``turn``'s keywords: ``after``, ``request``, ``prefill``)."""
        messages, _ = self.turn(
            history, turn, system=system, reserve=reserve, after=after, request=request, prefill=prefill
        )
        return messages

    def turn(
        self,
        history: list[Exchange],
        turn: UserTurn | None,
        *,
        system: str | None = None,
        reserve: int = 0,
        seed: int | str | None = None,
        after: str = "",
        request: str = "",
        prefill: str = "",
        lore_of: tuple[list[Exchange], UserTurn | None] | None = None,
        user_name: str | None = None,
    ) -> tuple[list[Message], Activation | None]:
        """``messages``, and the lore the turn activated (``render_turn``'s steps; ``seed``: its rolls): the
        system prompt rendered again for a turn whose macros or lore change it.

        After the history, in the turn's own message (a ``system`` message there is refused by many chat
        templates): ``turn`` (``None``: none, something else is asked), ``request`` (what is asked instead:
        the player's line, the rest of a reply; rendered), the card's post-history instructions and ``after``
        (the front end's). ``prefill``: the start of the model's answer (a continue), its message last,
        counted with the rest. ``lore_of``: the history and turn the card's parts and lore are made for
        where they are not the prompt's (a continue asked for as the rest: the turn it goes on with, so
        that its system prompt and lore are that turn's). ``user_name``: the player's name for this turn (a
        card's ``{{user}}``; ``None``: the character's or scene's own).
        """
        from charfmt.prompt.render import BudgetError, lore_extras, lore_in_system, post_history, system_of  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)
        from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, regex load on first use)

        budget = self.budget - reserve
        own = self.system()
        tail = [{"role": "assistant", "content": prefill}] if prefill else []
        scan_history, scan_turn = lore_of if lore_of is not None else (history, turn)
        scanned = scan_turn if scan_turn is not None else UserTurn()  # (no turn: the history alone is scanned)
        if self.scene is not None:
            scene = _named(self.scene, user_name)
            lore = scene.lore(scan_history, scanned, lorebooks=self.lorebooks, counter=self.counter, budget=budget,
                              seed=seed)  # fmt: skip
            if lore_in_system(lore) or self._macros or scene is not self.scene:  # this turn's own system prompt
                try:
                    rendered = scene.render_system(lore=lore, seed=turn_seed(seed, scan_history))
                except CharfmtError as e:
                    raise BadTurn(str(e)) from None
                own = f"{rendered.rstrip()}\n\n{self.note}\n"
            head = f"{own.rstrip()}\n\n{system}\n" if system else own
            closing = [request, after]
            return self._scene_messages(head, budget, history, turn, system=system, lore=lore, closing=closing,
                                        tail=tail), lore  # fmt: skip
        try:
            parts = turn_parts(
                _named(self.character, user_name), scan_history, scanned, lorebooks=self.lorebooks,
                counter=self.counter, budget=budget, seed=seed,
            )  # fmt: skip
        except MacroError as e:
            raise BadTurn(str(e)) from None
        closing = [request, post_history(parts), after]  # (the card's post-history, then the front end's)

        def build(lore: Activation | None, *, fitted: bool = True) -> list[Message]:  # (lore: all, or less of it)
            held = with_lore(parts, lore)
            mine = own  # macros or lore in the system prompt: this turn's own
            if held.character is not self.character or lore_in_system(lore):
                mine = f"{system_of(held)[0].rstrip()}\n\n{self.note}\n"
            head = f"{mine.rstrip()}\n\n{system}\n" if system else mine
            return self._messages(head, history, turn, extra=lore_extras(lore), closing=closing, tail=tail,
                                  budget=budget, reserve=reserve, system=system, fitted=fitted)  # fmt: skip

        try:  # (lore that does not fit with the newest exchange is cut, lowest order first: CF947)
            return fit_lore(parts.lore, build, budget=budget)
        except BudgetError:
            try:
                build(parts.lore, fitted=False)  # (raises ``BadTurn``: what did not fit, its parts counted)
            except BadTurn as e:
                placed = len(parts.lore.placed) if parts.lore is not None else 0
                cut = f"; {placed} lore entries are counted in it, and with all of them cut it still does not fit"
                raise BadTurn(f"{e}{cut if placed else ''}") from None
            raise

    def _messages(
        self, head: str, history: list[Exchange], turn: UserTurn | None, *, extra: list[Extra], closing: list[str],
        tail: list[Message], budget: int, reserve: int, system: str | None, fitted: bool = False,
    ) -> list[Message]:  # fmt: skip
        """The request's messages, the oldest exchanges left out to fit ``budget``; where not even the turn alone
        fits, ``BudgetError`` (``fitted``: for ``fit_lore`` to cut lore and try again), else ``BadTurn``."""
        from charfmt.prompt.render import BudgetError, chat_turns, render_user_block, turn_message  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

        stamp = _stamp(self._user_template)
        if stamp != self._user_stamp:  # user.j2 changed: every past exchange renders anew
            self._past.clear()
            self._said.clear()
            self._user_stamp = stamp
        said = render_user_block(turn, templates=STUB) if turn is not None else ""  # (render_messages's steps)
        if stamp is not None and turn is not None:  # past exchanges' texts kept
            self._said[id(turn)] = (turn, said)
            if len(self._said) > PAST_KEPT:
                self._said.popitem(last=False)
        last = turn_message(said, *closing)
        pairs = [self._texts(exchange) for exchange in history]

        def build(start: int) -> list[Message]:
            turns = chat_turns(pairs[start:], last, extra)  # (a greeting alone; lore at a depth)
            return [{"role": "system", "content": head}, *({"role": r, "content": t} for r, t in turns), *tail]

        try:
            return fit_messages(build, len(pairs), budget=budget, counter=self.counter)[1]
        except BudgetError:
            if fitted:
                raise
            raise BadTurn(self._too_long(build(len(pairs)), budget, reserve, system)) from None

    def _too_long(self, messages: list[Message], budget: int, reserve: int, system: str | None) -> str:
        """What did not fit: the whole request's tokens, each part's, and what the budget is."""

        count = self.counter
        head = messages[0]["content"]  # (this turn's: its lore and macros in it, the front end's text after it)
        own = count(head[: head.rindex(system)] if system and system in head else head)
        parts = {"charfmt's system prompt": own, "the front end's system text": count(system) if system else 0}
        rest = messages[1:]  # (no past exchange is left when the turn does not fit: lore at a depth, the turn)
        parts["lore at a depth"] = sum(count(m["content"]) for m in rest if m["role"] == "system")
        parts["the player's turn"] = sum(count(m["content"]) for m in rest if m["role"] != "system")
        total = count_messages(count, messages)
        parts["the messages' framing"] = total - sum(parts.values())  # (a chat template's own tokens)
        shown = ", ".join(f"{what} {n}" for what, n in parts.items() if n > 0 or what == "the player's turn")
        schema = f", less {reserve} for the reply's schema the upstream counts" if reserve else ""
        return (
            f"the turn does not fit the context window: the request needs {total} tokens"
            f" ({shown}; counted by {count.name}); the prompt's budget is {budget}"
            f" (the window less the reply's tokens{schema})"
        )

    def _texts(self, exchange: Exchange) -> tuple[str, str]:
        """A past exchange's user block and reply as ``render_messages`` writes them; rendered once."""
        kept = self._past.get(id(exchange))
        if kept is not None and kept[0] is exchange:
            self._past.move_to_end(id(exchange))
            return kept[1]
        from charfmt.prompt.render import history_reply, render_user_block  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)

        said = self._said.pop(id(exchange.user), None)  # (its turn's own rendering, where this server made it)
        user = (
            said[1]
            if said is not None and said[0] is exchange.user
            else render_user_block(exchange.user, templates=STUB)
        )
        texts = user if exchange.user.chats else "", history_reply(exchange.reply, self.character.tags)
        if self._user_stamp is None:  # user.j2 unreadable (rendering says so): nothing kept
            return texts
        self._past[id(exchange)] = (exchange, texts)
        if len(self._past) > PAST_KEPT:
            self._past.popitem(last=False)
        return texts

    def _scene_messages(
        self, head: str, budget: int, history: list[Exchange], turn: UserTurn | None, *, system: str | None,
        lore: Activation | None, closing: list[str], tail: list[Message],
    ) -> list[Message]:  # fmt: skip
        assert self.scene is not None
        from charfmt.prompt.render import BudgetError, at_depth, lore_extras, turn_message  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)
        from charfmt.prompt.userinput import UserTurn  # noqa: PLC0415 (import cost: lark, regex load on first use)

        scene = self.scene
        extra = lore_extras(lore)

        def build(start: int) -> list[Message]:
            rest: list[Message] = scene.render_messages(history[start:], turn or UserTurn(), templates=STUB)["messages"]
            said = rest[-1]["content"] if turn is not None else ""  # (no turn: what is asked alone)
            turns = [(m["role"], m["content"]) for m in rest[1:-1]]
            turns.append(("user", turn_message(said, *closing)))
            placed = at_depth(turns, extra)  # (lore at a depth, counted from the turn's message)
            return [{"role": "system", "content": head}, *({"role": r, "content": t} for r, t in placed), *tail]

        try:
            return fit_messages(build, len(history), budget=budget, counter=self.counter)[1]
        except BudgetError:
            raise BadTurn(self._too_long(build(len(history)), budget, 0, system)) from None


_ALSO: Final = ("context.j2", "continue.j2", "impersonate.j2")
"""The templates a turn renders beside the system prompt's and ``user.j2``: the player's context (``user.j2``
includes it) and what a front end may ask beyond a turn (``charfmt.serve.continuation``); sources of the
prompt's version too."""

_Named = TypeVar("_Named", "Character", "Scene")


def _named(who: _Named, user_name: str | None) -> _Named:
    """``who`` (a character or a scene) with the player called ``user_name`` (itself where that is its own)."""
    if user_name is None or user_name == who.user_name:
        return who
    return who.model_copy(update={"user_name": user_name})


def _read(path: Path) -> str:
    """A template file's text, for the prompt's version (``""`` where it cannot be read: rendering says why)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _stamp(path: Path) -> tuple[int, int] | None:
    """A template file's modification time and size (``None`` where it cannot be read: render each time)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size
