"""Any object as entries: :func:`flatten` adds ``key`` and ``key.field``
... for a value, field by field, down to texts (numbers, arrays, names),
and hands operators, optax optimizers and functions to their modules.

Arrays are described by dtype, shape and a hash: of their bytes (integers,
booleans: symmetry groups, masks), of their values to 9 significant digits
of the largest (floating point: numpy releases compute the last bits of
``exp`` otherwise); object arrays (QSR's measurement bases) element by
element. Hilbert spaces by their repr, graphs by node count and edges.
Left out: initializers (the parameters come from the checkpoint), what a
run computes as it goes (a QGT, statistics) and what NetKet computes from
the other fields (a GCNN's ``irreps``)."""

from __future__ import annotations

import enum
import re

import jax
import netket as nk
import numpy as np
import optax

from ... import jax_internals
from ...netket import internals
from . import functions, operators, optimizers
from .entries import (
    CONTENT,
    EFFECT,
    FUNCTION,
    KIND,
    QUANTIZED,
    READABLE,
    VERSION,
    VERSION_2,
    add_readable,
    direct_children,
)
from .parts import MAX_DEPTH, children, is_function, type_name
from .entries import entries_digest, number, quantized_digest, sha, without_addresses

_SKIPPED_FIELDS = {
    "parent",  # flax bookkeeping
    "name",
    *internals.CHUNK_SIZE_FIELDS,  # memory
    *internals.PER_STEP_FIELDS,  # a preconditioner's last QGT, solution and solver info
    *internals.MODEL_DERIVED_FIELDS,  # a GCNN's irreps: computed from its symmetry group
}
_INITIALIZER_FIELD = re.compile(r"(^|_)init(ializer)?$")  # kernel_init, bias_init, embedding_initializer


def flatten(fp: dict, key: str, value, depth=0, seen=None, probe=functions.SCHEDULE) -> None:
    """Adds ``value``'s description under ``key`` (and ``key.field`` ...);
    functions are probed with ``probe`` (:mod:`.functions`)."""
    seen = set() if seen is None else seen
    if depth > MAX_DEPTH or id(value) in seen:
        fp[key] = "..."
        return
    if _per_step_result(value):
        return
    if isinstance(value, nk.operator.AbstractOperator):
        describe_operator(fp, key, value)
        return
    if isinstance(value, optax.GradientTransformation):
        describe_optimizer(fp, key, value, None)
        return
    if is_function(value):
        if _is_initializer(key, value):
            return  # the parameters come from the checkpoint
        _describe_function(fp, key, value, probe, depth, seen)
        return
    text = _leaf_text(value)
    if text is not None:
        fp[key] = text
        return
    parts = children(value)
    fp[key] = type_name(value)
    if not parts:
        return
    seen = seen | {id(value)}
    for name, child in parts:
        if name in _SKIPPED_FIELDS:
            continue
        flatten(fp, f"{key}.{name}", child, depth=depth + 1, seen=seen, probe=probe)


def _per_step_result(value) -> bool:
    """A value a run computes as it goes: a QGT, statistics."""
    return isinstance(value, (nk.optimizer.LinearOperator, nk.stats.Stats))


def _is_initializer(key: str, value) -> bool:
    """A model's ``*_init`` field or a function of ``jax.nn.initializers``."""
    name = key.rsplit(".", 1)[-1]
    return bool(_INITIALIZER_FIELD.search(name)) or jax_internals.is_initializer(value)


def _leaf_text(value) -> str | None:
    """The text of a value that has no parts worth listing, or None."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type):
        try:
            return np.dtype(value).name  # float, jnp.float32, np.complex128 ...
        except TypeError:
            return value.__qualname__
    if isinstance(value, nk.utils.HashableArray):
        return _array_text(np.asarray(value.wrapped))
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        return _array_text(value)
    if isinstance(value, nk.operator.AbstractOperator):
        return _operator_text(value)
    if isinstance(value, nk.hilbert.AbstractHilbert):
        return without_addresses(value)
    if isinstance(value, nk.graph.AbstractGraph):
        edges = sorted(tuple(map(int, e)) for e in value.edges())
        return f"{type(value).__name__} n_nodes={value.n_nodes} edges {sha(repr(edges).encode())}"
    if isinstance(value, nk.utils.group.FiniteGroup) and hasattr(value, "to_array"):
        return f"{type(value).__name__} {_array_text(np.asarray(value.to_array()))}"
    return None


def _array_text(x) -> str:
    """``"int64[16, 8] <hash of its bytes>"``, ``"float64[8] ~<digest of its
    values>"``, ``"float64 0.5"`` (a 0-d float), ``"object[60] <hash of its
    elements' descriptions>"``."""
    a = np.asarray(x)
    if a.dtype == object:  # its bytes are pointers: describe the elements
        return f"object{list(a.shape)} {_objects_digest(a.reshape(-1))}"
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        a = np.asarray(jax.random.key_data(x))
    if np.issubdtype(a.dtype, np.inexact) and a.ndim == 0:  # a number: in words
        return f"{a.dtype.name} {number(complex(a))}"
    a = np.ascontiguousarray(a)  # (a 0-d array becomes 1-d: "int64[1]", as version 2 wrote it)
    if np.issubdtype(a.dtype, np.inexact):  # computed numbers: not their last bits (numpy's exp, LAPACK)
        return f"{a.dtype.name}{list(a.shape)} {QUANTIZED}{quantized_digest([a])}"
    return f"{a.dtype.name}{list(a.shape)} {sha(a.tobytes())}"


