"""Objects -> nkserde state dicts: the walk of a save.

A *state dict* is nested dicts and lists whose leaves are numpy arrays and
Python scalars (``None``, bool, int, float, complex, str, bytes). A registered
object becomes a dict ``{"@type": name, "@version": v, **fields}``.

The way back, state dicts -> objects, is tree_load.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ..types import builtin_types, registry
from ..format.layout import DTYPES, dtype_name
from ..errors import UnregisteredTypeError, format_path
from ..format import tree_codec
from ..format.tree_codec import TYPE, VERSION
from ..types.placement import GlobalArray, OnDevice, PerProcess, Primary, Resizable, full_index


SCALARS = (bool, int, float, complex, str, bytes)
# the platforms whose arrays are in the host's memory: read in place
HOST_PLATFORMS = frozenset({"cpu"})


def _host_array(x: jax.Array, held: list | None) -> np.ndarray | OnDevice | GlobalArray:
    """A host view of ``x``. Spread over processes, a replicated array is this
    process's copy and a split one a :class:`GlobalArray` of the blocks this
    process writes (one replica of each, the ``replica_id == 0`` one):
    nothing is gathered across processes. With ``held`` (a list), an array
    in device memory other than the host's is not copied here: it is an
    :class:`OnDevice`, also appended to ``held``."""
    if x.is_fully_addressable:
        return np.asarray(x) if held is None else _host(x, held)  # zero-copy for CPU arrays
    if x.sharding.is_fully_replicated:
        return _host(x.addressable_data(0), held)
    blocks = tuple(
        (tuple(s.start for s in full_index(shard.index, x.shape)), _host(shard.data, held))
        for shard in x.addressable_shards
        if shard.replica_id == 0
    )
    return GlobalArray(tuple(x.shape), np.dtype(x.dtype), blocks)


def _host(x: jax.Array, held: list | None) -> np.ndarray | OnDevice:
    if held is None or next(iter(x.sharding.device_set)).platform in HOST_PLATFORMS:
        return np.asarray(x)  # zero-copy for CPU arrays
    # JAX arrays are immutable (NetKet donates no buffers): the snapshot
    # holds x, and the write copies it to the host while the run goes on
    device_array = OnDevice(x)
    held.append(device_array)
    return device_array


# --------------------------------------------------------------------------- save


def snapshot(obj) -> tuple[Any, list]:
    """``(state dict, held)`` of ``obj`` for a save, taken without waiting
    for a device: where the process computes on a GPU or TPU, each JAX array
    in device memory is held as it is (see :func:`to_state_dict`'s ``held``,
    returned; the write starts their copies to the host, all at once); on a
    CPU every array is read in place and ``held`` is empty (no array is
    looked at twice)."""
    held: list | None = [] if jax.default_backend() not in HOST_PLATFORMS else None
    return to_state_dict(obj, held=held), held or []


def to_state_dict(obj, path=(), *, check_only: bool = False, held: list | None = None) -> Any:
    """The state dict of ``obj``; raises UnregisteredTypeError naming the path
    of the first value nkserde does not know how to store. ``check_only``:
    only check that it can be stored (JAX arrays are not read: the result
    holds a ``jax.ShapeDtypeStruct`` of each in its place). ``held``: a
    list; then the walk waits for no device and copies nothing: each JAX
    array in device memory other than the host's (a GPU's, a TPU's) stands
    in the result as a :class:`~nkserde.placement.OnDevice`, appended to
    ``held`` too (:func:`nkserde.placement.fetched` gives the numpy
    arrays)."""
    if obj is None or isinstance(obj, SCALARS) and not isinstance(obj, np.generic):
        if isinstance(obj, str):
            tree_codec.check_text(obj, path, "string")
        return obj
    if isinstance(obj, np.ndarray):
        _check_dtype(obj.dtype, path)
        return obj
    if isinstance(obj, np.generic):
        _check_dtype(obj.dtype, path)
        return np.asarray(obj)
    if isinstance(obj, jax.Array):
        if builtin_types.is_key_array(obj):
            return _node(registry.lookup(builtin_types.KeyArray), obj, path, check_only, held)
        _check_dtype(obj.dtype, path)
        return jax.ShapeDtypeStruct(obj.shape, obj.dtype) if check_only else _host_array(obj, held)
    reg = registry.lookup(type(obj))
    if reg is not None:
        return _node(reg, obj, path, check_only, held)
    if isinstance(obj, PerProcess):
        return PerProcess(to_state_dict(obj.value, path, check_only=check_only, held=held))
    if isinstance(obj, Primary):
        return Primary(to_state_dict(obj.value, path, check_only=check_only, held=held))
    if isinstance(obj, Resizable):
        return to_state_dict(obj.value, path, check_only=check_only, held=held)
    if isinstance(obj, Mapping):
        out, seen = {}, {}
        for k, v in obj.items():
            key = _new_key(k, seen, path)
            out[key] = to_state_dict(v, path + (key,), check_only=check_only, held=held)
        return out
    if type(obj) in (list, tuple):
        return [to_state_dict(v, path + (i,), check_only=check_only, held=held) for i, v in enumerate(obj)]
    raise unregistered(obj, path)


def unregistered(obj, path) -> UnregisteredTypeError:
    """The error of a value, met at ``path`` of an object being saved or of
    a template, whose type has no registration."""
    return UnregisteredTypeError(
        f"{format_path(path)}: no nkserde registration for type "
        f"{registry.module_path(type(obj))}; register it with nkserde.register(...)"
    )


def _check_schema(reg: registry.Registration, fields, path) -> None:
    """A registration returns the fields it declares (its schema; the
    manifest test guards the declarations): anything else is a bug of the
    registration, caught before it reaches a file."""
    got, declared = set(fields), set(reg.fields)
    if not got <= declared or not declared - reg.optional_fields <= got:
        raise UnregisteredTypeError(
            f"{format_path(path)}: the registration {reg.name} (schema version {reg.version}) "
            f"returned fields {sorted(got)}, its schema declares {sorted(declared)}: a changed "
            f"schema needs a new version (see docs/schema.md)"
        )


def stored_key(k, path) -> str:
    """The stored (string) form of dict key ``k``: a str as it is, an int as
    its decimal digits (the template's key gives the int back on load)."""
    if isinstance(k, bool) or not isinstance(k, (str, int)):
        raise UnregisteredTypeError(
            f"{format_path(path)}: dict key {k!r} of type {type(k).__name__}; keys must be str or int"
        )
    # str() of an int or str subclass (IntEnum, StrEnum, ...) may not be its
    # value: store the value itself
    s = str.__str__(k) if isinstance(k, str) else int.__repr__(k)
    if s.startswith("@"):
        raise UnregisteredTypeError(f"{format_path(path)}: dict key {k!r}: keys starting with '@' are reserved")
    tree_codec.check_text(s, path, "dict key")
    return s


def _new_key(k, seen: dict, path) -> str:
    """:func:`stored_key`, refusing a key whose stored form another key of the same
    dict already has (``1`` and ``"1"``): one value would be lost on load.
    ``seen``: stored form -> key, of the dict's keys so far."""
    key = stored_key(k, path)
    if key in seen:
        raise UnregisteredTypeError(
            f"{format_path(path)}: dict keys {seen[key]!r} and {k!r} are both stored as {key!r} "
            "(int keys are stored as their decimal string): one value would be lost on load"
        )
    seen[key] = k
    return key


def _check_dtype(dtype, path) -> None:
    if dtype_name(dtype) is None:
        what = "Python objects" if np.dtype(dtype).hasobject else f"dtype {dtype}"
        raise UnregisteredTypeError(
            f"{format_path(path)}: arrays of {what} cannot be stored (storable dtypes: "
            f"{', '.join(DTYPES)}; convert strings to bytes or a list of str, dates to int64)"
        )


def _node(reg: registry.Registration, obj, path, check_only: bool, held: list | None) -> dict:
    try:
        fields = reg.to_state(obj)
    except registry.FieldNotStored as exc:
        raise UnregisteredTypeError(f"{format_path(path + (exc.field,))}: {exc}") from None
    if reg.fields is not None:
        _check_schema(reg, fields, path)
    out, seen = {TYPE: reg.name, VERSION: reg.version}, {}
    for k, v in fields.items():
        key = _new_key(k, seen, path)
        out[key] = to_state_dict(v, path + (key,), check_only=check_only, held=held)
    return out
