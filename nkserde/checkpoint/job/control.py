"""What a checkpointed run does about the job it runs in while it runs:
its options (:class:`JobOptions`), the stop before the job's time is up
(:class:`~nkserde.checkpoint.job.walltime.WalltimeGuard`, with the stopped
time of a suspended job left out), and the job's signals once the run is
done. Knows SLURM (through :mod:`.slurm`) and messages; no NetKet, no
files. The requeue that follows a stop is :mod:`.requeue`'s.

Process 0 reads the job (two SLURM commands when the run starts, at most
two more when it stops) and decides; the other processes learn the stop
through the run's stop flag and never ask SLURM.

    control = JobControl.start(job, steps, walltime="auto", lag_steps=0, label="ckpt", now=now, watch_stops=True)
    steps.started(now, measured=control.step_started(now))  # every step start
    control.due(now)                  # stop now with a checkpoint?
    control.saved(seconds)            # every checkpoint written
    control.close()                   # the run ended: its watch of stops (SIGSTOP/SIGCONT) ends
"""

from __future__ import annotations

import atexit
import logging
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._log import say
from ..option_checks import bad_option, format_duration, is_number, one_of, whole
from .slurm import Job, SlurmError
from .stopped_time import StoppedTime
from .walltime import WalltimeGuard

if TYPE_CHECKING:
    from ..step_times import StepTimes

# The stop reasons in the stop flag beside signal numbers: the walltime
# guard's, and process 0's lock taken over by another run (the run stops
# on every process without a checkpoint: the directory is another run's)
WALLTIME = 1000
LOCK_LOST = 1001
# Exit status of a program whose run a signal or the walltime stopped, once
# checkpointed (sysexits' EX_TEMPFAIL: "try again later"): the same script
# resumes it. What a job script tests instead of a file of its own.
EXIT_INTERRUPTED = 75

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


@dataclass(frozen=True)
class JobOptions:
    """What a checkpointed run does about the job it runs in, checked (the
    Checkpoint's options of these names): ``walltime`` (``"auto"``,
    seconds from the run's start, or None), ``requeue`` (``"auto"``,
    ``"never"``), ``requeue_on_error`` (an int >= 0) and the ``signals``
    that stop a run with a checkpoint."""

    walltime: float | str | None = "auto"
    requeue: str = "auto"
    requeue_on_error: int = 0
    signals: tuple = DEFAULT_SIGNALS

    def __post_init__(self):
        if not (self.walltime is None or self.walltime == "auto" or (is_number(self.walltime) and self.walltime > 0)):
            raise bad_option("walltime", '"auto", None or a positive number of seconds', self.walltime)
        one_of("requeue", self.requeue)
        whole("requeue_on_error", self.requeue_on_error, least=0)
        object.__setattr__(self, "signals", tuple(self.signals))


def stop_name(reason: int) -> str:
    """``"walltime"`` or the signal's name (``"SIGUSR1"``)."""
    if reason == WALLTIME:
        return "walltime"
    if reason == LOCK_LOST:
        return "the lock taken over"
    try:
        return signal.Signals(reason).name
    except ValueError:
        return f"signal {reason}"


