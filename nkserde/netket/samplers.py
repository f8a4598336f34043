"""Sampler states of every sampler in ``netket.sampler``.

Field names are nkserde's; see docs/schema.md. Arrays keep NetKet's dtypes
(chains are usually int8, counters int64, keys uint32 raw key data).
"""

from __future__ import annotations

import dataclasses

import netket as nk
import numpy as np
from netket.sampler.autoreg import ARDirectSamplerState
from netket.sampler.exact import ExactSamplerState
from netket.sampler.metropolis_numpy import MetropolisNumpySamplerState
from netket.sampler.parallel_tempering import ParallelTemperingSamplerState

from .. import registry
from ..parts import Resizable, per_process
from ._common import register_attributes
from ..errors import TemplateMismatchError


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
# saved ones (with a warning) instead of refusing (see parts.Resizable).
_PER_CHAIN = {"chains", "log_prob", "n_accepted", "betas", "beta_0_index", "beta_position",
              "beta_diffusion", "n_accepted_per_beta"}


def _chains_resizable(state: dict) -> dict:
    return {k: Resizable(v, announce=k == "chains") if k in _PER_CHAIN and v is not None else v
            for k, v in state.items()}


def _register_metropolis(cls, name, fields, *, doc, subclasses=False):
    return register_attributes(cls, name, fields, immutable=True, subclasses=subclasses, doc=doc,
                               adjust=_chains_resizable)


_register_metropolis(
    nk.sampler.MetropolisSamplerState, "netket.sampler.MetropolisSamplerState", _METROPOLIS,
    subclasses=True,
    doc="chains: [n_chains, N]; log_prob: float[n_chains]; rng: PRNG key data; n_steps: int64 scalar; "
        "n_accepted: int64[n_chains]; rule_state: rule-specific or None")

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
    ParallelTemperingSamplerState, "netket.sampler.ParallelTemperingSamplerState",
    _PARALLEL_TEMPERING,
    doc="Metropolis fields (chains: [n_chains * n_replicas, N], log_prob: [n_chains * n_replicas]) "
        "plus betas, beta_0_index, beta_position, beta_diffusion, n_exchange_steps, n_accepted_per_beta")

register_attributes(
    ExactSamplerState, "netket.sampler.ExactSamplerState", {"rng": "rng"}, immutable=True,
    doc="rng: PRNG key data")

register_attributes(
    ARDirectSamplerState, "netket.sampler.ARDirectSamplerState", {"rng": "key"}, immutable=True,
    doc="rng: PRNG key data")

_NUMPY = {
    "chains": "σ", "log_prob": "log_prob", "rng": "rng",
    "n_steps": "n_steps_proc", "n_accepted": "n_accepted_proc", "rule_state": "rule_state",
}


def _numpy_state_to_state(state):
    # A numpy sampler runs its own chains in each process: all of its state
    # is process-local. A new process beyond the saved ones continues the
    # chains of saved process r % P with its generator jumped (see
    # _jumped); so do its counters.
    return {key: per_process(getattr(state, attr), _jumped if key == "rng" else _same)
            for key, attr in _NUMPY.items()}


def _same(value, copy):
    return value


def _jumped(generator: np.random.Generator, copy: int) -> np.random.Generator:
    """A generator ``copy`` jumps ahead of ``generator``: a stream that does
    not overlap it (numpy's ``jumped`` advances by 2**127 draws for PCG64)."""
    return np.random.Generator(generator.bit_generator.jumped(copy))


def _numpy_state_from_state(template, fields):
    new = dataclasses.replace(template, **{attr: fields[key] for key, attr in _NUMPY.items()})
    # scratch buffers must not be shared with the template
    new.σ1 = np.copy(template.σ1)
    new.log_prob_corr = np.copy(template.log_prob_corr)
    return new


registry.register(
    MetropolisNumpySamplerState, name="netket.sampler.MetropolisNumpySamplerState", version=1,
    to_state=_numpy_state_to_state, from_state=_numpy_state_from_state,
    doc="chains: [n_chains, N]; log_prob: [n_chains]; rng: numpy.random.Generator; "
        "n_steps, n_accepted: int; rule_state")


# numpy's random generators (numpy samplers, user code) -------------------------


def _generator_to_state(gen: np.random.Generator):
    state = gen.bit_generator.state
    return {"bit_generator": state["bit_generator"], "state": state}


def _generator_from_state(template: np.random.Generator, fields):
    kind = type(template.bit_generator)
    if fields["bit_generator"] != kind.__name__:
        raise TemplateMismatchError(
            f"numpy bit generator {fields['bit_generator']} in file, {kind.__name__} in template")
    bit_generator = kind()
    bit_generator.state = fields["state"]
    return np.random.Generator(bit_generator)


registry.register(
    np.random.Generator, name="numpy.random.Generator", version=1,
    to_state=_generator_to_state, from_state=_generator_from_state,
    doc="bit_generator: str (e.g. PCG64); state: numpy's bit_generator.state dict")
