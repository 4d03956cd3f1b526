"""``python -m charfmt``: the command-line interface."""

import sys

try:
    from charfmt.cli import main
except KeyboardInterrupt:  # Ctrl-C while starting up: the same one line as later
    print("charfmt: error: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
