"""The Checkpoint callback in one process: resume after a crash ends bit
for bit where an uninterrupted run ends; fingerprint, resume modes,
retention, damaged checkpoints, locks, loggers and stateful callbacks."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import netket as nk
import numpy as np
import pytest

import builders as B
from builders import CrashAt
import nkserde
from nkserde.errors import NkserdeError

N_STEPS = 6


class SignalAt(nk.callbacks.AbstractCallback):
    at: int = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, at):
        self.at = at

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == self.at:
            os.kill(os.getpid(), signal.SIGUSR1)


def _energies(log):
    return np.asarray(log.data["Energy"]["Mean"])


@pytest.fixture(scope="module")
def reference():
    driver = B.vmc()
    log = nk.logging.RuntimeLog()
    driver.run(N_STEPS, out=log, show_progress=False)
    return B.params_bytes(driver), _energies(log).tobytes()


def _crash_then_resume(tmp_path, crash_at, **options):
    return B.crash_then_resume(B.vmc, tmp_path, N_STEPS, crash_at, make_out=nk.logging.RuntimeLog, **options)


@pytest.mark.parametrize("async_save", [False, True])
def test_resume_after_crash_is_bit_exact(tmp_path, reference, async_save):
    driver, log, ckpt = _crash_then_resume(tmp_path, crash_at=3, every=2, async_save=async_save)
    assert ckpt.resumed_from == 3  # the crash saved the last completed step
    assert driver.step_count == N_STEPS
    assert B.params_bytes(driver) == reference[0]
    assert _energies(log).tobytes() == reference[1]  # history restored, not duplicated
    assert log.data["Energy"].iters.tolist() == list(range(N_STEPS))
    assert ckpt.steps()[-1] == N_STEPS
    assert ckpt.latest() == ckpt.path(N_STEPS)


def test_variational_state_is_restored_in_place(tmp_path, reference):
    B.vmc().run(3, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
    driver = B.vmc()
    vs = driver.state  # a script keeps this reference
    driver.run(N_STEPS, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
    assert driver.state is vs
    assert B.params_bytes(driver) == reference[0]


def test_finished_run_resumes_to_nothing_to_do(tmp_path, reference):
    B.vmc().run(N_STEPS, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=2))
    files = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("step-*.nks")}
    calls = []

    class Count(nk.callbacks.AbstractCallback):
        def on_step_start(self, step, log_data, driver):
            calls.append(step)

    driver = B.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, every=2)
    driver.run(N_STEPS, out=None, show_progress=False, callback=[ckpt, Count()])
    assert ckpt.resumed_from == N_STEPS and calls == []
    assert B.params_bytes(driver) == reference[0]
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("step-*.nks")} == files


class RunEnds(nk.callbacks.AbstractCallback):
    """Records the on_run_end calls NetKet (or the Checkpoint) makes."""

    calls: list = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self):
        self.calls = []

    def on_run_end(self, step, driver):
        self.calls.append(driver.step_count)


def test_signal_checkpoints_and_ends_the_program(tmp_path, reference):
    first = B.vmc()
    interrupted = nkserde.Checkpoint(tmp_path, every=100)
    ends = RunEnds()
    log = nk.logging.RuntimeLog()
    with pytest.raises(SystemExit) as exited:
        first.run(N_STEPS, out=log, show_progress=False, callback=[interrupted, SignalAt(2), ends])
    # the program ends with EX_TEMPFAIL, so nothing after run() starts
    # from the unfinished state; the other callbacks were finished first
    assert exited.value.code == nkserde.checkpoint.EXIT_INTERRUPTED == 75
    assert ends.calls == [3]
    assert interrupted.interrupted == "SIGUSR1"
    assert log.data["Energy"].iters.tolist() == [0, 1, 2]
    # the step in progress finished and was checkpointed
    assert first.step_count == 3
    assert nkserde.Checkpoint(tmp_path).steps() == [3]
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handlers restored
    driver = B.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, every=100)
    driver.run(N_STEPS, out=None, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == 3 and ckpt.interrupted is None
    assert B.params_bytes(driver) == reference[0]


def test_fingerprint_mismatch_lists_changes(tmp_path):
    B.vmc().run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
    changed = B.vmc()
    changed.state.n_samples = 128
    with pytest.raises(NkserdeError, match=r"n_samples: 64 -> 128"):
        changed.run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path))
    assert not (tmp_path / ".lock").exists()
    assert nkserde.Checkpoint(tmp_path).steps() == [1, 2]  # nothing was overwritten

    forced = B.vmc()
    forced.state.n_samples = 128
    ckpt = nkserde.Checkpoint(tmp_path, resume="force", every=1)
    forced.run(3, out=None, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == 2 and forced.step_count == 3
    assert json.loads((tmp_path / "fingerprint.json").read_text())["n_samples"] == "128"


def test_resume_never_moves_old_checkpoints_aside(tmp_path):
    B.vmc().run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
    driver = B.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, resume="never", every=1)
    driver.run(1, out=None, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from is None and driver.step_count == 1
    (old,) = tmp_path.glob("previous-*")
    assert sorted(p.name for p in old.iterdir()) == ["fingerprint.json", "step-0000000001.nks", "step-0000000002.nks"]
    assert ckpt.steps() == [1]


def test_resume_must_fails_without_checkpoint(tmp_path):
    with pytest.raises(NkserdeError, match="nothing to resume|no checkpoint"):
        B.vmc().run(1, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, resume="must"))


def test_retention_keeps_newest_and_every_kth(tmp_path):
    ckpt = nkserde.Checkpoint(
        tmp_path, every=1, keep=nkserde.KeepLatest(2) | nkserde.KeepMultiples(4), async_save=False
    )
    B.vmc().run(9, out=None, show_progress=False, callback=ckpt)
    assert ckpt.steps() == [4, 8, 9]


def test_damaged_newest_checkpoint_is_skipped(tmp_path, reference):
    B.vmc().run(4, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=2))
    ckpt = nkserde.Checkpoint(tmp_path, every=2)
    newest = ckpt.path(4)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    driver, log = B.vmc(), nk.logging.RuntimeLog()
    with pytest.warns(UserWarning, match=r"skipping checkpoint .*step-0000000004"):
        driver.run(N_STEPS, out=log, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == 2
    assert B.params_bytes(driver) == reference[0]


def test_lock(tmp_path):
    lock = tmp_path / ".lock"
    lock.write_text(f"{socket.gethostname()} {os.getppid()}")  # a live process
    with pytest.raises(NkserdeError, match=f"in use by process {os.getppid()}"):
        B.vmc().run(1, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path))
    assert lock.exists()
    dead = 2**22 + 12345
    while True:  # find a pid that does not exist
        try:
            os.kill(dead, 0)
            dead += 1
        except ProcessLookupError:
            break
    lock.write_text(f"{socket.gethostname()} {dead}")  # stale: taken over
    driver = B.vmc()
    driver.run(1, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path))
    assert driver.step_count == 1 and not lock.exists()


def test_stateful_callbacks_are_restored(tmp_path):
    def make():
        return nk.callbacks.EarlyStopping(min_delta=1e9, patience=100, monitor="mean")

    straight = make()
    B.vmc().run(N_STEPS, out=None, show_progress=False, callback=straight)

    first = make()
    with pytest.raises(RuntimeError):
        B.vmc().run(
            N_STEPS, out=None, show_progress=False, callback=[nkserde.Checkpoint(tmp_path, every=1), first, CrashAt(4)]
        )
    resumed = make()
    B.vmc().run(N_STEPS, out=None, show_progress=False, callback=[nkserde.Checkpoint(tmp_path, every=1), resumed])
    for field in ("_best_val", "_best_iter", "_best_patience_counter"):
        assert getattr(resumed, field) == getattr(straight, field), field
    assert straight._best_patience_counter == N_STEPS - 1  # the state really evolved


def test_checkpointed_driver_resumes_netkets_own_jsonlog(tmp_path):
    prefix = str(tmp_path / "out" / "log")
    straight = nkserde.checkpointed(B.vmc(), tmp_path / "a")
    straight.run(N_STEPS, out=prefix + "-ref", show_progress=False)
    reference = json.loads(open(prefix + "-ref.log").read())

    first = nkserde.checkpointed(B.vmc(), tmp_path / "b", every=2)
    with pytest.raises(RuntimeError):
        first.run(N_STEPS, out=prefix, show_progress=False, callback=CrashAt(5))
    nkserde.checkpoint.reset_run_numbering()  # the script starts again
    second = nkserde.checkpointed(B.vmc(), tmp_path / "b", every=2)
    second.run(N_STEPS, out=prefix, show_progress=False)
    assert second.last_checkpoint.resumed_from == 5
    resumed = json.loads(open(prefix + ".log").read())
    assert resumed["Energy"]["iters"] == list(range(N_STEPS))
    assert resumed["Energy"]["Mean"] == reference["Energy"]["Mean"]
    assert B.params_bytes(second) == B.params_bytes(straight)


def test_tdvp_resume_uses_time(tmp_path):
    def make():
        return B.tdvp("RK23", rtol=1e-4)

    straight = make()
    log = nk.logging.RuntimeLog()
    straight.run(0.05, out=log, show_progress=False)

    first = make()
    with pytest.raises(RuntimeError):
        first.run(
            0.05,
            out=nk.logging.RuntimeLog(),
            show_progress=False,
            callback=[nkserde.Checkpoint(tmp_path, every=1), CrashAt(3)],
        )
    resumed, rlog = make(), nk.logging.RuntimeLog()
    ckpt = nkserde.Checkpoint(tmp_path, every=1)
    resumed.run(0.05, out=rlog, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == 3
    assert float(resumed.t) == float(straight.t) and resumed.step_count == straight.step_count
    assert B.params_bytes(resumed) == B.params_bytes(straight)
    key = "Generator"
    assert np.asarray(rlog.data[key]["Mean"]).tobytes() == np.asarray(log.data[key]["Mean"]).tobytes()


def test_state_log_keeps_its_states_and_continues_numbering(tmp_path):
    def log(name):
        return nk.logging.StateLog(str(tmp_path / name), save_every=1)

    B.vmc().run(5, out=log("ref"), show_progress=False)
    with pytest.raises(RuntimeError):
        B.vmc().run(
            5, out=log("run"), show_progress=False, callback=[nkserde.Checkpoint(tmp_path / "ck", every=2), CrashAt(3)]
        )
    # "write" mode would wipe the folder at its first save: a resumed log must not
    B.vmc().run(5, out=log("run"), show_progress=False, callback=nkserde.Checkpoint(tmp_path / "ck", every=2))
    ref = sorted(p.name for p in (tmp_path / "ref").iterdir())
    assert ref == [f"{i}.mpack" for i in range(5)]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ref
    for name in ref:
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()


def test_hdf5_log_is_cut_back_to_the_checkpoint_and_appended(tmp_path):
    import h5py  # in the test extra

    def read(path):
        with h5py.File(path, "r") as f:
            out = {}
            f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
            return out

    B.vmc().run(N_STEPS, out=nk.logging.HDF5Log(str(tmp_path / "ref")), show_progress=False)
    with pytest.raises(RuntimeError):
        B.vmc().run(
            N_STEPS,
            out=nk.logging.HDF5Log(str(tmp_path / "run")),
            show_progress=False,
            callback=[nkserde.Checkpoint(tmp_path / "ck", every=2), CrashAt(5)],
        )
    # mode "write" (the default) would truncate the file: the resumed log appends instead
    ckpt = nkserde.Checkpoint(tmp_path / "ck", every=2)
    B.vmc().run(N_STEPS, out=nk.logging.HDF5Log(str(tmp_path / "run")), show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == 5
    ref, run = read(tmp_path / "ref.h5"), read(tmp_path / "run.h5")
    assert sorted(ref) == sorted(run)
    for name in ref:
        if "wallclock" in name:
            continue
        assert np.asarray(ref[name]).tobytes() == np.asarray(run[name]).tobytes(), name
    assert run["data/Energy/iter"].tolist() == list(range(N_STEPS))  # each step once


def test_loading_an_hdf5_log_leaves_its_file_alone_until_a_run_resumes(tmp_path):
    import h5py  # in the test extra

    from nkserde.netket.loggers import resume_files

    def rows(path):
        with h5py.File(path, "r") as f:
            return f["data/Energy/iter"].shape[0]

    log = nk.logging.HDF5Log(str(tmp_path / "run"))
    B.vmc().run(3, out=log, show_progress=False)
    nkserde.save(log, tmp_path / "log.nks")  # the "checkpoint"
    with h5py.File(tmp_path / "run.h5", "a") as f:  # two steps logged after it
        for name in ("data/Energy/iter", "data/Energy/Mean"):
            f[name].resize(5, axis=0)
    assert rows(tmp_path / "run.h5") == 5
    live = nk.logging.HDF5Log(str(tmp_path / "run"))
    loaded = nkserde.load(live, tmp_path / "log.nks")
    assert rows(tmp_path / "run.h5") == 5  # a load is not a resume: the file is untouched
    resume_files(live, loaded)
    assert rows(tmp_path / "run.h5") == 3


def test_tensorboard_log_purges_steps_after_the_checkpoint(tmp_path):
    first = nk.logging.TensorBoardLog(logdir=str(tmp_path / "tb"))
    with pytest.raises(RuntimeError):
        B.vmc().run(
            N_STEPS, out=first, show_progress=False, callback=[nkserde.Checkpoint(tmp_path / "ck", every=2), CrashAt(5)]
        )
    second = nk.logging.TensorBoardLog(logdir=str(tmp_path / "tb"))
    B.vmc().run(N_STEPS, out=second, show_progress=False, callback=nkserde.Checkpoint(tmp_path / "ck", every=2))
    assert second._init_kwargs["purge_step"] == 5  # the checkpoint had logged steps 0..4


def _crash_then_resume_logging_to(tmp_path, make_logger, between=lambda: None):
    """A run that logs to ``make_logger()`` crashes at the start of step 3
    (checkpoint of step 3 written); ``between()`` ends what a dying process
    would end; the same script resumes with a fresh logger. Returns both
    loggers."""
    first_log = make_logger()
    with pytest.raises(RuntimeError, match="crash"):
        B.vmc().run(
            N_STEPS,
            out=first_log,
            show_progress=False,
            callback=[nkserde.Checkpoint(tmp_path / "ckpt", every=2), CrashAt(3)],
        )
    between()
    second_log = make_logger()
    ckpt = nkserde.Checkpoint(tmp_path / "ckpt", every=2)
    B.vmc().run(N_STEPS, out=second_log, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == 3
    return first_log, second_log


def test_mlflow_log_continues_the_same_tracking_run(tmp_path, reference, monkeypatch):
    """Against mlflow's file store: one run in the experiment, holding every
    step once, with the uninterrupted run's energies."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 prefers a database
    first, second = _crash_then_resume_logging_to(
        tmp_path, lambda: nk.logging.MLFlowLog(experiment_name="ising", save_params=False), between=mlflow.end_run
    )  # what the killed process's exit does
    run_id = first._run.info.run_id
    assert second._run.info.run_id == run_id
    mlflow.end_run()
    client = mlflow.tracking.MlflowClient()
    experiment = client.get_experiment_by_name("ising")
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [run_id]
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "Energy.Mean"))
    assert [step for step, _ in history] == list(range(N_STEPS))
    assert np.asarray([v for _, v in history]).tobytes() == reference[1]


