"""nkserde.checkpoint_files.lock: one run per directory; stale locks taken
over (at once: a rerun right after a crash or a power cut must start), a
lock being written or held by a live process never."""

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nkserde.checkpoint_files import lock as lock_module
from nkserde.checkpoint_files.lock import DirectoryLock, Owner, this_process
from nkserde.errors import NkserdeError


def test_acquire_writes_host_and_pid_and_release_removes(tmp_path):
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held
    text = (tmp_path / ".lock").read_text()
    assert text.startswith(f"{socket.gethostname()} {os.getpid()} ")
    assert Owner.parse(text) == this_process(lock_module.lease.renewal_interval())
    assert this_process().boot and this_process().start  # Linux: the boot id and the start time are there
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]  # its temporary file is gone
    lock.release()
    assert not (tmp_path / ".lock").exists() and not lock.held


def test_a_second_lock_in_the_same_process_is_refused(tmp_path):
    first = DirectoryLock(tmp_path)
    first.acquire()
    with pytest.raises(NkserdeError, match="already running"):
        DirectoryLock(tmp_path).acquire()
    first.release()


def test_a_live_process_of_this_host_keeps_its_lock(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".lock").write_text(f"{socket.gethostname()} {child.pid}")
        with pytest.raises(NkserdeError, match=f"in use by process {child.pid}"):
            DirectoryLock(tmp_path).acquire()
    finally:
        child.kill()
        child.wait()


def test_a_dead_process_lock_is_taken_over(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid is dead now
    (tmp_path / ".lock").write_text(f"{socket.gethostname()} {child.pid}")
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert Owner.parse((tmp_path / ".lock").read_text()).pid == os.getpid()
    lock.release()


def test_another_hosts_lock_is_never_taken(tmp_path):
    (tmp_path / ".lock").write_text("some-other-node 1")
    with pytest.raises(NkserdeError, match="on host some-other-node"):
        DirectoryLock(tmp_path).acquire()


def test_another_hosts_lock_says_it_cannot_be_checked(tmp_path):
    (tmp_path / ".lock").write_text("some-other-node 4242 boot:x start:1")
    with pytest.raises(NkserdeError, match="cannot be checked from") as refused:
        DirectoryLock(tmp_path).acquire()
    assert "delete the lock file" in str(refused.value)
    assert (tmp_path / ".lock").exists()


@pytest.fixture
def looks(monkeypatch):
    """The watch of a lock without an owner, without its wait: the looks
    it took."""
    taken = []
    monkeypatch.setattr(lock_module, "_pause", taken.append)
    return taken


@pytest.mark.parametrize("content", ["", "myhost", "myhost 12x", "\x00" * 300, "x" * 5000])
def test_a_lock_without_an_owner_is_taken_over_once_watched(tmp_path, looks, content):
    """An empty or torn lock (an older nkserde killed, or cut, between
    creating and writing it): taken over, whatever its age, once it has not
    changed for SETTLE seconds; before, it is "in use" for 10 s after a
    power cut, and refused an immediate rerun."""
    (tmp_path / ".lock").write_text(content)
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held and len(looks) == lock_module._LOOKS
    assert sum(looks) == pytest.approx(lock_module.SETTLE)
    lock.release()


def test_a_lock_being_written_by_a_live_process_is_not_taken(tmp_path, monkeypatch):
    """An older nkserde creates its lock, then writes it: a lock found
    empty while its live owner is between the two is watched, seen
    written, and refused as that process's."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, socket, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY)\n"
            "print('created', flush=True)\n"
            "sys.stdin.readline()\n"
            "os.write(fd, f'{socket.gethostname()} {os.getpid()}'.encode())\n"
            "print('written', flush=True)\n"
            "time.sleep(60)\n",
            str(tmp_path / ".lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "created\n"

        def pause(seconds):  # the watch's first look: its owner writes it now
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "written\n"

        monkeypatch.setattr(lock_module, "_pause", pause)
        with pytest.raises(NkserdeError, match=f"in use by process {child.pid} on host"):
            DirectoryLock(tmp_path).acquire()
    finally:
        child.kill()
        child.wait()


def test_a_lock_rewritten_while_watched_without_an_owner_is_refused(tmp_path, monkeypatch):
    path = tmp_path / ".lock"
    path.write_text("")

    def pause(seconds):
        path.write_text("half")  # someone writes it, and not yet whole

    monkeypatch.setattr(lock_module, "_pause", pause)
    with pytest.raises(NkserdeError, match="being written by another process right now"):
        DirectoryLock(tmp_path).acquire()


def test_a_lock_of_before_the_last_boot_is_taken_over_though_its_pid_lives(tmp_path):
    """A machine that crashed and booted again: the lock's pid now belongs
    to another process (here: the parent of this one, alive)."""
    me = this_process()
    (tmp_path / ".lock").write_text(me._replace(pid=os.getppid(), boot="an-earlier-boot", start=None).line())
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held
    lock.release()


def test_a_reused_pid_is_not_the_owner(tmp_path):
    """Same boot, the pid alive, but its process started at another time
    than the lock's owner: the owner is dead, its pid reused."""
    me = this_process()
    parent = lock_module.start_time(os.getppid())
    assert parent is not None
    (tmp_path / ".lock").write_text(me._replace(pid=os.getppid(), start=parent + 1).line())
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    lock.release()
    (tmp_path / ".lock").write_text(me._replace(pid=os.getppid(), start=parent).line())  # that very process
    with pytest.raises(NkserdeError, match=f"in use by process {os.getppid()}"):
        DirectoryLock(tmp_path).acquire()


def test_the_lock_is_absent_or_whole_wherever_taking_it_stops(tmp_path, monkeypatch):
    """Its line is written and fsynced under a temporary name, then linked:
    at the link, the file holds the whole line and has been fsynced; stopped
    there, no lock exists (a cut would leave the temporary file, a dead
    process's, which the next save removes)."""
    synced = set()
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd):
        real_fsync(fd)
        synced.add(os.fstat(fd).st_ino)

    def link(source, target):
        assert Owner.parse(Path(source).read_text()) == this_process(lock_module.lease.renewal_interval())
        assert os.stat(source).st_ino in synced
        raise KeyboardInterrupt  # the machine stops here

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    with pytest.raises(KeyboardInterrupt):
        DirectoryLock(tmp_path).acquire()
    assert not (tmp_path / ".lock").exists()
    monkeypatch.setattr(os, "link", real_link)
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held
    lock.release()


