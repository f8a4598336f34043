"""Drivers of ``netket.driver`` and ``netket.experimental.driver``.

A driver is stored as its variational state plus what it accumulates while
running: optimizer state, step count, momentum buffer, loss statistics,
solver warm start, integrator. Its hyperparameters and operators come from
the template.
"""

from __future__ import annotations

import netket as nk
import netket.experimental as nkx

from ._common import register_attributes

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

register_attributes(
    nk.driver.Infidelity_SR, "netket.driver.Infidelity_SR",
    dict(_OPTIMIZATION, target_state="target_state"), subclasses=True,
    doc="state; optimizer_state; step: int; momentum: pytree or None; target_state")

_DYNAMICS = dict(_COMMON, integrator="_integrator", last_update="_dw")

register_attributes(
    nkx.TDVP, "netket.experimental.TDVP", _DYNAMICS, subclasses=True,
    doc="state; step: int; integrator: Integrator (time, dt, error control); "
        "last_update: parameter-shaped pytree, the linear solver's warm start")

register_attributes(
    nkx.driver.TDVPSchmitt, "netket.experimental.TDVPSchmitt", _DYNAMICS, subclasses=True,
    doc="as TDVP")
