"""Round trips of every sampler of ``netket.sampler`` (NetKet 3.23), through
``nk.vqs.MCState`` and directly on the sampler state, plus MCMixedState,
FullSumState and models with non-``params`` collections.

Every case is built twice the same way: the *original* with seed 0 /
sampler_seed 1, sampled a few times so chains and counters are non-trivial;
the *template* with seed 11 / sampler_seed 12, so that every number in it
differs. Loading the original's file into the template must give an object
of the template's type holding the original's bytes, must leave the template
untouched, and must then sample exactly as the original does.

Sampling semantics checked here, for every sampler alike: while an MCState
holds cached samples, ``loaded.samples`` equals ``original.samples`` and
every ``sample()`` after that equals the original's next one. nkserde
follows NetKet's own serialization: the file holds the sampler state the
cached samples were drawn *from*, and the loaded state draws them again.
The numpy samplers change their state in place (``vs._sampler_state_previous
is vs.sampler_state``): the state the cached samples came from no longer
exists when saving, so the file holds the cached batch itself with the state
after it. The one difference: a first ``loaded.sample()`` (not
``loaded.samples``) draws the cached batch again for a JAX sampler, the
original's next batch for a numpy one. Without cached samples (``reset()``,
as after a parameter update in a driver) the file holds the current sampler
state, and the next ``sample()`` of both is identical.

Continuing a chain directly (``sampler.sample(..., state=loaded)``, no
reset) needs the Metropolis ``log_prob`` of the chains, stored since schema
version 2 of the Metropolis/parallel-tempering states. ExactSampler's
``pdf`` is a cache that NetKet recomputes in ``reset()``; it is not stored.

NetKet 3.23 notes: ``Particle`` lives in ``netket.experimental.hilbert``
(with a ``geometry``); ``nk.sampler.MetropolisCustom`` is an alias of
``MetropolisCustomNumpy``; ``Spin(0.5, 4) * Spin(0.5, 4)`` merges into one
``Spin`` space, so the TensorRule case constrains one factor. Every sampler
of ``nk.sampler`` could be constructed.

Compilation dominates the run time: every case uses one chain length
(n_samples / n_chains = 4) for both the discarded and the kept samples so
each sampler compiles its chain once.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

import flax.linen as nn
import jax
import jax.numpy as jnp
import netket as nk
import netket.experimental as nkx
import numpy as np
import pytest

import nkserde
import builders
from nkserde.caches import jax_executables as jax_cache
from nkserde.errors import TemplateMismatchError
from builders import N, assert_differs, assert_identical, assert_unchanged, leaves, system

R = nk.sampler.rules
N_CHAINS = 8
CHAIN_LENGTH = 4  # samples per chain, and discarded samples per chain: one compiled chain length
N_SAMPLES = CHAIN_LENGTH * N_CHAINS
SEEDS_ORIGINAL = dict(seed=0, sampler_seed=1)
SEEDS_TEMPLATE = dict(seed=11, sampler_seed=12)


# --------------------------------------------------------------------------- helpers


# Wide initial weights make |psi|^2 far from uniform, so that the Metropolis
# acceptance test depends on every restored number (chains, log-probabilities,
# keys). One shared initializer object: equal models hit the same jit cache.
_WIDE = jax.nn.initializers.normal(0.5)


def rbm(param_dtype=float):
    return nk.models.RBM(
        alpha=1, param_dtype=param_dtype, kernel_init=_WIDE, hidden_bias_init=_WIDE, visible_bias_init=_WIDE
    )


def array_leaves_bytes(tree):
    return [
        (np.asarray(x).dtype, np.asarray(x).shape, np.asarray(x).tobytes()) for x in jax.tree_util.tree_leaves(tree)
    ]


def assert_same_arrays(a, b):
    """Bit equality of two arrays (or pytrees of arrays) of the same dtype."""
    assert array_leaves_bytes(a) == array_leaves_bytes(b)


def is_numpy_sampler(sampler):
    return isinstance(sampler, nk.sampler.MetropolisSamplerNumpy)


# --------------------------------------------------------------------------- cases
#
# Each case: () -> dict(sampler=..., model=..., n_discard_per_chain=...).
# Models are rebuilt for each variational state (equal, so jit caches hit).


def _spin(sampler, model=rbm, **kw):
    return dict(sampler=sampler, model=model, **kw)


def case_local():
    _, hi, _ = system()
    return _spin(nk.sampler.MetropolisSampler(hi, R.LocalRule(), n_chains=N_CHAINS))


def case_exchange():
    g, hi, _ = system()
    return _spin(nk.sampler.MetropolisSampler(hi, R.ExchangeRule(graph=g), n_chains=N_CHAINS))


def case_hamiltonian():
    _, hi, H = system()
    return _spin(nk.sampler.MetropolisSampler(hi, R.HamiltonianRule(H), n_chains=N_CHAINS))


def case_global_spin_flip():
    _, hi, _ = system()
    return _spin(nk.sampler.MetropolisSampler(hi, R.GlobalSpinFlipRule(), n_chains=N_CHAINS))


def case_fixed():
    # FixedRule proposes the current configuration: the chains stay where
    # random_state put them, but the counters and the key still move.
    _, hi, _ = system()
    return _spin(nk.sampler.MetropolisSampler(hi, R.FixedRule(), n_chains=N_CHAINS))


def case_multiple_rules():
    g, hi, _ = system()
    rule = R.MultipleRules([R.LocalRule(), R.ExchangeRule(graph=g)], [0.3, 0.7])
    return _spin(nk.sampler.MetropolisSampler(hi, rule, n_chains=N_CHAINS))


def case_tensor_rule():
    # Spin(0.5, 4) * Spin(0.5, 4) merges into Spin(0.5, 8); a constrained
    # factor keeps the product a TensorHilbert of two spin spaces.
    h1 = nk.hilbert.Spin(0.5, 4, total_sz=0)
    h2 = nk.hilbert.Spin(0.5, 4)
    hi = h1 * h2
    assert isinstance(hi, nk.hilbert.TensorHilbert)
    rule = R.TensorRule(hi, [R.ExchangeRule(graph=nk.graph.Chain(4)), R.LocalRule()])
    return _spin(nk.sampler.MetropolisSampler(hi, rule, n_chains=N_CHAINS))


def case_fermion_hop():
    hi = nk.hilbert.SpinOrbitalFermions(4, n_fermions=2)
    g = nk.graph.Chain(4)
    return _spin(nk.sampler.MetropolisSampler(hi, R.FermionHopRule(hi, graph=g), n_chains=N_CHAINS))


def _particles():
    # NetKet 3.23 has Particle in netket.experimental.hilbert, with a geometry
    return nkx.hilbert.Particle(N=2, geometry=nkx.geometry.Cell(d=1, L=(1.0,), pbc=True))


def _gaussian():
    return nk.models.Gaussian(param_dtype=float)


def case_gaussian_rule():
    hi = _particles()
    return dict(sampler=nk.sampler.MetropolisSampler(hi, R.GaussianRule(sigma=0.1), n_chains=N_CHAINS), model=_gaussian)


def case_langevin_rule():
    hi = _particles()
    return dict(sampler=nk.sampler.MetropolisSampler(hi, R.LangevinRule(dt=0.01), n_chains=N_CHAINS), model=_gaussian)


def case_parallel_tempering_local():
    _, hi, _ = system()
    return _spin(nk.sampler.ParallelTemperingLocal(hi, n_chains=4, n_replicas=4))


def case_parallel_tempering_exchange():
    g, hi, _ = system()
    return _spin(nk.sampler.ParallelTemperingExchange(hi, graph=g, n_chains=4, n_replicas=4))


def case_parallel_tempering_hamiltonian():
    _, hi, H = system()
    return _spin(nk.sampler.ParallelTemperingHamiltonian(hi, H, n_chains=4, n_replicas=4))


def case_exact():
    _, hi, _ = system()
    return _spin(nk.sampler.ExactSampler(hi), n_discard_per_chain=0, n_samples=N_SAMPLES)


def case_ar_direct():
    _, hi, _ = system()
    return _spin(
        nk.sampler.ARDirectSampler(hi),
        model=lambda: nk.models.ARNNDense(hilbert=hi, layers=1, features=2, param_dtype=float),
        n_discard_per_chain=0,
        n_samples=N_SAMPLES,
    )


def case_local_numpy():
    _, hi, _ = system()
    return _spin(nk.sampler.MetropolisLocalNumpy(hi, n_chains=N_CHAINS))


def case_hamiltonian_numpy():
    _, hi, H = system()
    return _spin(nk.sampler.MetropolisHamiltonianNumpy(hi, H.to_local_operator(), n_chains=N_CHAINS))


def case_custom_numpy():
    # nk.sampler.MetropolisCustom is an alias of MetropolisCustomNumpy in
    # NetKet 3.23 (rule: CustomRuleNumpy, whose state is a flax dataclass of
    # numpy arrays). Moves: flip one spin.
    _, hi, _ = system()
    assert nk.sampler.MetropolisCustom is nk.sampler.MetropolisCustomNumpy
    # (CustomRuleNumpy checks the move matrices with .todense(): a LocalOperator
    # built from dense numpy matrices fails there; sigmax gives sparse ones)
    moves = sum(nk.operator.spin.sigmax(hi, i) for i in range(N))
    return _spin(nk.sampler.MetropolisCustomNumpy(hi, moves, n_chains=N_CHAINS))


# NetKet's own sampler tests (test/sampler/test_sampler.py) run the numpy
# samplers with a complex RBM at machine_pow 1 and 2: MetropolisLocalNumpy,
# chunked (chunk_size) or not, MetropolisHamiltonianNumpy with reset_chains,
# MetropolisCustom with sigma_x moves. With the cases above (a real RBM,
# machine_pow 2) each of them runs at both powers, each with a complex model.


def _complex_rbm():
    return rbm(complex)


def case_local_numpy_complex_mpow1():
    _, hi, _ = system()
    return _spin(nk.sampler.MetropolisLocalNumpy(hi, n_chains=N_CHAINS, machine_pow=1), model=_complex_rbm)


def case_local_numpy_chunked():
    _, hi, _ = system()
    return _spin(nk.sampler.MetropolisLocalNumpy(hi, n_chains=N_CHAINS, chunk_size=4), model=_complex_rbm)


def case_local_numpy_chunked_mpow1():
    _, hi, _ = system()
    sampler = nk.sampler.MetropolisLocalNumpy(hi, n_chains=N_CHAINS, chunk_size=4, machine_pow=1)
    return _spin(sampler, model=_complex_rbm)


def case_hamiltonian_numpy_reset_chains_mpow1():
    _, hi, H = system()
    sampler = nk.sampler.MetropolisHamiltonianNumpy(
        hi, H.to_local_operator(), n_chains=N_CHAINS, reset_chains=True, machine_pow=1
    )
    return _spin(sampler, model=_complex_rbm)


def case_custom_numpy_complex_mpow1():
    _, hi, _ = system()
    moves = sum(nk.operator.spin.sigmax(hi, i) for i in range(N))
    return _spin(nk.sampler.MetropolisCustomNumpy(hi, moves, n_chains=N_CHAINS, machine_pow=1), model=_complex_rbm)


CASES = {name[len("case_") :]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}
PARALLEL_TEMPERING = {"parallel_tempering_local", "parallel_tempering_exchange", "parallel_tempering_hamiltonian"}


def make_vs(spec, seed, sampler_seed):
    sampler = spec["sampler"]
    return nk.vqs.MCState(
        sampler,
        spec["model"](),
        seed=seed,
        sampler_seed=sampler_seed,
        n_samples=spec.get("n_samples", CHAIN_LENGTH * sampler.n_chains),
        n_discard_per_chain=spec.get("n_discard_per_chain", CHAIN_LENGTH),
    )


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    spec = CASES[request.param]()
    orig = make_vs(spec, **SEEDS_ORIGINAL)
    orig.sample()
    orig.sample()  # cached samples; sampler state past a reset and a chain
    template = make_vs(spec, **SEEDS_TEMPLATE)
    template.sample()  # the template holds cached samples too: they must survive the load
    template_samples = np.asarray(template.samples).copy()
    before = leaves(template)
    assert_differs(orig, template)
    path = tmp_path_factory.mktemp(request.param) / "vs.nks"
    nkserde.save(orig, path)
    saved = leaves(orig)  # the tests below sample `orig` further; `loaded` is never mutated
    loaded = nkserde.load(template, path)
    # what the saved state holds and draws next, uninterrupted
    cached = np.array(orig.samples)
    straight = [np.array(orig.sample()) for _ in range(2)]
    return SimpleNamespace(
        name=request.param,
        spec=spec,
        orig=orig,
        saved=saved,
        template=template,
        template_before=before,
        template_samples=template_samples,
        loaded=loaded,
        path=path,
        cached=cached,
        straight=straight,
    )


# --------------------------------------------------------------------------- MCState


def test_mcstate_round_trip(case):
    orig, template, loaded = case.orig, case.template, case.loaded
    assert type(loaded) is type(template) is nk.vqs.MCState
    assert type(loaded.sampler_state) is type(template.sampler_state)
    assert loaded is not template and loaded.sampler_state is not template.sampler_state
    assert loaded.sampler is template.sampler
    assert_unchanged(case.saved, loaded)  # every array and scalar of the file, bit for bit
    assert_same_arrays(loaded.parameters, orig.parameters)
    assert_same_arrays(loaded.model_state, orig.model_state)
    assert_same_arrays(jax.random.key_data(loaded._sampler_seed), jax.random.key_data(orig._sampler_seed))
    assert (loaded.n_samples, loaded.n_discard_per_chain, loaded.chunk_size) == (
        orig.n_samples,
        orig.n_discard_per_chain,
        orig.chunk_size,
    )
    # arrays of JAX states come back as JAX arrays, numpy states as numpy
    for a, t in zip(jax.tree_util.tree_leaves(loaded.variables), jax.tree_util.tree_leaves(template.variables)):
        assert type(a) is type(t)
    # the template is untouched, including its cached samples
    assert_unchanged(case.template_before, template)
    assert template._samples is not None
    assert np.asarray(template.samples).tobytes() == case.template_samples.tobytes()


def test_state_dict_round_trip(case):
    """The in-memory path gives the same object as the file path, one of
    its own: sampling either leaves the other's chains alone (the numpy
    samplers write their chains in place)."""
    orig = case.orig
    sd = nkserde.state_dict(orig)
    restored = nkserde.from_state_dict(case.template, sd)
    assert type(restored) is type(case.template)
    assert_identical(orig, restored)
    assert_unchanged(case.template_before, case.template)
    assert np.asarray(restored.samples).tobytes() == np.asarray(orig.samples).tobytes()
    for _ in range(2):
        a, b = np.asarray(orig.sample()), np.asarray(restored.sample())
        assert a.tobytes() == b.tobytes()


def _sampler_state_fields_nontrivial(name, state):
    """Guards against testing a freshly reset state whose counters are zero."""
    if isinstance(state, nk.sampler.MetropolisSamplerState):
        assert int(state.n_steps_proc) > 0
    if name in PARALLEL_TEMPERING:
        assert int(state.exchange_steps) > 0
        assert int(np.sum(state.n_accepted_per_beta)) > 0


def test_loaded_state_samples_like_original(case, tmp_path):
    orig, template = case.orig, case.template
    _sampler_state_fields_nontrivial(case.name, orig.sampler_state)
    assert orig._samples is not None  # saved while samples are cached
    nkserde.save(orig, tmp_path / "vs.nks")
    loaded = nkserde.load(template, tmp_path / "vs.nks")
    # the original's cached samples (drawn again from the state they came
    # from, or for the numpy samplers, which leave no such state, the file's)
    assert np.asarray(loaded.samples).tobytes() == np.asarray(orig.samples).tobytes()
    # from here on both continue identically
    for _ in range(2):
        a, b = np.asarray(orig.sample()), np.asarray(loaded.sample())
        assert a.tobytes() == b.tobytes()
    assert_identical(orig, loaded)
    assert_unchanged(case.template_before, template)


def test_fresh_template_draws_the_cached_then_the_next_samples(case):
    """The file of the fixture, saved while samples were cached, loaded
    into a template that never sampled (the numpy samplers' state is then
    provisional for a complex model): its samples are the cached ones, then
    each ``sample()`` the uninterrupted run's next, bit for bit."""
    loaded = nkserde.load(make_vs(case.spec, **SEEDS_TEMPLATE), case.path)
    assert np.asarray(loaded.samples).tobytes() == case.cached.tobytes()
    for expected in case.straight:
        assert np.asarray(loaded.sample()).tobytes() == expected.tobytes()


