"""The suite of a GPU or TPU: checkpointed runs on the accelerator, killed
and resumed, loaded on a CPU, moved from a CPU onto it. CI has no
accelerator and does not collect this file (its name is no ``test_*.py``);
on a machine with one, name it, in one process (one program at a time
holds a TPU chip):

    python -m pytest -q -p no:cacheprovider tests/accelerator_suite.py

Every run is a process of its own (tests/accelerator_run.py) on the device
JAX picks; this process stays on the CPU, so that those runs can open the
chip. They take their compiled code from nkserde's compilation cache (the
first run of a machine compiles). docs/guides/accelerators.md gives the
figures of the last run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

jax.config.update("jax_platforms", "cpu")  # this process never holds the chip

RUN = Path(__file__).parent / "accelerator_run.py"
STEPS, EVERY, KILLED_AFTER = 20, 5, 17
TIMEOUT = 900


def launch(workdir: Path, *args: str, cpu: bool = False) -> subprocess.CompletedProcess:
    """accelerator_run.py on the accelerator (``cpu``: on the CPU)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    if cpu:
        env["JAX_PLATFORMS"] = "cpu"
    command = [sys.executable, str(RUN), str(workdir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def platform(done: subprocess.CompletedProcess) -> str:
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("platform "))


def same_numbers(a, b, names) -> None:
    for name in names:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run on the accelerator: (its directory, result.npz)."""
    workdir = tmp_path_factory.mktemp("reference")
    done = launch(workdir, "--steps", str(STEPS), "--every", str(EVERY))
    assert done.returncode == 0, done.stderr[-3000:]
    assert platform(done) != "cpu", "no accelerator: this suite runs on a GPU or TPU"
    return workdir, dict(np.load(workdir / "result.npz"))


def test_a_run_killed_on_the_accelerator_resumes_bit_for_bit(reference, tmp_path):
    """SIGKILL after step 17 (checkpoints every 5 steps, written in the
    background): the rerun resumes from step 15, or from step 10 if the
    checkpoint of step 15 was still in flight (a kill loses at most that
    one), and ends with the parameters and logged energies of the
    uninterrupted run."""
    _, expected = reference
    killed = launch(tmp_path, "--steps", str(STEPS), "--every", str(EVERY), "--kill-after", str(KILLED_AFTER))
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert f"step {KILLED_AFTER}" in killed.stdout.splitlines()
    rerun = launch(tmp_path, "--steps", str(STEPS), "--every", str(EVERY))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    resumed = [line for line in rerun.stderr.splitlines() if "resumed VMC from step " in line]
    assert len(resumed) == 1 and any(f"from step {s} " in resumed[0] for s in (10, 15)), rerun.stderr[-3000:]
    print(resumed[0])
    same_numbers(dict(np.load(tmp_path / "result.npz")), expected, expected)


def test_a_checkpoint_written_on_the_accelerator_loads_on_a_cpu(reference):
    """The final checkpoint of the run on the accelerator, loaded into a
    driver built on the CPU: the parameters the run ended with."""
    workdir, expected = reference
    done = launch(workdir, "--load-only", cpu=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert platform(done) == "cpu"
    loaded = dict(np.load(workdir / "loaded.npz"))
    assert int(loaded.pop("step_count")) == STEPS
    same_numbers(loaded, expected, loaded)


def test_a_run_moves_from_a_cpu_onto_the_accelerator(reference, tmp_path):
    """Ten steps on the CPU, then the same script on the accelerator with
    twenty: the fingerprint is the same (the probes compute on the host's
    CPU), the run resumes from step 10 and says it moved; its first ten
    energies are the CPU's."""
    on_cpu = launch(tmp_path, "--steps", "10", "--every", str(EVERY), cpu=True)
    assert on_cpu.returncode == 0, on_cpu.stderr[-3000:]
    cpu_energies = np.load(tmp_path / "result.npz")["energies"]
    moved = launch(tmp_path, "--steps", str(STEPS), "--every", str(EVERY))
    assert moved.returncode == 0, moved.stderr[-3000:]
    here = platform(moved)
    assert "resumed VMC from step 10 " in moved.stderr, moved.stderr[-3000:]
    assert f"written on cpu, continued on {here}: the continuation is not bit for bit" in moved.stderr
    energies = np.load(tmp_path / "result.npz")["energies"]
    assert len(energies) == STEPS
    np.testing.assert_array_equal(energies[:10], cpu_energies)
