"""A bound on a directory of cache files (JAX's and numba's caches): the
least recently used go first. No JAX, no numba."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def delete_least_recently_used(paths: Iterable[Path], max_bytes: int) -> int:
    """Deletes the least recently used (by atime or mtime, the later) of
    ``paths`` until the rest take at most ``max_bytes``; returns how many.
    (A file another process reads stays readable to it: POSIX keeps a
    deleted file open.)"""
    files = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue
        files.append((max(info.st_atime, info.st_mtime), info.st_size, path))
    total = sum(size for _, size, _ in files)
    removed = 0
    for _, size, path in sorted(files):
        if total <= max_bytes:
            break
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        removed += 1
    return removed
