"""A run moved between a CPU and a TPU whose process has no CPU backend
(``JAX_PLATFORMS=tpu``): there the fingerprint's probes compute on the
chip, which cannot compute NetKet's ``log_cosh`` on float64 numbers, so
its fingerprint names the activation where a CPU's holds its values. The
chip is this machine's CPU made to behave as it does for the probes
(tests/as_on_a_tpu.py says how, and why that is faithful); the run is the
accelerator suite's (tests/accelerator_run.py: 16 spins, float32 RBM,
``IsingJax``, Adam, a checkpoint every 5 steps).

tests/fixtures/moves-35ea746 holds the directories of ten steps on either
platform written by nkserde 35ea746, before a function one platform could
not probe stopped counting as a change: they resume on the other."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import netket as nk
import pytest

import accelerator_run
from nkserde.checkpoint.fingerprint import changes, fingerprint, functions, optimizers
from nkserde.checkpoint.fingerprint.entries import PROBES_ON, is_hash

TESTS = Path(__file__).parent
FIXTURE = TESTS / "fixtures" / "moves-35ea746"
WRITTEN = json.loads((FIXTURE / "moves.json").read_text())


def stored_fingerprint(platform: str) -> dict:
    return json.loads((FIXTURE / platform / "ckpt" / "fingerprint.json").read_text())


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """nkserde's caches for the launched runs (compiled code, the probes'
    results): the runs after the first of each platform compile less."""
    return tmp_path_factory.mktemp("caches")


def launch(workdir: Path, steps: int, cache: Path, on_tpu: bool) -> subprocess.CompletedProcess:
    """accelerator_run.py on the CPU, or as on a TPU under ``JAX_PLATFORMS=tpu``."""
    chip = [str(TESTS / "as_on_a_tpu.py")] if on_tpu else []
    command = [sys.executable, *chip, str(TESTS / "accelerator_run.py"), str(workdir), "--steps", str(steps)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "NKSERDE_COMPILATION_CACHE": str(cache)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def resumed(done: subprocess.CompletedProcess) -> str:
    """The one line that says where the run resumed."""
    (line,) = [line for line in done.stderr.splitlines() if "resumed VMC from step " in line]
    return line


def energies(workdir: Path) -> list[float]:
    return json.loads((workdir / "log.log").read_text())["Energy"]["Mean"]


# ------------------------------------------------- the fingerprints compared


def test_a_function_the_chip_could_not_probe_is_no_change():
    """The chip's fingerprint (written by 35ea746) names the activation
    where this process's holds its values; both say ``log_cosh`` and close
    over nothing: the same run, both ways."""
    on_tpu, here = stored_fingerprint("tpu"), fingerprint(accelerator_run.build())
    assert on_tpu[PROBES_ON] == "tpu" and on_tpu["model.activation"] == "log_cosh"
    assert PROBES_ON not in here and is_hash(here["model.activation"])
    assert changes(on_tpu, here) == []
    assert changes(here, on_tpu) == []
    assert changes(stored_fingerprint("cpu"), on_tpu) == []


def test_a_change_between_platforms_is_named_in_words():
    """What both platforms say of the activation and the optimizer (their
    names, the values they close over, the hyperparameters) still decides:
    another activation or learning rate is refused, either way, with the
    old and the new."""
    on_tpu = stored_fingerprint("tpu")
    tanh = fingerprint(accelerator_run.build(activation=jnp.tanh))
    assert changes(on_tpu, tanh) == ["model: RBM activation log_cosh -> tanh"]
    assert changes(tanh, on_tpu) == ["model: RBM activation tanh -> log_cosh"]
    faster = fingerprint(accelerator_run.build(learning_rate=2e-2))
    assert changes(on_tpu, faster) == ["optimizer: adam learning_rate 0.01 -> 0.02"]


def test_a_function_that_stops_computing_on_one_platform_is_named_with_what_changed():
    """On one platform a function probed before and not now (or the other
    way round) is a change: the line says what changed about it, not
    ``log_cosh -> log_cosh``."""
    on_cpu = stored_fingerprint("cpu")
    not_probed = {k: v for k, v in stored_fingerprint("tpu").items() if k != PROBES_ON}  # as if the CPU failed
    (line,) = changes(on_cpu, not_probed)
    assert line == "model: RBM activation log_cosh: computed on the fingerprint's fixed inputs -> raises on them"
    (line,) = changes(not_probed, on_cpu)
    assert line == "model: RBM activation log_cosh: raised on the fingerprint's fixed inputs -> computes on them"


def scaled_log_cosh(scale):
    """An activation of the script's own, closing over a number."""

    def activation(x):
        return scale * nk.nn.activation.log_cosh(x)

    return activation


