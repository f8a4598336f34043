"""``python -m nkserde.schema``: the schema manifest's command line (manifest.py)."""

import sys

from .manifest import main

sys.exit(main())
