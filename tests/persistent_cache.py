"""JAX's persistent compilation cache for the test processes and the
processes they launch (tests/conftest.py, tests/_mp_worker.py,
tests/_ckpt_script.py): every compilation cached, whatever its time or
size. Imports only JAX: a process must call :func:`use` before NetKet's
import compiles anything (JAX decides at its first compilation whether
the process has a cache).

Set as a user sets it, not by ``nkserde.caches.jax_executables.use``: a Checkpoint
leaves a cache the user configured as it is, and the tests' caches must
stay where the tests put them."""

from __future__ import annotations

import jax


def use(directory) -> None:
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
