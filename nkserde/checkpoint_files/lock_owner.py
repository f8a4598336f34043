"""Who holds a checkpoint directory's lock, and whether that run still
lives: the lock line (:class:`Owner`) and the judgement of a lock found in
place (:func:`judge`). Knows processes and files; SLURM only through the
function it is handed (``jobs``).

The lock line::

    <host> <pid> boot:<boot id> start:<start time> [slurm:<job id>:<restart count> cluster:<name>] lease:<seconds>

the owner's host and pid; the boot id of its host and the start time of
its process (Linux: ``/proc/sys/kernel/random/boot_id``, field 22 of
``/proc/<pid>/stat``; left out where there is no ``/proc``); in a SLURM
job, the job, its attempt and the cluster; how often the owner renews the
lock (``lease``, :mod:`nkserde.checkpoint_files.lease`). Locks written
before a field existed are read without it; fields a later version adds
are ignored.

How a lock in place is judged, first rule that applies:

1. an earlier attempt of this SLURM job (on any host): dead; SLURM runs
   one attempt of a job at a time;
2. this host: its process is checked (dead if the host booted since, no
   process has the pid, or the pid's process started at another time:
   pids are reused);
3. another job of this SLURM cluster, judged from a SLURM job: SLURM is
   asked (``jobs``, a bounded call): an attempt that ended (completed,
   failed, cancelled, timed out, NODE_FAIL, requeued) holds nothing; a job
   that is COMPLETING is asked again for up to ``COMPLETING_WAIT``
   seconds, its processes may still write. When SLURM does not answer, the
   lease decides, and a warning says so;
4. any other: the lease. The lock is watched on this host's clock; a lock
   that changes (its owner renews it) is alive, one unchanged for the
   stale bound is dead. Another host's clock is never read. A lock of an
   nkserde before leases (no ``lease`` field) is never judged dead: its
   owner does not renew it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Callable, NamedTuple

from .._log import say
from ..errors import NkserdeError
from ..format.atomic import pid_alive
from . import lease

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# SLURM's states of a job whose processes may still run
_RUNNING_STATES = {"RUNNING", "SUSPENDED", "STOPPED", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT"}
# seconds a COMPLETING job (its processes being ended) is waited for
COMPLETING_WAIT = 120.0
_COMPLETING_LOOK = 2.0


class JobRecord(NamedTuple):
    """What SLURM says of a job: its state and its restart count."""

    state: str
    restarts: int


# job id -> its record, None when SLURM does not know the job (ended long
# ago); raises NkserdeError when SLURM does not answer
JobStates = Callable[[str], "JobRecord | None"]


class Owner(NamedTuple):
    """What a lock says of the process that took it."""

    host: str
    pid: int
    boot: str | None = None  # the host's boot id when it took the lock
    start: int | None = None  # the process's start time, clock ticks since boot
    job: tuple[str, int] | None = None  # SLURM: (job id, restart count)
    cluster: str | None = None  # SLURM: the cluster's name
    lease: float | None = None  # seconds between the owner's renewals; None: it does not renew

    def line(self) -> str:
        parts = [self.host, str(self.pid)]
        if self.boot:
            parts.append(f"boot:{self.boot}")
        if self.start is not None:
            parts.append(f"start:{self.start}")
        if self.job is not None:
            parts.append(f"slurm:{self.job[0]}:{self.job[1]}")
        if self.cluster:
            parts.append(f"cluster:{self.cluster}")
        if self.lease is not None:
            parts.append(f"lease:{self.lease:g}")
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner a lock's text names; None if it names none (empty,
        half written, not a lock). Fields of a later version are ignored."""
        tokens = text.split()
        if len(tokens) < 2 or not tokens[1].isdigit() or int(tokens[1]) <= 0:
            return None
        fields = {}
        for token in tokens[2:]:
            key, colon, value = token.partition(":")
            if not colon or not value or key in fields:
                return None
            fields[key] = value
        start = fields.get("start")
        job_id, _, restart = fields.get("slurm", "").partition(":")
        return cls(
            tokens[0],
            int(tokens[1]),
            boot=fields.get("boot"),
            start=int(start) if start is not None and start.isdigit() else None,
            job=(job_id, int(restart)) if job_id and restart.isdigit() else None,
            cluster=fields.get("cluster"),
            lease=_seconds(fields.get("lease")),
        )

    def named(self) -> str:
        """The owner in a message: ``process 12 on host node1 (SLURM job 4711)``."""
        job = f" (SLURM job {self.job[0]})" if self.job is not None else ""
        return f"process {self.pid} on host {self.host}{job}"


def _seconds(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 < value < 1e9 else None


def this_process(renews_every: float | None = None) -> Owner:
    """The owner line this process writes (``renews_every``: its lease)."""
    job = _slurm_attempt()
    cluster = os.environ.get("SLURM_CLUSTER_NAME", "").strip() if job is not None else ""
    return Owner(
        socket.gethostname(),
        os.getpid(),
        boot_id(),
        start_time(os.getpid()),
        job,
        cluster if cluster and len(cluster.split()) == 1 else None,
        renews_every,
    )


def boot_id() -> str | None:
    """This host's boot id (a new one at every boot), None where unknown."""
    try:
        text = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    return text if text and len(text.split()) == 1 else None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux), None
    where unknown (no such process, no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096).decode(errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])  # the name may hold ") "; starttime is field 22
    except (OSError, ValueError, IndexError):
        return None