def test_first_sample_call_after_load(case):
    """An explicit first ``sample()`` after the load: a JAX sampler draws
    the cached samples again from the stored state they came from (as
    NetKet's own serialization does); the numpy samplers' file holds the
    state after them, whose draw is the uninterrupted run's next; the cached
    batch stays available as ``samples`` until then."""
    loaded = nkserde.load(make_vs(case.spec, **SEEDS_TEMPLATE), case.path)
    numpy = is_numpy_sampler(case.spec["sampler"])
    assert (loaded._samples is not None) is numpy
    first = np.asarray(loaded.sample())
    assert first.tobytes() == (case.straight[0] if numpy else case.cached).tobytes()


def test_next_sample_after_reset_identical(case, tmp_path):
    """Saved without cached samples (after ``reset()``): the next
    ``sample()`` of the original and of the loaded state are identical."""
    orig = case.orig
    orig.sample()
    orig.reset()
    nkserde.save(orig, tmp_path / "reset.nks")
    loaded = nkserde.load(case.template, tmp_path / "reset.nks")
    assert type(loaded) is type(case.template)
    assert_identical(orig, loaded)
    a, b = np.asarray(orig.sample()), np.asarray(loaded.sample())
    assert a.tobytes() == b.tobytes()
    assert_identical(orig, loaded)
    assert_unchanged(case.template_before, case.template)


