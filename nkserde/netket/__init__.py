"""nkserde registrations of NetKet (and optax/numpy) types, one module per
NetKet area. They describe *what* is stored: field names, and how to
rebuild an object from its template. They know nothing about files.

The on-disk schema of each type is documented in ``docs/schema.md``.

Imports: errors, _warnings, types/.
"""

# callbacks adds its rule before the generic pytree rule, so it is consulted first
from . import callbacks, pytrees, configuration, optimizers, samplers, vqs, dynamics, drivers, loggers  # noqa: F401  (registration side effects)
