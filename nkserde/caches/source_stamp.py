"""A stamp of a package's source: a digest that changes when any of its
Python files changes (an upgrade, an edit of an editable install). What
says that something computed from its code is stale: numba's cache of
NetKet's kernels (:mod:`nkserde.caches.numba_kernels`), the fingerprint's stored
probes (:mod:`nkserde.caches.results`). No JAX, no NetKet, no numba."""

from __future__ import annotations

import functools
import hashlib
import os
import sys


@functools.lru_cache(maxsize=None)
def of_directory(root: str) -> str:
    """A digest of the path, size and mtime of every Python file under
    ``root`` (``__pycache__`` left out), computed once per process (the
    code a process runs is what it loaded: a walk of NetKet's files takes
    tens of milliseconds, and numba's cache asks for it per kernel)."""
    digest = hashlib.sha256()
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(directory, file)
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                digest.update(f"{os.path.relpath(path, root)}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def of_package(name: str) -> str | None:
    """The stamp of the loaded top-level package ``name``, None if it is
    not loaded or has no directory."""
    package = sys.modules.get(name)
    path = getattr(package, "__file__", None)
    if not path:
        return None
    return of_directory(os.path.dirname(os.path.abspath(path)))
