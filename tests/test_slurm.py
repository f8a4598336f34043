"""Runs under the real SLURM of this machine (.ci/start-slurm), submitted
with the job scripts of examples/slurm/ that docs/guides/slurm.md shows:
jobs whose time limit is shorter than the run, stopped, checkpointed,
requeued by nkserde and resumed until done, each ending with the
parameters and JsonLog of the same run without SLURM, and no completed
step lost at any preemption.

The run (tests/scripts/cluster_run.py as the job's run.py) is 50 steps of
an 8-site VMC whose steps sleep 3 s (STEP_SECONDS): 150 s of steps in jobs
of 3 minutes (the first step of each job compiles, and a guard that has
measured only that step keeps time for three such steps in a two-process
run). The jobs are submitted when the suite is collected and run
beside it (tests/conftest.py); these tests come last and read them. A
requeued job's two-minute hold in BeginTime is cut to a few seconds, as an
administrator would (tests/cluster.py).

Two 2-task jobs are suspended mid-run (``scontrol suspend``, then
``resume``: gang scheduling, PreemptMode=SUSPEND), for less and for more
than JAX's default heartbeat timeout (100 s): they go on, in their first
allocation, and end as the run without SLURM. A third is suspended for
longer than its own heartbeat timeout: JAX aborts it (or, where JAX's race
lets it live, it aborts itself as JAX would), nkserde's watcher requeues
it, and it ends as the run without SLURM.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cluster

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples" / "slurm"
JOB_SH = EXAMPLES / "job.sh"
BATCH_SIGNAL_SH = EXAMPLES / "job-batch-signal.sh"
RUN = cluster.RUN
N_ITER = 50
STEP = {"STEP_SECONDS": "3", "N_ITER": str(N_ITER)}
TIME = "--time=3"  # minutes
# the jobs with no signal must not fit in their walltime however fast they
# start: 50 steps of 4 s are 200 s of a 180-s job (of 3 s, 150 s: a quick
# start ended the run before its time limit, with no stop to test)
LONG_STEP = {**STEP, "STEP_SECONDS": "4"}
# NetKet's AutoSlurmRequeue(before=60 s) requeues every 120 s of a 180-s
# job: with 4-s steps its second requeue fell on step 50, the run's last,
# and the SIGTERM that followed found the run finished (exit 0, CI red at
# d346256). 5-s steps put the requeues near steps 17 and 40, mid-run.
AUTO_REQUEUE_STEP = {**STEP, "STEP_SECONDS": "5"}
SIGNAL = "--signal=USR1@40"  # in place of the script's USR1@120
# Suspended after step 5 of 2-s steps in a 5-minute job (no --signal): the
# guard before issue 46 took 60 stopped seconds for a step, kept
# 1.25 * 3 * 60 s + 10 s for the last steps of two processes, more than the
# ~200 s it saw left, and stopped and requeued the job.
SUSPENDED = {"suspended-60s": 60, "suspended-130s": 130}
SUSPEND_AFTER_STEP = 5
SUSPEND_STEP = {**STEP, "STEP_SECONDS": "2"}
# JAX's default heartbeat (100 s) and a longer suspension, the same abort in
# a quarter of the time: a 10 s heartbeat, suspended for 25 s. JAX's abort
# is a race at the resume (a heartbeat sent before its service's check
# keeps the job alive): where JAX lets it live, the run aborts as JAX does
# (ABORT_AT_SIGCONT), so that the requeue is tested every time.
PAST_HEARTBEAT = "suspended-past-heartbeat"
PAST_HEARTBEAT_STEP = {**SUSPEND_STEP, "HEARTBEAT_SECONDS": "10", "ABORT_AT_SIGCONT": "1"}
PAST_HEARTBEAT_SECONDS = 25
# after step 7: step 5's checkpoint, written in the background during step
# 6, is on disk before step 6 ends (suspended after step 5, the abort came
# before the write under CI's load and the job started again from scratch)
PAST_HEARTBEAT_AFTER_STEP = 7


def prepare(name: str, workdir: Path, script: Path) -> Path:
    shutil.copy(RUN, workdir / "run.py")
    if name in ("no-signal", "auto-slurm-requeue", PAST_HEARTBEAT, *SUSPENDED):
        # the job script as the guide shows it, without its --signal line
        lines = [line for line in script.read_text().splitlines(keepends=True) if "--signal" not in line]
        script = workdir / "job-without-signal.sh"
        script.write_text("".join(lines))
    return script


def plan() -> dict:
    cache = {
        "JAX_COMPILATION_CACHE_DIR": str(Path(os.environ.get("TMPDIR", "/tmp")) / "nkserde-slurm-jax-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    return {
        "signal": (JOB_SH, [TIME, SIGNAL], {**cache, **STEP}),
        "signal-2-tasks": (JOB_SH, [TIME, SIGNAL, "--ntasks=2"], {**cache, **STEP}),
        "batch-signal": (BATCH_SIGNAL_SH, [TIME, "--signal=B:USR1@40"], {**cache, **STEP}),
        "no-signal": (JOB_SH, [TIME], {**cache, **LONG_STEP}),
        "auto-slurm-requeue": (JOB_SH, [TIME], {**cache, **AUTO_REQUEUE_STEP, "AUTO_SLURM_REQUEUE": "60"}),
        "raises": (JOB_SH, [TIME, SIGNAL], {**cache, **STEP, "RAISE_AT": "3"}),
        "raises-requeued": (JOB_SH, [TIME, SIGNAL], {**cache, **STEP, "RAISE_AT": "3", "REQUEUE_ON_ERROR": "2"}),
        **{name: (JOB_SH, ["--time=5", "--ntasks=2"], {**cache, **SUSPEND_STEP}) for name in SUSPENDED},
        PAST_HEARTBEAT: (JOB_SH, ["--time=5", "--ntasks=2"], {**cache, **PAST_HEARTBEAT_STEP}),
    }


SUSPEND = {name: (SUSPEND_AFTER_STEP, s) for name, s in SUSPENDED.items()}
SUSPEND[PAST_HEARTBEAT] = (PAST_HEARTBEAT_AFTER_STEP, PAST_HEARTBEAT_SECONDS)
JOBS = cluster.Jobs(plan(), prepare, suspend=SUSPEND)


@pytest.fixture(scope="module")
def references():
    return lambda processes: cluster.shared_reference(processes, N_ITER)


def assert_same_run(workdir: Path, reference: Path):
    cluster.assert_same_run(workdir, reference, N_ITER)


# ------------------------------------------------------------------ attempts

RESUMED, STOPPED, attempts, preemptions = cluster.RESUMED, cluster.STOPPED, cluster.attempts, cluster.preemptions


def walltime_stops(output: str) -> int:
    """How many attempts the walltime guard stopped (and requeued)."""
    return sum(by == "walltime" for by in STOPPED.findall(output))


def assert_requeued_until_done(
    job: cluster.Job, reference: Path, *, stopped_by: str, or_by_walltime: bool = False
) -> list[dict]:
    """``or_by_walltime``: an attempt may also be stopped by the walltime
    guard, before the signal came (on a busy node a cold first attempt can
    be left less time than its measured steps need); one at least by
    ``stopped_by``."""
    if job.states[-1] != "COMPLETED":
        pytest.fail(job.diagnosis(), pytrace=False)
    output = job.output
    stops = preemptions(output)
    assert stops, f"the job was never requeued ({job.states}):\n{output[-3000:]}"
    assert int(job.info()["Restarts"]) == len(stops)  # one requeue per interruption, by nkserde
    for stop in stops:
        assert stop["lost"] == 0, stops  # no completed step lost
        assert stop["exit"] == "75", stops  # nkserde.checkpoint.EXIT_INTERRUPTED
    allowed = {stopped_by, "walltime"} if or_by_walltime else {stopped_by}
    assert all(stop["by"] in allowed for stop in stops), (stops, output[-3000:])
    assert any(stop["by"] == stopped_by for stop in stops), (stops, output[-3000:])
    assert len(STOPPED.findall(output)) == len(stops), output[-3000:]  # one stop message per attempt
    assert "finished" in attempts(output)[-1]
    assert_same_run(job.workdir, reference)
    print(f"\n{job.name}: requeued {len(stops)} times, BeginTime skipped {job.released} times; {stops}")
    return stops


# --------------------------------------------------------------------- tests


@pytest.mark.slurm
def test_signal_checkpoints_requeues_and_resumes_until_done(references):
    """``--signal=USR1@N``: every task gets SIGUSR1 before the time limit;
    nkserde finishes the step, checkpoints it, requeues the job and exits
    75; the requeued job resumes. No code of the user's decides."""
    job = JOBS.wait("signal")
    stops = assert_requeued_until_done(job, references(1), stopped_by="SIGUSR1", or_by_walltime=True)
    assert all(s["signal_to_exit"] is not None for s in stops if s["by"] == "SIGUSR1")


