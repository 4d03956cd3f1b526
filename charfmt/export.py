"""Old home of ``charfmt.constrain.export``: a door kept so users' ``charfmt.export`` imports still work.

The module moved into the constraining wing (issue 41); docs/API.md names this path.
Import from ``charfmt.constrain.export``; nothing inside the package imports this door.
"""

from charfmt.constrain.export import *  # noqa: F403 (a door: every public name of its home)
from charfmt.constrain.export import __all__ as __all__  # noqa: PLC0414 (the door's names are its home's)
