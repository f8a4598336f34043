"""Compiled code that outlives the process: JAX's persistent compilation
cache (:mod:`~nkserde.caches.jax_executables`), numba's cache of NetKet's
operator kernels (:mod:`~nkserde.caches.numba_kernels`) and the results a
resumed run would compute again (:mod:`~nkserde.caches.results`: the
fingerprint's probes, a jax LocalOperator's tables), side by side. The one
entry point of the package:

    caches.use()                   # the user's cache directory
    caches.use("/scratch/me/jax")  # or one of one's own: nkserde.compilation_cache(DIR)
    caches.use_default()           # the one given before, else the user's: compile_cache="auto"

A script needs no call: ``import nkserde`` points JAX at the user's cache
directory as NetKet is imported, and :func:`use_default` follows when nkserde's
API loads (:mod:`~nkserde.caches.automatic`, off with
``NKSERDE_COMPILATION_CACHE=off``).

numba's files go in a ``numba`` subdirectory of the directory given (or of
nkserde's default one, also when JAX's cache is one the user configured),
the results in a ``results`` one, each written by process 0 only and
bounded apart from JAX's entries.

Importing this package imports neither JAX, numba nor NetKet (``import
nkserde`` installs the automatic cache from here); :func:`use` imports
what it sets.

Imports: jax_internals, netket/ (its internals: a jax LocalOperator's
tables).
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing's costs milliseconds of ``import nkserde``, as pathlib would)
if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_MAX_BYTES = 4 * 2**30  # of JAX's entries
# the packages whose numba functions get a cache (NetKet asks for none)
PACKAGES = ("netket",)
_given: Path | None = None  # the directory use() was last given in this process (None: the default)


def use(directory=None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Path | None:
    """Points JAX's persistent compilation cache at ``directory`` (see
    :func:`nkserde.caches.jax_executables.use`) and caches NetKet's numba
    kernels and the fingerprint's probes beside it; returns the directory
    JAX's cache is in. Takes effect for what compiles from now on (and
    writes NetKet's kernels compiled before); call it again after importing
    a NetKet module that was not loaded. Makes nothing on disk: each cache
    makes its directory when it first writes.

    A script needs no call for the default directory: ``import nkserde``
    sets it as NetKet is imported (:mod:`nkserde.caches.automatic`;
    ``NKSERDE_COMPILATION_CACHE=off`` turns that off). A call with a
    directory of one's own, before anything is built, keeps everything
    there."""
    from pathlib import Path

    from .. import jax_internals
    from . import jax_executables, numba_kernels, operator_tables, results

    global _given
    _given = None if directory is None else Path(directory)
    path = jax_executables.use(directory, max_bytes=max_bytes)
    root = Path(directory) if directory is not None else jax_executables.default_directory()
    writes = lambda: jax_internals.process_id() == 0  # noqa: E731  (as JAX writes its cache)
    numba_kernels.use(root / "numba", PACKAGES, may_write=writes)
    results.use(root / "results", may_write=writes)
    operator_tables.use()
    if writes():
        for kept, prune in ((root / "numba", numba_kernels.prune), (root / "results", results.prune)):
            if kept.is_dir():
                prune(kept)
    return path


def use_default(*, max_bytes: int = DEFAULT_MAX_BYTES) -> Path | None:
    """:func:`use` of the directory given to it earlier in this process
    (``nkserde.compilation_cache(DIR)`` at the top of a script), else of
    the default one: what a Checkpoint's ``compile_cache="auto"`` sets, so
    that it keeps the script's own directory."""
    return use(_given, max_bytes=max_bytes)
