"""Damage like real models do, reproducibly: the mutations behind ``charfmt fuzz`` and ``charfmt.testing``.

Each mutation is a function of ``(text, rng)`` modelled on a failure seen in model output,
named where it is written (``@_rule``). ``damage`` applies a few of them and says which;
``check`` runs one input through every entry point and raises on any broken promise, among
them that a lenient result passes its own validators (``revalidate``); the fuzz harness and
the regression tests use it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from charfmt._dialect_names import DialectName
from charfmt.diagnostics import CharfmtError, ParseError
from charfmt.models import Chat, Reply, Segment, Vocabulary
from charfmt.stream import StreamParser, collect
from charfmt.tags import DEFAULT_TAGS, TEXT_TAG, TagTable
from charfmt.writer import dumps

Mutation = Callable[[str, random.Random], str]
WordMutation = Callable[[str, random.Random, TagTable, Vocabulary | None], str]
"""A mutation of the words a reply's language (tag table, vocabulary) allows: ``(text, rng, tags, vocabulary)``."""


@dataclass(frozen=True, slots=True)
class MutationRule:
    """One entry of the mutation tables: a name, what it does, and the dialect it drifts into."""

    name: str
    """Stable: ``charfmt fuzz`` output and tests refer to it."""
    mutate: Mutation
    dialect: DialectName | None = None
    """The dialect of the dialect table the reply is then written in; ``None`` for damage."""
    worded: WordMutation | None = None
    """For damage to the words (an emotion off the vocabulary, a cue value off its list): the mutation told the
    reply's tag table and vocabulary (``mutate`` is it for ``DEFAULT_TAGS`` and no vocabulary); else ``None``."""


_RULES: Final[list[MutationRule]] = []
"""Every mutation, in the order written below (``_rule`` enters each)."""


def _rule(name: str, dialect: DialectName | None = None) -> Callable[[Mutation], Mutation]:
    """Enter the mutation below in the tables as ``name`` (drifting into ``dialect``, for a dialect mutation)."""

    def enter(mutate: Mutation) -> Mutation:
        _RULES.append(MutationRule(name, mutate, dialect))
        return mutate

    return enter


_TAGS: Final = DEFAULT_TAGS
_EMO: Final = _TAGS.emotion.name
_SPEECH: Final = _TAGS.speech.name
_ACT: Final = _TAGS.action.name if _TAGS.action is not None else _SPEECH
_TAG_ALTERNATIVES: Final = "|".join(re.escape(name) for name in _TAGS.names)
"""Every tag of the table, as a regex alternative."""
_LONG_NAMES: Final = {spec.name: spec.synonyms[0] for spec in _TAGS if spec.synonyms}
"""The first synonym of each tag: the long name models write (``emotion`` for the emotion tag)."""
_LONG_EMO: Final = _LONG_NAMES.get(_EMO, _EMO)
_SPEECH_OPEN: Final = _TAGS.speech.open
_ELEMENT: Final = re.compile(r"<(" + _TAG_ALTERNATIVES + r")>([^<]*)</\1>")

_PROSE_BEFORE: Final = ["Sure! Here is the reply:\n", "Okay.\n", "以下が返答です。\n", "Here you go: "]
_PROSE_AFTER: Final = [
    "\nLet me know if you need anything else!",
    "\n\nI hope this helps.",
    "<|eot_id|>",
    "</s>",
    "<|im_end|>",
]
_REASONING: Final = [
    "<think>The user seems upset. Stay in character.</think>\n",
    "<think>\nplan: apologise {maybe}\n",
    "The player is happy.\n</think>\n",
    "###Thinking\nThey want the amulet.\n",
    "<|channel|>analysis<|message|>be kind<|end|><|start|>assistant<|channel|>final<|message|>",
]
_WORDS: Final = [
    "わあ、本当ですか！",
    "Hello there.",
    "3 < 5 & 7 > 2",
    'He said "hi".',
    "🎉✨",
    "مرحبا",
    "えっ…",
    "Okay!",
]


# --- damage: the reply stays in its dialect ---------------------------------------------


@_rule("truncate")
def _cut(text: str, rng: random.Random) -> str:
    return text[: rng.randint(0, len(text) - 1)] if text else text  # always shorter: a cut that cuts nothing is no cut


@_rule("fence")
def _fence(text: str, rng: random.Random) -> str:
    return rng.choice(["```json\n", "```\n", "```json"]) + text + rng.choice(["\n```", "```", ""])


