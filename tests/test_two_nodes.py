"""Several nodes: runs on the two-node cluster of ../shared/tools/two-nodes
(tests/two_nodes.py), where each node has its own hostname, pid space,
/tmp and boot id, sees the shared file system through its own LazyFS (what
it has not fsynced is lost with it) and dies on command. Each case ends
bit for bit as the same run without SLURM, every step logged once:

- the guide's job on two nodes, one task each (JAX distributed across
  them), stopped by its walltime, requeued and resumed;
- a ``--requeue`` job whose node dies mid-run, and one whose node dies
  inside a save: SLURM requeues them onto the other node, which resumes
  from the newest checkpoint it can see; what the dead node left is removed;
- a ``--no-requeue`` job whose node dies, submitted again (a new job,
  after it): it lands on the other node and takes over the lock, SLURM
  saying the old job ended NODE_FAIL;
- with SLURM's default SlurmdTimeout (300 s) and no nkserde setting,
  two-node jobs whose node drops out and is back before SLURM sees it:
  node2's power out for 30 s (mid-run, and inside a save), node2 cut off
  the network for 30 s, node1 (the batch host, process 0, JAX's
  coordination service) cut off for 120 s. A process's watch hears the
  other lost and requeues the job, before srun ends it FAILED or waits
  for ever; it runs again once both nodes are back;
- a run outside SLURM whose node dies while a process of the other node
  has its pid: judged dead by its lease; a live one on the other node is
  never judged dead;
- a checkpoint directory on the nodes' local /tmp: the documented error
  at the start, no file;
- two nodes compiling into, reading and pruning one cache directory at once.

The cases run as one scenario (tests/two_node_scenario.py), started when
the suite is collected, beside it; these tests come last and read what it
recorded. Figures (seconds from a node's death to the run going on, steps
redone) are printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cluster
import two_nodes as tn
import two_node_scenario as scenario
from nkserde.processes.peer_watch import LOST_AFTER

SCENARIO = Path(__file__).parent / "two_node_scenario.py"
WAIT = 2400  # seconds from collection to the scenario's end, at most
BESIDE = 10  # the scenario's niceness, as .ci/run's work beside the suite


class Scenario:
    """The scenario process, started once per session by the first worker
    that collects this module (conftest: ``JOBS.submit(root)``)."""

    def __init__(self):
        self.root: Path | None = None
        self.problem: str | None = None

    def submit(self, root: Path) -> None:
        if self.root is not None:
            return
        self.root = root
        if not cluster.REQUIRED:
            self.problem = tn.problem()  # by hand: now, or skipped
            if self.problem:
                return
        root.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(root / "submitted", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        with (root / "scenario.out").open("a") as out:
            # beside the suite, at the priority of what else runs beside it
            # (.ci/run's BESIDE): the processes it starts on the nodes inherit it
            lower = lambda: os.nice(BESIDE)  # noqa: E731
            subprocess.Popen([sys.executable, str(SCENARIO), str(root)], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=lower)  # fmt: skip

    def cancel_all(self) -> None:
        pass  # the scenario ends by itself: its jobs have ends, its nodes are powered on again

    def result(self, case: str) -> dict:
        if self.problem:
            cluster.unavailable(self.problem)
        deadline = time.monotonic() + WAIT
        path = self.root / f"{case}.json"
        while not path.exists():
            if (self.root / "unavailable").exists():
                cluster.unavailable((self.root / "unavailable").read_text())
            if (self.root / "done").exists() or time.monotonic() > deadline:
                pytest.fail(f"the scenario recorded no {case}:\n{self.log()}", pytrace=False)
            time.sleep(2.0)
        return json.loads(path.read_text())

    def log(self) -> str:
        text = ""
        for name in ("scenario.log", "scenario.out"):
            if (self.root / name).exists():
                text += (self.root / name).read_text()[-6000:]
        return text

    def workdir(self, case: str) -> Path:
        return tn.SHARED / f"nkserde-two-nodes-{self.root.name}" / case


JOBS = Scenario()
# steps of the scenario's one- and two-process runs
ONE, TWO, STRUCK = (int(scenario.ONE["N_ITER"]), int(scenario.TWO["N_ITER"]), int(scenario.STRUCK["N_ITER"]))


def final_state(record: dict) -> str:
    return record["attempts"][-1]["state"] if record["attempts"] else "?"


def diagnosis(record: dict) -> str:
    output = "\n".join(f"--- {node}:\n{text[-3000:]}" for node, text in record.get("output", {}).items())
    return f"attempts {record.get('attempts')}\n{output}\n--- scenario:\n{JOBS.log()}"


def same_run(case: str, processes: int, steps: int) -> None:
    cluster.assert_same_run(JOBS.workdir(case), cluster.shared_reference(processes, steps), steps)


def resumed_from(text: str) -> list[int]:
    return [int(k) for k in cluster.RESUMED.findall(text)]


def last_step(text: str) -> int:
    return max(k for k, _ in tn.steps(text))


def seconds(when: str) -> float:
    """A time in SLURM's accounting (this machine's local time), as time.time()."""
    return time.mktime(time.strptime(when, "%Y-%m-%dT%H:%M:%S"))


def figures(case: str, **values) -> None:
    print(f"\n{case}: " + ", ".join(f"{k} {v}" for k, v in values.items()))


@pytest.mark.slurm
def test_the_guides_job_on_two_nodes_stopped_by_its_walltime_resumes():
    record = JOBS.result("walltime")
    if final_state(record) != "COMPLETED":
        pytest.fail(diagnosis(record), pytrace=False)
    output = record["output"]["node1"]  # the batch script's node: both tasks' output
    stops = cluster.preemptions(output)
    assert stops and int(record["show"]["Restarts"]) == len(stops), diagnosis(record)
    assert all(s["by"] == "walltime" and s["lost"] == 0 and s["exit"] == "75" for s in stops), stops
    assert all(a["nodes"] == "node[1-2]" for a in record["attempts"]), record["attempts"]
    assert "finished" in cluster.attempts(output)[-1]
    same_run("walltime", 2, TWO)
    figures("walltime", requeues=len(stops), stops=stops)


def newest_before(killed_after: int):
    """The checkpoints the runs take every 5 steps, the one of step k
    written while step k + 1 runs: after step s, the newest on disk is that
    of the last multiple of 5 before s, or of the one before it."""
    return lambda resumed: resumed % 5 == 0 and killed_after - 6 <= resumed <= killed_after


@pytest.mark.slurm
@pytest.mark.parametrize("case", ["mid-run", "in-save"])
def test_a_requeue_job_whose_node_dies_resumes_on_the_other_node(case):
    """Killed mid-run after step 12 or later, or inside the save of step 10
    (its temporary file never fsynced: the newest good checkpoint is step
    5's); SLURM requeues the job onto node2, which resumes from the newest
    checkpoint on disk."""
    record = JOBS.result(case)
    if final_state(record) != "COMPLETED":
        pytest.fail(diagnosis(record), pytrace=False)
    first, last = record["attempts"][0], record["attempts"][-1]
    assert first["state"] == "NODE_FAIL" and first["nodes"] == "node1", record["attempts"]
    assert last["nodes"] == "node2" and int(record["show"]["Restarts"]) == 1, record["attempts"]
    before, after = record["output"]["node1"], record["output"]["node2"]
    [resumed] = resumed_from(after)
    if case == "in-save":
        assert "in-save 10" in before and resumed == 5, after[-3000:]
    else:
        assert last_step(before) >= 12 and newest_before(last_step(before))(resumed), (resumed, before[-2000:])
    assert record["temps"] == [], record["temps"]  # the dead node's temporary file removed
    same_run(case, 1, ONE)
    killed = record["killed"]
    figures(case, seconds_to_the_run_going_on=round(record["running"] - killed, 1),
            steps_redone=last_step(before) - resumed, node_down_after=round(record["down"] - killed, 1))  # fmt: skip


@pytest.mark.slurm
def test_a_job_without_requeue_submitted_again_takes_over_the_dead_nodes_lock():
    record = JOBS.result("no-requeue")
    first = record["first_attempts"]
    assert [a["state"] for a in first] == ["NODE_FAIL"] and first[0]["nodes"] == "node2", first
    if final_state(record) != "COMPLETED":
        pytest.fail(diagnosis(record), pytrace=False)
    assert record["attempts"][-1]["nodes"] == "node1"
    output = record["output"]["node1"]
    took = re.search(r"took over the lock: process \d+ on host node2 \(SLURM job (\d+)\): (.*)", output)
    assert took, output[-3000:]
    assert took.group(1) == record["first"]
    assert took.group(2) == f"the SLURM job {record['first']} that held it ended NODE_FAIL"
    killed_after = last_step(record["first_output"]["node2"])
    [resumed] = resumed_from(output)
    assert newest_before(killed_after)(resumed), (resumed, killed_after)
    same_run("no-requeue", 1, ONE)
    start = seconds(record["attempts"][-1]["start"])
    figures("no-requeue", seconds_to_the_run_going_on=round(start - record["killed"], 1),
            steps_redone=killed_after - resumed)  # fmt: skip


LOST = re.compile(r"SLURM job \d+ requeued: process (\d) of the run was lost \(([^)]*)\)")
HOST_SILENT = f"its host did not answer for {LOST_AFTER:.0f} s: its node down or cut off the network"


def dropped_out(case: str, record: dict) -> str:
    """The checks every outage shares: the job requeued once while SLURM
    saw no node failure, then COMPLETED on both nodes; the output of its
    first attempt."""
    if final_state(record) != "COMPLETED":
        pytest.fail(diagnosis(record), pytrace=False)
    assert record["down"] is None, record  # SLURM never marked the node down: nkserde requeued it
    assert [a["state"] for a in record["attempts"]] == ["REQUEUED", "COMPLETED"], record["attempts"]
    assert int(record["show"]["Restarts"]) == 1 and all(a["nodes"] == "node[1-2]" for a in record["attempts"])
    return cluster.attempts(record["output"]["node1"])[0]


def outage_figures(case: str, record: dict, first: str, resumed: int) -> None:
    struck = record["struck"]
    figures(case, requeued_after=round(seconds(record["attempts"][0]["end"]) - struck, 1),
            back_after=round(record["back"] - struck, 1),
            seconds_to_the_run_going_on=round(seconds(record["attempts"][-1]["start"]) - struck, 1),
            steps_redone=last_step(first) - resumed)  # fmt: skip


@pytest.mark.slurm
@pytest.mark.parametrize("case", [case for case, *_ in scenario.OUTAGES])
def test_a_two_node_job_whose_node_drops_out_is_requeued_and_resumes(case):
    """node2's power out for 30 s, node2 or node1 cut off the network for 30
    or 120 s, after step 12, with SLURM's and nkserde's defaults. A node
    back before SlurmdTimeout is no node failure to SLURM: srun would end
    the job FAILED when node2 answered again (a rebooted node resets its
    connections, a healed one finds JAX's runtime aborting its process),
    and with node1 cut off it waits for ever for a task's exit the
    partition lost. The process listening for the lost one hears its host
    silent for 15 s (LOST_AFTER) and requeues the job: process 0 when node2 is out; when
    node1 is, process 1, whose node still reaches SLURM (process 0's
    requeue waits for the network, then finds the job requeued)."""
    record = JOBS.result(case)
    first = dropped_out(case, record)
    [resumed] = resumed_from(record["output"]["node1"])
    assert newest_before(last_step(first))(resumed), (resumed, first[-3000:])
    if record["node"] == "node2":
        said = LOST.findall(first)
        assert said == [("1", HOST_SILENT)], first
    else:  # process 1 requeued it from node2 (its line may be lost in the partition); process 0 heard it too
        assert f"process 1 of the run was lost ({HOST_SILENT})" in first, first[-3000:]
    same_run(case, 2, STRUCK)
    outage_figures(case, record, first, resumed)


@pytest.mark.slurm
def test_a_two_node_job_that_loses_a_node_in_a_save_is_requeued_and_resumes():
    """node2's 30 s power cut strikes while process 1 writes the checkpoint
    of step 10 (its temporary file not yet fsynced): the checkpoint is never
    published, the job is requeued and resumes from step 5's."""
    record = JOBS.result("two-node-save")
    first = dropped_out("two-node-save", record)
    assert LOST.findall(first) == [("1", HOST_SILENT)]
    assert resumed_from(record["output"]["node1"]) == [5], record["output"]["node1"][-3000:]
    assert record["temps"] == []
    same_run("two-node-save", 2, STRUCK)
    outage_figures("two-node-save", record, first, 5)


@pytest.mark.slurm
def test_a_dead_owner_whose_pid_lives_on_the_other_node_is_judged_by_its_lease():
    record = JOBS.result("lease-dead")
    lock_host, lock_pid = record["lock"][0], int(record["lock"][1])
    assert lock_host == "node1" and record["holder"] == lock_pid and record["holder_alive"], record
    again = record["again"]
    assert record["status"] == 0, again[-3000:]
    assert f"took over the lock: process {lock_pid} on host node1: its lock was not renewed for 20 s" in again, again
    [resumed] = resumed_from(again)
    assert newest_before(last_step(record["first"]))(resumed) and record["temps"] == []
    same_run("lease-dead", 1, ONE)


@pytest.mark.slurm
def test_a_live_owner_on_the_other_node_is_never_judged_dead():
    record = JOBS.result("lease-live")
    second = record["second"]
    assert record["second_status"] != 0, second[-3000:]
    assert re.search(r"in use by process \d+ on host node2 .*its lock was renewed", second), second[-3000:]
    assert record["owner_status"] == 0, record["owner"][-3000:]
    same_run("lease-live", 1, ONE)
    figures("lease-live", refused_after=round(record["refused_after"], 1))


@pytest.mark.slurm
def test_a_checkpoint_directory_on_the_nodes_local_disks_fails_at_the_start():
    record = JOBS.result("node-local")
    assert final_state(record) == "FAILED", diagnosis(record)
    output = record["output"]["node1"]
    assert re.search(r"process 1 on host node2 does not see the file process 0 created", output), output[-3000:]
    assert "step 1 " not in output  # no step ran
    files = record["files"]
    assert all(not [f for f in (found or []) if not f.endswith("run-0")] for found in files.values()), files


@pytest.mark.slurm
def test_two_nodes_share_one_compilation_cache():
    record = JOBS.result("shared-cache")
    assert record["statuses"] == {"node1": 0, "node2": 0}, record
    for node, text in record["output"].items():
        assert re.search(rf"^{node}: \d+ compiles, 8 prunes .* 0 cache warnings, 0 errors$", text, re.M), text
    for case in ("walltime", "mid-run", "in-save", "no-requeue", "two-node-save", "power-30"):
        for text in JOBS.result(case)["output"].values():
            assert "Error reading persistent compilation cache" not in text
