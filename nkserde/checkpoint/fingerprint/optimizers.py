"""optax optimizers by their effect: three updates of a fixed parameter
tree under fixed gradients, with the values of the schedules they hold at
fixed steps, quantised and hashed. Readable: their kind (``adam``,
``sgd``) and the hyperparameters they close over (``learning_rate``,
``b1``, a schedule's ``init_value``). An optimizer's ``init`` is left out:
its state comes from the checkpoint."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import functions
from .entries import DEFAULT, KIND, LOCAL_FUNCTION, quantized_digest
from .functions import PROBE_STEPS, call, one_argument
from .parts import MAX_DEPTH, children

_OPTIMIZER_STEPS = 3

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


def labels(fp: dict, root: str) -> dict[str, str]:
    """Readable hyperparameters of an optax optimizer from the version 2
    description of its update function under ``root``: ``{"kind": "adam",
    "learning_rate": "0.01", "b1": "0.9", ...}``. Each number is labelled by
    the transformation it configures (``scale_by_adam`` -> ``adam``) and its
    name; ``scale``'s step size is the (negative) learning rate."""
    keys = sorted((k for k in fp if k == root or k.startswith(f"{root}.")), key=_numeric_order)
    children_keys = {k.rsplit(".", 1)[0] for k in keys if k != root}
    components: list[str] = []
    numbers: list[tuple[str, str, str]] = []  # (component, name, text)
    for k in keys:
        relative = k[len(root) :].split(".")
        if "init" in relative:  # the optimizer's state is the checkpoint's
            continue
        m = LOCAL_FUNCTION.match(fp[k])
        if m and m.group("function") in ("update_fn", "update") and m.group("factory") not in components:
            components.append(m.group("factory"))
        name = relative[-1]
        if k in children_keys or DEFAULT.match(name) or not _is_value_text(fp[k]):
            continue
        owner = next((LOCAL_FUNCTION.match(fp[a]) for a in _ancestors(k, root) if LOCAL_FUNCTION.match(fp[a])), None)
        numbers.append((owner.group("factory") if owner else "", name, fp[k]))
    kinds = [c for c in components if c not in _STRUCTURAL]
    kind = "+".join(dict.fromkeys(c.removeprefix("scale_by_") for c in kinds)) or "sgd"
    found = {KIND: kind}
    for component, name, text in numbers:
        if component == "scale" and name == "step_size":
            found["learning_rate"] = _negated(text)
        elif component == "scale_by_learning_rate" and name == "m":
            continue  # the sign of the step
        else:
            short = component.removeprefix("scale_by_")
            found[name if short == kind or not short else f"{short}.{name}"] = text
    return found


def _ancestors(key: str, root: str):
    """The keys enclosing ``key``, nearest first, down to ``root`` itself."""
    parts = key.split(".")
    for i in range(len(parts) - 1, root.count("."), -1):
        yield ".".join(parts[:i])


def _numeric_order(key: str) -> list:
    """A sort key of a dotted key: its numeric parts compare as numbers
    (``update.2`` before ``update.10``)."""
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
    """``-0.01`` for ``0.01``; ``-(text)`` for a text that is not a number."""
    try:
        return repr(-float(text))
    except ValueError:
        return f"-({text})"


def schedules(update) -> dict[str, object]:
    """The schedules an optimizer closes over (functions of the step),
    labelled as :func:`labels` labels numbers: ``learning_rate`` for the
    one optax's aliases take."""
    found: dict[str, object] = {}

    def walk(value, name, owner, depth, seen):
        if depth > MAX_DEPTH or id(value) in seen:
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
        m = LOCAL_FUNCTION.match(value.__qualname__)
        factory = m.group("factory") if m else ""
        transformation = m is not None and m.group("function") in ("update_fn", "update", "init_fn", "init")
        if not transformation and factory != "scale_by_learning_rate":
            if one_argument(value) and call(value, PROBE_STEPS) is not None:
                plain = owner in ("scale_by_learning_rate", "") or name == "learning_rate"
                label = name if plain else f"{owner.removeprefix('scale_by_')}.{name}"
                found.setdefault(label, value)
                return
        for child_name, child in children(value):
            walk(child, child_name, factory or owner, depth + 1, seen)

    walk(update, "update", "", 0, set())
    return found


def effect(tx, parameters, schedule_functions) -> str | None:
    """A hash of ``tx``'s updates of a fixed parameter tree under fixed
    gradients (three steps) and of its schedules at the probe's steps; None
    if it cannot update one (then its description decides)."""
    dtype = jnp.float64
    if parameters is not None:
        leaves = jax.tree_util.tree_leaves(parameters)
        if leaves:
            dtype = jnp.result_type(*leaves)
    try:
        outputs = _updates(tx, {"a": (3,), "b": (2, 3)}, dtype)
    except Exception:  # noqa: BLE001  (a transformation, or the script's mask or labels, on a tree not the run's)
        outputs = None
    if outputs is None and parameters is not None:
        # a masked or multi_transform optimizer needs the run's structure
        shapes = jax.tree_util.tree_map(lambda x: tuple(min(d, 3) for d in np.shape(x)), parameters)
        try:
            outputs = _updates(tx, shapes, dtype)
        except (TypeError, ValueError):
            # an update that needs more than (updates, state, params): lbfgs's
            # value and grad (TypeError); shapes it refuses (JAX's ValueError)
            outputs = None
    if outputs is None:
        return None
    return quantized_digest(outputs + [call(f, PROBE_STEPS) for f in schedule_functions])


def _updates(tx, shapes, dtype) -> list[np.ndarray]:
    """The updates of three steps of ``tx`` (as complex numbers); kept in
    the result cache (an optimizer that raises is tried again)."""
    return functions.memoized(
        "optimizer updates",
        (tx, shapes, dtype),
        lambda: [np.ravel(np.asarray(u)).astype(complex) for u in computed_updates(tx, shapes, dtype)],
        lambda arrays: [functions.encode_numbers(a) for a in arrays],
        lambda stored: [functions.decode_numbers(a) for a in stored],
    )


def computed_updates(tx, shapes, dtype) -> list[np.ndarray]:
    """The updates of three steps of ``tx`` from a parameter tree of
    ``shapes`` (a pytree of shape tuples) and ``dtype``, under fixed
    gradients: magnitudes from 1 to 1e-8 (an eps shows), both signs;
    computed on the probes' device."""
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

    with functions.on_probe_device():
        params = tree(1)
        state = tx.init(params)
        outputs = []
        for step in range(_OPTIMIZER_STEPS):
            updates, state = tx.update(tree(3 + 2 * step), state, params)
            params = optax.apply_updates(params, updates)
            outputs += [np.asarray(u) for u in jax.tree_util.tree_leaves(updates)]
    return outputs
