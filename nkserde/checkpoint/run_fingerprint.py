"""What defines a run, computed from content: the "same script?" test of a
resume.

:func:`fingerprint` describes a driver as a flat ``{key: text}`` dict of
what the user chose, e.g. ``{"operator": "content 3f2a...", "model": "RBM",
"model.alpha": "1", "n_samples": "512", "optimizer": "effect 9c1e..."}``.
Entries whose key holds ``" | "`` (``"operator | h": "1.0"``,
``"optimizer | learning_rate": "0.01"``) are *readable*: they say in the
user's words what an entry that is a hash stands for, and name what changed
when it changes; they never decide on their own (the same operator written
as ``Ising`` or as its ``LocalOperator`` has other readable entries and is
the same run). :func:`differences` compares two fingerprints and words each
change (``operator: Ising h 1.0 -> 1.5``, ``optimizer: adam learning_rate
0.01 -> 0.02``, ``model: RBM alpha 1 -> 2``). Every entry is computed from
values, never from a ``repr`` that may hold a process's ``hash()`` (flax
``HashableArray``) or a memory address, or leave data out
(``LocalOperatorJax`` shows no couplings).

Each kind of object (docs/guides/resume.md, "The same script? fingerprint"):

* operators by their *action*: the connected configurations and matrix
  elements of every basis state (of 64 states drawn with a fixed key when
  the space is larger, also when it is too large for NetKet to count),
  rounded to 10 significant digits, hashed; readable: the numbers a NetKet
  Hamiltonian is built from (``Ising`` ``h``, ``J``, its edges) and the
  terms of a LocalOperator or PauliStrings with their coefficients (Pauli
  strings on spin-1/2 sites: ``term X0``, ``term Z0 Z1``; matrix elements
  on other sites);
* arrays by dtype, shape and a hash: of their bytes (integers, booleans:
  symmetry groups, masks), of their values to 9 significant digits of the
  largest (floating point: characters, tableaus; numpy releases compute
  the last bits of ``exp`` otherwise); object arrays (QSR's measurement
  bases) element by element;
* models, samplers, rules, preconditioners, solvers, integrators field by
  field; Hilbert spaces by their repr, graphs by node count and edges;
* functions, by kind:

  - *left out*: initializers (model fields named ``*_init``, functions of
    ``jax.nn.initializers``): the parameters come from the checkpoint;
    what NetKet computes from the other fields (a GCNN's ``irreps``);
    an optax optimizer's ``init`` (its state comes from the checkpoint);
    the defaults of any function (how a release spells it), and what a
    run computes as it goes (SR's last QGT ``_lhs``, solver ``info``, the
    warm start ``x0``, statistics) or NetKet derives from the rest (VMC_SR's
    ``use_ntk``, ``on_the_fly``: the same mathematics);
  - *by their effect on a fixed probe*: optax optimizers (three updates of
    a fixed parameter tree with fixed gradients, with the values of the
    schedules they hold at fixed steps), functions of one argument
    (activations of a model: on fixed real and complex inputs; schedules
    such as ``diag_shift``: at fixed steps), quantised to 9 significant
    digits of the largest value and hashed; readable: the hyperparameters
    they close over (``optimizer | learning_rate``, ``optimizer | b1``,
    the schedule's ``init_value``) and the function's name;
  - *by name and arguments*: every other function (a solver: ``cg``, and
    the arguments a ``functools.partial`` binds).

Not part of it: the number of steps, loggers, progress bars, chunk sizes,
the process, ``PYTHONHASHSEED``, the host, the number of processes (sample
and chain counts are global in NetKet), the releases of NetKet, JAX, flax
and optax.

What the probes compute (an operator's action, a function on its fixed
inputs, an optimizer's updates) is kept in the result cache where there is
one (:mod:`nkserde.result_cache`, set with the compilation cache), keyed by
:mod:`content_key`: a resumed process takes it from there instead of
computing it with JAX again; the fingerprint is the same either way.

Learning rates *are* part of it: a resumed run with another learning rate
is not the run that was interrupted, so ``resume="auto"`` refuses it,
naming the value; a deliberate change is one ``resume="force"`` away, and
then the template's learning rate is used (optimizer hyperparameters are
never read from a checkpoint).

Version 2 fingerprints (nkserde before fingerprint version 3) described
functions by name, closure and defaults. :func:`upgrade` brings one to
version 3's keys as far as its text allows: its optimizer description
becomes readable hyperparameters, a function described by name becomes the
readable name and closure values of a probed one, initializers and
defaults are keys version 3 does not have, a floating-point array, hashed
by its bytes in version 2, is not compared, and an operator on a space too
large to count, which version 2 described by its fields (that leave an
IsingJax's couplings out), compares with what version 2 writes for it
(``"<key> | version 2 text"``, never shown). Where version 2 has no
decisive entry of an object (an optimizer's effect), the readable entries
that both have decide.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import re
import types
import warnings
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import netket as nk
import numpy as np
import optax

from .. import jax_internals
from ..caches import content_key, results as result_cache
from ..netket import internals

VERSION = 3  # of the fingerprint's keys and texts
COMPARED_VERSIONS = ("2", "3")  # 2 through upgrade(); older fingerprints are not compared
READABLE = " | "  # "<key> | <label>": a readable entry of the object at <key>

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_MAX_DEPTH = 10
_MAX_STATES = 4096  # enumerate smaller spaces completely
_SAMPLED_STATES = 64
_MAX_TERMS = 4096  # operators with more terms are not listed term by term
_MAX_TERM_SITES = 4  # terms on more sites are described by their matrix, not Pauli strings
_SHOWN_TERMS = 8  # term lines in one refusal, per operator
_TERM_BUDGET = 2**16  # Pauli strings tried over all terms: a few tenths of a second

_SKIPPED_FIELDS = {
    "parent",  # flax bookkeeping
    "name",
    *internals.CHUNK_SIZE_FIELDS,  # memory
    *internals.PER_STEP_FIELDS,  # a preconditioner's last QGT, solution and solver info
    *internals.MODEL_DERIVED_FIELDS,  # a GCNN's irreps: computed from its symmetry group
}
_INITIALIZER_FIELD = re.compile(r"(^|_)init(ializer)?$")  # kernel_init, bias_init, embedding_initializer
_DEFAULT = re.compile(r"^default\d+$")  # a function's positional defaults (version 2)
_LOCAL_FUNCTION = re.compile(r"^(?P<factory>[A-Za-z_]\w*)\.<locals>\.(?P<function><?[A-Za-z_]\w*>?)$")
_CONTAINERS = {"dict", "FrozenDict", "list", "tuple", "partial"}

_EFFECT = "effect "  # an optimizer's effect on the probe
_FUNCTION = "function "  # a function's effect on the probe
_CONTENT = "content "  # an operator's action
_KIND = "kind"  # the readable label of an object's kind
_VERSION_2 = "version 2 text"  # what version 2 wrote where version 3 writes otherwise (never shown)
_QUANTIZED = "~"  # a float array's digest of its values to 9 digits (version 2: of its bytes)
_FLOAT_ARRAY_V2 = re.compile(r"^(float|complex|bfloat)\d*\[[\d, ]*\] [0-9a-f]{16}$")

# the probes: fixed inputs of functions of one argument
_PROBE_STEPS = np.array([0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 100000], np.int32)
_SHOWN_STEPS = (0, 1, 10, 100, 1000, 10000)
_PROBE_REAL = np.array([-4.0, -2.5, -1.5, -0.5, 0.0, 0.25, 0.75, 1.0, 2.0, 3.5])
_PROBE_COMPLEX = np.array([0.3 + 0.1j, -1.2 + 0.4j, 2.0 - 0.7j, -0.1 - 2.5j, 1.5 + 1.0j])
_OPTIMIZER_STEPS = 3


def fingerprint(driver) -> dict[str, str]:
    """The run's fingerprint: ``{key: text}``, equal for the same script in
    any process on any machine under any supported install, different when
    the physics, the model, the sampling or the optimization differ (see
    the module doc)."""
    fp: dict[str, str] = {"fingerprint_version": str(VERSION), "driver": _kind(driver)}
    operator = _operator(driver)
    if operator is not None:
        _describe_operator(fp, "operator", operator)
    _state(fp, "", driver.state)
    settings = {
        k: v
        for k, v in vars(driver).items()
        if k not in internals.DRIVER_RUN_STATE
        and k not in internals.DRIVER_OPERATOR_ATTRIBUTES
        and k not in internals.DRIVER_DERIVED_SETTINGS
    }
    for name, value in sorted(settings.items()):
        if name == internals.DRIVER_INTEGRATOR_ATTRIBUTE:
            _flatten(fp, "integrator", internals.integrator_settings(value))
        elif isinstance(value, optax.GradientTransformation):
            _describe_optimizer(fp, name.lstrip("_"), value, driver.state.parameters)
        else:
            _flatten(fp, name.lstrip("_"), value)
    target = getattr(driver, "target_state", None)
    if target is not None:
        # its configuration only: its parameters are state the checkpoint
        # restores (NetKet's Infidelity example draws them from a random seed)
        _state(fp, "target.", target)
    return fp


# ------------------------------------------------------------ comparison


@dataclasses.dataclass(frozen=True)
class Difference:
    """One change between two fingerprints: the entry ``key``, the
    readable ``label`` inside it ("" for the entry itself), the old and the
    new text (None: absent on that side) and the ``line`` that words it."""

    key: str
    label: str
    old: str | None
    new: str | None
    line: str


def comparable(saved: dict) -> bool:
    """Whether a stored fingerprint is compared at all (versions 2 and 3)."""
    return saved.get("fingerprint_version") in COMPARED_VERSIONS


def changes(old: dict, new: dict) -> list[str]:
    """The differences of :func:`differences`, one line each."""
    return [d.line for d in differences(old, new)]


def differences(old: dict, new: dict) -> list[Difference]:
    """What differs between the stored fingerprint ``old`` and the run's
    ``new``, in the user's words where they exist.

    Entries are compared where both fingerprints have them: a key on one
    side only (a field a library release added or removed) is not a
    change; the kind of each object is an entry of its own, so another
    model or sampler shows there. Readable entries explain the change of
    the entry they belong to; they decide only for an object whose decisive
    entry ``old`` lacks (a version 2 fingerprint's optimizer). A change
    inside an object that changed kind is not listed (the kind says it)."""
    if not comparable(old) or not comparable(new):
        return []
    old = upgrade(old, new)
    old_decisive, new_decisive = _decisive(old), _decisive(new)
    changed = [k for k in sorted(set(old_decisive) & set(new_decisive)) if old_decisive[k] != new_decisive[k]]
    # an object version 2 described otherwise: its readable entries decide
    readable_only = sorted(k for k in new_decisive if k not in old_decisive and _readable(old, k) and _readable(new, k))
    found: list[Difference] = []
    for key in sorted(changed + readable_only):
        if any(key.startswith(f"{other}.") for other in changed if other != key):
            continue  # inside an object that changed (another kind)
        if key in readable_only:
            found += _readable_differences(old, new, key, common_only=True)
            continue
        # readable entries on one side only (a version 2 fingerprint) explain nothing
        explained = _readable_differences(old, new, key) if _readable(old, key) and _readable(new, key) else []
        if explained:
            found += explained
        else:
            old_text, new_text = old_decisive[key], new_decisive[key]
            if _is_hash(old_text) != _is_hash(new_text):  # a function probed on one side: its kind
                a, b = _shown(old, key), _shown(new, key)
                line = f"{_prefix(new, key)} {a} -> {b}"
            else:
                what = _what(old, new, key) if _is_hash(new_text) else ""
                line = f"{_prefix(new, key)} {old_text} -> {new_text}{what}"
            found.append(Difference(key, "", old_text, new_text, line))
    # parameter shapes follow from the model: a change of the model says it
    for prefix in ("", "target."):
        if any(d.key.startswith(f"{prefix}model") for d in found):
            found = [d for d in found if d.key != f"{prefix}parameters"]
    return found


def _shown(fp: dict, key: str) -> str:
    kind = _readable(fp, key).get(_KIND)
    return _short(kind) if kind and _is_hash(fp[key]) else fp[key]


def upgrade(saved: dict, current: dict) -> dict:
    """A version 2 fingerprint in version 3's keys, as far as its text
    allows (``current``, the run's version 3 fingerprint, says which keys
    are optimizers and probed functions); other versions as they are."""
    if saved.get("fingerprint_version") != "2":
        return saved
    old = dict(saved)
    for key, text in current.items():
        if key.endswith(f"{READABLE}{_VERSION_2}"):
            decisive = key[: -len(f"{READABLE}{_VERSION_2}")]
            if saved.get(decisive) == text:  # what version 2 writes for the run's own object
                old[decisive] = current[decisive]
            continue
        if READABLE in key:
            continue
        if _FLOAT_ARRAY_V2.match(saved.get(key, "")) and not _FLOAT_ARRAY_V2.match(text):
            del old[key]  # a hash of its bytes: not comparable with one of its values
            continue
        if text.startswith(_EFFECT):  # an optimizer: v2 described its closures
            labels = _optax_labels(saved, f"{key}.update")
            _drop(old, key)
            old.update({f"{key}{READABLE}{label}": value for label, value in labels.items()})
        elif text.startswith(_FUNCTION) and key in saved:  # v2: name, closure values and defaults
            labels = {_KIND: saved[key], **_direct_children(saved, key)}
            _drop(old, key)
            old.update({f"{key}{READABLE}{label}": value for label, value in labels.items()})
    old["fingerprint_version"] = str(VERSION)
    return old


def _decisive(fp: dict) -> dict:
    return {k: v for k, v in fp.items() if READABLE not in k and k != "fingerprint_version"}


def _readable(fp: dict, key: str) -> dict:
    prefix = f"{key}{READABLE}"
    return {k[len(prefix) :]: v for k, v in fp.items() if k.startswith(prefix)}


def _readable_differences(old: dict, new: dict, key: str, common_only: bool = False) -> list[Difference]:
    """The readable entries of ``key`` that differ, the most telling first:
    the kind; else the numbers it is built from; else the values of a
    function; else the terms of an operator (a few)."""
    before, after = _readable(old, key), _readable(new, key)
    before.pop(_VERSION_2, None), after.pop(_VERSION_2, None)
    labels = sorted(set(before) & set(after)) if common_only else sorted(set(before) | set(after))
    differing = [label for label in labels if before.get(label) != after.get(label)]
    if not differing:
        return []
    prefix = _prefix(new, key)
    kind = after.get(_KIND, before.get(_KIND))

    def line(label):
        a, b = before.get(label, "(none)"), after.get(label, "(none)")
        if label == _KIND:
            return Difference(key, label, before.get(label), after.get(label), f"{prefix} {_short(a)} -> {_short(b)}")
        named = f" {_short(kind)}" if kind else ""
        return Difference(key, label, before.get(label), after.get(label), f"{prefix}{named} {label} {a} -> {b}")

    terms = [label for label in differing if label.startswith("term ")]
    values = [label for label in differing if label == "values"]
    numbers = [label for label in differing if label not in terms and label not in values and label != _KIND]
    found = [line(_KIND)] if _KIND in differing else []
    if not found and numbers:
        return [line(label) for label in numbers]
    if not found and values:
        return [line(label) for label in values]
    if terms and (not found or _is_operator_entry(new, key)):
        found += [line(label) for label in terms[:_SHOWN_TERMS]]
        if len(terms) > _SHOWN_TERMS:
            more = len(terms) - _SHOWN_TERMS
            found.append(Difference(key, "term", None, None, f"{prefix} ... and {more} more terms"))
    return found


def _is_operator_entry(fp: dict, key: str) -> bool:
    return str(fp.get(key, "")).startswith(_CONTENT)


def _prefix(fp: dict, key: str) -> str:
    """``"model: RBM alpha"`` for ``model.alpha`` (the nearest enclosing
    object that has a kind names it), ``"n_samples:"`` for a top-level key."""
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        kind = fp.get(parent)
        if isinstance(kind, str) and re.fullmatch(r"[A-Za-z_][\w.]*", kind) and kind not in _CONTAINERS:
            return f"{parent}: {kind} {'.'.join(parts[i:])}"
    return f"{key}:"


def _what(old: dict, new: dict, key: str) -> str:
    """Which object a hash stands for, when nothing readable says more."""
    kind = _readable(new, key).get(_KIND)
    if not _readable(old, key):  # a version 2 fingerprint: hashes only
        return f" ({_short(kind)}; the stored fingerprint, of an older nkserde, says no more)" if kind else ""
    return f" ({_short(kind)}: no readable difference)" if kind else " (no readable difference)"


# names of the function a factory returns that say less than the factory's
_GENERIC_FUNCTIONS = {"schedule", "init", "init_fn", "update", "update_fn", "fn", "wrapper", "wrapped"}


def _short(kind: str) -> str:
    """``linear_schedule`` for ``polynomial_schedule.<locals>.schedule``,
    ``my_schedule`` for ``main.<locals>.my_schedule``."""
    m = _LOCAL_FUNCTION.match(kind)
    if not m:
        return kind
    return m.group("factory") if m.group("function") in _GENERIC_FUNCTIONS else m.group("function")


def _is_hash(text: str) -> bool:
    return text.startswith((_CONTENT, _EFFECT, _FUNCTION))


def _drop(fp: dict, key: str) -> None:
    for k in [k for k in fp if k == key or k.startswith(f"{key}.")]:
        del fp[k]


def _direct_children(fp: dict, key: str) -> dict:
    """The entries one level below ``key`` (but a function's defaults)."""
    depth = key.count(".") + 1
    below = {k.rsplit(".", 1)[1]: v for k, v in fp.items() if k.startswith(f"{key}.") and k.count(".") == depth}
    return {name: v for name, v in below.items() if READABLE not in name and not _DEFAULT.match(name)}


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
    _flatten(fp, f"{prefix}model", vs.model, probe=_ACTIVATION)
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


_ACTIVATION = "activation"  # probe functions on real and complex inputs (a model's)
_SCHEDULE = "schedule"  # probe functions at fixed steps (everything else)


def _flatten(fp: dict, key: str, value, skip=frozenset(), depth=0, seen=None, probe=_SCHEDULE) -> None:
    """Adds ``value``'s description under ``key`` (and ``key.field`` ...)."""
    seen = set() if seen is None else seen
    if depth > _MAX_DEPTH or id(value) in seen:
        fp[key] = "..."
        return
    if _per_step_result(value):
        return
    if isinstance(value, nk.operator.AbstractOperator):
        _describe_operator(fp, key, value)
        return
    if isinstance(value, optax.GradientTransformation):
        _describe_optimizer(fp, key, value, None)
        return
    if _is_function(value):
        if _is_initializer(key, value):
            return  # the parameters come from the checkpoint
        _describe_function(fp, key, value, probe, depth, seen)
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
        _flatten(fp, f"{key}.{name}", child, depth=depth + 1, seen=seen, probe=probe)


def _per_step_result(value) -> bool:
    """A value a run computes as it goes: a QGT, statistics."""
    return isinstance(value, (nk.optimizer.LinearOperator, nk.stats.Stats))


def _is_function(value) -> bool:
    if isinstance(value, type):
        return False
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)):
        return True
    wrapped = getattr(value, "__wrapped__", None) or getattr(value, "fun", None)
    return callable(value) and callable(wrapped)  # jit, custom_jvp


