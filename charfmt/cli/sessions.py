"""``charfmt sessions list|show|export|delete``: the conversations a store keeps (``serve``'s, ``chat --session``'s).

A session is named by its NAME, and where several owners or doors hold that name, by ``--owner``
(``-``: the server's one front end, or no auth) and ``--namespace`` (``turn/Rex``, ``chat/Rex``,
``cli/Rex``). ``export`` writes JSON Lines (what ``--history`` and ``load_history`` read) or one of
the interop formats of ``charfmt convert``, whole or not at all.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Final

from charfmt._terminal import visible
from charfmt.cli._command import Subcommand
from charfmt.cli._io import EXIT_OK, InvalidError, dump_json, load_character, output, usage_error
from charfmt.cli._options import add_size, add_store, add_user_name, open_store_of
from charfmt.store.base import name_problem
from charfmt.store.scopes import MARK, character_of, legacy
from charfmt.tags import DEFAULT_TAGS

if TYPE_CHECKING:
    from charfmt.prompt.character import Character
    from charfmt.store import SessionInfo, SessionKey, Store


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The actions of ``charfmt sessions`` and their options."""
    from charfmt.cli.convert import CONVERSATION_FORMATS  # noqa: PLC0415 (a cycle: importing charfmt.cli.convert imports this module)

    actions = sp.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do with the store")
    listing = actions.add_parser("list", help="the sessions, the most recently written first")
    listing.add_argument("--format", choices=("text", "jsonl"), default="text", help="text (default) or JSON Lines")
    show = actions.add_parser("show", help="a session's exchanges, for a person")
    export = actions.add_parser("export", help="a session as JSON Lines or an interop format")
    export.add_argument(
        "--to",
        dest="target_format",
        choices=CONVERSATION_FORMATS,
        default="jsonl",
        metavar="FORMAT",
        help="the format: %(choices)s (default jsonl)",
    )  # (a metavar: the choices are read, importing the interop formats, only when asked)
    export.add_argument("--output", "-o", metavar="FILE", help="write here (default: standard output)")
    export.add_argument("--character", metavar="FILE", help="the character file (names the speakers in a document)")
    add_user_name(export, " (and the player's name in a document; default the character's, else User)")
    add_size(export, "--character file")
    delete = actions.add_parser("delete", help="forget a session and its exchanges")
    for action in (listing, show, export, delete):
        action.set_defaults(parser=action)  # (its usage errors name 'charfmt sessions ACTION --help')
        add_store(action)
        action.add_argument(
            "--owner", metavar="NAME", help="the owner: a token's name (serve --tokens), or - for no token"
        )
        action.add_argument("--namespace", metavar="NS", help="the door and character: turn/Rex, chat/Rex, cli/Rex")
        if action is not listing:
            action.add_argument("name", metavar="NAME", help="the session's name")


def run(args: argparse.Namespace) -> int:
    """The action on the store; 1 where the session is not there."""
    owner = None if args.owner is None else "" if args.owner == "-" else args.owner
    if args.action != "list" and (why := name_problem(args.name, "NAME")) is not None:  # (no session has it)
        args.parser.error(why)
    with open_store_of(args, create=False) as store:  # (a store that is not there is said, never made)
        if args.action == "list":
            _list(_sessions(store, owner, args.namespace), args.format)
            return EXIT_OK
        key = _one(store, owner, args.namespace, args.name)
        if args.action == "delete":
            store.delete(key)
            print(f"deleted session {key}", file=sys.stderr)
        elif args.action == "show":
            _show(store, key)
        else:
            _export(store, key, args)
    return EXIT_OK


def _sessions(store: Store, owner: str | None, namespace: str | None, name: str | None = None) -> list[SessionInfo]:
    """The sessions selected; a ``--namespace`` without a definition's digest (``turn/Rex``) selects every
    definition of that character (``turn/Rex~3f9a1c2b``, and a store's sessions from before digests)."""
    if namespace is None or MARK in namespace:
        return store.sessions(owner=owner, namespace=namespace, name=name)
    found = store.sessions(owner=owner, name=name)
    return [s for s in found if namespace in (s.key.namespace, legacy(s.key.namespace))]


