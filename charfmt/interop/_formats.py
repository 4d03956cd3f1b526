"""The interop formats, by name: one row each (a format is its module's declaration, ``pam.PAM``...).

Adding a format: declare it in its own module (a ``Format``: see ``_declaration``), then add
its row here; ``interop.FORMATS``, ``charfmt convert`` and the tests pick it up.
"""

from __future__ import annotations

from typing import Final

from charfmt.interop._declaration import Format
from charfmt.interop.ailoy import AILOY
from charfmt.interop.groupchat import GROUPCHAT
from charfmt.interop.pam import PAM
from charfmt.interop.uacs import UACS

DECLARED: Final[dict[str, Format]] = {
    "pam": PAM,
    "uacs": UACS,
    "groupchat": GROUPCHAT,
    "ailoy": AILOY,
}
"""Every format by name, in the order ``interop.FORMATS`` lists them."""