def _is_initializer(key: str, value) -> bool:
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
        return _text(value)
    if isinstance(value, nk.graph.AbstractGraph):
        edges = sorted(tuple(map(int, e)) for e in value.edges())
        return f"{type(value).__name__} n_nodes={value.n_nodes} edges {_sha(repr(edges).encode())}"
    if isinstance(value, nk.utils.group.FiniteGroup) and hasattr(value, "to_array"):
        return f"{type(value).__name__} {_array_text(np.asarray(value.to_array()))}"
    return None


def _children(value, defaults=False) -> list[tuple[str, object]]:
    """The parts of ``value``. A function's are the values it closes over
    (and, with ``defaults``, its defaults: what version 2 listed)."""
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
        if defaults:
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
    if np.issubdtype(a.dtype, np.inexact) and a.ndim == 0:  # a number: in words
        return f"{a.dtype.name} {_number(complex(a))}"
    a = np.ascontiguousarray(a)  # (a 0-d array becomes 1-d: "int64[1]", as version 2 wrote it)
    if np.issubdtype(a.dtype, np.inexact):  # computed numbers: not their last bits (numpy's exp, LAPACK)
        return f"{a.dtype.name}{list(a.shape)} {_QUANTIZED}{_quantized_digest([a])}"
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


def _raw(fp: dict, key: str, value, depth=0, seen=None) -> None:
    """Version 2's description of a value (functions by name, closure and
    defaults): what :func:`_optax_labels` reads, here and in a version 2
    fingerprint alike."""
    seen = set() if seen is None else seen
    if depth > _MAX_DEPTH or id(value) in seen:
        fp[key] = "..."
        return
    text = _leaf_text(value)
    if text is not None:
        fp[key] = text
        return
    fp[key] = _type_name(value)
    seen = seen | {id(value)}
    for name, child in _children(value, defaults=True):
        if name not in _SKIPPED_FIELDS:
            _raw(fp, f"{key}.{name}", child, depth + 1, seen)


