"""The Checkpoint when the disk fails: a full disk or a vanished directory
costs the checkpoints that could not be written, never the last good one,
and (by default) not the run; a read error while resuming falls back to
the previous checkpoint. A value no file can hold is no failure of the
disk: it stops the run."""

from __future__ import annotations

import errno
import os
import shutil

import netket as nk
import numpy as np
import pytest

import builders as B
import nkserde
import nkserde.format.reader as reader
from nkserde.errors import NkserdeError, UnregisteredTypeError

N_STEPS = 6


@pytest.fixture(scope="module")
def reference():
    driver = B.vmc()
    driver.run(N_STEPS, show_progress=False)
    return B.params_bytes(driver)


@pytest.fixture
def full_disk_at(monkeypatch):
    """A set of steps whose checkpoints cannot be published: the rename
    fails with ENOSPC (the writer removes the temporary file)."""
    failing = set()
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        name = os.path.basename(os.fspath(dst))
        if any(name == f"step-{s:010d}.nks" for s in failing):
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return failing


@pytest.mark.parametrize("async_save", [False, True])
def test_a_full_disk_costs_those_checkpoints_not_the_run_nor_the_last_good_one(
    tmp_path, full_disk_at, reference, async_save
):
    full_disk_at.update({4, 6})
    ckpt = nkserde.Checkpoint(tmp_path, every=2, keep=1, async_save=async_save)
    driver = B.vmc()
    with pytest.warns(UserWarning, match="No space left on device") as caught:
        driver.run(N_STEPS, callback=ckpt, show_progress=False)
    failures = [str(w.message) for w in caught if "No space left" in str(w.message)]
    assert len(failures) == 2  # one warning per failed checkpoint
    assert "step-0000000004.nks" in failures[0] and "step-0000000006.nks" in failures[1]
    assert "step-0000000002.nks is the newest checkpoint" in failures[1]
    assert driver.step_count == N_STEPS
    # keep=1, yet step 2 stays: nothing newer was written and verified
    assert ckpt.steps() == [2]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".nkserde-tmp")]

    # the same script again, with room on the disk: resumes from step 2 and
    # ends where the uninterrupted run ends
    full_disk_at.clear()
    resumed = B.vmc()
    again = nkserde.Checkpoint(tmp_path, every=2, keep=1, async_save=async_save)
    resumed.run(N_STEPS, callback=again, show_progress=False)
    assert again.resumed_from == 2
    assert B.params_bytes(resumed) == reference
    assert again.steps() == [6]


def test_on_write_error_raise_stops_the_run_and_keeps_the_last_good(tmp_path, full_disk_at):
    full_disk_at.add(4)
    ckpt = nkserde.Checkpoint(tmp_path, every=2, on_write_error="raise", async_save=False)
    driver = B.vmc()
    with pytest.raises(NkserdeError, match=r"step-0000000004\.nks failed: .*No space left"):
        driver.run(N_STEPS, callback=ckpt, show_progress=False)
    assert ckpt.steps() == [2]
    assert nkserde.load(B.vmc(), ckpt.path(2)).step_count == 2


class RemoveDirectoryAt(nk.callbacks.AbstractCallback):
    """Removes ``checkpoint``'s directory at the start of step ``at``, once
    its checkpoint in flight is written (a directory removed under a write
    in flight is another case)."""

    at: int = nk.utils.struct.field(pytree_node=False, serialize=False)
    checkpoint: object = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, at, checkpoint):
        self.at, self.checkpoint = at, checkpoint

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == self.at:
            self.checkpoint.wait()
            shutil.rmtree(self.checkpoint.directory)


class LogsText(nk.callbacks.AbstractCallback):
    """Logs an array of strings each step: a column no file can hold."""

    def on_compute_update_end(self, step, log_data, driver):
        log_data["note"] = np.array(["abc", "de"])


@pytest.mark.parametrize("async_save", [False, True])
def test_a_value_no_file_can_hold_stops_the_run_whatever_on_write_error_says(tmp_path, async_save):
    # every later checkpoint would fail as the first: on_write_error="warn" would lose them all
    ckpt = nkserde.Checkpoint(tmp_path, every=2, async_save=async_save, on_write_error="warn")
    driver = B.vmc()
    with pytest.raises(
        UnregisteredTypeError, match=r"^loggers/RuntimeLog#0/history/\d+/columns/value: arrays of dtype <U"
    ):
        driver.run(N_STEPS, out=nk.logging.RuntimeLog(), callback=[ckpt, LogsText()], show_progress=False)
    assert driver.step_count < N_STEPS
    assert ckpt.steps() == []


def test_a_vanished_directory_warns_and_the_run_goes_on(tmp_path):
    directory = tmp_path / "ckpt"
    ckpt = nkserde.Checkpoint(directory, every=2, async_save=True)
    driver = B.vmc()
    with pytest.warns(UserWarning, match="ckpt") as caught:
        driver.run(N_STEPS, callback=[RemoveDirectoryAt(3, ckpt), ckpt], show_progress=False)
    failures = [str(w.message) for w in caught if "failed" in str(w.message)]
    assert len(failures) == 2  # steps 4 and 6
    assert all("there is no checkpoint yet" in m for m in failures)
    assert driver.step_count == N_STEPS


def test_a_read_error_while_resuming_falls_back_to_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt = nkserde.Checkpoint(tmp_path, every=2, async_save=False)
    B.vmc().run(N_STEPS - 2, callback=ckpt, show_progress=False)
    assert ckpt.steps() == [2, 4]
    broken = ckpt.path(4)
    real_open = open

    class FailingReads:
        """A file whose reads fail with EIO, as on a failing disk."""

        def __init__(self, f):
            self._f = f

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

        def read(self, *args):
            raise OSError(errno.EIO, "Input/output error", str(broken))

        readinto = read

    def failing_open(path, *args, **kwargs):
        f = real_open(path, *args, **kwargs)
        return FailingReads(f) if os.fspath(path) == os.fspath(broken) else f

    monkeypatch.setattr(reader, "open", failing_open, raising=False)
    again = nkserde.Checkpoint(tmp_path, every=2, async_save=False)
    driver = B.vmc()
    with pytest.warns(UserWarning, match=r"skipping checkpoint .*step-0000000004\.nks.*Input/output error"):
        driver.run(N_STEPS, callback=again, show_progress=False)
    assert again.resumed_from == 2
    assert driver.step_count == N_STEPS


def test_bad_on_write_error_is_refused(tmp_path):
    with pytest.raises(ValueError, match="on_write_error"):
        nkserde.Checkpoint(tmp_path, on_write_error="ignore")