@_rule("prose")
def _prose(text: str, rng: random.Random) -> str:
    return rng.choice(_PROSE_BEFORE) + text + rng.choice(["", *_PROSE_AFTER])


@_rule("reasoning")
def _reasoning(text: str, rng: random.Random) -> str:
    return rng.choice(_REASONING) + text


@_rule("unclosed-tag")
def _unclose(text: str, rng: random.Random) -> str:
    closers = list(re.finditer(r"</(" + _TAG_ALTERNATIVES + r")>", text))
    if not closers:
        return text
    m = rng.choice(closers)
    return text[: m.start()] + text[m.end() :]


@_rule("mismatched-tag")
def _mismatch(text: str, rng: random.Random) -> str:
    spoken = "|".join(re.escape(name) for name in (_SPEECH, _ACT))
    return re.sub(rf"</({spoken})>", lambda m: f"</{_EMO}>" if rng.random() < 0.5 else "</>", text, count=1)


@_rule("upper-case-tags")
def _upper(text: str, rng: random.Random) -> str:
    return re.sub(r"</?(" + _TAG_ALTERNATIVES + r")>", lambda m: m.group().upper(), text)


@_rule("long-tag-names")
def _long_names(text: str, rng: random.Random) -> str:
    return re.sub(
        r"<(/?)(" + _TAG_ALTERNATIVES + r")>",
        lambda m: f"<{m.group(1)}{_LONG_NAMES.get(m.group(2), m.group(2))}>",
        text,
    )


@_rule("missing-newlines")
def _no_newlines(text: str, rng: random.Random) -> str:
    return text.replace("\\n<", "<")


@_rule("single-quotes")
def _single_quotes(text: str, rng: random.Random) -> str:
    return text.replace('"', "'") if "'" not in text else text


@_rule("trailing-comma")
def _trailing_comma(text: str, rng: random.Random) -> str:
    return text.replace("}]}", "},]}", 1)


@_rule("unescaped-quote")
def _unescaped_quote(text: str, rng: random.Random) -> str:
    return text.replace('\\"', '"', 1) if '\\"' in text else text.replace(_SPEECH_OPEN, _SPEECH_OPEN + '"', 1)


@_rule("invalid-escape")
def _bad_escape(text: str, rng: random.Random) -> str:
    return text.replace(_SPEECH_OPEN, _SPEECH_OPEN + "\\[", 1)


@_rule("out-of-order")
def _out_of_order(text: str, rng: random.Random) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    chats = doc.get("chats") if isinstance(doc, dict) else None
    if not isinstance(chats, list) or len(chats) < 2:
        return text
    rng.shuffle(chats)
    if rng.random() < 0.5:
        chats[0]["order"] = chats[-1].get("order")  # and a repeated order
    return json.dumps(doc, ensure_ascii=False)


# --- words: the reply keeps its form, but says what its language does not allow ---------------


def _word_rule(name: str) -> Callable[[WordMutation], WordMutation]:
    """Enter the word mutation below in the tables as ``name`` (``mutate``: it for the default table, no vocabulary)."""

    def enter(worded: WordMutation) -> WordMutation:
        _RULES.append(MutationRule(name, lambda text, rng: worded(text, rng, _TAGS, None), None, worded))
        return worded

    return enter


WORD_DAMAGE_RATE: Final = 0.5
"""How often a draw's damage starts with each word mutation (``words_first``): models invent emotions and
cue values far more often than one mutation in ~27 would show (trial 7: 1 emotion off the vocabulary and
no cue value off its list in 300 draws)."""

_INVENTED_EMOTIONS: Final = (
    "happy", "excited", "nervous", "embarrassed", "smug", "curious", "flustered", "playful", "confused",
    "thoughtful", "嬉しい", "照れ",
)  # fmt: skip
"""Emotions models write that a character's vocabulary often lacks (an unknown key: ``CF301``)."""
_INVENTED_VALUES: Final = ("purple", "default", "none", "off", "blink", "pulse", "loud", "soft")
"""Cue values models invent in place of one of the list (``CF132``): colours, states, manners."""


