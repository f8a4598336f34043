"""``python -m nkserde``: the ``nkserde`` command line (nkserde/cli.py)."""

import sys

from .cli import main

sys.exit(main())