@pytest.mark.slurm
def test_two_tasks_under_srun_are_requeued_together(references):
    """``--ntasks=2``: ``jax.distributed.initialize()`` with no arguments
    under srun, both tasks signalled, both stop after the same step, one
    requeue; the run equals the two-process run without SLURM."""
    job = JOBS.wait("signal-2-tasks")
    assert_requeued_until_done(job, references(2), stopped_by="SIGUSR1", or_by_walltime=True)


@pytest.mark.slurm
def test_batch_shell_signal_forwarded_by_the_guides_trap(references):
    """``--signal=B:USR1@N`` signals the batch shell only: the guide's
    job-batch-signal.sh traps it and passes it to srun, which forwards it
    to the run."""
    job = JOBS.wait("batch-signal")
    assert_requeued_until_done(job, references(1), stopped_by="SIGUSR1", or_by_walltime=True)


@pytest.mark.slurm
def test_without_signal_the_walltime_stops_the_run_in_time(references):
    """No ``--signal`` at all: nkserde reads the job's time left and stops
    with a checkpoint when it falls below a measured step plus a
    checkpoint; no signal is ever needed."""
    job = JOBS.wait("no-signal")
    assert_requeued_until_done(job, references(1), stopped_by="walltime")
    assert "signal SIGUSR1" not in job.output
    assert "SLURM job" in job.output and "ends in" in job.output


