"""nkserde.checkpoint.persist.background_write: one write in flight, errors
raised at the next call, a lagging write finished by the caller."""

import threading
import time

import pytest

from nkserde.checkpoint.persist.background_write import BackgroundWrite, CheckpointWriter, WriteThread
from nkserde.errors import NkserdeError


def _steps(log, name, n=3, fail_at=None, gate=None):
    for i in range(n):
        if gate is not None:
            gate.wait()
        if i == fail_at:
            raise OSError(28, "No space left on device")
        log.append((name, i, threading.current_thread().name))
        yield


def test_synchronous_submit_runs_every_step_in_the_caller():
    log = []
    writer = CheckpointWriter("dir")
    writer.submit(_steps(log, "a"), asynchronous=False)
    assert [(n, i) for n, i, _ in log] == [("a", 0), ("a", 1), ("a", 2)]
    assert {t for *_, t in log} == {threading.current_thread().name}
    assert writer.lags == []  # not a background write


def test_background_write_finishes_and_records_its_lag():
    log = []
    writer = CheckpointWriter("dir")
    writer.submit(_steps(log, "a"), asynchronous=True)
    writer.wait()
    assert [(n, i) for n, i, _ in log] == [("a", 0), ("a", 1), ("a", 2)]
    assert len(writer.lags) == 1 and writer.lags[0][1] >= 0


def _on_thread(threads, n=2):
    for _ in range(n):
        threads.append(threading.current_thread())
        yield


def _background(writer, steps):
    """Submits ``steps`` and lets the background thread do all of them."""
    writer.submit(steps, asynchronous=True)
    while not writer.in_flight.done:
        time.sleep(0.005)
    writer.wait()


def test_a_writer_runs_all_its_writes_on_one_thread_until_closed():
    """Handing a write to a thread that waits for it costs a queue's put;
    starting a thread per write made the run wait for its start (1-4 ms on
    a TPU host, up to 100 ms on two busy cores)."""
    threads = []
    writer = CheckpointWriter("dir")
    for _ in range(3):
        _background(writer, _on_thread(threads))
    assert len(threads) == 6 and len(set(threads)) == 1
    thread = threads[0]
    assert thread is not threading.current_thread() and thread.is_alive()  # waits for the next write
    writer.close()
    thread.join(60)
    assert not thread.is_alive()
    _background(writer, _on_thread(threads))  # a write after close: a new thread
    assert threads[-1] is not thread and threads[-1] is not threading.current_thread()
    writer.close()


class _HeldAfterOneStep(BackgroundWrite):
    """A background write whose thread, after its first step, waits (outside
    the write's lock) until ``release`` is set: a thread starved on a busy
    node."""

    def __init__(self, steps, took_one, release):
        super().__init__(steps)
        self.took_one, self.release = took_one, release

    def _advance(self, in_caller):
        more = super()._advance(in_caller)
        if not in_caller and self.steps_in_background == 1 and not self.release.is_set():
            self.took_one.set()
            self.release.wait()
        return more


@pytest.mark.timeout(120)  # finish() that only joined the starved thread would hang here
def test_a_lagging_background_write_is_finished_by_the_caller():
    log, took_one, release = [], threading.Event(), threading.Event()
    main = threading.current_thread().name

    def steps():
        for i in range(3):
            log.append((i, threading.current_thread().name))
            if threading.current_thread().name == main and i == 2:
                release.set()  # the caller did the rest: the starved thread may go on (and stop)
            yield

    thread = WriteThread("starved")
    write = _HeldAfterOneStep(steps(), took_one, release).start(thread)
    assert took_one.wait(60)
    write.finish()
    thread.close()
    assert write.done and write.error is None
    assert (write.steps_in_background, write.steps_in_caller) == (1, 2)
    assert [name == main for _, name in log] == [False, True, True]


