"""The lock of a checkpoint directory, ``<directory>/.lock``: one run at a
time on a directory, and a lock its owner left behind (a killed job, a node
that crashed or lost power) taken over by the next run without a person,
on this host or another. Knows files and processes (no NetKet, no
registry); SLURM through the function it is handed. Process 0 of a run
takes it as the run starts (:func:`nkserde.checkpoint.persist.restore.resume`).

What it holds is one line of text naming its owner
(:class:`~nkserde.checkpoint_files.lock_owner.Owner`): host, pid, boot id,
start time, SLURM job and attempt, lease.

How it is taken: the line is written to a temporary file beside the lock
and fsynced, then hard-linked to ``.lock``, which fails if a lock exists.
A lock is therefore absent or whole whatever stops the machine; a cut
between the two steps leaves the temporary file, which the next save
removes (:func:`nkserde.format.atomic.remove_stale_temps`). The lock is not
made durable beyond that (no directory fsync): it matters only while its
owner lives, and a power cut ends the owner. On a file system without hard
links the lock is created exclusively (``O_EXCL``) and its line written in
one write, then fsynced.

While it is held: its owner renews it (nkserde.checkpoint_files.lease), so
that another host can tell a live run from a dead one, and reports it lost
if another run took it over meanwhile (:attr:`DirectoryLock.lost`).

When it is taken over: when its owner is judged dead
(nkserde.checkpoint_files.lock_owner: an earlier attempt of this SLURM
job; a process of this host that ended; a SLURM job that ended, as SLURM
says; a lock of another host not renewed for the lease's bound); or when
it names no owner (empty, or not a lock line: an older nkserde killed
between creating and writing it, then a power cut) and does not change
while it is watched for ``SETTLE`` seconds (a live writer fills it in that
time). The stale lock is moved aside under a name of its own and deleted
only if it is the very file judged (same inode, size and time): two
processes that find one stale lock do not both take it. A lock of a live
owner is never taken: :meth:`DirectoryLock.acquire` raises NkserdeError
naming it and why it was judged alive. Once it holds the lock, the run
removes the temporary files that runs of other hosts left in the directory
(:func:`nkserde.format.atomic.remove_stale_temps`): no other run uses it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import time
from pathlib import Path

from .._log import say
from ..errors import CheckpointDirectoryError, NkserdeError
from ..format import bounded
from ..format.atomic import remove_stale_temps, temp_name
from . import lease
from .lock_owner import Judge, JobStates, Owner, Verdict, boot_id, start_time, this_process

__all__ = ["DirectoryLock", "LOCK_FILE", "Owner", "boot_id", "start_time", "this_process"]

LOCK_FILE = ".lock"
# seconds a lock without an owner in it is watched before it is taken over
SETTLE = 2.0
_LOOKS = 40  # looks at it in that time
_MAX_BYTES = 1024  # a lock line is ~150 bytes; a larger file is not a lock
# link() refused by the file system (no hard links there), not by a lock in place
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}
# locks this process held and could not remove (a file system that turned
# read-only): its own, so its next run takes them over
_UNRELEASED: set[str] = set()


def _pause(seconds: float) -> None:  # a test's handshake replaces it
    time.sleep(seconds)


_clock = time.monotonic  # the clock a watch of the lock reads (a test's in its place)


class DirectoryLock:
    """``<directory>/.lock`` (see the module): :meth:`acquire` takes it or
    raises; :meth:`release` removes it. ``jobs``: SLURM's record of a job
    (``nkserde.checkpoint.job.slurm.job_record``), to judge a lock another job
    holds; None judges such a lock by its lease."""

    def __init__(self, directory: Path, jobs: JobStates | None = None):
        self.path = Path(directory) / LOCK_FILE
        self.jobs = jobs
        self.held = False
        self.took_over: str | None = None  # why the lock found in place was judged dead
        self.line: str | None = None  # the line this object wrote while it holds the lock
        self._renewal: lease.Renewal | None = None

    def acquire(self) -> None:
        """Takes the lock, taking over a stale one (and says so). Raises
        NkserdeError when a live run holds it, naming it and why it was
        judged alive; CheckpointDirectoryError when the directory cannot
        be written."""
        me = this_process(lease.renewal_interval())
        line = me.line()
        self.took_over = None
        temp = self._write_temp(line)
        try:
            for _ in range(3):
                placed = self._place(temp, line)
                if placed is not None:
                    self._held(placed, me)
                    return
                self._take_over_or_raise(me)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise NkserdeError(f"{self.path}: could not take over a stale lock (other processes are taking it too)")

    @property
    def lost(self) -> str | None:
        """While held: None if the lock is still this process's, else why
        not (another run took it over while this one was stopped or cut off
        for longer than the lease's bound, or it was deleted). Reads it."""
        return self._renewal.check() if self._renewal is not None else None

    @property
    def renewal_lost(self) -> str | None:
        """:attr:`lost` as the renewal last found it (no file read)."""
        return self._renewal.lost if self._renewal is not None else None

    def owner(self) -> tuple[str, str]:
        """(host, pid) written in the lock file; ("", "") when it names no
        owner or is missing."""
        found = self._read()
        if found is None or found[0] is None:
            return "", ""
        return found[0].host, str(found[0].pid)

    def release(self) -> OSError | None:
        """Removes the lock if this object holds it and it is still its own;
        otherwise does nothing. Returns the error if removing it failed (a
        read-only file system): the lock stays, and is stale once this
        process has ended."""
        if not self.held:
            return None
        self.held = False
        renewal, self._renewal = self._renewal, None
        if renewal is not None:
            renewal.stop()
            if renewal.check() is not None:
                return None  # another run's now
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            _UNRELEASED.add(str(self.path))
            return exc
        return None

    # -- taking it

    def _held(self, placed: tuple[int, int], me: Owner) -> None:
        """The lock is this process's: renewed from now on, and what runs of
        other hosts left in the directory removed."""
        self.held, self.line = True, me.line()
        _UNRELEASED.discard(str(self.path))
        self._renewal = lease.Renewal(self.path, placed, me.line(), me.lease)
        self._renewal.start()
        if self.took_over is not None:
            say(f"{self.path.parent}: took over the lock: {self.took_over}")
        remove_stale_temps(self.path.parent, other_hosts=True, keep=(LOCK_FILE,))

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

    def _place(self, temp: Path, line: str) -> tuple[int, int] | None:
        """Puts the lock in place: its (device, inode); None if a lock is there."""
        try:
            os.link(temp, self.path)
            info = os.stat(temp)
            return info.st_dev, info.st_ino
        except FileExistsError:
            return None
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise self._failed(exc) from None
        try:  # no hard links here: created in place, its line in one write
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        except OSError as exc:
            raise self._failed(exc) from None
        info = os.fstat(fd)
        self._write_synced(fd, line, self.path)
        return info.st_dev, info.st_ino

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
        if owner is None:
            verdict = Verdict(False, f"it named no owner and did not change for {SETTLE:g} s")
        elif str(self.path) in _UNRELEASED and (owner.host, owner.pid) == (me.host, me.pid):
            verdict = Verdict(False, "this process held it and could not remove it")
        else:
            judge = Judge(self.path, self._read, self.jobs, lease.stale_after(), pause=_pause, clock=_clock)
            verdict, identity = judge(owner, identity, me)
        if verdict.alive:
            raise NkserdeError(self._in_use(owner, me, verdict))
        self.took_over = f"{owner.named()}: {verdict.why}" if owner is not None else verdict.why
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

    def _in_use(self, owner: Owner, me: Owner, verdict: Verdict) -> str:
        if owner.host == me.host and owner.pid == me.pid:
            return f"{self.path.parent}: this process is already running a checkpointed run on this directory"
        message = (
            f"{self.path.parent}: checkpoint directory is in use by {owner.named()} (lock file {self.path}): "
            f"{verdict.why}; two runs must not share a directory"
        )
        if owner.host != me.host and owner.lease is None and (owner.job is None or self.jobs is None):
            message += ". If no run uses the directory any more (its node went down), delete the lock file"
        return message

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
                self.took_over = None
                with contextlib.suppress(OSError):
                    os.link(aside, self.path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(aside)
