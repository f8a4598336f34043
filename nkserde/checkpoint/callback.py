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

The callback keeps the hook state machine and what a checkpoint holds
and restores; files, lock, retention, writing and signals are the
package's other modules. It uses nkserde like a user does:
``save_state_dict_steps``, ``load_state_dict``, ``from_state_dict``,
``check_storable``; NetKet's run loop through nkserde.netket.run_loop.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import netket as nk
from netket.utils import struct

from .._warnings import outside
from .. import api
from ..checkpoint_files import content as checkpoint_file
from .._log import say
from ..checkpoint_files.directory import RunDirectory, unusable
from ..processes.jax_service import coordination_name, multi_process, on_process_0, stop_flag
from ..errors import NkserdeError, UnsupportedNetKetError, in_file
from ..netket import internals, loggers as netket_loggers, run_loop
from ..netket.callbacks import stateful
from ..placement import primary
from .. import compiled_code, jax_cache
from . import job_control, logger_histories, run_fingerprint
from .choice import choose_checkpoint
from .keep_policy import Retention
from .save_policy import DEFAULT_BUDGET, SaveSchedule, parse_every
from .job_control import EXIT_INTERRUPTED, REQUEUE_MODES, WALLTIME, JobControl
from .slurm import current_job
from .signals import SignalCatcher
from .snapshot import host_copy
from .stops import FINAL_STOPS, NothingToDo, ReachedTarget, classify_stop
from .background_write import CheckpointWriter

RESUME_MODES = ("auto", "force", "never", "must")
WRITE_ERROR_MODES = ("warn", "raise")


def _stateful(callback) -> bool:
    """Callbacks whose state nkserde stores (see nkserde.netket.callbacks)."""
    return stateful(callback) and not isinstance(callback, Checkpoint)


def _keyed(objects) -> dict:
    """Stable names for the run's loggers and callbacks, so a checkpoint
    matches them even if the script adds or removes one: the JsonLog's
    output prefix, else the type and its rank among objects of that type."""
    keyed, seen = {}, {}
    for obj in objects:
        name = type(obj).__name__
        prefix = internals.output_prefix(obj)
        if prefix is not None:
            key = f"{name}:{prefix}"
        else:
            seen[name] = seen.get(name, -1) + 1
            key = f"{name}#{seen[name]}"
        keyed[key] = obj
    return keyed


def _run_objects(extra_loggers) -> tuple[tuple, tuple]:
    """(loggers, stateful callbacks) of the run being started: those NetKet
    runs (``out=`` and ``callback=`` of ``run``) and ``extra_loggers``.
    Loggers nkserde cannot store are named in a warning and left out."""
    callbacks = run_loop.running_callbacks()
    loggers = [c.logger for c in callbacks if hasattr(c, "logger")]
    loggers += [c for c in callbacks if run_loop.is_logger(c)]
    loggers = list({id(x): x for x in [*loggers, *extra_loggers]}.values())
    for logger in loggers:
        if not api.is_registered(logger):
            warnings.warn(
                f"nkserde: {type(logger).__name__} is not checkpointed: after a "
                "resume its output may hold the steps after the checkpoint twice",
                stacklevel=outside(),
            )
    stored_loggers = tuple(x for x in loggers if api.is_registered(x))
    # logger wrappers are handled through their loggers, in place
    stored_callbacks = tuple(
        c for c in callbacks if _stateful(c) and not hasattr(c, "logger") and not run_loop.is_logger(c)
    )
    return stored_loggers, stored_callbacks


