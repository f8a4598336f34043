"""Two nodes using one compilation cache at once (tests/two_node_scenario.py
runs this on both, into one directory of a home both see): nkserde's
cache set on the directory, then rounds of compiling functions both nodes
compile (JAX writes the same entries from both), pruning the directory to
a bound below what it holds (entries the other node is reading or writing
deleted), and compiling again after JAX's in-memory caches are cleared
(read back from the directory). Prints one line per node:

    node1: 45 compiles, 8 prunes (31 entries deleted), 0 cache warnings, 0 errors
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp

import nkserde
from nkserde.caches import jax_executables

directory, node = Path(sys.argv[1]), sys.argv[2]
nkserde.compilation_cache(directory)
cache = jax_executables.configured()
compiles = prunes = deleted = errors = 0
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for round_ in range(8):
        # this round's shapes and the last round's (read back, unless pruned):
        # the same functions on both nodes, so the same entries
        for k, size in [(k, 8 + 4 * (3 * r + k)) for r in {max(round_ - 1, 0), round_} for k in range(3)]:
            try:
                jax.jit(lambda x, k=k: jnp.sin(x) * k + jnp.cos(x) ** 2)(jnp.ones(size)).block_until_ready()
                compiles += 1
            except Exception as exc:
                errors += 1
                print(f"{node}: compiling failed: {type(exc).__name__}: {exc}", flush=True)
        try:
            deleted += jax_executables.prune(Path(cache), max_bytes=20_000)
            prunes += 1
        except Exception as exc:
            errors += 1
            print(f"{node}: pruning failed: {type(exc).__name__}: {exc}", flush=True)
        jax.clear_caches()  # the next round's compilations read the directory first
cache_warnings = [str(w.message) for w in seen if "compilation cache" in str(w.message)]
for message in cache_warnings:
    print(f"{node}: warning: {message}", flush=True)
print(
    f"{node}: {compiles} compiles, {prunes} prunes ({deleted} entries deleted), "
    f"{len(cache_warnings)} cache warnings, {errors} errors",
    flush=True,
)