def test_at_most_one_write_in_flight():
    log, gate = [], threading.Event()
    writer = CheckpointWriter("dir")
    writer.submit(_steps(log, "a", gate=gate), asynchronous=True)
    gate.set()
    writer.submit(_steps(log, "b"), asynchronous=True)  # waits for "a" first
    writer.wait()
    assert [n for n, _, _ in log] == ["a", "a", "a", "b", "b", "b"]


def test_an_asynchronous_error_is_raised_once_at_the_next_call():
    writer = CheckpointWriter("ckpt-dir")
    writer.submit(_steps([], "a", fail_at=1), asynchronous=True)
    writer.wait()
    assert isinstance(writer.error, OSError)
    with pytest.raises(NkserdeError, match="ckpt-dir: writing a checkpoint failed: .*No space left"):
        writer.raise_error()
    writer.raise_error()  # once only
    assert writer.error is None


def test_a_synchronous_error_is_raised_by_submit():
    writer = CheckpointWriter("ckpt-dir")
    with pytest.raises(NkserdeError, match="No space left"):
        writer.submit(_steps([], "a", fail_at=0), asynchronous=False)


def test_discard_error_forgets_it():
    writer = CheckpointWriter("d")
    writer.submit(_steps([], "a", fail_at=0), asynchronous=True)
    writer.wait()
    assert isinstance(writer.discard_error(), OSError)
    writer.raise_error()  # nothing left to raise


def test_keyboard_interrupt_in_a_step_ends_the_write_and_propagates():
    def steps():
        yield
        raise KeyboardInterrupt

    write = BackgroundWrite(steps())
    with pytest.raises(KeyboardInterrupt):
        write.finish()
    assert write.done


def _burning(cpu_seconds, n=3):
    """Steps that each use ``cpu_seconds`` of their thread's CPU time."""
    import time

    for _ in range(n):
        until = time.thread_time() + cpu_seconds
        while time.thread_time() < until:
            pass
        yield


def test_the_cpu_a_background_write_used_is_counted_for_the_schedule():
    # every=auto prices an asynchronous checkpoint at its snapshot, the
    # caller's wait and this CPU time: a run whose steps fill every core
    # loses it (the 1-s-step benchmark overran its 1% budget sixfold without it)
    writer = CheckpointWriter("dir")
    writer.submit(_burning(0.02), asynchronous=True)
    while not writer._write.done:  # let the background thread do every step
        time.sleep(0.005)
    writer.wait()
    assert writer.background_cpu >= 3 * 0.02


def test_steps_the_caller_does_are_not_counted_as_background_cpu():
    write = BackgroundWrite(_burning(0.02))
    write.finish()  # never started: every step in the caller, whose wait counts them
    assert write.steps_in_caller == 3 and write.background_cpu_seconds == 0.0


@pytest.mark.parametrize("on_write_error", ["warn", "raise"])
def test_a_write_a_lost_process_failed_ends_the_run_whatever_on_write_error_says(tmp_path, on_write_error):
    """A checkpoint written by every process fails because one vanished (its
    node died): a warning would let the run go on into NetKet's collectives,
    waiting for it until JAX's heartbeat timeout. The run's thread gets the
    PeerLostError, with its missing ranks, at the end of the step."""
    from nkserde.checkpoint.keep_policy import KeepLatest
    from nkserde.checkpoint.persist.saving import Saver
    from nkserde.checkpoint_files.directory import RunDirectory
    from nkserde.errors import PeerLostError

    saver = Saver(RunDirectory(tmp_path), keep=KeepLatest(3), on_write_error=on_write_error)

    def steps():
        raise PeerLostError("process 1 did not reach 'writing blocks' within 15 s", missing=[1])
        yield

    saver.writer.submit(steps(), asynchronous=True, target=tmp_path / "step-0000000010.nks")
    while not saver.writer.in_flight.done:  # the background thread ran it
        time.sleep(0.005)
    with pytest.raises(PeerLostError, match="process 1 did not reach") as lost:
        saver.step_ended(None)
    assert lost.value.missing == [1] and "step-0000000010.nks" in str(lost.value)
