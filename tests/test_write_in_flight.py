"""A checkpoint's write in flight (nkserde/checkpoint/persist/saving.py): the
run goes on while its state is copied to the host and written, and the
Saver's one rule says when the run's thread waits for it.

Device arrays are simulated on the CPU: with ``snapshot.HOST_PLATFORMS`` empty,
the snapshot treats the CPU's JAX arrays as a GPU's or TPU's (held, their
copies to the host started and fetched by the write). Nothing is timed: the
write is held back on purpose until the test lets it go."""

from __future__ import annotations

import threading
import time

import jax
import netket as nk
import numpy as np
from netket.utils import struct
import pytest

import builders
import nkserde
from nkserde.saving import snapshot
from nkserde.checkpoint.keep_policy import KeepLatest
from nkserde.checkpoint.persist import background_write, saving
from nkserde.checkpoint.persist.saving import Saver
from nkserde.checkpoint.save_policy import SaveSchedule
from nkserde.checkpoint_files.directory import RunDirectory

EVERY = 4


class Watch(nk.callbacks.AbstractCallback):
    """After the Checkpoint: the parameters at the checkpoint of step
    ``EVERY``, whether its write is in flight at each step's end, and the
    write let go (``release``) once ``steps_held`` steps ended with it in
    flight, and let end before the run goes on (else the next checkpoint
    would do what is left of it, as the rule says)."""

    checkpoint: object = struct.field(pytree_node=False, serialize=False)
    release: threading.Event = struct.field(pytree_node=False, serialize=False)
    steps_held: int = struct.field(pytree_node=False, serialize=False)
    at_snapshot: object = struct.field(pytree_node=False, serialize=False)
    ended_in_flight: list = struct.field(pytree_node=False, serialize=False)

    def __init__(self, checkpoint, release: threading.Event, steps_held: int):
        self.checkpoint, self.release, self.steps_held = checkpoint, release, steps_held
        self.at_snapshot = None
        self.ended_in_flight: list[int] = []

    @property
    def callback_order(self) -> int:
        return 0  # after the Checkpoint (-1000), before the loggers

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == EVERY:  # the Checkpoint took its snapshot just now
            self.at_snapshot = jax.tree.map(np.array, driver.state.parameters)

    def on_step_end(self, step, log_data, driver):
        if self.release.is_set():
            return
        write = self.checkpoint._saver.writer.in_flight
        if write is not None and write.started and not write.done:
            self.ended_in_flight.append(driver.step_count)
        if len(self.ended_in_flight) == self.steps_held:
            self.release.set()
            while not write.done:  # the test's own wait: the background thread ends it
                time.sleep(0.001)


def test_the_run_goes_on_while_its_checkpoint_is_copied_and_written(tmp_path, monkeypatch):
    """The copy of the snapshot's device arrays to the host is held back:
    the run takes its next steps while the copy and the write are in
    flight, its thread never does either, and the checkpoint holds the
    parameters of its own step, not those the run has gone on to."""
    monkeypatch.setattr(snapshot, "HOST_PLATFORMS", frozenset())
    monkeypatch.setattr(saving, "LAG_FLOOR", float("inf"))  # the rule's floor never passes
    release, fetched_by = threading.Event(), []
    fetch = snapshot.OnDevice.fetch

    def held_fetch(self):
        if not fetched_by:  # the first checkpoint's copies, all started before its first fetch
            first_copies_by.extend(copies_started_by)
        fetched_by.append(threading.current_thread().name)
        assert release.wait(300), "the write was never let go"
        return fetch(self)

    monkeypatch.setattr(snapshot.OnDevice, "fetch", held_fetch)
    copies_started_by, first_copies_by = [], []
    start_copy = snapshot.OnDevice.start_copy

    def logged_start_copy(self):
        copies_started_by.append(threading.current_thread().name)
        start_copy(self)

    monkeypatch.setattr(snapshot.OnDevice, "start_copy", logged_start_copy)
    driver = builders.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, every=EVERY, keep=10)
    watch = Watch(ckpt, release, steps_held=3)
    driver.run(2 * EVERY + 2, show_progress=False, callback=[ckpt, watch])

    # the step that took it and the two after it ended with it in flight
    assert watch.ended_in_flight == [EVERY, EVERY + 1, EVERY + 2]
    assert fetched_by[0] == "nkserde-checkpoint"  # the copy held back was the background thread's
    # the run's thread only held the arrays: their copies were the write's to start
    assert first_copies_by and set(first_copies_by) == {"nkserde-checkpoint"}
    assert ckpt.write_lags[0][0] == 0  # no step of its write in the run's thread
    assert ckpt.steps() == [EVERY, 2 * EVERY, 2 * EVERY + 2]
    stored = nkserde.load(builders.vmc(), ckpt.path(EVERY)).state.parameters
    builders.assert_same_leaves(builders.leaves(stored), builders.leaves(watch.at_snapshot))
    builders.assert_differs(watch.at_snapshot, driver.state.parameters)


