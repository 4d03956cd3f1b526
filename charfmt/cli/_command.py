"""What a subcommand declares (``Subcommand``: its help, what its exit statuses mean, the extras it may need, its
options and what it runs) and the ``exit status:`` block each ``--help`` ends with."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Final

from charfmt.parser import DEFAULT_MAX_SIZE

_OK: Final = "success"
"""What exit status 0 means where a subcommand says nothing more precise."""

_INVALID: Final = "invalid input: charfmt rejects what the file holds"
"""What exit status 1 means where a subcommand says nothing more precise."""

_USAGE_EXIT: Final = "usage error, or a file that cannot be used (missing, a directory, over {size})"


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One ``charfmt`` subcommand: declared once, as ``COMMAND`` at the end of its module, and read by
    ``charfmt.cli`` for the parser, the help and the exit statuses."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    """Adds its options to its parser."""
    run: Callable[[argparse.Namespace], int]
    """Runs it; the exit status."""
    _: KW_ONLY
    help: str
    """The one line ``charfmt --help`` says of it; its own ``--help`` opens with it as a sentence."""
    ok: str = _OK
    """What exit status 0 means."""
    invalid: str | None = _INVALID
    """What exit status 1 means (``None``: it never exits 1)."""
    extras: tuple[str, ...] = ()
    """The optional extras it may need (``arrow`` for ``charfmt[arrow]``); a missing one exits 1, naming it."""

    @property
    def description(self) -> str:
        """What its own ``--help`` says first: the one-line help as a sentence."""
        return self.help[:1].upper() + self.help[1:] + "."

    def epilog(self, *, max_size: bool) -> str:
        """The ``exit status:`` block its ``--help`` ends with (``max_size``: whether it has ``--max-size``)."""
        return exit_codes(self.ok, self.invalid, self.extras, max_size=max_size)


def exit_codes(
    ok: str = _OK, invalid: str | None = _INVALID, extras: Sequence[str] = (), *, max_size: bool = True
) -> str:
    """The ``exit status:`` block at the end of a ``--help`` (2 and 130 mean the same everywhere).

    ``extras``: the optional extras the command may need; one that is not installed exits 1 too.
    ``max_size``: whether the command has ``--max-size`` (else the size its files may have is named).
    """
    if extras:
        invalid = f"{invalid}; or {missing_extra(extras)}"
    usage = _USAGE_EXIT.format(size="--max-size" if max_size else f"{DEFAULT_MAX_SIZE:,} bytes")
    rows = [("0", ok), *([("1", invalid)] if invalid else []), ("2", usage), ("130", "interrupted (Ctrl-C)")]
    lines = (textwrap.fill(what, 100, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7) for code, what in rows)
    return "exit status:\n" + "\n".join(lines)


def missing_extra(extras: Sequence[str]) -> str:
    """What exit status 1 also means for a command that needs ``extras``: ``an optional extra it needs ...``."""
    named = " or ".join(f"charfmt[{name}]" for name in extras)
    return f"an optional extra it needs is not installed ({named}: the error names it)"
