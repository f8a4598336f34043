"""A machine that loses power (issue 46): every byte not fsynced is gone.

With LazyFS (tests/lazyfs.py, tests/power_cuts.py), the checkpoints, the
JsonLog and nkserde's compilation cache all on it: a first chain of runs of
a checkpointed VMC whose cold first run is cut between saves (what it
compiled is lost), then two chains, one per writer (synchronous in
``checkpointed(...)``, the background writer in a ``Checkpoint``
callback), cut at fixed moments (start-up, the lock held, inside a save,
the history log's append, after the last checkpoint), each rerun at once;
each chain ends bit for bit as the run never interrupted, every step logged
once, no rerun refused. ``python tests/power_cuts.py`` cuts at random.

What LazyFS does not model, a directory entry lost because its directory
was never fsynced, is tested here without it: every mkdir, rename and
link a checkpointed run makes is traced, and a model of such a file system
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

# ------------------------------------------------------------------ LazyFS


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from lazyfs import LazyFS, binary
    from power_cuts import Bench

    fs = LazyFS(binary(), tmp_path_factory.mktemp("lazyfs"))
    fs.start()
    made = None
    try:
        made = Bench(fs, tmp_path_factory.mktemp("scratch"))
        yield made
    finally:
        if made is not None:
            made.runner.kill_all()
        fs.close()


def _cuts(writer):
    """The moments (tests/power_cuts.py draws them all at random). The
    synchronous chain runs first, on an empty compilation cache: its first
    cut loses what the cold run compiled."""
    from power_cuts import crash, step_hold

    if writer == "sync":
        return [
            step_hold(2),  # between saves (a checkpoint every step), the compiled code unsynced
            crash("inside a save: before a history append is synced", "before", "fsync", r"history-\d+\.nkh$"),
            crash("start-up: after the lock is linked into place", "after", "link", "nkserde-tmp", r"\.lock$"),
        ]
    return [
        crash("start-up: before the fingerprint is published", "before", "rename", "tmp", r"fingerprint\.json$"),
        crash("inside a background save: before its data is synced", "before", "fsync", r"step-0+3\.nks.*nkserde-tmp"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["sync", "async"])
def test_power_cuts_the_rerun_ends_as_the_uninterrupted_run(bench, writer):
    """Each cut is taken (none missed) and every rerun resumes from the
    newest checkpoint the disk holds, unrefused (tests/power_cuts.py
    checks it at each start); the chain ends as the uninterrupted run, its
    JsonLog holding each step once, no lock left behind. A cold run's cut
    empties the cache entries it wrote; the rerun meets none unreadable."""
    from power_cuts import run_chain

    cold = not any(bench.cache.rglob("*"))  # the first chain on the mount
    cuts = _cuts(writer)
    stats = run_chain(bench, f"chain-{writer}", writer, cuts)
    print(f"{writer}: {dict(stats)}")  # the figures, with pytest -s
    assert stats["cuts"] == len(cuts) and not stats["missed cuts"], dict(stats)
    assert stats["resumes"] >= 1, dict(stats)
    if cold:
        assert stats["cache entries emptied"] > 0, dict(stats)


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
    from nkserde.caches import jax_executables as jax_cache

    (tmp_path / "aa-cache").write_bytes(b"")
    (tmp_path / "bb-cache").write_bytes(b"an executable")
    (tmp_path / "notes").write_bytes(b"")
    assert jax_cache.prune(tmp_path, 1 << 30) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bb-cache", "notes"]


def test_a_migration_in_place_makes_its_backup_durable_before_it_replaces_the_file(tmp_path, monkeypatch):
    """``nkserde migrate --in-place``: the backup's bytes and its directory
    entry are fsynced before IN is replaced (durably): a cut can leave IN
    migrated only with its whole backup beside it."""
    import shutil

    from nkserde import cli

    old = tmp_path / "old.nks"
    shutil.copy(Path(__file__).parent / "fixtures" / "nkserde-ea7de03" / "vmc_adam.nks", old)
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        real_fsync(fd)
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def replace(source, target, *args, **kwargs):
        real_replace(source, target, *args, **kwargs)
        events.append(("replace", str(target)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    assert cli.main(["migrate", str(old), "--in-place"]) == 0
    assert ("fsync", str(tmp_path / "old.nks.bak")) in events, events
    backup_synced = events.index(("fsync", str(tmp_path / "old.nks.bak")))
    replaced = events.index(("replace", str(old)))
    assert backup_synced < replaced and ("fsync", str(tmp_path)) in events[backup_synced:replaced], events
