"""The suite of a GPU or TPU: checkpointed runs on the accelerator, killed
and resumed, loaded on a CPU, moved from a CPU onto it and back, with
``JAX_PLATFORMS`` unset and naming the accelerator alone. CI has no
accelerator and does not collect this file (its name is no ``test_*.py``);
on a machine with one, name it, in one process (one program at a time
holds a TPU chip):

    python -m pytest -q -p no:cacheprovider tests/accelerator_suite.py

Every run is a process of its own (tests/accelerator_run.py) on the device
JAX picks; this process stays on the CPU, so that those runs can open the
chip. They take their compiled code from nkserde's compilation cache (the
first run of a machine compiles). docs/guides/accelerators.md gives the
figures of the last run.

``NKSERDE_SUITE_AS_ON_A_TPU=1`` runs the suite on a machine without one:
the accelerator's runs are the CPU's made to look like a TPU's to nkserde
(tests/as_on_a_tpu.py), the same code paths but the chip's arithmetic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

jax.config.update("jax_platforms", "cpu")  # this process never holds the chip

from nkserde.checkpoint.fingerprint.entries import is_hash  # noqa: E402  (after the line above)

TESTS = Path(__file__).parent
RUN = TESTS / "accelerator_run.py"
STEPS, EVERY, KILLED_AFTER = 20, 5, 17
TIMEOUT = 900
SIMULATED = os.environ.get("NKSERDE_SUITE_AS_ON_A_TPU") == "1"
JAX_PLATFORM_NAMES = {"gpu": "cuda"}  # JAX_PLATFORMS's name of a platform jax.default_backend() names otherwise


def launch(workdir: Path, *args: str, cpu: bool = False, alone: str | None = None) -> subprocess.CompletedProcess:
    """accelerator_run.py on the accelerator with ``JAX_PLATFORMS`` unset
    (JAX's default: the accelerator and the CPU), or with ``alone``, the
    accelerator's platform, naming it alone (no CPU backend); ``cpu``: on
    the CPU."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    command = [sys.executable, str(RUN), str(workdir), *args]
    if cpu:
        env["JAX_PLATFORMS"] = "cpu"
    elif SIMULATED:
        env["JAX_PLATFORMS"] = "cpu"
        command[1:1] = [str(TESTS / "as_on_a_tpu.py"), *([] if alone else ["--cpu-backend"])]
    elif alone:
        env["JAX_PLATFORMS"] = JAX_PLATFORM_NAMES.get(alone, alone)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def platform(done: subprocess.CompletedProcess) -> str:
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("platform "))


def resumed_line(done: subprocess.CompletedProcess) -> str:
    """The one line that says where the run resumed."""
    (line,) = [line for line in done.stderr.splitlines() if "resumed VMC from step " in line]
    return line


