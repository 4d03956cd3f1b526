"""What ``charfmt serve`` writes down: the turn log (``--log FILE.jsonl``) and the console, secrets ``***`` in both.

The turn log has one JSON object per turn, the shape ``charfmt report`` reads. Each line holds
``text`` (the model's raw reply, ``report``'s default field), ``request_id``, ``session``,
``model``, ``prompt_version``, ``upstream``, ``valid`` and ``timing``. The file is opened once
for appending and never through a symlink (``O_NOFOLLOW``); each line is one ``write`` of
strict JSON, so lines of concurrent turns never interleave. Every string of a line but the
model's ``text`` (an ``error``, above all) is redacted (:mod:`charfmt._redact`); so is every
line of the console (:class:`Redacting`, on its handlers: uvicorn's access and error lines,
the failed turns, the guard's refusals, a traceback's text).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from charfmt._redact import Redactor
from charfmt.diagnostics import CharfmtError

_VERBATIM = frozenset({"text"})
"""The fields a line keeps as they are: the model's reply, as ``charfmt report`` reads it."""


class TurnLog:
    """An append-only JSON Lines file."""

    def __init__(self, path: Path, redact: Redactor | None = None) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as e:
            raise CharfmtError(f"cannot open --log {path}: {e.strerror or e}") from None
        self.path = path
        self._redact = redact or Redactor()

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line (strict JSON: no ``NaN``), its strings but ``text`` redacted."""
        redact = self._redact
        shown = {k: redact(v) if isinstance(v, str) and k not in _VERBATIM else v for k, v in record.items()}
        line = json.dumps(shown, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


class Redacting(logging.Filter):
    """A handler's filter: a record's message, arguments and traceback redacted before it is written."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always keep it."""
        redact = self._redact
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:  # (formatted once, here, so that its text is redacted)
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_console(redact: Redactor, loggers: tuple[str, ...]) -> None:
    """Every handler of ``loggers`` (and the last-resort handler) redacts what it writes."""
    handlers = {h for name in loggers for h in logging.getLogger(name).handlers}
    if logging.lastResort is not None:
        handlers.add(logging.lastResort)
    for handler in handlers:
        handler.addFilter(Redacting(redact))
