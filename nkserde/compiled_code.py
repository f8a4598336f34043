"""Compiled code that outlives the process: JAX's persistent compilation
cache (:mod:`nkserde.jax_cache`) and numba's cache of NetKet's operator
kernels (:mod:`nkserde.numba_cache`), side by side. What
``nkserde.compilation_cache()`` and a Checkpoint's ``compile_cache`` set.

    compiled_code.use()                   # the user's cache directory
    compiled_code.use("/scratch/me/jax")  # or one of one's own

numba's files go in a ``numba`` subdirectory of the directory given (or of
nkserde's default one, also when JAX's cache is one the user configured),
written by process 0 only, and bounded apart from JAX's entries.
"""

from __future__ import annotations

from pathlib import Path

from . import jax_cache, jax_internals, numba_cache

# the packages whose numba functions get a cache (NetKet asks for none)
PACKAGES = ("netket",)


def use(directory=None, *, max_bytes: int = jax_cache.DEFAULT_MAX_BYTES) -> Path | None:
    """Points JAX's persistent compilation cache at ``directory`` (see
    :func:`nkserde.jax_cache.use`) and caches NetKet's numba kernels beside
    it; returns the directory JAX's cache is in. Takes effect for what
    compiles from now on (and writes NetKet's kernels compiled before);
    call it again after importing a NetKet module that was not loaded."""
    path = jax_cache.use(directory, max_bytes=max_bytes)
    numba_directory = (Path(directory) if directory is not None else jax_cache.default_directory()) / "numba"
    numba_cache.use(numba_directory, PACKAGES, may_write=lambda: jax_internals.process_id() == 0)
    if jax_internals.process_id() == 0 and numba_directory.is_dir():
        numba_cache.prune(numba_directory)
    return path