@pytest.mark.slurm
def test_netkets_auto_slurm_requeue_beside_nkserde(references):
    """NetKet's AutoSlurmRequeue(before=60 s) requeues the job itself from
    its on_step_end; SLURM then ends the job with SIGTERM, which nkserde
    takes as a stop: it checkpoints the step and does not requeue a
    second time. Each interruption is one requeue."""
    job = JOBS.wait("auto-slurm-requeue")
    stops = assert_requeued_until_done(job, references(1), stopped_by="SIGTERM", or_by_walltime=True)
    by_netket = [stop for stop in stops if stop["by"] == "SIGTERM"]  # the others stopped by nkserde's guard first
    output = job.output
    assert output.count("Reached requeue time. Requeueing job...") == len(by_netket)
    assert output.count("nkserde does not requeue it") == len(by_netket)


@pytest.mark.slurm
def test_a_run_that_raises_is_not_requeued():
    job = JOBS.wait("raises")
    assert job.states[-1] == "FAILED", job.diagnosis()
    # requeued by the walltime guard alone (a cold first attempt on a busy
    # node may be stopped before its error), never after the error
    assert int(job.info()["Restarts"]) == walltime_stops(job.output), job.diagnosis()
    assert "requeued after the run failed" not in job.output
    assert "a bug in the user's script at step 3" in job.output


@pytest.mark.slurm
def test_a_run_that_raises_is_requeued_at_most_requeue_on_error_times():
    job = JOBS.wait("raises-requeued")
    assert job.states[-1] == "FAILED", job.diagnosis()
    output = job.output
    # and the walltime guard's requeues, as in test_a_run_that_raises_is_not_requeued
    assert int(job.info()["Restarts"]) == 2 + walltime_stops(output), job.diagnosis()
    assert "requeued after the run failed (1 of requeue_on_error=2)" in output
    assert "requeued after the run failed (2 of requeue_on_error=2)" in output
    assert "not requeued: it failed 3 times (requeue_on_error=2)" in output
    assert (job.workdir / "ckpt" / "run-0" / "error-requeues").read_text().strip() == "2"


