"""The watch each process of a multi-process run keeps on one other
(nkserde/processes/peer_watch.py): watches in one process, a peer in a
process of its own that is stopped, holds its interpreter or is killed, a
peer on a host of its own whose network is cut (a network namespace), its
cost at the coordinator at 1024 processes, and a real two-process run in
a stand-in SLURM job whose process 1 is killed mid-run: the job is
requeued. The same on two nodes, which lose power or their network and
come back: tests/test_two_nodes.py."""

from __future__ import annotations

import logging
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import nkserde
from file_store import FileStore
from multiprocess import launch
from network_namespace import NetworkNamespace
from nkserde.checkpoint.job.control import JobOptions
from nkserde.checkpoint.job.interruptions import Interruptions
from nkserde.checkpoint.job.requeue import JobRequeue
from nkserde.checkpoint.job.slurm import Job
from nkserde.checkpoint.run import Run
from nkserde.errors import DistributedSaveError, PeerLostError
from nkserde.processes.coordination import CountingStore
from nkserde.processes.lost_processes import lost_process
from nkserde.processes.peer_watch import LOST_AFTER, PeerWatch, keepalive
from simulated_store import SimulatedStore

PEER = Path(__file__).with_name("_peer_process.py")
LOST_AFTER_HERE = 1.0  # the tests' watches: a host silent 1 s (the kernel: 2 s) is lost
WAIT = 60.0  # seconds any event of these tests may take on a loaded machine, at most
# a killed process's connection ends (its kernel closes it) or is reset (a
# connection it had not accepted yet, or had unread bytes on)
# (a process, not its host: the same script may do it again at the same point)
KILLED = {
    (1, "its process ended without a word: killed, or out of memory", False),
    (1, "its connection was reset: its node restarted, or the process was killed", False),
}


def test_the_kernel_drops_a_connection_silent_for_lost_after_seconds():
    """idle + probes x interval: the kernel's keepalive probes, unanswered, end the connection."""
    for lost_after in (LOST_AFTER, 5.0, LOST_AFTER_HERE, 30.0):
        idle, interval, probes = keepalive(lost_after)
        assert idle + probes * interval == pytest.approx(lost_after, abs=interval)
    assert keepalive(LOST_AFTER) == (3, 3, 4)


class Watches:
    """The watches of ``count`` processes in this one, over one in-process
    store; ``lost`` collects what each one's ``on_lost`` was called with."""

    def __init__(self, count: int):
        self.store = SimulatedStore(count)
        self.lost: dict[int, list] = {i: [] for i in range(count)}
        self.heard = threading.Event()
        self.watches = [PeerWatch(self.store, "peers:0", i, count, self._on_lost(i), host="127.0.0.1",
                                  lost_after=LOST_AFTER_HERE).start() for i in range(count)]  # fmt: skip
        assert all(w.connected.wait(WAIT) for w in self.watches)

    def _on_lost(self, i):
        return lambda peer, why, host: (self.lost[i].append((peer, why, host)), self.heard.set())

    def kill(self, index: int) -> None:
        """What a killed process does to its watch: its sockets closed by the kernel, without a word."""
        watch = self.watches[index]
        watch._closed.set()
        watch._wake_write.send(b"x")
        watch._thread.join()
        for accepted in watch._accepted:
            accepted.close()
        watch._server.close()

    def close(self) -> None:
        for watch in self.watches:
            watch.close()


def test_the_process_listening_for_a_killed_one_hears_it_at_once_and_the_others_nothing():
    watches = Watches(3)
    try:
        watches.kill(1)
        assert watches.heard.wait(WAIT)
        time.sleep(3 * LOST_AFTER_HERE)  # nothing more comes
    finally:
        watches.close()
    assert len(watches.lost[0]) == 1 and set(watches.lost[0]) <= KILLED  # process 0 listens for 1
    assert watches.lost[1] == watches.lost[2] == []  # 1 is dead; 2 listens for 0, which lives