# --------------------------------------------------------------------------- sampler state alone


def test_sampler_state_direct(case, tmp_path):
    """The sampler state saved on its own, loaded into the template's sampler
    state, and the chain continued with ``sampler.sample(..., state=)``
    without a reset."""
    orig, template = case.orig, case.template
    sampler = orig.sampler
    state = orig.sampler_state
    _sampler_state_fields_nontrivial(case.name, state)
    before = leaves(template.sampler_state)
    path = nkserde.save(state, tmp_path / "sampler_state.nks")
    restored = nkserde.load(template.sampler_state, path)
    assert type(restored) is type(template.sampler_state)
    assert restored is not template.sampler_state
    assert_identical(state, restored)
    assert_differs(state, template.sampler_state)
    assert_unchanged(before, template.sampler_state)
    assert_identical(nkserde.from_state_dict(template.sampler_state, nkserde.state_dict(state)), state)

    if isinstance(state, nk.sampler.MetropolisSamplerState):
        assert_same_arrays(restored.σ, state.σ)
        assert_same_arrays(restored.n_accepted_proc, state.n_accepted_proc)
        # the next acceptance test reads log_prob (see nkserde/netket/samplers.py)
        assert_same_arrays(restored.log_prob, state.log_prob)
        assert np.all(np.isfinite(np.asarray(state.log_prob)))
    if case.name in PARALLEL_TEMPERING:
        for field in (
            "beta",
            "beta_0_index",
            "beta_position",
            "beta_diffusion",
            "exchange_steps",
            "n_accepted_per_beta",
        ):
            assert_same_arrays(getattr(restored, field), getattr(state, field))
    if is_numpy_sampler(sampler):
        assert isinstance(restored.σ, np.ndarray) and isinstance(restored.rng, np.random.Generator)
        assert restored.rng is not template.sampler_state.rng
        assert restored.rng.bit_generator.state == state.rng.bit_generator.state
        # numpy samplers mutate their state: continue a deep copy of the original
        state = copy.deepcopy(state)

    model, variables = orig._sampler_model, orig._sampler_variables
    if isinstance(sampler, nk.sampler.ExactSampler):
        # ExactSamplerState.pdf/pdf_norm are a cache of |psi|^2 that NetKet
        # marks serialize=False and recomputes in reset(); nkserde does not
        # store them either (a fresh template holds a float32 placeholder of
        # another dtype). Sampling an exact state needs a reset after load.
        state = sampler.reset(model, variables, state)
        restored = sampler.reset(model, variables, restored)
    # continue the chains directly; no reset in between
    chain_length = orig.chain_length
    sa, next_a = sampler.sample(model, variables, state=state, chain_length=chain_length)
    sb, next_b = sampler.sample(model, variables, state=restored, chain_length=chain_length)
    assert np.asarray(sa).tobytes() == np.asarray(sb).tobytes()
    assert_identical(next_a, next_b)


