"""What defines a run, computed from content: the "same script?" test of a
resume.

:func:`fingerprint` describes a driver as a flat ``{key: text}`` dict, e.g.
``{"operator": "IsingJax <content 3f2a...>", "model.alpha": "1",
"n_samples": "512", "optimizer.update.update_fns.1.step_size": "-0.01"}``,
so a refusal can list what changed (``n_samples: 256 -> 512``). Every
entry is computed from values, never from a ``repr`` that may hold a
process's ``hash()`` (flax ``HashableArray``), a memory address, or leave
data out (``LocalOperatorJax`` shows no couplings):

* operators by their *action* (not their class): the connected configurations and matrix
  elements of every basis state (of 64 fixed pseudo-random states when the
  space is larger), sorted and rounded to 10 significant digits, hashed. Two
  operators that act the same have the same entry, however they were
  written; a changed coupling, term or constraint changes it;
* arrays (symmetry groups, masks, characters) by dtype, shape and a hash of
  their bytes; object arrays (QSR's measurement bases) by the description
  of each element, never by their bytes (which are pointers);
* models, samplers, rules, preconditioners, solvers field by field; functions
  by name, the values they close over and their defaults (an optax
  optimizer's learning rate and betas, an initializer's stddev);
* Hilbert spaces by their repr (it lists size, local states, constraints),
  graphs by node count and edges.

Not part of it: the number of steps, loggers, progress bars, chunk sizes,
the process, ``PYTHONHASHSEED``, the host, the number of processes (sample
and chain counts are global in NetKet).

Learning rates *are* part of it (they are values an optimizer closes over):
a resumed run with another learning rate is not the run that was
interrupted, so ``resume="auto"`` refuses it, naming the value; a deliberate
change is one ``resume="force"`` away, and then the template's learning rate
is used (optimizer hyperparameters are never read from a checkpoint).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import re
import types
from collections.abc import Mapping

import jax
import netket as nk
import numpy as np

from ..netket import internals


VERSION = 2  # of the fingerprint's keys and texts; fingerprints of other versions are not compared

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_MAX_DEPTH = 10
_MAX_STATES = 4096  # enumerate smaller spaces completely
_SAMPLED_STATES = 64

_SKIPPED_FIELDS = {"parent", "name", *internals.CHUNK_SIZE_FIELDS}  # flax bookkeeping; memory


def fingerprint(driver) -> dict[str, str]:
    """The run's fingerprint: ``{key: text}``, equal for the same script in
    any process on any machine, different when the physics, the model, the
    sampling or the optimization differ (see the module doc)."""
    fp: dict[str, str] = {"fingerprint_version": str(VERSION), "driver": _kind(driver)}
    operator = _operator(driver)
    if operator is not None:
        fp["operator"] = _operator_text(operator)
    _state(fp, "", driver.state)
    settings = {
        k: v
        for k, v in vars(driver).items()
        if k not in internals.DRIVER_RUN_STATE and k not in internals.DRIVER_OPERATOR_ATTRIBUTES
    }
    for name, value in sorted(settings.items()):
        if name == internals.DRIVER_INTEGRATOR_ATTRIBUTE:
            _flatten(fp, "integrator", internals.integrator_settings(value))
        elif name == internals.DRIVER_PRECONDITIONER_ATTRIBUTE:
            _flatten(fp, "preconditioner", value, skip={"x0"})  # x0: the warm start, state
        else:
            _flatten(fp, name.lstrip("_"), value)
    target = getattr(driver, "target_state", None)
    if target is not None:
        # its configuration only: its parameters are state the checkpoint
        # restores (NetKet's Infidelity example draws them from a random seed)
        _state(fp, "target.", target)
    return fp


def changes(old: dict, new: dict) -> list[str]:
    """Readable differences ``key: old -> new``. A key present on one side
    only (a field a library upgrade added or removed) is not a change: the
    kind of each object is an entry of its own, so a different model or
    sampler shows there."""
    if old.get("fingerprint_version") != new.get("fingerprint_version"):
        return []
    return [f"{k}: {old[k]} -> {new[k]}" for k in sorted(set(old) & set(new)) if old[k] != new[k]]


def comparable(saved: dict) -> bool:
    return saved.get("fingerprint_version") == str(VERSION)


# ---------------------------------------------------------------------- parts


def _kind(obj) -> str:
    # checkpointed() gives a driver a subclass made at run time: name the class it wraps
    cls = next(c for c in type(obj).__mro__ if not c.__dict__.get("_nkserde_wrapper", False))
    return cls.__qualname__


def _operator(driver):
    for attr in internals.DRIVER_OPERATOR_ATTRIBUTES:
        op = getattr(driver, attr, None)
        if op is None:
            continue
        if callable(op) and not isinstance(op, nk.operator.AbstractOperator):
            # TDVP keeps a generator t -> operator (a lambda for a constant one)
            try:
                op = op(driver.t)
            except Exception:  # noqa: BLE001  (described as a function instead)
                pass
        return op
    return None


def _state(fp: dict, prefix: str, vs) -> None:
    fp[f"{prefix}variational_state"] = _kind(vs)
    fp[f"{prefix}hilbert"] = _text(vs.hilbert)
    _flatten(fp, f"{prefix}model", vs.model)
    sampler = getattr(vs, "sampler", None)
    if sampler is not None:
        _flatten(fp, f"{prefix}sampler", sampler)
        fp[f"{prefix}n_samples"] = str(vs.n_samples)
        fp[f"{prefix}n_chains"] = str(sampler.n_chains)
        fp[f"{prefix}n_discard_per_chain"] = str(vs.n_discard_per_chain)
    leaves = jax.tree_util.tree_leaves_with_path(vs.parameters)
    fp[f"{prefix}parameters"] = "; ".join(
        f"{jax.tree_util.keystr(p)}: {np.dtype(x.dtype).name}{list(np.shape(x))}" for p, x in leaves
    )


def _flatten(fp: dict, key: str, value, skip=frozenset(), depth=0, seen=None) -> None:
    """Adds ``value``'s description under ``key`` (and ``key.field`` ...)."""
    seen = set() if seen is None else seen
    if depth > _MAX_DEPTH or id(value) in seen:
        fp[key] = "..."
        return
    text = _leaf_text(value)
    if text is not None:
        fp[key] = text
        return
    children = _children(value)
    fp[key] = _type_name(value)
    if not children:
        return
    seen = seen | {id(value)}
    for name, child in children:
        if name in skip or name in _SKIPPED_FIELDS:
            continue
        _flatten(fp, f"{key}.{name}", child, depth=depth + 1, seen=seen)


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
        return _text(value)
    if isinstance(value, nk.graph.AbstractGraph):
        edges = sorted(tuple(map(int, e)) for e in value.edges())
        return f"{type(value).__name__} n_nodes={value.n_nodes} edges {_sha(repr(edges).encode())}"
    if isinstance(value, nk.utils.group.FiniteGroup) and hasattr(value, "to_array"):
        return f"{type(value).__name__} {_array_text(np.asarray(value.to_array()))}"
    return None


