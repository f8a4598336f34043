"""ODE integrators of ``netket.experimental.dynamics`` (Euler, Heun,
Midpoint, RK4, and the adaptive RK12/RK23/RK45).

Every integrator is one ``Integrator`` object whose only changing data is its
``IntegratorState``; the method and its parameters (dt bounds, tolerances)
come from the template, as the user builds it.
"""

from __future__ import annotations

from netket.experimental.dynamics import Integrator

from ..types import registry

_STATE = {
    "t": "t",  # time, a Kahan-compensated sum {value, compensator}
    "dt": "dt",  # current step size (adapted by error control)
    "y": "y",  # parameters being integrated (pytree)
    "step_no": "step_no",  # accepted steps
    "step_no_total": "step_no_total",  # attempted steps, accepted or rejected
    "last_norm": "last_norm",  # norm of the last update (error control), or None
    "last_scaled_error": "last_scaled_error",  # last scaled error estimate, or None
    "solver_state": "solver_state",  # the solver's own state
    "flags": "flags",  # IntegratorFlags of the last step
}


def _integrator_to_state(integrator: Integrator) -> dict:
    state = integrator._state
    return {key: getattr(state, attr) for key, attr in _STATE.items()}


def _integrator_from_state(template: Integrator, fields: dict) -> Integrator:
    values = {attr: fields[key] for key, attr in _STATE.items()}
    if not template.use_adaptive:
        # a fixed step size is configuration: the template's
        values["dt"] = template._state.dt
    return template.replace(_state=template._state.replace(**values))


registry.register(
    Integrator,
    name="netket.experimental.dynamics.Integrator",
    version=1,
    to_state=_integrator_to_state,
    from_state=_integrator_from_state,
    subclasses=True,
    fields=tuple(_STATE),
    doc=(
        "`t`: Kahan sum {value, compensator}; `dt`: current step (adaptive integrators: restored; "
        "fixed-step ones keep the template's); `y`: the integrated parameters; `step_no`, "
        "`step_no_total`: accepted / attempted steps; `last_norm`, `last_scaled_error`: error "
        "control or None; `solver_state`; `flags`: int"
    ),
)
