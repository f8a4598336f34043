"""The checkpoint directory's file system failing for real: a file in its
place, a read-only bind mount (at the start, before the run, in the middle
of it), a tmpfs that fills up, the directory removed, no permission. Each
is an nkserde error or warning that names the directory and the operation
that failed; mid-run they follow ``on_write_error`` and nothing at the run's
end (the last write, retention, the lock) turns a warning into an
exception: the code after ``run()`` runs. The rerun, once the file system is
back, resumes from the newest checkpoint written and ends as the run never
interrupted.

The mounts need root (``mount``); where the tests cannot mount they skip,
and fail instead under ``NKSERDE_REQUIRE_MOUNTS=1`` (set by ``.ci/run``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import netket as nk
import pytest

import builders as B
import nkserde
from nkserde.errors import CheckpointDirectoryError

STEPS = 6
REQUIRED = os.environ.get("NKSERDE_REQUIRE_MOUNTS") == "1"


def _mount(*args):
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        reason = f"mount {' '.join(args)} failed: {done.stderr.strip()}"
        if REQUIRED:
            pytest.fail(f"NKSERDE_REQUIRE_MOUNTS=1 and {reason}")
        pytest.skip(reason)


def _umount(path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def bind_mount(path: Path):
    """``path`` bind-mounted on itself: :func:`read_only` can then flip it."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(path), str(path))
    try:
        yield path
    finally:
        _umount(path)


def read_only(path: Path, on: bool = True):
    _mount("-o", f"remount,bind,{'ro' if on else 'rw'}", str(path))


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


class AtStep(nk.callbacks.AbstractCallback):
    """Calls ``action()`` in on_step_end of step ``at``, after the loggers
    and once the checkpoint in flight (of ``checkpoint``, which
    :func:`run_warned` sets) is written: a file system that changes under
    a write in flight is another case."""

    at: int = nk.utils.struct.field(pytree_node=False, serialize=False)
    action: object = nk.utils.struct.field(pytree_node=False, serialize=False)
    checkpoint: object = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, at, action):
        self.at, self.action, self.checkpoint = at, action, None

    @property
    def callback_order(self) -> int:
        return 100

    def on_step_end(self, step, log_data, driver):
        if driver.step_count + 1 == self.at:
            if self.checkpoint is not None:
                self.checkpoint.wait()
            self.action()


@pytest.fixture(scope="module")
def reference():
    driver = B.vmc()
    driver.run(STEPS, out=None, show_progress=False)
    return B.leaves(driver)


def run_warned(directory, *callbacks, **options) -> list[str]:
    """A run of STEPS; returns the warnings it gave (the run must end
    normally: no exception reaches the script)."""
    ckpt = nkserde.Checkpoint(directory, **options)
    for callback in callbacks:
        if isinstance(callback, AtStep):
            callback.checkpoint = ckpt
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        B.vmc().run(STEPS, out=None, show_progress=False, callback=[ckpt, *callbacks])
    return [str(w.message) for w in warned if "nkserde" in str(w.message)]


def resume_ends_as_reference(directory, reference, **options):
    driver = B.vmc()
    ckpt = nkserde.Checkpoint(directory, **options)
    driver.run(STEPS, out=None, show_progress=False, callback=ckpt)
    B.assert_same_leaves(B.leaves(driver), reference)
    return ckpt


# ------------------------------------------------------------ at Checkpoint()


def test_a_file_where_the_directory_should_be(tmp_path):
    (tmp_path / "ckpt").write_text("notes")
    with pytest.raises(CheckpointDirectoryError, match=r"ckpt: is a file, not a directory: give the Checkpoint a dir"):
        nkserde.Checkpoint(tmp_path / "ckpt")
    with pytest.raises(CheckpointDirectoryError, match=r"is a file, not a directory"):
        nkserde.checkpointed(B.vmc(), tmp_path / "ckpt")
    with pytest.raises(CheckpointDirectoryError, match=r"ckpt/run-0: cannot be created: .*ckpt is a file"):
        nkserde.Checkpoint(tmp_path / "ckpt" / "run-0")


def test_a_read_only_directory_is_refused_when_the_checkpoint_is_made(tmp_path):
    with bind_mount(tmp_path / "ro") as ro:
        (ro / "existing").mkdir()
        read_only(ro)
        with pytest.raises(
            CheckpointDirectoryError, match=r"existing: is on a read-only file system; checkpoints need"
        ):
            nkserde.Checkpoint(ro / "existing")
        with pytest.raises(CheckpointDirectoryError, match=r"new/ckpt: cannot be created: .*ro is on a read-only file"):
            nkserde.Checkpoint(ro / "new" / "ckpt")


def test_no_permission_is_refused_when_the_checkpoint_is_made(tmp_path, monkeypatch):
    """Injected (root bypasses permissions, and this interpreter lives where
    another user cannot run it): access(2) says EACCES for the parent."""
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == tmp_path else real_access(p, mode))
    with pytest.raises(CheckpointDirectoryError, match=r"cannot be created: .* is not writable by this user") as exc:
        nkserde.Checkpoint(tmp_path / "ckpt")
    assert exc.value.errno == 13


