"""The interop formats, by name: one row each (a format is its module's declaration, ``pam.PAM``...).

Adding a format:

1. A module ``interop/<name>.py`` declaring it: a ``Format`` (``_declaration``) built of the
   parts in ``_shapes`` (where its role, text, charfmt's entry and reasoning are), its
   ``message``/``empty`` writers, and a part of its own for what no other format does.
2. Its row here: ``interop.CONVERTERS``, ``charfmt convert``'s choices (``charfmt.cli.convert.CONVERSATION_FORMATS``,
   which reads this table when first asked) and the tests that run over it follow.
3. A foreign document of it in ``tests/interop/samples/<name>.json`` (the tests read one a format).
"""

from __future__ import annotations

from typing import Final

from charfmt.interop._declaration import Format
from charfmt.interop.ailoy import AILOY
from charfmt.interop.groupchat import GROUPCHAT
from charfmt.interop.pam import PAM
from charfmt.interop.uacs import UACS

DECLARED: Final[dict[str, Format]] = {fmt.name: fmt for fmt in (PAM, UACS, GROUPCHAT, AILOY)}
"""Every format by name, in the order ``interop.CONVERTERS`` lists them."""
