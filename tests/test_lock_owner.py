"""nkserde.checkpoint_files.lock_owner and lease: a lock another host
holds is judged without a person. In a SLURM job SLURM says whether the
owner's job still runs; otherwise the lock's renewals, watched on this
host's clock, do. A live owner is never judged dead. (The same rules with
real nodes, pids that collide and a shared file system:
tests/test_two_nodes.py.)"""

import os
import socket
import subprocess
import sys
import time

import pytest

from nkserde.checkpoint_files import lease
from nkserde.checkpoint_files import lock as lock_module
from nkserde.checkpoint_files.lock import DirectoryLock
from nkserde.checkpoint_files.lock_owner import JobRecord, Owner, this_process
from nkserde.errors import NkserdeError
from nkserde.format.atomic import temp_name


class Clock:
    """The lock's waits on a clock of the test's: a pause moves it, and
    ``during(t, action)`` runs an action once the clock passes t."""

    def __init__(self):
        self.now = 0.0
        self.pauses = []
        self.actions = []

    def __call__(self):
        return self.now

    def pause(self, seconds):
        self.pauses.append(seconds)
        self.now += seconds
        for due, action in list(self.actions):
            if self.now >= due:
                self.actions.remove((due, action))
                action()

    def during(self, due, action):
        self.actions.append((due, action))


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(lock_module, "_pause", clock.pause)
    monkeypatch.setattr(lock_module, "_clock", clock)
    return clock


def other_host(**fields) -> Owner:
    return Owner("node-that-died", 4242, "another-boot", 99, **fields)


def in_job(monkeypatch, job="5000", restart=0, cluster="twonodes"):
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
    monkeypatch.setenv("SLURM_CLUSTER_NAME", cluster)


def test_the_lock_line_names_the_job_its_cluster_and_the_lease(monkeypatch):
    in_job(monkeypatch, "4711", 2)
    me = this_process(30.0)
    assert me.job == ("4711", 2) and me.cluster == "twonodes" and me.lease == 30.0
    line = me.line()
    assert line.endswith("slurm:4711:2 cluster:twonodes lease:30")
    assert Owner.parse(line) == me
    # a lock of an nkserde before leases: no lease, never judged by one
    assert Owner.parse("node7 123 boot:b start:4 slurm:4711:0").lease is None


def test_a_lock_of_another_host_not_renewed_is_taken_over_after_the_bound(tmp_path, clock, caplog):
    (tmp_path / ".lock").write_text(other_host(lease=3.0).line())
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held and Owner.parse((tmp_path / ".lock").read_text()).pid == os.getpid()
    assert clock.now >= lease.DEFAULT_STALE_AFTER  # watched for the whole bound, on this clock
    assert "not renewed for 5 min" in lock.took_over and "node-that-died" in lock.took_over
    lock.release()


def test_a_lock_renewed_while_watched_is_never_taken(tmp_path, clock):
    path = tmp_path / ".lock"
    path.write_text(other_host(lease=3.0).line())
    clock.during(200.0, lambda: os.utime(path, ns=(1, 1)))  # its owner renews it: another mtime
    with pytest.raises(NkserdeError, match="in use by process 4242 on host node-that-died") as refused:
        DirectoryLock(tmp_path).acquire()
    assert "renewed" in str(refused.value)
    assert path.exists() and Owner.parse(path.read_text()).pid == 4242


def test_the_bound_is_at_least_three_of_the_owners_renewals(tmp_path, clock, monkeypatch):
    monkeypatch.setenv(lease.ENVIRONMENT, "10")
    (tmp_path / ".lock").write_text(other_host(lease=60.0).line())  # its owner renews every minute
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert clock.now >= 3 * 60.0
    lock.release()


