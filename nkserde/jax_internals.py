"""Every use of a private JAX name, each behind one small function.

nkserde supports JAX from 0.7.0 (NetKet 3.21's floor) on; where a public
name exists only in newer releases, the function uses it when it exists and
the private one it replaced otherwise. When a JAX release breaks one of
these, this is the file to change.
"""

from __future__ import annotations

import functools
import os
import threading

import jax


def is_initializer(f) -> bool:
    """Whether ``f`` is one of ``jax.nn.initializers`` or was made by one
    (``normal(0.01)``, ``lecun_normal()``; flax's initializers are JAX's).
    The modules they are defined in (private, ``jax._src.nn.initializers``
    from JAX 0.4 to 0.12) are read off initializers the public API makes,
    so no private name is written here."""
    module = getattr(f, "__module__", None)
    return module is not None and module in _initializer_modules()


@functools.cache
def _initializer_modules() -> frozenset:
    """The modules of functions ``jax.nn.initializers`` makes (JAX 0.4 to 0.12)."""
    init = jax.nn.initializers
    made = (init.normal(), init.constant(0.0), init.variance_scaling(1.0, "fan_in", "normal"), init.zeros)
    return frozenset(getattr(f, "__module__", None) for f in made) | {init.__name__}


def concrete_mesh():
    """The mesh set by ``jax.sharding.set_mesh`` (NetKet sets one), or None.

    Public as ``jax.sharding.get_mesh`` since JAX 0.8; before, the same
    value is ``jax._src.mesh.get_concrete_mesh()`` (JAX 0.7).
    """
    get_mesh = getattr(jax.sharding, "get_mesh", None)
    if get_mesh is None:
        from jax._src import mesh  # JAX 0.7

        get_mesh = mesh.get_concrete_mesh
    mesh = get_mesh()
    return None if mesh is None or mesh.empty else mesh


def using_mesh(mesh):
    """A context in which ``mesh`` is the mesh set (``jax.sharding.set_mesh``
    as a context manager since JAX 0.8; ``jax.sharding.use_mesh`` in JAX
    0.7, where ``set_mesh`` sets it for good)."""
    use_mesh = getattr(jax.sharding, "use_mesh", None)
    return use_mesh(mesh) if use_mesh is not None else jax.sharding.set_mesh(mesh)


def weak_typed(x):
    """``x`` as a weakly typed array of its own dtype. Relies on
    ``jax._src.lax.lax._convert_element_type(x, dtype, weak_type=True)``,
    unchanged from JAX 0.4 to 0.10: there is no public way to set weak typing."""
    from jax._src.lax.lax import _convert_element_type

    return _convert_element_type(x, x.dtype, weak_type=True)


def distributed_client():
    """The client of JAX's coordination service (its key-value store and
    barriers), or None before ``jax.distributed.initialize``. Relies on
    ``jax._src.distributed.global_state.client`` (JAX 0.4 to 0.10)."""
    from jax._src import distributed

    return distributed.global_state.client


def coordinator_address() -> str | None:
    """``host:port`` of JAX's coordination service as this process reaches
    it, or None before ``jax.distributed.initialize``. Relies on
    ``jax._src.distributed.global_state.coordinator_address`` (JAX 0.4 to
    0.10)."""
    from jax._src import distributed

    return distributed.global_state.coordinator_address


def process_id() -> int:
    """This process's index in the multi-process run, 0 before (or
    without) ``jax.distributed.initialize``, read without initializing a
    backend (``jax.process_index()`` would, and ``initialize`` must come
    first). Relies on ``jax._src.distributed.global_state.process_id``
    (JAX 0.4 to 0.10)."""
    from jax._src import distributed

    return int(distributed.global_state.process_id or 0)


def reset_compilation_cache() -> None:
    """Makes JAX decide again, at its next compilation, whether and where
    its persistent compilation cache is used (it decides once per process,
    at the first compilation). Relies on
    ``jax._src.compilation_cache.reset_cache`` (JAX 0.4.14 to 0.10; public
    as ``jax.experimental.compilation_cache.compilation_cache.reset_cache``
    in some releases)."""
    from jax._src import compilation_cache

    compilation_cache.reset_cache()


TEMPORARY_ENTRY_PREFIX = ".nkserde-writing-"  # never ends in JAX's "-cache": JAX and the prune skip it


_skipped = None  # skip_cache_in's predicate: directory -> whether JAX's file cache is left alone there


def skip_cache_in(skipped) -> None:
    """From now on JAX's file cache, as :func:`wrap_file_cache` makes it,
    reads nothing from and writes nothing to a directory for which
    ``skipped(directory)`` is true (asked at each read and write, the
    directory as a string; None: no directory is skipped). Relies on what
    :func:`wrap_file_cache` relies on (JAX 0.4.26 to 0.12)."""
    global _skipped
    _skipped = skipped


def wrap_file_cache() -> None:
    """Makes JAX's file cache (once per process) skip the directories
    :func:`skip_cache_in` names, and write each entry into a temporary file
    of its directory, then rename it into place: a reader in another
    process or on another node finds no entry or the whole of it, never a
    part it reports as an error, and a writer killed in the middle leaves
    no truncated entry, which JAX would report on every later run and never
    replace. Relies on ``jax._src.lru_cache.LRUCache.get`` and ``put`` (JAX
    0.4.26 to 0.12); JAX's own ``put`` still writes with its eviction on
    (it takes a lock around its reads and writes) and for a path that is
    not a local one."""
    from pathlib import Path

    from jax._src import lru_cache

    if getattr(lru_cache.LRUCache.put, "writes_atomically", False):
        return
    jax_get, jax_put = lru_cache.LRUCache.get, lru_cache.LRUCache.put

    def where(cache) -> str:
        return str(getattr(cache, "path", ""))  # a pathlib or an etils path; "gs://..." is not local

    def skipped(directory: str) -> bool:
        return _skipped is not None and _skipped(directory)

    def get(self, key: str, *args, **kwargs):
        return None if skipped(where(self)) else jax_get(self, key, *args, **kwargs)

    def put(self, key: str, value: bytes) -> None:
        directory = where(self)
        if skipped(directory):
            return None
        if not key or not directory or "://" in directory or getattr(self, "eviction_enabled", True):
            return jax_put(self, key, value)
        entry = Path(directory) / f"{key}{lru_cache._CACHE_SUFFIX}"
        if entry.exists():  # JAX's rule: an entry is never replaced
            return None
        temporary = entry.parent / f"{TEMPORARY_ENTRY_PREFIX}{key}.{os.getpid()}.{threading.get_native_id()}"
        try:
            temporary.write_bytes(value)
            os.replace(temporary, entry)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return None

    put.writes_atomically = True
    lru_cache.LRUCache.get, lru_cache.LRUCache.put = get, put