def test_a_cached_batch_that_the_sampler_cannot_draw_is_refused(tmp_path):
    """A file whose cached samples are not configurations of the template's
    sampler (another number of sites, another dtype) is refused, naming the
    file, the field and both shapes; never loaded as samples."""
    spec = CASES["local_numpy"]()
    vs = make_vs(spec, **SEEDS_ORIGINAL)
    vs.sample()
    state = nkserde.state_dict(vs)
    cached = state["cached_samples"].value
    for name, bad in (("sites", cached[..., :-1]), ("dtype", cached.astype(np.float32))):
        state["cached_samples"] = bad
        path = nkserde.save_state_dict(state, tmp_path / f"{name}.nks")
        with pytest.raises(TemplateMismatchError, match=r"cached_samples: file has ") as refused:
            nkserde.load(make_vs(spec, **SEEDS_TEMPLATE), path)
        message = str(refused.value)
        assert str(path) in message and f"{bad.dtype}{list(bad.shape)}" in message
        assert f"{cached.dtype}[{N_CHAINS}, chain_length, {N}]" in message


# --------------------------------------------------------------------------- MCMixedState


def _mixed_state(seed, sampler_seed, diagonal_sampler=nk.sampler.MetropolisLocal):
    g, hi, H = system()
    jump_ops = [nk.operator.spin.sigmam(hi, i) for i in range(N)]
    lind = nk.operator.LocalLiouvillian(H.to_local_operator(), jump_ops)
    sampler = nk.sampler.MetropolisLocal(lind.hilbert, n_chains=N_CHAINS)
    sampler_diag = diagonal_sampler(hi, n_chains=N_CHAINS)
    vs = nk.vqs.MCMixedState(
        sampler,
        nk.models.NDM(alpha=1, beta=1),
        sampler_diag=sampler_diag,
        n_samples=N_SAMPLES,
        n_samples_diag=N_SAMPLES,
        n_discard_per_chain=CHAIN_LENGTH,
        n_discard_per_chain_diag=CHAIN_LENGTH,
        seed=seed,
        sampler_seed=sampler_seed,
    )
    return vs, lind


