"""``python -m charfmt``: the command-line interface."""

import sys

from charfmt.cli import main

sys.exit(main())
