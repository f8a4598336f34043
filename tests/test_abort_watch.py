"""The watcher that requeues a job JAX aborted after a suspension
(nkserde/checkpoint/job/abort_watch.py), with real processes and signals and a
stand-in ``scontrol``. Under the real SLURM: tests/test_slurm.py."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from nkserde.checkpoint.job.abort_watch import AFTER_STOP, AbortWatch, aborted_after_a_stop


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """A ``scontrol`` first on PATH that writes its arguments to a file."""
    bin_dir, called = tmp_path / "bin", tmp_path / "scontrol-called"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {called}\n')
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return called


def waiting(watch: AbortWatch) -> None:
    """Until the watcher waits in its loop (its Python started: a stop
    before that is no gap in its ticks)."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        wchan = open(f"/proc/{watch.process.pid}/wchan").read()
        if "poll" in wchan or "select" in wchan:
            return
        time.sleep(0.02)
    pytest.fail(f"the watcher never waited in select (wchan {wchan!r})")


def stopped(watch: AbortWatch, seconds: float) -> None:
    waiting(watch)
    os.kill(watch.process.pid, signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(watch.process.pid, signal.SIGCONT)


def died(watch: AbortWatch) -> None:
    """What a process JAX aborts does to the pipe: closes it, without a word."""
    os.close(watch._pipe)
    watch._pipe = None
    watch.process.wait(timeout=30)


def test_a_run_that_dies_just_after_a_stop_has_its_job_requeued(scontrol, capfd):
    watch = AbortWatch.start("4242", "ckpt/run-0")
    stopped(watch, 2.5)
    died(watch)
    assert scontrol.read_text().split() == ["requeue", "4242"]
    err = capfd.readouterr().err
    assert re.search(r"ckpt/run-0: the run died [01] s after the job was continued from a [2-4] s suspension", err)
    assert "Requeueing SLURM job 4242" in err


def test_a_run_that_dies_without_a_stop_is_left_alone(scontrol):
    watch = AbortWatch.start("4242", "ckpt/run-0")
    waiting(watch)
    died(watch)
    assert watch.process.returncode == 0 and not scontrol.exists()


def test_a_run_that_ends_through_python_after_a_stop_is_left_alone(scontrol):
    watch = AbortWatch.start("4242", "ckpt/run-0")
    stopped(watch, 2.5)
    watch.close()
    assert watch.process.returncode == 0 and not scontrol.exists()


def test_only_a_death_soon_after_a_stop_counts():
    assert aborted_after_a_stop((130.0, 0.4))
    assert aborted_after_a_stop((3.0, AFTER_STOP))
    assert not aborted_after_a_stop((130.0, AFTER_STOP + 1.0))  # died later, of something else
    assert not aborted_after_a_stop((0.0, 0.0))  # no stop
    assert not aborted_after_a_stop(None)  # it said "end"
