"""Sampler states of every sampler in ``netket.sampler``.

Field names are nkserde's; see docs/schema.md. Arrays keep NetKet's dtypes
(chains are usually int8, counters int64, keys uint32 raw key data).
"""

from __future__ import annotations

import copy
import dataclasses

import jax
import netket as nk
import numpy as np
from netket.sampler.autoreg import ARDirectSamplerState
from netket.sampler.exact import ExactSamplerState
from netket.sampler.metropolis_numpy import MetropolisNumpySamplerState
from netket.sampler.parallel_tempering import ParallelTemperingSamplerState

from ..types import registry
from ..errors import TemplateMismatchError, format_path
from ..types.placement import Resizable, per_process
from . import internals
from ._common import register_attributes


_METROPOLIS = {
    "chains": "σ",  # [n_chains, n_sites] configurations
    # [n_chains] machine_pow * log|psi(chains)|: the next Metropolis step's
    # acceptance test reads it, so a state continued without reset() needs it
    # (NetKet marks it serialize=False and recomputes it only in reset())
    "log_prob": "log_prob",
    "rng": "rng",  # PRNG key of the chains
    "n_steps": "n_steps_proc",  # moves since the last reset
    "n_accepted": "n_accepted_proc",  # [n_chains] accepted moves since the last reset
    "rule_state": "rule_state",  # the transition rule's own state (None for most rules)
}


# Fields whose leading axis is the chain axis: a load into a sampler with a
# different number of chains keeps what fits and fills new chains from the
# saved ones (with a warning) instead of refusing (see placement.Resizable).
_PER_CHAIN = {
    "chains",
    "log_prob",
    "n_accepted",
    "betas",
    "beta_0_index",
    "beta_position",
    "beta_diffusion",
    "n_accepted_per_beta",
}


def _chains_resizable(state: dict) -> dict:
    return {
        k: Resizable(v, announce=k == "chains") if k in _PER_CHAIN and v is not None else v for k, v in state.items()
    }


def _register_metropolis(cls, name, fields, *, doc, subclasses=False):
    # version 2: log_prob is always stored (see _metropolis_v1)
    return register_attributes(
        cls, name, fields, immutable=True, subclasses=subclasses, doc=doc, adjust=_chains_resizable, version=2
    )


_register_metropolis(
    nk.sampler.MetropolisSamplerState,
    "netket.sampler.MetropolisSamplerState",
    _METROPOLIS,
    subclasses=True,
    doc=(
        "(Fields with a chain axis, here and for parallel tempering, may be loaded into a sampler "
        "with another number of chains: the first ones are kept, new ones repeat the saved ones in "
        "order, with a warning.) `chains`: [n_chains, N] (dtype of the Hilbert space, usually int8 "
        "or float64); `log_prob`: float[n_chains], `machine_pow * log|psi(chains)|`, read by the "
        "next acceptance test (NetKet itself does not store it and recomputes it only on reset); "
        "`rng`: key; `n_steps`: int64; `n_accepted`: int64[n_chains]; `rule_state`: the rule's "
        "state (None for the rules shipped with NetKet 3.23; a list of the sub-rules' states for "
        "MultipleRules)"
    ),
)

_PARALLEL_TEMPERING = dict(
    _METROPOLIS,
    betas="beta",  # [n_chains, n_replicas] inverse temperature of each replica
    beta_0_index="beta_0_index",  # [n_chains] replica at beta = 1
    beta_position="beta_position",  # [n_chains] diffusion statistics of the physical replica
    beta_diffusion="beta_diffusion",
    n_exchange_steps="exchange_steps",
    n_accepted_per_beta="n_accepted_per_beta",  # [n_chains, n_replicas]
)
_register_metropolis(
    ParallelTemperingSamplerState,
    "netket.sampler.ParallelTemperingSamplerState",
    _PARALLEL_TEMPERING,
    doc=(
        "Metropolis fields (chains and log_prob over n_chains x n_replicas) plus `betas`: "
        "float[n_chains, n_replicas]; `beta_0_index`: int[n_chains]; `beta_position`, "
        "`beta_diffusion`: float[n_chains]; `n_exchange_steps`: int; `n_accepted_per_beta`: "
        "int[n_chains, n_replicas]"
    ),
)


