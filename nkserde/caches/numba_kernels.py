"""numba's on-disk cache for the kernels of packages that do not ask for
one, so that a resumed run loads the machine code its first job compiled.
Knows numba (no NetKet, no JAX): the caller names the packages and says
whether this process writes.

    numba_kernels.use(directory, ("netket",), may_write=lambda: rank == 0)

NetKet compiles its operators' kernels with ``numba.jit`` and no
``cache=True`` (a LocalOperator's set-up, an Ising's connected elements):
about a second in every process that touches its Hamiltonian, which JAX's
persistent cache cannot hold. :func:`use` gives each such function (at the
top level of a loaded module of the package, or a static method of one of
its classes) a cache in ``directory``:

* keyed as numba keys its own (signature, CPU and its features, the
  function's bytecode; numba's release and Python's in the file names and
  the index), and by a stamp of the whole package's source files (size and
  mtime of each): numba's own cache keeps code that calls a function of
  another file after that file changed, this one starts again when any
  file of the package changes (an upgrade, an edit);
* a subdirectory per source directory, as numba lays out NUMBA_CACHE_DIR;
* written atomically (numba writes a temporary file and renames it), by
  the processes ``may_write`` allows (process 0 of a multi-process run, as
  JAX's cache is written);
* a cache that cannot be read or written is passed over: the kernel
  compiles as it would without one (an index that cannot be read is
  written anew);
* kept under a bound by :func:`prune`.

Functions with a cache of their own, closures, and what numba cannot cache
(lifted loops, dynamic globals) are left as they are. numba's index and
data files are pickles that hold native code: like JAX's cache they are
run as code, so they belong in the user's cache directory, never in a
checkpoint directory (docs/explanations/threat-model.md).

What this needs of numba beyond its public API is in
:mod:`nkserde.caches.numba_internals` (numba 0.59 to 0.68); where numba is
not as expected there, :func:`use` caches nothing and the kernels compile
as before.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from . import lru, numba_internals, source_stamp

DEFAULT_MAX_BYTES = 256 * 2**20


def use(directory, packages: Iterable[str], *, may_write: Callable[[], bool] = lambda: True) -> int:
    """Caches in ``directory`` the numba functions of the loaded modules of
    ``packages`` (names of top-level packages) that have no cache; returns
    how many it gave one. Code they compiled before is written now (if
    ``may_write()``); functions of modules imported later need another
    call. A function already cached here by an earlier call with another
    directory moves to this one."""
    directory = Path(directory)
    given = 0
    for dispatcher in _dispatchers(tuple(packages)):
        py_func = dispatcher.py_func
        path = _files_of(directory, py_func)
        current = numba_internals.cache_path(dispatcher)
        if current == path or (current is None and not numba_internals.has_no_cache(dispatcher)):
            continue  # cached here already, or numba's own (cache=True)
        given += numba_internals.attach_cache(dispatcher, path, _stamp_of(py_func), may_write)
    return given


def prune(directory, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Deletes the least recently used of numba's files under ``directory``
    beyond ``max_bytes``; returns how many. (An index whose data file is
    gone, or data without its index, is a miss: numba compiles again.)"""
    files = (p for p in Path(directory).rglob("*") if p.suffix in numba_internals.SUFFIXES)
    return lru.delete_least_recently_used(files, max_bytes)


def _dispatchers(packages: tuple[str, ...]):
    """numba's CPU functions at the top level of the loaded modules of
    ``packages`` and the static methods of their classes, defined there,
    without closures (numba would pickle a closure's cells into its key)."""
    seen = set()
    for name, module in list(sys.modules.items()):
        if module is None or not _within(name, packages):
            continue
        for value in list(vars(module).values()):
            candidates = [value]
            if isinstance(value, type) and value.__module__ == name:
                candidates = [v.__func__ if isinstance(v, staticmethod) else v for v in vars(value).values()]
            for candidate in candidates:
                if not numba_internals.is_cpu_dispatcher(candidate) or id(candidate) in seen:
                    continue
                seen.add(id(candidate))
                py_func = candidate.py_func
                if py_func.__closure__ is None and _within(getattr(py_func, "__module__", "") or "", packages):
                    yield candidate


def _within(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def _files_of(directory: Path, py_func) -> str:
    """Where a function's files go: a subdirectory of the cache per source
    directory (its name and a digest of its path), as numba lays out
    NUMBA_CACHE_DIR."""
    source_directory = os.path.dirname(os.path.abspath(py_func.__code__.co_filename))
    digest = hashlib.sha1(source_directory.encode()).hexdigest()[:16]
    return str(directory / f"{os.path.basename(source_directory)}_{digest}")


@functools.lru_cache(maxsize=None)
def _stamp_of(py_func) -> str:
    """The stamp of the package ``py_func`` is in (of its own directory
    if it is in none)."""
    top = (getattr(py_func, "__module__", "") or "").split(".")[0]
    package = sys.modules.get(top)
    root = os.path.dirname(os.path.abspath(getattr(package, "__file__", None) or py_func.__code__.co_filename))
    return source_stamp.of_directory(root)
