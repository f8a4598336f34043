"""Variational states: MCState, MCMixedState, FullSumState,
DeterminantVariationalState.

Schema (docs/schema.md): the model's variables are split into
``parameters`` (the flax ``params`` collection: what the optimizer changes)
and ``model_state`` (every other collection: batch statistics, frozen
parameters, caches), so a change of NetKet's own attribute layout does not
change the file.

NetKet 3.23 has no full-summation *mixed* state; when it gains one it gets a
registration here.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import jax.numpy as jnp
import netket as nk
import numpy as np

from .._warnings import outside
from ..types import registry
from ..errors import TemplateMismatchError
from ..types.placement import PerProcess, per_process
from . import internals
from ._common import find


def _split_variables(variables) -> tuple[dict, dict]:
    variables = dict(variables)
    params = variables.pop("params", {})
    return params, variables


def _join_variables(parameters, model_state) -> dict:
    return {"params": parameters, **model_state}


# MCState ----------------------------------------------------------------------

_MC_FIELDS = (
    "parameters",
    "model_state",
    "sampler_state",
    "sampler_seed",
    "n_samples",
    "n_discard_per_chain",
    "chunk_size",
    "cached_samples",
)


def _mc_to_state(vs: nk.vqs.MCState) -> dict:
    parameters, model_state = _split_variables(vs.variables)
    # As NetKet does: while samples are cached, store the sampler state they
    # were drawn from, so a loaded state draws the very same samples again.
    # A sampler that changes its state in place (NetKet's numpy samplers)
    # leaves no such state (`_sampler_state_previous is sampler_state`):
    # then the state after the draw is stored with the cached batch itself.
    sampler_state = vs._sampler_state_previous if vs._samples is not None else vs.sampler_state
    redrawable = vs._samples is None or sampler_state is not vs.sampler_state
    return {
        "parameters": parameters,
        "model_state": model_state,
        "sampler_state": sampler_state,
        "sampler_seed": vs._sampler_seed,
        "n_samples": vs.n_samples,
        "n_discard_per_chain": vs.n_discard_per_chain,
        "chunk_size": vs.chunk_size,
        # [n_chains, chain_length, N] of this process's chains (a numpy
        # sampler runs its own chains in each process)
        "cached_samples": None if redrawable else per_process(np.asarray(vs._samples)),
    }


def _mc_from_state(template: nk.vqs.MCState, f: dict) -> nk.vqs.MCState:
    # State from the file; configuration (n_samples, n_discard_per_chain,
    # chunk_size, sampler, model) from the template: the stored settings
    # only say what the run that wrote the file used.
    new = copy.copy(template)
    new.reset()
    new.variables = _join_variables(f["parameters"], f["model_state"])
    sampler_state = _usable_chains(new, template, f["sampler_state"])
    internals.set_sampler_state(new, sampler_state)
    new._sampler_seed = f["sampler_seed"]
    # the cached batch was drawn by the stored chains: a re-drawn chain
    # (see _usable_chains) makes it the samples of another state
    if sampler_state is f["sampler_state"]:
        new._samples = _cached_samples(new, f["cached_samples"])
    # (the sampler state is also the state the cache was drawn from, as
    # when saved: a save of `new` stores the same again)
    return new


def _cached_samples(vs, samples):
    """The file's cached batch (``samples``: None, or [n_chains, chain_length,
    N], drawn by a sampler that changes its state in place) as the cached
    samples of ``vs``, into which the state after the batch was loaded.
    TemplateMismatchError if it is not a batch of the configurations that
    ``vs``'s sampler draws (its dtype, its number of chains in this process,
    N sites)."""
    if isinstance(samples, PerProcess):  # an in-memory state dict: this process's
        samples = samples.value
    if samples is None:
        return None
    sampler = vs.sampler
    n_chains, n_sites, dtype = sampler.n_chains_per_rank, sampler.hilbert.size, np.dtype(sampler.dtype)
    batch = isinstance(samples, np.ndarray) and samples.ndim == 3 and samples.shape[::2] == (n_chains, n_sites)
    if not batch or samples.dtype != dtype:
        found = f"{samples.dtype}{list(samples.shape)}" if isinstance(samples, np.ndarray) else type(samples).__name__
        raise TemplateMismatchError(
            f"cached_samples: file has {found}, the template's sampler draws "
            f"{dtype}[{n_chains}, chain_length, {n_sites}]"
        )
    return samples


def _valid(hilbert, chains):
    """Which rows of ``chains`` ([..., N]) are states of ``hilbert``: every
    site's value among its local states, and the constraint (total_sz=0,
    a fixed particle number) met. Never enumerates the space."""
    xp = np if isinstance(chains, np.ndarray) else jnp
    subspaces = getattr(hilbert, "subspaces", None)
    if subspaces:  # a tensor product: each factor (maybe constrained) on its own sites
        ok, start = None, 0
        for sub in subspaces:
            part = _valid(sub, chains[..., start : start + sub.size])
            ok, start = part if ok is None else ok & part, start + sub.size
        return ok
    local = getattr(hilbert, "local_states", None)
    if local is not None:
        ok = xp.isin(chains, xp.asarray(local, dtype=chains.dtype)).all(axis=-1)
    else:
        ok = xp.stack(
            [
                xp.isin(chains[..., i], xp.asarray(hilbert.states_at_index(i), dtype=chains.dtype))
                for i in range(hilbert.size)
            ],
            axis=-1,
        ).all(axis=-1)
    if getattr(hilbert, "constrained", False) and hasattr(hilbert, "constraint"):
        flat = chains.reshape(-1, chains.shape[-1])
        ok = ok & xp.asarray(hilbert.constraint(jnp.asarray(flat))).reshape(ok.shape)
    return ok


def _usable_chains(new, template, state):
    """The loaded sampler state with every chain that is not a state of the
    template's Hilbert space (another constraint, other local states)
    replaced by the template's fresh chain of the same row, and the
    sampler reset on the result (log_prob, counters), with a warning that
    names how many: invalid configurations are never used silently."""
    chains = getattr(state, "σ", None)
    fresh = getattr(template.sampler_state, "σ", None)
    hilbert = template.sampler.hilbert
    if chains is None or fresh is None or not isinstance(hilbert, nk.hilbert.DiscreteHilbert):
        return state
    if chains.shape != fresh.shape or chains.shape[-1] != hilbert.size:
        return state  # a layout this check does not know; the sampler will complain
    # on the host where it can be (every chain in this process): eager JAX
    # ops would each compile, or read the compilation cache, on a resume
    local = isinstance(chains, np.ndarray) or getattr(chains, "is_fully_addressable", False)
    ok = _valid(hilbert, np.asarray(chains) if local else chains)
    bad = int(ok.size - ok.sum())
    if not bad:
        return state
    xp = np if isinstance(chains, np.ndarray) else jnp
    replaced = xp.where(xp.asarray(ok)[..., None], chains, fresh)
    warnings.warn(
        f"nkserde: sampler_state/chains: {bad} of {ok.size} loaded chains are not states of the "
        f"template's Hilbert space {hilbert}: they are re-drawn from the template's sampler "
        f"(its fresh chains) and the sampler is reset",
        stacklevel=outside(),
    )
    state = state.replace(σ=replaced) if hasattr(state, "replace") else dataclasses.replace(state, σ=replaced)
    return new.sampler.reset(new._sampler_model, new._sampler_variables, state)


def _reset_sampler_state(vs, state):
    """The sampler state ``state`` of the template ``vs`` as its next
    sampling starts: reset (every ``sample()`` starts with one), on a copy.
    NetKet builds some sampler states provisionally: a numpy sampler's
    ``log_prob`` has the model's output dtype (complex for a complex model)
    until the first reset makes it real."""
    state = copy.deepcopy(state)  # numpy samplers reset in place
    return vs.sampler.reset(vs._sampler_model, vs._sampler_variables, state)


# the sampler state is provisional until the first reset (docs/schema.md)
_MC_PROVISIONAL = {"sampler_state": _reset_sampler_state}
# the cached batch is the file's alone: a template holds its own samples or none
_MC_FREE = ("cached_samples",)


def _mc_v1(fields):
    """Version 1 stored no cached batch: a numpy sampler's state saved while
    samples were cached loads as the state after them (the next draw is
    the one after the cached batch), as before version 2."""
    fields["cached_samples"] = None
    return fields


registry.register(
    nk.vqs.MCState,
    name="netket.vqs.MCState",
    version=2,
    to_state=_mc_to_state,
    from_state=_mc_from_state,
    subclasses=True,
    fields=_MC_FIELDS,
    free_fields=_MC_FREE,
    dtype_from_file=("model_state",),
    provisional=_MC_PROVISIONAL,
    doc=(
        "`parameters`: pytree (the `params` collection); `model_state`: {collection: pytree} (batch"
        " statistics, other collections); `sampler_state`: a sampler state below (the state the "
        "cached samples were drawn from, if samples are cached, so a loaded state redraws the same "
        "samples); `sampler_seed`: key; `n_samples`, `n_discard_per_chain`: int; `chunk_size`: int "
        "or None; `cached_samples`: None, or, where that state no longer exists (the numpy samplers change "
        "their state in place), the cached samples themselves, [n_chains, chain_length, N] per "
        "process (`@per_process`; a process beyond the saved ones takes those of the saved process "
        "whose chains it continues), with the state after them: the loaded state's `samples` are the "
        "cached ones and its next `sample()` continues the chains (version 1: no `cached_samples`)"
    ),
)
registry.migration("netket.vqs.MCState", from_version=1)(_mc_v1)


# MCMixedState -----------------------------------------------------------------


def _mixed_to_state(vs: nk.vqs.MCMixedState) -> dict:
    out = _mc_to_state(vs)
    out["diagonal"] = vs.diagonal
    return out


def _mixed_from_state(template: nk.vqs.MCMixedState, f: dict) -> nk.vqs.MCMixedState:
    # A shallow copy shares the template's diagonal, and MCMixedState's
    # reset() and parameter/model_state setters forward to the diagonal:
    # detach it first, or loading would reset the template's diagonal and
    # overwrite its parameters with the loaded ones.
    shell = copy.copy(template)
    shell._diagonal = None
    new = _mc_from_state(shell, f)
    diagonal = new._diagonal = f["diagonal"]
    # the diagonal shares the density matrix's variables; assigning them
    # drops its cached samples, drawn with these very numbers: kept
    cached = diagonal._samples
    diagonal.variables = new.variables
    diagonal._samples = cached
    return new


registry.register(
    nk.vqs.MCMixedState,
    name="netket.vqs.MCMixedState",
    version=2,
    to_state=_mixed_to_state,
    from_state=_mixed_from_state,
    subclasses=True,
    fields=_MC_FIELDS + ("diagonal",),
    free_fields=_MC_FREE,
    dtype_from_file=("model_state",),
    provisional=_MC_PROVISIONAL,
    doc="the MCState fields, plus `diagonal`: MCState (version 1: no `cached_samples`)",
)
registry.migration("netket.vqs.MCMixedState", from_version=1)(_mc_v1)


# FullSumState -----------------------------------------------------------------


def _fullsum_to_state(vs: nk.vqs.FullSumState) -> dict:
    parameters, model_state = _split_variables(vs.variables)
    return {"parameters": parameters, "model_state": model_state, "chunk_size": vs.chunk_size}


def _fullsum_from_state(template: nk.vqs.FullSumState, f: dict) -> nk.vqs.FullSumState:
    new = copy.copy(template)
    new.reset()
    new.variables = _join_variables(f["parameters"], f["model_state"])
    return new  # chunk_size: the template's (see _mc_from_state)


registry.register(
    nk.vqs.FullSumState,
    name="netket.vqs.FullSumState",
    version=1,
    to_state=_fullsum_to_state,
    from_state=_fullsum_from_state,
    subclasses=True,
    fields=("parameters", "model_state", "chunk_size"),
    dtype_from_file=("model_state",),
    doc="`parameters`, `model_state`, `chunk_size`",
)


# An MCState's and a FullSumState's parameters mean the same thing: a
# non-strict load moves them (and the model state) between the two kinds;
# an MCState loaded from a FullSumState keeps its template's sampler state.
registry.transferable(
    "variational state",
    ("netket.vqs.MCState", "netket.vqs.FullSumState"),
    fields=("parameters", "model_state", "chunk_size"),
)


# DeterminantVariationalState --------------------------------------------------

# netket.experimental.vqs (NetKet >= 3.21): a Slater determinant (Hartree-Fock)
# whose expectation values come from its one-body density matrix by Wick's
# theorem. Its state is the variables of the Slater2nd model it builds from
# (hilbert, generalized, restricted, param_dtype): configuration, the
# template's. The cached density matrix is recomputed from the parameters.
_DETERMINANT_STATE = find("netket.experimental.vqs.DeterminantVariationalState")


def _determinant_to_state(vs) -> dict:
    parameters, model_state = _split_variables(vs.variables)
    return {"parameters": parameters, "model_state": model_state}


def _determinant_from_state(template, f: dict):
    new = copy.copy(template)
    new.reset()  # drops the template's cached density matrix
    new.variables = _join_variables(f["parameters"], f["model_state"])
    return new


if _DETERMINANT_STATE is not None:
    registry.register(
        _DETERMINANT_STATE,
        name="netket.experimental.vqs.DeterminantVariationalState",
        version=1,
        to_state=_determinant_to_state,
        from_state=_determinant_from_state,
        subclasses=True,
        fields=("parameters", "model_state"),
        dtype_from_file=("model_state",),
        doc=(
            "`parameters`: pytree (the `params` collection of its `Slater2nd` model: the orbitals); "
            "`model_state`: {collection: pytree} (empty for NetKet's `Slater2nd`). The Hilbert space "
            "and the Hartree-Fock kind (`generalized`, `restricted`, `param_dtype`) are configuration, "
            "the template's; the cached one-body density matrix is recomputed from the loaded "
            "parameters"
        ),
    )