def test_a_lock_of_an_nkserde_without_leases_is_never_taken(tmp_path, clock):
    (tmp_path / ".lock").write_text(other_host().line())
    with pytest.raises(NkserdeError, match="cannot be checked from") as refused:
        DirectoryLock(tmp_path).acquire()
    assert "delete the lock file" in str(refused.value) and clock.now == 0


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "PENDING"])
def test_a_lock_of_a_slurm_job_that_ended_is_taken_over_at_once(tmp_path, clock, monkeypatch, state):
    in_job(monkeypatch, "5000")
    (tmp_path / ".lock").write_text(other_host(job=("4711", 0), cluster="twonodes", lease=30.0).line())
    asked = []
    lock = DirectoryLock(tmp_path, jobs=lambda job: asked.append(job) or JobRecord(state, 0))
    lock.acquire()
    assert asked == ["4711"] and clock.now == 0  # no lease watched
    assert f"the SLURM job 4711 that held it ended {state}" in lock.took_over
    lock.release()


def test_a_lock_of_a_running_slurm_job_is_never_taken(tmp_path, clock, monkeypatch):
    in_job(monkeypatch, "5000")
    (tmp_path / ".lock").write_text(other_host(job=("4711", 1), cluster="twonodes", lease=30.0).line())
    for state in ("RUNNING", "SUSPENDED"):
        with pytest.raises(NkserdeError, match=f"its SLURM job 4711 is {state}"):
            DirectoryLock(tmp_path, jobs=lambda job: JobRecord(state, 1)).acquire()
    assert Owner.parse((tmp_path / ".lock").read_text()).pid == 4242


def test_an_attempt_of_a_requeued_job_is_no_owner(tmp_path, clock, monkeypatch):
    """The job runs again (restart 2): its attempt 1, which took the lock, ended."""
    in_job(monkeypatch, "5000")
    (tmp_path / ".lock").write_text(other_host(job=("4711", 1), cluster="twonodes", lease=30.0).line())
    lock = DirectoryLock(tmp_path, jobs=lambda job: JobRecord("RUNNING", 2))
    lock.acquire()
    assert "attempt 1 of the SLURM job 4711 that held it ended" in lock.took_over
    lock.release()


def test_a_job_slurm_forgot_has_ended(tmp_path, clock, monkeypatch):
    in_job(monkeypatch, "5000")
    (tmp_path / ".lock").write_text(other_host(job=("4711", 0), cluster="twonodes", lease=30.0).line())
    lock = DirectoryLock(tmp_path, jobs=lambda job: None)
    lock.acquire()
    assert "SLURM no longer knows it" in lock.took_over
    lock.release()


def test_a_completing_job_is_waited_for(tmp_path, clock, monkeypatch):
    in_job(monkeypatch, "5000")
    (tmp_path / ".lock").write_text(other_host(job=("4711", 0), cluster="twonodes", lease=30.0).line())
    states = iter(["COMPLETING", "COMPLETING", "COMPLETED"])
    lock = DirectoryLock(tmp_path, jobs=lambda job: JobRecord(next(states), 0))
    lock.acquire()
    assert len(clock.pauses) == 2 and "ended COMPLETED" in lock.took_over
    lock.release()
    (tmp_path / ".lock").write_text(other_host(job=("4711", 0), cluster="twonodes", lease=30.0).line())
    with pytest.raises(NkserdeError, match="still COMPLETING"):
        DirectoryLock(tmp_path, jobs=lambda job: JobRecord("COMPLETING", 0)).acquire()


def test_when_slurm_does_not_answer_the_lease_decides(tmp_path, clock, monkeypatch, caplog):
    in_job(monkeypatch, "5000")
    (tmp_path / ".lock").write_text(other_host(job=("4711", 0), cluster="twonodes", lease=3.0).line())

    def jobs(job):
        raise NkserdeError("`scontrol show job --oneliner 4711` did not answer within 30 s")

    lock = DirectoryLock(tmp_path, jobs=jobs)
    lock.acquire()
    said = caplog.text
    assert "SLURM cannot say whether job 4711" in said and "did not answer within 30 s" in said
    assert "judging the lock by its renewal instead" in said
    assert "not renewed for" in lock.took_over and clock.now >= lease.DEFAULT_STALE_AFTER
    lock.release()