class JobControl:
    """One run's walltime guard and the job it reads. ``job`` is None
    outside SLURM and on processes other than 0 (nothing is read there)."""

    def __init__(self, job: Job | None, *, guard: WalltimeGuard | None, label: str):
        self.job = job
        self.guard = guard
        self.label = label
        self._rechecked = False
        # the process's stops, watched while a guard exists (start): the
        # guard's clock runs on while the process is stopped
        self.stopped_time: StoppedTime | None = None
        self._discard = 0  # step intervals whose measure a stop spoiled

    @classmethod
    def start(
        cls,
        job: Job | None,
        steps: StepTimes,
        *,
        walltime,
        lag_steps: int,
        label: str,
        now: float,
        watch_stops: bool = False,
    ) -> JobControl:
        """``steps``: the run's StepTimes, which the guard reads.
        ``walltime``: ``"auto"`` (the SLURM job's time left, read now),
        seconds from now (any scheduler), or None (no guard).
        ``watch_stops``: with a guard, watch the process's stops (a SIGCONT
        handler and a thread, until :meth:`close`), which its clock counts."""
        guard = None
        if walltime == "auto" and job is not None:
            try:
                left = job.time_left()
            except SlurmError as exc:
                say(f"{label}: cannot read the time left of SLURM job {job.job_id} ({exc}); no walltime stop")
                left = None
            if left is not None:
                guard = WalltimeGuard(now + left, steps, lag_steps=lag_steps)
                say(
                    f"{label}: SLURM job {job.job_id} ends in {format_duration(left)}; the run stops with a checkpoint "
                    "when the time left falls below a step plus a checkpoint"
                )
        elif isinstance(walltime, (int, float)) and not isinstance(walltime, bool):
            guard = WalltimeGuard(now + float(walltime), steps, lag_steps=lag_steps)
        control = cls(job, guard=guard, label=label)
        if guard is not None and watch_stops:
            control.stopped_time = StoppedTime().start()
        return control

    def close(self) -> None:
        """The run ended: the watch of its stops ends (its SIGCONT handler
        put back, its thread ended)."""
        if self.stopped_time is not None:
            self.stopped_time.close()
            self.stopped_time = None

    # ------------------------------------------------------------ the guard

    def step_started(self, now: float) -> bool:
        """A step starts at ``now``: whether the interval that ends here
        measures a step (False: the process was stopped in it)."""
        self._catch_up(now)
        measured = self._discard == 0
        self._discard = max(0, self._discard - 1)
        return measured

    def saved(self, seconds: float, in_background: bool = False) -> None:
        stopped = self._discard > 0 or (self.stopped_time is not None and self.stopped_time.pending)
        if self.guard is not None and not stopped:  # a save the process was stopped in is no measure
            self.guard.saved(seconds, in_background)

    def _catch_up(self, now: float) -> None:
        """The stops since the last look (SIGCONT): the guard forgets the
        steps they fell in and the job's end moves by the stopped time
        (SLURM extends a suspended job): read again from SLURM, or shifted
        by the time measured."""
        if self.stopped_time is None or self.guard is None:
            return
        continued, seconds, awaiting = self.stopped_time.take()
        if not continued:
            if awaiting:  # stopped, or a starved thread: no measure either way
                self._discard = max(self._discard, 1)
            return
        # the interval going on, and the next one: the SIGCONT may be handled
        # just after a step's start was timed, before it was counted
        self._discard = 2
        left = None
        if self.job is not None:
            try:
                left = self.job.time_left()
            except SlurmError:
                pass
            else:
                if left is None:  # the limit was lifted
                    self.guard = None
                    return
        if left is not None:
            self.guard.extend(now + left)
        else:
            self.guard.shift(seconds)
        say(
            f"{self.label}: the process was stopped (SIGCONT after {format_duration(seconds)}); the walltime "
            f"guard leaves that step out, {format_duration(self.guard.time_left(now))} left before the job's end"
        )

    def due(self, now: float) -> bool:
        self._catch_up(now)
        guard = self.guard
        if guard is None or not guard.due(now):
            return False
        if self.job is not None and not self._rechecked:
            # once per run: an administrator may have moved the job's end
            self._rechecked = True
            try:
                left = self.job.time_left()
            except SlurmError:
                left = guard.time_left(now)
            if left is None:  # the limit was lifted
                self.guard = None
                return False
            guard.extend(now + left)
            if not guard.due(now):
                return False
        say(
            f"{self.label}: {format_duration(guard.time_left(now))} left before the job's end, a step and a "
            f"checkpoint take up to {format_duration(guard.reserve())}: stopping now"
        )
        return True


# the partitions already warned about by this process (once, not every run)
_SUSPEND_WARNED: set[str] = set()


def warn_if_suspending(job: Job, label: str) -> None:
    """Process 0 of a multi-process run in SLURM job ``job``: warns, once
    per process and partition, when the partition may suspend the job
    (PreemptMode SUSPEND or GANG: SIGSTOP to every task, SIGCONT later).
    JAX's distributed service takes a process whose heartbeats stopped for
    ``heartbeat_timeout_seconds`` (100 by default) for dead and aborts every
    process, in C++, with no checkpoint (abort_watch.py requeues the job);
    only the script's own ``jax.distributed.initialize`` sets it, and JAX
    does not say what it was set to: the warning cannot tell a script that
    did."""
    if job.partition in _SUSPEND_WARNED:
        return
    try:
        mode = job.preempt_mode()
    except SlurmError:
        return
    _SUSPEND_WARNED.add(job.partition)
    if not mode or not {"SUSPEND", "GANG"} & set(mode.upper().split(",")):
        return
    say(
        f"{label}: SLURM partition {job.partition} may suspend this job (PreemptMode={mode}); JAX aborts every "
        "process of a job suspended for longer than its heartbeat timeout (100 s by default): unless your "
        "jax.distributed.initialize sets heartbeat_timeout_seconds above the longest suspension, do so "
        "(docs/guides/slurm.md)",
        logging.WARNING,
    )


_IGNORED_AT_EXIT: set[int] = set()  # the signals ignored from the interpreter's exit on


def absorb_late_signals(signals) -> None:
    """In a SLURM job, once a run is done: the job's ``--signal`` (the
    signals of ``signals`` but SIGTERM) may still come, while the script
    ends or goes on after ``run()``; where Python would die of it (no
    handler), it is noted and ignored, so a finished run's job completes.
    From the interpreter's exit on, they are ignored whatever their
    handler: Python's finalization gives SIG_DFL back to every signal with
    a Python handler, and the job's signal in the moments after would end a
    completed job FAILED."""
    late = {signum for signum in signals if signum != signal.SIGTERM}
    if late and not _IGNORED_AT_EXIT:
        atexit.register(_ignore_at_exit)
    _IGNORED_AT_EXIT.update(late)
    for signum in late:
        if signal.getsignal(signum) is not signal.SIG_DFL:
            continue
        try:
            signal.signal(signum, _late_signal)
        except ValueError:  # not the main thread
            return


def _late_signal(signum, frame):
    say(f"{stop_name(signum)} after the checkpointed run ended: ignored (the job's --signal; nothing to stop)")


def _ignore_at_exit() -> None:
    for signum in _IGNORED_AT_EXIT:
        signal.signal(signum, signal.SIG_IGN)  # atexit runs in the main thread
