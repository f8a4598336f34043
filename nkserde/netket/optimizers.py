"""Optimizer states and preconditioners.

optax states are NamedTuples (``ScaleByAdamState``, ``EmptyState``,
``InjectHyperparamsState``, ``MultiStepsState``, ``MaskedState``...) or tuples
and dicts of them (``chain``, ``named_chain``); nkserde's NamedTuple rule
stores each under ``optax.<ClassName>`` with its own field names, so every
optax state and NetKet's ``nk.optimizer`` wrappers (which return optax
transformations) are covered without a registration per class.

Some optax states are provisional until the first update (``optax.monitor``
returns an empty dict of measurements from ``init``; ``inject_hyperparams``
over parameters of mixed dtypes casts them at the first update): the
drivers declare their ``optimizer_state`` provisional, with
:func:`after_one_update` as the template's next step (docs/schema.md,
"Provisional state").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import netket as nk

from ..types import registry


def after_one_update(optimizer, state, params):
    """The optimizer state ``state`` after one ``optimizer.update`` on zero
    gradients shaped like ``params``, as a NetKet driver's step calls it:
    the structure, dtypes and weak types a run's state has after one more
    step (its numbers are not used). Run op by op, as ``optimizer.init``
    built the template's state (nothing to compile; the arrays are placed
    as the template's). ``state`` is not changed (optax is functional)."""
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return optimizer.update(zeros, state, params)[1]


def _sr_to_state(sr):
    return {"warm_start": sr.x0}


def _sr_from_state(template, fields):
    return template.replace(x0=fields["warm_start"])


registry.register(
    nk.optimizer.SR,
    name="netket.optimizer.SR",
    version=1,
    to_state=_sr_to_state,
    from_state=_sr_from_state,
    subclasses=True,
    fields=("warm_start",),
    doc=(
        "`warm_start`: parameter pytree or None, the last solution, used as the initial guess of "
        "iterative solvers when `solver_restart=False`"
    ),
)
