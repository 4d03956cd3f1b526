"""The reply budget: the grammar's bounds for a character or a scene within a turn's token budget.

What ``charfmt chat`` and ``charfmt serve`` plan a constrained reply with, written once:
``chat_bounds`` (``plan_bounds`` given the character's vocabulary, tags, examples and actions),
``speech_texts`` (its language, for ``measure_tokens_per_char``), ``reply_shape`` (the shape its
examples show) and ``limit_note`` (the line that tells the model the bounds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from charfmt.constrain._reply_constraints import DEFAULT_MAX_ELEMENTS

if TYPE_CHECKING:
    from charfmt.constrain.export import Bounds
    from charfmt.prompt.character import Character
    from charfmt.prompt.scene import Scene


def reply_shape(character: Character) -> tuple[int, int]:
    """(chats, elements): the most chats of one example reply, and the most elements of one
    example ``C`` body (at least ``DEFAULT_MAX_ELEMENTS``), the shape the prompt shows the model."""
    from charfmt.constrain.export import example_shape  # noqa: PLC0415 (import cost: every CLI command loads this module)

    return example_shape(ex.reply for ex in character.examples) or (1, DEFAULT_MAX_ELEMENTS)


def chat_bounds(
    character: Character | Scene,
    max_tokens: int,
    *,
    max_chats: int | None = None,
    max_elements: int | None = None,
    tokens_per_char: float | None = None,
    require_speech: bool = True,
) -> Bounds:
    """The grammar's bounds for ``character`` (or a scene) within ``max_tokens``: ``plan_bounds``
    given its vocabulary, tags, examples and actions (a scene: its cast, each with its own emotions).

    ``tokens_per_char``: the model's own (``charfmt.constrain.export.measure_tokens_per_char``; ``None``: the
    UTF-8 bytes per character of the character's example speech). ``require_speech``: every ``C``
    chat says something.
    """
    from charfmt.constrain.export import resolve_bounds  # noqa: PLC0415 (import cost: every CLI command loads this module)

    bounds = resolve_bounds(
        character=character, max_tokens=max_tokens, max_chats=max_chats, tokens_per_char=tokens_per_char,
        max_elements=max_elements, require_speech=require_speech,
    )  # fmt: skip
    assert bounds is not None
    return bounds


def speech_texts(character: Character | Scene) -> list[str]:
    """What the character (a scene: its cast) says in its examples: its language, for ``measure_tokens_per_char``."""
    from charfmt.constrain.export import speech_of  # noqa: PLC0415 (import cost: every CLI command loads this module)

    return speech_of((ex.reply for ex in character.examples), character.tags)


def limit_note(bounds: Bounds) -> str:
    """The line that tells the model the bounds, so it writes short complete lines instead of being cut."""
    chats = f"{bounds.max_chats} chat{'s' if bounds.max_chats != 1 else ''}"
    short = "".join(f", {role} at most {n}" for role, n in bounds.role_chars)
    said = " Every chat says something." if bounds.require_speech else ""
    return (
        f"Keep the reply short: at most {chats}, at most {bounds.max_elements} elements per chat, "
        f"each element at most {bounds.max_chars} characters{short}.{said}"
    )
