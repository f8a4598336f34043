"""The watch each process of a multi-process run keeps on one other
(nkserde/processes/peer_watch.py): its rule with made-up times, its
threads over an in-process store, its cost at 1024 processes, and a real
two-process run in a stand-in SLURM job whose process 1 dies mid-run: the
job is requeued while process 0 waits in NetKet's collectives. The same
on two nodes, one of which drops out and comes back: tests/test_two_nodes.py."""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time

import pytest

import nkserde
from multiprocess import launch
from nkserde.checkpoint.job.control import JobOptions
from nkserde.checkpoint.job.interruptions import Interruptions
from nkserde.checkpoint.process_runs import PROCESS_RUNS
from nkserde.checkpoint.run import Run
from nkserde.processes.coordination import CountingStore
from nkserde.processes.peer_watch import END, PeerWatch, Silence, tick_of
from simulated_store import SimulatedStore

TIMEOUT = 6.0
TICK = tick_of(TIMEOUT)  # 1 s
JUDGED = TIMEOUT + 2 * TICK  # the silence after which the neighbour is silent


def test_a_neighbour_is_silent_after_the_timeout_and_two_ticks_of_this_processs_own():
    silence = Silence(0.0, TICK, TIMEOUT)
    for t, value in ((1.0, b"1"), (2.0, b"2"), (3.0, b"3")):  # it ticks
        assert silence.observe(t, value) is None
    for t in range(4, 12):  # then says nothing: its last value, then none (unreadable)
        assert silence.observe(float(t), b"3" if t < 6 else None) is None
    assert silence.observe(12.0, None) == 9.0 > JUDGED


def test_a_gap_in_this_processs_own_ticks_starts_the_silence_again():
    """A suspended job's processes are all stopped: after the SIGCONT, the
    neighbour's counter is old, but so is this process's last tick."""
    silence = Silence(0.0, TICK, TIMEOUT)
    assert silence.observe(1.0, b"1") is None
    assert silence.observe(301.0, b"1") is None  # 300 s stopped
    for t in range(302, 310):
        assert silence.observe(float(t), b"1") is None
    assert silence.observe(310.0, b"1") == 9.0


class Processes:
    """Watches of ``count`` processes over one in-process store, fast ticks;
    ``silent`` collects what each one's ``on_silent`` was called with."""

    def __init__(self, count: int, timeout: float = 0.6):
        self.store = SimulatedStore(count)
        self.silent: dict[int, list] = {i: [] for i in range(count)}
        self.watches = [
            PeerWatch(self.store, "peers:0", i, count, timeout, lambda p, s, i=i: self.silent[i].append((p, s))).start()
            for i in range(count)
        ]

    def die(self, index: int) -> None:
        """What a process whose node lost power does to its watch: stops ticking, without a word."""
        self.watches[index]._closed.set()
        self.watches[index]._thread.join()

    def close(self) -> None:
        for watch in self.watches:
            watch.close()


def test_the_process_watching_a_dead_one_hears_its_silence_once_and_the_others_nothing():
    processes = Processes(3)
    try:
        processes.die(1)
        time.sleep(2.5)  # the timeout (0.6 s) and two ticks (0.2 s), three times over
    finally:
        processes.close()
    assert [p for p, _ in processes.silent[0]] == [1]  # process 0 listens for 1; once
    assert processes.silent[0][0][1] > 0.6
    assert processes.silent[2] == []  # process 2 listens for 0, which ticks on
    assert processes.silent[1] == []  # dead


def test_a_process_whose_run_ended_through_python_is_never_silent():
    processes = Processes(2)
    try:
        processes.watches[1].close()
        assert processes.store.try_get("peers:0/1") == END
        time.sleep(2.5)
    finally:
        processes.close()
    assert processes.silent == {0: [], 1: []}


class FailingStore:
    """JAX's client once process 0, which serves the store, is gone."""

    def put(self, key, value):
        raise RuntimeError("UNAVAILABLE: failed to connect to all addresses")

    def try_get(self, key):
        raise RuntimeError("UNAVAILABLE")


def test_a_store_that_fails_is_the_silence_of_process_0():
    called = threading.Event()
    heard = []
    watch = PeerWatch(FailingStore(), "peers:0", 2, 4, 0.6, lambda p, s: (heard.append(p), called.set())).start()
    try:
        assert called.wait(10.0)
    finally:
        watch.close()  # a put that fails: the run ends all the same
    assert heard == [0]


