"""The save path of a checkpointed run: what a checkpoint holds
(:func:`payload`: the driver, the end of the run, its loggers and
callbacks), a checkpoint of the driver at a step boundary, written and
verified, then the checkpoints the keep policy no longer keeps retired; a
write that fails warned about or raised (``on_write_error``; a write that
failed because a process of the run is gone always ends the run), a
deletion that fails warned about apart.

A checkpoint, synchronous or not, goes down nkserde's one save line
(nkserde/saving/line.py): the snapshot (the state dict, with the arrays
in device memory held as they are; here numpy memory the run may change
is copied too), then the arrays to the host, encoded, written and
committed; then verified. An asynchronous save returns after the
snapshot; the rest, the copies from the device included, goes on in a
background thread (CheckpointWriter's, one for all its writes) across as
many steps as it needs.

Who waits for a write in flight is decided here, by one rule: it is
waited for (and what is left of it done by the run's thread) by

* the next checkpoint, before its snapshot (one write at a time: the
  history log's rows follow on);
* the run's end, a stop (a signal, the walltime) and a failure;
* the end of a step once the write has been in flight for longer than
  :data:`LAG_FLOOR` seconds and twice the previous write: its thread, at
  the lowest CPU priority, is starved on a busy node;
* in a run of several processes, the end of the step it was taken in: its
  rounds need every process, and a process lost in them must end the run
  (PeerLostError) before the others enter the next step's collectives,
  where no Python code of theirs runs.

Nothing else waits: on a GPU or TPU, where a step takes milliseconds, the
run goes on while its checkpoint is copied and written. A run whose lock
was taken over abandons the write in flight (:meth:`Saver.abandon`): the
directory is another run's.

    saver = Saver(files, keep=KeepLatest(3), on_write_error="warn")
    seconds = saver.save(driver, run, asynchronous=True)   # the run's share
    saver.step_ended(run)                                  # every step's end
    saver.wait(run)                                        # on disk (or failed)
    saver.finish()                                         # the run's end
"""

from __future__ import annotations

import logging
import time
import warnings

import jax

from ..._log import say
from ..._warnings import outside
from ...checkpoint_files import content as checkpoint_file
from ...checkpoint_files.directory import RunDirectory
from ...errors import NkserdeError, PeerLostError, in_file
from ...loading import file_info
from ...processes.jax_service import coordination_name, multi_process
from ...saving import line
from ...saving.snapshot import Snapshot, check_storable as _check_storable, private_copy, snapshot
from ...types.placement import primary
from ..run import Run, keyed
from .background_write import CheckpointWriter


def payload(driver, run: Run, completed: int, stopped: bool = False) -> dict:
    """What the checkpoint of step ``completed`` holds: the driver, the end
    of the run, whether it stopped for good, and process 0's loggers and
    callbacks (loggers write there only, timers start at slightly different
    times on each process)."""
    return checkpoint_file.payload(
        driver,
        completed,
        stopped,
        # the end the run was going to (a final stop is continued by a
        # rerun that asks for more)
        run.target,
        loggers=primary(keyed(run.loggers)),
        callbacks=primary(keyed(run.callbacks)),
    )


def check_storable(driver, run: Run, directory) -> None:
    """Fails now, not at the first checkpoint ``every`` steps in, if
    something in the run cannot be stored."""
    try:
        _check_storable(payload(driver, run, driver.step_count))
    except NkserdeError as exc:
        raise in_file(exc, f"{directory}: this run cannot be checkpointed") from None


# A background write in flight longer than this (and than twice the one
# before it) at a step's end is falling behind: a write of a 1 GB state
# from a TPU takes about a second, a starved thread on a busy node
# minutes. Steps longer than this and than twice a write keep the
# checkpoint of step k on disk before the step after it ends.
LAG_FLOOR = 1.0


