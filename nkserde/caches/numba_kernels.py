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

Relies on numba's ``numba.core.caching`` (``_CacheLocator``,
``CompileResultCacheImpl``, ``FunctionCache`` and its index file's
``_load_index`` and ``_index_path``, ``NullCache``) and a CPU dispatcher's
``_cache`` and ``overloads`` (numba 0.59 to 0.68); without them :func:`use`
caches nothing.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from . import lru, source_stamp

try:
    from numba.core import caching as _caching
    from numba.core.errors import NumbaWarning
    from numba.core.registry import CPUDispatcher
except ImportError:  # no numba, or one laid out otherwise: nothing to cache
    _caching = None

DEFAULT_MAX_BYTES = 256 * 2**20
_SUFFIXES = (".nbi", ".nbc")  # numba's index and data files


def use(directory, packages: Iterable[str], *, may_write: Callable[[], bool] = lambda: True) -> int:
    """Caches in ``directory`` the numba functions of the loaded modules of
    ``packages`` (names of top-level packages) that have no cache; returns
    how many it gave one. Code they compiled before is written now (if
    ``may_write()``); functions of modules imported later need another
    call. A function already cached here by an earlier call with another
    directory moves to this one. Relies on a CPU dispatcher's ``_cache``
    and ``overloads`` and numba's ``NullCache`` (numba 0.59 to 0.68)."""
    if _caching is None:
        return 0
    directory = Path(directory)
    given = 0
    for dispatcher in _dispatchers(tuple(packages)):
        cache = dispatcher._cache
        if isinstance(cache, _Cache):
            if cache.directory == directory:
                continue
        elif not isinstance(cache, _caching.NullCache):
            continue  # cache=True: numba's own
        try:
            cache = _Cache(dispatcher.py_func, directory, may_write)
        except Exception:  # noqa: BLE001  (numba cannot place it: it compiles as before)
            continue
        dispatcher._cache = cache
        given += 1
        for signature, compiled in list(dispatcher.overloads.items()):
            cache.save_overload(signature, compiled)
    return given


def prune(directory, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Deletes the least recently used of numba's files under ``directory``
    beyond ``max_bytes``; returns how many. (An index whose data file is
    gone, or data without its index, is a miss: numba compiles again.)
    Relies on numba's names for them, ``.nbi`` and ``.nbc`` (numba 0.59 to
    0.68)."""
    files = (p for p in Path(directory).rglob("*") if p.suffix in _SUFFIXES)
    return lru.delete_least_recently_used(files, max_bytes)


def _dispatchers(packages: tuple[str, ...]):
    """numba's CPU functions at the top level of the loaded modules of
    ``packages`` and the static methods of their classes, defined there,
    without closures (numba would pickle a closure's cells into its key).
    Relies on ``CPUDispatcher.py_func`` (numba 0.59 to 0.68)."""
    seen = set()
    for name, module in list(sys.modules.items()):
        if module is None or not _within(name, packages):
            continue
        for value in list(vars(module).values()):
            candidates = [value]
            if isinstance(value, type) and value.__module__ == name:
                candidates = [v.__func__ if isinstance(v, staticmethod) else v for v in vars(value).values()]
            for candidate in candidates:
                if not isinstance(candidate, CPUDispatcher) or id(candidate) in seen:
                    continue
                seen.add(id(candidate))
                py_func = candidate.py_func
                if py_func.__closure__ is None and _within(getattr(py_func, "__module__", "") or "", packages):
                    yield candidate


def _within(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one (no numba:
    Python 3.11 and later)."""
    return any(module == p or module.startswith(p + ".") for p in packages)


@functools.lru_cache(maxsize=None)
def _stamp_of(py_func) -> str:
    """The stamp of the package ``py_func`` is in (of its own directory
    if it is in none; no numba: Python 3.11 and later)."""
    top = (getattr(py_func, "__module__", "") or "").split(".")[0]
    package = sys.modules.get(top)
    root = os.path.dirname(os.path.abspath(getattr(package, "__file__", None) or py_func.__code__.co_filename))
    return source_stamp.of_directory(root)


if _caching is not None:

    class _Locator(_caching._CacheLocator):
        """Where and under which stamp a function's files are: a subdirectory
        of the cache per source directory (its name and a digest of its
        path), the package's stamp."""

        directory: Path  # set on the subclass made for each cache directory

        def __init__(self, py_func, py_file):
            source_directory = os.path.dirname(os.path.abspath(py_file))
            digest = hashlib.sha1(source_directory.encode()).hexdigest()[:16]
            self._path = str(self.directory / f"{os.path.basename(source_directory)}_{digest}")
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._stamp = _stamp_of(py_func)

        def get_cache_path(self):
            return self._path

        def get_source_stamp(self):
            return self._stamp

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            return cls(py_func, py_file)  # the directory is made when something is written

    @functools.lru_cache(maxsize=None)
    def _implementation(directory: Path):
        locator = type("_Locator", (_Locator,), {"directory": directory})

        class _Implementation(_caching.CompileResultCacheImpl):
            _locator_classes = [locator]

            def check_cachable(self, cres):
                with warnings.catch_warnings():  # numba warns for each; such a kernel compiles as before
                    warnings.simplefilter("ignore", NumbaWarning)
                    return super().check_cachable(cres)

        return _Implementation

    class _Cache(_caching.FunctionCache):
        """numba's per-function cache, in ``directory``, writing only where
        ``may_write()``, and passing over what it cannot read or write."""

        def __init__(self, py_func, directory: Path, may_write: Callable[[], bool]):
            self.directory = directory
            self._may_write = may_write
            self._impl_class = _implementation(directory)
            super().__init__(py_func)

        def load_overload(self, sig, target_context):
            try:
                return super().load_overload(sig, target_context)
            except Exception:  # noqa: BLE001  (a damaged or foreign entry: compile it)
                return None

        def save_overload(self, sig, data):
            try:
                if not self._may_write():
                    return
                try:
                    super().save_overload(sig, data)
                except Exception:  # noqa: BLE001  (a damaged index: numba reads it before it writes)
                    if self._drop_damaged_index():
                        super().save_overload(sig, data)
            except Exception:  # noqa: BLE001  (a full disk, a read-only cache: the run goes on)
                pass

        def _drop_damaged_index(self) -> bool:
            """Deletes this function's index if it cannot be read (a torn or
            foreign file); returns whether it did."""
            try:
                self._cache_file._load_index()
                return False
            except Exception:  # noqa: BLE001
                os.unlink(self._cache_file._index_path)
                return True

else:  # pragma: no cover

    class _Cache:  # never made: isinstance() checks only
        pass
