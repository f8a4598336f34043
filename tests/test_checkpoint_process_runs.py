"""nkserde.checkpoint.process_runs: the one owner of what a process
remembers across its checkpointed runs (no NetKet, no files)."""

from __future__ import annotations

import nkserde
from nkserde.checkpoint.process_runs import PROCESS_RUNS, ProcessRuns


def test_run_calls_are_numbered_per_directory(tmp_path):
    runs = ProcessRuns()
    assert [runs.next_run(tmp_path / "a")[0] for _ in range(3)] == [0, 1, 2]
    assert runs.next_run(tmp_path / "b") == (0, None)
    # the same directory named another way is the same directory
    assert runs.next_run(tmp_path / "x" / ".." / "a") == (3, None)


def test_after_an_interruption_the_later_calls_are_told_why(tmp_path):
    runs = ProcessRuns()
    runs.next_run(tmp_path)
    runs.interrupted(tmp_path, "run-0 was interrupted by Timeout at step 3")
    assert runs.next_run(tmp_path) == (1, "run-0 was interrupted by Timeout at step 3")
    assert runs.next_run(tmp_path / "other") == (0, None)


def test_reset_numbers_as_a_new_process_but_keeps_the_steps_and_keys(tmp_path):
    runs = ProcessRuns()
    runs.next_run(tmp_path)
    runs.interrupted(tmp_path, "run-0 was interrupted")
    runs.count_step()
    assert runs.numbered("stop") == "stop:0"
    runs.reset()
    assert runs.next_run(tmp_path) == (0, None)
    # the job still made progress, and a coordination key is never used twice
    assert runs.progressed and runs.steps_done == 1
    assert runs.numbered("stop") == "stop:1"


def test_the_public_reset_resets_the_process_owner(tmp_path):
    PROCESS_RUNS.next_run(tmp_path)
    PROCESS_RUNS.interrupted(tmp_path, "run-0 was interrupted")
    nkserde.checkpoint.reset_run_numbering()
    assert PROCESS_RUNS.next_run(tmp_path) == (0, None)
    nkserde.checkpoint.reset_run_numbering()
