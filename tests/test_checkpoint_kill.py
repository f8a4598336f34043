"""Real processes, real signals.

A checkpointed run is killed, and the same script is run again, as a
requeued cluster job would be: it must resume from a checkpoint that loads
and end exactly where an uninterrupted run ends: the same final parameters
bit for bit, the same JsonLog ``.log`` (every value) and ``.mpack``.

Each run is ``tests/_ckpt_script.py`` (see its docstring) in a fresh
process, for VMC, VMC_SR and TDVP (RK4, FullSumState, ``run(0.08)`` with
dt=0.01), 8 steps each, and for two VMC runs whose state a fresh template
holds provisionally (optax.monitor; a numpy sampler with a complex model).
The reference is one uninterrupted run per driver without any
checkpointing, shared by the module.

The ``.log`` files of two runs differ in the ``wallclock`` series (the time
each step was logged); everything else must match, value for value and byte
for byte.

The processes share a JAX persistent compilation cache (in a temporary
directory), which only shortens their start.
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from builders import json_differences

SCRIPT = Path(__file__).with_name("_ckpt_script.py")
TIMEOUT = 120  # seconds a process may live
STEPS = 8  # every driver's run: 8 steps (TDVP: 0.08 at dt=0.01)
# How each driver's interrupted runs checkpoint: both ways of turning it on,
# synchronous and background writes.
OPTIONS = {
    "vmc": ["--mode", "checkpointed", "--every", "2", "--sync"],
    "vmc_sr": ["--mode", "callback", "--every", "2"],
    "tdvp": ["--mode", "checkpointed", "--every", "1"],
}
DRIVERS = list(OPTIONS)


# ------------------------------------------------------------------ processes


class Process:
    """The script running in a child process; stdout and stderr are read,
    line by line, by a thread."""

    def __init__(self, args, env, cwd, timeout=TIMEOUT):
        self.popen = subprocess.Popen(
            [sys.executable, str(SCRIPT), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
        )
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.popen.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def fail(self, message):
        self.kill()
        pytest.fail(f"{message}\n--- output of {' '.join(self.popen.args[2:])}:\n{self.output}")

    def wait_for(self, pattern: str) -> re.Match:
        """Reads the output until a whole line matches ``pattern``."""
        regex = re.compile(pattern)
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self.fail(f"no line {pattern!r} within {self.timeout} s")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                self.popen.wait()
                self.fail(f"exited with {self.popen.returncode} before printing {pattern!r}")
            match = regex.fullmatch(line)
            if match:
                return match

    def find(self, pattern: str) -> re.Match | None:
        """The first line read so far that matches ``pattern`` as a whole."""
        regex = re.compile(pattern)
        return next((m for m in map(regex.fullmatch, self.lines) if m), None)

    def send(self, signum):
        self.popen.send_signal(signum)

    def finish(self) -> int:
        """Waits for the process to end; returns its exit code."""
        try:
            self.popen.wait(timeout=max(self.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.fail(f"still running after {self.timeout} s")
        self._reader.join(timeout=10)
        return self.popen.returncode

    def kill(self):
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


class Runner:
    def __init__(self, jax_cache: Path):
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "JAX_PLATFORMS": "cpu", "CKPT_JAX_CACHE": str(jax_cache)}
        self.processes: list[Process] = []

    def start(self, driver, workdir, *options, env=None, timeout=TIMEOUT) -> Process:
        process = Process([driver, workdir, *options], {**self.env, **(env or {})}, workdir, timeout)
        self.processes.append(process)
        return process

    def run_to_end(self, driver, workdir, *options, env=None, timeout=TIMEOUT) -> Process:
        process = self.start(driver, workdir, *options, env=env, timeout=timeout)
        if process.finish() != 0:
            process.fail(f"exit code {process.popen.returncode}")
        if not process.find(r"finished step_count=\d+ t=.*"):
            process.fail("no 'finished' line")
        return process

    def kill_all(self):
        for process in self.processes:
            process.kill()
        self.processes.clear()


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    runner = Runner(tmp_path_factory.mktemp("jax-cache"))
    yield runner
    runner.kill_all()


@pytest.fixture(autouse=True)
def _no_stray_process(runner):
    yield
    runner.kill_all()


# ------------------------------------------------------------------ outcomes

_WALLCLOCK = re.compile(rb'("wallclock":\{"iters":\[[^\]]*\],"value":\[)[^\]]*(\])')


class Outcome:
    """What a finished run leaves: final parameters, step count and time,
    the JsonLog files."""

    def __init__(self, workdir: Path):
        with np.load(workdir / "result.npz") as result:
            self.arrays = {k: result[k] for k in result.files}
        self.log = (workdir / "out" / "log.log").read_bytes()
        self.mpack = (workdir / "out" / "log.mpack").read_bytes()

    @property
    def step_count(self) -> int:
        return int(self.arrays["step_count"])


def end_differences(workdir: Path, reference: Outcome) -> list[str]:
    """How the run in ``workdir`` ended differently from the reference."""
    got = Outcome(workdir)
    problems: list[str] = []
    if got.arrays.keys() != reference.arrays.keys():
        problems.append(f"result arrays {sorted(got.arrays)} != {sorted(reference.arrays)}")
    for name in got.arrays.keys() & reference.arrays.keys():
        have, want = got.arrays[name], reference.arrays[name]
        if have.dtype != want.dtype or have.shape != want.shape or have.tobytes() != want.tobytes():
            problems.append(f"{name}: resumed {have!r} != reference {want!r}")
    # the .log, value for value, then byte for byte but the wall clock times
    log_problems = json_differences(json.loads(got.log), json.loads(reference.log))
    problems += [f"JsonLog .log {p}" for p in log_problems]
    masked = [_WALLCLOCK.subn(rb"\1...\2", log) for log in (got.log, reference.log)]
    if [n for _, n in masked] != [1, 1]:
        problems.append("no wallclock series in the .log files?")
    elif not log_problems and masked[0][0] != masked[1][0]:
        problems.append("the .log values match but its bytes differ")
    if got.mpack != reference.mpack:
        problems.append("JsonLog .mpack (final parameters) differs")
    return problems


def assert_same_end(workdir: Path, reference: Outcome):
    problems = end_differences(workdir, reference)
    assert not problems, "the run did not end as the uninterrupted run:\n" + "\n".join(problems)


@pytest.fixture(scope="module")
def reference(runner, tmp_path_factory):
    """reference(driver): the Outcome of an uninterrupted run without
    checkpoints. Every driver's in one process, one after the other (a
    launch imports NetKet: seconds of CPU that five launches paid five
    times); the runs under test each have a fresh process, so a reference
    that a run before it in its process changed would fail them, not
    pass them."""
    workdir = tmp_path_factory.mktemp("reference")
    drivers = [*DRIVERS, *sorted(PROVISIONAL)]
    runner.run_to_end(",".join(drivers), workdir, "--mode", "plain", timeout=len(drivers) * TIMEOUT)
    done = {driver: Outcome(workdir / driver) for driver in drivers}
    assert all(outcome.step_count == STEPS for outcome in done.values())
    return done.__getitem__


def saved_steps(workdir: Path) -> list[int]:
    """Steps that have a checkpoint file, oldest first."""
    return sorted(int(p.name[5:-4]) for p in (workdir / "ckpt").rglob("step-*.nks"))


def locks(workdir: Path) -> list[Path]:
    return list((workdir / "ckpt").rglob(".lock"))


def resumed(process: Process) -> tuple[int | None, str]:
    """(the Checkpoint's resumed_from, digest of the parameters the run
    started from), as the process printed them."""
    match = process.find(r"resumed_from (None|\d+) params (\w+)")
    if match is None:
        process.fail("no 'resumed_from' line")
    return (None if match.group(1) == "None" else int(match.group(1))), match.group(2)


def resumed_from(process: Process) -> int | None:
    return resumed(process)[0]


def step_lines(process: Process) -> list[int]:
    return [int(m.group(1)) for m in map(re.compile(r"step (\d+)").fullmatch, process.lines) if m]


def check_resumed_run(second: Process, saved: list[int]):
    """The rerun loaded the newest checkpoint on disk (each one on disk is
    complete, so none is skipped) and did only the remaining steps."""
    start = saved[-1] if saved else None
    assert resumed_from(second) == start, (saved, second.output)
    assert step_lines(second) == list(range((start or 0) + 1, STEPS + 1)), second.output
    assert "skipping checkpoint" not in second.output, second.output


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("driver", DRIVERS)
def test_sigkill_at_a_random_step(driver, runner, reference, tmp_path):
    """SIGKILL just after step k (k drawn with a fixed seed): no code of the
    run gets to react. A checkpoint being written in the background may be
    cut off (its temporary file stays behind); with k small there may be no
    checkpoint yet, and the rerun starts over. Then the job requeued after
    it finished: its rerun changes nothing."""
    ref = reference(driver)
    k = random.Random(f"SIGKILL {driver}").randint(2, STEPS - 2)  # 3, 3, 2
    first = runner.start(driver, tmp_path, *OPTIONS[driver], env={"CKPT_STEP_HOLD": f"{k}:{tmp_path / 'release'}"})
    first.wait_for(r"resumed_from None params \w+")
    first.wait_for(f"step {k}")  # printed in on_step_end, which then waits for the release file
    first.send(signal.SIGKILL)
    assert first.finish() == -signal.SIGKILL
    saved = saved_steps(tmp_path)
    assert not saved or saved[-1] <= k, (k, saved)
    assert not (tmp_path / "result.npz").exists()

    second = runner.run_to_end(driver, tmp_path, *OPTIONS[driver])
    check_resumed_run(second, saved)
    assert_same_end(tmp_path, ref)
    assert not locks(tmp_path)
    assert_rerun_after_the_end_changes_nothing(runner, driver, tmp_path, ref)


def assert_rerun_after_the_end_changes_nothing(runner, driver, workdir, ref):
    """A job requeued after it has finished (or killed after its final
    checkpoint): the rerun loads the final checkpoint, does no step, logs
    nothing new and writes no checkpoint (docs/guides/resume.md: "A run
    that already reached its end returns at once")."""
    files = sorted(p.name for p in (workdir / "ckpt").rglob("step-*.nks"))
    again = runner.run_to_end(driver, workdir, *OPTIONS[driver])
    problems = []
    if resumed_from(again) != STEPS:
        problems.append(f"resumed from step {resumed_from(again)}, not {STEPS}")
    if step_lines(again):
        problems.append(f"ran steps {step_lines(again)}")
    now = sorted(p.name for p in (workdir / "ckpt").rglob("step-*.nks"))
    if now != files:
        problems.append(f"checkpoints {files} became {now}")
    problems += end_differences(workdir, ref)
    assert not problems, "\n".join(problems)


# State a freshly built template holds provisionally (issue 30, docs/schema.md
# "Provisional state"): optax.monitor's measurements, empty until the first
# update; a numpy sampler's log_prob, complex for a complex model until the
# first reset. One run of each in the two ways of turning checkpoints on.
PROVISIONAL = {
    "vmc_monitor": ["--mode", "checkpointed", "--every", "2", "--sync"],
    "vmc_numpy_complex": ["--mode", "callback", "--every", "2", "--sync"],
}


@pytest.mark.parametrize("driver", sorted(PROVISIONAL))
def test_sigkill_and_rerun_of_state_its_first_step_restructures(driver, runner, reference, tmp_path):
    """SIGKILL after step 5 (checkpoints of steps 2 and 4 on disk): the
    rerun, whose driver is built before any step, loads step 4 and ends as
    the uninterrupted run."""
    ref = reference(driver)
    k = 5
    first = runner.start(driver, tmp_path, *PROVISIONAL[driver], env={"CKPT_STEP_HOLD": f"{k}:{tmp_path / 'release'}"})
    first.wait_for(f"step {k}")  # printed in on_step_end, which then waits for the release file
    first.send(signal.SIGKILL)
    assert first.finish() == -signal.SIGKILL
    saved = saved_steps(tmp_path)
    assert saved[-1] == 4, saved

    second = runner.run_to_end(driver, tmp_path, *PROVISIONAL[driver])
    check_resumed_run(second, saved)
    assert_same_end(tmp_path, ref)
    assert not locks(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_sigkill_while_a_checkpoint_is_written(sync, runner, reference, tmp_path):
    """The write of checkpoint k stops after its data, before the fsync and
    rename: it is killed there. The temporary file stays behind; the rerun
    resumes from k - 1 (every=1), removes it and ends as the uninterrupted
    run."""
    ref = reference("vmc")
    k = 4
    options = ["--mode", "checkpointed", "--every", "1", *(["--sync"] if sync else [])]
    first = runner.start("vmc", tmp_path, *options, env={"CKPT_SLOW_WRITE": f"{k}:{TIMEOUT}"})
    first.wait_for(f"writing step-{k:010d}.nks")
    first.send(signal.SIGKILL)
    assert first.finish() == -signal.SIGKILL
    directory = tmp_path / "ckpt" / "run-0"
    temps = list(directory.glob(f".step-{k:010d}.nks*nkserde-tmp"))
    assert len(temps) == 1, sorted(p.name for p in directory.iterdir())
    assert temps[0].stat().st_size > 0
    saved = saved_steps(tmp_path)
    assert saved[-1] == k - 1, saved

    second = runner.run_to_end("vmc", tmp_path, *options)
    check_resumed_run(second, saved)
    assert_same_end(tmp_path, ref)
    assert not temps[0].exists(), "the dead process's temporary file was not removed"
    assert not locks(tmp_path)
    assert saved_steps(tmp_path)[-1] == STEPS


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_history_append(runner, reference, tmp_path):
    """The background write of checkpoint k appends its logger rows to the
    history log first: killed when half of them are on disk. The log ends
    in a torn record after checkpoint k - 1's position; every checkpoint
    verifies; the rerun resumes from k - 1, continues the histories in a
    new log from that position and ends as the uninterrupted run (the
    JsonLog's .log value for value)."""
    import nkserde
    from nkserde.checkpoint_files import directory

    ref = reference("vmc")
    k = 4
    options = ["--mode", "checkpointed", "--every", "1"]
    first = runner.start("vmc", tmp_path, *options, env={"CKPT_SLOW_APPEND": f"{k}:{TIMEOUT}"})
    first.wait_for(f"appending step {k}")
    first.send(signal.SIGKILL)
    assert first.finish() == -signal.SIGKILL
    run = tmp_path / "ckpt" / "run-0"
    saved = saved_steps(tmp_path)
    assert saved[-1] == k - 1, saved
    position = nkserde.load_state_dict(directory.step_path(run, k - 1))["history"]
    assert (run / position["file"]).stat().st_size > position["end"]  # the torn record
    assert all(directory.problem(directory.step_path(run, s)) is None for s in saved)

    second = runner.run_to_end("vmc", tmp_path, *options)
    check_resumed_run(second, saved)
    assert_same_end(tmp_path, ref)
    assert [p.name for p in directory.history_files(run)] == ["history-000001.nkh", "history-000002.nkh"]


@pytest.mark.slow
@pytest.mark.parametrize("driver", DRIVERS)
def test_sigterm_checkpoints_and_stops_cleanly(driver, runner, reference, tmp_path):
    """SIGTERM (what SLURM sends before it kills a job), sent while the
    script waits in the end of step k: the run stops cleanly at the next step
    boundary with a checkpoint of every step it completed (step k, or k + 1
    if it lets the step under way finish; off the every=2 schedule or not),
    the other callbacks finish (on_run_end), and the program ends with exit
    status 75: the code after run() does not run on the unfinished state.
    The rerun starts from exactly the parameters the stopped run ended
    with."""
    ref = reference(driver)
    k = random.Random(f"sigterm {driver}").randint(2, STEPS - 2)  # 4, 6, 6
    release = tmp_path / "release"
    first = runner.start(driver, tmp_path, *OPTIONS[driver], env={"CKPT_STEP_HOLD": f"{k}:{release}"})
    first.wait_for(f"step {k}")  # printed in on_step_end, which then waits for the release file
    first.send(signal.SIGTERM)
    release.touch()  # the signal is pending in the child before it can see the file
    assert first.finish() == 75, first.output  # nkserde.checkpoint.EXIT_INTERRUPTED
    assert first.find(".*: interrupted by SIGTERM after step .*"), first.output
    assert not first.find("finished step_count"), first.output
    stopped = first.find(r"run_end step_count=\d+ params (\w+)").group(1)
    saved = saved_steps(tmp_path)
    assert saved and saved[-1] in (k, k + 1), (k, saved, first.output)
    assert step_lines(first)[-1] in (k, k + 1)
    assert not locks(tmp_path)

    second = runner.run_to_end(driver, tmp_path, *OPTIONS[driver])
    check_resumed_run(second, saved)
    assert resumed(second)[1] == stopped, "the checkpoint does not hold the stopped run's parameters"
    assert_same_end(tmp_path, ref)


@pytest.mark.slow
def test_sigint_while_a_step_ends(runner, reference, tmp_path):
    """Ctrl-C (SIGINT) while a callback is in on_step_end of step k: the
    step's update is applied, NetKet has not counted it yet, so the driver
    is neither step k-1 nor step k. The Checkpoint lets the step finish,
    checkpoints it (step k), then raises the KeyboardInterrupt; the rerun
    resumes from k and ends as the uninterrupted run. every=4 and k=3: no
    checkpoint is due at k - 1 or k, so only this mechanism can save k."""
    ref = reference("vmc")
    k = 3
    options = ["--mode", "checkpointed", "--every", "4", "--sync"]
    release = tmp_path / "release"
    first = runner.start("vmc", tmp_path, *options, env={"CKPT_STEP_HOLD": f"{k}:{release}"})
    first.wait_for(f"step {k}")  # printed in on_step_end, which then waits for the release file
    first.send(signal.SIGINT)
    # kill() returns with the signal pending in the child: its handler runs
    # before the waiting loop can see the release file
    release.touch()
    assert first.finish() != 0
    assert "KeyboardInterrupt" in first.output, first.output
    saved = saved_steps(tmp_path)
    assert saved == [k], saved
    assert not locks(tmp_path)

    second = runner.run_to_end("vmc", tmp_path, *options)
    check_resumed_run(second, saved)
    assert_same_end(tmp_path, ref)


def test_a_kill_on_a_busy_node_loses_at_most_the_checkpoint_in_flight(runner, reference, tmp_path):
    """Other processes keep every core busy, so the background writer's
    lowest-priority thread starves. Killed at the end of step 7 (every=3:
    the checkpoint of step 6 was taken at its start and may still be in
    flight), the run has lost at most that one: the checkpoint of step 3
    is on disk (the snapshot of step 6 waited for its write), every one on
    disk verifies, and the rerun ends as the uninterrupted run."""
    from nkserde.checkpoint_files import directory

    ref = reference("vmc")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * os.cpu_count())]
    release = tmp_path / "release"
    options = ["--mode", "checkpointed", "--every", "3"]
    try:
        process = runner.start(
            "vmc",
            tmp_path,
            *options,
            env={"CKPT_STEP_HOLD": f"7:{release}"},
            # the hogs take all but a share of the cores the run started on:
            # beside other work (CI's) its start-up alone may take minutes
            timeout=3 * TIMEOUT,
        )
        process.wait_for(r"step 7")
        process.send(signal.SIGKILL)
        process.finish()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    saved = saved_steps(tmp_path)
    assert 3 in saved and saved[-1] in (3, 6), (saved, process.output)
    run = tmp_path / "ckpt" / "run-0"
    assert all(directory.problem(directory.step_path(run, s)) is None for s in saved)
    second = runner.run_to_end("vmc", tmp_path, *options)
    check_resumed_run(second, saved)
    assert_same_end(tmp_path, ref)
