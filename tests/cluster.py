"""The real SLURM and Open MPI of this machine, for the tests marked
``slurm`` and ``mpi`` (started by ``.ci/start-slurm``, as a developer starts
them by hand).

Jobs are submitted when the suite is collected (tests/conftest.py) and run
beside the rest of it; the tests that read them come last. An
*administrator* thread skips a requeued job's wait in state BeginTime
(``scontrol update JobId=<id> StartTime=now``, what an administrator
would do: SLURM holds a requeued job for two minutes before it may start
again), suspends the jobs that ask for it mid-run (``scontrol suspend``,
then ``resume``: what gang scheduling and PreemptMode=SUSPEND do) and
notes every state the jobs pass through.

Where SLURM or mpirun is missing, the tests skip and say why; with
``NKSERDE_REQUIRE_CLUSTER=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from builders import json_differences
from multiprocess import free_local_port

RUN = Path(__file__).parent / "scripts" / "cluster_run.py"  # the jobs' run.py
# seconds a requeued job waits in BeginTime before the tests release it
# (SLURM's own hold is two minutes)
RELEASE_AFTER = 3.0
SLURMCTLD_LOG = Path("/var/log/slurm/slurmctld.log")  # .ci/start-slurm's SlurmctldLogFile
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
REQUIRED = os.environ.get("NKSERDE_REQUIRE_CLUSTER") == "1"


def unavailable(reason: str):
    """Skips the test, or fails it where the cluster is required (CI)."""
    if REQUIRED:
        pytest.fail(f"NKSERDE_REQUIRE_CLUSTER=1 and {reason}")
    pytest.skip(reason)


def slurm_problem() -> str | None:
    """Why the tests cannot use SLURM here, or None. Where the cluster is
    required, waits for it up to ``CLUSTER_START_TIMEOUT`` seconds: CI
    starts it while the suite installs."""
    deadline = time.monotonic() + (CLUSTER_START_TIMEOUT if REQUIRED else 0)
    while True:
        problem = _slurm_problem()
        if problem is None or time.monotonic() >= deadline:
            return problem
        time.sleep(2.0)


CLUSTER_START_TIMEOUT = 600


def _slurm_problem() -> str | None:
    for command in ("sbatch", "squeue", "scontrol", "sinfo"):
        if shutil.which(command) is None:
            return f"no `{command}` (run .ci/start-slurm as root)"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer (is slurmctld running? .ci/start-slurm)"
    states = out.stdout.split()
    up = ("idle", "mixed", "allocated", "completing")
    if out.returncode != 0 or not any(s.rstrip("*~#$@+") in up for s in states):
        return f"no SLURM node up (sinfo: {(out.stdout + out.stderr).strip()[:200]!r}; run .ci/start-slurm)"
    return None


def mpirun_problem() -> str | None:
    if shutil.which("mpirun") is None:
        return "no `mpirun` (Debian's openmpi-bin; .ci/start-slurm installs it)"
    return None


def job_environment(extra: dict | None = None) -> dict:
    """The environment a job runs with (sbatch passes the submitter's on):
    this interpreter's ``python`` first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def scontrol_show(job_id: str) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=30
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


@dataclass
class Job:
    """One submitted job: where it runs and what it printed."""

    name: str
    workdir: Path
    job_id: str | None = None
    error: str | None = None
    states: list[str] = field(default_factory=list)  # the states it passed through, in order
    released: int = 0  # BeginTime waits the administrator skipped
    held_since: float | None = None  # when its current BeginTime wait was first seen (monotonic)
    final: dict | None = None  # scontrol's record once the job ended (slurmctld forgets it after MinJobAge)

    @property
    def output(self) -> str:
        path = self.workdir / "slurm.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def info(self) -> dict[str, str]:
        return self.final if self.final is not None else scontrol_show(self.job_id)

    def diagnosis(self) -> str:
        """What SLURM says of the job, for a failing test: its record's
        state, reason, exit code and restarts, slurmctld's log lines of it,
        then the end of its output."""
        info = self.info()
        record = " ".join(f"{k}={info.get(k, '?')}" for k in ("JobState", "Reason", "ExitCode", "Restarts"))
        try:
            logged = [line for line in SLURMCTLD_LOG.read_text(errors="replace").splitlines()
                      if re.search(rf"JobId={self.job_id}\b", line)]  # fmt: skip
        except OSError as exc:
            logged = [f"({SLURMCTLD_LOG}: {exc})"]
        return (
            f"{self.name} (job {self.job_id}): states {self.states}; {record}\n"
            + "\n".join(logged[-20:])
            + (f"\n--- output (end):\n{self.output[-3000:]}")
        )


class Jobs:
    """The jobs of one test module, submitted early, awaited by its tests.

    ``plan``: name -> (job script, sbatch options, environment), each job
    in a directory of its own below ``root``; ``prepare(name, workdir,
    script)`` runs before each submission (copies the run script, ...) and
    returns the script to submit. ``suspend``: name -> (step, seconds): the
    job is suspended once its output shows that step completed, and
    resumed that many seconds later (the times in ``workdir/suspended``).

    Under pytest-xdist every worker collects the module and calls
    :meth:`submit` with the same ``root``: the first to create
    ``root/submitted`` submits and writes ``root/jobs.json``; the others
    read it. Whoever waits for a job polls SLURM itself (and skips its
    BeginTime holds), so nothing depends on which worker submitted: the
    submitter's thread only keeps the holds short while the others run
    other tests."""

    def __init__(self, plan: dict, prepare, suspend: dict | None = None):
        self.plan = plan
        self.prepare = prepare
        self.suspend = suspend or {}
        self.jobs: dict[str, Job] = {}
        self.problem: str | None = None
        self.root: Path | None = None
        self._admin: threading.Thread | None = None
        self._stop = threading.Event()

    def submit(self, root: Path) -> None:
        if self.jobs or self.problem or self.root is not None:
            return
        self.root = root
        self.problem = slurm_problem()
        if self.problem:
            return
        root.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(root / "submitted", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return  # another worker submits; wait() reads root/jobs.json
        records = {}
        for name, (script, options, env) in self.plan.items():
            workdir = root / name
            workdir.mkdir(parents=True)
            script = self.prepare(name, workdir, script)
            job = Job(name, workdir)
            done = subprocess.run(
                ["sbatch", "--parsable", f"--job-name=nkserde-{name}", f"--chdir={workdir}",
                 f"--output={workdir / 'slurm.out'}", *options, str(script)],
                capture_output=True, text=True, env=job_environment(env), timeout=60,
            )  # fmt: skip
            if done.returncode != 0:
                job.error = f"sbatch failed: {(done.stdout + done.stderr).strip()}"
            else:
                job.job_id = done.stdout.strip().split(";")[0]
            self.jobs[name] = job
            records[name] = {"job_id": job.job_id, "error": job.error}
        tmp = root / "jobs.json.tmp"
        tmp.write_text(json.dumps(records))
        tmp.replace(root / "jobs.json")
        self._admin = threading.Thread(target=self._administer, name="slurm-admin", daemon=True)
        self._admin.start()

    def _known(self, timeout: float = 300) -> None:
        """This process's view of the jobs another worker submitted."""
        if self.jobs or self.root is None:
            return
        deadline = time.monotonic() + timeout
        while not (self.root / "jobs.json").exists():
            if time.monotonic() > deadline:
                pytest.fail(f"{self.root}: no jobs.json {timeout:.0f} s after collection (the submitting worker?)")
            time.sleep(1.0)
        for name, record in json.loads((self.root / "jobs.json").read_text()).items():
            self.jobs[name] = Job(name, self.root / name, job_id=record["job_id"], error=record["error"])

    def _administer(self):
        """Skips BeginTime waits and notes states until every job is final."""
        while not self._stop.is_set() and self._poll():
            self._stop.wait(1.0)

    def _poll(self, only: list[Job] | None = None) -> bool:
        """One look at the jobs not final yet (``only``: these): notes their
        states, keeps scontrol's record of each that ended, skips BeginTime
        holds. Returns whether any is still not final."""
        jobs = only if only is not None else list(self.jobs.values())
        pending = [j for j in jobs if j.job_id and (not j.states or j.states[-1] not in FINAL_STATES)]
        if not pending:
            return False
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %T %r", "-j", ",".join(j.job_id for j in pending)],
            capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        seen = {}
        for line in out.splitlines():
            job_id, state, reason = (line.split() + ["", "", ""])[:3]
            seen[job_id] = (state, reason)
        for job in pending:
            state, reason = seen.get(job.job_id, (None, None))
            if state is None:  # left the queue: its final state from scontrol
                state = scontrol_show(job.job_id).get("JobState", "UNKNOWN")
            if state in FINAL_STATES and job.final is None:
                job.final = scontrol_show(job.job_id)
            if not job.states or job.states[-1] != state:
                job.states.append(state)
            if state == "PENDING" and reason == "BeginTime":
                # Not at once: slurmd refuses a launch whose credential is
                # from the second its previous instance's was revoked in
                # ("Killing non-startable batch JobId=N: Job credential
                # revoked", the job FAILED): what SLURM's own hold avoids.
                now = time.monotonic()
                job.held_since = job.held_since or now
                if now - job.held_since >= RELEASE_AFTER:
                    subprocess.run(
                        ["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"],
                        capture_output=True, timeout=60,
                    )  # fmt: skip
                    job.released += 1
                    job.held_since = None
            else:
                job.held_since = None
            if state in ("RUNNING", "SUSPENDED") and job.name in self.suspend:
                self._suspend(job, *self.suspend[job.name])
        return True

    def _suspend(self, job: Job, step: int, seconds: float) -> None:
        """Suspends the job once it completed ``step``, resumes it
        ``seconds`` later. The file ``suspended`` in its directory says when
        (wall-clock times), so that whichever worker polls does it once."""
        record = job.workdir / "suspended"
        if not record.exists():
            if not any(int(k) >= step for k, _ in lines(job.output, "step")):
                return
            try:
                os.close(os.open(record, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            subprocess.run(["scontrol", "suspend", job.job_id], capture_output=True, timeout=60)
            record.write_text(f"suspended {time.time():.3f}\n")
            return
        said = record.read_text()
        started = re.search(r"^suspended (\S+)$", said, re.M)
        if started is None or "resumed" in said or time.time() - float(started.group(1)) < seconds:
            return
        subprocess.run(["scontrol", "resume", job.job_id], capture_output=True, timeout=60)
        with record.open("a") as f:
            f.write(f"resumed {time.time():.3f}\n")

    def wait(self, name: str, timeout: float = 900) -> Job:
        """The job once it reached a final state (COMPLETED, FAILED, ...)."""
        if self.problem:
            unavailable(self.problem)
        self._known()
        job = self.jobs[name]
        if job.error:
            pytest.fail(f"{name}: {job.error}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if job.states and job.states[-1] in FINAL_STATES:
                return job
            if self._admin is None or not self._admin.is_alive():
                self._poll([job])  # submitted by another worker, or the thread is done
            time.sleep(1.0)
        subprocess.run(["scancel", job.job_id], capture_output=True)
        pytest.fail(
            f"{name}: job {job.job_id} not finished after {timeout:.0f} s (states {job.states}):\n{job.output[-4000:]}"
        )

    def cancel_all(self):
        """Cancels the jobs this process submitted that did not end."""
        self._stop.set()
        if self._admin is None:
            return
        ids = [j.job_id for j in self.jobs.values() if j.job_id and (not j.states or j.states[-1] not in FINAL_STATES)]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True)


def lines(output: str, word: str) -> list[tuple[str, float]]:
    """(value, time) of the ``<word> <value> <time>`` lines of cluster_run.py."""
    found = []
    for match in re.finditer(rf"^{word} (\S+) (\d+\.\d+)$", output, re.MULTILINE):
        found.append((match.group(1), float(match.group(2))))
    return found


# What the output of tests/scripts/cluster_run.py says of its attempts
RESUMED = re.compile(r"run-0: resumed VMC from step (\d+)")
STOPPED = re.compile(r"run-0: interrupted by (\S+) after step")
FRESH = "run-0: no checkpoint, starting fresh"


def attempts(output: str) -> list[str]:
    """The output of each attempt of the job, in order (each run starts
    with nkserde's fresh-start or resume line)."""
    starts = [m.start() for m in re.finditer(rf"^.*(?:{FRESH}|run-0: resumed VMC from step).*$", output, re.M)]
    assert starts, output[-3000:]
    return [output[a:b] for a, b in zip(starts, [*starts[1:], len(output)])]


def preemptions(output: str) -> list[dict]:
    """Per attempt that ended early: its last completed step, the step the
    next attempt resumed from, when the signal came and when it exited."""
    parts = attempts(output)
    found = []
    for part, following in zip(parts, parts[1:]):
        steps = lines(part, "step")
        exits = lines(part, "exit")
        exited = exits[-1][1] if exits else None
        signals = [t for _, t in lines(part, "signal") if exited is None or t <= exited]
        resumed = int(RESUMED.search(following).group(1))
        stopped = STOPPED.search(part)
        found.append(
            {
                "by": stopped.group(1) if stopped else None,
                "last_step": int(steps[-1][0]) if steps else None,
                "resumed": resumed,
                "lost": (int(steps[-1][0]) - resumed) if steps else 0,
                # seconds from the signal (if one came) and from the end of
                # the last step to the exit: the checkpoint and the requeue
                "signal_to_exit": round(exited - signals[0], 2) if signals and exited else None,
                "step_to_exit": round(exited - steps[-1][1], 2) if steps and exited else None,
                "exit": exits[-1][0] if exits else None,
            }
        )
    return found


def without_launchers(env: dict) -> dict:
    """``env`` without what srun and mpirun set (a reference run outside them)."""
    return {k: v for k, v in env.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}


def run_reference(workdir: Path, processes: int = 1, n_iter: int = 30) -> Path:
    """The run of tests/scripts/cluster_run.py with no launcher and no
    sleeps, in ``processes`` processes over gloo on 127.0.0.1."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = without_launchers(job_environment({"N_ITER": str(n_iter)}))
    port = free_local_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(RUN)],
            cwd=workdir,
            env=env
            if processes == 1
            else {
                **env,
                "CLUSTER_COORDINATOR": f"127.0.0.1:{port}",
                "CLUSTER_PROCESSES": str(processes),
                "CLUSTER_RANK": str(r),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(processes)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outputs)
    return workdir


def shared_reference(processes: int, n_iter: int) -> Path:
    """:func:`run_reference` of ``processes`` processes and ``n_iter``
    steps, made once per test session and shared by every module (and the
    two-node scenario) that compares with the same run: whoever asks first
    makes it, under a lock, and the others wait for it."""
    root = Path(tempfile.gettempdir()) / f"nkserde-references-{os.environ['NKSERDE_TEST_SESSION']}"
    root.mkdir(exist_ok=True)
    path = root / f"{processes}-{n_iter}"
    with open(root / f"{processes}-{n_iter}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / "result.npz").exists():
            shutil.rmtree(path, ignore_errors=True)  # a making that died half way
            run_reference(path, processes, n_iter)
    return path


def assert_same_run(workdir: Path, reference: Path, n_iter: int):
    """The final parameters (result.npz) bit for bit and the JsonLog value
    for value (but its wall-clock times), every step once."""
    with np.load(workdir / "result.npz") as got, np.load(reference / "result.npz") as want:
        assert got.files == want.files
        for key in want.files:
            assert got[key].tobytes() == want[key].tobytes(), key
    got = json.loads((workdir / "out" / "log.log").read_text())
    want = json.loads((reference / "out" / "log.log").read_text())
    problems = json_differences(got, want)
    assert not problems, problems[:10]
    assert got["Energy"]["iters"] == list(range(n_iter))
