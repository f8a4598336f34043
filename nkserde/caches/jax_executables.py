"""JAX's persistent compilation cache for checkpointed runs: a resumed run
finds the code its first job compiled instead of compiling it again.
Knows JAX's configuration and files (no NetKet).

    jax_executables.use(None, max_bytes=2**32)      # the user's cache (below), bounded
    jax_executables.use("/scratch/me/jax", max_bytes=2**32)  # or a directory of one's own
    jax_executables.use(None, max_bytes=None)       # pointed at, not pruned (nkserde.caches.automatic)

Where: ``NKSERDE_COMPILATION_CACHE`` if set, else ``$XDG_CACHE_HOME/nkserde/
jax`` (``~/.cache/nkserde/jax``), in a subdirectory per JAX version and
machine (executables are native code for one kind of CPU: nodes of two
kinds in one cluster, with one home directory, each get their own). Never
inside a checkpoint directory: a checkpoint directory is data that users
hand each other, while JAX runs what its cache holds as code (JAX's own
warning: "Do not share a compilation cache with users you do not trust");
docs/explanations/threat-model.md.

Every compilation is cached (JAX's default skips those under one second),
each entry renamed into place once written (other runs, on other nodes,
read while it writes: they see all of an entry or none), and
the cache is kept under ``max_bytes`` by deleting its least recently used
entries when a run starts (process 0; JAX's own bound needs the
``filelock`` package, which NetKet does not install). Nothing is made on
disk before JAX writes its first entry (JAX makes the directory). A cache
the user configured for JAX (``JAX_COMPILATION_CACHE_DIR``,
``jax.config.update("jax_compilation_cache_dir", ...)``, also after nkserde
pointed JAX at its own) or turned off (``JAX_ENABLE_COMPILATION_CACHE=0``)
is left as it is.

A run of several processes (``jax.process_count() > 1``, known once
``jax.distributed`` is initialized, usually after nkserde's import) neither
reads nor writes this cache. JAX reads it in process 0 only, so each other
process compiles for itself and the run's start waits for them anyway; and
JAX 0.12.1 hangs in the first collective of a program that process 0 found
cached from other source lines than the other processes compile (a script
edited, then run again: the program is the same, its lines are not).
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path

import jax

from .. import jax_internals
from . import lru

ENVIRONMENT = "NKSERDE_COMPILATION_CACHE"
_CACHE_SUFFIX = "-cache"  # what JAX names its entries (lru_cache._CACHE_SUFFIX, JAX 0.4.26 to 0.10)
_ours: Path | None = None  # the directory this process pointed JAX at
_pruned: set[Path] = set()  # the directories pruned in this process


def default_directory() -> Path:
    """The per-user cache, per JAX version and machine kind."""
    given = os.environ.get(ENVIRONMENT, "")
    root = (given if given.lower() not in ("", "off") else None) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "nkserde", "jax"
    )
    return Path(root) / f"jax-{jax.__version__}-{platform.machine()}-{cpu_kind()}"


def cpu_kind() -> str:
    """A short digest of the CPU's model and flags (Linux), else of what
    Python says of the processor: what XLA's CPU code is compiled for, so
    what decides the last bits of its floating-point results."""
    text = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f.read(1 << 20).splitlines() if line.startswith(("model name", "flags"))]
        text = "\n".join(sorted(set(lines))) or text
    except OSError:
        pass
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def configured() -> str | None:
    """The cache directory JAX is configured with, None if none."""
    return jax.config.jax_compilation_cache_dir or None


def in_use() -> str | None:
    """The directory JAX caches compilations in now: :func:`configured`,
    None while it is nkserde's own in a run of several processes (left
    alone then: the module's docstring says why)."""
    current = configured()
    return None if current is not None and _ours_in_a_run_of_several_processes(current) else current


def use(directory=None, *, max_bytes: int | None) -> Path | None:
    """Points JAX's persistent compilation cache at ``directory`` (default:
    :func:`default_directory`) unless the user configured one, caching every
    compilation; takes effect for the compilations from now on, also in a
    process that compiled before. Prunes it to ``max_bytes`` (once per
    process and directory; None: not now). Returns the directory in use
    (the user's own, if configured; None if the user turned JAX's cache
    off)."""
    global _ours
    current = configured()
    if current is not None and Path(current) != _ours:
        if _ours is not None:  # set after nkserde pointed JAX at its own: JAX takes theirs from now on
            _ours = None
            jax_internals.reset_compilation_cache()
        return Path(current)  # the user's (or JAX's environment's): theirs to manage
    if not jax.config.jax_enable_compilation_cache:
        return None  # the user's choice too
    path = Path(directory) if directory is not None else default_directory()
    prune_now = max_bytes is not None and path not in _pruned
    if _ours != path:
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        jax_internals.wrap_file_cache()  # the cache is read by other runs, other nodes
        jax_internals.skip_cache_in(_ours_in_a_run_of_several_processes)
        # JAX decides at its first compilation whether a cache is used; a
        # script that built its driver before has compiled already
        jax_internals.reset_compilation_cache()
        _ours = path
        if path.is_dir() and not prune_now:
            # before anything compiles into it (at NetKet's import:
            # nkserde.caches.automatic); prune() below does it otherwise
            remove_empty_entries(path)
    if prune_now and path.is_dir():
        _pruned.add(path)
        prune(path, max_bytes)
    return path


def _ours_in_a_run_of_several_processes(directory: str) -> bool:
    """Whether JAX's file cache must leave ``directory`` alone now (the
    module's docstring says why)."""
    return _ours is not None and Path(directory) == _ours and jax.process_count() > 1


def prune(directory: Path, max_bytes: int) -> int:
    """Deletes the empty entries and the least recently used ones beyond
    ``max_bytes``; returns how many (:func:`nkserde.caches.lru.delete_least_recently_used`).
    An empty entry is what a power cut leaves of one JAX wrote and never
    fsynced: JAX reads it as an error (a warning, then it compiles) and
    never replaces an entry that exists."""
    empty, entries = _without_empty_entries(directory)
    return empty + lru.delete_least_recently_used(entries, max_bytes)


def remove_empty_entries(directory: Path) -> int:
    """Deletes the empty entries (see :func:`prune`); returns how many. Run
    when JAX is pointed at ``directory``, before its first read there."""
    return _without_empty_entries(directory)[0]


def _without_empty_entries(directory: Path) -> tuple[int, list[Path]]:
    """(how many empty entries were deleted, the entries left): one pass.
    Also deletes the temporary files of writes older than an hour (a
    writer killed before its rename; an entry takes seconds to write)."""
    empty, entries = 0, []
    stale = time.time() - 3600
    for entry in Path(directory).iterdir():
        if entry.name.startswith(jax_internals.TEMPORARY_ENTRY_PREFIX):
            try:
                if entry.stat().st_mtime < stale:
                    entry.unlink()
            except OSError:  # gone meanwhile: renamed into place, or another process pruning
                pass
            continue
        if not entry.name.endswith(_CACHE_SUFFIX):
            continue
        try:
            if entry.stat().st_size == 0:
                entry.unlink()
                empty += 1
                continue
        except OSError:  # gone meanwhile (another process pruning)
            continue
        entries.append(entry)
    return empty, entries


def summary(directory: Path) -> tuple[int, int]:
    """(entries, bytes) of the cache."""
    count = size = 0
    for entry in Path(directory).iterdir():
        if entry.name.endswith(_CACHE_SUFFIX):
            try:
                size += entry.stat().st_size
                count += 1
            except OSError:
                pass
    return count, size