def _replace_one(text: str, names: Sequence[str], rng: random.Random, word: Callable[[str, str], str | None]) -> str:
    """``text`` with the content of one element of a tag of ``names`` (chosen by ``rng``) made ``word(tag, content)``
    (the text unchanged where there is none, or ``word`` gives ``None``)."""
    if not names:
        return text
    alternatives = "|".join(re.escape(name) for name in names)
    found = list(re.finditer(rf"<({alternatives})>([^<]*)</\1>", text))
    if not found:
        return text
    m = rng.choice(found)
    new = word(m.group(1), m.group(2))
    return text if new is None else text[: m.start(2)] + new + text[m.end(2) :]


@_word_rule("emotion-off-vocabulary")
def _off_vocabulary(text: str, rng: random.Random, tags: TagTable, vocabulary: Vocabulary | None) -> str:
    """An emotion the vocabulary does not know (``happy`` where it lists ``joy``), as models invent them."""

    def word(_tag: str, key: str) -> str | None:
        known = {key.casefold(), *(k.casefold() for k in (vocabulary.keys if vocabulary is not None else ()))}
        off = [w for w in _INVENTED_EMOTIONS if w.casefold() not in known and (vocabulary is None or
               vocabulary.resolve(w) is None)]  # fmt: skip
        return rng.choice(off) if off else None

    return _replace_one(text, [tags.emotion.name], rng, word)


@_word_rule("cue-value-off-list")
def _off_list(text: str, rng: random.Random, tags: TagTable, vocabulary: Vocabulary | None) -> str:
    """A cue value off its tag's list (``<led>purple</led>`` where it lists red, green, blue), or a near miss
    (``door slam`` for ``door_slam``)."""

    def word(tag: str, value: str) -> str | None:
        allowed = {v.casefold() for v in tags[tag].values or ()}
        near = [value.replace("_", " "), value.replace("_", "-")] if "_" in value else []
        off = [w for w in (*near, *_INVENTED_VALUES) if w.casefold() not in allowed]
        return rng.choice(off) if off else None

    return _replace_one(text, [spec.name for spec in tags if spec.values], rng, word)


# --- dialects: the reply drifts into another way of writing it ------------------------------


def _chats(text: str) -> list[dict[str, Any]] | None:
    """The chats of a canonical reply, or ``None`` when the text is no longer one."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    chats = doc.get("chats") if isinstance(doc, dict) else None
    if not isinstance(chats, list) or not all(isinstance(c, dict) and isinstance(c.get("body"), str) for c in chats):
        return None
    return chats


def _first_c(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The chats and the first ``C`` chat of a canonical reply."""
    chats = _chats(text)
    found = next((c for c in chats if c.get("type") == "C"), None) if chats else None
    return (chats, found) if chats is not None and found is not None else None


_FirstChatChange = Callable[[list[dict[str, Any]], dict[str, Any], random.Random], str | None]
"""A change to a reply's first ``C`` chat: ``(chats, chat, rng)`` to the new text, ``None`` to leave it."""


def _on_first_c(change: _FirstChatChange) -> Mutation:
    """The mutation that applies ``change`` to the first ``C`` chat (the text stays where there is none)."""

    @functools.wraps(change)
    def mutate(text: str, rng: random.Random) -> str:
        found = _first_c(text)
        changed = change(*found, rng) if found is not None else None
        return text if changed is None else changed

    return mutate


def _elements(body: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _ELEMENT.finditer(body)]


@_rule("dialect-user-chats", "user-chats")
def _as_user_chats(text: str, rng: random.Random) -> str:
    """Echo the request form: ``<user_chats><chat type="C">…</chat>…``, maybe left unclosed."""
    chats = _chats(text)
    if not chats:
        return text
    parts = ["<user_chats>"]
    for chat in chats:
        kind = chat.get("type", "C")
        parts.append(
            f'<chat type="{kind}">\n{chat["body"]}\n</chat>'
            if kind == "C"
            else f'<chat type="{kind}">{chat["body"]}</chat>'
        )
    out = "\n".join(parts)
    cut = rng.random()
    if cut < 0.3:
        return out.removesuffix("</chat>")  # the last chat never closed
    return out if cut < 0.6 else out + "\n</user_chats>"


@_rule("dialect-json-array", "json-array")
def _as_json_array(text: str, rng: random.Random) -> str:
    """A bare array of chats."""
    chats = _chats(text)
    return json.dumps(chats, ensure_ascii=False) if chats else text