def _slurm_attempt() -> tuple[str, int] | None:
    """(job id, restart count) of the SLURM job this process runs in, or None."""
    job_id = os.environ.get("SLURM_JOB_ID", "").strip()
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0").strip()
    if not job_id or len(job_id.split()) != 1:
        return None
    return job_id, int(restarts) if restarts.isdigit() else 0


class Verdict(NamedTuple):
    """Whether a lock's owner lives, and why, in words for a message
    (``"the SLURM job 4711 that held it ended NODE_FAIL"``)."""

    alive: bool
    why: str


class Judge:
    """Judges the owner of one lock file (see the module's rules).
    ``read()``: (owner, identity) of the lock now, or None if it is gone;
    ``jobs``: SLURM's record of a job (None: SLURM is not asked);
    ``stale_after``: the lease's bound, this host's setting;
    ``pause``/``clock``: the waits, a test's handshake in their place."""

    def __init__(self, path: Path, read, jobs: JobStates | None, stale_after: float, pause=time.sleep,
                 clock=time.monotonic):  # fmt: skip
        self.path, self.read, self.jobs, self.stale_after = path, read, jobs, stale_after
        self.pause, self.clock = pause, clock

    def __call__(self, owner: Owner, identity: tuple, me: Owner) -> tuple[Verdict, tuple]:
        """The verdict on ``owner`` and the identity of the lock file it was
        reached on (a lock that is gone or replaced meanwhile is alive: the
        caller looks again)."""
        same_job = owner.job is not None and me.job is not None and owner.job[0] == me.job[0]
        if same_job and _same_cluster(owner, me) and owner.job[1] < me.job[1]:
            return Verdict(False, f"it was taken by attempt {owner.job[1]} of this SLURM job, which ended"), identity
        if owner.host == me.host:
            return _this_host(owner, me), identity
        if self.jobs is not None and owner.job is not None and me.job is not None and owner.job[0] != me.job[0]:
            if _same_cluster(owner, me):
                verdict = self._ask_slurm(owner)
                if verdict is not None:
                    return verdict, identity
        if owner.lease is None:
            unchecked = f"it cannot be checked from {me.host} (an nkserde without lock renewal took it)"
            return Verdict(True, unchecked), identity
        return self._watch_lease(owner, identity, me)

    def _ask_slurm(self, owner: Owner) -> Verdict | None:
        job_id, attempt = owner.job
        deadline = self.clock() + COMPLETING_WAIT
        while True:
            try:
                record = self.jobs(job_id)
            except NkserdeError as exc:
                say(
                    f"{self.path.parent}: SLURM cannot say whether job {job_id}, which holds the lock "
                    f"{self.path.name}, still runs ({exc}); judging the lock by its renewal instead",
                    logging.WARNING,
                )
                return None
            if record is None:
                return Verdict(False, f"the SLURM job {job_id} that held it has ended (SLURM no longer knows it)")
            state = record.state.split("+")[0]  # "CANCELLED+" (by someone): the state
            if state == "COMPLETING" and self.clock() < deadline:
                self.pause(_COMPLETING_LOOK)
                continue
            if state == "COMPLETING":
                return Verdict(True, f"its SLURM job {job_id} is still COMPLETING after {COMPLETING_WAIT:.0f} s")
            if record.restarts > attempt:
                return Verdict(
                    False,
                    f"attempt {attempt} of the SLURM job {job_id} that held it ended "
                    f"(the job was requeued; now {state}, restart {record.restarts})",
                )
            if state in _RUNNING_STATES:
                return Verdict(True, f"its SLURM job {job_id} is {state}")
            return Verdict(False, f"the SLURM job {job_id} that held it ended {state}")

    def _watch_lease(self, owner: Owner, identity: tuple, me: Owner) -> tuple[Verdict, tuple]:
        bound = max(self.stale_after, lease.MIN_RENEWALS_MISSED * owner.lease)
        say(
            f"{self.path.parent}: the lock is held by {owner.named()}, which cannot be checked from {me.host}: "
            f"watching whether it is renewed, for up to {lease.spoken(bound)}"
        )
        started = self.clock()
        look = min(lease.LOOK, bound / 20)
        while (watched := self.clock() - started) < bound:
            self.pause(look)
            found = self.read()
            if found is None or found[1] != identity:
                return Verdict(True, f"its lock was renewed {lease.spoken(watched)} into the watch"), identity
        return Verdict(False, f"its lock was not renewed for {lease.spoken(bound)} (watched from {me.host})"), identity


def _same_cluster(owner: Owner, me: Owner) -> bool:
    return owner.cluster is None or me.cluster is None or owner.cluster == me.cluster


def _this_host(owner: Owner, me: Owner) -> Verdict:
    """The owner is a process of this host: is it running?"""
    if owner.boot and me.boot and owner.boot != me.boot:
        return Verdict(False, "it was taken before this host's last boot")
    if owner.pid == me.pid and owner.start == me.start:
        return Verdict(True, "this process holds it")
    if not pid_alive(owner.pid):
        return Verdict(False, f"process {owner.pid} has ended")
    now = start_time(owner.pid)
    if owner.start is not None and now is not None and now != owner.start:
        return Verdict(False, f"process {owner.pid} has ended (its pid now belongs to another process)")
    return Verdict(True, f"process {owner.pid} runs")
