"""A user's script in the shape of NetKet's Examples/Dynamics/ising1d.py
(VMC ground state, then an adaptive TDVP quench on the same variational
state, observables, stopping times, JsonLog outputs) with one
``nkserde.checkpointed`` line per driver: killed once in each run and
started again each time, it ends with exactly the files of an uninterrupted
run.

The processes share a JAX persistent compilation cache (set through JAX's
environment variables, so the script itself stays as a user writes it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builders import json_differences

SCRIPT = Path(__file__).parent / "scripts" / "quench_dynamics.py"
TIMEOUT = 240
OUTPUTS = ("gs.log", "gs.mpack", "te.log", "te.mpack")


def start(workdir: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
    return subprocess.Popen([sys.executable, str(SCRIPT), str(workdir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen) -> str:
    output = process.communicate(timeout=TIMEOUT)[0]
    assert process.returncode == 0, output[-4000:]
    return output


def kill_when(process: subprocess.Popen, checkpoint_dir: Path, step: int):
    """SIGKILLs the process as soon as a checkpoint of ``step`` or later
    exists in ``checkpoint_dir``."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        steps = [int(p.stem.split("-")[1]) for p in checkpoint_dir.glob("step-*.nks")] \
            if checkpoint_dir.is_dir() else []
        if steps and max(steps) >= step:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            return
        if process.poll() is not None:
            pytest.fail(f"the script ended before checkpointing step {step}:\n"
                        f"{process.communicate()[0][-4000:]}")
        time.sleep(0.02)
    process.kill()
    pytest.fail(f"no checkpoint of step {step} in {checkpoint_dir} after {TIMEOUT} s")


def checkpoints(workdir: Path) -> dict[str, int]:
    return {str(p.relative_to(workdir)): p.stat().st_mtime_ns for p in workdir.glob("ckpt-*/run-0/step-*.nks")}


def assert_resumed(before: dict, after: dict):
    """A restart that resumed writes no checkpoint of a step it did not run
    again: every checkpoint there before is untouched (a restart from
    scratch, equally deterministic, would have rewritten them)."""
    assert before
    rewritten = [name for name, mtime in before.items() if name in after and after[name] != mtime]
    assert not rewritten, f"rewritten by the restart: {rewritten}"


def test_killed_in_each_run_and_restarted_ends_like_an_uninterrupted_run(tmp_path):
    cache = tmp_path / "jax-cache"
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    finish(start(reference, cache))

    kill_when(start(resumed, cache), resumed / "ckpt-gs" / "run-0", 6)  # in the ground state run
    before = checkpoints(resumed)
    kill_when(start(resumed, cache), resumed / "ckpt-te" / "run-0", 2)  # in the quench
    assert_resumed(before, checkpoints(resumed))
    before = checkpoints(resumed)
    finish(start(resumed, cache))
    assert_resumed(before, checkpoints(resumed))

    problems = []
    for name in OUTPUTS:
        got, want = (resumed / name).read_bytes(), (reference / name).read_bytes()
        if name.endswith(".log"):
            problems += [f"{name}{p}" for p in json_differences(json.loads(got), json.loads(want))]
        elif got != want:
            problems.append(f"{name} differs")
    assert not problems, "\n".join(problems)
