"""``python -m braidpy``: the braidpy command line (see :mod:`braidpy.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
