"""Drivers of ``netket.driver`` and ``netket.experimental.driver``.

A driver is stored as its variational state plus what it accumulates while
running: optimizer state, step count, momentum buffer, loss statistics,
solver warm start, integrator. Its hyperparameters and operators come from
the template.
"""

from __future__ import annotations

import copy

import netket as nk
import netket.experimental as nkx

from ._common import register_attributes as _register_attributes


def register_attributes(*args, **kwargs):
    # optax states can change dtype during a run (inject_hyperparams with
    # parameters of mixed dtypes): a fresh template cannot know the new one
    return _register_attributes(*args, dtype_from_file=("optimizer_state",), **kwargs)


_COMMON = {
    "state": "_variational_state",
    "step": "_step_count",
}
_OPTIMIZATION = dict(_COMMON, optimizer_state="_optimizer_state", momentum="_old_updates")

register_attributes(
    nk.driver.VMC, "netket.driver.VMC",
    dict(_OPTIMIZATION, preconditioner="_preconditioner"), subclasses=True,
    doc="state; optimizer_state: optax state; step: int; momentum: pytree or None; "
        "preconditioner: SR warm start (or the identity preconditioner)")

register_attributes(
    nk.driver.SteadyState, "netket.driver.SteadyState",
    dict(_OPTIMIZATION, preconditioner="_preconditioner"), subclasses=True,
    doc="as VMC, for the Lindbladian steady state (state: MCMixedState)")

register_attributes(
    nk.driver.VMC_SR, "netket.driver.VMC_SR",
    dict(_OPTIMIZATION, loss_statistics="_loss_stats_online"), subclasses=True,
    doc="state; optimizer_state; step: int; momentum: pytree or None (SPRING / "
        "momentum buffer); loss_statistics: online MCMC statistics of the loss")

_INFIDELITY = dict(_OPTIMIZATION, target_state="target_state")


def _without_cached_samples(vs):
    # Infidelity_SR resets the target state before every step, so its next
    # samples are drawn from its *current* sampler state. The MCState schema
    # stores the sampler state the cached samples were drawn from (so that a
    # loaded state draws them again): drop the cache, on a copy, so the current
    # sampler state is stored instead.
    if isinstance(vs, nk.vqs.MCState) and vs._samples is not None:
        vs = copy.copy(vs)
        vs._samples = None
    return vs


register_attributes(
    nk.driver.Infidelity_SR, "netket.driver.Infidelity_SR", _INFIDELITY, subclasses=True,
    adjust=lambda f: {**f, "target_state": _without_cached_samples(f["target_state"])},
    doc="state; optimizer_state; step: int; momentum: pytree or None; target_state: "
        "the target's variational state, with the sampler state its next samples are "
        "drawn from (the driver resamples the target at every step)")

_DYNAMICS = dict(_COMMON, integrator="_integrator", last_update="_dw")

register_attributes(
    nkx.TDVP, "netket.experimental.TDVP", _DYNAMICS, subclasses=True,
    doc="state; step: int; integrator: Integrator (time, dt, error control); "
        "last_update: parameter-shaped pytree, the linear solver's warm start")

register_attributes(
    nkx.driver.TDVPSchmitt, "netket.experimental.TDVPSchmitt", _DYNAMICS, subclasses=True,
    doc="as TDVP")
