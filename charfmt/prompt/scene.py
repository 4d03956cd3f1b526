"""A scene: several characters in one reply, each chat naming its speaker, plus a narrator.

A ``Scene`` is a cast (speaker id → ``Character``: each its own vocabulary, actions, tags,
stage map and voice) and a narrator (the ``I``/``E`` chats, spoken with ``narrator`` where a
voice is given). The model writes one reply for the whole scene; each ``C`` chat names its
speaker::

    {"chats": [{"type": "C", "order": 1, "speaker": "rex", "body": "<emo>annoyed</emo>\\n<msg>No.</msg>"},
               {"type": "E", "order": 2, "body": "The door creaks."},
               {"type": "C", "order": 3, "speaker": "mio", "body": "<emo>joy</emo>\\n<msg>やった！</msg>"}]}

``Scene.parse`` reads it strictly (each speaker's emotions against *its* vocabulary; an
off-cast speaker is ``CF307``, an unknown emotion ``CF306``, a ``C`` chat without a speaker
``CF308``) or leniently (the same as ``CF309`` warnings, kept as written). ``Scene.grammar`` and
``Scene.json_schema`` restrict ``speaker`` to the cast; ``Scene.render_system`` presents the
cast with the scene's few-shots; ``Scene.stage`` is a stage reader that maps each speaker's
cues with its own stage map. A reply without speakers is read exactly as a single character's.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Unpack

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from charfmt._strict.envelope import Locator
from charfmt.constrain.schema import PROVIDERS, json_schema
from charfmt.diagnostics import CharfmtError, Diagnostic, ParseError, in_body
from charfmt.models import Chat, Reply, Vocabulary, error_message
from charfmt.parser import DEFAULT_MAX_SIZE, parse
from charfmt.prompt._card_prompt import LORE_SHARE, card_books, cast_expanded, fit_lore, merged, turn_seed
from charfmt.prompt._token_fit import fit_messages
from charfmt.prompt.cards import is_card
from charfmt.prompt.character import (
    MAX_FILE_SIZE,
    Character,
    CharacterError,
    Exchange,
    Fail,
    character_errors,
    check_table,
    decode_file,
    read_bytes,
    toml_data,
)
from charfmt.prompt.lorebook import DEFAULT_BUDGET, Activation, Lorebook, LorebookError, checked_books
from charfmt.prompt.macros import MacroError, Macros
from charfmt.prompt.userinput import UserTurn, parse_shorthand, read_turn
from charfmt.stage import NARRATOR, StageReader
from charfmt.stagemap import Voice
from charfmt.tags import DEFAULT_TAGS, TAGGED_TYPES, TagSpec, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.render import RenderedTurn, RenderKeywords

__all__ = [
    "MAX_CAST",
    "SPEAKER_ID",
    "Scene",
    "cast_actions",
    "player_vocabulary",
    "speaker_id_problem",
]

_STRICT_CODES: Final = {"speaker": "CF307", "emotion": "CF306", "missing": "CF308"}
"""What each problem of a scene is in strict parsing; lenient parsing reports each as ``CF309``."""


def _render_turn(
    scene: Scene, history: Sequence[Exchange], user_turn: UserTurn | str, options: RenderKeywords
) -> RenderedTurn:
    """``Scene.render_turn``'s request (its docstring says what it holds)."""
    from charfmt.prompt.render import (  # noqa: PLC0415 (import cost: jinja2 loads on first use)
        ESTIMATE,
        RenderedTurn,
        RenderKeywords,
        chat_turns,
        check_turn_options,
        checked_keywords,
        history_reply,
        lore_extras,
        placed_after,
        provider_request,
        render_user_block,
        turn_of,
    )

    checked_keywords("Scene.render_turn", options, RenderKeywords)
    provider = options.get("provider", "openai")
    if provider not in PROVIDERS:
        raise CharfmtError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    check_turn_options(history, options)
    history = list(history)
    turn = turn_of(user_turn, scene)
    templates, budget, seed = options.get("templates"), options.get("budget"), options.get("seed")
    counter = options.get("counter", ESTIMATE)
    lore = scene.lore(history, turn, lorebooks=options.get("lorebooks", ()), counter=counter, budget=budget,
                     seed=seed)  # fmt: skip
    pairs = [
        (render_user_block(ex.user, templates=templates) if ex.user.chats or provider != "openai" else "",
         history_reply(ex.reply, scene.tags))
        for ex in history
    ]  # fmt: skip
    said = render_user_block(turn, templates=templates)
    notes: list[Diagnostic] = []

    def build(held: Activation | None) -> tuple[str, list[tuple[str, str]]]:  # (lore: all, or less of it)
        placed = held if provider == "openai" else placed_after(held, provider, [])
        system = scene.render_system(templates=templates, lore=placed, seed=turn_seed(seed, history),
                                    now=options.get("now"))  # fmt: skip
        extra = lore_extras(held) if provider == "openai" else []

        def messages(start: int) -> list[dict[str, str]]:
            turns = chat_turns(pairs[start:], said, extra)
            return [{"role": "system", "content": system}, *({"role": r, "content": t} for r, t in turns)]

        start = 0 if budget is None else fit_messages(messages, len(pairs), budget=budget, counter=counter)[0]
        return system, chat_turns(pairs[start:], said, extra)

    (system, turns), held = (build(lore), lore) if budget is None else fit_lore(lore, build, budget=budget)
    if provider != "openai":
        placed_after(held, provider, notes, after="the cast")
    notes += _unsent(scene)
    schema = scene.json_schema(provider) if options.get("structured", False) else None
    diagnostics = [*(held.diagnostics if held is not None else []), *notes]
    return RenderedTurn(provider_request(provider, system, turns, schema), held, diagnostics)