def test_a_process_whose_run_ended_through_python_is_never_lost():
    watches = Watches(2)
    try:
        watches.watches[1].close()  # its word "end", then its sockets closed
        deadline = time.monotonic() + WAIT
        while watches.watches[0].listening and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not watches.watches[0].listening
        time.sleep(3 * LOST_AFTER_HERE)
    finally:
        watches.close()
    assert watches.lost == {0: [], 1: []}


class Peer:
    """Process 1 of 2, in a process of its own (tests/_peer_process.py),
    and this test's watch (process 0) listening for it."""

    def __init__(self, tmp_path: Path, behaviour: str, seconds: float = 0.0, other: NetworkNamespace | None = None):
        store = FileStore(tmp_path / "store")
        host = other.host_address if other else "127.0.0.1"
        command = [sys.executable, str(PEER), str(store.directory), other.address if other else host,
                   str(LOST_AFTER_HERE), behaviour, str(seconds)]  # fmt: skip
        spawn = other.popen if other else subprocess.Popen
        self.process = spawn(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lost, self.heard = [], threading.Event()
        on_lost = lambda peer, why, host: (self.lost.append((peer, why, host)), self.heard.set())  # noqa: E731
        self.watch = PeerWatch(store, "peers", 0, 2, on_lost, host=host, lost_after=LOST_AFTER_HERE).start()
        assert self.watch.connected.wait(WAIT) and self.process.stdout.readline().strip() == "connected"

    def said(self, kill: bool = False) -> str:
        """What the peer printed, once it has ended (``kill``: once killed)."""
        if kill:
            self.process.kill()
        try:
            out, _ = self.process.communicate(timeout=WAIT)
        finally:
            self.process.kill()
            self.watch.close()
        return out


@pytest.mark.parametrize("behaviour", ["hold", "sleep", "stop"])
def test_a_live_process_is_never_lost_whatever_its_threads_do(tmp_path, behaviour):
    """For 4 times the watch's bound, the peer's process holds its
    interpreter in a C call (a compile, a kernel that keeps the GIL: no
    thread of it runs Python), waits in its main thread (a collective, a
    long save), or is stopped whole (SIGSTOP): its kernel answers the
    probes all the while, and its run then ends through Python."""
    seconds = 4 * LOST_AFTER_HERE
    peer = Peer(tmp_path, "wait" if behaviour == "stop" else behaviour, seconds)
    if behaviour == "stop":
        peer.process.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        peer.process.send_signal(signal.SIGCONT)
        assert not peer.heard.is_set()
        peer.process.send_signal(signal.SIGTERM)  # ends it: SIGCONT came first, so its watch was never in doubt
        peer.said()
        assert len(peer.lost) <= 1 and set(peer.lost) <= KILLED  # killed after it was back: the listener may hear it
        return
    said = peer.said()
    assert said.split("\n")[:1] == ["done"] and peer.process.returncode == 0, said
    assert peer.lost == [] and not peer.watch.listening  # it said "end"


def test_a_killed_process_is_lost(tmp_path):
    peer = Peer(tmp_path, "wait")
    peer.process.kill()
    assert peer.heard.wait(WAIT)
    peer.said(kill=True)
    assert len(peer.lost) == 1 and set(peer.lost) <= KILLED


def test_a_process_whose_host_stops_answering_is_lost(tmp_path):
    """The peer on a host of its own (a network namespace), whose link goes
    dark: its process lives on, its packets vanish. The kernel's probes go
    unanswered and the connection ends after the watch's bound."""
    with NetworkNamespace() as other:
        peer = Peer(tmp_path, "wait", other=other)
        other.cut()
        assert peer.heard.wait(WAIT)
        peer.said(kill=True)
    silent = f"its host did not answer for {LOST_AFTER_HERE:.0f} s: its node down or cut off the network"
    assert peer.lost == [(1, silent, True)]


def test_the_coordinator_serves_two_requests_per_process_and_run_at_1024_processes():
    """The store carries the addresses only: each process puts its own and
    reads its neighbour's, once per run; the watch itself never asks it
    again (the kernels' probes go between the processes' hosts)."""
    count = 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8 * count)), hard))
    store = SimulatedStore(count)
    counted = [CountingStore(store) for _ in range(count)]
    watches = []
    try:
        for i in range(count):
            watches.append(PeerWatch(counted[i], "peers:0", i, count, None, host="127.0.0.1").start())
        assert all(w.connected.wait(WAIT) for w in watches)
        time.sleep(1.0)  # connected, listening: no more requests
        asked = {tuple(sorted(c.counts.requests.items())) for c in counted}
    finally:
        for watch in watches:
            watch.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert asked == {(("get", 1), ("put", 1))}
    assert {tuple(sorted(c.counts.requests.items())) for c in counted} == asked  # the end goes by the connection


