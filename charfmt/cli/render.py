"""``charfmt render``: the provider request (or one prompt text) for a character, its history and a user turn."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, Any, Final

from charfmt.cli._command import Subcommand
from charfmt.cli._io import (
    EXIT_INVALID,
    EXIT_OK,
    check_greeting,
    diag_line,
    dump_json,
    load_character,
    load_lorebooks,
    load_scene,
    read_text,
    templates_folder,
    usage_error,
)
from charfmt.cli._options import add_cast, add_lore, add_size, add_tokenizer, add_user_name, greeting_index, whole
from charfmt.constrain.schema import PROVIDERS

if TYPE_CHECKING:
    from charfmt.prompt.character import Character, Exchange
    from charfmt.prompt.lorebook import Activation, Lorebook
    from charfmt.prompt.scene import Scene
    from charfmt.prompt.userinput import UserTurn
    from charfmt.tags import TagTable


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The options of ``charfmt render``."""
    add_cast(sp, "a scene TOML file: the whole cast's request, each chat naming its speaker (--format json)")
    add_user_name(sp)
    sp.add_argument(
        "--say",
        required=True,
        metavar="TEXT",
        help='what the user says, in shorthand ("[angry] なんで？") or as a user block'
        ' (<user_chats><chat type="C">…</chat></user_chats>, [User Context]…, [User Message]…)',
    )
    sp.add_argument(
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the player's state, sent as a [User Context] block: emotion=angry, action=…, environment=…,"
        " or a key of your own; repeat for more",
    )
    sp.add_argument(
        "--history",
        metavar="FILE",
        help='past exchanges: JSON Lines of {"user": ..., "reply": ...} (an exchange may span lines)',
    )
    sp.add_argument(
        "--provider", choices=PROVIDERS, default="openai", help="whose chat API the request is for (default openai)"
    )
    sp.add_argument(
        "--format", choices=("json", "text"), default="json", help="json: provider request; text: one prompt"
    )
    sp.add_argument("--templates", metavar="DIR", help="a folder of your own templates, looked up first")
    sp.add_argument(
        "--budget", type=whole(1), metavar="TOKENS",
        help="fit this many prompt tokens: the oldest exchanges left out, then lore cut (lowest order first)",
    )  # fmt: skip
    add_tokenizer(sp, "for --budget")
    sp.add_argument("--structured", action="store_true", help="add the provider's structured-output schema")
    add_lore(sp)
    sp.add_argument(
        "--greeting",
        type=greeting_index,
        default=0,
        metavar="N|none",
        help="without --history, the card's greeting N opens the chat (0: first_mes, 1...: alternate_greetings;"
        " default 0)",
    )
    sp.add_argument(
        "--explain", action="store_true", help="say on stderr which lore entries fired and which the budget cut"
    )
    add_size(sp, "--character, --scene, --history or --lorebook file")


def run(args: argparse.Namespace) -> int:
    """Print the request."""
    from charfmt.prompt.render import render_text_turn, render_turn  # noqa: PLC0415 (jinja only when rendering)

    if not args.say.strip():
        usage_error(args, "argument --say: nothing to say: an empty user turn is not sent to a model")
    if args.tokenizer is not None and args.budget is None:
        usage_error(args, "argument --tokenizer: it counts for --budget, which is not given")
    if args.scene is not None and args.format == "text":
        usage_error(args, "argument --format: text is one character's prompt (prompts/text.j2); a scene is rendered"
                    " as a chat request (--format json)")  # fmt: skip
    if args.scene is not None and args.greeting not in (0, None):
        usage_error(args, f"argument --greeting: {args.greeting}: a scene has no greeting (--greeting 0 or none)")
    templates = templates_folder(args.templates)
    scene = load_scene(args.scene, args.max_size, args.user_name) if args.scene is not None else None
    if scene is not None:
        character = next(iter(scene.cast.values()))  # (no greeting in a scene: its first member is never asked)
    else:
        character = load_character(args.character, args.max_size, args.user_name)
    who = scene if scene is not None else character
    books = load_lorebooks(args.lorebook, args.max_size)
    if args.history is None and args.scene is None:
        check_greeting(args, character, args.greeting)
    if args.history is not None:
        history = _load_history(args.history, who, args.max_size)
    else:
        history = _greeting_history(character, args.greeting, args.seed) if args.scene is None else []
    turn = _turn(args, who)
    if turn is None:
        return EXIT_INVALID
    options: dict[str, Any] = {
        "templates": templates, "budget": args.budget, "lorebooks": books, "seed": args.seed,
    }  # fmt: skip
    if args.tokenizer is not None:
        from charfmt.prompt.tokens import counter_for  # noqa: PLC0415 (import cost: every CLI command loads this module)

        options["counter"] = counter_for(tokenizer=args.tokenizer)
    if scene is not None:
        rendered = scene.render_turn(history, turn, provider=args.provider, structured=args.structured, **options)
    elif args.format == "text":  # (one render: what is printed is what its diagnostics and --explain say)
        rendered = render_text_turn(character, history, turn, **options)
    else:
        rendered = render_turn(character, history, turn, provider=args.provider, structured=args.structured, **options)
    for d in rendered.diagnostics:
        if d.severity != "info" or args.explain:
            print(diag_line("render", d), file=sys.stderr)
    if args.explain:
        print(_explained(rendered.lore, _books_of(who, books)), file=sys.stderr)
    if args.format == "text":
        print(rendered.request["prompt"])
    else:
        print(dump_json(rendered.request, sys.stdout, indent=2))
    return EXIT_OK