class Checkpoint(nk.callbacks.AbstractCallback):
    """Saves a driver as it runs and resumes it when the same script runs again.

    Args:
      directory: where the checkpoints go (created if needed).
      every: when to checkpoint (and always at the end): every ``every``
        completed steps (an int); every so much wall-clock time (``"90s"``,
        ``"15min"``, ``"2h"``, a ``timedelta``); or ``"auto"``, as often as
        keeps checkpointing within ``budget`` of the run (and, given
        ``mtbf``, Young's interval for that failure rate).
      budget: with ``every="auto"``, the fraction of the run's time that
        checkpoints may cost (default 0.01).
      mtbf: with ``every="auto"``, the mean time between failures of the
        machine (a duration), if known.
      keep: how many of the newest checkpoints to keep.
      keep_every: also keep every checkpoint whose step is a multiple of it.
      resume: ``"auto"`` (resume if there is a checkpoint of the same run,
        refuse if the script changed), ``"force"`` (resume even if the
        fingerprint changed, where shapes allow), ``"never"`` (start fresh;
        old checkpoints are moved to ``previous-<time>/``, never deleted),
        ``"must"`` (fail if there is nothing to resume).
      loggers: loggers whose history to checkpoint besides those of the run
        (loggers passed as ``out=`` are found automatically).
      async_save: take a host snapshot of the state and write it from a
        background thread at the lowest CPU priority; at most one write is
        in flight, and the checkpoint of step k is on disk before step k+1
        ends: if the thread has not finished by then (a busy node), the
        run's thread writes the rest itself.
      signals: on these signals, finish the current step, checkpoint, stop
        the run and end the program with exit status 75 (``SystemExit``;
        ``EXIT_INTERRUPTED``), so nothing after ``run()`` works on an
        unfinished state. SLURM sends SIGTERM when it ends a job, or SIGUSR1
        with ``--signal=USR1@N``.
      requeue: ``"auto"`` (in a SLURM batch job, when the scheduler stopped
        the run: the walltime stop, the job's ``--signal``, SIGTERM at its
        time limit; process 0 requeues the job once the checkpoint is on
        disk, if the job completed a step and can be requeued) or
        ``"never"`` (the job script decides: the exit status is 75).
      requeue_on_error: how often a run that fails (raises) has its SLURM
        job requeued, counted over the run's jobs in ``directory``
        (default 0: a failing run is never requeued).
      walltime: ``"auto"`` (in a SLURM job, its time left, read when the run
        starts), a number of seconds from the run's start (any scheduler),
        or None: the run stops with a checkpoint, as on a signal, when the
        time left falls below what this run measured for a step plus a
        checkpoint (with a margin): no ``--signal`` is needed and no
        completed step is lost. Outside SLURM, ``"auto"`` does nothing.
      final_stops: callback types whose StopRun ends the run for good
        (convergence criteria); a StopRun of any other callback (e.g.
        ``nk.callbacks.Timeout``) is an interruption that the next run of
        the script resumes.
      on_write_error: ``"warn"`` (a checkpoint that cannot be written, e.g.
        the disk is full or the directory vanished, costs that checkpoint:
        one warning naming it and the newest checkpoint on disk, and the run
        goes on) or ``"raise"`` (the run stops with the NkserdeError). Either
        way the checkpoints already written stay: retention only runs after
        a checkpoint is written and verified.
      compile_cache: ``"auto"`` (JAX's persistent compilation cache in the
        directory the script gave ``nkserde.compilation_cache()``, else in
        the user's cache directory, per JAX version and machine:
        :mod:`nkserde.jax_cache`, and beside it numba's cache of NetKet's
        operator kernels: :mod:`nkserde.numba_cache`), a directory of one's
        own, or None: compiled code outlives the process, so a resumed run
        does not compile again. Set when the Checkpoint is made (a script that
        wants its template's compilations cached too calls
        ``nkserde.compilation_cache()`` before it builds anything). A cache
        the user configured for JAX is left as it is;
        ``NKSERDE_COMPILATION_CACHE=off`` turns the default off.
      init_from: a file or checkpoint directory of *another* run whose
        variational state this run starts from while ``directory`` has no
        checkpoint of its own (transfer learning: a sweep in a coupling
        warm-started from the previous point, a quench from a ground
        state). The run keeps its own fingerprint, optimizer state and step
        count; once it has a checkpoint, a restart resumes that instead.
      at, strict, rename: how the state is taken from ``init_from``, as in
        :func:`nkserde.load`: ``at`` is where it is in that file (default:
        ``"state"`` for a driver or Checkpoint file, the whole file for a
        variational state's); ``strict=False`` lets an MCState start from a
        FullSumState and back, and keeps the template's values for what
        does not fit (one warning names them).

    After ``on_run_start``, ``resumed_from`` is the step the run resumed
    from, or None for a fresh start. After the run, ``interrupted`` names
    what interrupted it (a signal, e.g. ``"SIGTERM"``, or the type of the
    callback that stopped it, e.g. ``"Timeout"``), or is None when the run
    reached its end or a final stop.
    """

    directory: Path = struct.field(pytree_node=False, serialize=False)
    every: Any = struct.field(pytree_node=False, serialize=False)
    keep: int = struct.field(pytree_node=False, serialize=False)
    keep_every: int | None = struct.field(pytree_node=False, serialize=False)
    resume: str = struct.field(pytree_node=False, serialize=False)
    loggers: tuple = struct.field(pytree_node=False, serialize=False)
    async_save: bool = struct.field(pytree_node=False, serialize=False)
    signals: tuple = struct.field(pytree_node=False, serialize=False)
    final_stops: tuple = struct.field(pytree_node=False, serialize=False)
    on_write_error: str = struct.field(pytree_node=False, serialize=False)
    requeue: str = struct.field(pytree_node=False, serialize=False)
    requeue_on_error: int = struct.field(pytree_node=False, serialize=False)
    walltime: Any = struct.field(pytree_node=False, serialize=False)
    compile_cache: Any = struct.field(pytree_node=False, serialize=False)
    init_from: Path | None = struct.field(pytree_node=False, serialize=False)
    at: str | None = struct.field(pytree_node=False, serialize=False)
    strict: bool = struct.field(pytree_node=False, serialize=False)
    rename: Any = struct.field(pytree_node=False, serialize=False)
    resumed_from: int | None = struct.field(pytree_node=False, serialize=False)
    interrupted: str | None = struct.field(pytree_node=False, serialize=False)
    # the parts it delegates to
    _files: RunDirectory = struct.field(pytree_node=False, serialize=False)
    _retention: Retention = struct.field(pytree_node=False, serialize=False)
    _writer: CheckpointWriter = struct.field(pytree_node=False, serialize=False)
    _signals: SignalCatcher = struct.field(pytree_node=False, serialize=False)
    _retire_failures: list = struct.field(pytree_node=False, serialize=False)
    _job: JobControl | None = struct.field(pytree_node=False, serialize=False)
    _every: Any = struct.field(pytree_node=False, serialize=False)
    # the run being checkpointed
    _run: Any = struct.field(pytree_node=False, serialize=False)

    def __init__(
        self,
        directory,
        *,
        every=50,
        budget: float = DEFAULT_BUDGET,
        mtbf=None,
        keep: int = 3,
        keep_every: int | None = None,
        resume: str = "auto",
        loggers=(),
        async_save: bool = True,
        signals=(signal.SIGTERM, signal.SIGUSR1),
        final_stops=FINAL_STOPS,
        on_write_error: str = "warn",
        requeue: str = "auto",
        requeue_on_error: int = 0,
        walltime="auto",
        compile_cache="auto",
        init_from=None,
        at: str | None = None,
        strict: bool = True,
        rename=None,
    ):
        if resume not in RESUME_MODES:
            raise ValueError(f"resume must be one of {RESUME_MODES}, got {resume!r}")
        if on_write_error not in WRITE_ERROR_MODES:
            raise ValueError(f"on_write_error must be one of {WRITE_ERROR_MODES}, got {on_write_error!r}")
        self._retention = Retention(int(keep), keep_every or None)  # validates both; keep_every 0: none, as before
        self._every = parse_every(every, budget=budget, mtbf=mtbf)
        if requeue not in REQUEUE_MODES:
            raise ValueError(f"requeue must be one of {REQUEUE_MODES}, got {requeue!r}")
        if isinstance(requeue_on_error, bool) or not isinstance(requeue_on_error, int) or requeue_on_error < 0:
            raise ValueError(f"requeue_on_error must be an int >= 0, got {requeue_on_error!r}")
        if not (
            walltime is None
            or walltime == "auto"
            or (isinstance(walltime, (int, float)) and not isinstance(walltime, bool) and walltime > 0)
        ):
            raise ValueError(f'walltime must be "auto", None or a positive number of seconds, got {walltime!r}')
        self.directory = Path(directory)
        problem = unusable(self.directory)  # a file in its place, a read-only file system: say so now
        if problem is not None:
            raise problem
        self.every, self.keep, self.keep_every = every, int(keep), keep_every
        self.resume = resume
        self.loggers = tuple(loggers)
        self.async_save = bool(async_save)
        self.signals = tuple(signals)
        self.final_stops = tuple(final_stops)
        self.on_write_error = on_write_error
        self.requeue, self.requeue_on_error, self.walltime = requeue, requeue_on_error, walltime
        self.compile_cache = compile_cache
        if compile_cache == "auto":
            if os.environ.get(jax_cache.ENVIRONMENT, "").lower() != "off":
                compiled_code.use_default()  # a directory the script chose stays
        elif compile_cache is not None and compile_cache is not False:
            compiled_code.use(compile_cache)
        self.init_from = None if init_from is None else Path(init_from)
        self.at, self.strict, self.rename = at, bool(strict), rename
        self.resumed_from = None
        self.interrupted = None
        self._files = RunDirectory(self.directory)
        self._writer = CheckpointWriter(self.directory)
        self._signals = SignalCatcher(
            self.signals,
            # Ctrl-C from a step's sampling to its end, or in a save: the
            # step (the save) finishes, is checkpointed, then Ctrl-C is raised
            busy=lambda: self._run is not None and (self._run.changing is not None or self._run.saving),
            on_defer=lambda: say(
                f"{self.directory}: Ctrl-C: finishing this step and checkpointing it; Ctrl-C again stops at once "
                "(the newest checkpoint on disk stays)"
            ),
        )
        self._job = None
        self._retire_failures = []  # (step, OSError) from the writing thread
        self._run = None

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
        return self._writer.lags

    # ------------------------------------------------------------------ files

    def steps(self) -> list[int]:
        """Steps that have a checkpoint file, oldest first."""
        return self._files.steps()

    def path(self, step: int) -> Path:
        return self._files.step_path(step)

    def latest(self) -> Path | None:
        """Path of the newest checkpoint that verifies, or None."""
        return self._files.latest()

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
        end_step = run_loop.fix_target_step(driver) if run_loop.target(driver) is None else None
        self._files.create()  # CheckpointDirectoryError: it became unusable since Checkpoint(...)
        try:
            loggers, callbacks = _run_objects(self.loggers)
            run = _Run(loggers, callbacks, end_step)
            run.histories = logger_histories.HistoryAppender(self.directory)
            self.resumed_from, self.interrupted = None, None
            run.nothing_to_do = self._start(driver, run)
            self._check_storable(driver, run)
            # nothing of this run to save until it completes a step
            run.completed = run.last_saved = driver.step_count
            run.schedule = SaveSchedule(self._every)
            run.schedule.started(time.monotonic())
            if multi_process() and not self._every.in_steps:
                # the first checkpoint after the first step measures one; then
                # process 0 decides each next one (clocks differ between processes)
                run.next_save = run.completed + 1
            # decided when the run starts, not when the callback is built
            # (a script may build it before jax.distributed.initialize())
            self._signals.defer_sigint = not multi_process()
            self._signals.install()
            # the job: process 0 alone asks SLURM, and decides
            self._job = JobControl.start(
                current_job() if jax.process_index() == 0 else None,
                requeue=self.requeue,
                walltime=self.walltime if jax.process_index() == 0 else None,
                lag_steps=2 if multi_process() else 0,  # the stop flag's slack (coordination.StopFlag)
                label=str(self.directory),
                now=time.monotonic(),
            )
            if multi_process() and (self.signals or self.walltime is not None):
                run.stop = stop_flag(_numbered(coordination_name("checkpoint:stop", self.directory)))
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
        # The checkpoint taken at this step's start must be on disk before
        # the step ends: a background write that lags (a busy node starves
        # its low-priority thread) is finished here, at the run's priority.
        lags, waited = len(self._writer.lags), time.monotonic()
        self.wait()
        waited = time.monotonic() - waited
        if self._job is not None and len(self._writer.lags) > lags:
            self._job.saved(self._writer.lags[-1][1])
            if self._run is not None and self._run.schedule is not None:
                # what a background checkpoint cost the run: its snapshot, this
                # wait, and the CPU its thread used, which a run whose steps
                # fill every core loses (on a node with idle cores this counts
                # it twice: the budget is kept either way)
                self._run.schedule.saved(self._run.snapshot_seconds + waited + self._writer.background_cpu)

    def on_step_start(self, step, log_data, driver):
        run = self._run
        if run is None:
            return
        if run.changing is not None and driver.step_count == run.changing:
            # a rejected attempt of the same step starts again (adaptive
            # integrators): not a step boundary, the driver is mid-step
            return
        # Every callback has finished the previous step and NetKet has
        # counted it: the driver is exactly `step_count` steps in.
        run.changing = run.dirty_step = None
        if driver.step_count > run.completed:
            job_control.count_step()
        run.completed = driver.step_count
        now = time.monotonic()
        self._job.step_started(now)
        run.schedule.step_started(now)
        if run.resume_times is not None:
            self._report_resume(run, now)
        if run.end_step is not None and driver.step_count >= run.end_step:
            # NetKet 3.22's loop, resumed, would run on past the end (see
            # run_loop.fix_target_step)
            raise ReachedTarget(f"step {driver.step_count}, the end of this run() call")
        if run.nothing_to_do:  # raised here, once every callback has started
            raise NothingToDo(f"the checkpointed run already stopped at step {driver.step_count}: nothing to do")
        if self._signals.interrupt_pending:  # Ctrl-C during the end of the step just completed
            self._signals.interrupt_pending = False
            if run.last_saved != run.completed:
                self._save(driver, asynchronous=False)
            raise KeyboardInterrupt
        # stop together: a signal may reach the processes at different steps
        # (one non-blocking request per step; see coordination.StopFlag)
        requested = self._signals.received or (WALLTIME if self._job.due(now) else None)
        stop = requested if run.stop is None else run.stop.check(run.completed, requested)
        if stop is not None:
            run.stopped_by = stop
            self.interrupted = job_control.stop_name(stop)
            if run.last_saved != run.completed:
                self._save(driver, asynchronous=False)
            what = "the job's time limit is near" if stop == WALLTIME else f"received {self.interrupted}"
            raise nk.callbacks.StopRun(f"{what}: checkpointed step {run.completed} in {self.directory}")
        if run.last_saved != run.completed and self._save_due(run, now):
            self._save(driver, asynchronous=self.async_save)
            run.schedule.taken(now)
            if run.next_save is not None:
                run.next_save = self._agree_on_next_save(run)
            if self._signals.interrupt_pending:  # Ctrl-C during that (synchronous) save: it is written
                self._signals.interrupt_pending = False
                raise KeyboardInterrupt

    def _report_resume(self, run: _Run, now: float):
        """Once a resumed run has done two steps: how long the resume took
        and where the time went (load, the first step's compilation)."""
        times = run.resume_times
        times.append(now)  # [run start, resumed, then each step start]
        if len(times) < 5:
            return
        run.resume_times = None
        load, first, warm = times[1] - times[0], times[3] - times[2], times[4] - times[3]
        cache = jax_cache.configured()
        where = f"compiled code cached in {cache}" if cache else "no compilation cache"
        say(
            f"{self.directory}: resumed in {times[3] - times[0]:.1f} s: loading {load:.1f} s, first step "
            f"{first:.1f} s ({where}), the step after it {warm:.1f} s"
        )

    def _save_due(self, run: _Run, now: float) -> bool:
        if run.next_save is not None:  # several processes, a time interval: process 0's decision
            return run.completed >= run.next_save
        return run.schedule.due(run.completed, now)

    def _agree_on_next_save(self, run: _Run) -> int:
        """The step of the next checkpoint, decided by process 0 from its
        measured times, on every process: one round per checkpoint, none
        per step."""
        return on_process_0(
            coordination_name("checkpoint:next-save", self.directory),
            lambda: run.schedule.next_step(run.completed),
            f"{self.directory}: process 0 could not schedule the next checkpoint",
            what=f"the checkpoint of step {run.completed} in {self.directory}",
        )

    def on_run_end(self, step, driver):
        run = self._run
        if run is None:
            return
        try:
            # A StopRun raised in on_step_end ends the run after that step's
            # update and before NetKet counts it. (After a normal last step,
            # or a StopRun at a step's start, NetKet has counted every step.)
            stop = sys.exc_info()[1]  # NetKet calls on_run_end while handling it
            after_update = run.dirty_step is not None and run.dirty_step == driver.step_count
            final, raiser = classify_stop(stop, self.final_stops)
            # a StopRun after the step began changing the driver, before its
            # update (a callback's on_compute_update_end): half a step, never
            # checkpointed; the newest checkpoint stays what resumes
            mid_step = run.changing == driver.step_count and not after_update
            stopped = after_update and final
            run.completed = driver.step_count
            if after_update and not final:
                # An interruption (Timeout, ...): the step is complete but for
                # NetKet's count; count it (the driver the script holds says
                # so too) and the next run continues with the step after it.
                run.completed += 1
                internals.set_step_count(driver, run.completed)
            if not final:
                self.interrupted = self.interrupted or raiser
            if mid_step:
                warnings.warn(
                    f"nkserde: the run stopped while step {run.changing} was being computed; half a step is "
                    f"not checkpointed: {self._newest()}",
                    stacklevel=outside(),
                )
            elif run.last_saved != run.completed or stopped:
                # a final stop keeps NetKet's count, and the checkpoint says
                # the run stopped there, so a rerun of the same script stops too
                self._save(driver, asynchronous=False, stopped=stopped)
            self.wait()
            if self.interrupted:
                say(
                    f"{self.directory}: interrupted by {self.interrupted} after step {run.completed}; "
                    "running the same script again resumes from there"
                )
        finally:
            interrupt_pending = self._signals.interrupt_pending
            job = self._job
            self._finish()
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
                job.after_stop(run.stopped_by, self.signals)
            raise SystemExit(EXIT_INTERRUPTED)

    def on_run_error(self, step, error, driver):
        # A run that failed to start (e.g. a fingerprint mismatch raised in
        # on_run_start) has nothing of its own to save.
        run = self._run
        if run is None:
            return
        try:
            if self._writer.aborted:  # Ctrl-C cut a write short: it is not on disk
                run.last_saved = None
            if multi_process():
                # An error need not strike every process at the same step (or
                # at all): a save needs all of them, so none is attempted.
                warnings.warn(f"nkserde: the run failed; {self._newest()}", stacklevel=outside())
            elif run.changing == driver.step_count:  # (changing + 1: that step completed and was counted)
                # The error struck after this step began changing the driver
                # (its sampling, its update) and before every callback
                # finished it: the driver is between two steps and cannot
                # be saved as either.
                what = "applied" if run.dirty_step is not None else "computed"
                warnings.warn(
                    f"nkserde: the run failed while step {run.changing} was being {what}; half a step is not "
                    f"checkpointed: {self._newest()}",
                    stacklevel=outside(),
                )
            else:
                run.completed = driver.step_count
                if run.last_saved != run.completed:
                    self._save(driver, asynchronous=False)
            self.wait()
        except Exception as exc:  # never mask the error that stopped the run
            warnings.warn(f"nkserde: could not checkpoint after the error: {exc}", stacklevel=outside())
        finally:
            job = self._job
            self._finish(raise_write_error=False)
        if isinstance(error, Exception) and jax.process_index() == 0 and job is not None and self.requeue_on_error:
            self._requeue_after_error(job)

    def _requeue_after_error(self, job: JobControl):
        try:
            count = self._files.error_requeues()
            # counted before the requeue: SLURM ends the job as soon as it is requeued
            job.after_error(count, self.requeue_on_error, count_it=self._files.count_error_requeue)
        except Exception as exc:  # never mask the error that stopped the run
            say(f"{self.directory}: could not requeue after the error: {exc}", logging.WARNING)

    # ----------------------------------------------------------------- resume

    def _payload(self, driver, run: _Run, completed: int, stopped: bool = False) -> dict:
        return checkpoint_file.payload(
            driver,
            completed,
            stopped,
            # the end the run was going to (a final stop is continued by a
            # rerun that asks for more)
            run_loop.target(driver),
            # process 0's record: loggers write there only, timers start
            # at slightly different times on each process
            loggers=primary(_keyed(run.loggers)),
            callbacks=primary(_keyed(run.callbacks)),
        )

    def _start(self, driver, run: _Run) -> bool:
        """Decides on process 0 what to resume (lock, fingerprint, newest
        checkpoint that verifies) and tells every process; then every
        process loads that checkpoint. Returns whether the run already
        stopped for good (nothing to do)."""
        current = run_fingerprint.fingerprint(driver)
        chosen_here = []  # process 0 keeps the state it verified

        def decide():
            choice = choose_checkpoint(self._files, self.resume, current, every=self._every)
            chosen_here.extend(choice or ())
            return str(choice[0]) if choice else None

        chosen = on_process_0(
            coordination_name("checkpoint:decisions", self.directory),
            decide,
            f"{self.directory}: process 0 could not start the run",
            what=f"the start of the run in {self.directory}",
        )
        if chosen is None:
            if self.init_from is not None:
                self._start_from_another_run(driver)
            return False
        path = Path(chosen)
        state = chosen_here[1] if chosen_here else logger_histories.resolve(path, api.load_state_dict(path))
        try:
            self._restore(driver, run, state)
        except NkserdeError as exc:
            raise in_file(exc, path) from None
        self.resumed_from = driver.step_count
        nothing_to_do = bool(state.get(checkpoint_file.STOPPED)) and not run_loop.asks_for_more(
            driver, state.get(checkpoint_file.TARGET)
        )
        if nothing_to_do:
            say(
                f"{self.directory}: the run already stopped for good at step {driver.step_count} "
                f"({path.name}): nothing to do; ask for more steps (n_iter, T) to continue it"
            )
        else:
            say(f"{self.directory}: resumed {type(driver).__name__} from step {driver.step_count} ({path.name})")
        return nothing_to_do

    def _start_from_another_run(self, driver):
        """The variational state of ``init_from`` into the driver's, in place
        (every process reads it)."""
        source = self.init_from
        if not source.exists():
            raise NkserdeError(f"{self.directory}: init_from={source}: no such file or directory")
        at = self.at if self.at is not None else _state_path(source)
        try:
            new = api.load(driver.state, source, at=at, strict=self.strict, rename=self.rename)
        except NkserdeError as exc:
            raise in_file(exc, f"{self.directory}: init_from={source}") from None
        _assign(driver.state, new)
        say(
            f"{self.directory}: no checkpoint of this run; starting from the variational state of {source}"
            + (f" (at {at!r})" if at else "")
        )

    def _check_storable(self, driver, run: _Run):
        """Fails now, not at the first checkpoint ``every`` steps in, if
        something in the run cannot be stored."""
        try:
            api.check_storable(self._payload(driver, run, driver.step_count))
        except NkserdeError as exc:
            raise in_file(exc, f"{self.directory}: this run cannot be checkpointed") from None

    def _restore(self, driver, run: _Run, state):
        # Everything is rebuilt (and any mismatch raised) before anything
        # live is touched.
        new = api.from_state_dict(driver, state[checkpoint_file.DRIVER])
        completed = api.from_state_dict(0, state[checkpoint_file.COMPLETED_STEPS])
        restored = []
        for kind, live in ((checkpoint_file.LOGGERS, run.loggers), (checkpoint_file.CALLBACKS, run.callbacks)):
            stored = state[kind]
            for key, obj in _keyed(live).items():
                if key in stored:
                    restored.append((obj, api.from_state_dict(obj, stored[key])))
                else:
                    warnings.warn(f"nkserde: {key} is not in the checkpoint; it starts empty", stacklevel=outside())
        # In place: the script's own variational state object gets the numbers.
        _assign(driver.state, new.state)
        _assign(driver, new, skip=(internals.DRIVER_STATE_ATTRIBUTE,))
        internals.set_step_count(driver, completed)
        for live, new_obj in restored:
            _assign(live, new_obj)
            if jax.process_index() == 0:  # loggers write their files there only
                netket_loggers.resume_files(live, new_obj)
        if jax.process_index() == 0:  # the history log holds what this checkpoint holds
            run.histories.resumed(state)

    # ------------------------------------------------------------------- save

    def _save(self, driver, *, asynchronous: bool, stopped: bool = False):
        run = self._run
        completed = run.completed
        started = time.monotonic()
        run.saving = True  # a Ctrl-C now waits for the save (see SignalCatcher)
        try:
            # the write in flight appends to the history log: this one's rows start where it ended
            self._writer.wait()
            self._settle_write_error()
            state = api.state_dict(self._payload(driver, run, completed, stopped))
            # the loggers' rows since the last checkpoint, copied, to be appended to the history log
            state, history = run.histories.prepare(state, completed)
            if asynchronous:
                state = host_copy(state)
            path = self.path(completed)
            try:
                steps = self._write_steps(state, path, completed, history)
                self._writer.submit(steps, asynchronous=asynchronous, target=path)
            except NkserdeError as exc:
                run.last_saved = completed  # a failed checkpoint is not retried at the same step
                self._write_failed(exc)
            else:
                run.last_saved = completed  # (a KeyboardInterrupt leaves it unsaved: retried on the way out)
        finally:
            run.saving = False
        seconds = time.monotonic() - started
        if not asynchronous:
            if self._job is not None:
                self._job.saved(seconds)
            if run.schedule is not None:
                run.schedule.saved(seconds)
        run.snapshot_seconds = seconds

    def _settle_write_error(self):
        """The error of the last write, if it failed: raised or warned about
        (``on_write_error``); checkpoints retention could not delete: warned
        about."""
        self._warn_retire_failures()
        try:
            self._writer.raise_error()
        except NkserdeError as exc:
            self._write_failed(exc)

    def _warn_retire_failures(self):
        while self._retire_failures:
            step, exc = self._retire_failures.pop(0)
            warnings.warn(
                f"nkserde: {self.directory}: deleting {self.path(step).name} (retention) failed: "
                f"{exc.strerror or exc}; it stays on disk",
                stacklevel=outside(),
            )

    def _write_failed(self, exc: NkserdeError):
        if self.on_write_error == "raise":
            raise exc
        warnings.warn(
            f"nkserde: {exc}; {self._newest()}; the run goes on (on_write_error='warn')", stacklevel=outside()
        )

    def _newest(self) -> str:
        """Which checkpoint a rerun resumes, in words."""
        try:
            steps = self.steps()
        except OSError:
            steps = []
        return f"{self.path(steps[-1]).name} is the newest checkpoint" if steps else "there is no checkpoint yet"

    def _write_steps(self, state, path, completed, history=None):
        """The steps of writing one checkpoint (see background.BackgroundWrite).
        ``history``: process 0's steps appending its loggers' new rows to the
        history log, first: they return the position the checkpoint records."""
        if history is not None:
            state = {**state, checkpoint_file.HISTORY: primary((yield from history))}
        # every process together; one write in flight, so one key sequence for the directory
        sequence = coordination_name("checkpoint:save", self.directory)
        yield from api.save_state_dict_steps(state, path, root_type=checkpoint_file.ROOT_TYPE, sequence=sequence)
        if jax.process_index() == 0:  # directory upkeep is process 0's
            yield from api.verify_steps(path)  # only a verified checkpoint may retire older ones
            # a deletion that fails is not a failure of this write: said apart
            self._files.retire(self._retention, completed, failed=self._retire_failures)

    def wait(self):
        """Blocks until the write in flight (if any) has finished; whatever
        the background thread has not done yet, this thread does."""
        self._writer.wait()

    def _finish(self, raise_write_error=True):
        if self._run is not None and self._run.stop is not None:
            self._run.stop.close()
        self._run, self._job = None, None
        self._signals.restore()
        if current_job() is not None:  # every process of the job
            job_control.absorb_late_signals(self.signals)
        unreleased = self._files.lock.release()
        if unreleased is not None:  # a read-only file system: never an exception at the run's end
            warnings.warn(
                f"nkserde: {self.directory}: releasing the lock {self._files.lock.path.name} failed: "
                f"{unreleased.strerror or unreleased}; a later run on this host takes it over once this "
                "process has ended",
                stacklevel=outside(),
            )
        if raise_write_error:
            self._settle_write_error()
            return
        self._warn_retire_failures()
        if self._writer.error is not None:
            say(f"{self.directory}: writing a checkpoint failed: {self._writer.discard_error()}", logging.WARNING)


