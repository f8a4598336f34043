"""Values whose layout over processes matters, as they appear in state dicts.

In a run of several JAX processes a value is one of four things:

* **replicated**: every process holds the same value (parameters, optimizer
  state, step counters). A plain numpy array or scalar in the state dict;
  written once.
* **global**: one array split over the processes' devices (Monte Carlo
  chains, per-chain counters). A :class:`GlobalArray` holding this process's
  blocks; the file holds the whole array, assembled from every process's
  blocks, and a load cuts it again for the new layout.
* **process 0's**: a value only process 0 keeps (a logger's history), marked
  with :func:`primary`: process 0's value is stored, the others' ignored.
* **per process**: a value each process has its own of (a numpy sampler's
  chains and generator, a user sampler's local state). A registration marks
  it with :func:`per_process`; the file stacks the processes' values
  (arrays as ``[n_processes, ...]``) and a load hands each process its own,
  or one derived from a saved one when the number of processes changed.

These classes know nothing of JAX or NetKet: blocks are numpy arrays (or,
in a save's snapshot, arrays still in device memory until they are
fetched: nkserde/saving/snapshot.py, which maps over the arrays of a
state dict).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np


def full_index(index, shape) -> tuple[slice, ...]:
    """``index`` (a tuple of slices, as a JAX shard's ``index``; None: all)
    as one ``slice(start, stop)`` per axis of ``shape``, clamped to it;
    ValueError for a stride (blocks are contiguous boxes)."""
    index = () if index is None else tuple(index)
    out = []
    for k, n in enumerate(shape):
        start, stop, step = (index[k] if k < len(index) else slice(None)).indices(n)
        if step != 1:
            raise ValueError(f"strided index {index!r}")
        out.append(slice(start, max(start, stop)))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class GlobalArray:
    """An array of ``shape`` and ``dtype`` whose blocks are spread over
    processes; ``blocks`` are the ones this process writes, each as
    ``(start, data)`` with ``start`` the index of its first element. The
    blocks of all processes tile the array exactly."""

    shape: tuple[int, ...]
    dtype: np.dtype
    blocks: tuple[tuple[tuple[int, ...], np.ndarray], ...]


# Derive = (value of saved process k, copy number g >= 1) -> a value for a
# new process that has no saved value of its own. It must be deterministic
# and give different results for different g (e.g. fold g into a key).
Derive = Callable[[Any, int], Any]


@dataclasses.dataclass(frozen=True)
class PerProcess:
    """Marks a field whose value differs between processes.

    Returned by a registration's ``to_state``: at save, ``value`` is this
    process's value. On the template side (``to_state(template)`` at load),
    ``value`` is the template's value and ``derive`` says how a new process
    beyond the saved ones gets a value: process ``r`` of ``P'`` takes the
    saved value of process ``r % P``; if ``r >= P`` it is the ``r // P``-th
    copy and gets ``derive(value, r // P)`` (``None``: an exact copy, with a
    warning)."""

    value: Any
    derive: Derive | None = None


def per_process(value, derive: Derive | None = None) -> PerProcess:
    """Marks ``value`` as process-local in a registration's ``to_state``."""
    return PerProcess(value, derive)


@dataclasses.dataclass(frozen=True)
class ProcessValues:
    """What a file holds for a :class:`PerProcess` field: one value per saved
    process, in process order."""

    values: list


@dataclasses.dataclass(frozen=True)
class Primary:
    """Marks a value whose record is process 0's: the others' values are
    neither stored nor compared (loggers write on process 0 only, so their
    history exists there only; a timer started on each process). A load
    gives every process the stored value."""

    value: Any


def primary(value) -> Primary:
    """Marks ``value`` as recorded by process 0 alone (see :class:`Primary`)."""
    return Primary(value)


@dataclasses.dataclass(frozen=True)
class Resizable:
    """Marks an array whose leading axis is a batch of independent Monte
    Carlo chains. If the saved batch is longer than the template's, a load
    keeps the first rows; if shorter, it fills the rest by repeating the
    saved rows in order (row ``i`` takes saved row ``i % n_saved``), with a
    warning. Fields of one object resized this way stay consistent: row
    ``i`` of each comes from the same saved chain."""

    value: Any
    announce: bool = True  # warn when resized (one field per object is enough)
