"""``python -m nkserde``: the ``nkserde`` command line (nkserde/cli/)."""

import sys

from .cli import main

sys.exit(main())
