"""The turn log (``--log FILE.jsonl``): one JSON object per turn, the shape ``charfmt report`` reads.

Each line holds ``text`` (the model's raw reply, ``report``'s default field), ``request_id``,
``session``, ``model``, ``prompt_version``, ``upstream``, ``valid`` and ``timing``. The file is
opened once for appending and never through a symlink (``O_NOFOLLOW``); each line is one
``write`` of strict JSON, so lines of concurrent turns never interleave.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from charfmt.diagnostics import CharfmtError


class TurnLog:
    """An append-only JSON Lines file."""

    def __init__(self, path: Path) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as e:
            raise CharfmtError(f"cannot open --log {path}: {e.strerror or e}") from None
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line (strict JSON: no ``NaN``)."""
        line = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)