@_rule("dialect-hybrid", "hybrid")
@_on_first_c
def _as_hybrid(chats: list[dict[str, Any]], chat: dict[str, Any], rng: random.Random) -> str:
    """Pattern D: ``chat_body`` and ``emotion_summary``."""
    emotion = next((value for tag, value in _elements(chat["body"]) if tag == _EMO), "neutral")
    chat["emotion_summary"] = emotion
    chat["chat_body"] = chat.pop("body")
    return json.dumps({"chats": chats}, ensure_ascii=False)


@_rule("dialect-single-chat", "single-chat")
def _as_single_chat(text: str, rng: random.Random) -> str:
    """One chat object, without ``{"chats": [...]}``."""
    chats = _chats(text)
    return json.dumps(chats[0], ensure_ascii=False) if chats else text


@_rule("dialect-json-fields", "json-fields")
@_on_first_c
def _as_json_fields(chats: list[dict[str, Any]], chat: dict[str, Any], rng: random.Random) -> str | None:
    """Pattern A: one JSON object of fields named after the tags' long names."""
    fields: dict[str, str] = {}
    for tag, value in _elements(chat["body"]):
        fields.setdefault(_LONG_NAMES.get(tag, tag), value)
    return json.dumps(fields, ensure_ascii=False) if fields else None


@_rule("dialect-front-matter", "front-matter")
@_on_first_c
def _as_front_matter(chats: list[dict[str, Any]], chat: dict[str, Any], rng: random.Random) -> str | None:
    """Pattern C: the emotion and action in a ``---`` block, the speech after it (bare or in the body)."""
    head = [f"{_LONG_NAMES.get(tag, tag)}: {value}" for tag, value in _elements(chat["body"]) if tag in (_EMO, _ACT)]
    said = [value for tag, value in _elements(chat["body"]) if tag not in (_EMO, _ACT)]
    if not head:
        return None
    block = "---\n" + "\n".join(head) + "\n---\n" + "\n".join(said)
    if rng.random() < 0.5:
        return block
    chat["body"] = block
    return json.dumps({"chats": chats}, ensure_ascii=False)


@_rule("dialect-bare-tags", "bare-tags")
@_on_first_c
def _as_bare_tags(chats: list[dict[str, Any]], chat: dict[str, Any], rng: random.Random) -> str:
    """The first ``C`` body alone: tags, no JSON."""
    body: str = chat["body"]
    return body


@_rule("dialect-dot-notation", "dot-notation")
def _as_dot_notation(text: str, rng: random.Random) -> str:
    """Pattern E: ``<emotion.joy>speech</emotion.joy>``."""
    pattern = rf"<{_EMO}>([^<]*)</{_EMO}>\\n<{_SPEECH}>([^<]*)</{_SPEECH}>"
    return re.sub(
        pattern, lambda m: f"<{_LONG_EMO}.{m.group(1)}>{m.group(2)}</{_LONG_EMO}.{m.group(1)}>", text, count=1
    )


@_rule("attribute-form", "attribute-xml")
def _as_attribute(text: str, rng: random.Random) -> str:
    """Pattern B: ``<emotion type="joy">speech</emotion>``."""
    pattern = rf"<{_EMO}>([^<]*)</{_EMO}>\\n<{_SPEECH}>([^<]*)</{_SPEECH}>"
    return re.sub(pattern, lambda m: f'<{_LONG_EMO} type=\\"{m.group(1)}\\">{m.group(2)}</{_LONG_EMO}>', text, count=1)


@_rule("dialect-brackets", "bracket")
def _as_brackets(text: str, rng: random.Random) -> str:
    """Bracket tags with no JSON at all: ``[joy] *waves* Hello``."""
    pieces = _elements(text)
    if not any(tag == _EMO for tag, _value in pieces):
        return text
    shape = {_EMO: "[{}]", _ACT: "*{}*", _SPEECH: "{}"}
    return " ".join(shape[tag].format(value) for tag, value in pieces if tag in shape)


@_rule("dialect-roleplay", "roleplay")
def _as_roleplay(text: str, rng: random.Random) -> str:
    """Role-play prose with no JSON: ``*looks joy* Hello``."""
    pieces = _elements(text)
    if not pieces:
        return text
    acts = [value for tag, value in pieces if tag == _ACT] or [f"looks {v}" for tag, v in pieces if tag == _EMO]
    said = [value for tag, value in pieces if tag == _SPEECH]
    return " ".join([*(f"*{a}*" for a in acts or ["nods"]), *said])


