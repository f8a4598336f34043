"""The SLURM job a run belongs to, as SLURM's own commands tell it: its
time left, whether it can be requeued, why it is ending, and the requeue.
Knows SLURM only (no NetKet, no files).

    job = current_job()                 # None outside a SLURM job
    job.time_left()                     # seconds, or None (no limit)
    job.show().requeueable              # scontrol show job: Requeue=1, a batch job
    job.requeue()                       # scontrol requeue: SLURM ends the job now
    job.preempt_mode()                  # the partition's PreemptMode: "OFF", "SUSPEND,GANG", ...
    job_record("4711")                  # another job's state and restarts, None if SLURM forgot it

Every command is bounded by a timeout and fails with :class:`SlurmError`
(a controller that does not answer, a command that is missing): the
callers warn and go on, a run is never stopped by SLURM's tools failing.
Process 0 alone calls them, a few times per job, so that a run of 1024
processes does not ask slurmctld 1024 times.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from ...checkpoint_files.lock_owner import JobRecord
from ...errors import NkserdeError

# slurmctld answers within its MessageTimeout (10 s by default); a command
# stuck past this is treated as failed
COMMAND_TIMEOUT = 30.0


class SlurmError(NkserdeError):
    """A SLURM command failed or did not answer (the message says which and why)."""


def current_job() -> Job | None:
    """The job this process runs in (``SLURM_JOB_ID``, in the partition
    ``SLURM_JOB_PARTITION``), or None outside SLURM."""
    job_id = os.environ.get("SLURM_JOB_ID", "").strip()
    return Job(job_id, os.environ.get("SLURM_JOB_PARTITION", "").strip()) if job_id else None


def parse_duration(text: str) -> float | None:
    """Seconds of a SLURM duration (``[days-][hours:]minutes:seconds``, as
    ``squeue -O TimeLeft`` prints it), None for none (``UNLIMITED``,
    ``NOT_SET``, empty). A time left that SLURM calls ``INVALID`` (a job
    past its limit, being killed) is 0."""
    text = text.strip()
    if text in ("", "UNLIMITED", "NOT_SET", "N/A", "Partition_Limit"):
        return None
    if text == "INVALID":
        return 0.0
    days, _, clock = text.rpartition("-")
    try:
        parts = [int(p) for p in clock.split(":")]
        if not 1 <= len(parts) <= 3 or any(p < 0 for p in parts):
            raise ValueError
        while len(parts) < 3:
            parts.insert(0, 0)
        hours, minutes, seconds = parts
        return float(int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds)
    except ValueError:
        raise SlurmError(f"cannot read the SLURM duration {text!r}") from None


@dataclass(frozen=True)
class JobState:
    """What ``scontrol show job`` says of a job, the fields nkserde reads."""

    state: str  # JobState: RUNNING, COMPLETING, PENDING, ...
    reason: str  # Reason: TimeLimit, None, ...
    requeue: bool  # Requeue=1: the job may be requeued
    batch: bool  # BatchFlag=1: a batch job (an salloc allocation cannot be requeued)
    restarts: int  # Restarts: how often the job was requeued
    exit_code: str  # ExitCode of the batch script: "status:signal"

    @property
    def requeueable(self) -> bool:
        return self.requeue and self.batch

    @property
    def at_time_limit(self) -> bool:
        """SLURM is ending the job because it reached its time limit."""
        return self.reason == "TimeLimit" or self.state == "TIMEOUT"

    @property
    def batch_signal(self) -> int:
        """The signal that ended the batch script (``ExitCode=0:10``: SIGUSR1),
        0 if none did."""
        _, _, sig = self.exit_code.partition(":")
        return int(sig) if sig.isdigit() else 0

    @classmethod
    def parse(cls, text: str) -> JobState:
        def field(name: str, default: str = "") -> str:
            match = re.search(rf"(?:^|\s){name}=(\S*)", text)
            return match.group(1) if match else default

        restarts = field("Restarts", "0")
        return cls(
            state=field("JobState"),
            reason=field("Reason"),
            requeue=field("Requeue") == "1",
            batch=field("BatchFlag") == "1",
            restarts=int(restarts) if restarts.isdigit() else 0,
            exit_code=field("ExitCode", "0:0"),
        )


@dataclass(frozen=True)
class Job:
    """A SLURM job, by id, and its partition ("" if unknown)."""

    job_id: str
    partition: str = ""

    def show(self) -> JobState:
        return JobState.parse(self._run("scontrol", "show", "job", "--oneliner", self.job_id))

    def time_left(self) -> float | None:
        """Seconds until SLURM ends the job (``squeue -O TimeLeft``, what
        NetKet's AutoSlurmRequeue reads too), None if it has no limit."""
        return parse_duration(self._run("squeue", "--noheader", "--jobs", self.job_id, "--Format", "TimeLeft"))

    def preempt_mode(self) -> str | None:
        """The ``PreemptMode`` of the job's partition (``scontrol show
        partition``: ``OFF``, ``REQUEUE``, ``SUSPEND,GANG``, ...; the
        cluster's when the partition sets none), None if the partition is
        unknown."""
        if not self.partition:
            return None
        text = self._run("scontrol", "show", "partition", "--oneliner", self.partition)
        match = re.search(r"(?:^|\s)PreemptMode=(\S*)", text)
        return match.group(1) if match else None

    def requeue(self) -> None:
        """``scontrol requeue``: SLURM ends every step of the job at once
        (SIGTERM, then SIGKILL after KillWait) and queues it again."""
        self._run("scontrol", "requeue", self.job_id)

    def _run(self, *command: str) -> str:
        return _run(command, f"SLURM_JOB_ID={self.job_id}")


def job_record(job_id: str) -> JobRecord | None:
    """What SLURM says of job ``job_id`` (``scontrol show job``): its state
    and restart count, or None if SLURM does not know it (it ended more than
    ``MinJobAge`` ago). A controller that does not answer: SlurmError. How
    a checkpoint directory's lock judges a lock another job holds."""
    try:
        text = _run(("scontrol", "show", "job", "--oneliner", job_id), f"the job {job_id} holding a lock")
    except SlurmError as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    state = JobState.parse(text)
    return JobRecord(state.state, state.restarts)


def _run(command: tuple[str, ...], context: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    except FileNotFoundError:
        raise SlurmError(f"`{command[0]}` is not on PATH ({context})") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(command)}` did not answer within {COMMAND_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SlurmError(f"`{' '.join(command)}` failed (exit {done.returncode}): {said[-1] if said else ''}")
    return done.stdout
