"""What a resume takes from where, in one process: which stops are final,
configuration from the template and state from the file, state whose dtype
the run changes, configuration objects inside states, the checkpointed
driver, messages, early failures, and loading a checkpoint outside a resume.
The run-changing cases (walltime stops, NetKet-example scripts, busy nodes)
are in tests/test_example_scripts.py with real processes."""

from __future__ import annotations

import dataclasses
import logging
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import netket as nk
import numpy as np
import optax
import pytest

import builders as B
import nkserde
from nkserde.errors import NkserdeError, UnregisteredTypeError

N_STEPS = 6


def _bytes(tree):
    return [np.asarray(x).tobytes() for x in jax.tree_util.tree_leaves(tree)]


def _energies(log):
    return np.asarray(log.data["Energy"]["Mean"]).tobytes()


@pytest.fixture(scope="module")
def reference():
    driver, log = B.vmc(), nk.logging.RuntimeLog()
    driver.run(N_STEPS, out=log, show_progress=False)
    return B.params_bytes(driver), _energies(log)


class Sleep(nk.callbacks.AbstractCallback):
    """Makes every step last ``seconds``, so a Timeout strikes mid-run."""

    seconds: float = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, seconds):
        self.seconds = seconds

    def on_step_end(self, step, log_data, driver):
        time.sleep(self.seconds)


# ----------------------------------------------------------------- stops


def test_a_walltime_stop_is_resumed_not_final(tmp_path, reference):
    """nk.callbacks.Timeout stops the run after its update; the next run
    continues with the following step and ends like an uninterrupted run."""
    stopped_at = []
    while True:
        driver, log = B.vmc(), nk.logging.RuntimeLog()
        ckpt = nkserde.Checkpoint(tmp_path, every=5)
        driver.run(N_STEPS, out=log, show_progress=False, callback=[ckpt, Sleep(0.15), nk.callbacks.Timeout(0.4)])
        if ckpt.interrupted is None:
            break
        assert ckpt.interrupted == "Timeout"
        stopped_at.append(ckpt.steps()[-1])
        # each job goes further; on a loaded machine it may do one step only
        assert stopped_at == sorted(set(stopped_at)) and len(stopped_at) <= N_STEPS, "no progress"
    assert stopped_at, "the Timeout never struck"
    assert stopped_at == sorted(set(stopped_at))  # each job went further
    assert driver.step_count == N_STEPS
    assert B.params_bytes(driver) == reference[0]
    assert _energies(log) == reference[1]
    assert log.data["Energy"].iters.tolist() == list(range(N_STEPS))


def test_a_convergence_stop_is_final_until_more_steps_are_asked(tmp_path):
    def stopper():  # stops at the first step whose energy did not improve by 1e9
        return nk.callbacks.EarlyStopping(min_delta=1e9, patience=1, monitor="mean")

    first = B.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, every=100)
    first.run(N_STEPS, out=None, show_progress=False, callback=[ckpt, stopper()])
    assert ckpt.interrupted is None and 0 < first.step_count < N_STEPS
    stop = first.step_count

    calls = []

    class Count(nk.callbacks.AbstractCallback):
        def on_compute_update_start(self, step, log_data, driver):
            calls.append(driver.step_count)

    again = B.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, every=100)
    again.run(N_STEPS, out=None, show_progress=False, callback=[ckpt, stopper(), Count()])
    assert calls == [] and again.step_count == stop  # the same script: nothing to do
    assert B.params_bytes(again) == B.params_bytes(first)

    more = B.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, every=100)
    more.run(N_STEPS + 2, out=None, show_progress=False, callback=[ckpt, Count()])
    assert ckpt.resumed_from == stop and calls[0] == stop and more.step_count == N_STEPS + 2


# --------------------------------------------- configuration from the template


