"""Lenient parsing's slow path: recover a reply from whatever a model produced (``recover``; one body: ``read_body``).

``STEPS`` is the pipeline, an ordered table of named steps (as markdown-it-py's rule
chains are) run over one ``state.Recovery``: set aside what is not the reply (special
tokens, reasoning, code fences, prose; ``region``) → read the JSON forgivingly and find its
chats in whatever shape it has (``shapes``, ``fields``) or, when there is none, read the
text itself as the reply (``forms``) → make each chat's pieces segments (keys, the
vocabulary policy), number the orders, build the reply (``finish``).

Every character of the input ends up in a segment, or inside the span of a diagnostic
that says it was dropped (or is markup: JSON punctuation, keys, tags).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from charfmt._lenient import finish, forms, shapes
from charfmt._lenient.imitation import imitation_going_on
from charfmt._lenient.meta import meta_text
from charfmt._lenient.pieces import Result
from charfmt._lenient.region import reply_region
from charfmt._lenient.scaffolding import blank
from charfmt._lenient.state import NARRATOR, Recovery, Source
from charfmt._lenient.table import Reading
from charfmt._lenient.tag_soup import read_elements
from charfmt._lenient.told import learn, speaker_of
from charfmt._lenient.turns import foreign
from charfmt.diagnostics import Diagnostic
from charfmt.dialects import TABLE
from charfmt.models import Reply, Vocabulary
from charfmt.tags import DEFAULT_TAGS, TagTable

Step = Callable[[Recovery], None]


def _json_region(state: Recovery) -> None:
    """Where a JSON reply would stand: special tokens, reasoning and headings before it set aside."""
    mark = len(state.diagnostics)
    state.start, state.end = reply_region(state, json=True)
    state.region_notes = (mark, len(state.diagnostics))


def _json_reply(state: Recovery) -> None:
    """The JSON reply and what follows it, if there is one (``state.found``)."""
    state.found = shapes.read_json(state, state.start, state.end)


def _text_region(state: Recovery) -> None:
    """No JSON: where the reply stands in a reply without JSON.

    The '{' or '[' that reasoning seemed to stand before is no JSON reply: the text is the
    reply, so what stands around it is read again as a reply without JSON.
    """
    if state.found:
        return
    mark, stop = state.region_notes
    del state.diagnostics[mark:stop]
    state.reasoning.clear()
    state.start, state.end = reply_region(state, json=False)


def _text_reply(state: Recovery) -> None:
    """No JSON: the text itself is the reply."""
    if not state.found:
        forms.read_bare(state, state.start, state.end)


def _foreign(state: Recovery) -> None:
    """Text that is not the character's (``turns``): the prompt's lines, the player's turn, turns imagined after
    the reply, speaker labels; blanked (offsets stay put), each noted."""
    state.told = told = learn(state.prompt, state.turn_lines)
    spans = foreign(state.source.text, told, prompted=bool(state.prompt))
    spans = sorted(spans + meta_text(state.source.text, told, spans))
    spans = sorted(spans + imitation_going_on(state.source.text, told, spans))
    for a, b, code, message in spans:
        who = speaker_of(state.source.text[a:b], told) if code == "CF633" else None
        if who is not None:  # a scene's cast member labels the lines after it
            state.speakers.append((b, who))
        whose = "the narrator (an E chat)" if who == NARRATOR else repr(who)
        said = message if who is None else f"speaker label {state.source.text[a:b].strip()!r} names {whose}: dropped"
        state.note(code, said, a, b)
    if spans:
        text = state.source.text
        state.source = Source(blank(text, [(a, b, "") for a, b, *_ in spans]), state.source.raw, state.source.map)


STEPS: Final[tuple[tuple[str, Step], ...]] = (
    ("not the character's", _foreign),
    ("reply region", _json_region),
    ("JSON reply", _json_reply),
    ("text region", _text_region),
    ("text reply", _text_reply),
    ("segments", finish.segments),
    ("orders", finish.number),
    ("dialect", finish.name_dialect),
)
"""The steps of one lenient read, in order; ``finish.reply`` makes the reply of what they found."""


def recover(
    raw: str,
    vocabulary: Vocabulary | None,
    prior: list[Diagnostic],
    tags: TagTable = DEFAULT_TAGS,
    *,
    turn: tuple[str, ...] = (),
    prompt: tuple[str, ...] = (),
) -> Reply:
    """Read ``raw`` leniently; ``prior`` diagnostics (from decoding bytes) come first.

    ``turn``: what the player said this turn; an echo of it is dropped (``CF625``).
    ``prompt``: the prompt's own text (not the character's words); an echo of it is dropped (``CF631``).

    ``tags``: the tag table; a tag is read by its role (``tags.emotion``, ``tags.speech``...),
    so a custom tag (``DEFAULT_TAGS.extend(TagSpec("sfx", "cue", ...))``) is a known tag.
    """
    state = Recovery(raw, Reading(tags, vocabulary, TABLE), turn, prompt)
    state.diagnostics.extend(prior)
    for _name, step in STEPS:
        step(state)
    return finish.reply(state)


def read_body(
    body: str, vocabulary: Vocabulary | None = None, *, cut_off: bool = False, tags: TagTable = DEFAULT_TAGS
) -> Result:
    """Read one ``C`` body leniently into pieces, with every repair noted (``body.read_elements``, this table).

    ``cut_off``: the body ends where the input was cut; a tag begun at its very end
    (``<emo>joy</em``) is markup cut in half, dropped rather than kept as text.
    ``tags``: the tag table; a tag's role, not its name, says how it is read.
    """
    return read_elements(body, Reading(tags, vocabulary, TABLE), cut_off=cut_off)