class RecordingRequeue(JobRequeue):
    """A JobRequeue whose requeue after a lost process is recorded, not started."""

    def __init__(self):
        super().__init__(Job("4711"), requeue="auto", label="ckpt")
        self.lost_calls = []

    def after_lost_process(self, lost, *, refused=None):
        self.lost_calls.append((lost, refused))


def lost_peer_of_a_run(*, started: int, completed: int, saved: int | None) -> Interruptions:
    """The Interruptions of a run started at step ``started``, at step
    ``completed`` now, its newest checkpoint of step ``saved``."""
    stops = Interruptions("ckpt", JobOptions())
    stops.requeue = RecordingRequeue()
    stops._run = Run((), (), None)
    stops._first_step, stops._run.completed, stops._run.last_saved = started, completed, saved
    return stops


HOST = "its host did not answer for 15 s: its node down or cut off the network"
PROCESS = "its process ended without a word: killed, or out of memory"


@pytest.mark.parametrize("received", [None, signal.SIGTERM, signal.SIGUSR1])
def test_a_lost_peer_has_the_job_requeued_unless_a_signal_came_first(received):
    """After a signal (scancel, the time limit, the job's --signal), SLURM
    or the user is ending the job, and its processes end at different
    moments: a loss then is theirs, not a node's."""
    stops = lost_peer_of_a_run(started=20, completed=27, saved=25)
    stops.catcher.received = received
    stops._lost_peer(1, HOST, True)
    assert stops.requeue.lost_calls == ([] if received else [(f"process 1 of the run was lost ({HOST})", None)])


@pytest.mark.parametrize(
    "why, host, completed, saved, refused",
    [
        (PROCESS, False, 27, 25, None),  # a checkpoint of this attempt: it goes further whatever was lost
        (PROCESS, False, 27, 20, "this attempt wrote no checkpoint"),  # a kill may strike at the same point again
        (PROCESS, False, 27, None, "this attempt wrote no checkpoint"),
        (HOST, True, 27, 20, None),  # a node lost: nothing the script does brings that back
        (HOST, True, 20, 20, "this attempt completed no step"),
    ],
)  # fmt: skip
def test_a_lost_peer_has_the_job_requeued_only_if_the_attempt_goes_further(why, host, completed, saved, refused):
    """A process that dies at the same point of every attempt would have
    the job requeued for ever: each requeue must start further on. A
    killed process (out of memory?) needs a checkpoint of this attempt; a
    host that stopped answering, a completed step."""
    stops = lost_peer_of_a_run(started=20, completed=completed, saved=saved)
    stops._lost_peer(1, why, host)
    assert stops.requeue.lost_calls == [(f"process 1 of the run was lost ({why})", refused)]


def test_a_refused_requeue_is_said_and_none_started(caplog, monkeypatch):
    started = []
    monkeypatch.setattr("nkserde.checkpoint.job.requeue.LastingRequeue.start", lambda *a, **k: started.append(a))
    requeue = JobRequeue(Job("4711"), requeue="auto", label="ckpt")
    with caplog.at_level(logging.INFO, logger="nkserde"):
        assert requeue.after_lost_process(f"process 1 of the run was lost ({PROCESS})", refused="no") is None
    assert started == [] and f"ckpt: process 1 of the run was lost ({PROCESS}); not requeued: no" in caplog.text


