"""Damage like real models do, reproducibly: the mutations behind ``charfmt fuzz`` and ``charfmt.testing``.

Each mutation is a named function of ``(text, rng)`` modelled on a failure seen in
model output. ``damage`` applies a few of them and says which; ``check`` runs one input
through every entry point and raises on any broken promise, among them that a lenient
result passes its own validators (``revalidate``); the fuzz harness and the regression
tests use it.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from charfmt.diagnostics import CharfmtError, ParseError
from charfmt.models import Chat, Reply, Segment
from charfmt.tags import TAGS
from charfmt.writer import dumps

Mutation = Callable[[str, random.Random], str]

_PROSE: Final = ["Sure! Here is the reply:\n", "Okay.\n", "以下が返答です。\n", "Here you go: "]
_AFTER: Final = [
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
_LONG_NAMES: Final = {"emo": "emotion", "act": "action", "msg": "speak", "thought": "thinking"}
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


def _cut(text: str, rng: random.Random) -> str:
    return text[: rng.randint(0, len(text))]


def _fence(text: str, rng: random.Random) -> str:
    return rng.choice(["```json\n", "```\n", "```json"]) + text + rng.choice(["\n```", "```", ""])


def _prose(text: str, rng: random.Random) -> str:
    return rng.choice(_PROSE) + text + rng.choice(["", *_AFTER])


def _reasoning(text: str, rng: random.Random) -> str:
    return rng.choice(_REASONING) + text


def _unclose(text: str, rng: random.Random) -> str:
    closers = [m for m in re.finditer(r"</(emo|act|msg|thought)>", text)]
    if not closers:
        return text
    m = rng.choice(closers)
    return text[: m.start()] + text[m.end() :]


def _mismatch(text: str, rng: random.Random) -> str:
    return re.sub(r"</(msg|act)>", lambda m: "</emo>" if rng.random() < 0.5 else "</>", text, count=1)


def _upper(text: str, rng: random.Random) -> str:
    return re.sub(r"</?(emo|act|msg|thought)>", lambda m: m.group().upper(), text)


def _long_names(text: str, rng: random.Random) -> str:
    return re.sub(r"<(/?)(emo|act|msg|thought)>", lambda m: f"<{m.group(1)}{_LONG_NAMES[m.group(2)]}>", text)


def _no_newlines(text: str, rng: random.Random) -> str:
    return text.replace("\\n<", "<")


def _attribute(text: str, rng: random.Random) -> str:
    return re.sub(r"<emo>([^<]*)</emo>\\n<msg>", r"<emotion type=\"\1\">", text, count=1).replace(
        "</msg>", "</emotion>", 1
    )


def _single_quotes(text: str, rng: random.Random) -> str:
    return text.replace('"', "'") if "'" not in text else text


def _trailing_comma(text: str, rng: random.Random) -> str:
    return text.replace("}]}", "},]}", 1)


def _unescaped_quote(text: str, rng: random.Random) -> str:
    return text.replace('\\"', '"', 1) if '\\"' in text else text.replace("<msg>", '<msg>"', 1)


def _bad_escape(text: str, rng: random.Random) -> str:
    return text.replace("<msg>", "<msg>\\[", 1)


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


def _dialect(text: str, rng: random.Random) -> str:
    """Drift into the design study's pattern A: one JSON object of fields."""
    try:
        doc = json.loads(text)
        body = doc["chats"][0]["body"]
    except (ValueError, KeyError, IndexError, TypeError):
        return text
    fields = {m.group(1): m.group(2) for m in re.finditer(r"<(emo|act|msg)>([^<]*)</\1>", body)}
    names = {"emo": "emotion", "act": "action", "msg": "content"}
    return json.dumps({names[k]: v for k, v in fields.items()}, ensure_ascii=False) if fields else text


def _brackets(text: str, rng: random.Random) -> str:
    """Drift into bracket tags with no JSON at all."""
    pieces = re.findall(r"<(emo|act|msg)>([^<]*)</\1>", text)
    if not pieces:
        return text
    out = {"emo": "[{}]", "act": "*{}*", "msg": "{}"}
    return " ".join(out[tag].format(value) for tag, value in pieces)


MUTATIONS: Final[dict[str, Mutation]] = {
    "truncate": _cut,
    "fence": _fence,
    "prose": _prose,
    "reasoning": _reasoning,
    "unclosed-tag": _unclose,
    "mismatched-tag": _mismatch,
    "upper-case-tags": _upper,
    "long-tag-names": _long_names,
    "missing-newlines": _no_newlines,
    "attribute-form": _attribute,
    "single-quotes": _single_quotes,
    "trailing-comma": _trailing_comma,
    "unescaped-quote": _unescaped_quote,
    "invalid-escape": _bad_escape,
    "out-of-order": _out_of_order,
    "dialect-json-fields": _dialect,
    "dialect-brackets": _brackets,
}
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


def damage(reply: Reply, rng: random.Random, *, count: int | None = None) -> Damaged:
    """Apply 1 to 3 (or ``count``) mutations to the canonical text of ``reply``."""
    text = dumps(reply)
    names = rng.sample(sorted(MUTATIONS), k=count if count is not None else rng.randint(1, 3))
    for name in names:
        text = MUTATIONS[name](text, rng)
    return Damaged(text, reply, tuple(names))


def random_reply(rng: random.Random) -> Reply:
    """A plausible clean reply (no hypothesis needed): C, I and E chats, orders 1..n."""
    chats = []
    for order in range(1, rng.randint(1, 4) + 1):
        kind = rng.choice("CCCIE")
        if kind == "C":
            segments = [Segment(tag="emo", text=rng.choice(["joy", "sad", "angry", "surprise"]))]
            for _ in range(rng.randint(1, 3)):
                tag = rng.choice([t.name for t in TAGS if t.content == "text"])
                segments.append(Segment(tag=tag, text=rng.choice(_WORDS)))
        else:
            segments = [Segment(tag="text", text=rng.choice(_WORDS))]
        chats.append(Chat(type=kind, order=order, segments=segments))
    return Reply(chats=chats)


def iter_fuzz_cases(seed: int, count: int) -> Iterator[Damaged]:
    """``count`` damaged replies, the same for the same seed, made one at a time as they are asked for."""
    rng = random.Random(seed)
    for _ in range(count):
        yield damage(random_reply(rng), rng)


def fuzz_cases(seed: int, count: int) -> list[Damaged]:
    """``count`` damaged replies, the same for the same seed (``iter_fuzz_cases`` as a list)."""
    return list(iter_fuzz_cases(seed, count))


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
    from charfmt.render import render_user_block  # noqa: PLC0415
    from charfmt.stream import StreamParser, collect  # noqa: PLC0415
    from charfmt.userinput import UserTurn, parse_input, parse_shorthand  # noqa: PLC0415

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