# the diagonal's sampler: a JAX one, or a numpy one (whose cached samples
# the file holds)
@pytest.fixture(scope="module", params=[nk.sampler.MetropolisLocal, nk.sampler.MetropolisLocalNumpy])
def mixed(request, tmp_path_factory):
    orig, lind = _mixed_state(**SEEDS_ORIGINAL, diagonal_sampler=request.param)
    orig.sample()
    orig.sample()
    orig.diagonal.sample()
    template, _ = _mixed_state(**SEEDS_TEMPLATE, diagonal_sampler=request.param)
    template.sample()
    template.diagonal.sample()
    before = leaves(template)
    assert_differs(orig, template)
    path = tmp_path_factory.mktemp("mixed") / "mixed.nks"
    nkserde.save(orig, path)
    loaded = nkserde.load(template, path)
    return SimpleNamespace(orig=orig, template=template, loaded=loaded, before=before, lind=lind)


def test_mixed_state_round_trip(mixed):
    orig, template, loaded = mixed.orig, mixed.template, mixed.loaded
    assert type(loaded) is type(template) is nk.vqs.MCMixedState
    assert type(loaded.diagonal) is type(template.diagonal) is nk.vqs.MCState
    assert loaded.diagonal is not template.diagonal
    assert_identical(orig, loaded)
    assert_identical(orig.diagonal, loaded.diagonal)
    # the diagonal shares the density matrix's parameters
    assert_same_arrays(loaded.diagonal.parameters, orig.parameters)
    assert_same_arrays(loaded.diagonal.parameters, loaded.parameters)
    # the template, and its diagonal, are untouched (and keep their samples)
    assert_unchanged(mixed.before, template)
    assert_same_arrays(template.diagonal.parameters, template.parameters)
    assert template._samples is not None
    assert template.diagonal._samples is not None


