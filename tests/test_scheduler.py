"""The pieces of a run under a scheduler that need no SLURM: reading what
SLURM's commands print, the walltime policy, what is requeued and why
(against a job that records what it is asked, in place of scontrol), and
in a real NetKet run the walltime stop and the runs of a checkpointed
directory after an interruption. The real SLURM runs are in
tests/test_slurm.py."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import netket as nk
import pytest

import builders as B
import nkserde
from nkserde.checkpoint.job import control as job_control, slurm
from nkserde.checkpoint.job.control import WALLTIME, JobControl
from nkserde.checkpoint.job.requeue import JobRequeue
from nkserde.checkpoint.process_runs import PROCESS_RUNS
from nkserde.checkpoint.job.walltime import SLOWDOWN, WalltimeGuard
from nkserde.checkpoint.step_times import StepTimes
from nkserde.checkpoint_files.lock import DirectoryLock

# ------------------------------------------------------------ SLURM's words


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("1:05", 65.0),
        ("2:00:00", 7200.0),
        ("1-02:03:04", 93784.0),
        ("UNLIMITED", None),
        ("INVALID", 0.0),
        ("", None),
    ],
)
def test_durations_as_squeue_prints_them(text, seconds):
    assert slurm.parse_duration(text) == seconds


def test_a_duration_slurm_would_not_print_is_an_error():
    with pytest.raises(slurm.SlurmError, match="cannot read the SLURM duration 'soon'"):
        slurm.parse_duration("soon")


def test_job_state_from_scontrol_show_job_oneliner():
    # as `scontrol show job --oneliner` printed it here (SLURM 22.05), shortened
    text = (
        "JobId=6 JobName=t.sh UserId=root(0) JobState=COMPLETING Reason=TimeLimit Dependency=(null) "
        "Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:18 TimeLimit=00:01:00"
    )
    state = slurm.JobState.parse(text)
    assert (state.state, state.reason, state.restarts, state.batch_signal) == ("COMPLETING", "TimeLimit", 2, 15)
    assert state.requeueable and state.at_time_limit
    assert not slurm.JobState.parse(text.replace("BatchFlag=1", "BatchFlag=0")).requeueable  # salloc
    assert not slurm.JobState.parse(text.replace("Requeue=1", "Requeue=0")).requeueable  # --no-requeue


def test_outside_slurm_there_is_no_job(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert slurm.current_job() is None
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    assert slurm.current_job() == slurm.Job("4711")


def test_a_missing_slurm_command_is_a_slurm_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(slurm.SlurmError, match="`squeue` is not on PATH"):
        slurm.Job("4711").time_left()


# ---------------------------------------------------------------- the guard


def test_the_guard_keeps_a_step_and_a_checkpoint_with_margin():
    guard = WalltimeGuard(1000.0, StepTimes(), margin=10.0)
    assert not guard.due(999.0)  # nothing measured: no decision
    for t in (0.0, 40.0, 42.0, 44.0):  # the first step compiles (40 s), then 2 s steps
        guard.steps.started(t)
    guard.saved(1.0)
    assert guard.step == 2.0  # the compiling step no longer counts
    reserve = SLOWDOWN * (2.0 + 1.0) + 10.0
    assert guard.reserve() == reserve
    assert not guard.due(1000.0 - reserve - 0.01)
    assert guard.due(1000.0 - reserve + 0.01)


def test_the_guard_keeps_time_for_a_write_still_in_flight_at_the_stop():
    """Checkpoints written in the background: the run's last checkpoint,
    synchronous, first waits for one still in flight. Before a synchronous
    one was measured, the last is priced as a background write."""
    guard = WalltimeGuard(1000.0, StepTimes(), margin=0.0)
    for t in (0.0, 1.0, 3.0):
        guard.steps.started(t)
    guard.saved(4.0, in_background=True)
    assert guard.reserve() == SLOWDOWN * (2.0 + 4.0 + 4.0)
    guard.saved(1.0)  # a synchronous checkpoint (a stop, the run's end)
    assert guard.reserve() == SLOWDOWN * (2.0 + 1.0 + 4.0)


def test_the_first_step_counts_while_it_is_the_only_one():
    guard = WalltimeGuard(100.0, StepTimes(), margin=0.0)
    guard.steps.started(0.0)
    guard.steps.started(40.0)
    assert guard.step == 40.0 and guard.due(40.0)  # 60 s left < 1.25 * (40 + 40)


def test_several_processes_keep_the_steps_a_stop_takes_to_reach_them():
    one = WalltimeGuard(1000.0, StepTimes(), margin=0.0)
    many = WalltimeGuard(1000.0, StepTimes(), lag_steps=2, margin=0.0)
    for guard in (one, many):
        for t in (0.0, 1.0, 3.0):
            guard.steps.started(t)
        guard.saved(0.5)
    assert one.reserve() == SLOWDOWN * (2.0 + 0.5)
    assert many.reserve() == SLOWDOWN * (3 * 2.0 + 0.5)


# ---------------------------------------------------------- requeue or not


class RecordingJob(slurm.Job):
    """A SLURM job whose commands answer from ``state`` and are recorded."""

    def __init__(self, state_text: str, time_left: float | None = 3600.0):
        object.__setattr__(self, "job_id", "4711")
        object.__setattr__(self, "state_text", state_text)
        object.__setattr__(self, "left", time_left)
        object.__setattr__(self, "requeued", [])

    def show(self):
        return slurm.JobState.parse(self.state_text)

    def time_left(self):
        return self.left

    def requeue(self):
        self.requeued.append(self.job_id)


RUNNING = "JobState=RUNNING Reason=None Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0"


@pytest.fixture
def progressed(monkeypatch):
    monkeypatch.setattr(PROCESS_RUNS, "steps_done", 1)
    # the requeue ignores the SIGTERM SLURM sends next: put it back after the test
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def control(job, requeue="auto"):
    return JobRequeue(job, requeue=requeue, label="ckpt")


SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


@pytest.mark.parametrize(
    "reason, state, requeued",
    [
        (WALLTIME, RUNNING, True),
        (signal.SIGUSR1, RUNNING, True),  # the job's --signal
        (signal.SIGTERM, RUNNING.replace("Reason=None", "Reason=TimeLimit").replace("RUNNING", "COMPLETING"), True),
        (signal.SIGTERM, RUNNING.replace("RUNNING", "CANCELLED"), False),  # scancel
        (signal.SIGTERM, RUNNING.replace("RUNNING", "PENDING").replace("None", "BeginTime"), False),  # requeued
        (signal.SIGTERM, RUNNING.replace("RUNNING", "COMPLETING").replace("0:0", "0:10"), True),  # B:USR1
        (WALLTIME, RUNNING.replace("Requeue=1", "Requeue=0"), False),  # --no-requeue
        (WALLTIME, RUNNING.replace("BatchFlag=1", "BatchFlag=0"), False),  # salloc
    ],
)
def test_what_is_requeued(progressed, reason, state, requeued, caplog):
    job = RecordingJob(state)
    with caplog.at_level(logging.INFO, logger="nkserde"):
        assert control(job).after_stop(reason, SIGNALS) is requeued
    assert job.requeued == (["4711"] if requeued else [])
    if state.endswith("0:10"):
        assert "--signal=B:USR1@N signals the batch shell only" in caplog.text


class SignallingJob(RecordingJob):
    """A job whose requeue, as SLURM's, sends SIGTERM to the process."""

    def requeue(self):
        super().requeue()
        os.kill(os.getpid(), signal.SIGTERM)


