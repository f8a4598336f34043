"""The requeue of a SLURM job whose run lost a process, made by a small
process of its own, which outlives the run's and tries again while SLURM
cannot be reached.

Both are needed after a node is lost. JAX's distributed runtime ends the
processes of a run that lost one, in C++ and without a word from Python
(its coordination service's heartbeats, its client's failed requests),
sometimes before SLURM could be asked anything; and a process on a node
cut off the network reaches no controller until the network is back, at
which moment JAX may end it. Left alone, such a job ends FAILED, or stays
RUNNING with no process left (srun waiting for a task's exit that the
partition lost).

    requeue = LastingRequeue.start(job_id, label, lost)  # any process of the run, once
    requeue.wait(seconds)                                # the run's end keeps the task alive meanwhile

The requeue process is this file run by path (``python -I -S``: the
standard library only), a child of the run's process and so in the job's
step on its node. Each try reads the job (``scontrol show job``) and
requeues it (``scontrol requeue``) only while it is the same attempt (its
``Restarts`` as ``SLURM_RESTART_COUNT`` said when the run started) and
RUNNING or SUSPENDED: an attempt that SLURM requeued or ended already, or
one that another process of the run requeued first, is left alone. A job
that cannot be requeued (``--no-requeue``, not a batch job) is said so.
While SLURM does not answer it tries again every ``RETRY`` seconds (says
so once), for ``LIFETIME`` at most. It ignores SIGTERM: SLURM answers the
requeue by ending the job's processes, and the line that says what
happened comes after.

Standard library only, and no import of nkserde: the process runs this
file as a script.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

RETRY = 5.0  # seconds between two tries while SLURM does not answer
COMMAND_TIMEOUT = 30.0  # slurmctld answers within its MessageTimeout (10 s by default)
LIFETIME = 24 * 3600.0  # seconds of tries at most


class LastingRequeue:
    """The run's side: the requeue process."""

    def __init__(self, process: subprocess.Popen):
        self.process = process

    @classmethod
    def start(cls, job_id: str, label: str, lost: str, restarts: str | None = None, retry: float = RETRY):
        """Starts the requeue of SLURM job ``job_id`` (its attempt
        ``restarts``: ``SLURM_RESTART_COUNT``, 0 if unset) for ``lost``
        (what was lost, in a user's words), tried every ``retry`` seconds
        while SLURM does not answer; ``label`` begins its lines."""
        if restarts is None:
            restarts = os.environ.get("SLURM_RESTART_COUNT", "0") or "0"
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), job_id, restarts, label, lost, str(retry)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        return cls(process)

    def wait(self, seconds: float) -> bool:
        """Waits up to ``seconds`` for the requeue process to end; whether it did."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True


def say(label: str, message: str) -> None:
    print(f"nkserde: {label}: {message}", file=sys.stderr, flush=True)


def scontrol(*arguments: str) -> tuple[bool, str]:
    """Whether ``scontrol arguments`` succeeded, and what it printed."""
    try:
        done = subprocess.run(["scontrol", *arguments], capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"scontrol {arguments[0]}: {exc}"
    return done.returncode == 0, " ".join((done.stdout + done.stderr).split())[:300]


def field(text: str, name: str) -> str:
    match = re.search(rf"(?:^|\s){name}=(\S*)", text)
    return match.group(1) if match else ""


def try_once(job_id: str, restarts: str, label: str, lost: str) -> str | None:
    """One try: None once it is over (requeued, or nothing to do), else
    what SLURM answered."""
    answered, shown = scontrol("show", "job", "--oneliner", job_id)
    if not answered:
        return shown
    state = field(shown, "JobState")
    if field(shown, "Restarts") != restarts or state not in ("RUNNING", "SUSPENDED"):
        say(label, f"{lost}; SLURM job {job_id} is {state or 'gone'} already: not requeued")
        return None
    if field(shown, "Requeue") != "1" or field(shown, "BatchFlag") != "1":
        say(label, f"{lost}; SLURM job {job_id} cannot be requeued: submit it again to resume")
        return None
    requeued, answer = scontrol("requeue", job_id)
    if not requeued:
        return answer
    say(label, f"SLURM job {job_id} requeued: {lost}; it resumes from the newest checkpoint")
    return None


def main(argv: list[str]) -> int:
    job_id, restarts, label, lost, retry = argv[1], argv[2], argv[3], argv[4], float(argv[5])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    deadline = time.monotonic() + LIFETIME
    said = False
    while (answer := try_once(job_id, restarts, label, lost)) is not None:
        if time.monotonic() > deadline:
            say(label, f"{lost}; SLURM did not answer for {LIFETIME / 3600:.0f} h: submit the job again to resume")
            return 1
        if not said:
            said = True
            say(label, f"{lost}; requeueing SLURM job {job_id} failed ({answer}): trying again every {retry:g} s")
        time.sleep(retry)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
