"""The lock of a checkpoint directory, ``<directory>/.lock``: one run at a
time on a directory, and a lock its owner left behind (a killed job, a node
that crashed or lost power) taken over by the next run at once. Knows files
and processes (no NetKet, no registry); process 0 of a run takes it
(:func:`nkserde.checkpoint.choice.choose_checkpoint`).

What it holds, one line of text (:class:`Owner`)::

    <host> <pid> boot:<boot id> start:<start time> [slurm:<job id>:<restart count>]

the owner's host and pid; the boot id of its host and the start time of its
process (Linux: ``/proc/sys/kernel/random/boot_id``, field 22 of
``/proc/<pid>/stat``; left out where there is no ``/proc``): a live pid is
the owner only if the host has not booted since and that process started
when the owner did (pids are reused, soonest after a reboot); in a SLURM
job, the job and its attempt. Locks of nkserde 0.x before these fields
(``<host> <pid> [slurm:...]``) are read as such.

How it is taken: the line is written to a temporary file beside the lock
and fsynced, then hard-linked to ``.lock``, which fails if a lock exists.
A lock is therefore absent or whole whatever stops the machine; a cut
between the two steps leaves the temporary file, which the next save
removes (:func:`nkserde.format.atomic.remove_stale_temps`). The lock is not
made durable beyond that (no directory fsync): it matters only while its
owner lives, and a power cut ends the owner. On a file system without hard
links the lock is created exclusively (``O_EXCL``) and its line written in
one write, then fsynced.

When it is taken over: its owner is dead (on this host: another boot id,
no process with its pid, or one that started at another time); it was taken
by an earlier attempt of this SLURM job (on any host: SLURM runs one attempt
of a job at a time); or it names no owner (empty, or not a lock line: an
older nkserde killed between creating and writing it, then a power cut) and
does not change while it is watched for ``SETTLE`` seconds (a live writer
fills it in that time). The stale lock is moved aside under a name of its
own and deleted only if it is the very file judged (same inode, size and
time): two processes that find one stale lock do not both take it. A lock
of a live process, or of another host (whose processes cannot be checked
from here), is never taken: :meth:`DirectoryLock.acquire` raises
NkserdeError naming it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
import time
from pathlib import Path
from typing import NamedTuple

from ..errors import CheckpointDirectoryError, NkserdeError
from ..format import bounded
from ..format.atomic import pid_alive, temp_name

LOCK_FILE = ".lock"
# seconds a lock without an owner in it is watched before it is taken over
SETTLE = 2.0
_LOOKS = 40  # looks at it in that time
_MAX_BYTES = 1024  # a lock line is ~100 bytes; a larger file is not a lock
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# link() refused by the file system (no hard links there), not by a lock in place
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}
# locks this process held and could not remove (a file system that turned
# read-only): its own, so its next run takes them over
_UNRELEASED: set[str] = set()


class Owner(NamedTuple):
    """What a lock says of the process that took it."""

    host: str
    pid: int
    boot: str | None = None  # the host's boot id when it took the lock
    start: int | None = None  # the process's start time, clock ticks since boot
    job: tuple[str, int] | None = None  # SLURM: (job id, restart count)

    def line(self) -> str:
        parts = [self.host, str(self.pid)]
        if self.boot:
            parts.append(f"boot:{self.boot}")
        if self.start is not None:
            parts.append(f"start:{self.start}")
        if self.job is not None:
            parts.append(f"slurm:{self.job[0]}:{self.job[1]}")
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
        )


def this_process() -> Owner:
    """The owner line this process writes."""
    return Owner(socket.gethostname(), os.getpid(), boot_id(), start_time(os.getpid()), _slurm_attempt())


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


def _pause(seconds: float) -> None:  # a test's handshake replaces it
    time.sleep(seconds)


class DirectoryLock:
    """``<directory>/.lock`` (see the module): :meth:`acquire` takes it or
    raises; :meth:`release` removes it."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_FILE
        self.held = False

    def acquire(self) -> None:
        """Takes the lock, taking over a stale one. Raises NkserdeError when
        a live process (or one of another host) holds it, naming it;
        CheckpointDirectoryError when the directory cannot be written."""
        me = this_process()
        line = me.line()
        temp = self._write_temp(line)
        try:
            for _ in range(3):
                if self._place(temp, line):
                    self.held = True
                    _UNRELEASED.discard(str(self.path))
                    return
                self._take_over_or_raise(me)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise NkserdeError(f"{self.path}: could not take over a stale lock (other processes are taking it too)")

    def owner(self) -> tuple[str, str]:
        """(host, pid) written in the lock file; ("", "") when it names no
        owner or is missing."""
        found = self._read()
        if found is None or found[0] is None:
            return "", ""
        return found[0].host, str(found[0].pid)

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

    # -- taking it

    def _failed(self, exc: OSError, what: str = "taking the lock failed") -> CheckpointDirectoryError:
        if isinstance(exc, FileNotFoundError):
            return CheckpointDirectoryError(exc.errno, f"{self.path.parent}: {what}: the directory is gone")
        return CheckpointDirectoryError(
            exc.errno,
            f"{self.path.parent}: {what}: {exc.strerror or exc}; checkpoints need a directory this process can write",
        )

    def _write_temp(self, line: str) -> Path:
        """``line`` in a new temporary file beside the lock, fsynced."""
        temp = self.path.parent / temp_name(f"{LOCK_FILE}.{secrets.token_hex(4)}")
        try:
            fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError as exc:  # gone, read-only, permission denied
            raise self._failed(exc) from None
        self._write_synced(fd, line, temp)
        return temp

    def _write_synced(self, fd: int, line: str, path: Path) -> None:
        """``line`` written to the new file ``path`` (open as ``fd``, closed
        here) and fsynced; on a failure (disk full, I/O error) the file is
        removed and the error raised as a CheckpointDirectoryError."""
        try:
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise self._failed(exc, f"writing the lock {LOCK_FILE} failed") from None

    def _place(self, temp: Path, line: str) -> bool:
        """Puts the lock in place; False if a lock is there."""
        try:
            os.link(temp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise self._failed(exc) from None
        try:  # no hard links here: created in place, its line in one write
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except OSError as exc:
            raise self._failed(exc) from None
        self._write_synced(fd, line, self.path)
        return True

    def _read(self) -> tuple[Owner | None, tuple] | None:
        """(the owner the lock names or None, the file's identity: device,
        inode, size, mtime); None if there is no lock."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failed(exc) from None
        try:
            text = bounded.read_capped(self.path, _MAX_BYTES, "lock file").decode(errors="replace")
        except FileNotFoundError:
            return None
        except (OSError, NkserdeError):  # too large, not a regular file, unreadable: no owner in it
            text = ""
        return Owner.parse(text), (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)

    def _take_over_or_raise(self, me: Owner) -> None:
        """Removes the lock in place if it is stale, else raises naming its
        owner. Returns at once if it is gone."""
        found = self._read()
        if found is None:
            return
        owner, identity = found
        if owner is None:
            found = self._watch(identity)
            if found is None:
                return
            owner, identity = found
        if owner is not None and not self._stale(owner, me):
            raise NkserdeError(self._in_use(owner, me))
        self._remove(identity)

    def _watch(self, identity: tuple) -> tuple[Owner | None, tuple] | None:
        """Watches a lock without an owner for ``SETTLE`` seconds: what it
        then names and its identity, (None, identity) if it did not change,
        None if it is gone. A lock that changes and still names no owner
        is being written by someone: NkserdeError."""
        for _ in range(_LOOKS):
            _pause(SETTLE / _LOOKS)
            found = self._read()
            if found is None or found[0] is not None:
                return found
            if found[1] != identity:
                raise NkserdeError(
                    f"{self.path.parent}: the checkpoint directory's lock is being written by another process "
                    f"right now (lock file {self.path}); two runs must not share a directory"
                )
        return None, identity

    def _stale(self, owner: Owner, me: Owner) -> bool:
        if str(self.path) in _UNRELEASED and (owner.host, owner.pid) == (me.host, me.pid):
            return True  # this process's own, left behind by a release that failed
        if owner.job is not None and me.job is not None and owner.job[0] == me.job[0] and owner.job[1] < me.job[1]:
            return True  # an earlier attempt of this SLURM job, on whatever host
        return owner.host == me.host and not _alive(owner, me)

    def _in_use(self, owner: Owner, me: Owner) -> str:
        where = f"(lock file {self.path}); two runs must not share a directory"
        if owner.host != me.host:
            return (
                f"{self.path.parent}: checkpoint directory is in use by process {owner.pid} on host {owner.host} "
                f"{where}. That host's processes cannot be checked from {me.host}: if no run of it uses the "
                "directory (its node went down), delete the lock file"
            )
        if owner.pid == me.pid:
            return f"{self.path.parent}: this process is already running a checkpointed run on this directory"
        return f"{self.path.parent}: checkpoint directory is in use by process {owner.pid} on host {owner.host} {where}"

    def _remove(self, identity: tuple) -> None:
        """Deletes the lock judged stale if it is still that file (device,
        inode, size, modification time: an inode number is reused at once):
        moved aside first, so that a lock another process has just put in
        its place is put back, not deleted."""
        aside = self.path.parent / temp_name(f"{LOCK_FILE}.stale.{secrets.token_hex(4)}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._failed(exc, "taking over a stale lock failed") from None
        try:
            moved = os.stat(aside)
            if (moved.st_dev, moved.st_ino, moved.st_size, moved.st_mtime_ns) != identity:
                with contextlib.suppress(OSError):
                    os.link(aside, self.path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(aside)


def _alive(owner: Owner, me: Owner) -> bool:
    """Whether the process ``owner`` names (of this host) is running."""
    if owner.boot and me.boot and owner.boot != me.boot:
        return False  # taken before this host's last boot
    if not pid_alive(owner.pid):
        return False
    now = start_time(owner.pid)
    return owner.start is None or now is None or now == owner.start  # else the pid went to another process


def _slurm_attempt() -> tuple[str, int] | None:
    """(job id, restart count) of the SLURM job this process runs in, or None."""
    job_id = os.environ.get("SLURM_JOB_ID", "").strip()
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0").strip()
    if not job_id or len(job_id.split()) != 1:
        return None
    return job_id, int(restarts) if restarts.isdigit() else 0
