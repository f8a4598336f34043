"""The lease of a checkpoint directory's lock: while its run lives, the
owner renews the lock (a new modification time, every ``stale_after / 10``
seconds, from a thread), so that a run on another host, which cannot
check the owner's process, can tell a lock whose run died (not renewed for
``stale_after``) from one in use. The reader watches the lock change on
its own clock (nkserde.checkpoint_files.lock_owner); the owner's clock is
never compared with anyone's.

``NKSERDE_LOCK_STALE_AFTER`` (seconds, default 300) sets the bound. It
must exceed the renewal interval plus the time a shared file system may
take to show another host's change (NFS caches a file's attributes for up
to 60 s by default).

A renewal first checks that the lock is still the one this process put in
place (the same file, its line): a lock taken over while its owner was
stopped or cut off for longer than the bound is not renewed but reported
lost (:attr:`Renewal.lost`), and its run stops before it writes again.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..errors import NkserdeError

ENVIRONMENT = "NKSERDE_LOCK_STALE_AFTER"
DEFAULT_STALE_AFTER = 300.0
RENEWALS_PER_BOUND = 10  # the owner renews every stale_after / 10 seconds
MIN_RENEWALS_MISSED = 3  # a reader waits for at least this many of the owner's renewals
LOOK = 2.0  # seconds between a reader's looks at a lock it watches


def stale_after() -> float:
    """Seconds a lock not renewed counts as in use: ``NKSERDE_LOCK_STALE_AFTER``, else 300."""
    value = os.environ.get(ENVIRONMENT)
    if not value:
        return DEFAULT_STALE_AFTER
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e9:
        raise NkserdeError(f"{ENVIRONMENT}={value!r}: expected a positive number of seconds")
    return seconds


def renewal_interval() -> float:
    return stale_after() / RENEWALS_PER_BOUND


def spoken(seconds: float) -> str:
    """``45 s``, ``6 min``: a duration in a message."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class Renewal:
    """The owner's renewal of the lock at ``path`` (its file ``identity``,
    device and inode, and its ``line``) every ``interval`` seconds, from a
    daemon thread started by :meth:`start`, stopped by :meth:`stop`.
    :meth:`check` says whether the lock is still this process's."""

    def __init__(self, path: Path, identity: tuple[int, int], line: str, interval: float):
        self.path, self.identity, self.line, self.interval = Path(path), identity, line, interval
        self.lost: str | None = None  # why the lock is no longer this process's
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._renew_until_stopped, name="nkserde-lock-renewal", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)
        self._thread = None

    def check(self) -> str | None:
        """None while the lock at ``path`` is the file this process placed,
        holding its line; else why not (and :attr:`lost` says it from now
        on). An error reading it (a file system that does not answer) is
        no verdict: None."""
        if self.lost is None:
            try:
                info = os.stat(self.path)
                with open(self.path, "rb") as f:
                    text = f.read(4096).decode(errors="replace")
            except FileNotFoundError:
                self.lost = f"{self.path}: the lock was removed while this run held it"
            except OSError:
                return None
            else:
                if (info.st_dev, info.st_ino) != self.identity or text.strip() != self.line:
                    holder = text.split()[:2]
                    by = f" by process {holder[1]} on host {holder[0]}" if len(holder) == 2 else ""
                    self.lost = f"{self.path}: the lock was taken over{by} while this run held it"
        return self.lost

    def renew(self) -> None:
        """One renewal: a new modification time on the lock, if it is still
        this process's."""
        if self.check() is None:
            try:
                os.utime(self.path)
            except OSError:
                pass  # the next renewal tries again; a reader waits for several

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew()
            if self.lost is not None:
                return
