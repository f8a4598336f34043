"""Drivers of ``netket.driver`` and ``netket.experimental.driver``.

A driver is stored as its variational state plus what it accumulates while
running: optimizer state, step count, momentum buffer, loss statistics,
solver warm start, integrator. Its hyperparameters and operators come from
the template.
"""

from __future__ import annotations

import copy
import functools
import warnings

import netket as nk
import netket.experimental as nkx

from .._warnings import outside
from ..types import registry
from ._common import find, register_attributes
from .optimizers import after_one_update


def _without_cached_samples(vs):
    # a copy without the cache: the MCState schema then stores the current
    # sampler state
    if isinstance(vs, nk.vqs.MCState) and vs._samples is not None:
        vs = copy.copy(vs)
        vs._samples = None
    return vs


_STATES = ("state", "target_state")


def _as_next_step_sees_them(fields: dict) -> dict:
    # Every driver step starts by resetting its variational states (VMC's
    # reset_step, TDVP's ODE function, Infidelity_SR's target), so the next
    # samples come from the *current* sampler state. Store that one: the
    # MCState schema stores, while samples are cached (as after NetKet 3.22's
    # dynamics loop), the state they were drawn from, which a resumed step
    # would draw them again from.
    return {k: _without_cached_samples(v) if k in _STATES else v for k, v in fields.items()}


def _next_optimizer_state(driver, state):
    """The optimizer state ``state`` of the template ``driver`` after its
    next step."""
    return after_one_update(driver.optimizer, state, driver.state.parameters)


def _register_driver(cls, name, fields, **kwargs):
    # optax states can change dtype during a run (inject_hyperparams with
    # parameters of mixed dtypes): a fresh template cannot know the new one.
    # Some change their structure at the first updates (optax.monitor fills
    # an empty dict): the optimizer state is provisional, the template's
    # first updates tell what it becomes (docs/schema.md).
    # The momentum buffer is an attribute of every driver only from NetKet 3.22.
    optional = ("momentum",) * ("momentum" in fields) + kwargs.pop("optional", ())
    provisional = {"optimizer_state": _next_optimizer_state} if "optimizer_state" in fields else None
    return register_attributes(
        cls,
        name,
        fields,
        dtype_from_file=("optimizer_state",),
        optional=optional,
        adjust=_as_next_step_sees_them,
        provisional=provisional,
        **kwargs,
    )


_COMMON = {
    "state": "_variational_state",
    "step": "_step_count",
}
_OPTIMIZATION = dict(_COMMON, optimizer_state="_optimizer_state", momentum="_old_updates")

_register_driver(
    nk.driver.VMC,
    "netket.driver.VMC",
    dict(_OPTIMIZATION, preconditioner="_preconditioner"),
    subclasses=True,
    doc=(
        "`state`; `step`: int; `optimizer_state`; `momentum`: pytree or None (optional: NetKet >= "
        "3.22); `preconditioner`: `netket.optimizer.SR` or the identity preconditioner"
    ),
)

_register_driver(
    nk.driver.SteadyState,
    "netket.driver.SteadyState",
    dict(_OPTIMIZATION, preconditioner="_preconditioner"),
    subclasses=True,
    doc="as VMC (state: MCMixedState)",
)

_register_driver(
    nk.driver.VMC_SR,
    "netket.driver.VMC_SR",
    dict(_OPTIMIZATION, loss_statistics="_loss_stats_online"),
    subclasses=True,
    # NetKet 3.21 has no online statistics; 3.22 creates them at the first step
    optional=("loss_statistics",),
    doc=(
        "`state`; `step`; `optimizer_state`; `momentum`: pytree or None; `loss_statistics`: "
        "`netket.stats.OnlineStats`, the online MCMC statistics of the loss (optional: NetKet >= "
        "3.22; diagnostics only, they do not enter the optimization)"
    ),
)

_INFIDELITY = dict(_OPTIMIZATION, target_state="target_state")


_register_driver(
    # public in netket.driver from NetKet 3.22, experimental before
    find("netket.driver.Infidelity_SR", "netket.experimental.driver.Infidelity_SR"),
    "netket.driver.Infidelity_SR",
    _INFIDELITY,
    subclasses=True,
    doc="`state`; `step`; `optimizer_state`; `momentum`; `target_state`",
)

