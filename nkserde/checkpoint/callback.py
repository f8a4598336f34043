"""The Checkpoint callback: save as a run goes, resume when the same script
runs again.

    ckpt = nkserde.Checkpoint("ckpt", every=50)
    driver.run(1000, out=log, callback=ckpt)

First run: a checkpoint every ``every`` steps, at the end of the run, and
when the run stops early (StopRun, an exception, Ctrl-C, SIGTERM/SIGUSR1).
Same script again: ``on_run_start`` loads the newest checkpoint that
verifies, restores the driver *in place* (the user's variational state
object included), the history of every logger and the state of every
stateful callback of the run, and sets ``step_count`` (and, through the
integrator, ``t``). NetKet fixes the end of a run before ``on_run_start``,
so the same ``run(...)`` call then does only the remaining steps.

A run that stops early is either *interrupted* (a signal, an error,
``nk.callbacks.Timeout``, any callback that is not a convergence criterion):
the same script resumes it and finishes the remaining steps; or it stopped
*for good* (a convergence criterion: ``EarlyStopping``,
``ConvergenceStopping``, the types in ``final_stops``; TDVP reaching its
final time): the same script does nothing, and a larger ``n_iter`` (or
``T``) continues it from where it stopped.

The callback is the hook state machine: which step the driver is at,
when to save, when to stop. What a checkpoint holds and how a resume
restores it (restore.py), the save path (saving.py), the run's stops and
its job (interruptions.py), files and lock (nkserde.checkpoint_files) are
parts of their own. NetKet's run loop through nkserde.netket.run_loop.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import jax
import netket as nk
from netket.utils import struct

from .. import caches as compiled_code
from ..caches import jax_executables as jax_cache
from .._log import say
from .._warnings import outside
from ..checkpoint_files.directory import RunDirectory, unusable
from ..errors import NkserdeError, UnsupportedNetKetError
from ..netket import internals, run_loop
from ..processes.jax_service import multi_process
from ..processes.lost_processes import lost_process
from .job import control as job_control, slurm
from .persist import restore
from .job.interruptions import Interruptions
from .job.control import EXIT_INTERRUPTED, LOCK_LOST, WALLTIME
from .options import CheckpointOptions, signature, with_options_described
from .persist.saving import Saver
from .run import Run, how_it_ended


class Checkpoint(nk.callbacks.AbstractCallback):
    """Saves a driver as it runs and resumes it when the same script runs again.

    Args:
      directory: where the checkpoints go (created when the run starts).
      **options: ``every``, ``keep``, ``resume``, ``loggers``, ``async_save``,
        ``final_stops``, ``on_write_error``, ``job``, ``init_from``,
        ``compile_cache``, and those of earlier releases; each said where
        it is declared (:class:`~nkserde.checkpoint.options.CheckpointOptions`),
        and shown here by help() and the API page.

    Every option is checked here (``ValueError`` naming it, what it may be
    and what it was) and kept, checked, in ``options``. After
    ``on_run_start``, ``resumed_from`` is the step the run resumed from, or
    None for a fresh start. After the run, ``interrupted`` names what
    interrupted it (a signal, e.g. ``"SIGTERM"``, or the type of the
    callback that stopped it, e.g. ``"Timeout"``), or is None when the run
    reached its end or a final stop.
    """

    directory: Path = struct.field(pytree_node=False, serialize=False)
    options: CheckpointOptions = struct.field(pytree_node=False, serialize=False)
    resumed_from: int | None = struct.field(pytree_node=False, serialize=False)
    interrupted: str | None = struct.field(pytree_node=False, serialize=False)
    # the parts it delegates to, and the run going on
    _files: RunDirectory = struct.field(pytree_node=False, serialize=False)
    _saver: Saver = struct.field(pytree_node=False, serialize=False)
    _interruptions: Interruptions = struct.field(pytree_node=False, serialize=False)
    _run: Run | None = struct.field(pytree_node=False, serialize=False)

    def __init__(self, directory, **options):
        self.options = CheckpointOptions.given(**options)
        self.directory = Path(directory)
        problem = unusable(self.directory)  # a file in its place, a read-only file system: say so now
        if problem is not None:
            raise problem
        self.resumed_from = self.interrupted = self._run = None
        self._files = RunDirectory(self.directory, jobs=slurm.job_record)
        self._interruptions = Interruptions(self.directory, self.options.job)
        self._saver = Saver(
            self._files,
            keep=self.options.keep,
            on_write_error=self.options.on_write_error,
            written=self._interruptions.saved,  # the walltime guard keeps time for the final checkpoint
        )

    @property
    def callback_order(self) -> int:
        # First: resume before the loggers open (and, in write mode,
        # truncate) their files in their own on_run_start. A step is saved at
        # the start of the next one, when every callback has finished it.
        return -1000

    @property
    def write_lags(self) -> list[tuple[int, float]]:
        """Per background write: (steps the run's thread wrote itself,
        seconds from snapshot to file)."""
        return self._saver.writer.lags

    def steps(self) -> list[int]:
        """Steps that have a checkpoint file, oldest first."""
        return self._files.steps()

    def path(self, step: int) -> Path:
        return self._files.step_path(step)

    def latest(self) -> Path | None:
        """Path of the newest checkpoint that verifies, or None."""
        return self._files.latest()

    def wait(self):
        """Blocks until the write in flight (if any) has finished; whatever
        the background thread has not done yet, this thread does."""
        self._saver.wait()

    # ------------------------------------------------------------------ hooks

    def __call__(self, step, log_data, driver):
        # NetKet's older run loop (every driver of NetKet 3.21, the dynamics
        # drivers of 3.22) calls callbacks as functions after each step: too
        # late to resume, and without the hooks a checkpoint needs
        raise UnsupportedNetKetError(
            f"nkserde.Checkpoint: {type(driver).__name__}.run of NetKet {nk.__version__} calls "
            f"callbacks as functions, without NetKet's callback hooks (NetKet >= 3.23); save "
            f"and load the driver with nkserde.save / nkserde.load instead"
        )

    def on_run_start(self, step, driver):
        started = time.monotonic()
        # the process's compiled-code caches, set here and not when the
        # Checkpoint is made (a constructor changes nothing process-wide),
        # before the fingerprint, whose probes they keep
        _use_compile_cache(self.options.compile_cache)
        end_step = run_loop.fix_target_step(driver) if run_loop.target(driver) is None else None
        self._files.create()  # CheckpointDirectoryError: it became unusable since Checkpoint(...)
        try:
            self.resumed_from, self.interrupted = None, None
            run, self.resumed_from = restore.begin(driver, self._files, self.options, end_step, checkpoints=Checkpoint)
            run.plan_saves(self.options.every, time.monotonic(), processes=jax.process_count())
            self._interruptions.start(run)
            run.resume_times = [started, time.monotonic()] if self.resumed_from is not None else None
            self._run = run
        except BaseException:
            self._files.lock.release()
            raise

    def on_compute_update_start(self, step, log_data, driver):
        # NetKet samples (TDVP integrates) right after this hook: from here
        # until the step ends, the driver is neither this step nor the next
        if self._run is not None:
            self._run.changing = driver.step_count

    def before_parameter_update(self, step, log_data, driver):
        if self._run is not None:
            self._run.dirty_step = driver.step_count

    def on_step_end(self, step, log_data, driver):
        # a background write goes on across steps; the Saver's rule says
        # when the run's thread waits for it (persist/saving.py)
        self._saver.step_ended(self._run)

    def on_step_start(self, step, log_data, driver):
        run = self._run
        if run is None or not run.at_step_start(driver.step_count):  # (not at a step boundary)
            return
        now = time.monotonic()
        run.steps.started(now, measured=self._interruptions.step_started(now))
        if run.resume_times is not None:
            restore.report_resume(run, now, self.directory)
        run.check_end()
        if self._interruptions.take_interrupt():  # Ctrl-C during the end of the step just completed
            if run.unsaved:
                self._save(driver, asynchronous=False)
            raise KeyboardInterrupt
        stop = self._interruptions.requested(run, now, lock_lost=self._files.lock.renewal_lost is not None)
        if stop == LOCK_LOST:  # the directory is another run's now: nothing more is written there
            lost = self._files.lock.renewal_lost or "process 0's lock was taken over by another run"
            self._saver.abandon()
            self._finish(raise_write_error=False)
            raise NkserdeError(f"{self.directory}: {lost}; this run stops without a checkpoint")
        if stop is not None:
            run.stopped_by = stop
            self.interrupted = job_control.stop_name(stop)
            if run.unsaved:
                self._save(driver, asynchronous=False)
            what = "the job's time limit is near" if stop == WALLTIME else f"received {self.interrupted}"
            raise nk.callbacks.StopRun(f"{what}: checkpointed step {run.completed} in {self.directory}")
        if run.unsaved and run.save_due(now):
            self._save(driver, asynchronous=self.options.async_save)
            run.checkpoint_taken(now, self.directory)
            if self._interruptions.take_interrupt():  # Ctrl-C during that (synchronous) save: it is written
                raise KeyboardInterrupt

    def on_run_end(self, step, driver):
        run = self._run
        if run is None:
            return
        try:
            # NetKet calls on_run_end while handling the exception that stopped the run
            end = how_it_ended(run, driver, sys.exc_info()[1], self.options.final_stops)
            run.completed = end.completed
            if end.completed != driver.step_count:  # the step NetKet had not counted yet: the script's driver too
                internals.set_step_count(driver, end.completed)
            if not end.final:
                self.interrupted = self.interrupted or end.raiser
            if end.mid_step:  # the newest checkpoint stays what resumes
                self._half_step(f"stopped while step {run.changing} was being computed")
            elif run.unsaved or end.stopped:
                self._save(driver, asynchronous=False, stopped=end.stopped)
            self.wait()
            if self.interrupted:
                say(
                    f"{self.directory}: interrupted by {self.interrupted} after step {run.completed}; "
                    "running the same script again resumes from there"
                )
        finally:
            interrupt_pending = self._interruptions.interrupt_pending
            job = self._finish()
        if interrupt_pending or run.stopped_by is not None:
            # The program ends here; NetKet would call the other callbacks'
            # on_run_end after this one: call them first (loggers flush).
            run_loop.end_other_callbacks(self, step, driver)
        if interrupt_pending:  # Ctrl-C during the last step: saved, now raise it
            raise KeyboardInterrupt
        if run.stopped_by is not None:
            # a signal or the walltime: requeue (process 0), then end the
            # program, so that no later code or run() starts from this
            # unfinished state
            if jax.process_index() == 0:
                job.after_stop(run.stopped_by, self.options.job.signals)
            raise SystemExit(EXIT_INTERRUPTED)

    def on_run_error(self, step, error, driver):
        # A run that failed to start (e.g. a fingerprint mismatch raised in
        # on_run_start) has nothing of its own to save.
        run = self._run
        if run is None:
            return
        try:
            if self._saver.writer.aborted:  # Ctrl-C cut a write short: it is not on disk
                run.last_saved = None
            if multi_process():
                # An error need not strike every process at the same step (or
                # at all): a save needs all of them, so none is attempted.
                warnings.warn(f"nkserde: the run failed; {self._saver.newest()}", stacklevel=outside())
            elif run.changing == driver.step_count:  # (changing + 1: that step completed and was counted)
                # The error struck after this step began changing the driver
                # (its sampling, its update) and before every callback
                # finished it: the driver is between two steps and cannot
                # be saved as either.
                what = "applied" if run.dirty_step is not None else "computed"
                self._half_step(f"failed while step {run.changing} was being {what}")
            else:
                run.completed = driver.step_count
                if run.unsaved:
                    self._save(driver, asynchronous=False)
            self.wait()
        except Exception as exc:  # noqa: BLE001  (whatever a save raises here, the run's own error must surface)
            warnings.warn(f"nkserde: could not checkpoint after the error: {exc}", stacklevel=outside())
        finally:
            job = self._finish(raise_write_error=False)
        lost = lost_process(error) if multi_process() else None
        if lost is not None:  # not the run's fault: it goes on, requeued by whichever process saw it
            self._interruptions.requeue_after_lost_process(job, lost)
        elif isinstance(error, Exception) and jax.process_index() == 0:
            self._interruptions.requeue_after_error(job, self._files)

    # ------------------------------------------------------------------ parts

    def _save(self, driver, *, asynchronous: bool, stopped: bool = False):
        self._saver.save(driver, self._run, asynchronous=asynchronous, stopped=stopped)

    def _half_step(self, what: str):
        warnings.warn(
            f"nkserde: the run {what}; half a step is not checkpointed: {self._saver.newest()}", stacklevel=outside()
        )

    def _finish(self, raise_write_error=True):
        """The run's end, whatever ended it; returns its job."""
        self._run = None
        job = self._interruptions.end()
        _release_lock(self._files)
        self._saver.finish(raise_write_error)
        return job


