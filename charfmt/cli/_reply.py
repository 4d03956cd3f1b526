"""What the reply subcommands share (parse, check, fix, stream, fuzz, schema, demo): the language a
reply is read against, a bounded parse of what was read, and the reply and its diagnostics shown."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO, cast

from charfmt._terminal import VisibleWriter
from charfmt.cli._io import Input, diag_line, dump_json, load_character, load_scene
from charfmt.diagnostics import Diagnostic, ParseError
from charfmt.models import Reply, Vocabulary
from charfmt.parser import parse
from charfmt.tags import DEFAULT_TAGS, TagTable

if TYPE_CHECKING:
    from charfmt.prompt.character import Character
    from charfmt.prompt.scene import Scene


@dataclass(frozen=True)
class Language:
    """What a reply is read against: the emotion vocabulary and the tag table (``--character``)."""

    vocabulary: Vocabulary | None = None
    tags: TagTable = DEFAULT_TAGS
    character: Character | None = None
    """The ``--character`` read (once: a card's notes are said once), where one was given."""
    scene: Scene | None = None
    """The ``--scene`` a reply is read as (``Scene.parse``), where a subcommand reads replies as a scene's."""


def language(args: argparse.Namespace, *, as_scene: bool = False) -> Language:
    """The ``--character`` file's vocabulary and tags (a ``--scene``'s tags; ``as_scene``: and the scene, each
    reply read as ``Scene.parse`` reads it), or the defaults without one."""
    path = getattr(args, "character", None)
    if path is None and getattr(args, "scene", None) is not None:
        scene = load_scene(args.scene, args.max_size, getattr(args, "user_name", None))
        return Language(None, scene.tags, None, scene if as_scene else None)
    if path is None:
        return Language()
    character = load_character(path, args.max_size, getattr(args, "user_name", None))
    return Language(character.vocabulary, character.tags, character)


def parse_input(
    inp: Input, *, lenient: bool, max_size: int, language: Language = Language(), prompt: str | None = None
) -> Reply:
    """``parse`` of what was read; an input over ``--max-size`` is ``CF002`` with its real size. ``prompt``:
    what the reply answers, as ``parse`` takes it."""
    if inp.over:
        message = f"input is {inp.size_words(max_size)} long; the maximum is {max_size:,} (--max-size)"
        d = Diagnostic.at("", "CF002", message, 0)
        if not lenient:
            raise ParseError([d], "")
        return Reply(diagnostics=[d])
    if language.scene is not None:  # (its speakers and each one's emotions; lenient: told its own prompt)
        return language.scene.parse(inp.data, lenient=lenient, prompt=prompt, max_size=max_size)
    return parse(inp.data, lenient=lenient, max_size=max_size, vocabulary=language.vocabulary, tags=language.tags,
                 prompt=prompt)  # fmt: skip


def failed(diagnostics: Sequence[Diagnostic]) -> bool:
    """Whether any of ``diagnostics`` is an error."""
    return any(d.severity == "error" for d in diagnostics)


def pretty(reply: Reply, name: str, out: TextIO, tags: TagTable = DEFAULT_TAGS) -> None:
    """The readable view of ``reply``; its diagnostics as ``name:line:col: CODE ...``, as strict errors are.

    Control and bidi characters of the model's text are shown escaped (``charfmt._terminal``).
    """
    out = cast("TextIO", VisibleWriter(out))
    if not reply.chats:
        print("(no chats: the character stays silent)", file=out)
    for chat in reply.chats:
        print(f"#{chat.order} {chat.type}{f' {chat.speaker}' if chat.speaker is not None else ''}", file=out)
        for seg in chat.segments:
            spec = tags.get(seg.tag)
            hidden = "" if spec is None or spec.shown else " (hidden)"
            lines = seg.text.split("\n")
            print(f"  {seg.tag:<8}{lines[0]}{hidden}", file=out)
            for line in lines[1:]:
                print(f"  {'':<8}{line}", file=out)
    for d in reply.diagnostics:
        print(diag_line(name, d), file=out)


def emit_diagnostics(name: str, source: str, diagnostics: Sequence[Diagnostic], fmt: str, out: TextIO) -> None:
    """``diagnostics`` as ``text`` (a line and a caret snippet of ``source`` each) or ``jsonl``."""
    out = cast("TextIO", VisibleWriter(out)) if fmt != "jsonl" else out
    for d in diagnostics:
        if fmt == "jsonl":
            print(dump_json({"file": name, **d.model_dump()}, out), file=out)
        else:
            print(diag_line(name, d), file=out)
            if source:
                print(d.snippet(source), file=out)
