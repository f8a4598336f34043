"""The lock of a checkpoint directory: two runs must never write one
directory. Knows files and processes only (no NetKet)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

from ..errors import NkserdeError
from ..format import bounded
from ..format.atomic import pid_alive


# seconds after which a lock file without an owner in it is taken over
UNREADABLE_GRACE = 10.0


class DirectoryLock:
    """``<directory>/.lock``, holding ``"<host> <pid>"`` of its owner.

    :meth:`acquire` creates it exclusively (``O_EXCL``) or raises
    NkserdeError naming the owner. A lock left by a dead process of this
    host (a killed job) is stale and taken over; a lock of another host is
    never taken (its process cannot be checked from here). A lock file
    without an owner in it (a process killed between creating and writing
    it) is stale once it is ``UNREADABLE_GRACE`` seconds old."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / ".lock"
        self.held = False

    def acquire(self) -> None:
        me = f"{socket.gethostname()} {os.getpid()}"
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                host, pid = self.owner()
                if self._stale(host, pid):
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
            with os.fdopen(fd, "w") as f:
                f.write(me)
            self.held = True
            return
        raise NkserdeError(f"{self.path}: could not take over a stale lock")

    def owner(self) -> tuple[str, str]:
        """(host, pid) written in the lock file; ("", "") when it is
        unreadable or half written."""
        try:  # "host pid": a few bytes; a larger file is not an owner
            host, pid = bounded.read_capped(self.path, 1024, "lock file").decode().split()
        except (OSError, ValueError, NkserdeError):
            return "", ""
        return host, pid

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

    def release(self) -> None:
        """Removes the lock if this object holds it; otherwise does nothing."""
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self.held = False
