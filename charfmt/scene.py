"""Old home of ``charfmt.prompt.scene``: a door kept so users' ``charfmt.scene`` imports still work.

The module moved into the prompting wing (issue 41); docs/API.md names this path.
Import from ``charfmt.prompt.scene``; nothing inside the package imports this door.
"""

from charfmt.prompt.scene import *  # noqa: F403 (a door: every public name of its home)
from charfmt.prompt.scene import __all__ as __all__  # noqa: PLC0414 (the door's names are its home's)
