"""The snapshot, the first stage of a save (nkserde/saving/line.py):
objects -> an nkserde state dict.

A *state dict* is nested dicts and lists whose leaves are numpy arrays and
Python scalars (``None``, bool, int, float, complex, str, bytes). A registered
object becomes a dict ``{"@type": name, "@version": v, **fields}``.

A :class:`Snapshot` is taken on the caller's thread without waiting for a
device: each JAX array in a GPU's or TPU's memory is held as it is (an
:class:`OnDevice`, nothing copied; JAX arrays are immutable), and
:func:`to_host`, the next stage, starts all their copies to the host
before it waits for the first. On a CPU every array is read in place.

The way back, state dicts -> objects, is nkserde/loading/walk.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from ..types import builtin_types, registry
from ..format.layout import check_dtype, check_text
from ..errors import UnregisteredTypeError, format_path
from ..format.tree_codec import TYPE, VERSION
from ..types import nested
from ..types.placement import GlobalArray, PerProcess, Primary, ProcessValues, Resizable, full_index


SCALARS = (bool, int, float, complex, str, bytes)
# the platforms whose arrays are in the host's memory: read in place
HOST_PLATFORMS = frozenset({"cpu"})


class Snapshot(NamedTuple):
    """What a save holds from its first stage to the next: the state dict,
    and the arrays in it still in device memory (``held``: the
    :class:`OnDevice` objects standing in it for them; empty on a CPU)."""

    state: Any
    held: list | tuple = ()


def snapshot(obj) -> Snapshot:
    """The :class:`Snapshot` of ``obj`` for a save, taken without waiting
    for a device: where the process computes on a GPU or TPU, each JAX array
    in device memory is held as it is (see :func:`to_state_dict`'s ``held``;
    :func:`to_host` starts their copies to the host, all at once); on a
    CPU every array is read in place and ``held`` is empty (no array is
    looked at twice)."""
    held: list | None = [] if jax.default_backend() not in HOST_PLATFORMS else None
    return Snapshot(to_state_dict(obj, held=held), held or [])


def state_dict(obj) -> object:
    """``obj`` as nested dicts/lists of numpy arrays and Python scalars in
    nkserde's schema; registered objects carry ``@type`` and ``@version``."""
    return to_state_dict(obj)


def check_storable(obj) -> None:
    """Raises UnregisteredTypeError (naming the path) if ``obj`` holds a
    value nkserde cannot store; reads no array (cheap on accelerators)."""
    to_state_dict(obj, check_only=True)


def private_copy(state):
    """The state dict with a private copy of every array the run could change
    before a write that goes on while it runs reads it. Read-only views of
    JAX buffers are kept as they are: a JAX array is immutable and the view
    keeps its buffer alive (NetKet donates no buffers), so copying them would
    only cost time. Everything backed by numpy memory (numpy sampler chains,
    logger histories) is copied."""
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


# --------------------------------------------------------------------------- the host stage


def to_host(snap: Snapshot):
    """The second stage of a save, as a generator of steps: the snapshot's
    state dict with every array it holds in device memory copied to the
    host. All the copies are started before the first is waited for, so
    that they cross together; one step (a yield) after them. Returns the
    state dict."""
    if not snap.held:
        return snap.state
    for array in snap.held:
        array.start_copy()
    state = fetched(snap.state)
    yield
    return state


class OnDevice:
    """An array of a snapshot that is still in device memory (a GPU's, a
    TPU's), held as it is while the run goes on. :meth:`start_copy` starts
    its copy to the host without waiting for it; :meth:`fetch` waits for
    that copy and returns it; from then on only the host copy is held, so
    the device memory goes back as soon as the run no longer uses the
    array. ``array``: a JAX array (a whole one, or one shard's data)."""

    __slots__ = ("held",)

    def __init__(self, array):
        self.held = array  # the device's array, then its host copy

    def start_copy(self) -> None:
        self.held.copy_to_host_async()

    def fetch(self) -> np.ndarray:
        host = np.asarray(self.held)
        self.held = host
        return host


def fetched(state):
    """``state`` with every :class:`OnDevice` array in it (blocks of global
    arrays and per-process values included) replaced by its host copy."""
    return map_arrays(OnDevice.fetch, state, kind=OnDevice)


def map_arrays(fn, state, kind: type = np.ndarray):
    """``state`` with ``fn`` applied to every array of ``kind`` (numpy
    arrays, or :class:`OnDevice` ones) in it, including the blocks of global
    arrays and the values of per-process fields."""

    def leaf(node):
        if isinstance(node, kind):
            return fn(node)
        if isinstance(node, GlobalArray):
            blocks = tuple((s, fn(b) if isinstance(b, kind) else b) for s, b in node.blocks)
            return GlobalArray(node.shape, node.dtype, blocks)
        if isinstance(node, PerProcess):
            return PerProcess(map_arrays(fn, node.value, kind), node.derive)
        if isinstance(node, Primary):
            return Primary(map_arrays(fn, node.value, kind))
        if isinstance(node, ProcessValues):
            return ProcessValues([map_arrays(fn, v, kind) for v in node.values])
        return node

    return nested.map_leaves(leaf, state)


# --------------------------------------------------------------------------- the walk


def to_state_dict(obj, path=(), *, check_only: bool = False, held: list | None = None) -> Any:
    """The state dict of ``obj``; raises UnregisteredTypeError naming the path
    of the first value nkserde does not know how to store. ``check_only``:
    only check that it can be stored (JAX arrays are not read: the result
    holds a ``jax.ShapeDtypeStruct`` of each in its place). ``held``: a
    list; then the walk waits for no device and copies nothing: each JAX
    array in device memory other than the host's (a GPU's, a TPU's) stands
    in the result as an :class:`OnDevice`, appended to ``held`` too
    (:func:`fetched` gives the numpy arrays)."""
    if obj is None or isinstance(obj, SCALARS) and not isinstance(obj, np.generic):
        if isinstance(obj, str):
            check_text(obj, path, "string")
        return obj
    if isinstance(obj, np.ndarray):
        check_dtype(obj.dtype, path)
        return obj
    if isinstance(obj, np.generic):
        check_dtype(obj.dtype, path)
        return np.asarray(obj)
    if isinstance(obj, jax.Array):
        if builtin_types.is_key_array(obj):
            return _node(registry.lookup(builtin_types.KeyArray), obj, path, check_only, held)
        check_dtype(obj.dtype, path)
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
    raise registry.unregistered(obj, path)


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
    check_text(s, path, "dict key")
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