def test_mixed_state_samples_like_original(mixed):
    orig, loaded = mixed.orig, mixed.loaded
    assert np.asarray(loaded.samples).tobytes() == np.asarray(orig.samples).tobytes()
    assert np.asarray(loaded.diagonal.samples).tobytes() == np.asarray(orig.diagonal.samples).tobytes()
    for vs_a, vs_b in ((orig, loaded), (orig.diagonal, loaded.diagonal)):
        a, b = np.asarray(vs_a.sample()), np.asarray(vs_b.sample())
        assert a.tobytes() == b.tobytes()
    assert_identical(orig, loaded)
    assert_unchanged(mixed.before, mixed.template)


# --------------------------------------------------------------------------- FullSumState


def test_full_sum_state_round_trip(tmp_path):
    _, hi, _ = system()

    def build(seed):
        return nk.vqs.FullSumState(hi, rbm(), seed=seed, chunk_size=64 if seed else None)

    orig, template = build(0), build(11)
    orig.chunk_size = 128  # a setting the template does not have
    before = leaves(template)
    assert_differs(orig, template)
    nkserde.save(orig, tmp_path / "fs.nks")
    loaded = nkserde.load(template, tmp_path / "fs.nks")
    assert type(loaded) is type(template) is nk.vqs.FullSumState
    # state from the file, configuration (chunk_size) from the template
    assert loaded.chunk_size == 64
    assert_same_arrays(loaded.variables, orig.variables)
    assert_unchanged(before, template)
    assert template.chunk_size == 64
    orig.chunk_size = 64
    assert_identical(orig, loaded)
    assert_identical(nkserde.from_state_dict(template, nkserde.state_dict(orig)), orig)