@pytest.fixture
def probed_as_on_a_chip(monkeypatch):
    """Makes this process's next fingerprints a chip's: no CPU backend,
    and the model's functions (``"model"``) or the optimizer's updates
    (``"optimizer"``) raising on the probe's inputs. In process, for
    objects the one failure tests/as_on_a_tpu.py reproduces does not reach."""

    def as_on_a_chip(failing: str) -> None:
        monkeypatch.setattr(functions, "probe_device", lambda: None)
        monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
        if failing == "model":
            probe = functions.probe_function
            monkeypatch.setattr(
                functions, "probe_function", lambda f, kind: None if kind == functions.ACTIVATION else probe(f, kind)
            )
        else:
            monkeypatch.setattr(optimizers, "effect", lambda *args: None)

    return as_on_a_chip


def test_what_a_function_the_chip_could_not_probe_closes_over_still_decides(probed_as_on_a_chip):
    """An activation of the script's own that the chip cannot compute is
    described there by its name and the number it closes over: the same
    number is the same run, another is a change, in those words."""
    here = fingerprint(accelerator_run.build(activation=scaled_log_cosh(2.0)))
    changed = fingerprint(accelerator_run.build(activation=scaled_log_cosh(3.0)))
    probed_as_on_a_chip("model")
    on_chip = fingerprint(accelerator_run.build(activation=scaled_log_cosh(2.0)))
    assert on_chip[PROBES_ON] == "tpu" and not is_hash(on_chip["model.activation"])
    assert on_chip["model.activation.scale"] == "2.0"
    assert changes(here, on_chip) == [] and changes(on_chip, here) == []
    assert changes(on_chip, changed) == ["model: RBM activation activation scale 2.0 -> 3.0"]


def test_an_optimizer_the_chip_could_not_probe_is_compared_by_its_hyperparameters(probed_as_on_a_chip):
    """An optimizer whose updates raise on the chip is described by its
    kind and hyperparameters there: the same is no change, another
    learning rate is."""
    here = fingerprint(accelerator_run.build())
    probed_as_on_a_chip("optimizer")
    on_chip = fingerprint(accelerator_run.build())
    assert not is_hash(on_chip["optimizer"]) and is_hash(here["optimizer"])
    assert changes(here, on_chip) == [] and changes(on_chip, here) == []
    faster = fingerprint(accelerator_run.build(learning_rate=2e-2))
    assert changes(here, faster) == ["optimizer: adam learning_rate 0.01 -> 0.02"]


# ------------------------------------------------- runs moved


def test_a_checkpoint_written_on_a_cpu_continues_on_a_tpu(tmp_path, cache):
    """35ea746's ten steps on the CPU, continued to 20 as on a TPU: it
    resumes from step 10, says it moved in one line, and keeps the CPU's
    ten energies."""
    shutil.copytree(FIXTURE / "cpu", tmp_path / "run")
    done = launch(tmp_path / "run", 20, cache, on_tpu=True)
    assert "platform tpu" in done.stdout.splitlines()
    line = resumed(done)
    assert "from step 10 " in line and "written on cpu, continued on tpu" in line, line
    assert energies(tmp_path / "run")[:10] == WRITTEN["energies_cpu"]
    assert len(energies(tmp_path / "run")) == 20


def test_a_checkpoint_written_on_a_tpu_continues_on_a_cpu(tmp_path, cache):
    """35ea746's ten steps as on a TPU (its fingerprint names the
    activation), continued to 20 on the CPU."""
    shutil.copytree(FIXTURE / "tpu", tmp_path / "run")
    done = launch(tmp_path / "run", 20, cache, on_tpu=False)
    line = resumed(done)
    assert "from step 10 " in line and "written on tpu, continued on cpu" in line, line
    assert energies(tmp_path / "run")[:10] == WRITTEN["energies_tpu"]
    assert len(energies(tmp_path / "run")) == 20


def test_a_run_started_on_a_tpu_moves_to_a_cpu(tmp_path, cache):
    """Today's writer: five steps as on a TPU, then ten on the CPU."""
    first = launch(tmp_path, 5, cache, on_tpu=True)
    assert not any("resumed" in line for line in first.stderr.splitlines())
    assert json.loads((tmp_path / "ckpt" / "fingerprint.json").read_text())[PROBES_ON] == "tpu"
    line = resumed(launch(tmp_path, 10, cache, on_tpu=False))
    assert "from step 5 " in line and "written on tpu, continued on cpu" in line, line
    assert len(energies(tmp_path)) == 10
