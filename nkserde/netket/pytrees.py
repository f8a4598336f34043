"""NetKet's internal state objects, under stable names.

Objects a run changes that live inside drivers and samplers: the online loss
statistics of VMC_SR, the Kahan-compensated time of the ODE integrators, the
solver state of the Runge-Kutta methods, the rule states of the numpy
samplers, the identity preconditioner. Each is stored under a name of
nkserde's choosing (never the Python module path, which NetKet changes
between releases: files written by nkserde before 0.2 used module paths,
kept as aliases) with the fields listed in docs/schema.md.

A NetKet pytree without a registration (one added by a later NetKet) is
stored by the fallback rule at the end: the fields NetKet marks
serializable, under ``netket.pytree.<ClassName>``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from netket.utils.struct import Pytree

from ..types import registry
from . import internals
from ..types.registry import module_path
from ._common import attributes, find, refusing_to_drop_run_state, replace_record


def _register_record(cls, name, fields: tuple, *, doc, from_fields=None, old_name=None, from_state=replace_record):
    """``cls`` (a NetKet Pytree or dataclass) stored as the attributes
    ``fields``, loaded with ``replace`` (or ``from_state``). ``old_name``:
    what nkserde 0.1 wrote (the module path under NetKet 3.23, the only
    NetKet it supported; default: the class's module path, where NetKet
    never moved it)."""
    if cls is None:
        return
    registry.register(
        cls,
        name=name,
        version=1,
        to_state=attributes(fields),
        from_state=from_state,
        fields=fields,
        aliases=(old_name or module_path(cls),),
        doc=doc,
        from_fields=from_fields,
    )


_register_record(
    find("netket.utils.summation.KahanSum", "netket.utils.KahanSum"),
    "netket.utils.KahanSum",
    ("value", "compensator"),
    doc="`value`, `compensator`: float scalars",
)

_register_record(
    find("netket.experimental.dynamics._solver.AbstractSolverState"),
    "netket.experimental.dynamics.SolverState",
    (),
    doc="none (the Runge-Kutta methods keep no state between steps)",
)

_register_record(
    find("netket.optimizer.preconditioner.IdentityPreconditioner"),
    "netket.optimizer.IdentityPreconditioner",
    (),
    doc="none",
)

for _cls_name, _fields in (
    ("LocalRuleState", ("local_states",)),
    ("HamiltonianRuleState", ("sections",)),
    ("CustomRuleState", ("sections", "rand_op_n", "weight_cumsum")),
):
    _module = {
        "LocalRuleState": "local_numpy",
        "HamiltonianRuleState": "hamiltonian_numpy",
        "CustomRuleState": "custom_numpy",
    }[_cls_name]
    _register_record(
        find(f"netket.sampler.rules.{_module}.{_cls_name}"),
        f"netket.sampler.rules.{_cls_name}",
        _fields,
        doc=", ".join(f"`{f}`" for f in _fields) + ": numpy arrays (a numpy sampler's scratch data)",
    )


# VMC_SR's online loss statistics (NetKet >= 3.22) ------------------------------

_ONLINE_STATS_FIELDS = (
    "_decay",
    "_chain_count",
    "_chain_mean",
    "_chain_M2",
    "_cross_sum",
    "_m1_sum",
    "_m2_sum",
    "_pair_count",
    "_chain_buf",
    "_n_samples_total",
    "_buf_len",
)
_OnlineStats = find("netket.stats.OnlineStats", "netket._src.stats.online_stats.accumulator.OnlineStats")


def _online_stats_from_fields(fields):
    # NetKet 3.22 creates the statistics at the first step: a fresh driver's
    # template holds None, so the object is rebuilt from its fields.
    # (max_lag, not stored, is the width of the lag buffer)
    n_chains, max_lag = np.shape(fields["_chain_buf"])
    empty = _OnlineStats(n_chains, jnp.asarray(fields["_chain_mean"]).dtype, max_lag=max_lag)
    return _as_updated(empty.replace(**fields))


def _online_stats_from_state(template, restored: dict):
    return _as_updated(replace_record(template, restored))


def _as_updated(stats):
    """``stats`` with ``_decay`` and ``_n_samples_total`` as NetKet's update
    returns them once it has counted samples: weak-typed JAX scalars (a
    fresh OnlineStats, the template, holds Python numbers). The first step
    after a resume then calls the jitted ``online_statistics`` with the
    arguments of the run's later steps, so JAX reuses that compilation
    (cached) instead of compiling a third variant on every resume (0.43 s
    of XLA for the GCNN of benchmarks/restart.py). The values are the
    file's; ``jax.device_put`` of a Python number keeps it weak-typed
    without compiling anything."""
    total, decay = stats._n_samples_total, stats._decay
    if total is None or int(total) == 0:
        return stats  # as fresh: NetKet's next step starts the statistics again
    # placed as the restored arrays beside them (NetKet's mesh, replicated)
    like = getattr(stats._buf_len, "sharding", None)
    return stats.replace(
        _n_samples_total=jax.device_put(int(total), like),
        _decay=None if decay is None else jax.device_put(float(decay), like),
    )


_register_record(
    _OnlineStats,
    "netket.stats.OnlineStats",
    _ONLINE_STATS_FIELDS,
    from_fields=_online_stats_from_fields,
    from_state=_online_stats_from_state,
    old_name="netket._src.stats.online_stats.accumulator.OnlineStats",
    doc=(
        "`_decay`: float or None; `_chain_count`, `_chain_mean`, `_chain_M2`: [n_chains]; "
        "`_cross_sum`, `_m1_sum`, `_m2_sum`, `_pair_count`: [n_chains, max_lag + 1]; `_chain_buf`: "
        "[n_chains, max_lag]; `_n_samples_total`: int; `_buf_len`: int32. Rebuilt from the file "
        "alone where the template has none yet (NetKet 3.22 creates it at the first step)"
    ),
)


# Monte Carlo statistics (a driver's loss of the last step) -----------------------

_register_record(
    find("netket.stats.Stats"),
    "netket.stats.Stats",
    ("mean", "error_of_mean", "variance", "tau_corr", "R_hat", "tau_corr_max"),
    from_fields=lambda fields: find("netket.stats.Stats")(**fields),
    doc=(
        "`mean`, `error_of_mean`, `variance`, `tau_corr`, `R_hat`, `tau_corr_max`: scalars. Rebuilt"
        " from the file where the template has none"
    ),
)


# Fallback ---------------------------------------------------------------------


def _netket_pytree_rule(cls):
    if isinstance(cls, type) and issubclass(cls, Pytree):
        fields, every = internals.serialized_fields(cls), internals.pytree_fields(cls)
    elif dataclasses.is_dataclass(cls) and cls.__module__.startswith("netket"):
        fields = tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("pytree_node", True))
        every = tuple(f.name for f in dataclasses.fields(cls))
    else:
        return None
    top = cls.__module__.split(".")[0]
    name = f"{top}.pytree.{cls.__qualname__}" if top == "netket" else module_path(cls)
    return registry.Registration(
        name,
        1,
        refusing_to_drop_run_state(cls, fields, tuple(f for f in every if f not in fields)),
        replace_record,
        aliases=(module_path(cls),),
        doc="opaque pytree: the fields its library marks serializable: " + ", ".join(fields),
    )


registry.add_rule(_netket_pytree_rule)