def _unsent(scene: Scene) -> list[Diagnostic]:
    """``CF933`` for each member card whose ``system_prompt`` or ``post_history_instructions`` a scene's prompt
    leaves out (one system prompt for the whole cast)."""
    notes = []
    for who, member in scene.cast.items():
        data = member.card.data if member.card is not None else {}
        fields = [k for k in ("system_prompt", "post_history_instructions") if str(data.get(k) or "").strip()]
        if fields:
            said = " and ".join(fields)
            notes.append(Diagnostic.at("", "CF933", f"cast {who!r}: its card's {said} not sent (one prompt for the"
                                       " cast: put what they say in the scene's setting)", 0))  # fmt: skip
    return notes


def cast_actions(cast: Mapping[str, Character]) -> list[str]:
    """Every cast member's listed actions, in cast order, each once."""
    return list(dict.fromkeys(a for c in cast.values() for a in c.actions))


def player_vocabulary(cast: Mapping[str, Character]) -> Vocabulary:
    """The emotion words a scene's player may use: every member's keys, and each alias as the key of the first
    member (in cast order) that lists it; an alias that is another member's key is that key.

    The player is no member, so no one vocabulary is theirs: ``[anger]`` is a key of one member, ``[angry]``
    the first member's key it names. A word no member knows stays text (``CF401``), as for one character.
    """
    keys = {e.key.casefold() for c in cast.values() for e in c.vocabulary.emotions}
    taken: set[str] = set()
    emotions = []
    for member in cast.values():
        for emotion in member.vocabulary.emotions:
            if emotion.key.casefold() in taken:
                continue
            taken.add(emotion.key.casefold())
            aliases = [a for a in emotion.aliases if a.casefold() not in keys and a.casefold() not in taken]
            taken.update(a.casefold() for a in aliases)
            emotions.append(emotion.model_copy(update={"aliases": aliases}))
    return Vocabulary(emotions=emotions)


def _union_tags(cast: dict[str, Character]) -> TagTable:
    """One table holding every cast member's tags (a tag two members declare differently is an error).

    A tag one member declares takes its words from the default tags' synonyms for everyone
    (``<motion>`` a cue of one member's: ``motion`` is no longer the other members' ``<act>``), so
    two members' tables that differ only by such a word agree.
    """
    table = DEFAULT_TAGS
    for character in cast.values():
        added = [spec for spec in character.tags if table.get(spec.name) is None]
        if added:
            table = table.extend(*added)
    owner: dict[str, str] = {}  # (the first member to declare a tag: the table holds its, or the default's)
    for who, character in cast.items():
        for spec in character.tags:
            owner.setdefault(spec.name, who)
    for who, character in cast.items():
        for spec in character.tags:
            have = table.get(spec.name)
            if have is not None and (mine := _meaning(spec, table)) != (theirs := _meaning(have, table)):
                other = (
                    f"the default <{spec.name}>"
                    if DEFAULT_TAGS.get(spec.name)
                    else f"the <{spec.name}> of cast {owner[spec.name]!r}"
                )
                differ = [f"{name} {a!r} here, {b!r} there" for name, a, b in zip(_MEANING, mine, theirs, strict=True)
                          if a != b]  # fmt: skip
                raise ValueError(f"cast {who!r}: tag <{spec.name}> differs from {other}: {'; '.join(differ)}")
    return table