# Quantum state reconstruction. Every training batch is drawn from a numpy
# Generator of the driver's own (which NetKet marks serialize=False); the
# control variates are a parameter-shaped expectation and the parameters it
# was computed at, None until the first update.
_QSR = find("netket.experimental.QSR")
_QSR_FIELDS = dict(
    _OPTIMIZATION,
    preconditioner="_preconditioner",
    batch_generator="_rng",
    control_variate_expectation="_control_variate_expectation",
    control_variate_parameters="_control_variate_params",
)
if _QSR is not None:
    _register_driver(
        _QSR,
        "netket.experimental.QSR",
        _QSR_FIELDS,
        subclasses=True,
        version=2,
        # version 1: what the fallback rule stored until QSR had a registration
        aliases=("netket.pytree.QSR",),
        optional=("preconditioner", "batch_generator"),
        doc=(
            "`state`; `step`; `optimizer_state`; `momentum` (optional); `preconditioner` (optional) as "
            "VMC's; `batch_generator`: `numpy.random.Generator`, draws every training batch (optional: "
            "absent in version 1 files); `control_variate_expectation`, `control_variate_parameters`: "
            "parameter-shaped pytrees, or None before the first control-variate update"
        ),
    )


_QSR_V1_NAMES = {
    "_variational_state": "state",
    "_step_count": "step",
    "_optimizer_state": "optimizer_state",
    "_control_variate_expectation": "control_variate_expectation",
    "_control_variate_params": "control_variate_parameters",
}


@registry.migration("netket.experimental.QSR", from_version=1)
def _qsr_v1(fields):
    """Version 1 is the fallback's layout (NetKet's attribute names, no
    batch generator): a file of it loads, but the template's generator
    draws the next batches, so the continued run is not the interrupted
    one (warned)."""
    warnings.warn(
        "nkserde: a QSR driver saved before nkserde stored its batch generator: it continues "
        "with the template's generator, so the next training batches differ from the "
        "interrupted run's",
        stacklevel=outside(),
    )
    return {_QSR_V1_NAMES.get(k, k): v for k, v in fields.items()}


# version 2: loss_stats, the generator's statistics of the last step, which
# NetKet 3.22's dynamics loop logs at the start of the next run() call
_DYNAMICS = dict(_COMMON, integrator="_integrator", last_update="_dw", loss_stats="_loss_stats")


def _rebind_integrator(template, new):
    """The integrator's ODE function (and a "qgt" error norm) are partials
    bound to the driver and state that built them: the template's. Bind
    them to the loaded driver, or its steps would compute through (and
    update) the template."""

    def rebind(fn):
        if not isinstance(fn, functools.partial):
            return fn
        args = tuple(new.state if a is template.state else new if a is template else a for a in fn.args)
        return functools.partial(fn.func, *args, **fn.keywords)

    integrator = new._integrator
    if integrator is not None:
        new._integrator = integrator.replace(f=rebind(integrator.f), norm=rebind(integrator.norm))
    return new


_register_driver(
    nkx.TDVP,
    "netket.experimental.TDVP",
    _DYNAMICS,
    subclasses=True,
    finish=_rebind_integrator,
    version=2,
    doc=(
        "`state`; `step`: int; `integrator`; `last_update`: parameter-shaped pytree (warm start of "
        "the linear solver); `loss_stats`: `netket.stats.Stats` of the generator at the last step, "
        "or None"
    ),
)

_register_driver(
    nkx.driver.TDVPSchmitt,
    "netket.experimental.TDVPSchmitt",
    _DYNAMICS,
    subclasses=True,
    finish=_rebind_integrator,
    version=2,
    doc="as TDVP",
)


def _dynamics_v1(fields):
    # version 1 did not store the last step's statistics: a resumed run
    # recomputes them at its first step (NetKet 3.22 logs none at its start)
    fields["loss_stats"] = None
    return fields


for _name in ("netket.experimental.TDVP", "netket.experimental.TDVPSchmitt"):
    registry.migration(_name, from_version=1)(_dynamics_v1)


# Every driver optimizes or evolves a variational state: a non-strict load of
# one kind into another (VMC -> VMC_SR, a ground state -> TDVP) takes that
# state; the rest (optimizer state, step, integrator) is the new driver's own.
registry.transferable(
    "driver",
    (
        "netket.driver.VMC",
        "netket.driver.VMC_SR",
        "netket.driver.Infidelity_SR",
        "netket.experimental.TDVP",
        "netket.experimental.TDVPSchmitt",
    ),
    fields=("state",),
)