def test_without_hard_links_the_lock_is_created_in_place(tmp_path, monkeypatch):
    def link(source, target):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", link)
    first = DirectoryLock(tmp_path)
    first.acquire()
    assert Owner.parse((tmp_path / ".lock").read_text()) == this_process(lock_module.lease.renewal_interval())
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]
    with pytest.raises(NkserdeError, match="already running"):
        DirectoryLock(tmp_path).acquire()
    first.release()
    assert not (tmp_path / ".lock").exists()


def test_a_stale_lock_replaced_meanwhile_is_put_back_not_deleted(tmp_path):
    """Two processes judge one stale lock: the first replaces it with its
    own; the second's removal finds another file (inode) in its place and
    puts it back."""
    path = tmp_path / ".lock"
    path.write_text(f"{socket.gethostname()} 999999999")
    info = os.stat(path)
    stale = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    path.unlink()
    fresh = f"{socket.gethostname()} {os.getppid()}"
    path.write_text(fresh)  # the first process's lock, a new file (its inode number may be the old one's)
    DirectoryLock(tmp_path)._remove(stale)
    assert path.read_text() == fresh
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_old_and_new_lock_lines_parse():
    assert Owner.parse("node7 123") == Owner("node7", 123)
    assert Owner.parse("node7 123 slurm:4711:2") == Owner("node7", 123, job=("4711", 2))
    line = Owner("node7", 123, "b00t", 456, ("4711", 0)).line()
    assert line == "node7 123 boot:b00t start:456 slurm:4711:0"
    assert Owner.parse(line) == Owner("node7", 123, "b00t", 456, ("4711", 0))
    assert Owner.parse(line + " later:field") == Owner.parse(line)  # a later version's field
    for bad in ("", "node7", "node7 x", "node7 0", "node7 -3", "node7 123 boot", "node7 123 boot:a boot:b"):
        assert Owner.parse(bad) is None, bad


def test_release_without_acquire_leaves_others_lock(tmp_path):
    (tmp_path / ".lock").write_text("some-other-node 1")
    DirectoryLock(tmp_path).release()
    assert (tmp_path / ".lock").exists()
