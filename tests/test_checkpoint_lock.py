"""nkserde.checkpoint_files.directory.DirectoryLock: one run per directory; stale locks taken over."""

import os
import socket
import subprocess
import sys
import time

import pytest

from nkserde.checkpoint_files.directory import DirectoryLock
from nkserde.errors import NkserdeError


def test_acquire_writes_host_and_pid_and_release_removes(tmp_path):
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held
    assert (tmp_path / ".lock").read_text() == f"{socket.gethostname()} {os.getpid()}"
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
    assert (tmp_path / ".lock").read_text().endswith(str(os.getpid()))
    lock.release()


def test_another_hosts_lock_is_never_taken(tmp_path):
    (tmp_path / ".lock").write_text("some-other-node 1")
    with pytest.raises(NkserdeError, match="on host some-other-node"):
        DirectoryLock(tmp_path).acquire()


def test_a_half_written_lock_is_stale_once_old(tmp_path):
    (tmp_path / ".lock").write_text("")
    with pytest.raises(NkserdeError, match="in use"):  # its owner may be writing it now
        DirectoryLock(tmp_path).acquire()
    old = time.time() - 60
    os.utime(tmp_path / ".lock", (old, old))
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held


def test_release_without_acquire_leaves_others_lock(tmp_path):
    (tmp_path / ".lock").write_text("some-other-node 1")
    DirectoryLock(tmp_path).release()
    assert (tmp_path / ".lock").exists()
