"""The requeue after a lost process (nkserde/checkpoint/job/lasting_requeue.py),
run as it runs in a job: its own process, ``scontrol`` first on PATH as a
stand-in for SLURM that fails while "cut off the network", then answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nkserde.checkpoint.job import lasting_requeue
from nkserde.checkpoint.job.lasting_requeue import LastingRequeue

RUNNING = "JobId=4242 JobState=RUNNING Reason=None Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0"
LOST = "process 1 of the run was lost (its host did not answer for 10 s: its node down or cut off the network)"


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """``scontrol`` for job 4242: it fails the first ``fails`` calls (the
    controller unreachable), then shows ``shown`` and records every requeue."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls, requeues = tmp_path / "calls", tmp_path / "requeues"

    def stand_in(shown: str = RUNNING, fails: int = 0) -> Path:
        (bin_dir / "scontrol").write_text(
            "#!/bin/sh\n"
            f'echo "$@" >> {calls}\n'
            f'if [ "$(wc -l < {calls})" -le {fails} ]; then\n'
            '  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1\nfi\n'
            f'case "$1" in\n  show) echo "{shown}" ;;\n  requeue) echo "$@" >> {requeues} ;;\nesac\n'
        )
        (bin_dir / "scontrol").chmod(0o755)
        return requeues

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return stand_in


def requeue() -> str:
    """The requeue process of attempt 0, its tries 0.2 s apart, run to its end; what it said."""
    script = lasting_requeue.__file__
    done = subprocess.run([sys.executable, "-I", "-S", script, "4242", "0", "ckpt/run-0", LOST, "0.2"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_the_requeue_is_tried_again_until_slurm_answers(slurm):
    """A node cut off the network reaches no controller until it is back."""
    requeues = slurm(fails=3)
    said = requeue()
    assert requeues.read_text().split() == ["requeue", "4242"]
    assert said.count("requeueing SLURM job 4242 failed (") == 1  # said once, tried again
    assert "Unable to contact slurm controller" in said
    assert f"nkserde: ckpt/run-0: SLURM job 4242 requeued: {LOST}; it resumes from the newest checkpoint" in said


@pytest.mark.parametrize(
    "shown, why",
    [
        (RUNNING.replace("Restarts=0", "Restarts=1"), "is RUNNING already"),  # a later attempt: requeued already
        (RUNNING.replace("RUNNING", "PENDING"), "is PENDING already"),  # requeued by another process, or SLURM
        (RUNNING.replace("RUNNING", "COMPLETING"), "is COMPLETING already"),  # SLURM is ending it
        (RUNNING.replace("Requeue=1", "Requeue=0"), "cannot be requeued: submit it again to resume"),
        (RUNNING.replace("BatchFlag=1", "BatchFlag=0"), "cannot be requeued: submit it again to resume"),
    ],
)
def test_only_the_same_attempt_still_running_is_requeued(slurm, shown, why):
    requeues = slurm(shown)
    said = requeue()
    assert not requeues.exists()
    assert f"{LOST}; SLURM job 4242 {why}" in said


def test_the_requeue_process_outlives_the_process_that_started_it(slurm, tmp_path):
    """JAX's runtime may end the run's process (SIGABRT, no Python) while
    SLURM cannot be reached: the requeue process, its child, goes on."""
    requeues = slurm(fails=5)
    code = (
        "import os; from nkserde.checkpoint.job.lasting_requeue import LastingRequeue\n"
        f"LastingRequeue.start('4242', 'ckpt/run-0', {LOST!r}, restarts='0', retry=0.2)\n"
        "os.abort()\n"
    )
    parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert parent.returncode == -signal.SIGABRT  # ended as JAX ends it
    deadline = time.monotonic() + 60.0
    while not requeues.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert requeues.read_text().split() == ["requeue", "4242"]


def test_the_run_waits_for_its_requeue(slurm):
    requeues = slurm()
    started = LastingRequeue.start("4242", "ckpt/run-0", LOST, restarts="0")
    assert started.wait(60.0) and requeues.read_text().split() == ["requeue", "4242"]