def test_a_job_of_another_cluster_is_judged_by_its_lease(tmp_path, clock, monkeypatch):
    """Job ids of two clusters sharing a file system collide: SLURM here is
    not asked about a job of another cluster."""
    in_job(monkeypatch, "5000", cluster="other")
    (tmp_path / ".lock").write_text(other_host(job=("4711", 0), cluster="twonodes", lease=3.0).line())
    lock = DirectoryLock(tmp_path, jobs=lambda job: pytest.fail("SLURM asked about another cluster's job"))
    lock.acquire()
    assert "not renewed for" in lock.took_over
    lock.release()


def test_outside_slurm_a_jobs_lock_is_judged_by_its_lease(tmp_path, clock, monkeypatch):
    for name in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_CLUSTER_NAME"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / ".lock").write_text(other_host(job=("4711", 0), cluster="twonodes", lease=3.0).line())
    lock = DirectoryLock(tmp_path, jobs=lambda job: pytest.fail("asked SLURM outside a SLURM job"))
    lock.acquire()
    assert "not renewed for" in lock.took_over
    lock.release()


def take_over(path) -> None:
    """A run of another host takes the lock at ``path``: its whole line in
    place at once (the renewal thread, checking every 0.1 s, never sees the
    lock missing or half written, which it would judge removed)."""
    temp = path.with_name(".lock-taken")
    temp.write_text(other_host(lease=0.1).line())
    os.replace(temp, path)


def test_the_owner_renews_its_lock_and_finds_it_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv(lease.ENVIRONMENT, "1")  # renewed every 0.1 s
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    path = tmp_path / ".lock"
    before = os.stat(path).st_mtime_ns
    os.utime(path, ns=(before - 10**9, before - 10**9))
    deadline = time.monotonic() + 30
    while os.stat(path).st_mtime_ns <= before - 10**9 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.stat(path).st_mtime_ns > before - 10**9  # renewed
    assert lock.lost is None
    # another run took it over (its owner was stopped for longer than the bound)
    take_over(path)
    assert "taken over by process 4242 on host node-that-died" in lock.lost
    lock.release()
    assert Owner.parse(path.read_text()).pid == 4242  # not this run's to remove


def test_of_two_runs_that_find_one_stale_lock_one_takes_it(tmp_path, monkeypatch):
    """Two processes judge the same lock of another host stale at once
    (its lease not renewed for the bound, here 1 s): exactly one holds the
    lock after, the other is refused naming it."""
    (tmp_path / ".lock").write_text(other_host(lease=0.1).line())
    script = (
        "import sys, time\n"
        "from nkserde.checkpoint_files.lock import DirectoryLock\n"
        "from nkserde.errors import NkserdeError\n"
        "lock = DirectoryLock(sys.argv[1])\n"
        "try:\n"
        "    lock.acquire()\n"
        "    print('took', flush=True)\n"
        "    sys.stdin.readline()\n"
        "except NkserdeError as exc:\n"
        "    print('refused', exc, flush=True)\n"
    )
    env = {**os.environ, lease.ENVIRONMENT: "1"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for _ in range(2)
    ]
    first = [run.stdout.readline() for run in runs]
    for run in runs:
        run.stdin.close()
        run.wait(timeout=60)
    assert sorted(line.split()[0] for line in first) == ["refused", "took"], first
    assert "in use by process" in next(line for line in first if line.startswith("refused"))


def test_the_holder_removes_what_runs_of_other_hosts_left(tmp_path):
    """A save killed with its node leaves its temporary file: the next run
    to hold the lock removes it; those of a live process of this host, and a
    lock being taken by another host, stay."""
    dead = tmp_path / temp_name("step-0000000010.nks", "node-that-died", 12)
    dead.write_bytes(b"x" * 1000)
    taking = tmp_path / temp_name(".lock.0a1b2c3d", "node-that-lives", 13)
    taking.write_text("node-that-lives 13")
    mine = tmp_path / temp_name("step-0000000011.nks", socket.gethostname(), os.getppid())
    mine.write_bytes(b"y")
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert not dead.exists() and taking.exists() and mine.exists()
    lock.release()


