"""Moved to :mod:`nkserde.processes.jax_service`; this name stays for code that
imported it (it is the same module object)."""

import sys

from .processes import jax_service as _moved

sys.modules[__name__] = _moved