@_rule("dialect-prose", "prose")
def _as_stray_prose(text: str, rng: random.Random) -> str:
    """Speech without its tag, standing between the body's elements."""
    return re.sub(rf"<{_SPEECH}>([^<]*)</{_SPEECH}>", r"\1", text, count=1)


@_rule("dialect-plain-text", "plain-text")
def _as_plain_text(text: str, rng: random.Random) -> str:
    """Only the words: no JSON, no tags."""
    said = [value for tag, value in _elements(text) if tag == _SPEECH]
    return " ".join(said) if said else text


DAMAGE: Final[tuple[MutationRule, ...]] = tuple(rule for rule in _RULES if rule.dialect is None)
"""Damage that keeps the reply in its dialect (a canonical reply, damaged, reads as ``canonical``)."""

DIALECT_MUTATIONS: Final[tuple[MutationRule, ...]] = tuple(rule for rule in _RULES if rule.dialect is not None)
"""One mutation per entry of the dialect table (but ``canonical``, which damage gives), in table order."""

MUTATIONS: Final[dict[str, Mutation]] = {rule.name: rule.mutate for rule in (*DAMAGE, *DIALECT_MUTATIONS)}
"""Every mutation, by name (the names are stable: fuzz output and tests refer to them)."""


@dataclass(frozen=True, slots=True)
class Damaged:
    """A damaged reply, the clean reply it came from, and the mutations applied in order."""

    text: str
    original: Reply
    mutations: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (``original`` in canonical form)."""
        return {"damaged": self.text, "original": dumps(self.original), "mutations": list(self.mutations)}


WORD_MUTATIONS: Final[dict[str, WordMutation]] = {rule.name: rule.worded for rule in DAMAGE if rule.worded is not None}
"""The mutations of the words a reply's language allows, by name, told the tag table and vocabulary."""


def words_first(names: Sequence[str], rng: random.Random) -> list[str]:
    """``names`` with each word mutation moved to the front, at :data:`WORD_DAMAGE_RATE` each (by ``rng``)."""
    front = [name for name in WORD_MUTATIONS if name in names and rng.random() < WORD_DAMAGE_RATE]
    return [*front, *(name for name in names if name not in front)]


def apply_mutations(
    text: str,
    names: Sequence[str],
    rng: random.Random,
    want: int,
    *,
    tags: TagTable | None = None,
    vocabulary: Vocabulary | None = None,
) -> tuple[str, tuple[str, ...]]:
    """Apply the mutations ``names`` in turn until ``want`` of them changed the text; ``(text, those names)``.

    A mutation that finds nothing to act on (no closing tag to drop, one chat to reorder)
    is passed over and not listed, and with ``want >= 1`` the text that comes out differs
    from ``text``: mutations that undo each other do not count as damage. Listing every
    mutation in ``names`` (``truncate`` always changes a text) makes ``want`` reachable.
    ``tags`` / ``vocabulary``: the reply's language, which the word mutations write off.
    """
    applied: list[str] = []
    current = text
    table = _TAGS if tags is None else tags
    for name in names:
        if len(applied) >= want and (want == 0 or current != text):
            break
        worded = WORD_MUTATIONS.get(name)
        changed = MUTATIONS[name](current, rng) if worded is None else worded(current, rng, table, vocabulary)
        if changed != current:
            applied.append(name)
            current = changed
    return current, tuple(applied)


def damage(
    reply: Reply,
    rng: random.Random,
    *,
    count: int | None = None,
    tags: TagTable | None = None,
    vocabulary: Vocabulary | None = None,
) -> Damaged:
    """Apply 1 to 3 (or ``count``) mutations that change the canonical text of ``reply``; only those are listed.

    The word mutations come first at :data:`WORD_DAMAGE_RATE` each (``words_first``), off ``tags`` and ``vocabulary``.
    """
    want = count if count is not None else rng.randint(1, 3)
    order = words_first(rng.sample(sorted(MUTATIONS), k=len(MUTATIONS)), rng)
    text, names = apply_mutations(dumps(reply), order, rng, want, tags=tags, vocabulary=vocabulary)
    return Damaged(text, reply, names)


_RANDOM_EMOTIONS: Final = ("joy", "sad", "angry", "surprise")