class Saver:
    """Writes the checkpoints of the runs in ``files`` (a RunDirectory);
    ``keep``: the policy retention applies after each verified write;
    ``written(seconds, in_background)``: told how long each checkpoint took
    (a synchronous one: the run's time; one written in the background:
    from its snapshot to its file)."""

    def __init__(self, files: RunDirectory, *, keep, on_write_error: str, written=None):
        self.files = files
        self.keep = keep
        self.on_write_error = on_write_error
        self.written = written
        self.writer = CheckpointWriter(files.path)
        self._retire_failures: list = []  # (step, OSError) from the writing thread
        self._previous_lag = 0.0  # seconds from snapshot to file of the last background write

    def save(self, driver, run: Run, *, asynchronous: bool, stopped: bool = False) -> float:
        """Checkpoints ``run.completed`` steps of ``driver``; returns the
        seconds the run's thread spent (all of the write unless
        ``asynchronous``: then only the snapshot, and :meth:`wait` counts
        the rest), which the run's save schedule counts as a checkpoint's
        cost."""
        completed = run.completed
        started = time.monotonic()
        run.saving = True  # a Ctrl-C now waits for the save (see SignalCatcher)
        try:
            # the write in flight appends to the history log: this one's rows start where it ended
            self.wait(run)
            self.settle()
            content = payload(driver, run, completed, stopped)
            state, held = snapshot(content)
            # the loggers' rows since the last checkpoint, copied, to be appended to the history log
            state, history = run.histories.prepare(state, completed)
            if asynchronous:
                state = private_copy(state)
            path = self.files.step_path(completed)
            try:
                steps = self._write_steps(state, path, completed, history, held)
                del state, held  # the write holds them: fetched arrays free their device memory
                self.writer.submit(steps, asynchronous=asynchronous, target=path)
            except NkserdeError as exc:
                run.last_saved = completed  # a failed checkpoint is not retried at the same step
                self._failed(exc)
            else:
                run.last_saved = completed  # (a KeyboardInterrupt leaves it unsaved: retried on the way out)
        finally:
            run.saving = False
        seconds = run.snapshot_seconds = time.monotonic() - started
        if run.schedule is not None:  # (asynchronous: the run's share so far; wait() adds the rest)
            run.schedule.saved(seconds)
            if asynchronous:
                run.schedule.write_started(started, completed)
        if not asynchronous and self.written is not None:
            self.written(seconds, in_background=False)
        return seconds

    def step_ended(self, run: Run | None) -> None:
        """A step of ``run`` ended: a background write that has ended is
        taken in (its cost counted, its error raised if a process of the
        run is gone); one that is falling behind (see :data:`LAG_FLOOR`),
        or any in a run of several processes, is finished by this thread.
        Else nothing waits."""
        write = self.writer.in_flight
        if write is None:
            return
        lagging = time.monotonic() - write.created_at >= max(LAG_FLOOR, 2 * self._previous_lag)
        if write.done or lagging or multi_process():
            self.wait(run, at_step_end=True)

    def abandon(self) -> None:
        """The directory is no longer this run's: the write in flight is
        cancelled, nothing of it published."""
        self.writer.abandon()

    def wait(self, run: Run | None = None, *, at_step_end: bool = False) -> None:
        """Blocks until the write in flight (if any) has ended; whatever
        the background thread has not done yet, this thread does. A
        background write of ``run`` that ends here is counted: the save
        schedule prices it at what it cost the run (its snapshot, this
        wait, and the CPU its thread used, which a run whose steps fill
        every core loses; on a node with idle cores this counts it twice:
        the budget is kept either way; or the steps' slowdown while it
        went on, if more), ``written`` is told its time from snapshot to
        file. ``at_step_end``: called at the end of a step (else at a
        step's start). A write that failed because a process of the run is
        gone raises PeerLostError here."""
        writer = self.writer
        writes, waited = len(writer.lags), time.monotonic()
        writer.wait()
        waited = time.monotonic() - waited
        if isinstance(writer.error, PeerLostError):
            self.settle()  # raises it
        if len(writer.lags) == writes:
            return
        lag = self._previous_lag = writer.lags[-1][1]
        if run is not None and run.schedule is not None:
            completed = run.completed + 1 if at_step_end else run.completed
            own = run.snapshot_seconds + waited + writer.background_cpu
            run.schedule.write_ended(time.monotonic(), completed, own)
        if self.written is not None:
            self.written(lag, in_background=True)

    def settle(self) -> None:
        """The error of the last write, if it failed: raised or warned about
        (``on_write_error``); checkpoints retention could not delete: warned
        about."""
        self._warn_retire_failures()
        try:
            self.writer.raise_error()
        except NkserdeError as exc:
            self._failed(exc)

    def finish(self, raise_write_error: bool = True) -> None:
        """The run's end: the last write's error settled as :meth:`settle`
        does, or (``raise_write_error=False``, a run that failed: never
        mask its error) logged. The writer's thread ends after the write in
        flight."""
        self.writer.close()
        if raise_write_error:
            self.settle()
            return
        self._warn_retire_failures()
        if self.writer.error is not None:
            say(f"{self.files.path}: writing a checkpoint failed: {self.writer.discard_error()}", logging.WARNING)

    def newest(self) -> str:
        """Which checkpoint a rerun resumes, in words."""
        try:
            steps = self.files.steps()
        except OSError:
            steps = []
        return (
            f"{self.files.step_path(steps[-1]).name} is the newest checkpoint"
            if steps
            else "there is no checkpoint yet"
        )

    def _warn_retire_failures(self):
        while self._retire_failures:
            step, exc = self._retire_failures.pop(0)
            warnings.warn(
                f"nkserde: {self.files.path}: deleting {self.files.step_path(step).name} (retention) failed: "
                f"{exc.strerror or exc}; it stays on disk",
                stacklevel=outside(),
            )

    def _failed(self, exc: NkserdeError):
        lost = exc if isinstance(exc, PeerLostError) else exc.__cause__
        if isinstance(lost, PeerLostError):
            # a process of the run is gone: the run's next step would wait
            # for it in NetKet's collectives (for JAX's heartbeat timeout),
            # so it ends now whatever on_write_error says
            raise PeerLostError(str(exc), missing=lost.missing) from None
        if self.on_write_error == "raise":
            raise exc
        warnings.warn(f"nkserde: {exc}; {self.newest()}; the run goes on (on_write_error='warn')", stacklevel=outside())

    def _write_steps(self, state, path, completed, history, held):
        """The steps of writing one checkpoint (see background_write.BackgroundWrite).
        ``history``: process 0's steps appending its loggers' new rows to the
        history log, first: they return the position the checkpoint records.
        ``held``: the arrays of ``state`` in device memory."""
        if history is not None:
            state = {**state, checkpoint_file.HISTORY: primary((yield from history))}
        # every process together; one write in flight, so one key sequence for the directory
        sequence = coordination_name("checkpoint:save", self.files.path)
        root = checkpoint_file.ROOT_TYPE
        yield from line.save_steps(Snapshot(state, held), path, root_type=root, sequence=sequence)
        if jax.process_index() == 0:  # directory upkeep is process 0's
            yield from file_info.verify_steps(path)  # only a verified checkpoint may retire older ones
            # a deletion that fails is not a failure of this write: said apart
            self.files.retire(self.keep, completed, failed=self._retire_failures)
