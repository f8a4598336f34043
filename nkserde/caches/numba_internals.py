"""Every use of a private numba name, each behind one small function.

numba offers no public way to give a compiled function that did not ask
for a cache (NetKet's operator kernels: ``numba.jit`` without
``cache=True``) a cache of its own, in a directory and under a stamp of
the caller's choosing. This module does it with numba's caching classes
(``numba.core.caching``, not public API) and a CPU dispatcher's
``_cache``, and nothing else in nkserde touches them
(tests/test_internals.py fails if something does).

nkserde supports numba 0.59 to 0.68 here (the CI venvs: tests/
test_versions.py). Where numba's internals are not as those releases have
them, :func:`attach_cache` gives no cache: one debug line (logger
``"nkserde"``), once per process, and the kernels compile as they would
without nkserde. When a numba release breaks one of these, this is the
file to change.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable

try:
    import numba
    import numba.core.caching as _caching
    from numba.core.errors import NumbaWarning
    from numba.core.registry import CPUDispatcher
except ImportError:  # no numba, or one laid out otherwise: nothing is cached
    _caching = None

SUFFIXES = (".nbi", ".nbc")  # numba's index and data files (numba 0.59 to 0.68)
_said = False  # whether the fallback said its line in this process


def is_cpu_dispatcher(value) -> bool:
    """Whether ``value`` is a function ``numba.jit`` compiled for the CPU
    (``numba.core.registry.CPUDispatcher``, numba 0.59 to 0.68)."""
    return _caching is not None and isinstance(value, CPUDispatcher)


def has_no_cache(dispatcher) -> bool:
    """Whether ``dispatcher`` caches nothing: its ``_cache`` is numba's
    ``NullCache`` (``numba.jit`` without ``cache=True``, numba 0.59 to
    0.68). False for one with numba's own cache or one of
    :func:`attach_cache`."""
    return _caching is not None and isinstance(getattr(dispatcher, "_cache", None), _caching.NullCache)


def cache_path(dispatcher) -> str | None:
    """The directory of ``dispatcher``'s files if :func:`attach_cache`
    gave it its cache, else None (its ``_cache``, numba 0.59 to 0.68)."""
    cache_class = _machinery()[1]
    cache = getattr(dispatcher, "_cache", None)
    return cache.path if cache_class is not None and isinstance(cache, cache_class) else None


def attach_cache(dispatcher, path: str, stamp: str, may_write: Callable[[], bool]) -> bool:
    """Gives ``dispatcher`` a cache whose files are in the directory
    ``path`` (made when something is written), valid while ``stamp`` (a
    string) stays the same, written only where ``may_write()``; writes what
    it compiled before (its ``overloads``). Returns whether it did: not
    where numba cannot place the function, or where numba's internals are
    not as expected. Relies on a CPU dispatcher's ``_cache`` and
    ``overloads``, and on ``numba.core.caching``'s ``_CacheLocator``,
    ``CompileResultCacheImpl`` and ``FunctionCache`` (its
    ``_impl_class``, and its index file's ``_load_index`` and
    ``_index_path``), numba 0.59 to 0.68."""
    implementation, cache_class = _machinery()
    if cache_class is None:
        return False
    try:
        cache = cache_class(dispatcher.py_func, implementation(path, stamp), may_write)
        compiled = list(dispatcher.overloads.items())
        dispatcher._cache = cache
    except Exception as error:  # noqa: BLE001  (numba cannot place it, or works otherwise: it compiles as before)
        _say_once(f"numba gives {dispatcher!r} no cache ({type(error).__name__}: {error})")
        return False
    for signature, result in compiled:
        cache.save_overload(signature, result)
    return True


def _say_once(message: str) -> None:
    """The fallback's one trace: a debug line (logger ``"nkserde"``) the
    first time a kernel gets no cache in this process, none after (numba
    0.59 to 0.68 and any other)."""
    global _said
    if not _said:
        _said = True
        logging.getLogger("nkserde").debug("%s: NetKet's numba kernels compile as without a cache", message)


@functools.lru_cache(maxsize=1)
def _machinery():
    """(the implementation class for a path and stamp, the cache class), or
    (None, None) where numba is missing or its caching classes are not as
    numba 0.59 to 0.68 have them (one debug line)."""
    if _caching is None:
        return None, None
    try:
        return _define()
    except (AttributeError, TypeError) as error:  # a class renamed, a base that cannot be subclassed so
        _say_once(f"numba {numba.__version__}'s caching classes are not as expected ({error})")
        return None, None


def _define():
    """The subclasses of numba's caching classes (numba 0.59 to 0.68):
    raises AttributeError or TypeError where those are not as expected."""

    class Locator(_caching._CacheLocator):
        """Where a function's files are and under which stamp: a class per
        (path, stamp), numba makes an instance per function."""

        path: str
        stamp: str

        def __init__(self, py_func, py_file):
            self._py_file = py_file  # numba's warnings name it
            self._lineno = py_func.__code__.co_firstlineno

        def get_cache_path(self):
            return self.path

        def get_source_stamp(self):
            return self.stamp

        def get_disambiguator(self):
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func, py_file):
            return cls(py_func, py_file)

    @functools.lru_cache(maxsize=None)
    def implementation(path: str, stamp: str):
        located = type("Locator", (Locator,), {"path": path, "stamp": stamp})

        class Implementation(_caching.CompileResultCacheImpl):
            _locator_classes = [located]

            def check_cachable(self, cres):
                with warnings.catch_warnings():  # numba warns for each; such a kernel compiles as before
                    warnings.simplefilter("ignore", NumbaWarning)
                    return super().check_cachable(cres)

        return Implementation

    class Cache(_caching.FunctionCache):
        """numba's per-function cache, writing only where ``may_write()``,
        and passing over what it cannot read or write."""

        def __init__(self, py_func, implementation, may_write: Callable[[], bool]):
            self._impl_class = implementation
            self._may_write = may_write
            super().__init__(py_func)
            self.path = self._impl.locator.get_cache_path()

        def load_overload(self, sig, target_context):
            try:
                return super().load_overload(sig, target_context)
            except Exception:  # noqa: BLE001  (a damaged or foreign entry, unpickled as anything: compile it)
                return None

        def save_overload(self, sig, data):
            if not self._may_write():
                return
            for again in (False, True):
                try:
                    super().save_overload(sig, data)
                    return
                except Exception:  # noqa: BLE001  (a full disk, a read-only cache, a kernel numba cannot pickle: run on)
                    # numba reads the index before it writes: a damaged one
                    # (unpickled as anything) is dropped and written anew
                    if again or not self._drop_damaged_index():
                        return

        def _drop_damaged_index(self) -> bool:
            """Deletes this function's index if it cannot be read (a torn or
            foreign file); returns whether it did."""
            try:
                self._cache_file._load_index()
                return False
            except Exception:  # noqa: BLE001  (whatever unpickling a torn or foreign file raises)
                try:
                    os.unlink(self._cache_file._index_path)
                except OSError:
                    return False
                return True

    return implementation, Cache
