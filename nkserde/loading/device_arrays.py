"""A file's arrays on the template's devices, for the load walk
(walk.py) and NetKet's own files (netket_files.py): :func:`to_device` gives an array the
template's sharding and weak type, :class:`LocalBlocks` reads this
process's blocks of a state dict's array spread over processes, and
:func:`replicated` is the layout of a value loaded without a template."""

from __future__ import annotations

import jax
import numpy as np

from .. import jax_internals
from ..errors import TemplateMismatchError, format_path
from ..format.layout import dtype_name
from ..format.reader import LazyArray, materialize
from ..types.placement import GlobalArray


class LocalBlocks(LazyArray):
    """A GlobalArray that ``state_dict`` returned (this process's blocks of
    an array spread over processes), read like an array of a file: each
    process reads the blocks of its own shards, which must be among its
    blocks (the template has the layout of the run that took the state
    dict; another layout needs a file)."""

    def __init__(self, array: GlobalArray, path):
        self.shape, self.dtype = tuple(array.shape), np.dtype(array.dtype)
        self.dtype_name = dtype_name(self.dtype)
        self._blocks, self._path = array.blocks, path

    def read(self, index=None) -> np.ndarray:
        if index is None:
            index = tuple(slice(0, n) for n in self.shape)
        index = tuple(index) + tuple(slice(0, n) for n in self.shape[len(tuple(index)) :])
        wanted = [(i.start or 0, n if i.stop is None else i.stop) for i, n in zip(index, self.shape)]
        for start, block in self._blocks:
            stop = [s + n for s, n in zip(start, block.shape)]
            if all(s <= a and b <= e for (a, b), s, e in zip(wanted, start, stop)):
                return np.asarray(block)[tuple(slice(a - s, b - s) for (a, b), s in zip(wanted, start))]
        raise TemplateMismatchError(
            f"{format_path(self._path)}: this process holds no block of {wanted} of the state dict's array "
            f"{self.dtype}{list(self.shape)} spread over processes: a template of another layout loads it "
            "from a file (nkserde.save, then nkserde.load)"
        )

    def __repr__(self):
        return f"GlobalArray({self.dtype}{list(self.shape)}, this process's blocks)"


def to_device(array: np.ndarray, template: jax.Array) -> jax.Array:
    """A JAX array with ``template``'s sharding (and weak type) holding
    ``array``. Aliases the numpy buffer when it is suitably aligned."""
    sharding = template.sharding
    if template.is_fully_addressable:
        out = jax.device_put(materialize(array), sharding, may_alias=True)
    elif isinstance(array, LazyArray):  # each process reads the blocks of its own shards only
        out = jax.make_array_from_callback(array.shape, sharding, array.read)
    else:
        out = jax.make_array_from_callback(array.shape, sharding, lambda idx: array[idx])
    if getattr(template, "weak_type", False):
        out = _weak(out)
    return out


def _weak(x):
    # Weak typing changes dtype promotion (a weak f64 scalar times an f32
    # array stays f32): restore it so a resumed run computes the same dtypes.
    return jax_internals.weak_typed(x)


def replicated():
    """Replicated over the global mesh when one is set (NetKet sets one), so
    a value rebuilt without a template is laid out like the template's
    parameters and jitted code is not recompiled for it; else the default."""
    mesh = jax_internals.concrete_mesh()
    if mesh is None:
        return None
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
