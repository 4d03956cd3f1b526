"""Old home of ``charfmt.constrain.engines`` and ``charfmt.llm.loading``: a door for users' ``charfmt.engines`` imports.

The recipes moved into the constraining wing, model loading into the model wing (issue 41);
docs/API.md names this path. Import from the two homes; nothing inside the package imports this door.
"""

from charfmt.constrain.engines import *  # noqa: F403 (a door: every public name of its homes)
from charfmt.constrain.engines import __all__ as _engines_names
from charfmt.llm.loading import *  # noqa: F403 (a door: every public name of its homes)
from charfmt.llm.loading import __all__ as _loading_names

__all__ = [*_engines_names, *_loading_names]  # noqa: PLE0604 (its homes' own lists of names)
