"""Old home of ``charfmt.prompt.scene``: a door kept so users' ``charfmt.scene`` imports still work.

The module moved into the prompting wing (issue 41); docs/API.md names this path.
Import from ``charfmt.prompt.scene``; nothing inside the package imports this door.
"""

from charfmt.prompt.scene import (
    MAX_CAST,
    SPEAKER_ID,
    Scene,
    speaker_id_problem,
)

__all__ = [
    "MAX_CAST",
    "SPEAKER_ID",
    "Scene",
    "speaker_id_problem",
]