def test_a_lost_process_is_requeued_once_per_run_whoever_hears_it(monkeypatch):
    """The watch's thread and the run's failed collective may both hear it."""
    started = []
    monkeypatch.setattr("nkserde.checkpoint.job.requeue.LastingRequeue.start", lambda *a, **k: started.append(a) or a)
    requeue = JobRequeue(Job("4711"), requeue="auto", label="ckpt")
    first = requeue.after_lost_process("process 1 of the run was lost (...)")
    assert requeue.after_lost_process("a process of the run was lost (...)") is first
    assert len(started) == 1
    assert JobRequeue(Job("4711"), requeue="never", label="ckpt").after_lost_process("...") is None


@pytest.fixture
def slurm_stand_in(tmp_path):
    """``scontrol`` first on PATH, for a job 4242 that runs and may be
    requeued: ``scontrol requeue`` records its arguments and, as SLURM does,
    ends the job's processes soon after (SIGKILL, found by a tag in their
    environment)."""
    bin_dir, called, tag = tmp_path / "bin", tmp_path / "scontrol-requeue", uuid.uuid4().hex
    bin_dir.mkdir()
    show = "JobId=4242 JobState=RUNNING Reason=None Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0"
    end_the_job = f"for e in /proc/[0-9]*/environ; do grep -qs {tag} $e && kill -9 $(basename $(dirname $e)); done"
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n  show) echo "{show}" ;;\n'
        f'  requeue) echo "$@" >> {called}; (sleep 2; {end_the_job}) > /dev/null 2>&1 & ;;\n  *) exit 1 ;;\nesac\n'
    )
    (bin_dir / "squeue").write_text("#!/bin/sh\necho UNLIMITED\n")
    for tool in ("scontrol", "squeue"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "MP_JOB_TAG": tag}, called


def test_a_job_whose_process_is_killed_mid_run_is_requeued_once(slurm_stand_in, tmp_path):
    """Process 1 is killed after step 3: process 0's watch hears its
    connection end without a word, and its collective fails (the
    process's other connections reset): whichever comes first requeues
    the job, once, while SLURM's answer ends the job's processes. Left
    alone, a job whose process died but whose others wait ends only at its
    time limit, or FAILED."""
    env, called = slurm_stand_in
    outputs = launch(2, ["ckpt", tmp_path, "vmc", 10, "kill1:3"], expect_failure=True, env=env)
    assert called.read_text().split() == ["requeue", "4242"], outputs[0][-3000:]
    said = re.findall(r"SLURM job 4242 requeued: (process 1|a process) of the run was lost \(", outputs[0])
    assert len(said) == 1, outputs[0][-3000:]
    nkserde.verify(tmp_path / "ckpt" / "run-0" / "step-0000000002.nks")  # the rerun's resume: test_distributed.py


@pytest.mark.parametrize(
    "error, lost",
    [
        (ValueError("UNKNOWN: Gloo all-reduce failed: [external/gloo/gloo/transport/tcp/pair.cc:547] Connection "
                    "closed by peer [10.77.0.12]:17608"), "a process of the run was lost (a collective failed: "),
        (RuntimeError("NCCL operation ncclAllReduce failed: remote process exited or there was a network error"),
         "a process of the run was lost (a collective failed: "),
        (PeerLostError("process 1 did not reach 'writing blocks' within 60 s: it died", missing=[1]),
         "process 1 of the run was lost (process 1 did not reach 'writing blocks' within 60 s: it died)"),
        (DistributedSaveError("the coordination service failed while writing blocks (process 0 serves it: did it "
                              "die?): RuntimeError: UNAVAILABLE"), "process 0 of the run was lost ("),
        (ValueError("a bug in the user's script at step 4"), None),
        (FloatingPointError("NaN in the energy"), None),
        (DistributedSaveError("process 0 could not write: disk full"), None),
    ],
)  # fmt: skip
def test_a_failed_collective_is_a_lost_process_and_the_runs_own_error_is_not(error, lost):
    """Gloo's words as jax 0.10 raised them on the two-node cluster when node2's process vanished."""
    said = lost_process(error)
    assert said == lost if lost is None else said.startswith(lost)
