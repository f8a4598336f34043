"""The arrays of a jax ``LocalOperator``, kept between processes: what NetKet
computes with numba the first time the operator is used (its terms packed
into padded arrays: sites, diagonal and off-diagonal elements, connected
local states). A resumed process that takes them from
:mod:`nkserde.caches.results` does not start numba at all (numba's set-up
alone, ``BaseContext.refresh``, was 0.36 s of every resume of the GCNN of
benchmarks/restart.py, whose Heisenberg model is a jax LocalOperator).

    operator_tables.use()   # from now on, with the result cache's directory

Set by :func:`nkserde.caches.use`, beside numba's cache of the same
kernels. An operator's arrays are kept under
:func:`nkserde.caches.content_key.key` of everything NetKet packs them
from (the Hilbert space, the terms, the constant, the dtype, the cutoff,
and NetKet's release and source files): an operator whose content cannot be
told (a term of a class of one's own), or whose arrays would not fit a
result file, is packed by numba as before. The arrays come back with their
dtypes, shapes and bytes: the operator is the one NetKet would have built.
"""

from __future__ import annotations

import base64
import functools

import numpy as np

from ..netket import internals
from . import content_key, results

VERSION = 1  # of what a kept result holds
_MAX_BYTES = 512 * 1024  # of the arrays of one operator (a result file holds 1 MiB, base64 takes 4/3)


def use() -> bool:
    """Keeps the packed arrays of jax LocalOperators from now on (where
    :mod:`nkserde.caches.results` has a directory); False where this NetKet
    packs them otherwise."""
    return internals.wrap_jax_local_operator_packing(_memoized_packing)


def _memoized_packing(pack):
    @functools.wraps(pack)
    def packed(hilbert, operators_dict, constant, dtype, mel_cutoff):
        parts = (hilbert, operators_dict, constant, np.dtype(dtype), mel_cutoff)
        key = content_key.key(f"operator tables {VERSION}", *parts) if results.directory() is not None else None
        compute = lambda: pack(hilbert, operators_dict, constant, dtype, mel_cutoff)  # noqa: E731
        return results.memoized(key, compute, _encode, _decode)

    return packed


def _encode(data: dict):
    """JSON of ``pack_internals``' dict (arrays by dtype, shape and bytes;
    numbers), NOT_KEPT if it holds anything else or is too large."""
    out, size = {}, 0
    for name, value in data.items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            size += value.nbytes
            out[name] = ["array", value.dtype.str, list(value.shape), base64.b64encode(value.tobytes()).decode()]
        elif isinstance(value, (bool, np.bool_)):
            out[name] = ["bool", bool(value)]
        elif isinstance(value, (int, np.integer)):
            out[name] = ["int", int(value), np.asarray(value).dtype.str]
        else:
            return results.NOT_KEPT
    return out if size <= _MAX_BYTES else results.NOT_KEPT


def _decode(stored: dict) -> dict:
    data = {}
    for name, item in stored.items():
        kind = item[0]
        if kind == "array":
            _, dtype, shape, text = item
            array = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.dtype(dtype))
            data[name] = array.reshape(shape).copy()  # writeable, as numba's
        elif kind == "bool":
            data[name] = np.bool_(item[1])
        elif kind == "int":
            data[name] = np.asarray(item[1], dtype=np.dtype(item[2]))[()]
        else:
            raise ValueError(f"not a stored result: {kind!r}")
    return data
