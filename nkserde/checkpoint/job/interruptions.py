"""What stops a checkpointed run before its end, and what follows: the
signals it catches (SIGTERM, SIGUSR1; Ctrl-C deferred while a step is
half done or a checkpoint is being written), the walltime guard of the
job it runs in, the stop flag the processes of a multi-process run share
so that they all stop at the same step, and the requeue of the job once
the stopped (or failed) run is checkpointed, or once a multi-process run
in SLURM lost a process (its node down, cut off or rebooted: the others
wait in collectives, where only a thread of theirs runs). No NetKet.

    stops = Interruptions("ckpt", JobOptions(walltime="auto", requeue="auto"))
    stops.start(run)                     # on_run_start: handlers, the job, the flag, the peer watch
    measured = stops.step_started(now)   # every step start: False if the process was stopped since the last
    reason = stops.requested(run, now)   # stop now, with a checkpoint? (every process agrees)
    requeue = stops.end()                # the run's end: handlers put back
    requeue.after_stop(reason, signals)  # process 0, once the run is checkpointed
    stops.requeue_after_lost_process(requeue, lost)  # any process whose run failed of a lost process
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import jax

from ..._log import say
from ...checkpoint_files.directory import RunDirectory
from ...processes.jax_service import coordination_name, multi_process, reachable_host, stop_flag, store
from ...processes.peer_watch import PeerWatch
from . import control
from .abort_watch import AbortWatch
from .control import LOCK_LOST, WALLTIME, JobControl, JobOptions
from ..process_runs import PROCESS_RUNS
from .requeue import JobRequeue
from .signals import SignalCatcher
from .slurm import current_job

# How long a process whose run failed of a lost process waits for the
# requeue before it exits: alive, its task keeps the job's step (and the
# requeue process in it) from ending while SLURM cannot be reached
REQUEUE_WAIT = 600.0

if TYPE_CHECKING:
    from ..run import Run


class Interruptions:
    """The stops of the runs checkpointed in ``directory``, as ``options``
    say: on its signals, by the job's walltime, and the requeue of the job
    that follows."""

    def __init__(self, directory, options: JobOptions):
        self.directory = directory
        self.options = options
        self.job: JobControl | None = None  # the walltime guard of the run going on
        self.requeue: JobRequeue | None = None  # the requeue of its job
        self._run: Run | None = None
        self._first_step = 0  # the step the run started from
        # what the requeue after a lost process asks once the run has ended
        self._signalled, self._refused = False, None
        self._flag = None  # a StopFlag shared by the processes of a multi-process run
        self._abort_watch: AbortWatch | None = None  # requeues the job if JAX aborts the run (process 0)
        self._peer_watch: PeerWatch | None = None  # has the job requeued if a process of the run is lost (SLURM)
        self.catcher = SignalCatcher(
            options.signals,
            # Ctrl-C from a step's sampling to its end, or in a save: the
            # step (the save) finishes, is checkpointed, then Ctrl-C is raised
            busy=lambda: self._run is not None and (self._run.changing is not None or self._run.saving),
            on_defer=lambda: say(
                f"{directory}: Ctrl-C: finishing this step and checkpointing it; Ctrl-C again stops at once "
                "(the newest checkpoint on disk stays)"
            ),
        )

    def start(self, run: Run) -> None:
        """The run starts: its signal handlers, its job (process 0 alone
        asks SLURM, and decides), the stop flag of its processes."""
        self._run = run
        self._first_step = run.completed
        # decided when the run starts, not when the callback is built
        # (a script may build it before jax.distributed.initialize())
        self.catcher.defer_sigint = not multi_process()
        self.catcher.install()
        self.requeue = JobRequeue(current_job(), requeue=self.options.requeue, label=str(self.directory))
        self.job = JobControl.start(
            current_job() if jax.process_index() == 0 else None,
            run.steps,
            walltime=self.options.walltime if jax.process_index() == 0 else None,
            lag_steps=2 if multi_process() else 0,  # the stop flag's slack (coordination.StopFlag)
            label=str(self.directory),
            now=time.monotonic(),
            watch_stops=True,  # beside the handlers: the stops the guard leaves out
        )
        if multi_process() and self.job.job is not None:
            control.warn_if_suspending(self.job.job, str(self.directory))
            if self.options.requeue != "never":
                try:
                    self._abort_watch = AbortWatch.start(self.job.job.job_id, str(self.directory))
                except OSError as exc:  # never a failed run for the watcher's sake
                    say(f"{self.directory}: no watcher for an abort after a suspension ({exc})", logging.WARNING)
        if multi_process():
            self._flag = stop_flag(PROCESS_RUNS.numbered(coordination_name("checkpoint:stop", self.directory)))
            if current_job() is not None and self.options.requeue != "never":
                self._start_peer_watch()

    def step_started(self, now: float) -> bool:
        """A step starts at ``now``: whether the interval that ends here
        measures a step (False: the process was stopped in it)."""
        return self.job.step_started(now)

    def saved(self, seconds: float, in_background: bool = False) -> None:
        """A checkpoint took ``seconds`` (of the run; ``in_background``: from
        its snapshot to its file): the walltime guard keeps time for the
        last one, and for one in flight then."""
        if self.job is not None:
            self.job.saved(seconds, in_background)

    def requested(self, run: Run, now: float, lock_lost: bool = False) -> int | None:
        """The reason (a signal number, WALLTIME, or LOCK_LOST: process 0's
        lock was taken over) every process stops the run at this step, or
        None. One non-blocking request per step with several processes: a
        signal may reach them at different steps (see coordination.StopFlag)."""
        requested = (
            (LOCK_LOST if lock_lost else None) or self.catcher.received or (WALLTIME if self.job.due(now) else None)
        )
        return requested if self._flag is None else self._flag.check(run.completed, requested)

    def take_interrupt(self) -> bool:
        """Whether a Ctrl-C was deferred (and is now to be raised)."""
        pending, self.catcher.interrupt_pending = self.catcher.interrupt_pending, False
        return pending

    @property
    def interrupt_pending(self) -> bool:
        return self.catcher.interrupt_pending

    def end(self) -> JobControl | None:
        """The run ended: the flag closed, the handlers put back, a late
        ``--signal`` of the job absorbed. Returns the run's job."""
        if self._flag is not None:
            self._flag.close()
        self._signalled, self._refused = self.catcher.received is not None, self._refused_requeue(host=False)
        job, requeue, self.job, self.requeue, self._run, self._flag = self.job, self.requeue, None, None, None, None
        if self._peer_watch is not None:
            self._peer_watch.close()
            self._peer_watch = None
        if self._abort_watch is not None:
            self._abort_watch.close()
            self._abort_watch = None
        self.catcher.restore()
        if job is not None:
            job.close()
        if current_job() is not None:  # every process of the job
            control.absorb_late_signals(self.options.signals)
        return requeue

    def _start_peer_watch(self) -> None:
        """Every process of a multi-process run in a SLURM job keeps a watch
        on one other (:mod:`nkserde.processes.peer_watch`); a lost one has
        the job requeued."""
        name = PROCESS_RUNS.numbered(coordination_name("checkpoint:peers", self.directory))
        try:
            self._peer_watch = PeerWatch(
                store(), name, jax.process_index(), jax.process_count(), self._lost_peer,
                host=reachable_host(), say=lambda message: say(f"{self.directory}: {message}", logging.WARNING),
            ).start()  # fmt: skip
        except (OSError, ValueError) as exc:  # never a failed run for the watch's sake
            say(f"{self.directory}: no watch of the run's other processes ({exc})", logging.WARNING)

    def _lost_peer(self, peer: int, why: str, host: bool) -> None:
        """From the peer watch's thread, on any process: process ``peer`` is
        lost (``why``; ``host``: its host stopped answering), while this
        one most likely waits for it in a collective it cannot leave. Left
        alone, the job ends FAILED when the node comes back (srun finds its
        connection reset and kills every task: SIGKILL, no SIGTERM first),
        or stays RUNNING with no process once JAX has ended them, unless
        SLURM marks the node down before (``SlurmdTimeout``). So the job is
        requeued now, as after a save's PeerLostError; not after a signal
        (SLURM or the user is ending the job, and its processes end at
        different moments)."""
        requeue = self.requeue
        if self.catcher.received is not None or requeue is None:
            return
        requeue.after_lost_process(f"process {peer} of the run was lost ({why})", refused=self._refused_requeue(host))

    def _refused_requeue(self, host: bool) -> str | None:
        """Why a requeue after a lost process must not be, or None. It must
        start further on than this attempt did, or the same loss at the
        same point would requeue the job for ever: a checkpoint written by
        this attempt; a node whose host stopped answering (no script makes
        that happen again) needs only a step completed."""
        run = self._run
        if run is None:
            return "the run had not started"
        if run.last_saved is not None and run.last_saved > self._first_step:
            return None
        if host and run.completed > self._first_step:
            return None
        return "this attempt completed no step" if host else "this attempt wrote no checkpoint"

    def requeue_after_error(self, job: JobRequeue | None, files: RunDirectory) -> None:
        """Process 0, once the run that failed is checkpointed: the requeue,
        at most ``requeue_on_error`` times over the run's jobs."""
        limit = self.options.requeue_on_error
        if job is None or not limit:
            return
        try:
            count = files.error_requeues()
            # counted before the requeue: SLURM ends the job as soon as it is requeued
            job.after_error(count, limit, count_it=files.count_error_requeue)
        except Exception as exc:  # noqa: BLE001  (whatever the requeue raises, the run's own error must surface)
            say(f"{self.directory}: could not requeue after the error: {exc}", logging.WARNING)

    def requeue_after_lost_process(self, requeue: JobRequeue | None, lost: str) -> None:
        """Any process, once its run failed because a process of it was lost
        (``lost``: which, and how it surfaced): the requeue
        (JobRequeue.after_lost_process), unless a signal came first, and
        a wait for it, during which this process keeps its task alive."""
        if requeue is None or self._signalled:
            return
        try:
            lasting = requeue.after_lost_process(lost, refused=self._refused)
            if lasting is not None:
                lasting.wait(REQUEUE_WAIT)
        except Exception as exc:  # noqa: BLE001  (whatever the requeue raises, the run's own error must surface)
            say(f"{self.directory}: could not requeue after losing a process: {exc}", logging.WARNING)