def _one(store: Store, owner: str | None, namespace: str | None, name: str) -> SessionKey:
    """The one session the selection names; ``InvalidError`` (exit 1) for none, or for several."""
    found = _sessions(store, owner, namespace, name)
    if not found:
        raise InvalidError(f"no session {name!r} in {store.target}" + (" with that --owner/--namespace" if
                           owner is not None or namespace is not None else ""))  # fmt: skip
    if len(found) > 1:
        keys = "; ".join(f"--owner {s.key.owner or '-'} --namespace {s.key.namespace}" for s in found[:6])
        raise InvalidError(f"{len(found)} sessions are named {name!r}: say which ({keys})")
    return found[0].key


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _list(sessions: list[SessionInfo], fmt: str) -> None:
    out = sys.stdout
    if fmt == "jsonl":
        for s in sessions:
            row = {"owner": s.key.owner, "namespace": s.key.namespace, "name": s.key.name, "turns": s.turns,
                   "bytes": s.size, "created": _when(s.created), "updated": _when(s.updated)}  # fmt: skip
            print(dump_json(row, out), file=out)
        return
    rows = [("OWNER", "NAMESPACE", "NAME", "EXCHANGES", "BYTES", "LAST WRITTEN")]  # (a card's greeting is one)
    rows += [(s.key.owner or "-", s.key.namespace, s.key.name, str(s.turns), f"{s.size:,}", _when(s.updated))
             for s in sessions]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for cells in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip(), file=out)
    if not sessions:
        print("(no sessions)", file=out)


def _show(store: Store, key: SessionKey) -> None:
    """Each exchange: the player's turn, then the reply, as ``charfmt parse`` shows a reply."""
    from charfmt.cli._reply import pretty  # noqa: PLC0415 (a cycle: importing charfmt.cli._reply imports this module)

    out = sys.stdout
    history = store.history(key)
    print(f"session {key}: {len(history)} exchange(s)", file=out)
    for n, exchange in enumerate(history, 1):
        if not exchange.user.chats:  # (a card's greeting: the character spoke first, nobody before it)
            print(f"\n--- exchange {n}: the greeting (the character speaks first)", file=out)
            pretty(exchange.reply, str(key), out, DEFAULT_TAGS)
            continue
        print(f"\n--- exchange {n}\nyou", file=out)
        for chat in exchange.user.chats:
            for seg in chat.segments:
                print(f"  {seg.tag:<8}{visible(seg.text)}", file=out)
        pretty(exchange.reply, str(key), out, DEFAULT_TAGS)


def _export(store: Store, key: SessionKey, args: argparse.Namespace) -> None:
    """The session in ``--to``'s format, to ``--output`` (whole or not at all) or standard output."""
    from charfmt.prompt.character import history_line  # noqa: PLC0415 (import cost: every CLI command loads this module)

    history = store.history(key)
    character = load_character(args.character, args.max_size, args.user_name) if args.character else _named(key)
    if character is not None and args.user_name is not None:  # (a TOML character's user_name, or the stand-in's)
        character = character.model_copy(update={"user_name": args.user_name})
    if args.target_format == "jsonl":
        text = "".join(history_line(ex) for ex in history)
    else:
        from charfmt.interop import dumps  # noqa: PLC0415 (import cost: every CLI command loads this module)

        if not history:
            usage_error(args, "the session holds no exchange: nothing to export")
        info = store.info(key)  # (the session's start: the store's time, not 1970)
        begun = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.created)) if info is not None else None
        text = dumps(args.target_format, history, character, indent="auto", created_at=begun)
    with output(args.output) as out:
        out.write(text)


def _named(key: SessionKey) -> Character | None:
    """A stand-in for the session's character where no ``--character`` is given: the name its namespace holds
    (``turn/Kira~3f9a1c2b``: Kira), so the export names the speaker as the store knows it."""
    from charfmt.prompt.character import Character  # noqa: PLC0415 (import cost: every CLI command loads this module)

    name = character_of(key.namespace)
    if not name:
        return None
    return Character.model_validate({"name": name, "persona": name, "emotions": [{"key": "neutral"}]})


COMMAND: Final = Subcommand(
    add_arguments,
    run,
    help="list, show, export or delete the conversations a session store keeps",
    ok="done",
    invalid=(
        "the store does not exist, cannot be opened or read, or no session has that name"
        " (or several do: --owner/--namespace)"
    ),
    # psycopg for a ``postgresql://`` ``--store`` (``charfmt[postgres]``).
    extras=("postgres",),
)