class _Run:
    """What a Checkpoint tracks while one run() call goes on."""

    def __init__(self, loggers: tuple, callbacks: tuple, end_step: int | None):
        self.loggers = loggers  # stored and restored with the driver
        self.callbacks = callbacks
        # where to stop a loop that would run past its end (NetKet 3.22)
        self.end_step = end_step
        self.completed = 0  # steps the driver has completed
        self.last_saved: int | None = None  # step of the newest checkpoint submitted
        self.dirty_step: int | None = None  # the step whose update has begun, until it completes
        self.changing: int | None = None  # the step whose sampling has begun, until it completes
        self.saving = False  # a checkpoint is being taken in the run's thread
        self.nothing_to_do = False  # resumed the final checkpoint of a stopped run
        self.stop = None  # a StopFlag shared by the processes of a multi-process run
        self.stopped_by: int | None = None  # the signal (or WALLTIME) that stopped the run
        self.histories: logger_histories.HistoryAppender | None = None  # what the history log holds (process 0)
        self.schedule: SaveSchedule | None = None  # when to checkpoint (every)
        self.next_save: int | None = None  # several processes, every not in steps: process 0's decision
        self.snapshot_seconds = 0.0  # the run's own time in its last checkpoint's start
        self.resume_times: list | None = None  # a resumed run's times, until it is told (see _report_resume)


_RUNS: dict[str, itertools.count] = {}


def _numbered(name: str) -> str:
    """``name`` and how many runs in this process used it before: every
    process runs the same sequence, so each run gets its own keys."""
    return f"{name}:{next(_RUNS.setdefault(name, itertools.count()))}"


def _state_path(source: Path) -> str | None:
    """Where the variational state is in ``source``: ``"state"`` in a driver
    or Checkpoint file (or directory), the whole file otherwise (a saved
    variational state, a file NetKet wrote)."""
    if source.is_dir():
        return "state"
    try:
        root = api.info(source)["root_type"]
    except (NkserdeError, OSError):
        return None  # not an nkserde file (NetKet's own), or unreadable: load says which
    return "state" if root == checkpoint_file.ROOT_TYPE or "state" in api.stored_fields(root) else None


def _assign(live, restored, skip=()):
    """Makes ``live`` hold what ``restored`` holds, attribute by attribute,
    so references users keep to ``live`` see the restored numbers."""
    for name, value in vars(restored).items():
        if name not in skip:
            object.__setattr__(live, name, value)
