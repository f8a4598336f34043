"""Moved to :mod:`nkserde.checkpoint.content`; this name stays for code that
imported it (it is the same module object)."""

import sys

from .checkpoint import content as _moved

sys.modules[__name__] = _moved
