"""Fault injection: every write, fsync and rename of a save fails in turn
(ENOSPC, EIO, a short write); the previous file at the path still loads and
verifies, the error is an nkserde error naming the file, and no temporary
file outlives the next save. A read error while loading is an nkserde
error naming the file."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import nkserde
import nkserde.format.atomic as atomic
from nkserde.errors import FileReadError, FileWriteError, NkserdeError
from nkserde.format.atomic import TEMP_MARK


def _state(value):
    # a raw array of 2 MiB (several chunks), a zstd one, a scalar
    return {"big": np.full(1 << 18, value), "chains": np.zeros((64, 8), np.int8), "step": int(value)}


def _template():
    return _state(0.0)


def _temps(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(TEMP_MARK))


class FailingFile:
    """The temporary file of a save, failing at its ``fail_at``-th write:
    ENOSPC or EIO before writing anything, or ("short") half of the bytes
    reach the file, then ENOSPC, as on a disk that fills up."""

    def __init__(self, f, fail_at, how, calls):
        self._f, self._fail_at, self._how, self._calls = f, fail_at, how, calls

    def write(self, data):
        self._calls.append("write")
        if len(self._calls) == self._fail_at:
            if self._how == "short":
                self._f.write(memoryview(data)[: len(memoryview(data)) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            code = errno.ENOSPC if self._how == "ENOSPC" else errno.EIO
            raise OSError(code, os.strerror(code))
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


def _count_writes(tmp_path):
    calls = []
    real_open = open
    atomic.open = lambda *a, **k: FailingFile(real_open(*a, **k), 0, None, calls)
    try:
        nkserde.save(_state(9.0), tmp_path / "count.nks")
    finally:
        del atomic.open
    return len(calls)


def _check_previous_stands(path, error):
    assert isinstance(error, NkserdeError) and isinstance(error, OSError)
    assert str(path) in str(error)
    out = nkserde.load(_template(), path)
    assert out["step"] == 1 and out["big"][-1] == 1.0
    assert nkserde.verify(path)["n_arrays"] == 2


@pytest.fixture
def previous(tmp_path):
    path = tmp_path / "run.nks"
    nkserde.save(_state(1.0), path)
    return path


@pytest.mark.parametrize("how", ["ENOSPC", "EIO", "short"])
def test_each_write_fails_in_turn(tmp_path, previous, how, monkeypatch):
    n_writes = _count_writes(tmp_path)
    (tmp_path / "count.nks").unlink()
    assert n_writes >= 5  # preamble, padding, arrays in chunks, header, trailer
    real_open = open
    for k in range(1, n_writes + 1):
        calls = []
        monkeypatch.setattr(
            atomic, "open", lambda *a, **kw: FailingFile(real_open(*a, **kw), k, how, calls), raising=False
        )
        with pytest.raises(FileWriteError, match="save failed while writing") as raised:
            nkserde.save(_state(2.0), previous)
        monkeypatch.undo()
        assert raised.value.errno == (errno.EIO if how == "EIO" else errno.ENOSPC)
        _check_previous_stands(previous, raised.value)
        assert _temps(tmp_path) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("call, step, replaced", [(1, "syncing the file", False), (2, "syncing the directory", True)])
def test_each_fsync_fails(tmp_path, previous, monkeypatch, code, call, step, replaced):
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == call:
            raise OSError(code, os.strerror(code))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(FileWriteError, match=step) as raised:
        nkserde.save(_state(2.0), previous)
    monkeypatch.undo()
    assert raised.value.errno == code and str(previous) in str(raised.value)
    if replaced:  # renamed already: the new file is in place, complete
        assert "may not survive a crash" in str(raised.value)
        assert nkserde.load(_template(), previous)["step"] == 2
        nkserde.verify(previous)
    else:
        _check_previous_stands(previous, raised.value)
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EXDEV])
def test_rename_fails(tmp_path, previous, monkeypatch, code):
    def replace(src, dst):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(FileWriteError, match="renaming the temporary file") as raised:
        nkserde.save(_state(2.0), previous)
    monkeypatch.undo()
    _check_previous_stands(previous, raised.value)
    assert _temps(tmp_path) == []


def test_leftover_temp_is_removed_by_the_next_save(tmp_path, previous, monkeypatch):
    # the write fails and so does removing the temporary file
    real_open = open
    monkeypatch.setattr(atomic, "open", lambda *a, **kw: FailingFile(real_open(*a, **kw), 2, "EIO", []), raising=False)

    def unlink(path, *a, **kw):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(FileWriteError) as raised:
        nkserde.save(_state(2.0), previous)
    monkeypatch.undo()
    _check_previous_stands(previous, raised.value)
    assert len(_temps(tmp_path)) == 1  # our own process's: not in flight any more
    nkserde.save(_state(3.0), tmp_path / "next.nks")
    assert _temps(tmp_path) == []
    assert nkserde.load(_template(), previous)["step"] == 1


def test_directory_that_vanished(tmp_path):
    with pytest.raises(FileWriteError, match="creating its temporary file") as raised:
        nkserde.save(_state(1.0), tmp_path / "gone" / "run.nks")
    assert raised.value.errno == errno.ENOENT and "gone/run.nks" in str(raised.value)


# --------------------------------------------------------------------------- reads


class FailingRead:
    def __init__(self, f, fail_at):
        self._f, self._fail_at, self._n = f, fail_at, 0

    def _tick(self):
        self._n += 1
        if self._n == self._fail_at:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    def read(self, *a):
        self._tick()
        return self._f.read(*a)

    def readinto(self, *a):
        self._tick()
        return self._f.readinto(*a)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4, 5])
def test_read_error_while_loading_names_the_file(previous, monkeypatch, fail_at):
    import builtins

    import nkserde.format.reader as reader

    real_open = builtins.open
    for how in ("load", "load_state_dict", "verify"):
        monkeypatch.setattr(reader, "open", lambda *a, **kw: FailingRead(real_open(*a, **kw), fail_at), raising=False)
        with pytest.raises(FileReadError, match=f"{previous}: reading the file failed") as raised:
            if how == "load":
                nkserde.load(_template(), previous)
            else:
                getattr(nkserde, how)(previous)
        monkeypatch.undo()
        assert raised.value.errno == errno.EIO
    assert nkserde.load(_template(), previous)["step"] == 1  # the file itself is fine


def test_missing_file_stays_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        nkserde.load_state_dict(tmp_path / "nope.nks")


# --------------------------------------------------------------------------- several processes


@pytest.mark.parametrize("failing_rank, how", [(1, "ENOSPC"), (0, "EIO")])
def test_multiprocess_write_fails_on_one_process(tmp_path, failing_rank, how):
    """Two real JAX processes save together; one process's writes fail:
    every process gets an nkserde error naming the file, the previous file
    stands (same bytes, verifies), no temporary file is left."""
    from multiprocess import launch

    target = tmp_path / "ckpt" / "run.nks"
    target.parent.mkdir()
    launch(2, ["save-fail", tmp_path / "work", target, failing_rank, how])
    for r in range(2):
        got = np.load(tmp_path / "work" / f"rank-{r}.npz")
        error = str(got["error"])
        assert str(target) in error, error
        if r == failing_rank:
            assert error.startswith("FileWriteError") and os.strerror(getattr(errno, how)) in error, error
        else:
            assert error.startswith("DistributedSaveError"), error
            assert f"save failed on process {failing_rank}" in error, error
        assert bool(got["unchanged"])
        assert list(got["temps"]) == [""]


def test_read_error_in_index_and_array_reads(previous, monkeypatch):
    """What the command line and nkserde.open read through."""
    import builtins

    import nkserde.format.reader as reader

    real_open = builtins.open
    for read in (
        lambda p: reader.read_index(p),
        lambda p: list(reader.read_arrays(p)),
        lambda p: nkserde.open(p)["big"],
    ):
        monkeypatch.setattr(reader, "open", lambda *a, **kw: FailingRead(real_open(*a, **kw), 1), raising=False)
        with pytest.raises(FileReadError, match=f"^{previous}: reading the file failed: ") as raised:
            read(previous)
        monkeypatch.undo()
        assert raised.value.errno == errno.EIO