def test_force_continues_with_the_templates_sample_count(tmp_path):
    B.vmc().run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
    changed = B.vmc()
    changed.state.n_samples = 128
    changed.state.n_discard_per_chain = 5
    seen = []

    class Record(nk.callbacks.AbstractCallback):
        def on_step_end(self, step, log_data, driver):
            seen.append((driver.state.n_samples, driver.state.samples.size // 8))

    ckpt = nkserde.Checkpoint(tmp_path, resume="force", every=1)
    changed.run(3, out=None, show_progress=False, callback=[ckpt, Record()])
    assert ckpt.resumed_from == 2
    assert changed.state.n_samples == 128 and changed.state.n_discard_per_chain == 5
    assert seen == [(128, 128)]  # the samples drawn after the resume


def test_load_keeps_the_templates_settings(tmp_path):
    orig = B.mc_state(n_samples=64)
    nkserde.save(orig, tmp_path / "vs.nks")
    template = B.mc_state(n_samples=256, seed=3, chunk_size=32)
    template.n_discard_per_chain = 7
    loaded = nkserde.load(template, tmp_path / "vs.nks")
    assert (loaded.n_samples, loaded.n_discard_per_chain, loaded.chunk_size) == (256, 7, 32)
    assert _bytes(loaded.parameters) == _bytes(orig.parameters)


def test_a_fixed_time_step_is_the_templates(tmp_path):
    te = B.tdvp_imag(integrator="RK4", dt=0.01)
    te.run(0.02, out=None, show_progress=False)
    nkserde.save(te, tmp_path / "te.nks")
    template = B.tdvp_imag(integrator="RK4", dt=0.005)
    loaded = nkserde.load(template, tmp_path / "te.nks")
    assert float(loaded._integrator.dt) == 0.005
    assert float(loaded.t) == pytest.approx(0.02)


def test_callback_settings_are_the_templates_its_state_the_files(tmp_path):
    def make(patience):
        return nk.callbacks.EarlyStopping(min_delta=1e9, patience=patience, monitor="mean")

    with pytest.raises(RuntimeError):
        B.vmc().run(
            N_STEPS,
            out=None,
            show_progress=False,
            callback=[nkserde.Checkpoint(tmp_path, every=1), make(100), B.CrashAt(3)],
        )
    resumed = make(200)
    B.vmc().run(4, out=None, show_progress=False, callback=[nkserde.Checkpoint(tmp_path, every=1), resumed])
    assert resumed.patience == 200  # configuration: the template's
    assert resumed._best_patience_counter == 3  # state: 2 from the file, 1 step more


# ------------------------------------------------ dtypes the run changes


class BatchNormRBM(nn.Module):
    """An RBM behind a BatchNorm that trains its running statistics
    (``mutable="batch_stats"``), as flax users write it."""

    @nn.compact
    def __call__(self, x):
        # statistics update where NetKet calls the model with batch_stats mutable
        train = self.is_mutable_collection("batch_stats")
        x = jnp.asarray(x, jnp.float64)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        return nk.models.RBM(alpha=1, param_dtype=float)(x)


def _batchnorm_vmc():
    _, hilbert, H = B.system()
    vs = nk.vqs.MCState(
        nk.sampler.MetropolisLocal(hilbert, n_chains=8),
        BatchNormRBM(),
        n_samples=64,
        seed=0,
        sampler_seed=1,
        n_discard_per_chain=2,
        mutable="batch_stats",
    )
    return nk.driver.VMC(H, optax.adam(1e-2), variational_state=vs)


def test_batchnorm_statistics_whose_dtype_the_run_changes_resume(tmp_path):
    fresh = _batchnorm_vmc()
    assert jax.tree_util.tree_leaves(fresh.state.model_state)[0].dtype == jnp.float32  # flax's
    straight, log = _batchnorm_vmc(), nk.logging.RuntimeLog()
    straight.run(4, out=log, show_progress=False)
    assert jax.tree_util.tree_leaves(straight.state.model_state)[0].dtype == jnp.float64  # NetKet's

    resumed, log2, ckpt = B.crash_then_resume(
        _batchnorm_vmc, tmp_path, 4, crash_at=2, make_out=nk.logging.RuntimeLog, every=1
    )
    assert ckpt.resumed_from == 2
    assert B.params_bytes(resumed) == B.params_bytes(straight)
    for a, b in zip(
        jax.tree_util.tree_leaves(resumed.state.model_state), jax.tree_util.tree_leaves(straight.state.model_state)
    ):
        assert a.dtype == b.dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert _energies(log2) == _energies(log)


def test_inject_hyperparams_with_mixed_dtypes_resumes(tmp_path):
    def build():
        _, hilbert, H = B.system()
        model = nk.models.RBM(alpha=1, param_dtype=jnp.float32)
        vs = nk.vqs.MCState(
            nk.sampler.MetropolisLocal(hilbert, n_chains=8),
            model,
            n_samples=64,
            seed=0,
            sampler_seed=1,
            n_discard_per_chain=2,
        )
        opt = optax.inject_hyperparams(optax.adam)(learning_rate=1e-2)
        return nk.driver.VMC(H, opt, variational_state=vs)

    straight = build()
    straight.run(4, out=None, show_progress=False)
    resumed, _, ckpt = B.crash_then_resume(build, tmp_path, 4, crash_at=2, every=1)
    assert ckpt.resumed_from == 2
    assert B.params_bytes(resumed) == B.params_bytes(straight)


def test_a_changed_dtype_outside_run_state_is_still_refused(tmp_path):
    nkserde.save(B.mc_state(), tmp_path / "vs.nks")
    template = B.mc_state(model=nk.models.RBM(alpha=1, param_dtype=jnp.float32))
    with pytest.raises(nkserde.errors.TemplateMismatchError, match="parameters.*float64.*float32"):
        nkserde.load(template, tmp_path / "vs.nks")


# --------------------------------------------- configuration inside states


def test_operators_inside_a_state_come_from_the_template(tmp_path):
    """NetKet's Infidelity_SR with ``operator=`` builds a target whose model
    state holds the operator (an IsingJax): checkpointed from the first step.
    The file records only that an operator is there: a template built with
    another field (resumed with resume="force") keeps its own."""
    graph, hilbert, _ = B.system()

    def build(h=1.0):
        target = B.mc_state(seed=5, sampler_seed=7)
        operator = nk.operator.Ising(hilbert, graph, h=h).to_jax_operator()
        return nk.driver.Infidelity_SR(
            target, optax.sgd(1e-2), operator=operator, variational_state=B.mc_state(), diag_shift=0.1
        )

    def operator_leaves(driver):
        ops = [
            x
            for x in jax.tree_util.tree_leaves(
                driver.target_state.model_state, is_leaf=lambda x: isinstance(x, nk.operator.AbstractOperator)
            )
            if isinstance(x, nk.operator.AbstractOperator)
        ]
        assert ops
        return [np.asarray(leaf).tobytes() for op in ops for leaf in jax.tree_util.tree_leaves(op)]

    straight = build()
    straight.run(3, out=None, show_progress=False)
    resumed, _, ckpt = B.crash_then_resume(build, tmp_path / "same", 3, crash_at=2, every=1)
    assert ckpt.resumed_from == 2
    assert B.params_bytes(resumed) == B.params_bytes(straight)

    first = nkserde.Checkpoint(tmp_path / "h", every=1)
    with pytest.raises(RuntimeError, match="crash"):
        build().run(3, out=None, show_progress=False, callback=[first, B.CrashAt(2)])
    other = build(h=2.0)
    want = operator_leaves(other)
    assert want != operator_leaves(build())  # h=2 really is another operator
    ckpt = nkserde.Checkpoint(tmp_path / "h", resume="force")
    other.run(3, out=None, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == 2
    assert operator_leaves(other) == want  # the template's operator, not the file's


# ------------------------------------------------------- the checkpointed driver


def test_checkpointed_driver_is_the_driver(tmp_path):
    gs = nkserde.checkpointed(B.vmc(), tmp_path / "ckpt", every=2)
    assert isinstance(gs, nk.driver.VMC)
    gs.run(2, out=None, show_progress=False)
    nkserde.save(gs, tmp_path / "gs.nks")
    loaded = nkserde.load(B.vmc(), tmp_path / "gs.nks")
    assert loaded.step_count == 2 and B.params_bytes(loaded) == B.params_bytes(gs)
    with pytest.raises(ValueError, match="already checkpointed"):
        nkserde.checkpointed(gs, tmp_path / "other")


def test_a_checkpointed_driver_has_the_fields_and_fingerprint_of_the_driver(tmp_path):
    # no attribute is added to the driver: the fingerprint reads the
    # driver's fields, and one more (run, last_checkpoint) would be a
    # change that refuses to resume the directories checkpointed() wrote
    from nkserde.checkpoint.fingerprint import fingerprint

    plain = B.vmc()
    gs = nkserde.checkpointed(B.vmc(), tmp_path / "ckpt", every=1)
    assert set(vars(gs)) == set(vars(plain))
    assert fingerprint(gs) == fingerprint(plain)


def test_the_class_of_a_checkpointed_driver_is_not_changed_by_its_runs(tmp_path):
    nkserde.checkpoint.reset_run_numbering()
    gs = nkserde.checkpointed(B.vmc(), tmp_path / "ckpt", every=1)
    other = nkserde.checkpointed(B.vmc(), tmp_path / "other", every=1)
    assert gs.last_checkpoint is None
    made = dict(vars(type(gs)))
    gs.run(1, out=None, show_progress=False)
    assert dict(vars(type(gs))) == made  # the latest Checkpoint is in the driver's record
    assert gs.last_checkpoint.directory == tmp_path / "ckpt" / "run-0"
    assert other.last_checkpoint is None  # each driver its own
    with pytest.raises(AttributeError):
        gs.last_checkpoint = None


def test_two_drivers_share_one_directory(tmp_path):
    nkserde.checkpoint.reset_run_numbering()
    gs = nkserde.checkpointed(B.vmc(), tmp_path / "ckpt", every=1)
    gs.run(2, out=None, show_progress=False)
    te = nkserde.checkpointed(B.tdvp(), tmp_path / "ckpt", every=1)
    te.run(0.02, out=None, show_progress=False)
    assert gs.last_checkpoint.directory.name == "run-0"
    assert te.last_checkpoint.directory.name == "run-1"
    nkserde.checkpoint.reset_run_numbering()  # the script again
    gs = nkserde.checkpointed(B.vmc(), tmp_path / "ckpt", every=1)
    gs.run(2, out=None, show_progress=False)
    te = nkserde.checkpointed(B.tdvp(), tmp_path / "ckpt", every=1)
    te.run(0.02, out=None, show_progress=False)
    assert gs.last_checkpoint.resumed_from == 2 and te.last_checkpoint.resumed_from == 2


@pytest.mark.parametrize("build", ["sr", "vmc_sr"])
def test_a_script_that_runs_one_driver_twice_resumes_both_runs(tmp_path, build):
    """NetKet's tutorials call run() twice on one driver. SR keeps the last
    step's QGT (and VMC_SR its solver's report) on the driver: a cache of
    the first run(), not a choice. Run again, the script resumes the first
    run() (finished: it returns at once, the cache empty) and the second."""

    def script():
        nkserde.checkpoint.reset_run_numbering()
        if build == "sr":
            driver = B.vmc(preconditioner=nk.optimizer.SR(diag_shift=0.01))
        else:
            driver = B.vmc_sr()
        gs = nkserde.checkpointed(driver, tmp_path / "ckpt", every=2)
        gs.run(2, out=None, show_progress=False)
        first = gs.last_checkpoint
        gs.run(2, out=None, show_progress=False)
        return first, gs.last_checkpoint, gs

    script()
    first, second, gs = script()  # the same script again: refused at its second run() before
    assert first.resumed_from == 2 and second.resumed_from == 4 and gs.step_count == 4


# ------------------------------------------------------ messages, early failures


def test_resume_and_fresh_start_are_said(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="nkserde"):
        B.vmc().run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
        B.vmc().run(3, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
    messages = [r.getMessage() for r in caplog.records if r.name == "nkserde"]
    assert any("starting fresh" in m for m in messages), messages
    assert any("resumed VMC from step 2" in m and "step-0000000002.nks" in m for m in messages), messages


@dataclasses.dataclass
class _UnregisteredRuleState:
    moves: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class _RuleState:
    moves: jax.Array


class CountingLocalRule(nk.sampler.rules.LocalRule):
    """A user's rule with a state of its own (a dataclass nkserde does not know)."""

    def init_state(self, sampler, machine, params, key):
        return _RuleState(jnp.zeros((), dtype=jnp.int32))


def test_a_state_that_cannot_be_stored_fails_at_run_start(tmp_path):
    _, hilbert, H = B.system()
    sampler = nk.sampler.MetropolisSampler(hilbert, CountingLocalRule(), n_chains=8)
    vs = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=64, seed=0, sampler_seed=1)
    driver = nk.driver.VMC(H, optax.sgd(1e-2), variational_state=vs)
    with pytest.raises(UnregisteredTypeError, match="cannot be checkpointed.*rule_state.*_RuleState"):
        driver.run(5, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=3))
    assert driver.step_count == 0  # before any step
    assert not (tmp_path / ".lock").exists()


# ------------------------------------------------ a checkpoint outside a resume


def test_load_a_checkpoint_file_or_directory_into_a_driver(tmp_path):
    ckpt = nkserde.Checkpoint(tmp_path / "ckpt", every=2)
    driver = B.vmc()
    driver.run(4, out=None, show_progress=False, callback=ckpt)
    from_file = nkserde.load(B.vmc(), ckpt.path(2))
    assert from_file.step_count == 2
    from_dir = nkserde.load(B.vmc(), tmp_path / "ckpt")
    assert from_dir.step_count == 4 and B.params_bytes(from_dir) == B.params_bytes(driver)
    nkserde.checkpoint.reset_run_numbering()
    gs = nkserde.checkpointed(B.vmc(), tmp_path / "wrapped", every=1)
    gs.run(1, out=None, show_progress=False)
    assert nkserde.load(B.vmc(), tmp_path / "wrapped").step_count == 1  # its only run
    gs.run(1, out=None, show_progress=False)
    with pytest.raises(NkserdeError, match="run-0.*run-1"):
        nkserde.load(B.vmc(), tmp_path / "wrapped")
    assert nkserde.load(B.vmc(), tmp_path / "wrapped" / "run-1").step_count == 2