def test_the_sigterm_of_its_own_requeue_reaches_no_handler(progressed):
    """SLURM ends a requeued job with SIGTERM: a script's handler (here one
    that records it; one that dies, as Python's default, would cut the exit
    and its ``exit 75`` short) is not called."""
    received = []
    signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    job = SignallingJob(RUNNING)
    assert control(job).after_stop(WALLTIME, SIGNALS)
    time.sleep(0.05)  # a handler runs at the next bytecode after the signal: long past
    assert job.requeued == ["4711"] and received == []


def test_requeue_never_leaves_it_to_the_job_script(progressed):
    job = RecordingJob(RUNNING)
    assert not control(job, requeue="never").after_stop(WALLTIME, SIGNALS)
    assert job.requeued == []


def test_a_job_that_completed_no_step_is_not_requeued(monkeypatch, caplog):
    monkeypatch.setattr(PROCESS_RUNS, "steps_done", 0)
    job = RecordingJob(RUNNING)
    with caplog.at_level(logging.INFO, logger="nkserde"):
        assert not control(job).after_stop(signal.SIGUSR1, SIGNALS)
    assert job.requeued == [] and "this job completed no step" in caplog.text


def test_errors_are_requeued_a_bounded_number_of_times(progressed, caplog):
    job = RecordingJob(RUNNING)
    counted = []  # the count is written before the requeue, which ends the job at once
    count_it = lambda: counted.append(list(job.requeued))  # noqa: E731
    with caplog.at_level(logging.INFO, logger="nkserde"):
        assert control(job).after_error(0, 2, count_it) and control(job).after_error(1, 2, count_it)
        assert not control(job).after_error(2, 2, count_it)
        assert not control(job).after_error(0, 0, count_it)  # the default: never
    assert job.requeued == ["4711", "4711"]
    assert counted == [[], ["4711"]]
    assert "not requeued: it failed 3 times (requeue_on_error=2)" in caplog.text


def test_the_jobs_signal_after_a_finished_run_does_not_kill_the_program(caplog):
    previous = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    try:
        job_control.absorb_late_signals((signal.SIGTERM, signal.SIGUSR1))
        assert signal.getsignal(signal.SIGTERM) is not job_control._late_signal  # SIGTERM still ends it
        with caplog.at_level(logging.INFO, logger="nkserde"):
            signal.raise_signal(signal.SIGUSR1)  # Python's default would end this process
        assert "SIGUSR1 after the checkpointed run ended: ignored" in caplog.text
    finally:
        signal.signal(signal.SIGUSR1, previous)


