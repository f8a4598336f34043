"""Every use of a private NetKet name outside the registrations, each behind
one small function or named table (a registration names the fields of the
type it stores: that is its schema, in docs/schema.md).

Each says what it relies on and since which release; nkserde supports NetKet
3.21 on. ``tests/test_internals.py`` fails when a private NetKet or JAX name
is used anywhere but here, ``nkserde/jax_internals.py`` and the
registrations. When a NetKet release breaks one of these, this is the file
to change.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import netket as nk

# ------------------------------------------------------------------ pytrees


def pytree_fields(cls) -> tuple[str, ...] | None:
    """Every field name of a NetKet Pytree class, in order (the keys of
    ``_pytree__fields``, 3.21 to 3.23), or None for any other class."""
    fields = getattr(cls, "_pytree__fields", None)
    if not isinstance(fields, Mapping):
        return None
    # "_pytree__node_fields" is NetKet's bookkeeping, not a field (never among
    # a class's fields in 3.21 to 3.23; left out wherever it would show up)
    return tuple(f for f in fields if f != "_pytree__node_fields")


def serialized_fields(cls) -> tuple[str, ...] | None:
    """The fields of a NetKet Pytree class that NetKet marks serializable
    (:func:`pytree_fields` but ``_pytree__noserialize_fields``, 3.21 to
    3.23), in order, or None for any other class."""
    fields = pytree_fields(cls)
    if fields is None:
        return None
    skip = set(getattr(cls, "_pytree__noserialize_fields", ()))
    return tuple(f for f in fields if f not in skip)


# ------------------------------------------------------------------ drivers

# Driver attributes that are state or bookkeeping of a run, not settings
# (every driver's own names, 3.21 to 3.23): the fingerprint leaves them out.
DRIVER_RUN_STATE = frozenset(
    {
        "_variational_state",
        "_optimizer_state",
        "_step_count",
        "_loss_stats",
        "_loss_stats_online",
        "_old_updates",
        "_dp",
        "_dw",
        "_loss_grad",
        "_loss_forces",
        "_last_qgt",
        "info",
        "_timer",
        "_start_step",
        "_target_step",
        "_step_attempt",
        "_t_start",
        "_t_end",
        "_tstops",
        "_stop_time",
        "_max_dt",
        "_is_last_step",
        "_loss_name",
        "_unravel_params_fn",
        "_pytree__node_fields",
        "_chunk_size_bwd",
        "target_state",
    }
)
# Where a driver keeps what it minimizes or evolves: VMC/VMC_SR ``_ham``,
# SteadyState ``_lind``, TDVP ``_generator``, Infidelity ``_operator``
# (3.21 to 3.23); ``operator`` is public in newer drivers.
DRIVER_OPERATOR_ATTRIBUTES = ("_ham", "_lind", "_generator", "_operator", "operator")
# Driver settings NetKet derives from the others when the user leaves them
# out, and that do not change the mathematics of a step: VMC_SR's and
# Infidelity_SR's ``_use_ntk`` (SR or its kernel form, minSR: the same
# update) and ``_on_the_fly`` (how the QGT is applied: memory), 3.21 to 3.23.
DRIVER_DERIVED_SETTINGS = frozenset({"_use_ntk", "_on_the_fly"})
# The attribute of a driver's variational state (every driver, 3.21 to 3.23)
DRIVER_STATE_ATTRIBUTE = "_variational_state"
# The driver attribute the fingerprint describes by a view of its own
DRIVER_INTEGRATOR_ATTRIBUTE = "_integrator"  # TDVP and the dynamics drivers

# ------------------------------------------------------------- optimizers

# Fields of a preconditioner that are results of the last step, not
# settings: ``AbstractLinearPreconditioner``'s ``_lhs`` (the QGT of the last
# step), ``x0`` (the last solution, a warm start) and ``info`` (the solver's
# report), 3.21 to 3.23; VMC_SR keeps its solver's report in ``info`` too.
PER_STEP_FIELDS = frozenset({"_lhs", "x0", "info"})


def set_step_count(driver, count: int) -> None:
    """Set the step counter; ``step_count`` is a read-only property over
    ``_step_count`` (every driver, 3.21 to 3.23)."""
    driver._step_count = count


def integrator_settings(integrator) -> dict:
    """What configures an ODE integrator: its tableau (``_solver``) and its
    ``_parameters`` (dt, tolerances), 3.21 to 3.23."""
    return {"solver": integrator._solver, "parameters": integrator._parameters, "adaptive": integrator.use_adaptive}


# --------------------------------------------------------- variational state

# An MCState's chunk sizes: memory, not physics (``_chunk_size_bwd``, 3.21 to 3.23)
CHUNK_SIZE_FIELDS = ("chunk_size", "_chunk_size_bwd")
# Model fields NetKet computes from the others when the user leaves them out:
# ``GCNN_Irrep.irreps``, the irreducible representations of the symmetry
# group (``irrep_matrices()``, numerical linear algebra whose last bits
# differ between numpy releases), 3.21 to 3.23
MODEL_DERIVED_FIELDS = ("irreps",)


def log_psi_function(vs):
    """``(variables, σ) -> log ψ(σ)`` of an MCState, its model's apply
    function with the sampler's machine_pow left to the caller
    (``MCState._apply_fun``, 3.0 to 3.23)."""
    return vs._apply_fun


def set_sampler_state(vs, sampler_state) -> None:
    """Set the sampler state, and the state NetKet resamples from
    (``_sampler_state_previous``, 3.21 to 3.23): the next sampling continues
    these chains, whatever the state did before."""
    vs.sampler_state = sampler_state
    vs._sampler_state_previous = sampler_state


# ------------------------------------------------------------------- loggers


def output_prefix(logger) -> str | None:
    """A JsonLog's output prefix (``_prefix``, 3.0 to 3.23); None for other
    loggers."""
    prefix = getattr(logger, "_prefix", None)
    return prefix if isinstance(prefix, str) else None


# ------------------------------------------------------------------ run loop

try:  # the stop of NetKet's generic dynamics drivers at their final time (3.22 on)
    from netket._src.callbacks.stop_at_time import _StopAtTime

    END_TIME_STOPS: tuple = (_StopAtTime,)
except ImportError:
    END_TIME_STOPS = ()


def running_callback_list():
    """The ``CallbackList`` of the running ``driver.run`` call, found on the
    call stack as the ``self`` of one of its frames (NetKet hands a callback
    only the driver; ``netket._src.callbacks.callback_list``, 3.21 to 3.23),
    or None outside a run."""
    from netket._src.callbacks.callback_list import CallbackList

    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, CallbackList):
            return owner
        frame = frame.f_back
    return None


def running_n_iter(driver):
    """The ``n_iter`` argument of the running ``driver.run`` frame (the
    argument's name, 3.21 to 3.23), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run" and frame.f_locals.get("self") is driver:
            n_iter = frame.f_locals.get("n_iter")
            if isinstance(n_iter, int) and not isinstance(n_iter, bool):
                return n_iter
        frame = frame.f_back
    return None


def target_step(driver):
    """Where the running ``run()`` call ends (``_target_step``, set before
    ``on_run_start`` from 3.23; None before)."""
    return getattr(driver, "_target_step", None)


def set_target_step(driver, step: int) -> None:
    """Record where the run ends as NetKet 3.23 does (``_target_step``)."""
    object.__setattr__(driver, "_target_step", step)


def end_time(driver):
    """TDVP's final time of the running ``run()`` call (``_t_end``, 3.21 to
    3.23), None for other drivers."""
    return getattr(driver, "_t_end", None)


def raising_callback(stop: BaseException):
    """The innermost callback on the traceback of the StopRun ``stop``: the
    ``self`` of the frame of its method that raised (NetKet raises a
    callback's StopRun from inside the callback's own method, 3.21 to
    3.23), or None."""
    raiser, tb = None, stop.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nk.callbacks.AbstractCallback):
            raiser = owner
        tb = tb.tb_next
    return raiser


# ------------------------------------------------------------------ operators


def wrap_jax_local_operator_packing(wrap) -> bool:
    """Replaces the function that a jax ``LocalOperator`` (also
    ``Heisenberg``, ``Ising`` as LocalOperators) calls, the first time it is
    used, to pack its terms into arrays with numba by ``wrap(original)``:
    ``pack_internals`` of ``netket.operator._local_operator.compile_helpers``,
    which ``pack_internals_jax`` of the same module calls by its global name
    (3.21 to 3.23; the numba LocalOperator imports its own reference, left
    as it is). Once per process; False where NetKet has no such function."""
    try:
        from netket.operator._local_operator import compile_helpers
    except ImportError:
        return False
    original = getattr(compile_helpers, "pack_internals", None)
    if original is None or not callable(getattr(compile_helpers, "pack_internals_jax", None)):
        return False
    if getattr(original, "_nkserde_wrapped", False):
        return True
    wrapped = wrap(original)
    wrapped._nkserde_wrapped = True
    compile_helpers.pack_internals = wrapped
    return True