# ------------------------------------------------------------------ functions


def _describe_function(fp: dict, key: str, f, probe: str, depth: int, seen: set) -> None:
    """A function of one argument by its effect on the probe (readable: its
    name and the values it closes over); any other by name and the
    arguments it was given (closure values, a partial's arguments)."""
    outputs = _probe_function(f, probe)
    if outputs is None:
        fp[key] = _type_name(f)
        for name, child in _children(f):
            _flatten(fp, f"{key}.{name}", child, depth=depth + 1, seen=seen | {id(f)}, probe=probe)
        return
    fp[key] = _FUNCTION + _quantized_digest(outputs)
    raw: dict[str, str] = {}
    _raw(raw, key, f)
    readable = {_KIND: raw[key], **_direct_children(raw, key)}
    if probe == _SCHEDULE:
        readable["values"] = _values_text(outputs[0])
    fp.update({f"{key}{READABLE}{label}": text for label, text in readable.items()})


def _one_argument(f) -> bool:
    try:
        if isinstance(f, functools.partial):  # NetKet's HashablePartial hides the bound signature
            f = functools.partial(f.func, *f.args, **f.keywords)
        signature = inspect.signature(f)
    except (TypeError, ValueError):
        return False
    kinds = inspect.Parameter
    required = [
        p
        for p in signature.parameters.values()
        if p.default is kinds.empty and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
    ]
    return len(required) == 1 and required[0].kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)