def same_numbers(a, b, names) -> None:
    for name in names:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run on the accelerator: (its directory, result.npz,
    the accelerator's platform: ``tpu``, ``gpu``)."""
    workdir = tmp_path_factory.mktemp("reference")
    done = launch(workdir, "--steps", str(STEPS), "--every", str(EVERY))
    assert done.returncode == 0, done.stderr[-3000:]
    assert platform(done) != "cpu", "no accelerator: this suite runs on a GPU or TPU"
    return workdir, dict(np.load(workdir / "result.npz")), platform(done)


def test_a_run_killed_on_the_accelerator_resumes_bit_for_bit(reference, tmp_path):
    """SIGKILL after step 17 (checkpoints every 5 steps, written in the
    background): the rerun resumes from step 15, or from step 10 if the
    checkpoint of step 15 was still in flight (a kill loses at most that
    one), and ends with the parameters and logged energies of the
    uninterrupted run."""
    _, expected, _ = reference
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
    workdir, expected, _ = reference
    done = launch(workdir, "--load-only", cpu=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert platform(done) == "cpu"
    loaded = dict(np.load(workdir / "loaded.npz"))
    assert int(loaded.pop("step_count")) == STEPS
    same_numbers(loaded, expected, loaded)


@pytest.mark.parametrize("alone", [False, True], ids=["JAX_PLATFORMS unset", "JAX_PLATFORMS accelerator alone"])
def test_a_run_moves_from_a_cpu_onto_the_accelerator(reference, tmp_path, alone):
    """Ten steps on the CPU, then the same script on the accelerator with
    twenty, ``JAX_PLATFORMS`` unset (the probes compute on the host's CPU)
    or naming the accelerator alone (they compute on it, where NetKet's
    float64 ``log_cosh`` does not compute): the same run either way. It
    resumes from step 10 and says it moved, in one line; its first ten
    energies are the CPU's."""
    on_cpu = launch(tmp_path, "--steps", "10", "--every", str(EVERY), cpu=True)
    assert on_cpu.returncode == 0, on_cpu.stderr[-3000:]
    cpu_energies = np.load(tmp_path / "result.npz")["energies"]
    moved = launch(tmp_path, "--steps", str(STEPS), "--every", str(EVERY), alone=reference[2] if alone else None)
    assert moved.returncode == 0, moved.stderr[-3000:]
    here = platform(moved)
    line = resumed_line(moved)
    print(line)
    assert "resumed VMC from step 10 " in line, moved.stderr[-3000:]
    assert f"written on cpu, continued on {here}: the continuation is not bit for bit" in line
    energies = np.load(tmp_path / "result.npz")["energies"]
    assert len(energies) == STEPS
    np.testing.assert_array_equal(energies[:10], cpu_energies)


def test_a_run_moves_from_the_accelerator_alone_onto_a_cpu(reference, tmp_path):
    """Ten steps on the accelerator with ``JAX_PLATFORMS`` naming it alone
    (its fingerprint's probes computed there), then the same script on the
    CPU with twenty: it resumes from step 10 and says it moved; its first
    ten energies are the accelerator's."""
    on_chip = launch(tmp_path, "--steps", "10", "--every", str(EVERY), alone=reference[2])
    assert on_chip.returncode == 0, on_chip.stderr[-3000:]
    there = platform(on_chip)
    assert json.loads((tmp_path / "ckpt" / "fingerprint.json").read_text())["probes_on"] == there
    chip_energies = np.load(tmp_path / "result.npz")["energies"]
    moved = launch(tmp_path, "--steps", str(STEPS), "--every", str(EVERY), cpu=True)
    assert moved.returncode == 0, moved.stderr[-3000:]
    line = resumed_line(moved)
    print(line)
    assert "resumed VMC from step 10 " in line, moved.stderr[-3000:]
    assert f"written on {there}, continued on cpu: the continuation is not bit for bit" in line
    energies = np.load(tmp_path / "result.npz")["energies"]
    assert len(energies) == STEPS
    np.testing.assert_array_equal(energies[:10], chip_energies)


def test_the_accelerator_alone_fingerprints_as_its_simulation(reference, tmp_path):
    """The run's fingerprint with ``JAX_PLATFORMS`` naming the accelerator
    alone, against the one tests/as_on_a_tpu.py makes on the CPU (what CI's
    tests of a move take for the chip's): the same entries, the same texts
    but the probes' hashes (another arithmetic); a function the chip could
    not probe is named in both."""
    chip = launch(tmp_path / "chip", "--fingerprint", alone=reference[2])
    assert chip.returncode == 0, chip.stderr[-3000:]
    simulation = [sys.executable, str(TESTS / "as_on_a_tpu.py"), str(RUN), str(tmp_path / "simulated"), "--fingerprint"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    simulated = subprocess.run(simulation, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert simulated.returncode == 0, simulated.stderr[-3000:]
    on_chip, as_simulated = (json.loads((tmp_path / d / "fingerprint.json").read_text()) for d in ("chip", "simulated"))
    print("the activation on the chip:", on_chip.get("model.activation"))
    assert sorted(on_chip) == sorted(as_simulated)
    for key, text in on_chip.items():
        if is_hash(text) and is_hash(as_simulated[key]):
            assert text.split()[0] == as_simulated[key].split()[0], key
        else:
            assert text == as_simulated[key], key
