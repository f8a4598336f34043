"""How a checkpoint's arrays cross from a device's memory to the host
(nkserde/saving/host_pace.py): the plan from what earlier writes measured,
the pieces cut and fetched in order, each started by the run's thread at a
step's end, and a checkpointed run whose writes cross in pieces resuming
bit for bit. Device arrays are simulated on the CPU: with
``snapshot.HOST_PLATFORMS`` empty, the snapshot holds the CPU's JAX arrays
as a GPU's or TPU's. Nothing is timed."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import builders
import nkserde
from nkserde.checkpoint.persist import background_write
from nkserde.saving import host_pace, snapshot
from nkserde.saving.host_pace import PIECE_FLOOR, CrossingTimes, Pace

MB = 2**20
STEP = 4.5e-3  # a TPU v5e's step of the benchmarks' rbm-100x1000
RATE = 3e9  # bytes a second of a whole copy there


def measured(rate=RATE) -> CrossingTimes:
    times = CrossingTimes()
    times.measured(Pace(bytes=int(rate), busy=1.0))
    return times


def test_nothing_measured_crosses_whole():
    assert CrossingTimes().plan(121 * MB, 100, STEP, 0.05).piece_bytes == 0
    assert measured().plan(121 * MB, 100, None, 0.05).piece_bytes == 0  # no step measured


def test_a_piece_crosses_within_a_step_and_the_pieces_and_the_rest_within_the_interval():
    pace = measured().plan(121 * MB, 100, STEP, 0.05)
    assert PIECE_FLOOR <= pace.piece_bytes <= host_pace.PIECE_CEILING
    assert pace.piece_bytes / RATE <= STEP * host_pace.PIECE_STEP_SHARE * 1.0001
    pieces = -(-121 * MB // pace.piece_bytes)
    assert pieces + 0.05 / STEP <= host_pace.HOST_SHARE * 100


@pytest.mark.parametrize(
    "steps_between, rest, rate",
    [
        (10, 0.05, RATE),  # too few steps for the pieces: whole
        (100, 0.3, RATE),  # the rest of the write would leave the pieces too few steps
        (100, 0.05, 3e8),  # a slow copy: even the smallest piece would not cross within a step's reads
        (1, 0.0, RATE),  # a checkpoint every step
    ],
)
def test_what_does_not_fit_the_interval_crosses_whole(steps_between, rest, rate):
    assert measured(rate).plan(121 * MB, steps_between, STEP, rest).piece_bytes == 0


def test_small_or_one_row_arrays_cross_whole():
    assert host_pace.rows_per_piece(jnp.zeros((4, 4)), PIECE_FLOOR) == 0
    assert host_pace.rows_per_piece(jnp.zeros((1, 2**20)), PIECE_FLOOR) == 0
    assert host_pace.rows_per_piece(jnp.zeros((1000, 1000), jnp.float32), PIECE_FLOOR) == PIECE_FLOOR // 4000


def test_the_pieces_cross_in_order_each_once_the_runs_thread_started_it():
    """The write's thread cuts the array and waits for each piece's start;
    the run's thread starts one at each step's end; the host array is the
    device's, bit for bit."""
    x = jax.random.normal(jax.random.key(0), (1000, 300))
    holder = snapshot.OnDevice(x)
    pace = Pace(piece_bytes=1000 * 300 * 4 // 7)
    rows = host_pace.rows_per_piece(x, pace.piece_bytes)
    steps = host_pace.crossed(holder, rows, pace)
    events = [next(steps)]
    assert isinstance(events[0], threading.Event) and not events[0].is_set()
    assert holder.held is None  # the whole device array let go once cut
    while True:
        pace.step_ended()  # a step of the run ended
        assert events[-1].is_set()
        try:
            events.append(next(steps))
        except StopIteration:
            break
    assert pace.pieces == len(events) == -(-1000 // rows)
    np.testing.assert_array_equal(holder.held, np.asarray(x))


def test_a_background_write_waits_for_a_piece_a_caller_that_takes_over_does_not():
    """A paced step yields an event: the write's thread waits for it (the
    run's step end); the run's thread, taking the write over (the next
    checkpoint, the run's end), goes on at once."""
    never = threading.Event()
    done = []

    def steps():
        yield never
        done.append(threading.current_thread().name)

    write = background_write.BackgroundWrite(steps())
    thread = background_write.WriteThread("nkserde-test-writer")
    write.start(thread)
    write.finish()  # would never return if the caller waited for the event
    thread.close()
    assert write.done and write.error is None and done == [threading.current_thread().name]


def test_a_run_whose_checkpoints_cross_in_pieces_resumes_bit_for_bit(tmp_path, monkeypatch):
    """A checkpointed run on simulated device arrays, its pieces made small
    enough for its arrays and its rate and steps measured as on the TPU, so
    that its writes after the first cross in pieces: every checkpoint
    loads the parameters of its step, and a rerun resumes to the same end."""
    monkeypatch.setattr(snapshot, "HOST_PLATFORMS", frozenset())
    monkeypatch.setattr(host_pace, "PIECE_FLOOR", 64)
    monkeypatch.setattr(host_pace, "PIECE_CEILING", 256)
    plans = []
    plan = CrossingTimes.plan

    def as_on_a_tpu(self, total_bytes, steps_between, step, rest):
        if self.whole_rate is not None:
            self.whole_rate = RATE
        pace = plan(self, total_bytes, steps_between, STEP, 0.0)
        plans.append(pace)
        return pace

    monkeypatch.setattr(CrossingTimes, "plan", as_on_a_tpu)
    reference = builders.vmc()
    reference.run(50, show_progress=False)
    first = builders.vmc()
    first.run(45, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=20, keep=10))
    assert plans[0].piece_bytes == 0 and any(p.piece_bytes and p.pieces > 1 for p in plans[1:]), plans
    resumed = builders.vmc()
    resumed.run(50, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=20, keep=10))
    builders.assert_same_leaves(builders.leaves(resumed.state.parameters), builders.leaves(reference.state.parameters))
