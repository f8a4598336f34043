"""The two-node suite's scenario, run as one process beside the test suite
(started when tests/test_two_nodes.py is collected, like the SLURM jobs of
tests/test_slurm.py):

    python tests/two_node_scenario.py ROOT

It runs the cases on the two-node cluster (tests/two_nodes.py) in four
phases, since a node that dies takes every case on it: both nodes up
(a two-node job stopped by its walltime; a checkpoint directory on the
nodes' local /tmp; a live owner on the other node; two nodes sharing one
compilation cache), then node1 dies (a ``--requeue`` job mid-run and one
inside a save; an owner outside SLURM, its pid alive on node2), then
node2 dies (a ``--no-requeue`` job, submitted again), then, with SLURM's
default ``SlurmdTimeout`` (300 s) and no nkserde setting, a node of
two-node jobs drops out and is back before SLURM sees it: node2's power
out for 30 s (one job mid-run, one inside a save), node2 cut off the
network for 30 s, node1 (the batch host, process 0, JAX's coordination
service) cut off for 120 s. What each case saw goes to
``ROOT/<case>.json`` (job ids, SLURM's attempts, outputs by node, times)
and ``ROOT/scenario.log``; the tests read them. The references (the same runs without SLURM) are the
session's, shared with tests/test_slurm.py (cluster.shared_reference).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import cluster  # noqa: E402
import two_nodes as tn  # noqa: E402

RUN = HERE / "scripts" / "cluster_run.py"
JOB_SH = HERE.parent / "examples" / "slurm" / "job.sh"
# the runs: 50 steps of 1 or 2 processes (tests/test_slurm.py's: one reference for both)
ONE, TWO = {"N_ITER": "50", "STEP_SECONDS": "1"}, {"N_ITER": "50", "STEP_SECONDS": "1"}
# the two-node jobs struck by outages: 25 steps (struck after step 12 or
# later, they resume from step 10 and redo the rest while SLURM's part, its
# ping of the node back and the requeued job's start, takes minutes)
STRUCK = {"N_ITER": "25", "STEP_SECONDS": "1"}
STALE_AFTER = "20"  # NKSERDE_LOCK_STALE_AFTER of the runs outside SLURM (renewed every 2 s)
KILL_AT_STEP = 12  # the runs killed mid-run: after step 12 or later (the newest checkpoint: step 10's or later)
PAUSE_AT = "10"  # the runs killed inside a save: of step 10 (the newest good checkpoint is step 5's)
# SLURM's own SlurmdTimeout, most clusters' too, while nodes drop out (the
# cluster's 10 s, which the phases before need, would see node failures)
SLURMD_TIMEOUT = 300
# the outages: case, node, how (its power or its network), seconds
OUTAGES = (("power-30", "node2", "power", 30), ("cut2-30", "node2", "cut", 30), ("cut1-120", "node1", "cut", 120))


class Scenario:
    def __init__(self, root: Path):
        self.root = root
        self.work = tn.SHARED / f"nkserde-two-nodes-{root.name}"
        self.cache = Path("/var/tmp") / f"nkserde-two-nodes-{root.name}" / "cache"  # both nodes' (a shared home)
        self.output = tn.OUTPUT / root.name  # on each node's own disk
        self.log_file = (root / "scenario.log").open("a")

    def log(self, message: str) -> None:
        self.log_file.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        self.log_file.flush()

    def record(self, case: str, **fields) -> None:
        temp = self.root / f".{case}.json"
        temp.write_text(json.dumps(fields, indent=1, default=str))
        temp.replace(self.root / f"{case}.json")
        self.log(f"{case}: recorded")

    def env(self, extra: dict) -> dict:
        return {
            "NKSERDE_COMPILATION_CACHE": str(self.cache),
            "PUBLISH": "1",
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
            **extra,
        }

    def workdir(self, case: str) -> Path:
        workdir = self.work / case
        workdir.mkdir(parents=True, exist_ok=True)
        shutil.copy(RUN, workdir / "run.py")
        return workdir

    def job_script(self, signal_line: bool = True) -> Path:
        """The guide's job script, or without its --signal line (the walltime guard alone stops the run)."""
        if signal_line:
            return JOB_SH
        script = self.work / "job-without-signal.sh"
        lines = [line for line in JOB_SH.read_text().splitlines(keepends=True) if "--signal" not in line]
        script.write_text("".join(lines))
        return script

    def submit(self, case: str, options: list[str], extra: dict, *, workdir: Path | None = None, signal_line=True):
        workdir = workdir or self.workdir(case)
        job = tn.submit(case, self.job_script(signal_line), workdir, self.output, options, self.env(extra))
        self.log(f"{case}: submitted job {job} {' '.join(options)}")
        return job

    def run_outside_slurm(self, case: str, node: str, extra: dict, workdir: Path) -> subprocess.Popen:
        self.log(f"{case}: run.py started on {node}, outside SLURM")
        return tn.node_exec(node, [sys.executable, "run.py"], env=self.env(extra), cwd=workdir,
                            output=self.output / f"{case}.out")  # fmt: skip

    def wait_final(self, job: str, timeout: float = 600) -> str:
        return tn.wait_for(f"job {job} ends", lambda: (s := tn.state(job)) in tn.FINAL and s, timeout, every=2.0)

    def job_record(self, case: str, job: str, **fields) -> None:
        self.record(case, job=job, attempts=tn.attempts(job), show=tn.show(job), output=self.job_output(case, job),
                    **fields)  # fmt: skip

    # ------------------------------------------------------------------ phases

    def run(self) -> None:
        self.log(f"waiting for the two-node cluster (up to {tn.START_TIMEOUT} s)")
        why = tn.wait_for_cluster(tn.START_TIMEOUT)
        if why is None:
            why = self._prepare()
        if why is not None:
            self.log(f"unavailable: {why}")
            (self.root / "unavailable").write_text(why)
            return
        references = threading.Thread(target=self._references, name="references")
        references.start()
        for phase in (self.both_nodes_up, self.node1_dies, self.node2_dies, self.nodes_drop_out):
            try:
                phase()
            except Exception:
                self.log(f"{phase.__name__} failed:\n{traceback.format_exc()}")
            finally:
                for node in tn.NODES:
                    tn.heal(node)
                    if (
                        tn.node_state(node).rstrip("*") in ("down", "idle", "mix", "alloc", "comp")
                        and not (tn.STATE / node / "init.pid").exists()
                    ):
                        tn.power_on(node)
        references.join()
        self.log("done")

    def _prepare(self) -> str | None:
        for node in tn.NODES:
            tn.local(node, self.output).mkdir(parents=True, exist_ok=True)
            seen = subprocess.run([str(tn.TOOLS / "node-exec.sh"), node, "test", "-x", sys.executable], timeout=60)
            if seen.returncode != 0:
                return f"{node} does not see {sys.executable}: start the cluster with TWO_NODES_BIND naming it"
        self.work.mkdir(parents=True, exist_ok=True)
        self.cache.mkdir(parents=True, exist_ok=True)
        return None

    def _references(self) -> None:
        for processes, lengths in ((1, ONE), (2, TWO), (2, STRUCK)):
            cluster.shared_reference(processes, int(lengths["N_ITER"]))
        self.log("references written")

    def both_nodes_up(self) -> None:
        # 2 minutes: a first attempt started at low priority beside the
        # suite still completes steps before its guard stops it; 50 steps of
        # 2 s (100 s) and the attempt's start never fit in one
        walltime = self.submit("walltime", ["-N2", "--ntasks-per-node=1", "--time=2"],
                               {**TWO, "STEP_SECONDS": "2"}, signal_line=False)  # fmt: skip
        local = f"/tmp/nkserde-two-nodes/ckpt-{self.root.name}"
        node_local = self.submit("node-local", ["-N2", "--ntasks-per-node=1"], {**TWO, "CHECKPOINT_DIRECTORY": local})
        self.live_owner()
        self.shared_cache()
        self.wait_final(node_local)
        files = {node: sorted(str(p.relative_to(tn.local(node, Path(local))))
                              for p in tn.local(node, Path(local)).rglob("*")) if tn.local(node, Path(local)).exists()
                 else None for node in tn.NODES}  # fmt: skip
        self.job_record("node-local", node_local, files=files)
        self.wait_final(walltime, timeout=900)
        self.job_record("walltime", walltime)

    def live_owner(self) -> None:
        """A run outside SLURM on node2 holds the lock; the same script on
        node1 watches it, sees it renewed and is refused."""
        workdir = self.workdir("lease-live")
        extra = {**ONE, "NKSERDE_LOCK_STALE_AFTER": STALE_AFTER}
        owner = self.run_outside_slurm("lease-live", "node2", extra, workdir)
        three = lambda: any(k >= 3 for k, _ in tn.steps(self._out("node2", "lease-live")))  # noqa: E731
        tn.wait_for("lease-live: step 3", three, 300)
        started = time.time()
        second = self.run_outside_slurm("lease-live-second", "node1", extra, workdir)
        second_status = second.wait(timeout=300)
        refused_after = time.time() - started
        owner_status = owner.wait(timeout=300)
        self.record(
            "lease-live",
            owner_status=owner_status,
            second_status=second_status,
            refused_after=refused_after,
            owner=self._out("node2", "lease-live"),
            second=self._out("node1", "lease-live-second"),
        )

    def shared_cache(self) -> None:
        """Both nodes compile into, read and prune one cache directory at
        once (a shared home's), for as long as a few of the runs' starts."""
        script = HERE / "scripts" / "cache_on_two_nodes.py"
        runs = {node: tn.node_exec(node, [sys.executable, str(script), str(self.cache / "churn"), node],
                                   env=self.env({}), cwd=self.work, output=self.output / "shared-cache.out")
                for node in tn.NODES}  # fmt: skip
        statuses = {node: run.wait(timeout=600) for node, run in runs.items()}
        self.record("shared-cache", statuses=statuses, output={n: self._out(n, "shared-cache") for n in tn.NODES})

    def node1_dies(self) -> None:
        """node1 dies with a --requeue job mid-run, one inside a save, and
        a run outside SLURM; SLURM requeues the jobs onto node2, the run is
        started again on node2, where a process has the dead owner's pid."""
        with self.only("node1"):  # submitted so, not bound to node1 (-w): requeued anywhere
            mid = self.submit("mid-run", ["-N1", "-n1"], ONE)
            in_save = self.submit("in-save", ["-N1", "-n1"], {**ONE, "PAUSE_IN_SAVE": PAUSE_AT})
            for job in (mid, in_save):
                tn.wait_for(f"{job} runs on node1", lambda j=job: self._runs_on(j, "node1"), 300)
        lease_dir = self.workdir("lease-dead")
        extra = {**ONE, "NKSERDE_LOCK_STALE_AFTER": STALE_AFTER}
        self.run_outside_slurm("lease-dead", "node1", extra, lease_dir)
        tn.wait_for("mid-run: step 12", lambda: self._reached("mid-run", mid, "node1"), 300)
        saving = lambda: "in-save" in self.job_output("in-save", in_save).get("node1", "")  # noqa: E731
        tn.wait_for("in-save: in the save", saving, 300)
        tn.wait_for("lease-dead: step 12", lambda: self._reached("lease-dead", None, "node1"), 300)
        lock = (lease_dir / "ckpt" / "run-0" / ".lock").read_text().split()
        killed = tn.kill("node1")
        self.log(f"node1 killed; lease-dead's lock: {lock}")
        holder = self._process_with_pid("node2", int(lock[1]))
        again = self.run_outside_slurm("lease-dead-again", "node2", extra, lease_dir)
        down = tn.wait_down("node1", killed)
        running = {job: tn.wait_for(f"{job} runs on node2", lambda j=job: self._runs_on(j, "node2"), 300)
                   for job in (mid, in_save)}  # fmt: skip
        tn.power_on("node1")
        self.log("node1 powered on")
        again_status = again.wait(timeout=300)
        holder_alive = self._alive("node2", holder)
        self.record(
            "lease-dead",
            killed=killed,
            lock=lock,
            holder=holder,
            holder_alive=holder_alive,
            status=again_status,
            first=self._out("node1", "lease-dead"),
            again=self._out("node2", "lease-dead-again"),
            temps=self._temps(lease_dir),
        )
        for case, job in (("mid-run", mid), ("in-save", in_save)):
            self.wait_final(job)
            self.job_record(case, job, killed=killed, down=down, running=running[job],
                            temps=self._temps(self.work / case))  # fmt: skip

    def node2_dies(self) -> None:
        """node2 dies with a --no-requeue job, which is submitted again and
        lands on node1."""
        idle = lambda: tn.node_state("node1") in ("idle", "mix")  # noqa: E731
        tn.wait_for("node1 idle", idle, 120, seen=lambda: tn.node_seen("node1"))
        once = self.submit("no-requeue", ["-w", "node2", "-N1", "-n1", "--no-requeue"], ONE)  # fmt: skip
        tn.wait_for("no-requeue: step 12", lambda: self._reached("no-requeue", once, "node2"), 300)
        killed = tn.kill("node2")
        self.log("node2 killed")
        again = self.submit("no-requeue", ["-N1", "-n1", f"--dependency=afterany:{once}"], ONE,
                            workdir=self.work / "no-requeue")  # fmt: skip
        down = tn.wait_down("node2", killed)
        tn.power_on("node2")
        self.log("node2 powered on")
        self.wait_final(again)
        self.job_record("no-requeue", again, first=once, first_attempts=tn.attempts(once),
                        first_output=self.job_output("no-requeue", once), killed=killed, down=down)  # fmt: skip

    def nodes_drop_out(self) -> None:
        """With SLURM's default SlurmdTimeout and no nkserde setting, a node
        of two-node jobs drops out after step 12 and is back before SLURM
        marks it down (OUTAGES): SLURM sees no node failure, and srun would
        end the job FAILED when the node answered again, or wait for ever
        for a task's exit lost in a partition. The processes' watches hear
        the loss and requeue the job. node2's power cut also strikes a job
        inside a save of process 1 (its temporary file never fsynced)."""
        with self.slurmd_timeout(SLURMD_TIMEOUT):
            for case, node, how, seconds in OUTAGES:
                both = lambda: all(tn.node_state(n) in ("idle", "mix") for n in tn.NODES)  # noqa: E731
                tn.wait_for("both nodes idle", both, 300, seen=lambda: tn.node_seen("node2"))
                jobs = {case: self.submit(case, ["-N2", "--ntasks-per-node=1"], STRUCK)}
                if case == "power-30":
                    save = {**STRUCK, "PAUSE_IN_SAVE": PAUSE_AT, "PAUSE_RANK": "1"}
                    jobs["two-node-save"] = self.submit("two-node-save", ["-N2", "--ntasks-per-node=1"], save)
                    tn.wait_for("two-node-save: in the save", lambda: self._in_save("two-node-save", jobs), 300)
                tn.wait_for(f"{case}: step 12", lambda: self._reached(case, jobs[case], "node1"), 300)
                struck = tn.kill(node) if how == "power" else tn.cut(node)
                self.log(f"{node}: {how} out for {seconds} s")
                time.sleep(max(0.0, struck + seconds - time.time()))
                if how == "power":
                    tn.power_on(node)
                else:
                    tn.heal(node)
                back = time.time()
                self.log(f"{node}: {how} back")
                for name, job in jobs.items():
                    self.wait_final(job)
                    self.job_record(name, job, struck=struck, back=back, node=node, how=how,
                                    down=tn.down_since(node, struck), temps=self._temps(self.work / name))  # fmt: skip

    @contextlib.contextmanager
    def slurmd_timeout(self, seconds: int):
        """While in it, SLURM's SlurmdTimeout is ``seconds`` (slurm.conf
        changed, ``scontrol reconfigure``); put back after."""
        text = tn.CONF.read_text()
        changed = re.sub(r"^SlurmdTimeout=\d+$", f"SlurmdTimeout={seconds}", text, flags=re.M)
        if changed == text:
            raise RuntimeError(f"{tn.CONF} sets no SlurmdTimeout")
        try:
            tn.CONF.write_text(changed)
            tn.slurm("scontrol", "reconfigure")
            self.log(f"SlurmdTimeout={seconds}")
            yield
        finally:
            tn.CONF.write_text(text)
            tn.slurm("scontrol", "reconfigure")
            self.log("SlurmdTimeout as it was")

    # ----------------------------------------------------------------- helpers

    @contextlib.contextmanager
    def only(self, node: str):
        """While in it, jobs can start on ``node`` only: a job holding every
        CPU of the other node (what another user's job would do)."""
        other = next(n for n in tn.NODES if n != node)
        hold = ["-w", other, "--exclusive", "--wrap", "sleep 900"]
        blocker = tn.submit("blocker", None, self.work, self.output, hold, self.env({}))
        try:
            tn.wait_for(f"the blocker on {other} runs", lambda: tn.state(blocker) == "RUNNING", 120)
            yield
        finally:
            tn.slurm("scancel", blocker)

    def job_output(self, case: str, job: str) -> dict[str, str]:
        """What a job wrote, by node."""
        found = {node: self._out(node, f"{case}-{job}") for node in tn.NODES}
        return {node: text for node, text in found.items() if text}

    def _out(self, node: str, name: str) -> str:
        path = tn.local(node, self.output / f"{name}.out")
        return path.read_text(errors="replace") if path.exists() else ""

    def _in_save(self, case: str, jobs: dict) -> bool:
        return "in-save" in self.job_output(case, jobs[case]).get("node1", "")

    def _reached(self, case: str, job: str | None, node: str) -> bool:
        text = self.job_output(case, job).get(node, "") if job else self._out(node, case)
        return any(k >= KILL_AT_STEP for k, _ in tn.steps(text))

    def _runs_on(self, job: str, node: str):
        return tn.state(job) == "RUNNING" and tn.show(job).get("NodeList") == node and time.time()

    def _process_with_pid(self, node: str, pid: int) -> int:
        """A process on ``node`` whose pid is ``pid`` (pids collide across
        nodes): the next pid of its namespace set to it, then one forked."""
        code = (
            "import os, sys, time\n"
            "pid = int(sys.argv[1])\n"
            "try:\n"
            "    open('/proc/sys/kernel/ns_last_pid', 'w').write(str(pid - 1))\n"
            "except OSError:\n"
            "    pass\n"
            "child = os.fork()\n"
            "if child == 0:\n"
            "    os.setsid()\n"
            "    null = os.open(os.devnull, os.O_RDWR)\n"
            "    for fd in (0, 1, 2):\n"
            "        os.dup2(null, fd)\n"
            "    time.sleep(600)\n"
            "    os._exit(0)\n"
            "print(child)\n"
        )
        done = subprocess.run([str(tn.TOOLS / "node-exec.sh"), node, sys.executable, "-c", code, str(pid)],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        holder = int(done.stdout.strip())
        self.log(f"{node}: process {holder} holds the dead owner's pid {pid}")
        return holder

    def _alive(self, node: str, pid: int) -> bool:
        alive = subprocess.run([str(tn.TOOLS / "node-exec.sh"), node, "kill", "-0", str(pid)], timeout=60)
        return alive.returncode == 0

    def _temps(self, workdir: Path) -> list[str]:
        return sorted(p.name for p in (workdir / "ckpt").rglob("*.nkserde-tmp"))


def main() -> None:
    root = Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    scenario = Scenario(root)
    try:
        scenario.run()
    except Exception:
        scenario.log(f"failed:\n{traceback.format_exc()}")
    finally:
        (root / "done").touch()


if __name__ == "__main__":
    main()