def _turn(args: argparse.Namespace, who: Character | Scene) -> UserTurn | None:
    """``--say`` (shorthand, or a user block) with ``--context``, read by ``read_turn`` as the server reads a
    turn; ``None`` when the block is invalid (said why)."""
    from charfmt.diagnostics import ParseError  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.prompt.userinput import TurnError, is_user_block  # noqa: PLC0415 (import cost: every CLI command loads this module)

    pairs: list[tuple[str, str]] = []
    for item in args.context:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            usage_error(args, f"argument --context: {item!r} is not KEY=VALUE")
        pairs.append((key, value))
    try:
        turn = who.read_turn(args.say, context=pairs)  # (a scene's: the whole cast's words)
    except ParseError as e:
        for d in e.diagnostics:
            print(f"charfmt: {diag_line('--say', d)}", file=sys.stderr)
        return None
    except TurnError as e:
        usage_error(args, f"argument --{e.field}: {e}")
    # (line and column, as a block's errors are placed: --say may hold several lines; in a block: an emotion the
    # character does not know, as the shorthand's [bogus] says)
    for d in turn.diagnostics:
        print(f"charfmt: {diag_line('--say', d)}", file=sys.stderr)
    if not is_user_block(args.say) and (tag := _markup_in(args.say, who.tags)) is not None:
        print(
            f"charfmt: warning: --say holds {tag}: shorthand sends markup as the player's own words, escaped;"
            " a user block begins with <user_chats> or [User Context] (docs/PROMPTS.md)",
            file=sys.stderr,
        )
    return turn


def _markup_in(say: str, tags: TagTable) -> str | None:
    """The first element of the character's tag table (or a request form's ``<chat ...>``) written in ``say``."""
    for found in re.finditer(r"<(/?)([A-Za-z_][\w-]*)[^<>]*>", say):
        name = found.group(2)
        if tags.get(name) is not None or name in ("chat", "user_chats"):
            return f"<{found.group(1)}{name}>"
    return None


def _greeting_history(character: Character, index: int | None, seed: int | None) -> list[Exchange]:
    """The card's greeting ``index`` as the chat's first exchange (an empty user turn), or nothing."""
    from charfmt.prompt.render import greeting_exchange  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if index is None:
        return []
    exchange = greeting_exchange(character, index, seed=seed)
    return [exchange] if exchange is not None else []


def _books_of(who: Character | Scene, books: list[Lorebook]) -> list[Lorebook]:
    """The books a turn of ``who`` scans: its card's own (a scene's: ``Scene.scanned_books``), then ``--lorebook``'s."""
    from charfmt.prompt._card_prompt import card_books  # noqa: PLC0415 (import cost: every CLI command loads this module)
    from charfmt.prompt.scene import Scene  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if isinstance(who, Scene):
        return [*who.scanned_books, *books]
    return [*card_books(who), *books]


def _explained(lore: Activation | None, books: list[Lorebook]) -> str:
    """``--explain``: the lore of the turn, one line per entry (or why there was none to scan)."""
    if lore is None and not books:
        return "lore: no lorebook"
    if lore is None:  # books, none with an entry to scan: say so, each with what its reading skipped
        names = ", ".join(book.name or "a book" for book in books)
        return f"lore: no entry to scan in {names} (an empty book, or each entry skipped: the warnings above say why)"
    report = lore.report()
    fired, cut, lost = report["fired"], report["cut"], report["lost"]
    rolls = f", {len(lost)} matched but lost the probability roll" if lost else ""
    lines = [f"lore: {len(fired)} fired, {len(cut)} cut{rolls}; {report['tokens']} of {report['budget']} tokens"]
    for tag, rows in (("fired", fired), ("cut", cut), ("lost", lost)):
        for row in rows:
            title = f" {row['comment']!r}" if row["comment"] else ""
            tokens = f", {row['tokens']} tokens" if "tokens" in row else ""
            chance = f"; matched, lost its roll: probability {row['probability']} %" if "probability" in row else ""
            where = f"order {row['order']}, {row['position']}{tokens}{chance}"
            lines.append(f"  {tag:5} {row['book']}:{row['uid']}{title} ({where})")
    return "\n".join(lines)


def _load_history(path: str, character: Character | Scene, limit: int) -> list[Exchange]:
    from charfmt.prompt.character import history_from_jsonl  # noqa: PLC0415 (import cost: every CLI command loads this module)

    text = read_text(path, limit, "--history")
    return history_from_jsonl(text, character, "<stdin>" if path == "-" else path)


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="render a provider request for a character (or a scene) and a user turn",
    ok="the request was printed",
    invalid="the --character, --scene, --history or --lorebook file is invalid, --say's user block is invalid, or"
    " over --budget",
)