def _probe_function(f, probe: str) -> list[np.ndarray] | None:
    """``f`` on the fixed inputs (a schedule: the steps; an activation: real
    and complex numbers), or None when it is not a function of one number."""
    if probe == _SCHEDULE and not _one_argument(f):
        return None  # a model's functions are tried whatever their signature says (NetKet's reim wraps it away)
    inputs = [_PROBE_STEPS] if probe == _SCHEDULE else [_PROBE_REAL, _PROBE_COMPLEX]
    outputs = [out for out in (_call(f, x) for x in inputs) if out is not None]
    return outputs or None


def _call(f, x) -> np.ndarray | None:
    """``f`` on the probe ``x``, as complex numbers (None: not a function of
    numbers); kept in the result cache."""
    return _memoized("call", (f, x), lambda: _computed_call(f, x), _encode_numbers, _decode_numbers)


def _computed_call(f, x) -> np.ndarray | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return _numbers(f(jnp.asarray(x)), len(x))
        except Exception:  # noqa: BLE001  (a function of one number: call it on each)
            pass
        try:
            return np.concatenate([_numbers(f(v), 1) for v in x.tolist()])
        except Exception:  # noqa: BLE001  (not a function of numbers)
            return None


def _numbers(out, n: int) -> np.ndarray:
    a = np.asarray(out)
    if a.dtype == object or a.size not in (1, n) or not np.issubdtype(a.dtype, np.number):
        raise TypeError("not numbers")
    return np.ravel(a).astype(complex)


