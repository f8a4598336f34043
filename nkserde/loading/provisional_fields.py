"""Provisional fields (``Registration.provisional``): a field whose
structure the template's first steps may still change (an optax state
over mixed dtypes, a sampler's cached samples). The file's value is tried
against the template's own, then against the value each of the
template's first steps gives the field, the first it fits taken.

:func:`value_to_load_into` chooses that value; the load walk (walk.py)
hands it the check of a fit, its own (``LoadContext.check_only``), and
loads the file's value into what it returns."""

from __future__ import annotations

import jax
import numpy as np

from ..errors import CorruptFileError, FileReadError
from ..saving.snapshot import SCALARS


# At most this many steps of a template make a provisional field final
# (optax 0.2.8: two, for prodigy and dadapt_adamw over mixed dtypes).
MAX_FIRST_STEPS = 8


def value_to_load_into(next_step, template, value, fits):
    """The value a provisional field (``Registration.provisional``) of
    ``template`` is loaded into: the template's own ``value`` where the
    file's value fits it as stored (``fits(candidate)``: the walk's check,
    which reads nothing, see ``LoadContext.check_only``; nothing of the
    template is stored); else the value that the template's first steps
    give the field, step by step, the first that fits. None fits (a step
    no longer changes the structure, as JAX sees it, or cannot be taken,
    or the steps ran out): ``value``, as for any field, so that the load
    refuses (or, lenient, reports) the difference as it does any
    other."""
    if fits(value):
        return value
    step = value
    for _ in range(MAX_FIRST_STEPS):
        try:
            before, step = step, next_step(template, step)
            fitting = fits(step)
        except (CorruptFileError, FileReadError):
            raise  # the file's bytes, whatever the template
        except Exception:  # noqa: BLE001  (the template's own code cannot take the step: it stays as built)
            break
        if fitting:
            return step
        if _same_jax_structure(before, step):
            break  # final: no later step takes the file's structure either
    return value


def _same_jax_structure(a, b) -> bool:
    """Whether ``a`` and ``b`` agree in what a step may change of a value,
    as JAX sees it: the tree structure (NamedTuple classes, dict keys,
    None) and each leaf's type, or an array's shape and dtype. False where
    JAX cannot see inside a leaf (an object that is not a pytree) or
    cannot compare the structures."""
    (leaves_a, tree_a), (leaves_b, tree_b) = jax.tree_util.tree_flatten(a), jax.tree_util.tree_flatten(b)
    described = []
    for leaf in leaves_a + leaves_b:
        if isinstance(leaf, (np.ndarray, np.generic, jax.Array)):
            described.append((tuple(leaf.shape), leaf.dtype))  # a PRNG key's dtype is JAX's, not numpy's
        elif isinstance(leaf, SCALARS):
            described.append(type(leaf))
        else:
            return False
    try:
        return bool(tree_a == tree_b) and described[: len(leaves_a)] == described[len(leaves_a) :]
    except Exception:  # noqa: BLE001  (node data's own __eq__, an array in a static field: not the same)
        return False
