"""The Checkpoint callback in one process: resume after a crash ends bit
for bit where an uninterrupted run ends; fingerprint, resume modes,
retention, damaged checkpoints, locks, loggers and stateful callbacks."""

from __future__ import annotations

import json
import os
import signal
import socket

import netket as nk
import numpy as np
import pytest

import builders as B
import nkserde
from nkserde.errors import NkserdeError

N_STEPS = 6


class CrashAt(nk.callbacks.AbstractCallback):
    """Raises at the start of step ``at``, like a job killed between steps."""

    at: int = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, at):
        self.at = at

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == self.at:
            raise RuntimeError(f"crash at {self.at}")


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
    first = B.vmc()
    with pytest.raises(RuntimeError, match="crash"):
        first.run(N_STEPS, out=nk.logging.RuntimeLog(), show_progress=False,
                  callback=[nkserde.Checkpoint(tmp_path, **options), CrashAt(crash_at)])
    ckpt = nkserde.Checkpoint(tmp_path, **options)
    driver, log = B.vmc(), nk.logging.RuntimeLog()
    driver.run(N_STEPS, out=log, show_progress=False, callback=ckpt)
    return driver, log, ckpt


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


def test_signal_checkpoints_and_stops_cleanly(tmp_path, reference):
    first = B.vmc()
    interrupted = nkserde.Checkpoint(tmp_path, every=100)
    first.run(N_STEPS, out=None, show_progress=False, callback=[interrupted, SignalAt(2)])
    assert interrupted.interrupted == "SIGUSR1"
    # the step in progress finished, was checkpointed, and the run returned
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
    assert sorted(p.name for p in old.iterdir()) == ["fingerprint.json", "step-0000000001.nks",
                                                     "step-0000000002.nks"]
    assert ckpt.steps() == [1]


def test_resume_must_fails_without_checkpoint(tmp_path):
    with pytest.raises(NkserdeError, match="nothing to resume|no checkpoint"):
        B.vmc().run(1, out=None, show_progress=False,
                    callback=nkserde.Checkpoint(tmp_path, resume="must"))


def test_retention_keeps_newest_and_every_kth(tmp_path):
    ckpt = nkserde.Checkpoint(tmp_path, every=1, keep=2, keep_every=4, async_save=False)
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
        B.vmc().run(N_STEPS, out=None, show_progress=False,
                    callback=[nkserde.Checkpoint(tmp_path, every=1), first, CrashAt(4)])
    resumed = make()
    B.vmc().run(N_STEPS, out=None, show_progress=False,
                callback=[nkserde.Checkpoint(tmp_path, every=1), resumed])
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
        first.run(0.05, out=nk.logging.RuntimeLog(), show_progress=False,
                  callback=[nkserde.Checkpoint(tmp_path, every=1), CrashAt(3)])
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
        B.vmc().run(5, out=log("run"), show_progress=False,
                    callback=[nkserde.Checkpoint(tmp_path / "ck", every=2), CrashAt(3)])
    # "write" mode would wipe the folder at its first save: a resumed log must not
    B.vmc().run(5, out=log("run"), show_progress=False,
                callback=nkserde.Checkpoint(tmp_path / "ck", every=2))
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
        B.vmc().run(N_STEPS, out=nk.logging.HDF5Log(str(tmp_path / "run")), show_progress=False,
                    callback=[nkserde.Checkpoint(tmp_path / "ck", every=2), CrashAt(5)])
    # mode "write" (the default) would truncate the file: the resumed log appends instead
    ckpt = nkserde.Checkpoint(tmp_path / "ck", every=2)
    B.vmc().run(N_STEPS, out=nk.logging.HDF5Log(str(tmp_path / "run")), show_progress=False,
                callback=ckpt)
    assert ckpt.resumed_from == 5
    ref, run = read(tmp_path / "ref.h5"), read(tmp_path / "run.h5")
    assert sorted(ref) == sorted(run)
    for name in ref:
        if "wallclock" in name:
            continue
        assert np.asarray(ref[name]).tobytes() == np.asarray(run[name]).tobytes(), name
    assert run["data/Energy/iter"].tolist() == list(range(N_STEPS))  # each step once


def test_tensorboard_log_purges_steps_after_the_checkpoint(tmp_path):
    first = nk.logging.TensorBoardLog(logdir=str(tmp_path / "tb"))
    with pytest.raises(RuntimeError):
        B.vmc().run(N_STEPS, out=first, show_progress=False,
                    callback=[nkserde.Checkpoint(tmp_path / "ck", every=2), CrashAt(5)])
    second = nk.logging.TensorBoardLog(logdir=str(tmp_path / "tb"))
    B.vmc().run(N_STEPS, out=second, show_progress=False,
                callback=nkserde.Checkpoint(tmp_path / "ck", every=2))
    assert second._init_kwargs["purge_step"] == 5  # the checkpoint had logged steps 0..4


@pytest.mark.parametrize("cls", [nk.logging.MLFlowLog, nk.logging.WandbLog])
def test_tracking_loggers_continue_the_same_run(cls):
    """mlflow and wandb are not installed here (their constructors import
    them), so this tests the state round trip on loggers built without
    __init__, with the attributes NetKet 3.23 sets."""
    from types import SimpleNamespace

    def make(run):
        log = cls.__new__(cls)
        for name, value in {"_run": run, "_run_id": None, "_old_step": 0,
                            "_steps_since_last_params": 0}.items():
            object.__setattr__(log, name, value)
        return log

    live = make(SimpleNamespace(info=SimpleNamespace(run_id="abc123"), id="abc123"))
    object.__setattr__(live, "_old_step", 41)
    object.__setattr__(live, "_steps_since_last_params", 3)
    restored = nkserde.from_state_dict(make(None), nkserde.state_dict(live))
    assert (restored._run_id, restored._old_step, restored._steps_since_last_params) == ("abc123", 41, 3)