AT_EXIT = """
import atexit, signal
def seen():  # registered first, so it runs last: in the interpreter's last moments
    print(signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
atexit.register(seen)
signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # the script's own handler
from nkserde.checkpoint.job import control
control.absorb_late_signals((signal.SIGTERM, signal.SIGUSR1))
"""


def test_the_jobs_signal_is_ignored_once_the_interpreter_exits():
    """Python's finalization puts SIG_DFL back for every signal with a
    Python handler: the job's SIGUSR1 then would end a finished run's job
    FAILED. At exit it is ignored; SIGTERM still ends the process."""
    ran = subprocess.run([sys.executable, "-c", AT_EXIT], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["True", "True"]


def test_the_guard_reads_the_time_left_again_before_it_stops(caplog):
    job = RecordingJob(RUNNING, time_left=20.0)
    ctl = JobControl.start(job, StepTimes(), walltime="auto", lag_steps=0, label="ckpt", now=0.0)
    for t in (0.0, 5.0, 10.0):
        ctl.guard.steps.started(t, measured=ctl.step_started(t))
    job.left = 500.0  # an administrator extended the job
    assert not ctl.due(10.0)
    assert ctl.guard.deadline == 510.0


def test_a_lock_of_an_earlier_attempt_of_the_same_job_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    # the attempt before, killed on another node: a lock no check of a pid can clear
    (tmp_path / ".lock").write_text("other-node 12345 slurm:4711:0")
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert " slurm:4711:1 " in (tmp_path / ".lock").read_text()
    lock.release()
    (tmp_path / ".lock").write_text("other-node 12345 slurm:4712:0")  # another job's, of an nkserde without leases
    with pytest.raises(nkserde.errors.NkserdeError, match="in use by process 12345 on host other-node"):
        DirectoryLock(tmp_path).acquire()


# ----------------------------------------------------- in a NetKet run


class Sleep(nk.callbacks.AbstractCallback):
    seconds: float = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, seconds):
        self.seconds = seconds

    def on_step_end(self, step, log_data, driver):
        time.sleep(self.seconds)


def test_a_walltime_in_seconds_stops_the_run_with_a_checkpoint(tmp_path):
    """``JobOptions(walltime=5)`` (another scheduler's limit): after the first step the
    guard finds less than a step and a checkpoint plus its margin left,
    checkpoints that step and ends the program (75); the rerun goes on."""
    reference = B.vmc()
    reference.run(4, out=None, show_progress=False)
    ckpt = nkserde.Checkpoint(tmp_path, every=100, job=nkserde.JobOptions(walltime=5))
    with pytest.raises(SystemExit) as exited:
        B.vmc().run(4, out=None, show_progress=False, callback=[ckpt, Sleep(0.1)])
    assert exited.value.code == 75 and ckpt.interrupted == "walltime"
    assert ckpt.steps() == [1]
    driver = B.vmc()
    driver.run(4, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=100))
    assert B.params_bytes(driver) == B.params_bytes(reference)


def test_options_are_checked():
    for bad in ({"requeue": "always"}, {"requeue_on_error": -1}, {"requeue_on_error": True}, {"walltime": 0}):
        with pytest.raises(ValueError):
            nkserde.Checkpoint("ckpt", **bad)


class StopAt(nk.callbacks.AbstractCallback):
    """A StopRun at the start of step ``at`` that is not a convergence
    criterion (an interruption, as nk.callbacks.Timeout)."""

    at: int = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, at):
        self.at = at

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == self.at:
            raise nk.callbacks.StopRun("out of time")


def test_after_an_interrupted_run_the_next_run_of_the_directory_does_not_start(tmp_path, caplog):
    """A script of two runs on one state (a ground state, then more steps):
    the first is interrupted, so the second would begin from an unfinished
    state; it does not start. Run again, the script resumes the first and
    then starts the second."""
    nkserde.checkpoint.reset_run_numbering()
    try:
        first = nkserde.checkpointed(B.vmc(), tmp_path, every=100)
        first.run(4, out=None, show_progress=False, callback=StopAt(2))
        assert first.last_checkpoint.interrupted == "StopAt"
        second = nkserde.checkpointed(B.vmc(), tmp_path, every=100)
        with caplog.at_level(logging.INFO, logger="nkserde"):
            assert second.run(3, out=None, show_progress=False) is None
        assert "run-1: not started: run-0 was interrupted by StopAt at step 2" in caplog.text
        assert not (tmp_path / "run-1").exists()

        nkserde.checkpoint.reset_run_numbering()  # the script again
        first = nkserde.checkpointed(B.vmc(), tmp_path, every=100)
        first.run(4, out=None, show_progress=False)  # run-0, resumed from step 2
        assert first.last_checkpoint.resumed_from == 2
        first.run(3, out=None, show_progress=False)  # run-1, fresh
        assert first.last_checkpoint.resumed_from is None
        assert (tmp_path / "run-1").is_dir() and first.step_count == 7
    finally:
        nkserde.checkpoint.reset_run_numbering()