def _finish_wandb_run():
    import wandb

    wandb.finish()
    # wandb names an offline run directory by the second it starts and the
    # run id, and appends "-1" when the two runs share both: start the
    # resumed run in another second
    time.sleep(1.05)


def test_wandb_log_continues_the_same_tracking_run(tmp_path, monkeypatch):
    """wandb in offline mode: the resumed logger resumes the run with the
    interrupted run's id (both offline run directories carry it)."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    first, second = _crash_then_resume_logging_to(
        tmp_path,
        lambda: nk.logging.WandbLog(project="ising", save_params=False, save_final_state=False),
        between=_finish_wandb_run,
    )
    run_id = first._run.id
    assert second._run.id == run_id
    assert second._old_step == N_STEPS - 1
    wandb.finish()
    runs = sorted(p.name for p in (tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.endswith(f"-{run_id}") for name in runs)


def test_background_snapshot_copies_what_the_run_can_change():
    """An asynchronous checkpoint's host snapshot references JAX buffers
    (immutable) and copies numpy memory the run may change in place (numpy
    sampler chains, logger histories), read-only flag or not."""
    import jax.numpy as jnp

    from nkserde.saving.snapshot import private_copy as _host_copy

    jax_view = np.asarray(jnp.arange(4.0))
    owned = np.arange(4.0)
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    snapshot = _host_copy({"jax": jax_view, "owned": owned, "read_only": [read_only]})
    if type(jax_view.base).__name__ == "PyCapsule":
        # JAX 0.7 hands numpy float64 buffers through an opaque capsule:
        # nothing shows the memory is a JAX array's, so it is copied
        assert not np.shares_memory(jax_view, snapshot["jax"])
        np.testing.assert_array_equal(jax_view, snapshot["jax"])
    else:
        assert snapshot["jax"] is jax_view
    for before, after in ((owned, snapshot["owned"]), (read_only, snapshot["read_only"][0])):
        assert not np.shares_memory(before, after)
        np.testing.assert_array_equal(before, after)


# Makes Checkpoints (and a checkpointed driver), then runs one: what the
# process's compilation cache, signal handlers and files are at each point.
CONSTRUCTORS = """
import json, signal, sys
from pathlib import Path
import jax, builders, nkserde
def state():
    handler = str(signal.getsignal(signal.SIGTERM))
    return [jax.config.jax_compilation_cache_dir, handler, Path(sys.argv[1]).exists()]
