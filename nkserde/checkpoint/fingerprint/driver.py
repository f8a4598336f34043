"""The fingerprint of a driver: what the user chose, entry by entry (the
driver's kind, its operator, the variational state's space, model,
sampler and sample counts, parameter shapes, optimizer, preconditioner,
integrator, an Infidelity target's configuration).

Not part of it: the number of steps, loggers, progress bars, chunk sizes,
the process, ``PYTHONHASHSEED``, the host, the platform (CPU, GPU, TPU: the
probes compute on the host's CPU; without a CPU backend on the accelerator,
and two platforms' fingerprints compare what they say in words), the
number of processes (sample and chain counts are global in NetKet), the
releases of NetKet, JAX, flax and optax."""

from __future__ import annotations

import jax
import netket as nk
import numpy as np
import optax

from ...netket import internals
from . import functions
from .entries import PROBES_ON, VERSION, without_addresses
from .parts import class_name
from .walk import describe_operator, describe_optimizer, flatten


def fingerprint(driver) -> dict[str, str]:
    """The run's fingerprint: ``{key: text}``, equal for the same script in
    any process on any machine under any supported install, different when
    the physics, the model, the sampling or the optimization differ
    (docs/guides/resume.md, "The same script? fingerprint")."""
    fp: dict[str, str] = {"fingerprint_version": str(VERSION), "driver": class_name(driver)}
    if functions.probe_device() is None:  # its hashes compare with those of the same arithmetic only
        fp[PROBES_ON] = jax.default_backend()
    operator = _operator_of(driver)
    if operator is not None:
        describe_operator(fp, "operator", operator)
    _state_entries(fp, "", driver.state)
    settings = {
        k: v
        for k, v in vars(driver).items()
        if k not in internals.DRIVER_RUN_STATE
        and k not in internals.DRIVER_OPERATOR_ATTRIBUTES
        and k not in internals.DRIVER_DERIVED_SETTINGS
    }
    for name, value in sorted(settings.items()):
        if name == internals.DRIVER_INTEGRATOR_ATTRIBUTE:
            flatten(fp, "integrator", internals.integrator_settings(value))
        elif isinstance(value, optax.GradientTransformation):
            describe_optimizer(fp, name.lstrip("_"), value, driver.state.parameters)
        else:
            flatten(fp, name.lstrip("_"), value)
    target = getattr(driver, "target_state", None)
    if target is not None:
        # its configuration only: its parameters are state the checkpoint
        # restores (NetKet's Infidelity example draws them from a random seed)
        _state_entries(fp, "target.", target)
    return fp


def _operator_of(driver):
    """The driver's operator (a TDVP generator's at the driver's time), or None."""
    for attr in internals.DRIVER_OPERATOR_ATTRIBUTES:
        op = getattr(driver, attr, None)
        if op is None:
            continue
        if callable(op) and not isinstance(op, nk.operator.AbstractOperator):
            # TDVP keeps a generator t -> operator (a lambda for a constant one)
            try:
                op = op(driver.t)
            except Exception:  # noqa: BLE001  (the script's own function of t, whatever it raises: described as a function)
                pass
        return op
    return None


def _state_entries(fp: dict, prefix: str, vs) -> None:
    """A variational state's configuration under ``prefix``: its space,
    model, sampler and sample counts, parameter shapes (not its values:
    the checkpoint restores them)."""
    fp[f"{prefix}variational_state"] = class_name(vs)
    fp[f"{prefix}hilbert"] = without_addresses(vs.hilbert)
    flatten(fp, f"{prefix}model", vs.model, probe=functions.ACTIVATION)
    sampler = getattr(vs, "sampler", None)
    if sampler is not None:
        flatten(fp, f"{prefix}sampler", sampler)
        fp[f"{prefix}n_samples"] = str(vs.n_samples)
        fp[f"{prefix}n_chains"] = str(sampler.n_chains)
        fp[f"{prefix}n_discard_per_chain"] = str(vs.n_discard_per_chain)
    leaves = jax.tree_util.tree_leaves_with_path(vs.parameters)
    fp[f"{prefix}parameters"] = "; ".join(
        f"{jax.tree_util.keystr(p)}: {np.dtype(x.dtype).name}{list(np.shape(x))}" for p, x in leaves
    )