def test_a_reader_never_reads_the_owners_clock(tmp_path, clock):
    """A lock whose modification time is far in the past (the owner's
    clock behind, or the file server's) but that changes while watched is
    alive; one stamped in the future that does not change is dead."""
    path = tmp_path / ".lock"
    path.write_text(other_host(lease=3.0).line())
    os.utime(path, (0, 0))
    clock.during(10.0, lambda: os.utime(path, (1, 1)))
    with pytest.raises(NkserdeError, match="renewed"):
        DirectoryLock(tmp_path).acquire()
    future = time.time() + 10**6
    os.utime(path, (future, future))
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    lock.release()


def test_a_renewal_thread_stops_with_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv(lease.ENVIRONMENT, "1")
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    thread = lock._renewal._thread
    assert thread.is_alive() and thread.daemon
    lock.release()
    assert not thread.is_alive()


def _run_taken_over_after_step_3(tmp_path, monkeypatch, *, wait_for_the_write: bool):
    """A VMC of 10 steps checkpointed every 2, whose lock a run of another
    host takes at the end of step 3 (the checkpoint of step 2 written
    first, or still in flight); returns (the Checkpoint, its error)."""
    import netket as nk

    import builders as B
    import nkserde

    monkeypatch.setenv(lease.ENVIRONMENT, "1")  # renewed (and checked) every 0.1 s

    class TakeOver(nk.callbacks.AbstractCallback):
        def on_step_end(self, step, log_data, driver):
            if driver.step_count == 3:  # after the checkpoint of step 2 (every=2)
                if wait_for_the_write:
                    ckpt.wait()
                path = tmp_path / ".lock"
                take_over(path)
                deadline = time.monotonic() + 30
                while ckpt._files.lock.renewal_lost is None and time.monotonic() < deadline:
                    time.sleep(0.05)

    ckpt = nkserde.Checkpoint(tmp_path, every=2)
    with pytest.raises(NkserdeError, match="taken over by process 4242 on host node-that-died") as stopped:
        B.vmc().run(10, out=None, show_progress=False, callback=[ckpt, TakeOver()])
    assert "this run stops without a checkpoint" in str(stopped.value)
    assert Owner.parse((tmp_path / ".lock").read_text()).host == "node-that-died"  # left to its owner
    return ckpt


def test_a_run_whose_lock_was_taken_over_stops_without_writing(tmp_path, monkeypatch):
    """The run was stopped (Ctrl-Z, a host cut off) for longer than the
    bound, and a run of another host took its lock: at its next step start
    it finds the lock lost and stops on every process with an error, and
    writes no checkpoint into the directory that is another run's now."""
    ckpt = _run_taken_over_after_step_3(tmp_path, monkeypatch, wait_for_the_write=True)
    assert ckpt.steps() == [2]  # not step 4's, nor the one an error would write


def test_a_run_whose_lock_was_taken_over_abandons_its_write_in_flight(tmp_path, monkeypatch):
    """The checkpoint of step 2 is still in flight when the lock is taken
    over (its thread never runs: a busy node): the run stops without
    finishing it, and neither it nor its temporary file is left in the
    directory that is another run's now."""
    from nkserde.checkpoint.persist.background_write import BackgroundWrite

    monkeypatch.setattr(BackgroundWrite, "run_in_background", lambda self: None)
    ckpt = _run_taken_over_after_step_3(tmp_path, monkeypatch, wait_for_the_write=False)
    ckpt.wait()  # (a write left in flight would be written now, as at the interpreter's exit)
    assert ckpt.steps() == []
    assert not list(tmp_path.glob("*.nkserde-tmp")) and not list(tmp_path.glob(".step-*"))
