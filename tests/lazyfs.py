"""LazyFS for the power-cut tests: a FUSE file system that keeps what is
written in its own cache until the writer fsyncs it, and drops every
unsynced byte on command, as a machine that loses power does.

    with LazyFS(binary(), root) as fs:     # mounted at fs.mount
        ...                                # processes write under fs.mount
        fs.power_cut()                     # its cache dropped, then mounted again
        fs.arm_crash("before", "rename", "nkserde-tmp", r"step-0000000004\\.nks$")
        fs.wait_crashed(process)           # LazyFS killed itself at that call
        fs.remount()

What LazyFS models is lost file contents; a create, rename, link or unlink
reaches the disk below it at once (a lost directory entry is tested apart:
tests/test_power_loss.py, the directory fsyncs).

The binary: ``$NKSERDE_LAZYFS`` (``.ci/run`` builds it with
``$NKSERDE_LAZYFS_TOOLS/build.sh``, by default
``/work/shared/tools/lazyfs/build.sh``, and writes the binary there when
the build is done, or ``<binary>.failed`` with its log). Mounting needs root
and /dev/fuse. Where the binary or the mount is missing the tests skip, and
fail instead under ``NKSERDE_REQUIRE_MOUNTS=1`` (CI), after waiting up to
``BUILD_TIMEOUT`` seconds for the build CI runs beside the suite.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

REQUIRED = os.environ.get("NKSERDE_REQUIRE_MOUNTS") == "1"
BUILD_TIMEOUT = 900  # seconds: CI builds LazyFS after SLURM's packages are in
MOUNT_TIMEOUT = 60  # seconds LazyFS may take to mount (it allocates its cache first)
CACHE_SIZE = "256mb"

CONFIG = """[faults]
fifo_path="{fifo}"
[cache]
apply_eviction=false
[cache.simple]
custom_size="{size}"
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile=""
"""


def unavailable(reason: str):
    """Skips the test, or fails it where LazyFS is required (CI)."""
    if REQUIRED:
        pytest.fail(f"NKSERDE_REQUIRE_MOUNTS=1 and {reason}")
    pytest.skip(reason)


def binary() -> str:
    """The LazyFS binary; skips or fails (see the module) without one."""
    path = os.environ.get("NKSERDE_LAZYFS", "")
    if not path:
        unavailable("no LazyFS: set NKSERDE_LAZYFS to a binary built by /work/shared/tools/lazyfs/build.sh")
    failed = Path(path + ".failed")
    deadline = time.monotonic() + (BUILD_TIMEOUT if REQUIRED else 0)
    while not os.access(path, os.X_OK) and not failed.exists() and time.monotonic() < deadline:
        time.sleep(2.0)
    if failed.exists():
        unavailable(f"building LazyFS failed:\n{failed.read_text()[-3000:]}")
    if not os.access(path, os.X_OK):
        unavailable(f"no LazyFS binary at {path}")
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0 or shutil.which("fusermount3") is None:
        unavailable("LazyFS needs root, /dev/fuse and fusermount3")
    return path


class LazyFS:
    """LazyFS mounted at ``root/mnt`` over ``root/disk`` (what survives a
    cut), in a process of its own; its output in ``root/lazyfs.log``."""

    def __init__(self, binary: str, root: Path, cache_size: str = CACHE_SIZE):
        self.binary = binary
        self.root = Path(root)
        self.mount = self.root / "mnt"
        self.disk = self.root / "disk"
        self.fifo = self.root / "faults.fifo"
        # LazyFS ignores a --config-path that holds "-o" (as /tmp/pytest-of-root does)
        self.config = Path(tempfile.mkdtemp(prefix="nkserde_lazyfs_")) / "lazyfs.toml"
        assert "-o" not in str(self.config).lower(), self.config
        self.log = self.root / "lazyfs.log"
        self.process: subprocess.Popen | None = None
        self.mounts = 0
        self._lines: list[str] = []
        self._seen = threading.Condition()
        for d in (self.mount, self.disk):
            d.mkdir(parents=True, exist_ok=True)
        self.config.write_text(CONFIG.format(fifo=self.fifo, size=cache_size))

    def __enter__(self) -> LazyFS:
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the process

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                str(self.mount),
                "--config-path",
                str(self.config),
                "-o",
                "allow_other",
                "-o",
                "modules=subdir",
                "-o",
                f"subdir={self.disk}",
                "-f",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(self.mount):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                unavailable(f"LazyFS did not mount {self.mount}:\n{self.output()[-3000:]}")
            time.sleep(0.05)
        self.mounts += 1

    def _read(self, process):
        with open(self.log, "a") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                with self._seen:
                    self._lines.append(line)
                    self._seen.notify_all()

    def output(self) -> str:
        return "".join(self._lines)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def mounted(self) -> bool:
        """Whether the mount is in the mount table (live, or left by a
        LazyFS that crashed)."""
        with open("/proc/self/mounts") as mounts:
            return any(line.split()[1] == str(self.mount) for line in mounts if len(line.split()) > 1)

    def stop(self) -> None:
        """Unmounts (LazyFS then exits; a crashed one is only unmounted)."""
        if self.mounted():
            done = subprocess.run(["fusermount3", "-u", str(self.mount)], capture_output=True, text=True)
            if done.returncode != 0:  # still busy, or its daemon is dead: detach it
                subprocess.run(["fusermount3", "-u", "-z", str(self.mount)], capture_output=True)
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def close(self) -> None:
        """Unmounts, and removes the configuration written outside ``root``."""
        self.stop()
        shutil.rmtree(self.config.parent, ignore_errors=True)

    def remount(self) -> None:
        """Unmounts and mounts again: the next boot."""
        self.stop()
        self.start()

    # -- commands

    def _command(self, command: str, answer: str | None, timeout: float = 60) -> None:
        start = len(self._lines)
        if not self.alive():
            raise AssertionError(f"LazyFS is not running: cannot send {command!r}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)  # never blocks on a reader that is gone
                break
            except OSError as exc:  # ENXIO: its reader of the fifo is not open yet (a mount just made)
                if exc.errno not in (errno.ENXIO, errno.ENOENT) or not self.alive() or time.monotonic() > deadline:
                    raise AssertionError(f"LazyFS does not read its fifo for {command!r}: {exc}") from exc
                time.sleep(0.05)
        try:
            os.write(fd, (command + "\n").encode())
        finally:
            os.close(fd)
        if answer is None:
            return
        with self._seen:
            ok = self._seen.wait_for(lambda: any(answer in line for line in self._lines[start:]), timeout=timeout)
        if not ok:
            raise AssertionError(f"LazyFS did not answer {command!r} with {answer!r}:\n{self.output()[-3000:]}")

    def power_cut(self) -> None:
        """Drops every byte not fsynced, then mounts again (the reboot).
        The processes that wrote must be dead already (SIGKILL)."""
        self._command("lazyfs::clear-cache", "cache is cleared")
        self.remount()

    def persist(self) -> None:
        """Writes everything cached to the disk below (what a kernel's
        writeback may do at any moment)."""
        self._command("lazyfs::cache-checkpoint", "checkpoint is done")

    def arm_crash(self, timing: str, op: str, from_regex: str, to_regex: str | None = None) -> None:
        """LazyFS kills itself (losing its cache: a power cut) ``timing``
        ("before" or "after") the first ``op`` (fsync, write, create,
        rename, link, unlink, ...) on a path matching ``from_regex`` (and,
        for rename and link, to one matching ``to_regex``). Regexes hold
        neither ``=`` nor ``::``. Stays armed until the next mount."""
        command = f"lazyfs::crash::timing={timing}::op={op}::from_rgx={from_regex}"
        if to_regex is not None:
            command += f"::to_rgx={to_regex}"
        self._command(command, "VALID crash fault")