def test_a_lock_that_cannot_be_taken_is_a_checkpoint_directory_error(tmp_path, monkeypatch):
    """Injected: creating the lock fails with EACCES at the run's start."""
    ckpt = nkserde.Checkpoint(tmp_path / "ckpt")
    real_open = os.open

    def open_(path, *args, **kwargs):
        if os.path.basename(path).startswith((".lock", "..lock.")):  # the lock, or the file it is linked from
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    with pytest.raises(CheckpointDirectoryError, match=r"ckpt: taking the lock failed: Permission denied"):
        B.vmc().run(STEPS, out=None, show_progress=False, callback=ckpt)


# ------------------------------------------------------------ at run start


def test_a_directory_that_turned_read_only_fails_the_run_start(tmp_path):
    with bind_mount(tmp_path / "ckpt") as directory:
        ckpt = nkserde.Checkpoint(directory)
        read_only(directory)
        calls = []
        with pytest.raises(CheckpointDirectoryError, match=r"ckpt: is on a read-only file system"):
            B.vmc().run(STEPS, out=None, show_progress=False, callback=[ckpt, AtStep(1, lambda: calls.append(1))])
        assert calls == []  # no step ran


# ------------------------------------------------------------------- mid-run


def test_read_only_in_the_middle_of_a_run_warns_and_the_run_ends(tmp_path, reference):
    """every=1, keep=2: read-only once step 2 is written (at the end of the
    third step); the later writes and, at the end, the lock's removal fail,
    each saying what failed; the run ends normally. Once the file system is
    writable again, the same script resumes from step 2 (nothing later was
    written) and ends as the straight run, in this process too."""
    with bind_mount(tmp_path / "ckpt") as directory:
        said = run_warned(directory, AtStep(3, lambda: read_only(directory)), every=1, keep=2)
        text = "\n".join(said)
        assert f"writing {directory / 'step-0000000003.nks'} failed" in text, text
        assert "Read-only file system" in text
        assert "releasing the lock .lock failed: Read-only file system" in text, text
        assert sorted(p.name for p in directory.glob("step-*.nks")) == ["step-0000000001.nks", "step-0000000002.nks"]
        read_only(directory, False)
        ckpt = resume_ends_as_reference(directory, reference, every=1, keep=2)
        assert ckpt.resumed_from == 2


def test_retention_that_cannot_delete_says_so_apart_from_the_write(tmp_path, reference):
    """The directory read-only only for deletions (the write of step 4 is
    published, then retention deletes step 2): the warning names the
    deletion, never the write that succeeded."""
    directory = tmp_path / "ckpt"
    original = nkserde.checkpoint_files.directory.Path.unlink

    def unlink(self, *args, **kwargs):
        if self.name == "step-0000000002.nks":
            raise OSError(30, "Read-only file system", str(self))
        return original(self, *args, **kwargs)

    nkserde.checkpoint_files.directory.Path.unlink = unlink
    try:
        said = run_warned(directory, every=1, keep=2)
    finally:
        nkserde.checkpoint_files.directory.Path.unlink = original
    text = "\n".join(said)
    assert "deleting step-0000000002.nks (retention) failed: Read-only file system; it stays on disk" in text, text
    assert "writing" not in text, text
    assert (directory / "step-0000000002.nks").exists() and (directory / f"step-{STEPS:010d}.nks").exists()


def test_a_full_disk_costs_checkpoints_not_the_run(tmp_path, reference):
    """A tmpfs that holds about two checkpoints (keep=10): the later writes
    fail with ENOSPC, each warned about; the run ends; the newest checkpoint
    that was written verifies and resumes."""
    size = os.path.getsize(_one_checkpoint(tmp_path / "probe"))
    with small_tmpfs(tmp_path / "ckpt", f"{3 * size + 16384}") as directory:
        said = run_warned(directory, every=1, keep=10)
        text = "\n".join(said)
        assert "No space left on device" in text, text
        written = sorted(directory.glob("step-*.nks"))
        assert written and all(nkserde.verify(p) for p in written)
        newest = int(written[-1].stem.split("-")[1])
        assert newest < STEPS
        shutil.copytree(directory, tmp_path / "copied")
    ckpt = resume_ends_as_reference(tmp_path / "copied", reference, every=1, keep=10)
    assert ckpt.resumed_from == newest


def _one_checkpoint(directory: Path) -> Path:
    B.vmc().run(1, out=None, show_progress=False, callback=nkserde.Checkpoint(directory, every=1))
    return directory / "step-0000000001.nks"


def test_the_directory_removed_in_the_middle_of_a_run(tmp_path):
    directory = tmp_path / "ckpt"
    said = run_warned(directory, AtStep(3, lambda: shutil.rmtree(directory)), every=1)
    text = "\n".join(said)
    assert f"writing {directory / 'step-0000000003.nks'} failed" in text, text
    assert "there is no checkpoint yet" in text
