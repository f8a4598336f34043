"""A run launched by the real Open MPI ``mpirun`` (Debian's openmpi-bin):
two processes, ``jax.distributed.initialize()`` with no arguments (JAX
reads Open MPI's environment), checkpointed, SIGKILLed together (the
whole launch, as a node crash or the scheduler's kill does), and
launched again: it ends with the parameters and JsonLog of the same
two-process run without mpirun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cluster

N_ITER = 50  # as tests/test_slurm.py's runs: one reference for both
TIMEOUT = 600


def mpirun(workdir: Path, **env) -> subprocess.Popen:
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "run.py"]
    return subprocess.Popen(
        command,
        cwd=workdir,
        env=cluster.without_launchers(cluster.job_environment({"N_ITER": str(N_ITER), **env})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # mpirun and its two ranks: one session to kill
    )


def in_session(session: int) -> list[int]:
    """The live processes of ``session`` (zombies aside)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, _, sid = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):  # it ended meanwhile
            continue
        if int(sid) == session and state != "Z":
            found.append(int(stat.parent.name))
    return found


def kill_launch(launch: subprocess.Popen) -> None:
    """SIGKILL mpirun and its ranks together, as a node crash does, and
    wait until none is left. Open MPI gives each rank a process group of
    its own in mpirun's session: killing mpirun's group alone leaves the
    ranks running, orphaned, beside the launch that resumes."""
    deadline = time.monotonic() + 30
    while pids := in_session(launch.pid):
        assert time.monotonic() < deadline, f"processes {pids} of the killed launch outlive SIGKILL"
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


@pytest.mark.mpi
def test_mpirun_two_processes_killed_and_launched_again_end_exactly(tmp_path):
    problem = cluster.mpirun_problem()
    if problem:
        cluster.unavailable(problem)
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "run.py").write_text(cluster.RUN.read_text())

    first = mpirun(workdir, STEP_SECONDS="0.2")
    checkpoint = workdir / "ckpt" / "run-0" / "step-0000000010.nks"
    deadline = time.monotonic() + TIMEOUT
    while not checkpoint.exists():
        if first.poll() is not None or time.monotonic() > deadline:
            kill_launch(first)
            pytest.fail(f"no checkpoint of step 10 (exit {first.returncode}):\n{first.communicate()[0][-4000:]}")
        time.sleep(0.05)
    kill_launch(first)
    output = first.communicate()[0]
    assert "finished" not in output
    killed_at = max(int(v) for v, _ in cluster.lines(output, "step"))
    assert killed_at < N_ITER

    second = mpirun(workdir)
    output = second.communicate(timeout=TIMEOUT)[0]
    assert second.returncode == 0, output[-4000:]
    resumed = [int(line.rsplit(" ", 2)[-2]) for line in output.splitlines() if "resumed VMC from step" in line]
    assert resumed and 10 <= resumed[0] <= killed_at, output[-3000:]
    assert "finished" in output

    reference = cluster.shared_reference(2, N_ITER)
    cluster.assert_same_run(workdir, reference, N_ITER)