def _metropolis_v1(fields, context):
    """Version 1 files written before nkserde stored ``log_prob`` (before
    commit 9f5299c) lack it. It is ``machine_pow * Re log psi(chains)`` of the
    model at the restored parameters: recomputed from the enclosing
    variational state, exactly as NetKet's ``sampler.reset`` does."""
    if fields.get("log_prob") is not None:
        return fields
    state = context.enclosing(nk.vqs.MCState)
    if state is None or "parameters" not in state.restored:
        raise context.needs(
            "the variational state that holds this sampler state (its model and "
            "parameters give log_prob): load the MCState or driver, with a template"
        )
    template, restored = state.template, state.restored
    variables = {"params": restored["parameters"], **restored["model_state"]}
    chains = fields.get("chains")
    n_sites = template.hilbert.size
    # the chains come from the file: they must be configurations of the
    # template's space before the model sees them
    if (
        not isinstance(chains, np.ndarray)
        or chains.dtype.kind not in "biuf"
        or chains.ndim < 2
        or chains.shape[-1] != n_sites
    ):
        found = f"{chains.dtype}{list(chains.shape)}" if isinstance(chains, np.ndarray) else type(chains).__name__
        raise TemplateMismatchError(
            f"{format_path(context.path + ('chains',))}: file has {found}, the template's sampler needs "
            f"configurations of {n_sites} sites ([n_chains, {n_sites}])"
        )
    log_psi = jax.jit(internals.log_psi_function(template))(variables, chains.reshape(-1, chains.shape[-1]))
    log_prob = np.asarray(template.sampler.machine_pow * np.asarray(log_psi).real)
    fields["log_prob"] = log_prob.reshape(chains.shape[:-1])
    return fields


for _name in ("netket.sampler.MetropolisSamplerState", "netket.sampler.ParallelTemperingSamplerState"):
    registry.migration(_name, from_version=1)(_metropolis_v1)


register_attributes(
    ExactSamplerState, "netket.sampler.ExactSamplerState", {"rng": "rng"}, immutable=True, doc='`rng`: key'
)

register_attributes(
    ARDirectSamplerState,
    "netket.sampler.ARDirectSamplerState",
    {"rng": "key"},
    immutable=True,
    doc="`rng`: key",
)

_NUMPY = {
    "chains": "σ",
    "log_prob": "log_prob",
    "rng": "rng",
    "n_steps": "n_steps_proc",
    "n_accepted": "n_accepted_proc",
    "rule_state": "rule_state",
}


def _numpy_state_to_state(state):
    # A numpy sampler runs its own chains in each process: all of its state
    # is process-local. A new process beyond the saved ones continues the
    # chains of saved process r % P with its generator jumped (see
    # _jumped); so do its counters.
    return {key: per_process(getattr(state, attr), _jumped if key == "rng" else _same) for key, attr in _NUMPY.items()}


def _same(value, copy):
    return value


def _jumped(generator: np.random.Generator, copy: int) -> np.random.Generator:
    """A generator ``copy`` jumps ahead of ``generator``: a stream that does
    not overlap it (numpy's ``jumped`` advances by 2**127 draws for PCG64)."""
    return np.random.Generator(generator.bit_generator.jumped(copy))


def _numpy_state_from_state(template, fields):
    new = dataclasses.replace(template, **{attr: fields[key] for key, attr in _NUMPY.items()})
    # NetKet's numpy samplers write the chains, their log_prob and the
    # rule's scratch arrays in place: the new state gets arrays of its own
    # (an in-memory state dict holds the saved state's; scratch buffers
    # would be the template's)
    new.σ, new.log_prob = np.array(new.σ), np.array(new.log_prob)
    new.rule_state = copy.deepcopy(new.rule_state)
    new.σ1 = np.copy(template.σ1)
    new.log_prob_corr = np.copy(template.log_prob_corr)
    return new


registry.register(
    MetropolisNumpySamplerState,
    name="netket.sampler.MetropolisNumpySamplerState",
    version=1,
    to_state=_numpy_state_to_state,
    from_state=_numpy_state_from_state,
    fields=tuple(_NUMPY),
    doc=(
        "`chains`; `log_prob`: float[n_chains]; `rng`: numpy.random.Generator; `n_steps`, "
        "`n_accepted`: int; `rule_state`. Every field is per process (`@per_process`): a numpy "
        "sampler runs its own chains in each process. A new process beyond the saved ones continues"
        " saved process `r % P`'s chains with its generator `jumped(r // P)`."
    ),
)


# numpy's random generators (numpy samplers, user code) -------------------------


def _generator_to_state(gen: np.random.Generator):
    state = gen.bit_generator.state
    return {"bit_generator": state["bit_generator"], "state": state}


def _generator_from_state(template: np.random.Generator, fields):
    kind = type(template.bit_generator)
    if fields["bit_generator"] != kind.__name__:
        raise TemplateMismatchError(
            f"numpy bit generator {fields['bit_generator']} in file, {kind.__name__} in template"
        )
    bit_generator = kind()
    bit_generator.state = fields["state"]
    return np.random.Generator(bit_generator)


registry.register(
    np.random.Generator,
    name="numpy.random.Generator",
    version=1,
    to_state=_generator_to_state,
    from_state=_generator_from_state,
    fields=("bit_generator", "state"),
    doc="`bit_generator`: str (e.g. `PCG64`); `state`: numpy's `bit_generator.state` dict",
)