def random_reply(rng: random.Random, tags: TagTable | None = None, vocabulary: Vocabulary | None = None) -> Reply:
    """A plausible clean reply (no hypothesis needed): C, I and E chats, orders 1..n.

    ``tags``: C chats also use the table's own tags (a cue's values, a second speech tag);
    ``vocabulary``: emotions are its keys. ``parse(dumps(r), tags=tags, vocabulary=vocabulary)``
    reads the reply back.
    """
    table = _TAGS if tags is None else tags
    emotions = _RANDOM_EMOTIONS if vocabulary is None else vocabulary.keys
    extra = [t for t in table if t.name not in _TAGS and t.name != table.emotion.name]
    chats = []
    for order in range(1, rng.randint(1, 4) + 1):
        kind = rng.choice("CCCIE")
        if kind == "C":
            segments = [Segment(tag=table.emotion.name, text=rng.choice(emotions))]
            for _ in range(rng.randint(1, 3)):
                # The default tags as before (the same cases for the same seed), then the table's own ones.
                spec = rng.choice([t for t in _TAGS if t.content == "text"])
                if extra and rng.random() < 0.4:
                    spec = rng.choice(extra)
                words = spec.values if spec.values is not None else _WORDS
                segments.append(Segment(tag=spec.name, text=rng.choice(words)))
        else:
            segments = [Segment(tag=TEXT_TAG, text=rng.choice(_WORDS))]
        chats.append(Chat(type=kind, order=order, segments=segments))
    return Reply(chats=chats)


def iter_fuzz_cases(
    seed: int, count: int, *, tags: TagTable | None = None, vocabulary: Vocabulary | None = None
) -> Iterator[Damaged]:
    """``count`` damaged replies, the same for the same seed, made one at a time as they are asked for.

    ``tags`` / ``vocabulary``: the originals are written in a character's own tags and emotions.
    """
    rng = random.Random(seed)
    for _ in range(count):
        yield damage(random_reply(rng, tags, vocabulary), rng, tags=tags, vocabulary=vocabulary)


def fuzz_cases(
    seed: int, count: int, *, tags: TagTable | None = None, vocabulary: Vocabulary | None = None
) -> list[Damaged]:
    """``count`` damaged replies, the same for the same seed (``iter_fuzz_cases`` as a list)."""
    return list(iter_fuzz_cases(seed, count, tags=tags, vocabulary=vocabulary))


def revalidate(reply: Reply) -> None:
    """Raise unless every segment, chat and the reply pass their own validators again.

    Lenient parsing builds its result without validation (it checked each value as it
    went): this is the check that it checked enough (emotion keys match the grammar's
    ``KEY``, texts hold no control characters, ``C`` chats have elements).
    """
    try:
        for chat in reply.chats:
            for segment in chat.segments:
                Segment.model_validate(segment.model_dump())
        Reply.model_validate(reply.model_dump())
    except ValueError as e:  # pydantic's ValidationError is one
        raise AssertionError(f"a lenient result fails its own validation: {e}") from e


def check(text: str | bytes, chunk: int = 3) -> None:
    """Run one input through parse (both modes), the streamer and the renderer; raise if a promise breaks."""
    from charfmt.parser import parse  # noqa: PLC0415 (fuzz sits above the parser)
    from charfmt.prompt.render import render_user_block  # noqa: PLC0415 (import cost: jinja2, lark, pydantic, regex load on first use)
    from charfmt.prompt.userinput import UserTurn, parse_input, parse_shorthand  # noqa: PLC0415 (import cost: lark, pydantic, regex load on first use)

    lenient = parse(text, lenient=True)
    if any(d.code == "CF999" for d in lenient.diagnostics):
        raise AssertionError(f"lenient parsing failed internally: {[str(d) for d in lenient.diagnostics]}")
    revalidate(lenient)
    with contextlib.suppress(ParseError):  # strict parsing may only ever raise this
        parse(text)
    parser = StreamParser()
    events = []
    for i in range(0, len(text), chunk):
        events.extend(parser.feed(text[i : i + chunk]))
    events.extend(parser.close())
    if collect(events).chats != lenient.chats:
        raise AssertionError("the stream and the batch parser disagree")
    typed = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    try:
        turn = parse_shorthand(typed[:300])
        clean = UserTurn(chats=turn.chats, context=turn.context)
        if parse_input(render_user_block(clean)) != clean:
            raise AssertionError("a rendered user turn did not read back as itself")
    except CharfmtError:
        pass