def _quantized_digest(arrays) -> str:
    """A hash of numbers, each rounded to 9 significant digits of the
    largest: the last bits a JAX or XLA release computes otherwise do not
    change it."""
    values = np.concatenate([np.ravel(a).astype(complex) for a in arrays])
    parts = np.concatenate([values.real, values.imag])
    finite = parts[np.isfinite(parts)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    scale = scale or 1.0
    tokens = [f"{scale:.9g}"]
    for x in parts:
        tokens.append(str(int(np.round(x / scale * 1e9)) + 0) if np.isfinite(x) else str(x))
    return _sha(",".join(tokens).encode())


def _values_text(values: np.ndarray) -> str:
    """``"0: 0.01, 1: 0.00991, 10: 0.0091, ..."``: a schedule at some of the
    probe's steps (a function of all of them, a norm: its values)."""
    if len(values) != len(_PROBE_STEPS):
        return ", ".join(_number(v, 6) for v in values[: len(_SHOWN_STEPS)])
    shown = {int(s): v for s, v in zip(_PROBE_STEPS, values)}
    return ", ".join(f"{s}: {_number(shown[s], 6)}" for s in _SHOWN_STEPS)


def _number(v: complex, digits: int = 10) -> str:
    """``1.0``, ``-0.5``, ``0.3`` (not ``0.30000000000000004``), ``1.0+2.0j``."""
    v = complex(v)

    def real(x):
        text = f"{x:.{digits}g}"
        return text if any(c in text for c in ".einn") else f"{text}.0"

    if abs(v.imag) <= 1e-12 * max(1.0, abs(v.real)):
        return real(v.real)
    return f"{real(v.real)}{'+' if v.imag >= 0 else '-'}{real(abs(v.imag))}j"


# ----------------------------------------------------------------- optimizers


def _describe_optimizer(fp: dict, key: str, tx, parameters) -> None:
    """An optax optimizer by its effect on the probe; readable: its kind
    (``adam``, ``sgd``, ...) and hyperparameters."""
    raw: dict[str, str] = {}
    _raw(raw, f"{key}.update", tx.update)
    readable = _optax_labels(raw, f"{key}.update")
    schedules = _schedules(tx.update)
    for label, f in schedules.items():
        readable.setdefault(label, "schedule " + _values_text(_call(f, _PROBE_STEPS)))
    effect = _optimizer_effect(tx, parameters, list(schedules.values()))
    if effect is None:  # not a transformation of a parameter tree: its description decides
        fp.update({k: v for k, v in raw.items() if "init" not in k[len(key) :].split(".")})
        fp[key] = _type_name(tx)
    else:
        fp[key] = _EFFECT + effect
    fp.update({f"{key}{READABLE}{label}": text for label, text in readable.items()})


# combinators and the learning rate's steps: not part of an optimizer's kind
_STRUCTURAL = {
    "chain",
    "named_chain",
    "with_extra_args_support",
    "identity",
    "scale",
    "scale_by_learning_rate",
    "scale_by_schedule",
}


def _optax_labels(fp: dict, root: str) -> dict[str, str]:
    """Readable hyperparameters of an optax optimizer from the version 2
    description of its update function under ``root``: ``{"kind": "adam",
    "learning_rate": "0.01", "b1": "0.9", ...}``. Each number is labelled by
    the transformation it configures (``scale_by_adam`` -> ``adam``) and its
    name; ``scale``'s step size is the (negative) learning rate."""
    keys = sorted((k for k in fp if k == root or k.startswith(f"{root}.")), key=_natural)
    children = {k.rsplit(".", 1)[0] for k in keys if k != root}
    components: list[str] = []
    numbers: list[tuple[str, str, str]] = []  # (component, name, text)
    for k in keys:
        relative = k[len(root) :].split(".")
        if "init" in relative:  # the optimizer's state is the checkpoint's
            continue
        m = _LOCAL_FUNCTION.match(fp[k])
        if m and m.group("function") in ("update_fn", "update") and m.group("factory") not in components:
            components.append(m.group("factory"))
        name = relative[-1]
        if k in children or _DEFAULT.match(name) or not _is_value_text(fp[k]):
            continue
        owner = next((_LOCAL_FUNCTION.match(fp[a]) for a in _ancestors(k, root) if _LOCAL_FUNCTION.match(fp[a])), None)
        numbers.append((owner.group("factory") if owner else "", name, fp[k]))
    kinds = [c for c in components if c not in _STRUCTURAL]
    kind = "+".join(dict.fromkeys(c.removeprefix("scale_by_") for c in kinds)) or "sgd"
    labels = {_KIND: kind}
    for component, name, text in numbers:
        if component == "scale" and name == "step_size":
            labels["learning_rate"] = _negated(text)
        elif component == "scale_by_learning_rate" and name == "m":
            continue  # the sign of the step
        else:
            short = component.removeprefix("scale_by_")
            labels[name if short == kind or not short else f"{short}.{name}"] = text
    return labels


def _schedules(update) -> dict[str, object]:
    """The schedules an optimizer closes over (functions of the step),
    labelled as :func:`_optax_labels` labels numbers: ``learning_rate`` for
    the one optax's aliases take."""
    found: dict[str, object] = {}

    def walk(value, name, owner, depth, seen):
        if depth > _MAX_DEPTH or id(value) in seen:
            return
        seen = seen | {id(value)}
        if isinstance(value, optax.GradientTransformation):
            walk(value.update, "update", owner, depth + 1, seen)
            return
        if isinstance(value, (list, tuple)):
            for item in value:
                walk(item, name, owner, depth + 1, seen)
            return
        if not isinstance(value, types.FunctionType):
            return
        m = _LOCAL_FUNCTION.match(value.__qualname__)
        factory = m.group("factory") if m else ""
        transformation = m is not None and m.group("function") in ("update_fn", "update", "init_fn", "init")
        if not transformation and factory != "scale_by_learning_rate":
            if _one_argument(value) and _call(value, _PROBE_STEPS) is not None:
                plain = owner in ("scale_by_learning_rate", "") or name == "learning_rate"
                label = name if plain else f"{owner.removeprefix('scale_by_')}.{name}"
                found.setdefault(label, value)
                return
        for child_name, child in _children(value):
            walk(child, child_name, factory or owner, depth + 1, seen)

    walk(update, "update", "", 0, set())
    return found


def _optimizer_effect(tx, parameters, schedules) -> str | None:
    """A hash of ``tx``'s updates of a fixed parameter tree under fixed
    gradients (three steps) and of its schedules at the probe's steps; None
    if it cannot update one (then its description decides)."""
    dtype = jnp.float64
    if parameters is not None:
        leaves = jax.tree_util.tree_leaves(parameters)
        if leaves:
            dtype = jnp.result_type(*leaves)
    trees = [{"a": (3,), "b": (2, 3)}]
    if parameters is not None:  # a masked or multi_transform optimizer needs the run's structure
        trees.append(jax.tree_util.tree_map(lambda x: tuple(min(d, 3) for d in np.shape(x)), parameters))
    for shapes in trees:
        try:
            outputs = _optimizer_updates(tx, shapes, dtype)
        except Exception:  # noqa: BLE001  (try the next tree)
            continue
        return _quantized_digest(outputs + [_call(f, _PROBE_STEPS) for f in schedules])
    return None


def _optimizer_updates(tx, shapes, dtype) -> list[np.ndarray]:
    """The updates of three steps of ``tx`` (as complex numbers); kept in
    the result cache (an optimizer that raises is tried again)."""
    return _memoized(
        "optimizer updates",
        (tx, shapes, dtype),
        lambda: [np.ravel(np.asarray(u)).astype(complex) for u in _computed_updates(tx, shapes, dtype)],
        lambda arrays: [_encode_numbers(a) for a in arrays],
        lambda stored: [_decode_numbers(a) for a in stored],
    )


def _computed_updates(tx, shapes, dtype) -> list[np.ndarray]:
    is_shape = lambda s: isinstance(s, tuple) and all(isinstance(d, int) for d in s)  # noqa: E731
    flat, treedef = jax.tree_util.tree_flatten(shapes, is_leaf=is_shape)

    def tree(salt):
        leaves = []
        for i, shape in enumerate(flat):
            n = int(np.prod(shape))
            j = np.arange(n)
            # magnitudes from 1 to 1e-8 (an eps shows), signs of both kinds
            values = 10.0 ** -((j * 5 + i * 3 + salt) % 9) * np.where((j + i + salt) % 3, 1.0, -1.0)
            if jnp.issubdtype(dtype, jnp.complexfloating):
                values = values + 1j * 10.0 ** -((j * 3 + i + salt) % 7) * np.where((j + salt) % 2, 1.0, -1.0)
            leaves.append(jnp.asarray(values.reshape(shape), dtype))
        return jax.tree_util.tree_unflatten(treedef, leaves)

    params = tree(1)
    state = tx.init(params)
    outputs = []
    for step in range(_OPTIMIZER_STEPS):
        updates, state = tx.update(tree(3 + 2 * step), state, params)
        params = optax.apply_updates(params, updates)
        outputs += [np.asarray(u) for u in jax.tree_util.tree_leaves(updates)]
    return outputs


def _ancestors(key: str, root: str):
    """The keys enclosing ``key``, nearest first, down to ``root`` itself."""
    parts = key.split(".")
    for i in range(len(parts) - 1, root.count("."), -1):
        yield ".".join(parts[:i])


def _natural(key: str):
    return [int(p) if p.isdigit() else p for p in key.split(".")]


def _is_value_text(text: str) -> bool:
    """A number, a boolean, None, a string or a dtype: not a function's or
    a type's name."""
    if text in ("None", "True", "False") or text[:1] in ("'", '"'):
        return True
    try:
        complex(text.replace(" ", ""))
        return True
    except ValueError:
        pass
    try:
        np.dtype(text)
        return True
    except TypeError:
        return False


def _negated(text: str) -> str:
    try:
        return repr(-float(text))
    except ValueError:
        return f"-({text})"


# ---------------------------------------------------------- results kept


def _memoized(kind: str, parts: tuple, compute, encode, decode):
    """``compute()``, or what it returned in an earlier process for the same
    ``parts`` (:func:`nkserde.result_cache.memoized`, keyed by
    :func:`nkserde.checkpoint.content_key.key`: nothing is kept where a
    part cannot be described by its content, or without a cache)."""
    key = content_key.key(f"fingerprint {VERSION} {kind}", *parts) if result_cache.directory() is not None else None
    return result_cache.memoized(key, compute, encode, decode)


def _invalid():
    raise ValueError("not a stored result")


def _encode_numbers(a: np.ndarray | None):
    return None if a is None else [a.real.tolist(), a.imag.tolist()]


def _decode_numbers(stored) -> np.ndarray | None:
    if stored is None:
        return None
    real, imag = (np.asarray(part, dtype=float) for part in stored)
    if real.ndim != 1 or real.shape != imag.shape:
        raise ValueError("not a stored result")
    out = np.empty(real.shape, complex)
    out.real, out.imag = real, imag
    return out


# ------------------------------------------------------------------ operators


def _describe_operator(fp: dict, key: str, op) -> None:
    """The action of ``op`` (decisive); readable: its kind, the numbers it is
    built from and its terms."""
    fp[key] = _operator_text(op)
    fp.update({f"{key}{READABLE}{label}": text for label, text in _operator_readable(op).items()})
    if _uncountable(op):  # what version 2 wrote for it (upgrade() compares a version 2 file with it)
        fp[f"{key}{READABLE}{_VERSION_2}"] = _operator_text(op, version=2)


def _operator_text(op, version: int = VERSION) -> str:
    digest = _action_digest(op, version)
    if digest is None:  # not a discrete operator: describe its fields
        parts: dict[str, str] = {}
        for name, child in _children(op):
            _flatten(parts, name, child, depth=1, seen={id(op)})
        digest = _sha(repr(sorted(parts.items())).encode())
    # not the class: a numba LocalOperator and its jax version are one operator
    return f"{_CONTENT}{digest}"


def _uncountable(op) -> bool:
    """Whether ``op``'s space is finite but too large for NetKet to count
    (``n_states`` raises: 64 spins and more)."""
    hilbert = getattr(op, "hilbert", None)
    if not isinstance(hilbert, nk.hilbert.DiscreteHilbert) or not hilbert.is_finite:
        return False
    try:
        hilbert.n_states
    except Exception:  # noqa: BLE001  (too large to be indexed)
        return True
    return False


def _action_digest(op, version: int = VERSION) -> str | None:
    """:func:`_computed_action_digest`, kept in the result cache."""
    return _memoized(
        "action",
        (op, version, _MAX_STATES, _SAMPLED_STATES),
        lambda: _computed_action_digest(op, version),
        lambda digest: digest,
        lambda stored: stored if stored is None or isinstance(stored, str) else _invalid(),
    )


def _computed_action_digest(op, version: int = VERSION) -> str | None:
    """A hash of how ``op`` acts on basis states (all of them, or 64 drawn
    with a fixed key: the same states under every supported NetKet and JAX),
    or None if it cannot be computed (continuous spaces, operators without
    ``get_conn_padded``; ``version=2``: spaces too large to count, which
    version 2 described by the operator's fields)."""
    try:
        hilbert = op.hilbert
        if not isinstance(hilbert, nk.hilbert.DiscreteHilbert) or not hasattr(op, "get_conn_padded"):
            return None
        if _uncountable(op):
            if version == 2:
                return None
            states = np.asarray(hilbert.random_state(jax.random.PRNGKey(0), _SAMPLED_STATES))
        elif hilbert.is_finite and hilbert.n_states <= _MAX_STATES:
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


# properties of operators that are derived, not what the operator is built from
# (and those that are other operators or the terms, listed as terms)
_DERIVED_OPERATOR_PROPERTIES = {
    "H",
    "T",
    "hilbert",
    "dtype",
    "is_hermitian",
    "max_conn_size",
    "mel_cutoff",
    "n_operators",
    "size",
    "constant",
    "operators",
    "acting_on",
    "weights",
    "edges",
}


def _operator_readable(op) -> dict[str, str]:
    """``{"kind": "Ising", "h": "1.0", "J": "1.0", "edges": "8 edges ..."}``,
    ``{"kind": "LocalOperator", "term X0": "-1.0", "term Z0 Z1": "1.0", ...}``:
    the class (numba and jax versions alike), the numbers among its public
    properties, its graph's edges, and its terms (see :func:`_terms`)."""
    kind = re.sub(r"(Jax|Numba)$", "", type(op).__name__)
    readable = {_KIND: kind}
    for name in dir(type(op)):
        if name.startswith("_") or name in _DERIVED_OPERATOR_PROPERTIES:
            continue
        if not isinstance(getattr(type(op), name, None), property):
            continue
        try:
            value = getattr(op, name)
        except Exception:  # noqa: BLE001  (a property that needs more than the operator)
            continue
        if isinstance(value, (bool, int, float, complex, np.number)) or (
            isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0
        ):
            readable[name] = _number(complex(np.asarray(value)))
    edges = getattr(op, "edges", None)  # a NetKet Hamiltonian on a graph (Ising, BoseHubbard)
    if isinstance(edges, (np.ndarray, jax.Array)) and np.ndim(edges) == 2:
        listed = sorted(tuple(sorted(map(int, e))) for e in np.asarray(edges))
        shown = " ".join(f"{a}-{b}" for a, b in listed)
        readable["edges"] = shown if len(listed) <= 16 else f"{len(listed)} edges {_sha(repr(listed).encode())}"
    try:
        terms = _terms(op)
    except Exception:  # noqa: BLE001  (no terms to list: the numbers and the kind say what they can)
        terms = {}
    readable.update({f"term {label}": text for label, text in terms.items()})
    return readable


def _terms(op) -> dict[str, str]:
    """The terms of a LocalOperator or PauliStrings: Pauli strings with
    their coefficients on spin-1/2 and qubit sites (``"X0": "-1.0"``,
    ``"Z0 Z1": "1.0"``: the same however the operator was written), else the
    nonzero matrix elements of the terms on each set of sites; none for an
    operator of more terms than ``_MAX_TERMS`` or Pauli strings than
    ``_TERM_BUDGET``."""
    if hasattr(op, "weights") and hasattr(op, "operators") and not hasattr(op, "acting_on"):  # PauliStrings
        strings = [str(s) for s in np.asarray(op.operators).ravel()]
        if len(strings) > _MAX_TERMS:
            return {}
        summed: dict[str, complex] = {}
        for string, weight in zip(strings, np.asarray(op.weights).ravel()):
            label = " ".join(f"{c}{i}" for i, c in enumerate(string) if c != "I") or "constant"
            summed[label] = summed.get(label, 0) + complex(weight)
        return _coefficients(summed)
    # not converted to a LocalOperator (numba compiles for seconds): an Ising
    # is said by its h, J and edges
    local = op
    if not hasattr(local, "acting_on") or not hasattr(local, "operators"):
        return {}
    acting_on = [tuple(int(s) for s in sites) for sites in local.acting_on]
    if len(acting_on) > _MAX_TERMS or sum(4 ** min(len(s), _MAX_TERM_SITES + 1) for s in acting_on) > _TERM_BUDGET:
        return {}
    matrices = [_dense(m) for m in local.operators]
    paulis = _pauli_matrices(op.hilbert)
    summed = {}
    constant = complex(np.asarray(local.constant))
    generic: dict[tuple, np.ndarray] = {}
    for sites, matrix in zip(acting_on, matrices):
        if paulis is not None and len(sites) <= _MAX_TERM_SITES:
            for letters, coefficient in _pauli_decomposition(matrix, paulis, len(sites)).items():
                label = " ".join(f"{c}{s}" for c, s in zip(letters, sites) if c != "I") or "constant"
                summed[label] = summed.get(label, 0) + coefficient
        else:
            generic[sites] = generic.get(sites, 0) + matrix
    if constant:
        summed["constant"] = summed.get("constant", 0) + constant
    readable = _coefficients(summed)
    for sites, matrix in sorted(generic.items()):
        rows, cols = np.nonzero(np.abs(matrix) > 1e-12)
        if len(rows) <= 8:
            text = ", ".join(f"[{r},{c}] {_number(matrix[r, c])}" for r, c in zip(rows, cols))
        else:
            text = f"{len(rows)} elements {_sha(np.round(matrix, 10).tobytes())}"
        readable[f"on {list(sites)}"] = text
    return readable


def _coefficients(summed: dict[str, complex]) -> dict[str, str]:
    return {label: _number(c) for label, c in sorted(summed.items()) if abs(c) > 1e-12}


def _dense(matrix) -> np.ndarray:
    if isinstance(matrix, np.ndarray) and matrix.dtype == object and matrix.shape == ():
        matrix = matrix.item()  # NetKet 3.23 keeps scipy sparse matrices in 0-d object arrays
    if hasattr(matrix, "toarray"):
        matrix = matrix.toarray()
    return np.asarray(matrix, dtype=complex)


def _pauli_matrices(hilbert) -> dict[str, np.ndarray] | None:
    """I, X, Y, Z in the basis of one site of ``hilbert`` (its order of local
    states: NetKet's Spin lists spin up, +1, first), or None unless every
    site is a spin 1/2 or a qubit."""
    if isinstance(hilbert, nk.hilbert.Spin) and hilbert.local_size == 2:
        up_first = float(np.asarray(hilbert.states_at_index(0))[0]) > 0
    elif isinstance(hilbert, nk.hilbert.Qubit):
        up_first = True  # |0>, the +1 eigenstate of Z, first
    else:
        return None
    z = np.diag([1.0, -1.0]) if up_first else np.diag([-1.0, 1.0])
    y = np.array([[0, -1j], [1j, 0]]) if up_first else np.array([[0, 1j], [-1j, 0]])
    return {
        "I": np.eye(2, dtype=complex),
        "X": np.array([[0, 1], [1, 0]], dtype=complex),
        "Y": y,
        "Z": z.astype(complex),
    }


def _pauli_decomposition(matrix: np.ndarray, paulis: dict[str, np.ndarray], n: int) -> dict[str, complex]:
    """``matrix`` (on ``n`` sites, the first the most significant) as a sum
    of Pauli strings: ``{"XZ": c, ...}``, c = tr(P M) / 2^n."""
    found = {}
    for letters in _strings(n):
        p = functools.reduce(np.kron, (paulis[c] for c in letters))
        c = np.trace(p.conj().T @ matrix) / 2**n
        if abs(c) > 1e-12:
            found[letters] = complex(c)
    return found


@functools.lru_cache(maxsize=None)
def _strings(n: int) -> tuple[str, ...]:
    return tuple("".join(s) for s in _product("IXYZ", n))


def _product(letters: str, n: int):
    if n == 0:
        yield ()
        return
    for rest in _product(letters, n - 1):
        for c in letters:
            yield (*rest, c)