def test_each_process_sends_two_requests_a_tick_at_1024_processes():
    """The coordinator serves 2 requests per process and tick, whatever the
    number of processes (a tick: a sixth of the timeout, at most 10 s)."""
    count = 1024
    store = SimulatedStore(count)
    counted = [CountingStore(store) for _ in range(count)]
    watches = [PeerWatch(counted[i], "peers:0", i, count, 60.0, None) for i in range(count)]
    for now in (10.0, 20.0, 30.0):
        assert all(watch.step(now) is None for watch in watches)
    assert {tuple(sorted(c.counts.requests.items())) for c in counted} == {(("put", 3), ("try_get", 3))}
    assert watches[0].tick == tick_of(60.0) == 10.0


@pytest.mark.parametrize("received", [None, signal.SIGTERM, signal.SIGUSR1])
def test_a_silent_peer_has_the_job_requeued_unless_a_signal_came_first(received, monkeypatch, caplog):
    """After a signal (scancel, the time limit, the job's --signal), SLURM
    or the user is ending the job, and its processes end at different
    moments: a silence then is theirs, not a node's."""
    from test_scheduler import RUNNING, RecordingJob, control

    monkeypatch.setattr(PROCESS_RUNS, "steps_done", 1)
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # the requeue's SIG_IGN of SLURM's SIGTERM: not here
    stops = silent_peer_of_a_run(RecordingJob(RUNNING), control, started=20, saved=25)
    stops.catcher.received = received
    with caplog.at_level(logging.INFO, logger="nkserde"):
        stops._silent_peer(1, 12.4)
    assert stops.job.job.requeued == ([] if received else ["4711"])
    if not received:
        assert "requeued: process 1 of the run was lost (not heard from for 12 s: its node down" in caplog.text


def silent_peer_of_a_run(job, control, *, started: int, saved: int) -> Interruptions:
    """The Interruptions of a run of ``job`` (process 0's: it holds the job)
    started at step ``started``, its newest checkpoint of step ``saved``."""
    stops = Interruptions("ckpt", JobOptions())
    stops.job = control(job)
    stops._run = Run((), (), None)
    stops._first_step, stops._run.last_saved = started, saved
    return stops


def test_a_silent_peer_has_the_job_requeued_only_if_the_attempt_wrote_a_checkpoint(monkeypatch, caplog):
    """A process that dies at the same point of every attempt would have
    the job requeued forever: each requeue must start further on."""
    from test_scheduler import RUNNING, RecordingJob, control

    monkeypatch.setattr(PROCESS_RUNS, "steps_done", 1)
    stops = silent_peer_of_a_run(RecordingJob(RUNNING), control, started=20, saved=20)
    with caplog.at_level(logging.INFO, logger="nkserde"):
        stops._silent_peer(1, 12.4)
    assert stops.job.job.requeued == []
    assert "process 1 of the run was lost (not heard from for 12 s); not requeued: this attempt wrote no" in caplog.text


@pytest.fixture
def slurm_stand_in(tmp_path):
    """``scontrol`` and ``squeue`` first on PATH, for a job 4242 that runs
    and may be requeued: ``scontrol requeue`` writes its arguments and, as
    SLURM does, ends the caller soon after (SIGKILL: its thread waits)."""
    bin_dir, called = tmp_path / "bin", tmp_path / "scontrol-requeue"
    bin_dir.mkdir()
    show = "JobId=4242 JobState=RUNNING Reason=None Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0"
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n  show) echo "{show}" ;;\n'
        f'  requeue) echo "$@" >> {called}; (sleep 2; kill -9 $PPID) > /dev/null 2>&1 & ;;\n  *) exit 1 ;;\nesac\n'
    )
    (bin_dir / "squeue").write_text("#!/bin/sh\necho UNLIMITED\n")
    for tool in ("scontrol", "squeue"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}, called


def test_a_job_whose_process_dies_mid_run_is_requeued_while_the_other_waits_in_a_collective(slurm_stand_in, tmp_path):
    """Process 1 stops after step 3 with its connections open, as a node
    that lost power or the network (a killed process's connections would
    be reset, and process 0's collective would fail at once); process 0
    goes into step 4's collectives and waits there: its watch requeues the
    job (JAX's heartbeat timeout, 60 s here, would end it much later;
    srun, when the node came back, would end it FAILED)."""
    env, called = slurm_stand_in
    outputs = launch(2, ["ckpt", tmp_path, "vmc", 10, "stop1:3"], expect_failure=True,
                     env={**env, "NKSERDE_PEER_TIMEOUT": "3", "MP_HEARTBEAT": "60"})  # fmt: skip
    assert called.read_text().split() == ["requeue", "4242"], outputs[0][-3000:]
    said = re.search(r"SLURM job 4242 requeued: process 1 of the run was lost \(not heard from for (\d+) s", outputs[0])
    assert said and int(said.group(1)) > 3, outputs[0][-3000:]
    nkserde.verify(tmp_path / "ckpt" / "run-0" / "step-0000000002.nks")  # the rerun's resume: test_distributed.py
