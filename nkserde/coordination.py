"""Moved to :mod:`nkserde.processes.coordination`; this name stays for code that
imported it (it is the same module object)."""

import sys

from .processes import coordination as _moved

sys.modules[__name__] = _moved
