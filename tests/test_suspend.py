"""A stopped process (SIGSTOP/SIGCONT: SLURM's suspend, gang scheduling,
Ctrl-Z) and the walltime guard: the stopped time is no step's measure, and
the job's end moves by it. The real SLURM's suspend is in tests/test_slurm.py."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

from test_scheduler import RUNNING, RecordingJob

from nkserde.checkpoint.job import control as job_control, slurm
from nkserde.checkpoint.job.control import JobControl
from nkserde.checkpoint.job.stopped_time import CONFIRM, StoppedTime, StopsSeen
from nkserde.checkpoint.job.walltime import SLOWDOWN, WalltimeGuard
from nkserde.checkpoint.save_policy import SaveSchedule, parse_every
from nkserde.checkpoint.step_times import StepTimes


def test_an_interval_the_process_was_stopped_in_is_no_step():
    steps = StepTimes()
    guard, schedule = WalltimeGuard(100.0, steps, margin=0.0), SaveSchedule(parse_every("10s"), steps)
    for t in (0.0, 10.0, 12.0):  # compiles, then 2 s steps
        steps.started(t)
    steps.started(72.0, measured=False)  # stopped for 58 s in that step
    steps.started(74.0)
    guard.shift(58.0)
    assert guard.step == 2.0 and guard.deadline == 158.0
    assert not guard.due(74.0)  # 84 s left; the old measure (60 s steps) stopped here
    # the same measure for the schedule: 2-s steps (the median of 10, 2, 2; with the stop's 60, 10)
    assert schedule.step == 2.0 and schedule.next_step(5) == 5 + 5


def started(ctl: JobControl, *times: float) -> None:
    """Steps start at ``times``, as the Checkpoint times them: the run's
    StepTimes (the guard's) measure those the JobControl says measure one."""
    for t in times:
        ctl.guard.steps.started(t, measured=ctl.step_started(t))


class Stops:
    """In place of StoppedTime: what take() sees next, given."""

    def __init__(self):
        self.next = StopsSeen(0, 0.0, False)

    @property
    def pending(self):
        return self.next.continued > 0 or self.next.awaiting

    def take(self):
        taken, self.next = self.next, StopsSeen(0, 0.0, False)
        return taken


def test_after_a_stop_the_guard_leaves_out_the_step_and_moves_the_end():
    ctl = JobControl(None, guard=WalltimeGuard(100.0, StepTimes(), margin=0.0), label="ckpt")
    ctl.stopped_time = stops = Stops()
    started(ctl, 0.0, 10.0, 12.0)
    stops.next = StopsSeen(1, 58.0, False)
    ctl.saved(50.0)  # a save the process was stopped in: no measure either
    started(ctl, 72.0)
    started(ctl, 74.0)  # the interval after the SIGCONT is left out too (see _catch_up)
    started(ctl, 76.0)
    ctl.saved(1.0)
    assert ctl.guard.step == 2.0 and ctl.guard.deadline == 158.0
    assert ctl.guard.reserve() == SLOWDOWN * (2.0 + 1.0)
    assert not ctl.due(76.0)


def test_a_stop_whose_sigcont_is_handled_late_is_no_step_and_no_save():
    """A 60 s stop inside a background save, the step ended and looked at
    before the SIGCONT handler ran (seen in CI: the stop counted as a
    step and a save, the guard kept 313 s and stopped the job, which was
    requeued): the interval and the save are no measure while the gap
    awaits its SIGCONT; when it comes, the end moves."""
    ctl = JobControl(None, guard=WalltimeGuard(300.0, StepTimes(), margin=0.0), label="ckpt")
    ctl.stopped_time = stops = Stops()
    started(ctl, 0.0, 10.0, 12.0)
    ctl.saved(1.0)
    stops.next = StopsSeen(0, 0.0, True)
    ctl.saved(62.0)  # the save the process was stopped in
    stops.next = StopsSeen(0, 0.0, True)
    started(ctl, 74.0)  # the step it was stopped in
    stops.next = StopsSeen(0, 0.0, True)
    assert not ctl.due(74.0)
    stops.next = StopsSeen(1, 60.0, False)  # the handler ran
    started(ctl, 76.0)
    started(ctl, 78.0)
    started(ctl, 80.0)
    assert ctl.guard.step == 2.0 and ctl.guard.reserve() == SLOWDOWN * (2.0 + 1.0)
    assert ctl.guard.deadline == 360.0


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def sigcont_handled(stops: StoppedTime) -> None:
    before = stops._sigconts
    os.kill(os.getpid(), signal.SIGCONT)  # handled in this (the main) thread
    deadline = time.monotonic() + 10.0
    while stops._sigconts == before and time.monotonic() < deadline:
        time.sleep(0.001)


def test_a_gap_awaits_its_sigcont_and_is_dropped_without_one():
    clock = Clock()
    stops = StoppedTime(tick=3600.0, clock=clock).start()  # its thread sleeps: the test moves the clock
    try:
        clock.now = 3660.0  # not seen for 60 s more than a tick
        assert stops.pending
        assert stops.take() == StopsSeen(0, 0.0, True)
        clock.now += 1.0
        assert stops.take() == StopsSeen(0, 0.0, True)  # held, not lost
        sigcont_handled(stops)
        assert stops.take() == StopsSeen(1, 60.0, False)  # late, and counted
        assert not stops.pending and stops.take() == StopsSeen(0, 0.0, False)

        clock.now += 3600.0 + 5.0  # a thread starved for 5 s, and no SIGCONT
        assert stops.take() == StopsSeen(0, 0.0, True)
        clock.now += CONFIRM
        assert stops.take() == StopsSeen(0, 0.0, False)  # dropped
        sigcont_handled(stops)
        assert stops.take() == StopsSeen(1, 0.0, False)  # a SIGCONT then is a short stop, not those 5 s
    finally:
        stops.close()


def test_in_a_slurm_job_the_time_left_is_read_again_after_a_stop():
    job = RecordingJob(RUNNING, time_left=100.0)
    ctl = JobControl.start(job, StepTimes(), walltime="auto", lag_steps=0, label="ckpt", now=0.0)
    ctl.stopped_time = stops = Stops()
    started(ctl, 0.0)
    started(ctl, 10.0)
    job.left = 90.0  # SLURM does not count the stopped time against --time
    stops.next = StopsSeen(1, 0.0, False)  # too short to be measured: SLURM says
    started(ctl, 70.0)
    assert ctl.guard.deadline == 160.0 and ctl.guard.step == 10.0


CHILD = """
import json, sys, time
from nkserde.checkpoint.job import control as job_control, slurm
from nkserde.checkpoint.job.control import JobControl
from nkserde.checkpoint.job.stopped_time import StoppedTime
from nkserde.checkpoint.job.walltime import WalltimeGuard
from nkserde.checkpoint.step_times import StepTimes

now = time.monotonic
start = now()
times = StepTimes()
ctl = JobControl(None, guard=WalltimeGuard(start + 10.0, times, margin=1.0), label="child")
ctl.stopped_time = StoppedTime(tick=0.2).start()
steps = 0
while steps < 30:
    t = now()
    times.started(t, measured=ctl.step_started(t))
    if ctl.due(now()):
        break
    steps += 1
    print(steps, flush=True)
    time.sleep(0.1)
ctl.stopped_time.close()
print(json.dumps({"steps": steps, "step": ctl.guard.step, "shift": ctl.guard.deadline - start - 10.0}), flush=True)
"""


def test_a_process_stopped_and_continued_does_not_stop_early():
    """A 6 s SIGSTOP in a run of 0.1 s steps with 10 s of walltime: the old
    guard measured a 6 s step, kept 16 s for the last step and checkpoint,
    and stopped at once after the SIGCONT."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    try:
        while child.stdout.readline().strip() != "5":
            assert child.poll() is None, "the child ended before its fifth step"
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(6.0)
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["steps"] == 30  # no early stop
    assert result["step"] < 1.0  # the stopped interval is no step
    assert result["shift"] >= 4.0  # the deadline moved by the stopped time (6 s, measured to a tick)


# ------------------------------------------------------- JAX's heartbeat

PARTITION = (
    "PartitionName=debug AllowGroups=ALL Default=YES GraceTime=0 Nodes=vm OverSubscribe=FORCE:4 "
    "OverTimeLimit=NONE PreemptMode={} State=UP TotalCPUs=2 TotalNodes=1"
)  # scontrol show partition --oneliner of SLURM 22.05, shortened


class PartitionJob(slurm.Job):
    def __init__(self, partition, mode):
        super().__init__("4711", partition)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "asked", [])

    def _run(self, *command):
        self.asked.append(command)
        if self.mode is None:
            raise slurm.SlurmError("`scontrol` did not answer")
        return PARTITION.format(self.mode)


def test_the_partitions_preempt_mode_as_scontrol_prints_it():
    job = PartitionJob("debug", "SUSPEND,GANG")
    assert job.preempt_mode() == "SUSPEND,GANG"
    assert job.asked == [("scontrol", "show", "partition", "--oneliner", "debug")]
    assert slurm.Job("4711").preempt_mode() is None  # no partition known: nothing asked


def test_current_job_knows_its_partition(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    monkeypatch.setenv("SLURM_JOB_PARTITION", "debug")
    assert slurm.current_job() == slurm.Job("4711", "debug")


def test_a_partition_that_may_suspend_is_warned_about_once(monkeypatch, caplog):
    monkeypatch.setattr(job_control, "_SUSPEND_WARNED", set())
    with caplog.at_level(logging.INFO, logger="nkserde"):
        for mode, partition in (("OFF", "a"), ("REQUEUE", "b"), (None, "c"), ("SUSPEND,GANG", "d"), ("GANG", "e")):
            job_control.warn_if_suspending(PartitionJob(partition, mode), "ckpt")
        job_control.warn_if_suspending(PartitionJob("d", "SUSPEND,GANG"), "ckpt")  # the same partition again
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert "partition d may suspend" in warned[0] and "heartbeat_timeout_seconds" in warned[0]
    assert "partition e may suspend" in warned[1]
