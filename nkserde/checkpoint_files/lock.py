"""The lock of a checkpoint directory: ``<directory>/.lock`` while a run
uses it, so that two runs never share a directory. Knows files and
processes (no NetKet, no registry); taken by
:class:`nkserde.checkpoint_files.directory.RunDirectory`'s user, process 0
of a run."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

from ..errors import CheckpointDirectoryError, NkserdeError
from ..format import bounded
from ..format.atomic import pid_alive

LOCK_FILE = ".lock"

# seconds after which a lock file without an owner in it is taken over
UNREADABLE_GRACE = 10.0
# locks this process held and could not remove (a file system that turned
# read-only): its own, so its next run takes them over
_UNRELEASED: set[str] = set()


class DirectoryLock:
    """``<directory>/.lock``, holding ``"<host> <pid>"`` of its owner, and
    in a SLURM job ``" slurm:<job id>:<restart count>"``.

    :meth:`acquire` creates it exclusively (``O_EXCL``) or raises
    NkserdeError naming the owner. A lock left by a dead process of this
    host (a killed job) is stale and taken over; so is one of an earlier
    attempt of this same SLURM job, whichever host it ran on (SLURM runs
    one attempt of a job at a time: a requeued job that was killed on
    another node takes its directory back). Any other lock of another host
    is never taken (its process cannot be checked from here). A lock file
    without an owner in it (a process killed between creating and writing
    it) is stale once it is ``UNREADABLE_GRACE`` seconds old."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_FILE
        self.held = False

    def acquire(self) -> None:
        me = f"{socket.gethostname()} {os.getpid()}"
        job = _slurm_attempt()
        content = me if job is None else f"{me} slurm:{job[0]}:{job[1]}"
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileNotFoundError as exc:
                raise CheckpointDirectoryError(
                    exc.errno, f"{self.path.parent}: taking the lock failed: the directory is gone"
                ) from None
            except FileExistsError:
                host, pid = self.owner()
                mine_left_behind = str(self.path) in _UNRELEASED and f"{host} {pid}" == me
                if self._stale(host, pid) or self._earlier_attempt(job) or mine_left_behind:
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
                    continue
                if f"{host} {pid}" == me:
                    raise NkserdeError(
                        f"{self.path.parent}: this process is already running a checkpointed run on this directory"
                    ) from None
                owner = f"process {pid} on host {host}" if host else "a process that is writing its lock"
                raise NkserdeError(
                    f"{self.path.parent}: checkpoint directory is in use by {owner} (lock file "
                    f"{self.path}); two runs must not share a directory"
                ) from None
            except OSError as exc:  # read-only, permission denied, disk full
                raise CheckpointDirectoryError(
                    exc.errno,
                    f"{self.path.parent}: taking the lock failed: {exc.strerror or exc}; checkpoints need a "
                    "directory this process can write",
                ) from None
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(content)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    self.path.unlink()
                raise CheckpointDirectoryError(
                    exc.errno, f"{self.path.parent}: writing the lock {self.path.name} failed: {exc.strerror or exc}"
                ) from None
            self.held = True
            _UNRELEASED.discard(str(self.path))
            return
        raise NkserdeError(f"{self.path}: could not take over a stale lock")

    def owner(self) -> tuple[str, str]:
        """(host, pid) written in the lock file; ("", "") when it is
        unreadable or half written."""
        fields = self._fields()
        return (fields[0], fields[1]) if len(fields) >= 2 else ("", "")

    def _fields(self) -> list[str]:
        try:  # "host pid [slurm:job:restart]": a few bytes; a larger file is not an owner
            fields = bounded.read_capped(self.path, 1024, "lock file").decode().split()
        except (OSError, ValueError, NkserdeError):
            return []
        return fields if len(fields) in (2, 3) else []

    def _earlier_attempt(self, job: tuple[str, int] | None) -> bool:
        """Whether the lock was taken by an earlier attempt of ``job`` (this
        process's SLURM job: id, restart count)."""
        fields = self._fields()
        if job is None or len(fields) != 3 or not fields[2].startswith("slurm:"):
            return False
        _, job_id, restart = (fields[2].split(":") + ["", ""])[:3]
        return job_id == job[0] and restart.isdigit() and int(restart) < job[1]

    def _stale(self, host: str, pid: str) -> bool:
        if host == socket.gethostname() and pid.isdigit():
            return not pid_alive(int(pid))
        if not host:
            # half written: its owner died between creating and writing it,
            # or is writing it right now (give it UNREADABLE_GRACE seconds)
            try:
                return time.time() - self.path.stat().st_mtime > UNREADABLE_GRACE
            except FileNotFoundError:
                return True
        return False

    def release(self) -> OSError | None:
        """Removes the lock if this object holds it; otherwise does nothing.
        Returns the error if removing it failed (a read-only file system):
        the lock stays, and is stale once this process has ended."""
        if not self.held:
            return None
        self.held = False
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            _UNRELEASED.add(str(self.path))
            return exc
        return None


def _slurm_attempt() -> tuple[str, int] | None:
    """(job id, restart count) of the SLURM job this process runs in, or None."""
    job_id = os.environ.get("SLURM_JOB_ID", "").strip()
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0").strip()
    if not job_id:
        return None
    return job_id, int(restarts) if restarts.isdigit() else 0
