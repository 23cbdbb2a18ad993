"""``python -m durabl``: the command line (see :mod:`durabl.cli`)."""

from __future__ import annotations

import sys

from durabl.cli import main

if __name__ == "__main__":
    sys.exit(main())
