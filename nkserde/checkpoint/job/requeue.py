"""Whether and why a checkpointed run's SLURM job is requeued, and the
requeue: after the run was stopped (the walltime guard, the job's
signals), after it failed (``requeue_on_error``), and after it lost a
process (its node down, cut off, rebooted, or the process killed). Knows
SLURM (through :mod:`.slurm`) and messages; no NetKet, no files.

    requeue = JobRequeue(job, requeue="auto", label="ckpt/run-0")
    requeue.after_stop(reason, signals)   # process 0, once the stopped run is checkpointed
    requeue.after_error(count, limit)     # process 0, once the failed run is checkpointed
    requeue.after_lost_process(lost)      # any process: a requeue process that outlives this one

Process 0 reads the job and decides after a stop or an error: the other
processes learn the stop through the run's stop flag and never ask SLURM.
A lost process is heard by whichever process listened for it, or whose
collective failed: that process starts the requeue
(:mod:`.lasting_requeue`), once.
"""

from __future__ import annotations

import logging
import signal
import threading

from ..._log import say
from ..process_runs import PROCESS_RUNS
from .control import stop_name
from .lasting_requeue import LastingRequeue
from .slurm import Job, SlurmError


class JobRequeue:
    """The requeue of one run's job. ``job`` is None outside SLURM; on
    processes other than 0 it is read for a lost process only."""

    def __init__(self, job: Job | None, *, requeue: str, label: str):
        self.job = job
        self.requeue = requeue
        self.label = label
        self._lost: LastingRequeue | None = None  # the requeue after a lost process, once started
        self._lost_lock = threading.Lock()  # the watch's thread and the run's may both hear a loss

    def after_stop(self, reason: int, signals=()) -> bool:
        """Process 0, once the stopped run is checkpointed: requeues the job
        if the scheduler stopped it (the walltime guard; a signal of
        ``signals`` other than SIGTERM, i.e. the job's ``--signal``;
        SIGTERM at the job's time limit) and it can go further. Says what
        it did and why. Returns whether it requeued."""
        job = self.job
        if job is None or self.requeue == "never":
            return False
        state = self._job_state("not requeued")
        if state is None:
            return False
        why = stop_name(reason)
        if reason == signal.SIGTERM:
            if state.at_time_limit:
                why = "the job's time limit (SIGTERM)"
            elif state.batch_signal and state.batch_signal in {int(s) for s in signals} - {signal.SIGTERM}:
                # --signal=B:USR1@N signals the batch shell alone: it died of
                # it, and SLURM ended the job (SIGTERM to its steps)
                say(
                    f"{self.label}: the batch script died of {stop_name(state.batch_signal)} and SLURM ended "
                    f"the job: --signal=B:{stop_name(state.batch_signal)[3:]}@N signals the batch shell only; "
                    "write --signal=USR1@N (no B:), or forward it to srun as docs/guides/slurm.md shows",
                    logging.WARNING,
                )
                why = f"{stop_name(state.batch_signal)} (through the batch shell)"
            else:
                say(
                    f"{self.label}: SIGTERM from SLURM (job {job.job_id} {state.state}, reason {state.reason}): "
                    "cancelled, preempted or requeued by SLURM; nkserde does not requeue it"
                )
                return False
        if not state.requeueable:
            what = "not a batch job" if not state.batch else "submitted with --no-requeue"
            say(f"{self.label}: SLURM job {job.job_id} cannot be requeued ({what}): submit it again to resume")
            return False
        if not PROCESS_RUNS.progressed:  # its next attempt would make no progress either
            say(
                f"{self.label}: not requeued: this job completed no step before {why} (a step and a "
                "checkpoint take longer than the job has?)",
                logging.WARNING,
            )
            return False
        return self._requeue(f"requeued: the run was stopped by {why} (restart {state.restarts + 1})")

    def after_error(self, count: int, limit: int, count_it=lambda: None) -> bool:
        """Process 0, when the run failed: requeues the job while it failed
        at most ``limit`` times (``count`` of them before this one), calling
        ``count_it()`` first; says so either way."""
        job = self.job
        if job is None or self.requeue == "never" or limit <= 0:
            return False
        if count >= limit:
            say(
                f"{self.label}: the run failed; not requeued: it failed {count + 1} times (requeue_on_error={limit})",
                logging.WARNING,
            )
            return False
        state = self._job_state("the run failed; not requeued")
        if state is None or not state.requeueable:
            return False
        count_it()
        return self._requeue(f"requeued after the run failed ({count + 1} of requeue_on_error={limit})")

    def after_lost_process(self, lost: str, *, refused: str | None = None) -> LastingRequeue | None:
        """Any process, when the run lost a process (``lost``: which and
        how, in a user's words), heard by the watch or by a collective that
        failed: the job is requeued and resumes from the newest checkpoint
        once SLURM can run it again (a job of several nodes waits for
        enough nodes), by a requeue process that outlives this one
        (:mod:`.lasting_requeue`), started once per run. Not if
        ``refused`` says why it must not be (said with ``lost``). Returns
        the requeue process, or None."""
        if self.job is None or self.requeue == "never":
            return None
        with self._lost_lock:
            if self._lost is not None:
                return self._lost
            if refused is not None:
                say(f"{self.label}: {lost}; not requeued: {refused}", logging.WARNING)
                return None
            try:
                self._lost = LastingRequeue.start(self.job.job_id, self.label, lost)
            except OSError as exc:
                say(f"{self.label}: {lost}; could not start the requeue ({exc}): submit the job again", logging.WARNING)
            return self._lost

    def _job_state(self, outcome: str):
        """The job's state as SLURM shows it, or None, having said
        ``outcome`` and why, when SLURM does not answer."""
        try:
            return self.job.show()
        except SlurmError as exc:
            say(f"{self.label}: {outcome}: {exc}", logging.WARNING)
            return None

    def _requeue(self, message: str) -> bool:
        # SLURM answers a requeue by ending the job: SIGTERM to its every
        # process, often before `scontrol requeue` has returned, SIGKILL
        # KillWait later. That SIGTERM is the echo of this request, not
        # news: the checkpoint is on disk and the program is ending. Python's
        # default would die of it, and a script's own handler would take it
        # for a kill from outside: either cuts the exit short (finally
        # blocks, atexit, JAX's shutdown). Ignored before scontrol starts,
        # so that scontrol, which inherits it, ignores it too.
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass
        try:
            self.job.requeue()
        except SlurmError as exc:
            say(f"{self.label}: requeueing failed: {exc}", logging.WARNING)
            return False
        say(f"{self.label}: SLURM job {self.job.job_id} {message}")
        return True
