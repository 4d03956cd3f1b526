"""Old home of ``charfmt.prompt.render``: a door kept so users' ``charfmt.render`` imports still work.

The module moved into the prompting wing (issue 41), which keeps this public path.
Import from ``charfmt.prompt.render``; nothing inside the package imports this door.
"""

from charfmt.prompt.render import *  # noqa: F403 (a door: every public name of its home)
from charfmt.prompt.render import __all__ as __all__  # noqa: PLC0414 (the door's names are its home's)
