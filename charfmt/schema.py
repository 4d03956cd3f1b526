"""Old home of ``charfmt.constrain.schema``: a door kept so users' ``charfmt.schema`` imports still work.

The module moved into the constraining wing (issue 41), which keeps this public path.
Import from ``charfmt.constrain.schema``; nothing inside the package imports this door.
"""

from charfmt.constrain.schema import *  # noqa: F403 (a door: every public name of its home)
from charfmt.constrain.schema import __all__ as __all__  # noqa: PLC0414 (the door's names are its home's)