@pytest.mark.slurm
@pytest.mark.parametrize("name", sorted(SUSPENDED))
def test_a_suspended_job_goes_on(references, name):
    """``scontrol suspend`` (SIGSTOP to both tasks) after step 5, ``resume``
    60 s or 130 s later: the walltime guard leaves the stopped time out
    (no early stop, no requeue), JAX's heartbeat (the guide's setting)
    outlasts it, and the run ends as without SLURM."""
    job = JOBS.wait(name)
    if job.states[-1] != "COMPLETED":
        pytest.fail(job.diagnosis(), pytrace=False)
    record = (job.workdir / "suspended").read_text()
    # SLURM's own record says it was suspended (the states this worker saw
    # need not: the worker that suspends it may be the other one)
    info = job.info()
    assert "resumed" in record and info.get("SuspendTime", "None") != "None", (record, info)
    assert int(info["Restarts"]) == 0, job.diagnosis()
    output = job.output
    assert len(attempts(output)) == 1 and not STOPPED.search(output), output[-3000:]
    assert "stopping now" not in output and "requeued" not in output, output[-3000:]
    assert "the process was stopped (SIGCONT after" in output, output[-3000:]
    assert "finished" in output
    assert_same_run(job.workdir, references(2))
    print(f"\n{name}: {record.strip()}; {[line for line in output.splitlines() if 'SIGCONT' in line]}")


@pytest.mark.slurm
def test_a_job_jax_aborts_after_a_suspension_is_requeued(references):
    """Suspended for longer than its heartbeat timeout: on resume JAX's
    distributed service aborts both processes in C++ (no Python runs; or,
    where JAX's race let it live, the run aborts as JAX would);
    nkserde's watcher, a child of process 0, sees the death come just after
    the stop and requeues the job, which resumes from its newest
    checkpoint: COMPLETED, never FAILED, and the same run as without SLURM."""
    job = JOBS.wait(PAST_HEARTBEAT)
    if job.states[-1] != "COMPLETED":
        pytest.fail(job.diagnosis(), pytrace=False)
    output = job.output
    assert "resumed" in (job.workdir / "suspended").read_text()
    by_jax = "JAX distributed service detected fatal errors" in output
    assert by_jax or "aborting at SIGCONT" in output, output[-3000:]  # it was aborted
    assert "suspension, without a word from Python" in output and "Requeueing SLURM job" in output, output[-3000:]
    assert int(job.info()["Restarts"]) == 1, job.diagnosis()
    parts = attempts(output)
    assert len(parts) == 2 and int(RESUMED.search(parts[1]).group(1)) == 5, output[-3000:]  # every=5
    assert "finished" in parts[-1]
    assert_same_run(job.workdir, references(2))
    print(f"\n{PAST_HEARTBEAT}: aborted by {'JAX' if by_jax else 'the run (JAX let it live)'}, requeued, resumed")


# ------------------------------------------------ the guide's files, as shown


def test_the_guide_shows_the_job_scripts_the_tests_submit():
    guide = (ROOT / "docs" / "guides" / "slurm.md").read_text()
    blocks = re.findall(r"```(?:bash|python)\n(.*?)```", guide, re.S)
    for path in (JOB_SH, BATCH_SIGNAL_SH, EXAMPLES / "run.py"):
        assert path.read_text() in blocks, f"docs/guides/slurm.md does not show {path.relative_to(ROOT)} as it is"


def test_the_guides_run_script_runs(tmp_path):
    """examples/slurm/run.py, shortened to 2 steps, outside SLURM."""
    source = (EXAMPLES / "run.py").read_text()
    assert "n_iter=20000" in source
    (tmp_path / "run.py").write_text(source.replace("n_iter=20000", "n_iter=2"))
    env = cluster.without_launchers(cluster.job_environment())
    done = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "ckpt" / "run-0" / "step-0000000002.nks").exists()