_MEANING: Final = ("name", "role", "description", "values", "synonyms", "prefixes")
"""What ``_meaning`` compares, in its order (named in the error of two members' tags that differ)."""


def _meaning(spec: TagSpec, table: TagTable) -> tuple[Any, ...]:
    """What ``spec`` says, but for the words another tag of ``table`` holds (a synonym moved to a new tag)."""
    others = [t for t in table if t.name != spec.name]
    named = {w for t in others for w in (t.name, *t.synonyms)}
    marked = named | {w for t in others for w in t.prefixes}
    synonyms = frozenset(spec.synonyms) - named
    prefixes = frozenset(spec.prefixes) - marked
    return spec.name, spec.role, spec.description, spec.values, synonyms, prefixes


class Scene(BaseModel):
    """Several characters in one reply, plus a narrator; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("Scene", min_length=1)
    """What the scene is called (the system prompt names it)."""
    setting: str = ""
    """Where and when it happens, and what is going on (goes into the system prompt)."""
    cast: dict[str, Character] = Field(min_length=1)
    """Speaker id (what ``"speaker"`` holds) → the character."""
    narrator: Voice | None = None
    """The voice ``I``/``E`` chats are spoken with by the stage (``None``: not spoken)."""
    user_name: str = "User"
    """What the prompt calls the player."""
    language: str = "en"
    """Language tag of the replies."""
    examples: list[Exchange] = Field(default_factory=list)
    """Few-shot exchanges for the whole scene (replies with speakers)."""
    lorebook: Lorebook | None = None
    """The scene's own lorebook (``lorebook = "FILE"``): scanned every turn with the cast's."""
    cast_lorebooks: dict[str, Lorebook] = Field(default_factory=dict)
    """A cast member's lorebook (``[[cast]] lorebook = "FILE"``), by speaker id, beside its card's own book."""

    @model_validator(mode="after")
    def _check(self) -> Scene:
        if len(self.cast) > MAX_CAST:
            raise ValueError(f"a cast of {len(self.cast):,} members: a scene has at most {MAX_CAST}")
        for who in self.cast:
            if (problem := speaker_id_problem(who)) is not None:
                raise ValueError(problem)
        _union_tags(self.cast)
        for n, example in enumerate(self.examples):
            problems = self.check(example.reply)
            if problems:
                raise ValueError(f"example {n}: {problems[0].message}")
        return self

    @cached_property
    def tags(self) -> TagTable:
        """Every tag of the cast, in one table (what the reply's bodies are read with)."""
        return _union_tags(self.cast)

    @cached_property
    def _vocabularies(self) -> dict[str, Vocabulary]:
        """Each speaker's vocabulary, built once (``Character.vocabulary`` builds one per use)."""
        return {who: character.vocabulary for who, character in self.cast.items()}

    @property
    def speakers(self) -> list[str]:
        """The speaker ids, in cast order."""
        return list(self.cast)

    @property
    def members(self) -> dict[str, Character]:
        """Who speaks, by speaker id: the cast (``charfmt.prompt.cast.Cast``, as ``Character.members``)."""
        return self.cast

    @property
    def vocabulary(self) -> Vocabulary:
        """Every emotion key of the cast (keys only): what a grammar lets the emotion tag hold."""
        keys = dict.fromkeys(key for c in self.cast.values() for key in c.vocabulary.keys)
        return Vocabulary.of(*keys)

    @cached_property
    def player_vocabulary(self) -> Vocabulary:
        """The emotion words the player's shorthand knows (``Scene.shorthand``): ``player_vocabulary(cast)``."""
        return player_vocabulary(self.cast)

    @cached_property
    def actions(self) -> list[str]:
        """Every cast member's listed actions, in cast order (what the player's ``*...*`` is matched with)."""
        return cast_actions(self.cast)

    def shorthand(self, text: str) -> UserTurn:
        """``parse_shorthand`` with the whole cast's words: ``player_vocabulary``, ``actions`` and ``tags``."""
        return parse_shorthand(text, vocabulary=self.player_vocabulary, actions=self.actions, tags=self.tags)

    def read_turn(self, say: str, *, context: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> UserTurn:
        """``read_turn`` with the whole cast's words: shorthand or a user block, ``context`` its ``[User Context]``."""
        return read_turn(say, vocabulary=self.player_vocabulary, actions=self.actions, tags=self.tags, context=context)

    @cached_property
    def reading_vocabulary(self) -> Vocabulary:
        """Every emotion word of the cast, each key and alias its own key: what a lenient read is told.

        The reader then knows a word of the cast alone on a line (an emotion, not speech) and a
        bracket that names none (text), and keeps each as written: which member's key a word is,
        ``check`` decides per speaker. ``Scene.parse`` passes it; pass it to a ``StreamParser``
        or ``charfmt.parse`` of a scene's reply (``vocabulary=scene.reading_vocabulary``).
        """
        words = {w.strip().casefold(): w.strip() for c in self.cast.values() for e in c.vocabulary.emotions
                 for w in (e.key, *e.aliases) if w.strip()}  # fmt: skip
        return Vocabulary.of(*words.values(), policy="error")

    @cached_property
    def own_prompt(self) -> str:
        """The scene's system prompt, as a lenient read is told it where the caller gives none (``Scene.parse``;
        tell a ``StreamParser`` of a scene's reply the same, ``prompt=scene.own_prompt``)."""
        return self.render_system()

    # --- reading ---------------------------------------------------------------------------------

    def parse(
        self,
        text: str | bytes,
        *,
        lenient: bool = False,
        turn: UserTurn | str | Sequence[str] | None = None,
        prompt: str | Sequence[str | Mapping[str, Any]] | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
    ) -> Reply:
        """Read a scene's reply: each speaker in the cast, each emotion in its speaker's vocabulary.

        Strict: raises ``ParseError`` with every problem (``CF306``-``CF308`` and the format's own);
        lenient: never raises, each scene problem a ``CF309`` warning, kept as written. ``turn``,
        ``prompt`` and ``max_size``: as ``charfmt.parse`` takes them.
        """
        vocabulary = self.reading_vocabulary if lenient else None
        if lenient and prompt is None:  # told its own prompt, the reader knows the cast (``Mio:`` names a speaker)
            prompt = self.own_prompt
        reply = parse(text, lenient=lenient, vocabulary=vocabulary, tags=self.tags, turn=turn, prompt=prompt,
                      max_size=max_size)  # fmt: skip
        source = text if isinstance(text, str) else bytes(text).decode("utf-8", errors="replace")
        problems = self.check(reply, source, lenient=lenient)
        if not problems:
            return reply
        if not lenient:
            raise ParseError(sorted(problems, key=lambda d: (d.offset, d.end)), source)
        diagnostics = sorted([*reply.diagnostics, *problems], key=lambda d: (d.offset, d.end))
        return reply.model_copy(update={"diagnostics": diagnostics})

    def check(self, reply: Reply, source: str = "", *, lenient: bool = False) -> list[Diagnostic]:
        """The scene's problems in ``reply`` (``source``: the raw text, for positions): speakers and emotions.

        For a stream, check ``StreamParser.reply`` once it is closed.
        """
        where = _Places(source)
        out: list[Diagnostic] = []
        emotion = self.tags.emotion.name

        def problem(kind: str, message: str, chat: Chat, key: str) -> None:
            code = "CF309" if lenient else _STRICT_CODES[kind]
            index = where.index(chat)
            start, end = where.span(index, key)
            text = in_body(index, message) if key == "body" and index is not None else message
            out.append(Diagnostic.at(source, code, text, start, end, chat=index))

        for chat in reply.chats:
            if chat.type not in TAGGED_TYPES:
                if chat.speaker is not None and chat.speaker not in self.cast:
                    problem(
                        "speaker", f"speaker {chat.speaker!r} is not one of {', '.join(self.cast)}", chat, "speaker"
                    )
                continue
            if chat.speaker is None:
                if len(self.cast) > 1:
                    problem("missing", f"a C chat names no speaker; the cast is {', '.join(self.cast)}", chat, "body")
                    continue
                who = next(iter(self.cast))
            elif chat.speaker not in self.cast:
                problem("speaker", f"speaker {chat.speaker!r} is not one of {', '.join(self.cast)}", chat, "speaker")
                continue
            else:
                who = chat.speaker
            vocabulary = self._vocabularies[who]
            for seg in chat.segments:
                if seg.tag == emotion and vocabulary.resolve(seg.text) is None:
                    keys = ", ".join(vocabulary.keys)
                    problem("emotion", f"emotion {seg.text!r} is not one of {who}'s: {keys}", chat, "body")
        return out

    # --- exports ---------------------------------------------------------------------------------

    def grammar(self, target: str, **bounds: Any) -> str:
        """``charfmt.grammar`` for the scene: the cast's tags, ``speaker`` one of the cast, and each speaker's
        emotion one of its own keys; a ``max_tokens`` budget planned from the scene's examples."""
        from charfmt.constrain.export import grammar  # noqa: PLC0415 (Lark loads only for grammars)

        return grammar(target, character=self, **bounds)

    def json_schema(self, provider: str | None = None, **bounds: Any) -> dict[str, Any]:
        """``charfmt.json_schema`` for the scene: ``speaker`` one of the cast, one ``C`` chat schema per
        speaker with its own emotions."""

        return json_schema(provider, character=self, **bounds)

    def stage(self, *, max_length: int | None = None, bound: int | None = None) -> StageReader:
        """A stage reader for the scene: each speaker's cues mapped by its own stage map and voice
        (``bound``: the grammar's most characters of speech, see ``StageReader``)."""
        return StageReader(cast=self.cast, narrator=self.narrator, max_length=max_length, bound=bound)

    # --- prompts ---------------------------------------------------------------------------------

    def render_system(
        self,
        *,
        templates: str | Path | None = None,
        lore: Activation | None = None,
        seed: int | str | None = None,
        now: datetime | None = None,
    ) -> str:
        """The scene's system prompt (``prompts/scene.j2``): the cast, each with its emotions, and the few-shots;
        ``lore``: a turn's lore (``Scene.lore``), before and after the cast.

        Each member's macros are expanded as a single character's are (``{{char}}`` that member,
        ``{{user}}`` the scene's ``user_name``); ``seed`` and ``now``: the rolls and the clock
        (``charfmt.prompt.macros``). A ``CharfmtError`` (``CF929``) where expansion passes its bound.
        """
        from charfmt.prompt.render import (  # noqa: PLC0415 (Jinja only when rendering)
            TemplateError,
            render_template,
            template_folder,
            template_view,
        )

        before = "\n".join(lore.texts("before")) if lore is not None else ""
        after = "\n".join(lore.texts("after")) if lore is not None else ""
        try:
            cast = cast_expanded(self.cast, Macros(self.name, self.user_name, seed=seed, now=now), [])
        except MacroError as e:
            raise TemplateError(str(e)) from None
        same = all(cast[who] is member for who, member in self.cast.items())
        scene = self if same else self.model_copy(update={"cast": cast})
        return render_template(
            "scene.j2",
            template_folder(templates),
            scene=template_view(scene),
            tags=self.tags,
            lore_before=before,
            lore_after=after,
        )

    def lore(
        self,
        history: Sequence[Exchange],
        turn: UserTurn,
        *,
        lorebooks: Sequence[Lorebook] = (),
        counter: Callable[[str], int] | None = None,
        budget: int | None = None,
        seed: int | str | None = None,
    ) -> Activation | None:
        """The lore ``turn`` activates: each cast member's books (its card's, its ``cast_lorebooks``; ``{{char}}``
        is that member), then the scene's and ``lorebooks``, scanned as ``charfmt.prompt.lorebook`` says."""

        from charfmt.prompt.render import estimate_tokens  # noqa: PLC0415 (import cost: jinja2 loads on first use)

        books = [*self.scanned_books, *(b for b in checked_books(lorebooks) if b.entries)]
        if not books:
            return None
        seeded = turn_seed(seed, history)
        macros = Macros(self.name, self.user_name, seed=seeded)
        rng = random.Random(f"lore/{seeded}") if seeded is not None else random.Random()
        share = max(1, budget // LORE_SHARE) if budget is not None else DEFAULT_BUDGET
        book = merged(books)
        lore = book.activate(
            self.scan_messages(history, turn), counter=counter or estimate_tokens, budget=share, rng=rng, macros=macros
        )
        lore.diagnostics[:0] = [d for d in book.diagnostics if d.code == "CF946"]  # (a book given twice: said)
        return lore

    @cached_property
    def scanned_books(self) -> list[Lorebook]:
        """The cast's books (each member's card book and ``cast_lorebooks``, ``{{char}}`` that member), the scene's."""

        books: list[Lorebook] = []
        for who, member in self.cast.items():
            for book in (*card_books(member), self.cast_lorebooks.get(who)):
                if book is not None and book.entries:
                    books.append(book.spoken_by(member.name, book.name or who))
        return [*books, *([self.lorebook] if self.lorebook is not None and self.lorebook.entries else [])]

    def scan_messages(self, history: Sequence[Exchange], turn: UserTurn) -> list[str]:
        """What lore keys are matched in, newest first: each speaker's lines as ``Name: text`` (the narrator's bare)."""
        keys = frozenset(spec.name for spec in self.tags if spec.content == "key")

        def said(chats: Sequence[Any]) -> str:
            return " ".join(s.text for chat in chats for s in chat.segments if s.tag not in keys)

        out = [f"{self.user_name}: {said(turn.chats)}"] if turn.chats else []  # (no turn: none, as _card_prompt)
        for exchange in reversed(history):
            lines = []
            for chat in exchange.reply.chats:
                member = self.cast.get(chat.speaker or "")
                words = said([chat])
                lines.append(f"{member.name}: {words}" if member is not None else words)
            out.append("\n".join(lines))
            if exchange.user.chats:
                out.append(f"{self.user_name}: {said(exchange.user.chats)}")
        return out

    def render_messages(
        self,
        history: Sequence[Exchange],
        turn: UserTurn,
        *,
        templates: str | Path | None = None,
        lore: Activation | None = None,
        seed: int | str | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """An OpenAI-style request body: the scene's system prompt, the history, the new turn.

        Past replies go back as ``charfmt.render_messages`` writes them: canonical, with the
        chat-template control strings they hold escaped (the same function writes both). ``lore``
        (``Scene.lore``): before and after the cast, and at its depth among the messages; ``seed``
        and ``now``: the cast's macros' rolls and clock (the same seed and history, the same turn).
        """
        from charfmt.prompt.render import chat_turns, history_reply, render_user_block  # noqa: PLC0415 (import cost: jinja2 loads on first use)
        from charfmt.prompt.render import lore_extras as extras  # noqa: PLC0415 (import cost: jinja2 loads on first use)

        pairs = [
            (
                render_user_block(ex.user, templates=templates) if ex.user.chats else "",
                history_reply(ex.reply, self.tags),
            )
            for ex in history
        ]
        said = render_user_block(turn, templates=templates)
        turns = chat_turns(pairs, said, extras(lore))
        system = self.render_system(templates=templates, lore=lore, seed=turn_seed(seed, history), now=now)
        return {"messages": [{"role": "system", "content": system}, *({"role": r, "content": t} for r, t in turns)]}

    def render_turn(
        self, history: Sequence[Exchange], user_turn: UserTurn | str, **options: Unpack[RenderKeywords]
    ) -> RenderedTurn:
        """``charfmt.render_turn`` for a scene, with the same keywords: the request, the lore, what was noted.

        The system prompt (``render_system``), the newest exchanges that fit ``budget`` (then lore cut, lowest
        order first, ``CF947``), the turn (a ``UserTurn``, or a line in the first cast member's shorthand).
        ``Scene.lore``'s lore goes before and after the cast and at its depth (other providers than ``openai``:
        after the cast, ``CF945``); ``structured`` adds ``Scene.json_schema``. One system prompt for the cast:
        the members' cards' ``system_prompt`` and ``post_history_instructions`` are not sent.
        """
        return _render_turn(self, history, user_turn, options)

    # --- files -----------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, *, max_size: int = MAX_FILE_SIZE, user_name: str | None = None) -> Scene:
        """A scene from TOML: ``name``, ``setting``, ``[[cast]]`` (``id``, ``character`` = a file beside it),
        ``[narrator]`` (a voice), ``[[examples]]`` (``user``, ``[[examples.reply]]`` with type, speaker, body).

        ``user_name``: the player's name (``None``: the file's ``user_name``, if any); every cast member
        calls the player by it (a card's ``{{user}}``), as the scene's prompt does.

        The scene file and each cast file are read as a character file is (at most ``max_size``
        bytes each: ``/dev/zero`` or an endless pipe ends there); every problem is a
        ``CharacterError`` naming the file, the key and its line.
        """
        path = Path(path)
        file = str(path)
        with character_errors(file):
            raw = read_bytes(path, max_size)
            if is_card(raw):
                raise CharacterError(file, "", None, "a character card, not a scene: load it with Character.load"
                                     " (--character), or name it in a scene's [[cast]]")  # fmt: skip
            data, fail = toml_data(decode_file(raw, file), file)
            if "persona" in data and "cast" not in data:  # (one line, not a line per key a scene lacks)
                raise fail(("persona",), "a character file, not a scene: load it with Character.load (--character),"
                           " or name it in a scene's [[cast]]")  # fmt: skip
            check_table(data, _SCENE_KEYS, (), fail)
            if user_name is not None:
                data["user_name"] = user_name
            player = data.get("user_name") if isinstance(data.get("user_name"), str) else None
            cast, books = _load_cast(data.pop("cast", None), path.parent, max_size, fail, player)
            if books:
                data["cast_lorebooks"] = books
            if data.get("lorebook") is not None:
                data["lorebook"] = _lorebook(path.parent, data["lorebook"], ("lorebook",), max_size, fail)
            examples = _load_examples(data.pop("examples", []), cast, fail)
            try:
                return cls.model_validate({**data, "cast": cast, "examples": examples})
            except ValidationError as e:
                err = e.errors()[0]
                raise fail(tuple(err["loc"]), error_message(err)) from None


MAX_CAST: Final = 64
"""The most members a scene's cast may have."""
SPEAKER_ID: Final = re.compile(r"[A-Za-z0-9._@+/=-]{1,128}")
"""What a speaker id may hold: a session key's alphabet (``charfmt.store.base.NAME``) without ``:``.

A ``tags`` reply starts each line with ``id: ``, so an id holds no format marker (``[``, ``*``,
``:``, ``<``), no space and nothing a log or a terminal would show otherwise."""


def speaker_id_problem(who: Any) -> str | None:
    """Why ``who`` cannot be a speaker id (``None``: it can)."""
    if not isinstance(who, str):
        return f"a speaker id is a string, not {type(who).__name__}"
    if who.casefold() == NARRATOR:
        return f"speaker id {who!r} is the narrator's (the I and E chats): give the cast member another id"
    if SPEAKER_ID.fullmatch(who) is None:
        return (
            f"speaker id {who[:40]!r} must be 1 to 128 letters, digits and ._@+/=- (ASCII; no spaces and no"
            " format markers such as [ * : <)"
        )
    return None


def _load_cast(
    rows: Any, folder: Path, max_size: int, fail: Fail, player: str | None = None
) -> tuple[dict[str, Character], dict[str, Lorebook]]:
    """The ``[[cast]]`` tables: unique, well-formed ids, each member's file loaded once however often it is
    named (``player``: the scene's player name, each member's ``{{user}}``); and the members' own lorebooks
    (``lorebook = "FILE"``), by id."""
    if rows is None:
        raise fail(("cast",), 'a scene needs [[cast]] tables (id = "...", character = "FILE")')
    if not isinstance(rows, list):
        raise fail(("cast",), 'cast is a list of [[cast]] tables (id = "...", character = "FILE")')
    if len(rows) > MAX_CAST:
        raise fail(("cast",), f"a cast of {len(rows):,} members: a scene has at most {MAX_CAST}")
    if not rows:
        why = 'the cast is empty: a scene needs at least one [[cast]] table (id = "...", character = "FILE")'
        raise fail(("cast",), why)
    cast: dict[str, Character] = {}
    books: dict[str, Lorebook] = {}
    first: dict[str, int] = {}
    loaded: dict[str, Character] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise fail(("cast", i), 'a cast member is a [[cast]] table: id = "..." and character = "FILE"')
        check_table(row, (*_CAST_KEYS, "lorebook"), ("cast", i), fail)
        for key in _CAST_KEYS:
            if not isinstance(row.get(key), str):
                raise fail(("cast", i, key), f'a cast member needs {key} = "..." (a string)')
        who = row["id"]
        if (problem := speaker_id_problem(who)) is not None:
            raise fail(("cast", i, "id"), problem)
        if who in first:
            raise fail(("cast", i, "id"), f"id {who!r} is cast[{first[who]}]'s already: each member has its own id")
        first[who] = i
        member = folder / row["character"]
        key = os.path.realpath(member) if "\0" not in row["character"] else row["character"]
        if key not in loaded:
            try:
                loaded[key] = Character.load(member, max_size=max_size, user_name=player)
            except CharacterError as e:  # (the scene's line that names the file, then the file's own problem)
                raise fail(("cast", i, "character"), str(e)) from None
        cast[who] = loaded[key]
        if row.get("lorebook") is not None:
            books[who] = _lorebook(folder, row["lorebook"], ("cast", i, "lorebook"), max_size, fail)
    return cast, books


_CAST_KEYS: Final = ("id", "character")
"""What a ``[[cast]]`` table must hold (``lorebook`` it may)."""
_SCENE_KEYS: Final = ("name", "setting", "cast", "narrator", "user_name", "language", "examples", "lorebook")
"""What a scene file may hold at its top (``Scene``'s fields, but the lorebooks its cast names)."""


def _load_examples(rows: Any, cast: dict[str, Character], fail: Fail) -> list[Exchange]:
    """The ``[[examples]]`` tables as exchanges: the user's shorthand read with the whole cast's words (a word it
    would only warn about, an unknown ``[furious]``, is an error in a file, as in a character's)."""
    if not isinstance(rows, list):
        raise fail(("examples",), "examples is a list of [[examples]] tables (user, [[examples.reply]])")
    tags = _union_tags(cast)
    words = player_vocabulary(cast)
    actions = cast_actions(cast)
    examples = []
    for n, ex in enumerate(rows):
        if not isinstance(ex, dict) or not isinstance(ex.get("user"), str) or not isinstance(ex.get("reply"), list):
            raise fail(("examples", n), 'an example is user = "..." and [[examples.reply]] tables')
        check_table(ex, ("user", "reply"), ("examples", n), fail)
        chats = []
        for k, c in enumerate(ex["reply"]):
            where = ("examples", n, "reply", k)
            if not isinstance(c, dict) or not isinstance(c.get("body"), str):
                raise fail(where, 'a reply chat is a table with body = "..." (and type, speaker)')
            check_table(c, _REPLY_KEYS, where, fail)
            for key in ("type", "speaker"):
                if key in c and not isinstance(c[key], str):
                    raise fail((*where, key), f"{key} is a string, not {type(c[key]).__name__}")
            chats.append({"type": c.get("type", "C"), "order": k + 1, "body": c["body"],
                          **({"speaker": c["speaker"]} if "speaker" in c else {})})  # fmt: skip
        try:
            reply = parse(json.dumps({"chats": chats}, ensure_ascii=False), tags=tags)
        except ParseError as e:
            d = e.diagnostics[0]
            at = ("examples", n, "reply", d.chat) if d.chat is not None else ("examples", n)
            raise fail(at, f"{d.code} {d.message}") from None
        user = parse_shorthand(ex["user"], vocabulary=words, actions=actions, tags=tags)
        for d in user.diagnostics:
            raise fail(("examples", n, "user"), f"{d.code} {d.message.removesuffix('; kept as text')}")
        examples.append(Exchange(user=user, reply=reply))
    return examples


_REPLY_KEYS: Final = ("type", "speaker", "body")


def _lorebook(folder: Path, name: Any, loc: tuple[Any, ...], max_size: int, fail: Fail) -> Lorebook:
    """A lorebook file named in a scene (beside it), read as a character file is (at most ``max_size``
    bytes); its errors name the scene, the key and its line."""
    if not isinstance(name, str):
        raise fail(loc, 'a lorebook is a file name: lorebook = "FILE"')
    path = folder / name
    try:
        return Lorebook.from_bytes(read_bytes(path, max_size), path.stem, max_size=max_size)
    except CharacterError as e:
        raise fail(loc, f"{path}: {e.detail}") from None
    except LorebookError as e:
        raise fail(loc, f"{path}: {e}") from None


class _Places:
    """Where each chat of a reply stands in its raw text (JSON array index and key spans), when it is JSON.

    Found on first use: a reply without a problem never needs them.
    """

    def __init__(self, source: str) -> None:
        self.source = source

    @cached_property
    def _found(self) -> tuple[dict[int, int], Locator | None]:
        source = self.source
        by_order: dict[int, int] = {}
        try:
            top = json.loads(source) if source else None
        except ValueError:
            top = None
        if not (isinstance(top, dict) and isinstance(top.get("chats"), list)):
            return by_order, None
        for i, chat in enumerate(top["chats"]):
            if isinstance(chat, dict) and isinstance(chat.get("order"), int):
                by_order.setdefault(chat["order"], i)
        return by_order, Locator(source)

    def index(self, chat: Chat) -> int | None:
        return self._found[0].get(chat.order)

    def span(self, index: int | None, key: str) -> tuple[int, int]:
        locator = self._found[1]
        if locator is None or index is None:
            return 0, 0
        return locator.value(("chats", index, key))
