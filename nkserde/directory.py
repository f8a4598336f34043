"""Moved to :mod:`nkserde.checkpoint.files`; this name stays for code that
imported it (it is the same module object)."""

import sys

from .checkpoint import files as _moved

sys.modules[__name__] = _moved