def _objects_digest(items) -> str:
    """A hash of the elements of an object array (QSR's measurement bases:
    one operator per measurement), each described by content like any
    other value; an object that appears many times is described once."""
    memo: dict[int, str] = {}
    texts = []
    for item in items:
        if id(item) not in memo:
            text = _leaf_text(item)
            if text is None:
                parts: dict[str, str] = {}
                flatten(parts, "", item)
                text = entries_digest(parts)
            memo[id(item)] = text
        texts.append(memo[id(item)])
    return sha("\n".join(texts).encode())


def _version_2_entries(fp: dict, key: str, value, depth=0, seen=None) -> None:
    """Version 2's description of a value (functions by name, closure and
    defaults): what :func:`.optimizers.labels` reads, here and in a version
    2 fingerprint alike."""
    seen = set() if seen is None else seen
    if depth > MAX_DEPTH or id(value) in seen:
        fp[key] = "..."
        return
    text = _leaf_text(value)
    if text is not None:
        fp[key] = text
        return
    fp[key] = type_name(value)
    seen = seen | {id(value)}
    for name, child in children(value, defaults=True):
        if name not in _SKIPPED_FIELDS:
            _version_2_entries(fp, f"{key}.{name}", child, depth + 1, seen)


def _describe_function(fp: dict, key: str, f, probe: str, depth: int, seen: set) -> None:
    """A function of one argument by its effect on the probe (readable: its
    name and the values it closes over); any other by name and the
    arguments it was given (closure values, a partial's arguments)."""
    outputs = functions.probe_function(f, probe)
    if outputs is None:
        fp[key] = type_name(f)
        for name, child in children(f):
            flatten(fp, f"{key}.{name}", child, depth=depth + 1, seen=seen | {id(f)}, probe=probe)
        return
    fp[key] = FUNCTION + quantized_digest(outputs)
    raw: dict[str, str] = {}
    _version_2_entries(raw, key, f)
    readable = {KIND: raw[key], **direct_children(raw, key)}
    if probe == functions.SCHEDULE:
        readable["values"] = functions.values_text(outputs[0])
    add_readable(fp, key, readable)


def describe_optimizer(fp: dict, key: str, tx, parameters) -> None:
    """An optax optimizer by its effect on the probe (:mod:`.optimizers`;
    ``parameters``: the run's, whose structure a masked optimizer needs);
    readable: its kind (``adam``, ``sgd``, ...) and hyperparameters."""
    raw: dict[str, str] = {}
    _version_2_entries(raw, f"{key}.update", tx.update)
    readable = optimizers.labels(raw, f"{key}.update")
    schedules = optimizers.schedules(tx.update)
    for label, f in schedules.items():
        readable.setdefault(label, "schedule " + functions.values_text(functions.call(f, functions.PROBE_STEPS)))
    effect = optimizers.effect(tx, parameters, list(schedules.values()))
    if effect is None:  # not a transformation of a parameter tree: its description decides
        fp.update({k: v for k, v in raw.items() if "init" not in k[len(key) :].split(".")})
        fp[key] = type_name(tx)
    else:
        fp[key] = EFFECT + effect
    add_readable(fp, key, readable)


def describe_operator(fp: dict, key: str, op) -> None:
    """The action of ``op`` (decisive); readable: its kind, the numbers it is
    built from and its terms (:mod:`.operators`)."""
    fp[key] = _operator_text(op)
    add_readable(fp, key, operators.readable(op))
    if operators.uncountable(op):  # what version 2 wrote for it (upgrade() compares a version 2 file with it)
        fp[f"{key}{READABLE}{VERSION_2}"] = _operator_text(op, version=2)


def _operator_text(op, version: int = VERSION) -> str:
    """``"content <hash>"``: of ``op``'s action, or of its fields where it
    has none to compute (a continuous space)."""
    digest = operators.action_digest(op, version)
    if digest is None:  # not a discrete operator: describe its fields
        parts: dict[str, str] = {}
        for name, child in children(op):
            flatten(parts, name, child, depth=1, seen={id(op)})
        digest = entries_digest(parts)
    # not the class: a numba LocalOperator and its jax version are one operator
    return f"{CONTENT}{digest}"
