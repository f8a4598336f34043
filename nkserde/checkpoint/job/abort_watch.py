"""A job of several processes that JAX aborts when it is continued after a
suspension gets requeued all the same, by a small process that outlives
the run's.

JAX's coordination service takes tasks whose heartbeats are older than
``heartbeat_timeout_seconds`` (100 s by default) for dead; after a longer
``scontrol suspend`` it ends every process in C++ ("Terminating process
because the JAX distributed service detected fatal errors"): no Python
runs, no checkpoint is written, nothing requeues, and the job ends FAILED.
nkserde cannot decide at the SIGCONT: JAX keeps no record of the timeout
the script's ``jax.distributed.initialize`` gave it, so a job that
survives a 130 s suspension (the SLURM guide's 24 h timeout) and one that
dies of it look the same until one of them dies. The watcher sees which.

    watch = AbortWatch.start(job_id, label)  # process 0 of the run, in SLURM
    ...                                      # the run
    watch.close()                            # it ended through Python: nothing to do

The watcher is this file run by path (``python -I -S``: the standard
library only, started in tens of milliseconds), a child of process 0 and
so in the job's step: SLURM stops and continues it with the run. It reads
a pipe the run holds open and ticks every second; a gap in its ticks is a
stop (as in stopped_time.py). The pipe's end without the run's word ``end``
(the run died; no Python exit closed it) within ``AFTER_STOP`` seconds of
the end of a stop means JAX aborted it (or the node's OOM killer picked it
then): the watcher says so on the job's stderr and execs ``scontrol requeue``.
The batch script runs again and resumes from the newest checkpoint. A
death with no stop before it is left alone (a crash nkserde does not
judge; ``requeue_on_error`` covers the ones Python sees), so a run cannot
requeue itself in a loop. The requeue lands before SLURM ends the job:
the watcher runs it as soon as the pipe ends, while SLURM is still ending
the step's other processes.

Standard library only, and no import of nkserde: the watcher runs this
file as a script.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

# stopped_time.py's tick and slack (this file, run as a script, cannot import it)
TICK = 1.0
SLACK = 1.0  # a gap longer than the tick by this much is a stop, not a late wake-up
# a death this long after the end of a stop is JAX's abort (it comes
# within seconds of the SIGCONT, when the coordination service checks the
# heartbeats; a minute leaves a loaded machine room)
AFTER_STOP = 60.0
END = b"end"


class AbortWatch:
    """Process 0's side: the watcher process and the pipe it reads."""

    def __init__(self, process: subprocess.Popen, pipe: int):
        self.process = process
        self._pipe: int | None = pipe

    @classmethod
    def start(cls, job_id: str, label: str) -> AbortWatch:
        read, write = os.pipe()  # neither end is inherited but as the watcher's stdin
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(job_id), label],
                stdin=read,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        return cls(process, write)

    def close(self) -> None:
        """The run ended through Python: the watcher ends without a word."""
        if self._pipe is None:
            return
        try:
            os.write(self._pipe, END)
        except OSError:  # the watcher is gone (killed with the step)
            pass
        os.close(self._pipe)
        self._pipe = None
        try:
            self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def watch(pipe: int) -> tuple[float, float] | None:
    """Reads ``pipe`` until it ends. Returns None if the run said ``end``,
    else ``(stopped, since)``: how long the last stop lasted (0.0: none
    seen) and how long ago it ended, in seconds."""
    clock = time.monotonic
    last = clock()
    stopped, resumed = 0.0, None
    said = b""
    while True:
        ready, _, _ = select.select([pipe], [], [], TICK)
        now = clock()
        if now - last > TICK + SLACK:
            stopped, resumed = now - last - TICK, now
        last = now
        if not ready:
            continue
        data = os.read(pipe, 64)
        said = (said + data)[-len(END) :]
        if said == END:
            return None
        if not data:
            return (stopped, now - resumed) if resumed is not None else (0.0, 0.0)


def aborted_after_a_stop(seen: tuple[float, float] | None) -> bool:
    """Whether what :func:`watch` saw is a death just after a stop."""
    return seen is not None and seen[0] > 0.0 and seen[1] <= AFTER_STOP


def main(argv: list[str]) -> int:
    job_id, label = argv[1], argv[2]
    seen = watch(0)
    if not aborted_after_a_stop(seen):
        return 0
    stopped, since = seen
    print(
        f"nkserde: {label}: the run died {since:.0f} s after the job was continued from a {stopped:.0f} s "
        "suspension, without a word from Python: JAX's distributed service aborts every process when "
        "their heartbeats are older than its heartbeat_timeout_seconds (docs/guides/slurm.md). "
        f"Requeueing SLURM job {job_id}: it resumes from the newest checkpoint",
        file=sys.stderr,
        flush=True,
    )
    try:
        os.execvp("scontrol", ["scontrol", "requeue", job_id])
    except OSError as exc:
        print(f"nkserde: {label}: scontrol requeue {job_id} failed ({exc}): submit the job again", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
