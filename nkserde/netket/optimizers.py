"""Optimizer states and preconditioners.

optax states are NamedTuples (``ScaleByAdamState``, ``EmptyState``,
``InjectHyperparamsState``, ``MultiStepsState``, ``MaskedState``...) or tuples
and dicts of them (``chain``, ``named_chain``); nkserde's NamedTuple rule
stores each under ``optax.<ClassName>`` with its own field names, so every
optax state and NetKet's ``nk.optimizer`` wrappers (which return optax
transformations) are covered without a registration per class.
"""

from __future__ import annotations

import netket as nk

from .. import registry


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
    doc="warm_start: parameter-shaped pytree or None, the last solution used as the "
    "initial guess of the iterative solver (solver_restart=False)",
)