before = state()
nkserde.Checkpoint(sys.argv[1], every=1)
nkserde.Checkpoint(sys.argv[1], every=1, compile_cache=sys.argv[2])
driver = nkserde.checkpointed(builders.vmc(), sys.argv[1], every=1)
made = state()
driver.run(1, out=None, show_progress=False)
print(json.dumps([before, made, state()]))
"""


def test_making_a_checkpoint_changes_nothing_in_the_process_its_run_does(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).parent
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    environ.update(
        {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    )
    command = [sys.executable, "-c", CONSTRUCTORS, str(tmp_path / "ckpt"), str(tmp_path / "mine")]
    done = subprocess.run(command, capture_output=True, text=True, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    before, made, ran = json.loads(done.stdout.strip().splitlines()[-1])
    # no cache set, no handler installed, no directory made by a constructor
    assert made == before and before[2] is False
    # the run set the default cache (compile_cache="auto") at its start, and put the handlers back
    assert ran[0] is not None and Path(ran[0]).is_relative_to(tmp_path / "xdg" / "nkserde" / "jax")
    assert ran[1] == before[1] and ran[2] is True
    assert not (tmp_path / "mine").exists()  # the Checkpoint that would have used it never ran


def test_a_run_resumed_on_another_platform_goes_on_and_says_so(tmp_path, caplog):
    """A checkpoint records the platform its run computed on; written on a
    TPU (its metadata says so here), it resumes on this CPU, and the resume
    says in one line that the continuation is not bit for bit what either
    platform alone computes."""
    first = nkserde.Checkpoint(tmp_path, every=2, async_save=False)
    B.vmc().run(4, show_progress=False, callback=first)
    assert nkserde.info(first.path(4))["platform"] == "cpu"
    B.rewrite_header(first.path(4), lambda header: header["meta"].update(platform="tpu"))
    caplog.clear()
    again = nkserde.Checkpoint(tmp_path, every=2, async_save=False)
    B.vmc().run(6, show_progress=False, callback=again)
    assert again.resumed_from == 4
    lines = [r.getMessage() for r in caplog.records if "resumed VMC from step 4" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith(
        "; written on tpu, continued on cpu: the continuation is not bit for bit what either platform alone computes"
    ), lines