# --------------------------------------------------------------------------- non-params collections


class StatefulRBM(nn.Module):
    """An RBM behind a BatchNorm in inference mode (``batch_stats``) and a
    learned-elsewhere shift in a ``cache`` collection: model_state that
    changes the amplitudes but is not trained."""

    @nn.compact
    def __call__(self, x):
        shift = self.variable("cache", "shift", lambda: jnp.zeros((x.shape[-1],), float))
        calls = self.variable("cache", "n_updates", lambda: jnp.zeros((), jnp.int32))
        del calls  # stored, never used in the forward pass
        y = nn.BatchNorm(use_running_average=True, param_dtype=float)(x)
        return nk.models.RBM(alpha=1, param_dtype=float)(y) + y @ shift.value


def _perturb_model_state(vs, seed):
    """Distinct, non-default model_state values for one state."""
    rng = np.random.default_rng(seed)
    ms = jax.tree_util.tree_map(lambda x: np.asarray(x), vs.model_state)
    ms = jax.tree_util.tree_map_with_path(
        lambda path, x: (
            np.asarray(rng.integers(1, 100), x.dtype)
            if x.dtype.kind == "i"
            else (1.0 + rng.random(x.shape)).astype(x.dtype)
        ),
        ms,
    )
    vs.model_state = jax.tree_util.tree_map(jnp.asarray, ms)


def _check_model_state_round_trip(orig, template, tmp_path, name):
    orig.sample()
    template.sample()
    before = leaves(template)
    assert_differs(orig, template)
    nkserde.save(orig, tmp_path / f"{name}.nks")
    loaded = nkserde.load(template, tmp_path / f"{name}.nks")
    assert type(loaded) is type(template)
    assert_identical(orig, loaded)
    assert_same_arrays(loaded.model_state, orig.model_state)
    assert set(loaded.model_state) == set(orig.model_state)
    assert_unchanged(before, template)
    # model_state enters the amplitudes: sampling agrees only if it was restored
    assert np.asarray(loaded.samples).tobytes() == np.asarray(orig.samples).tobytes()
    a, b = np.asarray(orig.sample()), np.asarray(loaded.sample())
    assert a.tobytes() == b.tobytes()
    return loaded


def test_model_state_collections(tmp_path):
    _, hi, _ = system()

    def build(seed, sampler_seed):
        sampler = nk.sampler.MetropolisLocal(hi, n_chains=N_CHAINS)
        return nk.vqs.MCState(
            sampler,
            StatefulRBM(),
            n_samples=N_SAMPLES,
            seed=seed,
            sampler_seed=sampler_seed,
            n_discard_per_chain=CHAIN_LENGTH,
        )

    orig, template = build(**SEEDS_ORIGINAL), build(**SEEDS_TEMPLATE)
    assert set(orig.model_state) == {"batch_stats", "cache"}
    _perturb_model_state(orig, 1)
    _perturb_model_state(template, 2)
    _check_model_state_round_trip(orig, template, tmp_path, "stateful")


def test_frozen_parameters(tmp_path):
    """nk.vqs.freeze_parameters moves frozen parameters into
    ``model_state['frozen_params']``: they must be restored like parameters."""
    assert hasattr(nk.vqs, "freeze_parameters")

    def build(seed, sampler_seed):
        _, hi, _ = system()
        vs = nk.vqs.MCState(
            nk.sampler.MetropolisLocal(hi, n_chains=N_CHAINS),
            rbm(),
            n_samples=N_SAMPLES,
            seed=seed,
            sampler_seed=sampler_seed,
            n_discard_per_chain=CHAIN_LENGTH,
        )
        return nk.vqs.freeze_parameters(vs, lambda path, _: "kernel" in str(path))

    orig, template = build(**SEEDS_ORIGINAL), build(**SEEDS_TEMPLATE)
    assert "frozen_params" in orig.model_state
    assert "kernel" not in str(jax.tree_util.tree_structure(orig.parameters))
    loaded = _check_model_state_round_trip(orig, template, tmp_path, "frozen")
    assert_same_arrays(loaded.model_state["frozen_params"], orig.model_state["frozen_params"])


