"""Scripts users run, in the shape of NetKet's own Examples (tests/scripts/,
each with one ``nkserde.checkpointed`` line per driver): killed with SIGKILL
in the middle (in each driver's run, for scripts with two drivers in one
checkpoint directory), stopped by ``nk.callbacks.Timeout`` and resubmitted,
then run again to the end, each ends with exactly the files of an
uninterrupted run: every JsonLog ``.log`` value, the ``.mpack`` parameters,
and what the script saves itself.

The scripts fix their seeds (NetKet draws them from the OS otherwise), so
that two uninterrupted runs agree. The processes share a JAX persistent
compilation cache through JAX's environment variables, so the scripts stay
as a user writes them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from builders import json_differences

SCRIPTS = Path(__file__).parent / "scripts"
TIMEOUT = 300

# script -> where to kill it: (the run() call's subdirectory, kill once a checkpoint of this step exists)
KILLS = {
    "quench_dynamics": [("run-0", 6), ("run-1", 2)],  # NetKet's Dynamics: VMC, then TDVP, one directory
    "j1j2_gcnn": [("run-0", 4), ("run-1", 2)],  # HeisenbergJ1J2: GCNN, ground then excited state
    "infidelity": [("run-0", 4)],  # Infidelity: a target state holding an operator
    "heisenberg1d_symm": [("run-0", 8)],  # Heisenberg1d: VMC_SR, RBMSymm, total_sz=0
    "state_reconstruction": [("run-0", 6)],  # StateReconstruction: QSR, its batch generator, control variates
    "continuous_ho": [("run-0", 4)],  # Continuous/HO: particles in continuous space, Gaussian, VMC_SR
    "fermi_hubbard_slater": [("run-0", 4)],  # Fermions: Slater2nd, fermion hops, holomorphic SR
    "ising1d_rnn": [("run-0", 4)],  # Autoregressive: FastLSTMNet, ARDirectSampler, SR
    "ising1d_jastrow": [("run-0", 4)],  # Ising1d: Jastrow, VMC_SR, EarlyStopping
    "full_summation": [("run-0", 6)],  # FullSummation: FullSumState, SR with a diag_shift schedule
    "nn_frameworks": [("run-0", 4), ("run-1", 4)],  # nn_frameworks: an nnx RBM, then a bound linen RBM
}


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("jax-cache")


def start(script: str, workdir: Path, cache: Path, **env) -> subprocess.Popen:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "JAX_COMPILATION_CACHE_DIR": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, str(SCRIPTS / f"{script}.py"), str(workdir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen) -> str:
    output = process.communicate(timeout=TIMEOUT)[0]
    assert process.returncode == 0, output[-4000:]
    return output


def kill_when(process: subprocess.Popen, checkpoint_dir: Path, step: int):
    """SIGKILLs the process as soon as a checkpoint of ``step`` or later
    exists in ``checkpoint_dir``."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        steps = (
            [int(p.stem.split("-")[1]) for p in checkpoint_dir.glob("step-*.nks")] if checkpoint_dir.is_dir() else []
        )
        if steps and max(steps) >= step:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            return
        if process.poll() is not None:
            pytest.fail(
                f"the script ended before checkpointing step {step} in {checkpoint_dir}:\n"
                f"{process.communicate()[0][-4000:]}"
            )
        time.sleep(0.02)
    process.kill()
    pytest.fail(f"no checkpoint of step {step} in {checkpoint_dir} after {TIMEOUT} s")


def checkpoints(workdir: Path) -> dict[str, int]:
    return {str(p.relative_to(workdir)): p.stat().st_mtime_ns for p in workdir.glob("ckpt/run-*/step-*.nks")}


def assert_resumed(before: dict, after: dict):
    """A restart that resumed rewrites no checkpoint of a step it did not run
    again (a restart from scratch, equally deterministic, would)."""
    assert before
    rewritten = [name for name, mtime in before.items() if name in after and after[name] != mtime]
    assert not rewritten, f"rewritten by the restart: {rewritten}"


def outputs_differ(got: Path, want: Path) -> list[str]:
    names = sorted(p.name for p in want.iterdir() if p.suffix in (".log", ".mpack", ".npz"))
    assert names, f"the script wrote nothing to compare in {want}"
    problems = []
    for name in names:
        if not (got / name).exists():
            problems.append(f"{name} missing")
        elif name.endswith(".log"):
            a, b = json.loads((got / name).read_text()), json.loads((want / name).read_text())
            problems += [f"{name}{p}" for p in json_differences(a, b)]
        elif name.endswith(".npz"):
            with np.load(got / name) as a, np.load(want / name) as b:
                if a.files != b.files or any(a[k].tobytes() != b[k].tobytes() for k in b.files):
                    problems.append(f"{name} differs")
        elif (got / name).read_bytes() != (want / name).read_bytes():
            problems.append(f"{name} differs")
    return problems


@pytest.mark.parametrize("script", sorted(KILLS))
def test_killed_and_restarted_ends_like_an_uninterrupted_run(script, tmp_path, jax_cache):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    uninterrupted = None
    before = {}
    for run, step in KILLS[script]:
        kill_when(start(script, resumed, jax_cache), resumed / "ckpt" / run, step)
        if uninterrupted is None:
            # the uninterrupted run goes on beside the rest (two cores), started
            # once the first killed one has compiled its first driver into the cache
            uninterrupted = start(script, reference, jax_cache)
        if before:
            assert_resumed(before, checkpoints(resumed))
        before = checkpoints(resumed)
    finish(uninterrupted)
    if script == "heisenberg1d_symm":
        # two jobs that a walltime Timeout stops after one step each: each
        # resumes where the previous one stopped and goes one step further
        last = max(int(p.stem.split("-")[1]) for p in (resumed / "ckpt" / "run-0").glob("step-*.nks"))
        for job in (1, 2):
            output = finish(start(script, resumed, jax_cache, TIMEOUT="0.001"))
            assert f"stopped at {last + job}" in output, output[-3000:]
            assert "interrupted by Timeout" in output, output[-3000:]
            assert_resumed(before, checkpoints(resumed))
            before = checkpoints(resumed)
    output = finish(start(script, resumed, jax_cache))
    assert "finished" in output and "resumed" in output, output[-3000:]
    assert_resumed(before, checkpoints(resumed))

    problems = outputs_differ(resumed, reference)
    assert not problems, "\n".join(problems)