def test_a_save_starts_every_copy_before_it_waits_for_one(tmp_path, monkeypatch):
    """The copies of a snapshot's device arrays cross together: the write
    starts all of them, then waits for each."""
    monkeypatch.setattr(snapshot, "HOST_PLATFORMS", frozenset())
    events = []
    start_copy, fetch = snapshot.OnDevice.start_copy, snapshot.OnDevice.fetch
    monkeypatch.setattr(snapshot.OnDevice, "start_copy", lambda self: events.append("start") or start_copy(self))
    monkeypatch.setattr(snapshot.OnDevice, "fetch", lambda self: events.append("fetch") or fetch(self))
    driver = builders.vmc()
    nkserde.save(driver, tmp_path / "driver.nks")
    arrays = len(jax.tree.leaves(driver.state.parameters))
    assert events.count("start") == events.count("fetch") >= arrays
    assert events.index("fetch") == events.count("start")  # every start before the first wait
    loaded = nkserde.load(builders.vmc(), tmp_path / "driver.nks")
    builders.assert_same_leaves(builders.leaves(loaded.state.parameters), builders.leaves(driver.state.parameters))


def _steps(log, n=3):
    for i in range(n):
        log.append((i, threading.current_thread().name))
        yield


@pytest.fixture
def starved(monkeypatch):
    """Background writes whose thread never runs a step: a busy node."""
    monkeypatch.setattr(background_write.BackgroundWrite, "run_in_background", lambda self: None)


def test_a_step_end_leaves_a_write_in_flight_alone(tmp_path, starved, monkeypatch):
    monkeypatch.setattr(saving, "LAG_FLOOR", float("inf"))
    saver, log = Saver(RunDirectory(tmp_path), keep=KeepLatest(3), on_write_error="raise"), []
    saver.writer.submit(_steps(log), asynchronous=True)
    saver.step_ended(None)
    assert log == [] and not saver.writer.in_flight.done
    saver.wait()  # the run's end: all of it, in this thread
    assert [name for _, name in log] == [threading.current_thread().name] * 3


def test_a_write_that_falls_behind_is_finished_at_a_step_end(tmp_path, starved, monkeypatch):
    """In flight past the rule's floor (here none) and twice the write
    before it: the run's thread does what is left at the step's end."""
    monkeypatch.setattr(saving, "LAG_FLOOR", 0.0)
    saver, log = Saver(RunDirectory(tmp_path), keep=KeepLatest(3), on_write_error="raise"), []
    saver.writer.submit(_steps(log), asynchronous=True)
    saver.step_ended(None)
    assert saver.writer.in_flight is None  # taken in
    assert [name for _, name in log] == [threading.current_thread().name] * 3
    assert saver.writer.lags == [(3, saver.writer.lags[0][1])]


def test_the_next_checkpoint_waits_for_the_write_in_flight(tmp_path, starved, monkeypatch):
    """Two checkpoints of a run whose background thread never runs: the
    second's save does the first's write before its own snapshot (the
    history log's rows follow on), and both are on disk."""
    monkeypatch.setattr(saving, "LAG_FLOOR", float("inf"))
    driver = builders.vmc()
    ckpt = nkserde.Checkpoint(tmp_path, every=2, keep=10)
    driver.run(4, show_progress=False, callback=ckpt)
    assert ckpt.steps() == [2, 4]
    assert all(steps_in_caller > 0 for steps_in_caller, _ in ckpt.write_lags)


def test_a_background_write_is_priced_from_its_snapshot_to_the_step_it_was_taken_in(tmp_path, starved, monkeypatch):
    """The save schedule is told when each background write started and
    how many steps the run had done when it was taken in (what prices the
    steps it slowed): here the next checkpoint's, two steps on."""
    monkeypatch.setattr(saving, "LAG_FLOOR", float("inf"))
    told = []
    monkeypatch.setattr(SaveSchedule, "write_started", lambda self, now, completed: told.append(("start", completed)))
    monkeypatch.setattr(SaveSchedule, "write_ended", lambda self, now, completed, own: told.append(("end", completed)))
    ckpt = nkserde.Checkpoint(tmp_path, every=2, keep=10)
    builders.vmc().run(5, show_progress=False, callback=ckpt)
    # the checkpoint of step 4 is taken in when the run ends, 5 steps in
    assert told[:4] == [("start", 2), ("end", 4), ("start", 4), ("end", 5)]
