"""The host snapshot a background write reads: what the run may change
before the write gets to it is copied, nothing else."""

from __future__ import annotations

import jax
import numpy as np

from ..placement import map_arrays


def host_copy(state):
    """The state dict with a private copy of every array the run could change
    before the background write reads it. Read-only views of JAX buffers are
    kept as they are: a JAX array is immutable and the view keeps its buffer
    alive (NetKet donates no buffers), so copying them would only cost time.
    Everything backed by numpy memory (numpy sampler chains, logger
    histories) is copied."""
    return map_arrays(lambda a: a if _immutable_view(a) else np.array(a, copy=True), state)


def _immutable_view(a: np.ndarray) -> bool:
    if a.flags.writeable:
        return False
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.asarray(jax_array) on CPU: a view of its buffer
        base = base.obj
    # None: numpy owns the memory (a read-only flag can be lifted again);
    # bytearrays and mmaps can be written elsewhere. A JAX array cannot.
    return isinstance(base, jax.Array)
