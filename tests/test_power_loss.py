"""A machine that loses power (issue 46): every byte not fsynced is gone,
and so is a directory entry (a new file, a rename, a new directory) whose
directory was not fsynced after it was made. Every mkdir, rename and link
a checkpointed run makes is traced here, and a model of such a file system
says what a cut at each moment would keep.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import netket as nk
import pytest

import builders as B
import nkserde
from nkserde.format.atomic import TEMP_MARK

# ------------------------------------------------------------------ directory entries


class Entries:
    """A file system on which a directory entry made or removed (mkdir,
    rename, link) survives a power cut only once its directory is
    fsynced, fed with the calls of this process under ``root``: what is
    pending, and the moves a cut could turn into losses (the source's
    removal made durable while the target's entry is not)."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.pending: dict[Path, set[tuple[str, str]]] = {}  # directory -> {("+"|"-", name)}
        self.losses: list[str] = []
        self.moves: list[tuple[Path, Path]] = []  # between directories

    def _ours(self, path) -> Path | None:
        path = Path(os.path.abspath(path))
        return path if path == self.root or self.root in path.parents else None

    def changed(self, path, sign: str) -> None:
        path = self._ours(path)
        if path is not None:
            self.pending.setdefault(path.parent, set()).add((sign, path.name))

    def moved(self, source, target) -> None:
        self.changed(source, "-")
        self.changed(target, "+")
        source, target = self._ours(source), self._ours(target)
        if source is not None and target is not None and source.parent != target.parent:
            self.moves.append((source, target))

    def synced(self, directory: Path) -> None:
        directory = self._ours(directory)
        if directory is None:
            return
        for source, target in self.moves:
            if source.parent == directory and ("+", target.name) in self.pending.get(target.parent, set()):
                self.losses.append(f"{source} leaves {directory} durably while {target} is not in {target.parent} yet")
        self.pending.pop(directory, None)

    def unsynced(self) -> list[str]:
        """Entries that must survive and would not: anything but temporary
        files and the lock (which matters only while its owner lives)."""
        return sorted(
            f"{sign}{directory / name}"
            for directory, changes in self.pending.items()
            for sign, name in changes
            if sign == "+" and not name.endswith(TEMP_MARK) and name != ".lock"
        )


@pytest.fixture
def entries(tmp_path, monkeypatch):
    traced = Entries(tmp_path)
    real = {name: getattr(os, name) for name in ("mkdir", "rename", "replace", "link", "fsync")}

    def mkdir(path, *args, **kwargs):
        real["mkdir"](path, *args, **kwargs)
        traced.changed(path, "+")

    def rename(source, target, *args, **kwargs):
        real["rename"](source, target, *args, **kwargs)
        traced.moved(source, target)

    def replace(source, target, *args, **kwargs):
        real["replace"](source, target, *args, **kwargs)
        traced.moved(source, target)

    def link(source, target, *args, **kwargs):
        real["link"](source, target, *args, **kwargs)
        traced.changed(target, "+")

    def fsync(fd):
        real["fsync"](fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            traced.synced(Path(os.readlink(f"/proc/self/fd/{fd}")))

    for function in (mkdir, rename, replace, link, fsync):
        monkeypatch.setattr(os, function.__name__, function)
    return traced


class AtEachStep(nk.callbacks.AbstractCallback):
    """Calls ``check()`` at the end of each step, after the Checkpoint's."""

    check: object = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, check):
        self.check = check

    @property
    def callback_order(self) -> int:
        return 100

    def on_step_end(self, step, log_data, driver):
        self.check()


def test_every_directory_entry_a_run_makes_is_durable_before_it_counts(tmp_path, entries):
    """A ``checkpointed(...)`` run, synchronous writes, a checkpoint every
    step: once a step has ended, every entry its checkpoint needs (the new
    directories ``ckpt`` and ``ckpt/run-0``, the fingerprint, the history
    log, the checkpoint) is durable in its directory; a rerun resumes."""
    seen = []

    def check():
        seen.append(entries.unsynced())

    driver = nkserde.checkpointed(B.vmc(), tmp_path / "ckpt", every=1, async_save=False)
    driver.run(3, out=nk.logging.RuntimeLog(), show_progress=False, callback=[AtEachStep(check)])
    assert len(seen) == 3
    assert seen == [[], [], []], seen
    assert entries.unsynced() == [] and entries.losses == []


def test_moving_checkpoints_aside_loses_none_in_a_cut(tmp_path, entries):
    """``resume="never"`` moves the old checkpoints into ``previous-<time>/``
    and the fresh run writes a fingerprint there at once: the moved files'
    new entries are durable before their removal from the directory is."""
    B.vmc().run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        B.vmc().run(1, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1, resume="never"))
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("previous-")]
    assert len(moved) == 1 and sorted(p.name for p in moved[0].glob("step-*.nks")), list(tmp_path.iterdir())
    assert entries.losses == [], entries.losses
    assert entries.unsynced() == []


def test_an_empty_jax_cache_entry_left_by_a_cut_is_removed_when_a_run_starts(tmp_path):
    """JAX writes its cache entries in place, unsynced: a cut leaves them
    empty, and JAX never replaces an entry that exists (it warns and
    compiles, in every run). nkserde's cache drops them when it is set."""
    from nkserde import jax_cache

    (tmp_path / "aa-cache").write_bytes(b"")
    (tmp_path / "bb-cache").write_bytes(b"an executable")
    (tmp_path / "notes").write_bytes(b"")
    assert jax_cache.prune(tmp_path, 1 << 30) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bb-cache", "notes"]