@pytest.mark.parametrize("saved_chains, wanted", [(12, 16), (12, 8)])
def test_a_different_number_of_chains_keeps_what_fits(tmp_path, saved_chains, wanted):
    """Chains saved from 12 into 16 (all kept, 4 repeated) or 8 (the first
    8): one warning naming both counts; the fields stay consistent; repeated
    chains move apart at the next sampling (each chain has its own key)."""
    _, hilbert, _ = builders.system()

    def state(n):
        return builders.mc_state(sampler=nk.sampler.MetropolisLocal(hilbert, n_chains=n), n_samples=8 * n)

    orig = state(saved_chains)
    orig.sample()
    nkserde.save(orig, tmp_path / "vs.nks")
    with pytest.warns(UserWarning, match=f"{saved_chains} chains, the template {wanted}") as caught:
        loaded = nkserde.load(state(wanted), tmp_path / "vs.nks")
    assert sum("chains, the template" in str(w.message) for w in caught) == 1
    rows = np.arange(wanted) % saved_chains
    stored = nkserde.load_state_dict(tmp_path / "vs.nks")["sampler_state"]
    for field, attr in (("chains", "σ"), ("log_prob", "log_prob"), ("n_accepted", "n_accepted_proc")):
        np.testing.assert_array_equal(np.asarray(getattr(loaded.sampler_state, attr)), stored[field][rows])
    if wanted > saved_chains:
        loaded.sample()
        chains = np.asarray(loaded.sampler_state.σ)
        assert not np.array_equal(chains[saved_chains:], chains[: wanted - saved_chains])


# --------------------------------------------------------------------------- files of schema version 1

# MCState and MCMixedState files written by nkserde at d346256 (schema
# version 1) while samples were cached; see the directory's write.py.
VERSION_1 = Path(__file__).parent / "fixtures" / "cached-samples-d346256"


def _version_1_writer():
    spec = importlib.util.spec_from_file_location("cached_samples_d346256", VERSION_1 / "write.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _computed_as_recorded() -> bool:
    """Whether this NetKet, JAX and CPU compute what the writer's run
    recorded (XLA compiles for the CPU it runs on: see test_fixtures.py)."""
    recorded = json.loads((VERSION_1 / "recorded.json").read_text())
    here = (nk.__version__, jax.__version__, jax_cache.cpu_kind(), os.environ.get("XLA_FLAGS", ""))
    return (recorded["netket"], recorded["jax"], recorded["cpu"], recorded["xla_flags"]) == here


def test_version_1_numpy_file_saved_with_cached_samples():
    """Version 1 stored no cached batch: the numpy sampler's state in the
    file is the state after the cached samples, and the loaded state's
    first samples are the ones after them, as they were when written."""
    path = VERSION_1 / "numpy.nks"
    assert nkserde.info(path)["types"]["netket.vqs.MCState"] == 1
    writer = _version_1_writer()
    loaded = nkserde.load(writer.build_numpy(seed=11, sampler_seed=12), path)
    assert loaded._samples is None
    assert_identical(loaded.sampler_state, nkserde.load(loaded.sampler_state, path, at="sampler_state"))
    recorded = np.load(VERSION_1 / "recorded.npz")
    first = np.asarray(loaded.samples)
    assert first.shape == recorded["numpy_next"].shape and first.dtype == recorded["numpy_next"].dtype
    if _computed_as_recorded():
        assert first.tobytes() == recorded["numpy_next"].tobytes()
        assert first.tobytes() != recorded["numpy_cached"].tobytes()


def test_version_1_mixed_state_saved_with_cached_samples():
    """An MCMixedState of version 1 (JAX samplers: the states the cached
    samples were drawn from) redraws the cached samples of the density
    matrix and of its diagonal."""
    path = VERSION_1 / "mixed.nks"
    assert nkserde.info(path)["types"]["netket.vqs.MCMixedState"] == 1
    writer = _version_1_writer()
    loaded = nkserde.load(writer.build_mixed(seed=11, sampler_seed=12), path)
    recorded = np.load(VERSION_1 / "recorded.npz")
    samples, diagonal = np.asarray(loaded.samples), np.asarray(loaded.diagonal.samples)
    assert samples.shape == recorded["mixed_cached"].shape
    assert diagonal.shape == recorded["mixed_diagonal_cached"].shape
    if _computed_as_recorded():
        assert samples.tobytes() == recorded["mixed_cached"].tobytes()
        assert diagonal.tobytes() == recorded["mixed_diagonal_cached"].tobytes()