def _children(value) -> list[tuple[str, object]]:
    if isinstance(value, Mapping):
        return sorted(((str(k), v) for k, v in value.items()), key=lambda kv: kv[0])
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # NamedTuple (optax)
        return list(value._asdict().items())
    if isinstance(value, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(value)]
    if isinstance(value, functools.partial):
        return [("func", value.func), *((str(i), a) for i, a in enumerate(value.args)), *sorted(value.keywords.items())]
    if isinstance(value, types.MethodType):
        return [("function", value.__func__)]
    if isinstance(value, types.FunctionType):
        parts = []
        if value.__closure__:
            for name, cell in zip(value.__code__.co_freevars, value.__closure__):
                try:
                    parts.append((name, cell.cell_contents))
                except ValueError:  # an empty cell
                    continue
        for i, default in enumerate(value.__defaults__ or ()):
            parts.append((f"default{i}", default))
        parts += sorted((value.__kwdefaults__ or {}).items())
        return parts
    wrapped = getattr(value, "__wrapped__", None) or getattr(value, "fun", None)
    if callable(value) and wrapped is not None and callable(wrapped):  # jit, custom_jvp
        return [("function", wrapped)]
    fields = internals.pytree_fields(type(value))
    if fields is not None:  # NetKet Pytree
        return [(f, getattr(value, f)) for f in fields if hasattr(value, f)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value) if hasattr(value, f.name)]
    if hasattr(value, "__dict__") and not callable(value) and not isinstance(value, types.ModuleType):
        return sorted((k, v) for k, v in vars(value).items() if not k.startswith("__"))
    return []


def _type_name(value) -> str:
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return value.__qualname__
    if isinstance(value, functools.partial):
        return "partial"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str) and not isinstance(value, type):
        return name  # jitted or custom_jvp functions carry their function's name
    return _kind(value)


def _text(obj) -> str:
    return _ADDRESS.sub("", repr(obj))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _array_text(x) -> str:
    a = np.asarray(x)
    if a.dtype == object:  # its bytes are pointers: describe the elements
        return f"object{list(a.shape)} {_objects_digest(a.reshape(-1))}"
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        a = np.asarray(jax.random.key_data(x))
    a = np.ascontiguousarray(a)
    return f"{a.dtype.name}{list(a.shape)} {_sha(a.tobytes())}"


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
                _flatten(parts, "", item)
                text = _sha(repr(sorted(parts.items())).encode())
            memo[id(item)] = text
        texts.append(memo[id(item)])
    return _sha("\n".join(texts).encode())


def _operator_text(op) -> str:
    digest = _action_digest(op)
    if digest is None:  # not a discrete operator: describe its fields
        parts: dict[str, str] = {}
        for name, child in _children(op):
            _flatten(parts, name, child, depth=1, seen={id(op)})
        digest = _sha(repr(sorted(parts.items())).encode())
    # not the class: a numba LocalOperator and its jax version are one operator
    return f"content {digest}"


def _action_digest(op) -> str | None:
    """A hash of how ``op`` acts on basis states, or None if it cannot be
    computed (continuous spaces, operators without ``get_conn_padded``)."""
    try:
        hilbert = op.hilbert
        if not isinstance(hilbert, nk.hilbert.DiscreteHilbert) or not hasattr(op, "get_conn_padded"):
            return None
        if hilbert.is_finite and hilbert.n_states <= _MAX_STATES:
            states = np.asarray(hilbert.all_states())
        else:
            states = np.asarray(hilbert.random_state(jax.random.PRNGKey(0), _SAMPLED_STATES))
        xp, mels = op.get_conn_padded(states)
        xp, mels = np.asarray(xp), np.asarray(mels)
    except Exception:  # noqa: BLE001  (fall back to a description of the fields)
        return None
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(states).tobytes())
    for row_xp, row_mels in zip(xp, mels):
        summed: dict[bytes, complex] = {}
        for conn, mel in zip(row_xp, row_mels):
            key = np.ascontiguousarray(conn).tobytes()
            summed[key] = summed.get(key, 0) + complex(mel)
        for key in sorted(summed):
            m = summed[key]
            if abs(m) > 1e-14:
                h.update(key)
                h.update(f"{m.real:.10g},{m.imag:.10g};".encode())
        h.update(b"|")
    return h.hexdigest()[:16]
