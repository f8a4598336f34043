"""Results computed from content, kept between processes: what a resumed
run would otherwise compute again from the same inputs (the fingerprint's
probes of functions, optimizers and operators: JAX computations that
compile a few tenths of a second in every process). Knows files and JSON
(no JAX, no NetKet): the caller makes the keys.

    results.use(directory, may_write=lambda: rank == 0)
    results.get(key)           # what put() stored under key, else None
    results.put(key, value)    # a JSON value, written atomically
    results.memoized(key, compute, encode, decode)  # the two around a computation

A key is a digest of everything the result depends on (the caller's
business: :mod:`nkserde.caches.content_key`). One small file per key,
with a checksum of its value; a file that cannot be read, does not parse or
does not match its checksum is a miss (the caller computes again), never
an error. Set by :func:`nkserde.caches.use`, beside the compiled
code: like it, what the directory holds is taken as the user's own (it
decides whether a run resumes), so it is never a checkpoint directory,
which is data users hand each other (docs/explanations/threat-model.md).
Without :func:`use` (no compilation cache) nothing is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import lru

DEFAULT_MAX_BYTES = 16 * 2**20
_MAX_FILE_BYTES = 1 << 20  # a larger file is not one put() wrote
_SUFFIX = ".json"
_directory: Path | None = None
_may_write: Callable[[], bool] = lambda: False  # noqa: E731


def use(directory, *, may_write: Callable[[], bool] = lambda: True) -> None:
    """Keeps results in ``directory`` (None: keeps none) from now on,
    written where ``may_write()`` (process 0 of a multi-process run)."""
    global _directory, _may_write
    _directory = None if directory is None else Path(directory)
    _may_write = may_write


def directory() -> Path | None:
    """Where results are kept, None if nowhere."""
    return _directory


def get(key: str):
    """The value stored under ``key``, None if there is none that is whole."""
    if _directory is None:
        return None
    try:
        with open(_directory / f"{key}{_SUFFIX}", "rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
        if len(data) > _MAX_FILE_BYTES:
            return None
        stored = json.loads(data)
        value = stored["value"]
        if stored["key"] != key or stored["sha256"] != _checksum(key, value):
            return None
        return value
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None  # absent or damaged: computed again


def put(key: str, value) -> bool:
    """Stores ``value`` (JSON: lists, numbers, strings, None) under ``key``
    atomically; returns whether it was written (not where results are not
    kept or this process does not write; a failure to write is a miss of
    the next process, not an error)."""
    if _directory is None or not _may_write():
        return False
    try:
        text = json.dumps({"key": key, "value": value, "sha256": _checksum(key, value)})
        _directory.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=_directory, prefix=".tmp-", suffix=_SUFFIX)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(temporary, _directory / f"{key}{_SUFFIX}")
        except BaseException:
            os.unlink(temporary)
            raise
    except (OSError, TypeError, ValueError):
        return False
    return True


NOT_KEPT = object()  # what an ``encode`` of :func:`memoized` returns for a value not to store


def memoized(key: str | None, compute: Callable, encode: Callable, decode: Callable):
    """``compute()``, or what it returned in an earlier process under
    ``key``: ``decode`` of the JSON that ``encode`` made of it (stored as
    ``{"value": ...}``). A stored value that ``decode`` refuses (raises) is
    computed again; ``encode`` returning :data:`NOT_KEPT` stores nothing.
    ``key`` None (a part the caller cannot describe, or no cache): always
    computed, nothing stored."""
    if key is not None:
        stored = get(key)
        if isinstance(stored, dict) and "value" in stored:
            try:
                return decode(stored["value"])
            except Exception:  # noqa: BLE001  (not what put() wrote: computed again)
                pass
    value = compute()
    if key is not None:
        encoded = encode(value)
        if encoded is not NOT_KEPT:
            put(key, {"value": encoded})
    return value


def prune(root, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Deletes the least recently used results in ``root`` beyond
    ``max_bytes``; returns how many."""
    files = (p for p in Path(root).glob(f"*{_SUFFIX}") if not p.name.startswith("."))
    return lru.delete_least_recently_used(files, max_bytes)


def _checksum(key: str, value) -> str:
    text = json.dumps([key, value], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