def _release_lock(files: RunDirectory) -> None:
    """The directory's lock released; a failure (a read-only file system)
    warned about, never an exception at the run's end."""
    unreleased = files.lock.release()
    if unreleased is not None:
        warnings.warn(
            f"nkserde: {files.path}: releasing the lock {files.lock.path.name} failed: "
            f"{unreleased.strerror or unreleased}; a later run on this host takes it over once this "
            "process has ended",
            stacklevel=outside(),
        )


def _use_compile_cache(setting) -> None:
    """The compiled-code caches a Checkpoint's ``compile_cache`` asks for
    (see :mod:`nkserde.caches`): ``"auto"`` keeps the directory the
    script gave ``nkserde.compilation_cache()``, else the default one,
    unless ``NKSERDE_COMPILATION_CACHE=off``; None or False: none of its
    own (what ``import nkserde`` set stays)."""
    if setting == "auto":
        if os.environ.get(jax_cache.ENVIRONMENT, "").lower() != "off":
            compiled_code.use_default()
    elif setting is not None and setting is not False:
        compiled_code.use(setting)


# NetKet's callbacks are Pytrees, whose metaclass shows (*args, **kwargs):
# help(), IDEs and the API page show the options, from their one declaration
Checkpoint.__signature__ = signature("directory")
Checkpoint.__doc__ = with_options_described(Checkpoint.__doc__)
