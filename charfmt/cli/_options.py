"""The building blocks of the subcommands' options: usage errors as one line, whole numbers, and the options
several subcommands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Final, NoReturn

from charfmt.cli._io import EXIT_USAGE
from charfmt.parser import DEFAULT_MAX_SIZE
from charfmt.store import default_store_path, open_store
from charfmt.store.targets import target_problem


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors as one line: ``charfmt: error: ... (see 'charfmt X --help')``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"charfmt: error: {message} (see '{self.prog} --help')\n")


MOST_BOUND: Final = 10_000_000
"""The largest length bound an option takes: a grammar's repeat counts past it do not compile in every engine
(XGrammar: "Integer is too large"), and no context window holds a reply that long."""


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An option's type: a whole number from ``low`` (to ``high``)."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text[:40]!r}") from None
        if value < low or (high is not None and value > high):
            limits = f"from {low:,} to {high:,}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {limits}, not {value}")
        return value

    return whole


def positive(unit: str, most: float) -> Callable[[str], float]:
    """An option's type: a number of ``unit`` (``seconds``, ``days``), more than 0 and at most ``most``."""

    def positive(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, not {text[:40]!r}") from None
        if not 0 < value <= most:  # (nan is neither)
            raise argparse.ArgumentTypeError(f"must be more than 0 and at most {most:g} {unit}, not {text[:40]}")
        return value

    return positive


def add_cast(sp: argparse.ArgumentParser, scene: str) -> None:
    """``--character FILE|CARD`` or ``--scene FILE`` (one of them, required): who speaks (``scene``: its help)."""
    who = sp.add_mutually_exclusive_group(required=True)
    who.add_argument("--character", metavar="FILE|CARD", help="character TOML file or character card")
    who.add_argument("--scene", metavar="FILE", help=scene)


def add_cast_inputs(
    sp: argparse.ArgumentParser, *, scene: str, opens: str, user: str = "", memory: bool = False
) -> None:
    """What a turn with a character reads, for ``charfmt chat`` and ``charfmt serve`` alike: the cast
    (``--character`` or ``--scene``; ``scene``: its help), ``--user-name`` (``user``: what else is said of it),
    ``--max-size`` of those files, ``--lorebook``, ``--greeting`` (the one ``opens`` opens with) and ``--store``
    (``memory``: or ``--memory``). The subcommand's own ``--seed`` seeds the lore's rolls."""
    add_cast(sp, scene)
    add_user_name(sp, user)
    add_size(sp, "--character, --scene or --lorebook file")
    add_lore(sp, seed=False)
    add_greeting(sp, opens)
    add_store(sp, memory=memory)


def add_size(sp: argparse.ArgumentParser, what: str = "input", *, meaning: str | None = None) -> None:
    """``--max-size BYTES``: the largest ``what`` accepted (``meaning``: the whole help, if other)."""
    sp.add_argument(
        "--max-size",
        type=whole(1),
        default=DEFAULT_MAX_SIZE,
        metavar="BYTES",
        help=meaning or f"largest {what} accepted (default {DEFAULT_MAX_SIZE:,})",
    )


def add_character(sp: argparse.ArgumentParser, *, scene: bool = False) -> None:
    """``--character FILE`` (a reply's emotions and tags) and ``--user-name NAME``; ``scene``: or ``--scene FILE``
    (each chat's speaker one of the cast, each speaker's emotions its own), one of the two."""
    who = sp.add_mutually_exclusive_group() if scene else sp
    who.add_argument("--character", metavar="FILE", help="read replies with this character's emotions and [[tags]]")
    if scene:
        who.add_argument("--scene", metavar="FILE",
                         help="read replies as this scene's (TOML): each C chat's speaker one of the cast, with its "
                         "own emotions and tags")  # fmt: skip
    add_user_name(sp)


def add_tokenizer(sp: argparse.ArgumentParser, used: str) -> None:
    """``--tokenizer``: the model's own tokenizer, for ``used`` (``charfmt.prompt.tokens.counter_for``)."""
    sp.add_argument("--tokenizer", metavar="PATH|NAME", type=_tokenizer,
                    help=f"count tokens {used} with this tokenizer: a Hugging Face tokenizer.json (charfmt[tokenizers])"
                    " or a tiktoken model or encoding name (gpt-4o, cl100k_base); default: the model's own where"
                    " known, else charfmt's estimate (docs/TOKENS.md)")  # fmt: skip


def _tokenizer(text: str) -> str:
    """``--tokenizer``'s type: a file or a name, not nothing (an empty one names no file and no encoding)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a tokenizer.json file or a tiktoken model or encoding name, not nothing")
    from charfmt.prompt.tokens import unknown_tokenizer  # noqa: PLC0415 (loads tiktoken only where a name is given)

    why = unknown_tokenizer(text)
    if why is not None:  # neither a file nor a name tiktoken knows: a bad option value (a usage error)
        raise argparse.ArgumentTypeError(why)
    return text


def add_user_name(sp: argparse.ArgumentParser, more: str = "") -> None:
    """``--user-name NAME``: what a card's ``{{user}}`` becomes (``more``: what else the subcommand says of it)."""
    sp.add_argument(
        "--user-name", type=player_name, metavar="NAME",
        help=f"the player's name: what a card's {{{{user}}}} becomes{more}",
    )  # fmt: skip


def player_name(text: str) -> str:
    """``--user-name``'s type: a name a prompt can print (``charfmt.prompt.character.name_problem``)."""
    from charfmt.prompt.character import name_problem  # noqa: PLC0415 (import cost: every CLI command loads this module)

    if (why := name_problem(text)) is not None:
        raise argparse.ArgumentTypeError(f"{why} (got {text[:40]!r})")
    return text


def add_lore(sp: argparse.ArgumentParser, *, seed: bool = True) -> None:
    """``--lorebook FILE`` (repeatable) and ``--seed N``: lore beyond the card's own, and reproducible rolls
    (``seed=False``: the subcommand has its own ``--seed``, which the lore uses too)."""
    sp.add_argument(
        "--lorebook",
        action="append",
        metavar="FILE",
        help="a SillyTavern World Info JSON file (or a card's character_book) used with the card's own lorebook;"
        " repeat for more",
    )
    if not seed:
        return
    sp.add_argument(
        "--seed",
        type=whole(0),
        metavar="N",
        help="seed of the random macros ({{random}}, {{roll}}) and lore probabilities: the same turn each time",
    )


def add_greeting(sp: argparse.ArgumentParser, opens: str) -> None:
    """``--greeting N|none``: the card's greeting that ``opens`` (``the chat``, ``a new session``) opens with."""
    sp.add_argument(
        "--greeting",
        type=greeting_index,
        default=0,
        metavar="N|none",
        help=f"the card's greeting {opens} opens with (0: first_mes, 1...: alternate_greetings; default 0)",
    )


def greeting_index(text: str) -> int | None:
    """``--greeting``'s type: a card's greeting by number (0: ``first_mes``), or ``none``."""
    if text.strip().lower() == "none":
        return None
    return whole(0)(text)


def add_decoding(
    sp: argparse.ArgumentParser, *, constrained: str, free: str, max_tokens: int, tokens_help: str
) -> None:
    """``--constrained`` (the default) or ``--free``, and ``--max-tokens N``: how a model is asked for a reply."""
    mode = sp.add_mutually_exclusive_group()
    mode.add_argument("--constrained", dest="constrained", action="store_true", default=True, help=constrained)
    mode.add_argument("--free", dest="constrained", action="store_false", help=free)
    sp.add_argument("--max-tokens", type=whole(1), default=max_tokens, metavar="N", help=tokens_help)


def add_store(sp: argparse.ArgumentParser, *, memory: bool = False) -> None:
    """``--store PATH|DSN`` (and, with ``memory``, ``--memory``): where sessions are kept."""

    where = sp.add_mutually_exclusive_group() if memory else sp
    where.add_argument(
        "--store", metavar="PATH|DSN",
        help=f"where sessions are kept: a SQLite file, or a postgresql:// DSN (extra charfmt[postgres]) several "
        f"servers share (default {default_store_path()})",
    )  # fmt: skip
    if memory:
        where.add_argument("--memory", action="store_true", help="keep sessions in memory only: a restart forgets them")


def open_store_of(args: argparse.Namespace, *, create: bool = True) -> Any:
    """The store ``--store`` names (the default one where none is given; memory with ``--memory``): a store that
    cannot be opened is a ``StoreError`` (exit 1); ``create=False`` (a command that reads): one that does not exist
    too, and nothing is made."""

    if getattr(args, "memory", False):
        return open_store(None)
    if args.store is None:
        return open_store(default_store_path(), default=True, create=create)
    if args.store == "":
        args.parser.error("argument --store: a file name or a postgresql:// DSN, not an empty string")
    if (why := target_problem(args.store)) is not None:
        args.parser.error(f"argument --store: {why}")
    return open_store(args.store, create=create)


def add_bounds(sp: argparse.ArgumentParser) -> None:
    """The bounds of ``charfmt grammar`` and ``charfmt schema``: the keywords ``charfmt.grammar`` and
    ``charfmt.json_schema`` take (``bounds_of``), so the command line plans what the library plans."""
    sp.add_argument(
        "--max-tokens",
        type=whole(1, MOST_BOUND),
        metavar="N",
        help="bound the reply so it always closes within N tokens",
    )
    sp.add_argument("--max-chars", type=whole(1, MOST_BOUND), metavar="N", help="at most N characters per element")
    sp.add_argument("--max-chats", type=whole(1, MOST_BOUND), metavar="N", help="at most N chats per reply")
    sp.add_argument("--max-elements", type=whole(1), metavar="N", help="at most N elements per C chat")
    sp.add_argument("--tokens-per-char", type=_per_char, metavar="X",
                    help="with --max-tokens: the model's tokens per character (default: the UTF-8 bytes per "
                    "character of the --character's example speech, else 1; see docs/CONSTRAIN.md)")  # fmt: skip
    sp.add_argument("--no-require-speech", dest="require_speech", action="store_false", default=None,
                    help="with --max-tokens: a C chat need not speak (default: each says something)")  # fmt: skip


def bounds_of(args: argparse.Namespace) -> dict[str, Any]:
    """``add_bounds``' options as ``charfmt.grammar``'s keywords (``--no-require-speech`` needs ``--max-tokens``)."""
    if args.require_speech is False and args.max_tokens is None:
        args.parser.error("argument --no-require-speech: only with --max-tokens (speech is required within a budget)")
    if args.tokens_per_char is not None and args.max_tokens is None:
        args.parser.error("argument --tokens-per-char: only with --max-tokens")
    keys = ("max_tokens", "max_chars", "max_chats", "max_elements", "tokens_per_char", "require_speech")
    return {key: getattr(args, key) for key in keys}


def _per_char(text: str) -> float:
    """``--tokens-per-char``: a number of tokens per character, 1 to 4 (a character is at least one token)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text[:40]!r}") from None
    if not 1 <= value <= 4:
        raise argparse.ArgumentTypeError(f"must be 1 to 4 (tokens per character), not {text[:40]}")
    return value
